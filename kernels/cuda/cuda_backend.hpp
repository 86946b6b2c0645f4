// cuda/cuda_backend.hpp — the CUDA backend: carto::Backend on one GPU (carto::cuda).
//
// Design note: one CudaBackend per rank and GPU, used from one host thread at a time. It owns a
// non-blocking stream (the backend's one queue: every call enqueues on it in order and returns;
// synchronize() waits for it), a CachingAllocator for that stream (the device allocator), and a
// cuBLASLt context with its per-shape plans. Each Backend method checks nothing itself: it makes
// the backend's device current and forwards to its kernel family's host function
//     M(const Launch& launch, <the parameters of Backend::M>)
// (launch.cuh: elementwise, gemm, layernorm, softmax, attention, embedding_loss, adamw), with
// launch.workspace the backend's current allocator, so the memory tracker sees workspace too; the
// Llama kernels' methods (RMSNorm, silu_mul, rotary) are defined with their kernels in llama.cu.
// copy_from_host and copy_to_host keep the host-copy semantics of Backend (the host memory may be
// reused, and the copied values read, as soon as they return): cudaMemcpyAsync on the stream, so
// the copy is ordered after every call enqueued before it, then a synchronize of the stream.
// Kernels match the CPU backend's results within the tolerances the kernel tests state, and
// bitwise where the arithmetic allows it (fill_normal's initial weights, dropout masks, AdamW).
#pragma once

#include <cuda_runtime_api.h>

#include <carto/runtime/backend.hpp>
#include <memory>
#include <string_view>

#include "cuda/caching_allocator.hpp"

namespace carto::cuda {

class GemmContext;  // gemm.cuh

// How many CUDA devices this process sees: 0 when there is no driver, no device, or the runtime
// reports any error. Never throws (tests call it to decide whether to skip).
int device_count() noexcept;

class CudaBackend final : public Backend {
 public:
  // Throws carto::Error when `device` is not one of device_count() devices.
  explicit CudaBackend(int device = 0);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  [[nodiscard]] std::string_view name() const override { return "cuda"; }
  [[nodiscard]] cudaStream_t stream() const { return stream_; }
  [[nodiscard]] int device() const { return device_; }
  CachingAllocator& caching_allocator() { return *allocator_; }

  Allocator& device_allocator() override { return *allocator_; }
  void synchronize() override;
  void copy_from_host(const void* host, TensorView dst) override;
  void copy_to_host(ConstTensorView src, void* host) override;

  void fill(TensorView x, float value) override;
  void fill_normal(TensorView x, float stddev, RngStream rng,
                   const ShardPlacement& placement) override;
  void copy_strided(ConstTensorView src, const StridedBox& from, TensorView dst,
                    const StridedBox& to, const Index& extents, CopyMode mode) override;

  void gemm(ConstTensorView a, ConstTensorView b, TensorView c, const GemmArgs& args) override;

  void layernorm_forward(ConstTensorView x, ConstTensorView gamma, ConstTensorView beta,
                         TensorView y, TensorView mean, TensorView rstd,
                         const LayerNormArgs& args) override;
  void layernorm_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                          ConstTensorView mean, ConstTensorView rstd, TensorView dx,
                          TensorView dgamma, TensorView dbeta, const NormGradModes& modes) override;
  void layernorm_partial_sums(ConstTensorView x, TensorView sums) override;
  void layernorm_apply(ConstTensorView x, ConstTensorView sums, std::int64_t global_columns,
                       ConstTensorView gamma, ConstTensorView beta, TensorView y, TensorView mean,
                       TensorView rstd, const LayerNormArgs& args) override;
  void layernorm_backward_partial_sums(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                       ConstTensorView mean, ConstTensorView rstd,
                                       TensorView sums) override;
  void layernorm_backward_apply(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                ConstTensorView mean, ConstTensorView rstd, ConstTensorView sums,
                                std::int64_t global_columns, TensorView dx, TensorView dgamma,
                                TensorView dbeta, const NormGradModes& modes) override;

  // Llama kernels (llama.cu): RMSNorm and its split form, silu(gate)·up, rotary embeddings.
  void rmsnorm_forward(ConstTensorView x, ConstTensorView gamma, TensorView y, TensorView rstd,
                       const RmsNormArgs& args) override;
  void rmsnorm_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                        ConstTensorView rstd, TensorView dx, TensorView dgamma,
                        const NormGradModes& modes) override;
  void rmsnorm_partial_sums(ConstTensorView x, TensorView sums) override;
  void rmsnorm_apply(ConstTensorView x, ConstTensorView sums, std::int64_t global_columns,
                     ConstTensorView gamma, TensorView y, TensorView rstd,
                     const RmsNormArgs& args) override;
  void rmsnorm_backward_partial_sums(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                     ConstTensorView rstd, TensorView sums) override;
  void rmsnorm_backward_apply(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                              ConstTensorView rstd, ConstTensorView sums,
                              std::int64_t global_columns, TensorView dx, TensorView dgamma,
                              const NormGradModes& modes) override;
  void silu_mul_forward(ConstTensorView gate, ConstTensorView up, TensorView y) override;
  void silu_mul_backward(ConstTensorView gate, ConstTensorView up, ConstTensorView dy,
                         TensorView dgate, TensorView dup, CopyMode mode) override;
  void rotary_forward(ConstTensorView x, TensorView y, const RotaryArgs& args) override;
  void rotary_backward(ConstTensorView dy, TensorView dx, const RotaryArgs& args,
                       CopyMode mode) override;

  void softmax_forward(ConstTensorView x, TensorView y, const SoftmaxArgs& args) override;
  void softmax_backward(ConstTensorView y, ConstTensorView dy, TensorView dx,
                        const SoftmaxArgs& args, CopyMode mode) override;

  void attention_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v, TensorView out,
                         TensorView logsumexp, const AttentionArgs& args) override;
  void attention_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                          ConstTensorView out, ConstTensorView logsumexp, ConstTensorView dout,
                          TensorView dq, TensorView dk, TensorView dv, const AttentionArgs& args,
                          CopyMode mode) override;

  void gelu_forward(ConstTensorView x, TensorView y) override;
  void gelu_backward(ConstTensorView x, ConstTensorView dy, TensorView dx, CopyMode mode) override;
  void dropout_forward(ConstTensorView x, TensorView y, const DropoutArgs& args) override;
  void dropout_backward(ConstTensorView dy, TensorView dx, const DropoutArgs& args,
                        CopyMode mode) override;
  void add(ConstTensorView a, ConstTensorView b, TensorView y) override;
  void scale(ConstTensorView x, float factor, TensorView y) override;
  void add_scaled(ConstTensorView x, float factor, TensorView y) override;
  void bias_forward(ConstTensorView x, ConstTensorView b, TensorView y) override;
  void bias_backward(ConstTensorView dy, TensorView db, CopyMode mode) override;

  void embedding_forward(ConstTensorView table, IndexView ids, TensorView out,
                         const EmbeddingShard& shard) override;
  void embedding_backward(ConstTensorView dout, IndexView ids, TensorView dtable,
                          const EmbeddingShard& shard, CopyMode mode) override;

  void cross_entropy_forward(ConstTensorView logits, IndexView targets, TensorView loss,
                             TensorView logsumexp, const CrossEntropyArgs& args) override;
  void cross_entropy_row_max(ConstTensorView logits, TensorView row_max) override;
  void cross_entropy_sum_exp(ConstTensorView logits, ConstTensorView row_max,
                             TensorView sum_exp) override;
  void cross_entropy_target_logit(ConstTensorView logits, IndexView targets,
                                  TensorView target_logit, const CrossEntropyArgs& args) override;
  void cross_entropy_loss(ConstTensorView row_max, ConstTensorView sum_exp,
                          ConstTensorView target_logit, TensorView loss, TensorView logsumexp,
                          const CrossEntropyArgs& args) override;
  void cross_entropy_backward(ConstTensorView logits, IndexView targets, ConstTensorView logsumexp,
                              ConstTensorView dloss, TensorView dlogits,
                              const CrossEntropyArgs& args, CopyMode mode) override;

  void adamw_update(TensorView param, ConstTensorView grad, TensorView m, TensorView v,
                    const AdamWArgs& args) override;

 private:
  void zero_if_assigned(TensorView x, CopyMode mode);

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<GemmContext> gemm_;
};

}  // namespace carto::cuda
