// cuda/cuda_backend.cu — CudaBackend: the stream, the allocator and the forwarding to the kernel
// families (cuda_backend.hpp).
#include <cuda_runtime_api.h>

#include <cstddef>

#include "cuda/adamw.cuh"
#include "cuda/attention.cuh"
#include "cuda/cuda_backend.hpp"
#include "cuda/elementwise.cuh"
#include "cuda/embedding_loss.cuh"
#include "cuda/gemm.cuh"
#include "cuda/launch.cuh"
#include "cuda/layernorm.cuh"
#include "cuda/softmax.cuh"

namespace carto::cuda {

int device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // leave no error behind for the next runtime call
    return 0;
  }
  return count;
}

namespace {

// Makes the backend's device current (cheap when it already is: a thread-local read) and gives
// the launch context of one call.
Launch launch_of(CudaBackend& backend) {
  int current = -1;
  CARTO_CUDA_CHECK(cudaGetDevice(&current));
  if (current != backend.device()) CARTO_CUDA_CHECK(cudaSetDevice(backend.device()));
  return Launch{.stream = backend.stream(), .workspace = &backend.allocator()};
}

}  // namespace

CudaBackend::CudaBackend(int device) : device_(device) {
  const int count = device_count();
  CARTO_CHECK(count > 0,
              "CudaBackend: no CUDA device is visible to this process (no driver, no "
              "GPU, or CUDA_VISIBLE_DEVICES hides them); use the CPU backend instead");
  CARTO_CHECK(device >= 0 && device < count, "CudaBackend: device ", device,
              " does not exist; this process sees devices 0 to ", count - 1);
  CARTO_CUDA_CHECK(cudaSetDevice(device));
  CARTO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  try {
    allocator_ = std::make_unique<CachingAllocator>(device, stream_);
    gemm_ = std::make_unique<GemmContext>();
  } catch (...) {
    allocator_.reset();
    (void)cudaStreamDestroy(stream_);
    throw;
  }
}

CudaBackend::~CudaBackend() {
  // Work still enqueued may read buffers the allocator is about to free: wait for it first. A
  // failure (a device already in error) cannot be reported from here; the teardown goes on.
  (void)cudaSetDevice(device_);
  (void)cudaStreamSynchronize(stream_);
  gemm_.reset();
  allocator_.reset();
  (void)cudaStreamDestroy(stream_);
}

void CudaBackend::synchronize() {
  (void)launch_of(*this);
  CARTO_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy_from_host(const void* host, TensorView dst) {
  const Launch launch = launch_of(*this);
  if (dst.bytes() == 0) return;
  CARTO_CUDA_CHECK(cudaMemcpyAsync(dst.data, host, static_cast<std::size_t>(dst.bytes()),
                                   cudaMemcpyHostToDevice, launch.stream));
  CARTO_CUDA_CHECK(cudaStreamSynchronize(launch.stream));
}

void CudaBackend::copy_to_host(ConstTensorView src, void* host) {
  const Launch launch = launch_of(*this);
  if (src.bytes() == 0) return;
  CARTO_CUDA_CHECK(cudaMemcpyAsync(host, src.data(), static_cast<std::size_t>(src.bytes()),
                                   cudaMemcpyDeviceToHost, launch.stream));
  CARTO_CUDA_CHECK(cudaStreamSynchronize(launch.stream));
}

// ---- forwarding: each method to its family's function of the same name -----------------------

void CudaBackend::fill(TensorView x, float value) { cuda::fill(launch_of(*this), x, value); }

void CudaBackend::fill_normal(TensorView x, float stddev, RngStream rng,
                              const ShardPlacement& placement) {
  cuda::fill_normal(launch_of(*this), x, stddev, rng, placement);
}

void CudaBackend::copy_strided(ConstTensorView src, const StridedBox& from, TensorView dst,
                               const StridedBox& to, const Index& extents, CopyMode mode) {
  cuda::copy_strided(launch_of(*this), src, from, dst, to, extents, mode);
}

void CudaBackend::gemm(ConstTensorView a, ConstTensorView b, TensorView c, const GemmArgs& args) {
  cuda::gemm(launch_of(*this), *gemm_, a, b, c, args);
}

void CudaBackend::layernorm_forward(ConstTensorView x, ConstTensorView gamma, ConstTensorView beta,
                                    TensorView y, TensorView mean, TensorView rstd,
                                    const LayerNormArgs& args) {
  cuda::layernorm_forward(launch_of(*this), x, gamma, beta, y, mean, rstd, args);
}

// The CopyMode contract (backend.hpp) on the accumulating kernels: an assigned output is zeroed
// on the stream first (a memset-speed fill), then the kernel adds into it.
void CudaBackend::zero_if_assigned(TensorView x, CopyMode mode) {
  if (mode == CopyMode::assign) fill(x, 0.0f);
}

void CudaBackend::layernorm_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                     ConstTensorView mean, ConstTensorView rstd, TensorView dx,
                                     TensorView dgamma, TensorView dbeta,
                                     const NormGradModes& modes) {
  zero_if_assigned(dx, modes.dx);
  zero_if_assigned(dgamma, modes.dgamma);
  zero_if_assigned(dbeta, modes.dbeta);
  cuda::layernorm_backward(launch_of(*this), dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
}

void CudaBackend::layernorm_partial_sums(ConstTensorView x, TensorView sums) {
  cuda::layernorm_partial_sums(launch_of(*this), x, sums);
}

void CudaBackend::layernorm_apply(ConstTensorView x, ConstTensorView sums,
                                  std::int64_t global_columns, ConstTensorView gamma,
                                  ConstTensorView beta, TensorView y, TensorView mean,
                                  TensorView rstd, const LayerNormArgs& args) {
  cuda::layernorm_apply(launch_of(*this), x, sums, global_columns, gamma, beta, y, mean, rstd,
                        args);
}

void CudaBackend::layernorm_backward_partial_sums(ConstTensorView dy, ConstTensorView x,
                                                  ConstTensorView gamma, ConstTensorView mean,
                                                  ConstTensorView rstd, TensorView sums) {
  cuda::layernorm_backward_partial_sums(launch_of(*this), dy, x, gamma, mean, rstd, sums);
}

void CudaBackend::layernorm_backward_apply(ConstTensorView dy, ConstTensorView x,
                                           ConstTensorView gamma, ConstTensorView mean,
                                           ConstTensorView rstd, ConstTensorView sums,
                                           std::int64_t global_columns, TensorView dx,
                                           TensorView dgamma, TensorView dbeta,
                                           const NormGradModes& modes) {
  zero_if_assigned(dx, modes.dx);
  zero_if_assigned(dgamma, modes.dgamma);
  zero_if_assigned(dbeta, modes.dbeta);
  cuda::layernorm_backward_apply(launch_of(*this), dy, x, gamma, mean, rstd, sums, global_columns,
                                 dx, dgamma, dbeta);
}

void CudaBackend::softmax_forward(ConstTensorView x, TensorView y, const SoftmaxArgs& args) {
  cuda::softmax_forward(launch_of(*this), x, y, args);
}

void CudaBackend::softmax_backward(ConstTensorView y, ConstTensorView dy, TensorView dx,
                                   const SoftmaxArgs& args, CopyMode mode) {
  zero_if_assigned(dx, mode);
  cuda::softmax_backward(launch_of(*this), y, dy, dx, args);
}

void CudaBackend::attention_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                    TensorView out, TensorView logsumexp,
                                    const AttentionArgs& args) {
  cuda::attention_forward(launch_of(*this), q, k, v, out, logsumexp, args);
}

void CudaBackend::attention_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                     ConstTensorView out, ConstTensorView logsumexp,
                                     ConstTensorView dout, TensorView dq, TensorView dk,
                                     TensorView dv, const AttentionArgs& args, CopyMode mode) {
  zero_if_assigned(dq, mode);
  zero_if_assigned(dk, mode);
  zero_if_assigned(dv, mode);
  cuda::attention_backward(launch_of(*this), q, k, v, out, logsumexp, dout, dq, dk, dv, args);
}

void CudaBackend::gelu_forward(ConstTensorView x, TensorView y) {
  cuda::gelu_forward(launch_of(*this), x, y);
}

void CudaBackend::gelu_backward(ConstTensorView x, ConstTensorView dy, TensorView dx,
                                CopyMode mode) {
  zero_if_assigned(dx, mode);
  cuda::gelu_backward(launch_of(*this), x, dy, dx);
}

void CudaBackend::dropout_forward(ConstTensorView x, TensorView y, const DropoutArgs& args) {
  cuda::dropout_forward(launch_of(*this), x, y, args);
}

void CudaBackend::dropout_backward(ConstTensorView dy, TensorView dx, const DropoutArgs& args,
                                   CopyMode mode) {
  zero_if_assigned(dx, mode);
  cuda::dropout_backward(launch_of(*this), dy, dx, args);
}

void CudaBackend::add(ConstTensorView a, ConstTensorView b, TensorView y) {
  cuda::add(launch_of(*this), a, b, y);
}

void CudaBackend::scale(ConstTensorView x, float factor, TensorView y) {
  cuda::scale(launch_of(*this), x, factor, y);
}

void CudaBackend::add_scaled(ConstTensorView x, float factor, TensorView y) {
  cuda::add_scaled(launch_of(*this), x, factor, y);
}

void CudaBackend::bias_forward(ConstTensorView x, ConstTensorView b, TensorView y) {
  cuda::bias_forward(launch_of(*this), x, b, y);
}

void CudaBackend::bias_backward(ConstTensorView dy, TensorView db, CopyMode mode) {
  zero_if_assigned(db, mode);
  cuda::bias_backward(launch_of(*this), dy, db);
}

void CudaBackend::embedding_forward(ConstTensorView table, IndexView ids, TensorView out,
                                    const EmbeddingShard& shard) {
  cuda::embedding_forward(launch_of(*this), table, ids, out, shard);
}

void CudaBackend::embedding_backward(ConstTensorView dout, IndexView ids, TensorView dtable,
                                     const EmbeddingShard& shard, CopyMode mode) {
  zero_if_assigned(dtable, mode);
  cuda::embedding_backward(launch_of(*this), dout, ids, dtable, shard);
}

void CudaBackend::cross_entropy_forward(ConstTensorView logits, IndexView targets, TensorView loss,
                                        TensorView logsumexp, const CrossEntropyArgs& args) {
  cuda::cross_entropy_forward(launch_of(*this), logits, targets, loss, logsumexp, args);
}

void CudaBackend::cross_entropy_row_max(ConstTensorView logits, TensorView row_max) {
  cuda::cross_entropy_row_max(launch_of(*this), logits, row_max);
}

void CudaBackend::cross_entropy_sum_exp(ConstTensorView logits, ConstTensorView row_max,
                                        TensorView sum_exp) {
  cuda::cross_entropy_sum_exp(launch_of(*this), logits, row_max, sum_exp);
}

void CudaBackend::cross_entropy_target_logit(ConstTensorView logits, IndexView targets,
                                             TensorView target_logit,
                                             const CrossEntropyArgs& args) {
  cuda::cross_entropy_target_logit(launch_of(*this), logits, targets, target_logit, args);
}

void CudaBackend::cross_entropy_loss(ConstTensorView row_max, ConstTensorView sum_exp,
                                     ConstTensorView target_logit, TensorView loss,
                                     TensorView logsumexp, const CrossEntropyArgs& args) {
  cuda::cross_entropy_loss(launch_of(*this), row_max, sum_exp, target_logit, loss, logsumexp, args);
}

void CudaBackend::cross_entropy_backward(ConstTensorView logits, IndexView targets,
                                         ConstTensorView logsumexp, ConstTensorView dloss,
                                         TensorView dlogits, const CrossEntropyArgs& args,
                                         CopyMode mode) {
  zero_if_assigned(dlogits, mode);
  cuda::cross_entropy_backward(launch_of(*this), logits, targets, logsumexp, dloss, dlogits, args);
}

void CudaBackend::adamw_update(TensorView param, ConstTensorView grad, TensorView m, TensorView v,
                               const AdamWArgs& args) {
  cuda::adamw_update(launch_of(*this), param, grad, m, v, args);
}

}  // namespace carto::cuda
