// The CUDA backend's Llama kernels (RMSNorm and its split form, silu(gate)·up, rotary embeddings):
// not implemented on CUDA yet. Each call throws a carto::Error naming itself and the CPU backend
// (carto::cpu), which runs Llama plans; grouped-query attention is likewise refused by
// attention.cu's shape check (q of rank 5).
#include <string_view>

#include "carto/error.hpp"
#include "cuda/cuda_backend.hpp"

namespace carto::cuda {

namespace {

[[noreturn]] void not_on_cuda(std::string_view call) {
  detail::fail("carto: ", call,
               " is not implemented on CUDA yet; Llama plans (RMSNorm, SwiGLU, rotary) run on the "
               "CPU backend (carto::cpu)");
}

}  // namespace

void CudaBackend::rmsnorm_forward(ConstTensorView, ConstTensorView, TensorView, TensorView,
                                  const RmsNormArgs&) {
  not_on_cuda("rmsnorm_forward");
}
void CudaBackend::rmsnorm_backward(ConstTensorView, ConstTensorView, ConstTensorView,
                                   ConstTensorView, TensorView, TensorView, const NormGradModes&) {
  not_on_cuda("rmsnorm_backward");
}
void CudaBackend::rmsnorm_partial_sums(ConstTensorView, TensorView) {
  not_on_cuda("rmsnorm_partial_sums");
}
void CudaBackend::rmsnorm_apply(ConstTensorView, ConstTensorView, std::int64_t, ConstTensorView,
                                TensorView, TensorView, const RmsNormArgs&) {
  not_on_cuda("rmsnorm_apply");
}
void CudaBackend::rmsnorm_backward_partial_sums(ConstTensorView, ConstTensorView, ConstTensorView,
                                                ConstTensorView, TensorView) {
  not_on_cuda("rmsnorm_backward_partial_sums");
}
void CudaBackend::rmsnorm_backward_apply(ConstTensorView, ConstTensorView, ConstTensorView,
                                         ConstTensorView, ConstTensorView, std::int64_t, TensorView,
                                         TensorView, const NormGradModes&) {
  not_on_cuda("rmsnorm_backward_apply");
}
void CudaBackend::silu_mul_forward(ConstTensorView, ConstTensorView, TensorView) {
  not_on_cuda("silu_mul_forward");
}
void CudaBackend::silu_mul_backward(ConstTensorView, ConstTensorView, ConstTensorView, TensorView,
                                    TensorView, CopyMode) {
  not_on_cuda("silu_mul_backward");
}
void CudaBackend::rotary_forward(ConstTensorView, TensorView, const RotaryArgs&) {
  not_on_cuda("rotary_forward");
}
void CudaBackend::rotary_backward(ConstTensorView, TensorView, const RotaryArgs&, CopyMode) {
  not_on_cuda("rotary_backward");
}

}  // namespace carto::cuda
