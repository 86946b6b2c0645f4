// carto/runtime/kernel_checks.hpp — the argument checks every backend's kernels share.
//
// Design note: a backend validates its views before it touches memory or launches anything and
// throws carto::Error naming the call, the view and what was expected (backend.hpp's contract).
// These helpers hold that wording once, so a misuse reads the same on the CPU and CUDA backends.
// Host-only; no device header.
#pragma once

#include <cstdint>
#include <string_view>

#include "carto/error.hpp"
#include "carto/spec/layout.hpp"
#include "carto/spec/shape.hpp"

namespace carto::kernel_checks {

// The extents of a shape, as an Index.
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

}  // namespace carto::kernel_checks
