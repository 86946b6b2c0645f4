// cuda/reduction_checks.hpp — the host-side argument checks of the CUDA reduction families
// (layernorm, softmax, attention, embedding and cross-entropy), internal.
//
// Design note: every host function validates its views before it launches anything and throws
// carto::Error naming the call, the view and what was expected, with the CPU backend's wording, so
// a misuse reads the same on both backends. Views the kernels read or write as activations take
// fp32 or bf16 (an Elements); statistics (mean, rstd, logsumexp, sums, losses) must be fp32. No
// CUDA header is needed here beyond launch.cuh's Elements.
#pragma once

#include <cstdint>
#include <string_view>

#include "cuda/launch.cuh"

namespace carto::cuda::checks {

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

// An activation-like view: fp32 or bf16.
inline Elements elements(std::string_view call, std::string_view what, const ConstTensorView& v) {
  CARTO_CHECK(v.dtype() == DType::fp32 || v.dtype() == DType::bf16, call, ": ", what,
              " must be fp32 or bf16; got ", to_string_view(v.dtype()));
  return elements_of(v);
}
inline Elements elements(std::string_view call, std::string_view what, const TensorView& v) {
  return elements(call, what, ConstTensorView(v));
}

// A statistic: fp32 only.
inline const float* stats(std::string_view call, std::string_view what, const ConstTensorView& v) {
  CARTO_CHECK(v.dtype() == DType::fp32, call, ": ", what, " is a statistic and must be fp32; got ",
              to_string_view(v.dtype()));
  return static_cast<const float*>(v.data());
}
inline float* stats(std::string_view call, std::string_view what, const TensorView& v) {
  CARTO_CHECK(v.dtype == DType::fp32, call, ": ", what, " is a statistic and must be fp32; got ",
              to_string_view(v.dtype));
  return static_cast<float*>(v.data);
}

}  // namespace carto::cuda::checks
