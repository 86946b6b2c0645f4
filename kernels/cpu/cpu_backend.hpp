// cpu/cpu_backend.hpp — the CPU backend: OpenBLAS sgemm and C++ kernels on fp32 and bf16
// storage (carto::cpu).
//
// Design note: one CpuBackend per rank, used from that rank's thread only. Every kernel has
// finished when its call returns (the queue is trivially in order; synchronize() does nothing).
//
// Threads. A rank's kernels use the cores given to it: threads() threads, which is
// CpuOptions::threads when set, else the environment variable CARTO_CPU_THREADS when set (a whole
// number from 1 to 1024; anything else is a carto::Error naming it), else the cores this process
// may run on (its CPU affinity mask) divided by the CpuBackends alive in the process (the ranks on
// threads), at least 1. The loop kernels split their elements or rows over a team of that
// many threads (parallel.hpp) when every view is fp32 and the call is large enough; bf16 calls
// stage through one scratch buffer and stay on the calling thread. GEMMs are OpenBLAS's
// cblas_sgemm. Debian's OpenBLAS 0.3.21 (libopenblas0-pthread) has one thread count for the whole
// process (openblas_set_num_threads; openblas_set_num_threads_local only exists from 0.3.27), so
// each CpuBackend constructed or destroyed sets it to the smallest threads() of the CpuBackends
// then alive, and blas_threads() reads it back: a lone rank gets every core, two thread ranks on
// two cores one each, and ranks with different counts never oversubscribe. That overrides
// OPENBLAS_NUM_THREADS, as the thread count of a rank is CARTO_CPU_THREADS's to say. After each
// GEMM, OpenBLAS's own idle threads call sched_yield in a loop for 2^28 TSC ticks (about 0.1 s)
// before they sleep, so during the loop kernels between two GEMMs they take turns on the cores
// with the team's threads (GPT-2 124M on one rank with 2 threads: about 2,400 involuntary context
// switches per step, about 2 % of the step). OpenBLAS reads OPENBLAS_THREAD_TIMEOUT (n: 2^n ticks)
// from the environment once, while the program loads, so no library call can change it: a
// process with a rank of several threads runs faster with OPENBLAS_THREAD_TIMEOUT=13 (about 3
// us) set before it starts; ranks of one thread each have no idle OpenBLAS threads. Fused
// attention runs its products as such GEMMs too, a block of query rows at a time (small GEMMs,
// which OpenBLAS runs on the calling thread). The other kernels are fp32 loops the compiler
// vectorizes at the baseline ISA, with no -march flag (vector_math.hpp): the reductions that decide
// accuracy (layernorm statistics, softmax and cross-entropy sums, attention's row sums) are
// accumulated in float in a fixed order of 16 lanes, as a GPU kernel would, and exp is a
// branch-free polynomial within 2 ulp; the tests bound their error. Dropout masks come from Philox
// blocks computed 16 at a time (dropout_mask.hpp), bit for bit rng::keep's. Device memory is host
// memory aligned to 64 bytes; workspace (attention's score blocks, bf16 staging) is allocated
// through the backend's current allocator, category temporaries.
//
// Mixed precision (backend.hpp's contract): every call takes fp32 and bf16 data views, mixed as
// the caller likes; fp16 and fp8 throw a carto::Error naming the call, the view and its dtype.
// The kernels compute in fp32 only: a bf16 view is widened (exactly) into a small fp32 scratch
// slot a block of elements, a block of rows or one attention head at a time, the fp32 loop runs on
// the slot, and an output is rounded back to nearest even once (elements.hpp). Accumulating
// outputs (backward gradients, beta = 1, CopyMode::accumulate) are widened before the loop, so the
// addition is fp32 and the rounding happens once per call. fp32 views skip the staging and run
// the same loops on their own memory as before, with no copy and no allocation. Statistics (mean,
// rstd, the partial sums, logsumexp, the cross-entropy pieces, the loss) and AdamW's param, m and
// v must be fp32; AdamW's grad may be bf16. GEMMs with bf16 operands: OpenBLAS has no bf16 GEMM
// that every build offers, so the CPU's "bf16 in, fp32 accumulate" widens the bf16 operands into
// fp32 workspace and calls sgemm; a bf16 c is computed in fp32 and rounded once. copy_strided
// converts between the dtypes (Backend::convert is built on it); a copy between equal dtypes
// moves the bits. fill rounds its value once; fill_normal rounds each fp32 draw once, so a bf16
// tensor holds round_to_bf16 of the fp32 initialisation.
#pragma once

#include <carto/runtime/backend.hpp>
#include <cstddef>
#include <map>
#include <mutex>
#include <string_view>

namespace carto::cpu {

// Host memory aligned to 64 bytes (a cache line; AVX-512 loads), caching freed blocks.
//
// A training step frees and allocates the same large temporaries every step. Blocks that large
// come from glibc's mmap and go back to the system when freed, so each step would fault in and
// zero every page of them again (GPT-2 124M, one rank: a third of the step in the kernel, most of
// it charged to the first kernel that touched the memory). So a freed block of kCachedFrom bytes
// or more is kept, by its size, and a later request of the same size gets it back. The cache
// never makes the process hold more than 1.25 times the most this allocator ever had live at once
// in blocks of that size class: live + cached <= 1.25 peak (a request that misses evicts cached
// blocks, largest first, to stay within it; the quarter is room for sizes a step frees in one
// phase and asks for in another: with no headroom GPT-2 124M's logits and embedding gradient
// missed every step). Blocks are returned to the system by release_cached() and when the allocator
// is destroyed. Thread-safe. What the memory tracker measures is unchanged: it counts what the
// executor asks for, not what is cached.
class HostAllocator final : public Allocator {
 public:
  static constexpr std::size_t kCachedFrom = std::size_t{1} << 16;  // 64 KiB

  HostAllocator() = default;
  HostAllocator(const HostAllocator&) = delete;
  HostAllocator& operator=(const HostAllocator&) = delete;
  ~HostAllocator() override;

  void* allocate(std::size_t bytes, MemoryCategory category) override;
  void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) noexcept override;

  [[nodiscard]] std::size_t cached_bytes() const;
  [[nodiscard]] std::size_t live_bytes() const;  // in blocks of kCachedFrom bytes or more
  // Gives every cached block back to the system.
  void release_cached() noexcept;

 private:
  void evict_to(std::size_t limit) noexcept;  // with mutex_ held

  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> cache_;  // bytes -> free blocks of that size
  std::size_t cached_ = 0, live_ = 0, peak_ = 0;
};

// How a CpuBackend runs.
struct CpuOptions {
  // The threads of this rank's kernels; 0: CARTO_CPU_THREADS, else cores / CpuBackends alive.
  int threads = 0;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuOptions options = {});
  ~CpuBackend() override;
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;

  // The threads this rank's kernels run on now (see the design note).
  [[nodiscard]] int threads() const;

  [[nodiscard]] std::string_view name() const override { return "cpu"; }
  Allocator& device_allocator() override { return host_; }
  void synchronize() override {}
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
  void silu_mul_forward(ConstTensorView gate, ConstTensorView up, TensorView y) override;
  void silu_mul_backward(ConstTensorView gate, ConstTensorView up, ConstTensorView dy,
                         TensorView dgate, TensorView dup, CopyMode mode) override;
  void rotary_forward(ConstTensorView x, TensorView y, const RotaryArgs& args) override;
  void rotary_backward(ConstTensorView dy, TensorView dx, const RotaryArgs& args,
                       CopyMode mode) override;
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
  void adamw_update_all(std::span<const AdamWShard> shards, const AdamWArgs& args) override;

 private:
  HostAllocator host_;
  int requested_ = 0;  // CpuOptions::threads or CARTO_CPU_THREADS; 0: cores / backends alive
};

// The number of threads OpenBLAS runs a GEMM on: the smallest threads() of the CpuBackends alive
// when one was last constructed or destroyed.
int blas_threads();
// The cores this process may run on (its affinity mask).
int available_cores();

}  // namespace carto::cpu
