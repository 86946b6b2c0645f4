// fuzz/fuzz_spec.cpp — parse_spec and parse_pin on any bytes; a spec that parses prints back to
// itself, and is checked against a fixed shape and mesh (check_spec, local_shape, device_slice).
#include <carto/search/space.hpp>
#include <carto/spec.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace carto;
  static const TensorShape shape = parse_shape("batch=8,seq=4,hidden=12");
  static const DeviceMesh mesh = parse_mesh("x=2,y=2");
  fuzz::round_trip_target(
      data, size, [](std::string_view t) { return parse_spec(t); }, "spec",
      [](const ShardingSpec& spec) {
        check_spec(shape, spec, mesh, "fuzzed");
        (void)local_shape(shape, spec, mesh);
        (void)device_slice(shape, spec, mesh, 3);
      });
  (void)fuzz::parsed([](std::string_view t) { return parse_pin(t); }, fuzz::as_text(data, size));
  return 0;
}
