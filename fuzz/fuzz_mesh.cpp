// fuzz/fuzz_mesh.cpp — parse_mesh on any bytes; a mesh that parses prints back to itself.
#include <carto/spec.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace carto;
  return fuzz::round_trip_target(
      data, size, [](std::string_view t) { return parse_mesh(t); }, "mesh",
      [](const DeviceMesh& mesh) { (void)mesh.num_devices(); });
}
