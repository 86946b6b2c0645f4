// cpu/kernel_checks.hpp — shape checks and index helpers shared by the CPU kernels (internal).
//
// Design note: every kernel validates its views before touching memory and throws carto::Error
// naming the call and the shapes; these helpers keep those messages uniform.
#pragma once

#include <carto/runtime/backend.hpp>
#include <cstdint>
#include <string_view>

namespace carto::cpu::detail {

inline Index extents_of(const TensorShape& shape) {
  Index out;
  for (const DimExtent& d : shape.dims()) out.push_back(d.extent);
  return out;
}

inline std::int64_t last_extent(std::string_view call, const TensorShape& shape) {
  CARTO_CHECK(shape.rank() >= 1, call, ": needs a tensor of rank >= 1, got ", shape);
  return shape.dims()[shape.rank() - 1].extent;
}

inline void require_numel(std::string_view call, std::string_view what, std::int64_t got,
                          std::int64_t want) {
  CARTO_CHECK(got == want, call, ": ", what, " has ", got, " elements; expected ", want);
}

inline void require_same_shape(std::string_view call, const TensorShape& a, const TensorShape& b) {
  CARTO_CHECK(extents_of(a) == extents_of(b), call, ": shapes ", a, " and ", b, " differ");
}

}  // namespace carto::cpu::detail
