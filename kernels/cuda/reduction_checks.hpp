// cuda/reduction_checks.hpp — the host-side argument checks of the CUDA reduction families
// (layernorm, softmax, attention, embedding and cross-entropy), internal.
//
// Design note: every host function validates its views before it launches anything and throws
// carto::Error naming the call, the view and what was expected, with the CPU backend's wording, so
// a misuse reads the same on both backends. Views the kernels read or write as activations take
// fp32 or bf16 (an Elements); statistics (mean, rstd, logsumexp, sums, losses) must be fp32. No
// CUDA header is needed here beyond launch.cuh's Elements.
#pragma once

#include <carto/runtime/kernel_checks.hpp>
#include <cstdint>
#include <string_view>

#include "cuda/launch.cuh"

namespace carto::cuda::checks {

// The shared checks (carto/runtime/kernel_checks.hpp).
using kernel_checks::extents_of;
using kernel_checks::last_extent;
using kernel_checks::require_numel;
using kernel_checks::require_same_shape;

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
