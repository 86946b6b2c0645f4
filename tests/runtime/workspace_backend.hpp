// A Backend for the memory tables of the executor tests: every call goes to a CpuBackend, and the
// memory the executor allocates is told apart from the workspace a kernel allocates while it runs.
//
// Design note: the schedule model (profile/schedule.hpp) prices the tensors the executor holds and
// no kernel workspace, as a GPU backend needs next to none. The CPU backend stages bf16 views
// through fp32 scratch inside a call (cpu/elements.hpp: 4 bytes per element of every bf16 GEMM
// operand, 16 KiB per staged view of an elementwise kernel), which a tracker counts with the rest.
// This backend keeps a second MemoryTracker of the executor's own allocations: those made outside
// a kernel call. Allocation chain: the executor allocates through the current allocator (the
// Trainer's TrackingAllocator around device_allocator() = ExecutorSide, which records the bytes
// when no kernel runs and forwards to the host allocator); the inner CpuBackend's kernels allocate
// through KernelSide, which forwards to this backend's current allocator, so the Trainer's tracker
// counts kernel workspace too, and ExecutorSide skips it because a kernel is running. Kernels
// never free an executor buffer, and free their own before they return.
#pragma once

#include <carto/runtime/backend.hpp>
#include <carto/runtime/memory.hpp>
#include <cpu/cpu_backend.hpp>
#include <cstddef>
#include <string_view>

namespace carto::testing {

class WorkspaceSplitBackend final : public Backend {
 public:
  WorkspaceSplitBackend() { inner_.use_allocator(&kernel_side_); }
  WorkspaceSplitBackend(const WorkspaceSplitBackend&) = delete;
  WorkspaceSplitBackend& operator=(const WorkspaceSplitBackend&) = delete;

  // The executor's own allocations (outside kernel calls).
  [[nodiscard]] MemoryTracker& executor_memory() { return executor_; }

  [[nodiscard]] std::string_view name() const override { return "cpu, workspace apart"; }
  Allocator& device_allocator() override { return executor_side_; }
  void synchronize() override { inner_.synchronize(); }
  void copy_from_host(const void* host, TensorView dst) override {
    call([&] { inner_.copy_from_host(host, dst); });
  }
  void copy_to_host(ConstTensorView src, void* host) override {
    call([&] { inner_.copy_to_host(src, host); });
  }
  void fill(TensorView x, float value) override {
    call([&] { inner_.fill(x, value); });
  }
  void fill_normal(TensorView x, float stddev, RngStream rng,
                   const ShardPlacement& placement) override {
    call([&] { inner_.fill_normal(x, stddev, rng, placement); });
  }
  void copy_strided(ConstTensorView src, const StridedBox& from, TensorView dst,
                    const StridedBox& to, const Index& extents, CopyMode mode) override {
    call([&] { inner_.copy_strided(src, from, dst, to, extents, mode); });
  }
  void gemm(ConstTensorView a, ConstTensorView b, TensorView c, const GemmArgs& args) override {
    call([&] { inner_.gemm(a, b, c, args); });
  }
  void layernorm_forward(ConstTensorView x, ConstTensorView gamma, ConstTensorView beta,
                         TensorView y, TensorView mean, TensorView rstd,
                         const LayerNormArgs& args) override {
    call([&] { inner_.layernorm_forward(x, gamma, beta, y, mean, rstd, args); });
  }
  void layernorm_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                          ConstTensorView mean, ConstTensorView rstd, TensorView dx,
                          TensorView dgamma, TensorView dbeta,
                          const NormGradModes& modes) override {
    call([&] { inner_.layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, modes); });
  }
  void layernorm_partial_sums(ConstTensorView x, TensorView sums) override {
    call([&] { inner_.layernorm_partial_sums(x, sums); });
  }
  void layernorm_apply(ConstTensorView x, ConstTensorView sums, std::int64_t global_columns,
                       ConstTensorView gamma, ConstTensorView beta, TensorView y, TensorView mean,
                       TensorView rstd, const LayerNormArgs& args) override {
    call(
        [&] { inner_.layernorm_apply(x, sums, global_columns, gamma, beta, y, mean, rstd, args); });
  }
  void layernorm_backward_partial_sums(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                       ConstTensorView mean, ConstTensorView rstd,
                                       TensorView sums) override {
    call([&] { inner_.layernorm_backward_partial_sums(dy, x, gamma, mean, rstd, sums); });
  }
  void layernorm_backward_apply(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                ConstTensorView mean, ConstTensorView rstd, ConstTensorView sums,
                                std::int64_t global_columns, TensorView dx, TensorView dgamma,
                                TensorView dbeta, const NormGradModes& modes) override {
    call([&] {
      inner_.layernorm_backward_apply(dy, x, gamma, mean, rstd, sums, global_columns, dx, dgamma,
                                      dbeta, modes);
    });
  }
  void rmsnorm_forward(ConstTensorView x, ConstTensorView gamma, TensorView y, TensorView rstd,
                       const RmsNormArgs& args) override {
    call([&] { inner_.rmsnorm_forward(x, gamma, y, rstd, args); });
  }
  void rmsnorm_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                        ConstTensorView rstd, TensorView dx, TensorView dgamma,
                        const NormGradModes& modes) override {
    call([&] { inner_.rmsnorm_backward(dy, x, gamma, rstd, dx, dgamma, modes); });
  }
  void rmsnorm_partial_sums(ConstTensorView x, TensorView sums) override {
    call([&] { inner_.rmsnorm_partial_sums(x, sums); });
  }
  void rmsnorm_apply(ConstTensorView x, ConstTensorView sums, std::int64_t global_columns,
                     ConstTensorView gamma, TensorView y, TensorView rstd,
                     const RmsNormArgs& args) override {
    call([&] { inner_.rmsnorm_apply(x, sums, global_columns, gamma, y, rstd, args); });
  }
  void rmsnorm_backward_partial_sums(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                     ConstTensorView rstd, TensorView sums) override {
    call([&] { inner_.rmsnorm_backward_partial_sums(dy, x, gamma, rstd, sums); });
  }
  void rmsnorm_backward_apply(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                              ConstTensorView rstd, ConstTensorView sums,
                              std::int64_t global_columns, TensorView dx, TensorView dgamma,
                              const NormGradModes& modes) override {
    call([&] {
      inner_.rmsnorm_backward_apply(dy, x, gamma, rstd, sums, global_columns, dx, dgamma, modes);
    });
  }
  void silu_mul_forward(ConstTensorView gate, ConstTensorView up, TensorView y) override {
    call([&] { inner_.silu_mul_forward(gate, up, y); });
  }
  void silu_mul_backward(ConstTensorView gate, ConstTensorView up, ConstTensorView dy,
                         TensorView dgate, TensorView dup, CopyMode mode) override {
    call([&] { inner_.silu_mul_backward(gate, up, dy, dgate, dup, mode); });
  }
  void rotary_forward(ConstTensorView x, TensorView y, const RotaryArgs& args) override {
    call([&] { inner_.rotary_forward(x, y, args); });
  }
  void rotary_backward(ConstTensorView dy, TensorView dx, const RotaryArgs& args,
                       CopyMode mode) override {
    call([&] { inner_.rotary_backward(dy, dx, args, mode); });
  }
  void softmax_forward(ConstTensorView x, TensorView y, const SoftmaxArgs& args) override {
    call([&] { inner_.softmax_forward(x, y, args); });
  }
  void softmax_backward(ConstTensorView y, ConstTensorView dy, TensorView dx,
                        const SoftmaxArgs& args, CopyMode mode) override {
    call([&] { inner_.softmax_backward(y, dy, dx, args, mode); });
  }
  void attention_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v, TensorView out,
                         TensorView logsumexp, const AttentionArgs& args) override {
    call([&] { inner_.attention_forward(q, k, v, out, logsumexp, args); });
  }
  void attention_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                          ConstTensorView out, ConstTensorView logsumexp, ConstTensorView dout,
                          TensorView dq, TensorView dk, TensorView dv, const AttentionArgs& args,
                          CopyMode mode) override {
    call([&] { inner_.attention_backward(q, k, v, out, logsumexp, dout, dq, dk, dv, args, mode); });
  }
  void gelu_forward(ConstTensorView x, TensorView y) override {
    call([&] { inner_.gelu_forward(x, y); });
  }
  void gelu_backward(ConstTensorView x, ConstTensorView dy, TensorView dx, CopyMode mode) override {
    call([&] { inner_.gelu_backward(x, dy, dx, mode); });
  }
  void dropout_forward(ConstTensorView x, TensorView y, const DropoutArgs& args) override {
    call([&] { inner_.dropout_forward(x, y, args); });
  }
  void dropout_backward(ConstTensorView dy, TensorView dx, const DropoutArgs& args,
                        CopyMode mode) override {
    call([&] { inner_.dropout_backward(dy, dx, args, mode); });
  }
  void add(ConstTensorView a, ConstTensorView b, TensorView y) override {
    call([&] { inner_.add(a, b, y); });
  }
  void scale(ConstTensorView x, float factor, TensorView y) override {
    call([&] { inner_.scale(x, factor, y); });
  }
  void add_scaled(ConstTensorView x, float factor, TensorView y) override {
    call([&] { inner_.add_scaled(x, factor, y); });
  }
  void bias_forward(ConstTensorView x, ConstTensorView b, TensorView y) override {
    call([&] { inner_.bias_forward(x, b, y); });
  }
  void bias_backward(ConstTensorView dy, TensorView db, CopyMode mode) override {
    call([&] { inner_.bias_backward(dy, db, mode); });
  }
  void embedding_forward(ConstTensorView table, IndexView ids, TensorView out,
                         const EmbeddingShard& shard) override {
    call([&] { inner_.embedding_forward(table, ids, out, shard); });
  }
  void embedding_backward(ConstTensorView dout, IndexView ids, TensorView dtable,
                          const EmbeddingShard& shard, CopyMode mode) override {
    call([&] { inner_.embedding_backward(dout, ids, dtable, shard, mode); });
  }
  void cross_entropy_forward(ConstTensorView logits, IndexView targets, TensorView loss,
                             TensorView logsumexp, const CrossEntropyArgs& args) override {
    call([&] { inner_.cross_entropy_forward(logits, targets, loss, logsumexp, args); });
  }
  void cross_entropy_row_max(ConstTensorView logits, TensorView row_max) override {
    call([&] { inner_.cross_entropy_row_max(logits, row_max); });
  }
  void cross_entropy_sum_exp(ConstTensorView logits, ConstTensorView row_max,
                             TensorView sum_exp) override {
    call([&] { inner_.cross_entropy_sum_exp(logits, row_max, sum_exp); });
  }
  void cross_entropy_target_logit(ConstTensorView logits, IndexView targets,
                                  TensorView target_logit, const CrossEntropyArgs& args) override {
    call([&] { inner_.cross_entropy_target_logit(logits, targets, target_logit, args); });
  }
  void cross_entropy_loss(ConstTensorView row_max, ConstTensorView sum_exp,
                          ConstTensorView target_logit, TensorView loss, TensorView logsumexp,
                          const CrossEntropyArgs& args) override {
    call([&] { inner_.cross_entropy_loss(row_max, sum_exp, target_logit, loss, logsumexp, args); });
  }
  void cross_entropy_backward(ConstTensorView logits, IndexView targets, ConstTensorView logsumexp,
                              ConstTensorView dloss, TensorView dlogits,
                              const CrossEntropyArgs& args, CopyMode mode) override {
    call([&] {
      inner_.cross_entropy_backward(logits, targets, logsumexp, dloss, dlogits, args, mode);
    });
  }
  void adamw_update(TensorView param, ConstTensorView grad, TensorView m, TensorView v,
                    const AdamWArgs& args) override {
    call([&] { inner_.adamw_update(param, grad, m, v, args); });
  }

 private:
  template <class F>
  void call(F&& f) {
    const bool outer = in_kernel_;
    in_kernel_ = true;
    try {
      f();
    } catch (...) {
      in_kernel_ = outer;
      throw;
    }
    in_kernel_ = outer;
  }

  // What the executor allocates: recorded when no kernel runs, then the host allocator.
  class ExecutorSide final : public Allocator {
   public:
    explicit ExecutorSide(WorkspaceSplitBackend& b) : b_(&b) {}
    void* allocate(std::size_t bytes, MemoryCategory category) override {
      void* p = b_->inner_.device_allocator().allocate(bytes, category);
      if (!b_->in_kernel_)
        b_->executor_.record_allocate(category, static_cast<std::int64_t>(bytes));
      return p;
    }
    void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) noexcept override {
      try {
        if (!b_->in_kernel_) b_->executor_.record_free(category, static_cast<std::int64_t>(bytes));
      } catch (...) {  // a tracker inconsistency must not leak the memory
      }
      b_->inner_.device_allocator().deallocate(pointer, bytes, category);
    }

   private:
    WorkspaceSplitBackend* b_;
  };
  // What a kernel allocates: through this backend's current allocator (the Trainer's tracker).
  class KernelSide final : public Allocator {
   public:
    explicit KernelSide(WorkspaceSplitBackend& b) : b_(&b) {}
    void* allocate(std::size_t bytes, MemoryCategory category) override {
      return b_->allocator().allocate(bytes, category);
    }
    void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) noexcept override {
      b_->allocator().deallocate(pointer, bytes, category);
    }

   private:
    WorkspaceSplitBackend* b_;
  };

  cpu::CpuBackend inner_;
  MemoryTracker executor_;
  bool in_kernel_ = false;
  ExecutorSide executor_side_{*this};
  KernelSide kernel_side_{*this};
};

}  // namespace carto::testing
