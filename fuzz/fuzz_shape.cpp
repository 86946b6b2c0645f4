// fuzz/fuzz_shape.cpp — parse_shape on any bytes; a shape that parses prints back to itself.
#include <carto/spec.hpp>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace carto;
  return fuzz::round_trip_target(
      data, size, [](std::string_view t) { return parse_shape(t); }, "shape",
      [](const TensorShape& shape) { (void)shape.numel(); });
}
