// cuda/launch.cuh — what every kernel family of the CUDA backend shares: the launch context, dtype
// loads and stores, and the grid arithmetic.
//
// Design note: CudaBackend (cuda_backend.hpp) owns the stream and the allocators; each kernel
// family (one .cu/.cuh per family: elementwise, layernorm, attention, embedding_loss, adamw, ...)
// exposes, for every Backend method M it implements, a host function
//     void M(const Launch& launch, <the parameters of Backend::M>);
// that checks shapes and dtypes (throwing carto::Error naming the call, as the CPU backend does),
// launches on launch.stream and checks the launch (CARTO_CUDA_CHECK_LAUNCH). Workspace comes from
// launch.workspace (the backend's current allocator, so the memory tracker sees it), category
// temporaries, and is given back after the kernel is enqueued: the caching allocator keeps it for
// the stream, so reuse by a later call on the same stream is ordered after this kernel.
// Element access goes through load/store below, which widen bf16 exactly and round fp32 to bf16
// to nearest even (__float2bfloat16_rn), bit for bit carto/runtime/bf16.hpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <carto/runtime/backend.hpp>
#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "cuda/geometry.hpp"  // ceil_div, grid_1d: host-only, so host tests check them

namespace carto::cuda {

struct Launch {
  cudaStream_t stream = nullptr;
  Allocator* workspace = nullptr;
};

// A pointer plus its dtype, for kernels that take fp32 or bf16 (one template instance each would
// double the binary for little; the branch is uniform across a warp).
struct Elements {
  void* data = nullptr;
  bool bf16 = false;
};
inline Elements elements_of(const TensorView& v) {
  CARTO_CHECK(v.dtype == DType::fp32 || v.dtype == DType::bf16,
              "the CUDA backend takes fp32 or bf16, not ", to_string_view(v.dtype));
  return {v.data, v.dtype == DType::bf16};
}
inline Elements elements_of(const ConstTensorView& v) {
  CARTO_CHECK(v.dtype() == DType::fp32 || v.dtype() == DType::bf16,
              "the CUDA backend takes fp32 or bf16, not ", to_string_view(v.dtype()));
  return {const_cast<void*>(v.data()), v.dtype() == DType::bf16};
}

#ifdef __CUDACC__
__device__ __forceinline__ float load(Elements e, std::int64_t i) {
  return e.bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(e.data)[i])
                : static_cast<const float*>(e.data)[i];
}
__device__ __forceinline__ void store(Elements e, std::int64_t i, float value) {
  if (e.bf16) {
    static_cast<__nv_bfloat16*>(e.data)[i] = __float2bfloat16_rn(value);
  } else {
    static_cast<float*>(e.data)[i] = value;
  }
}
#endif

}  // namespace carto::cuda
