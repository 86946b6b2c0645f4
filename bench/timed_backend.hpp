// bench/timed_backend.hpp — a Backend that times the CPU backend's kernels, and OpenBLAS's own rate
// on the GEMM calls it recorded (bench_train's GEMM share and "OpenBLAS alone" columns; its header
// comment describes the timing design).
#pragma once

#include <benchmark/benchmark.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <carto/runtime/backend.hpp>
#include <carto/runtime/rng.hpp>
#include <chrono>
#include <cpu/cpu_backend.hpp>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace carto::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// One distinct GEMM call of a step and how often the step makes it.
struct GemmCall {
  TensorShape a, b, c;
  GemmArgs args{};
  std::int64_t count = 0;
  double flops = 0;         // per call
  double step_wall_s = 0;   // wall seconds of all its calls in the recorded step
  double alone_wall_s = 0;  // per call, OpenBLAS alone (replay_gemm_rate with `wall`)
  double cold_wall_s = 0;   // per call, OpenBLAS alone on operands out of the caches
};

// What one rank's TimedBackend measured over the timed steps.
struct RankTimes {
  double gemm_s = 0;      // wall
  double gemm_cpu_s = 0;  // this thread's CPU time
  double gemm_flops = 0;
  double other_kernel_s = 0;                        // wall
  double other_kernel_cpu_s = 0;                    // this thread's CPU time
  double wall_s = 0;                                // the timed loop
  double cpu_s = 0;                                 // this rank's thread CPU time in the timed loop
  std::map<std::string_view, double> kernel_cpu_s;  // CPU seconds by kernel
  std::map<std::string, GemmCall> calls;            // recorded during one warm-up step
};

// 2·m·n·k per entry of c's batch: c (batch..., m, n), k from a (..., m, k) or (..., k, m).
inline double gemm_flops(const TensorShape& a, const TensorShape& c, const GemmArgs& args) {
  const std::size_t ra = a.rank(), rc = c.rank();
  const double m = static_cast<double>(c.dims()[rc - 2].extent);
  const double n = static_cast<double>(c.dims()[rc - 1].extent);
  const double k = static_cast<double>(a.dims()[args.a == Transpose::no ? ra - 1 : ra - 2].extent);
  return 2.0 * static_cast<double>(c.numel()) / (m * n) * m * n * k;
}

class TimedBackend final : public Backend {
 public:
  TimedBackend(Backend& inner, RankTimes& times) : inner_(inner), times_(times) {}

  void record_calls(bool on) { record_ = on; }
  void reset_times() {
    times_.gemm_s = 0;
    times_.gemm_cpu_s = 0;
    times_.gemm_flops = 0;
    times_.other_kernel_s = 0;
    times_.other_kernel_cpu_s = 0;
    times_.kernel_cpu_s.clear();
  }

  [[nodiscard]] std::string_view name() const override { return inner_.name(); }
  Allocator& device_allocator() override { return inner_.device_allocator(); }
  void synchronize() override { inner_.synchronize(); }
  void copy_from_host(const void* host, TensorView dst) override {
    timed("copy_from_host", [&](Backend& b) { b.copy_from_host(host, dst); });
  }
  void copy_to_host(ConstTensorView src, void* host) override {
    timed("copy_to_host", [&](Backend& b) { b.copy_to_host(src, host); });
  }
  void fill(TensorView x, float value) override {
    timed("fill", [&](Backend& b) { b.fill(x, value); });
  }
  void fill_normal(TensorView x, float stddev, RngStream rng,
                   const ShardPlacement& placement) override {
    timed("fill_normal", [&](Backend& b) { b.fill_normal(x, stddev, rng, placement); });
  }
  void copy_strided(ConstTensorView src, const StridedBox& from, TensorView dst,
                    const StridedBox& to, const Index& extents, CopyMode mode) override {
    timed("copy_strided", [&](Backend& b) { b.copy_strided(src, from, dst, to, extents, mode); });
  }

  void gemm(ConstTensorView a, ConstTensorView b, TensorView c, const GemmArgs& args) override {
    Backend& in = inner();
    const double flops = gemm_flops(a.shape(), c.shape, args);
    const double cpu_start = thread_cpu_seconds();
    const auto start = Clock::now();
    in.gemm(a, b, c, args);
    const double wall = seconds_since(start);
    times_.gemm_s += wall;
    const double cpu = thread_cpu_seconds() - cpu_start;
    times_.gemm_cpu_s += cpu;
    times_.kernel_cpu_s["gemm"] += cpu;
    times_.gemm_flops += flops;
    if (record_) {
      std::ostringstream key;
      key << a.shape() << (args.a == Transpose::yes ? "T" : "") << " x " << b.shape()
          << (args.b == Transpose::yes ? "T" : "") << " -> " << c.shape << " a" << args.alpha
          << " b" << args.beta;
      GemmCall& call = times_.calls[key.str()];
      if (call.count == 0) call = {.a = a.shape(), .b = b.shape(), .c = c.shape, .args = args};
      call.flops = flops;
      call.step_wall_s += wall;
      ++call.count;
    }
  }

  void layernorm_forward(ConstTensorView x, ConstTensorView gamma, ConstTensorView beta,
                         TensorView y, TensorView mean, TensorView rstd,
                         const LayerNormArgs& args) override {
    timed("layernorm_forward",
          [&](Backend& b) { b.layernorm_forward(x, gamma, beta, y, mean, rstd, args); });
  }
  void layernorm_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                          ConstTensorView mean, ConstTensorView rstd, TensorView dx,
                          TensorView dgamma, TensorView dbeta,
                          const NormGradModes& modes) override {
    timed("layernorm_backward", [&](Backend& b) {
      b.layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, modes);
    });
  }
  void layernorm_partial_sums(ConstTensorView x, TensorView sums) override {
    timed("layernorm_partial_sums", [&](Backend& b) { b.layernorm_partial_sums(x, sums); });
  }
  void layernorm_apply(ConstTensorView x, ConstTensorView sums, std::int64_t global_columns,
                       ConstTensorView gamma, ConstTensorView beta, TensorView y, TensorView mean,
                       TensorView rstd, const LayerNormArgs& args) override {
    timed("layernorm_apply", [&](Backend& b) {
      b.layernorm_apply(x, sums, global_columns, gamma, beta, y, mean, rstd, args);
    });
  }
  void layernorm_backward_partial_sums(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                       ConstTensorView mean, ConstTensorView rstd,
                                       TensorView sums) override {
    timed("layernorm_backward_partial_sums",
          [&](Backend& b) { b.layernorm_backward_partial_sums(dy, x, gamma, mean, rstd, sums); });
  }
  void layernorm_backward_apply(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                ConstTensorView mean, ConstTensorView rstd, ConstTensorView sums,
                                std::int64_t global_columns, TensorView dx, TensorView dgamma,
                                TensorView dbeta, const NormGradModes& modes) override {
    timed("layernorm_backward_apply", [&](Backend& b) {
      b.layernorm_backward_apply(dy, x, gamma, mean, rstd, sums, global_columns, dx, dgamma, dbeta,
                                 modes);
    });
  }

  void rmsnorm_forward(ConstTensorView x, ConstTensorView gamma, TensorView y, TensorView rstd,
                       const RmsNormArgs& args) override {
    timed("rmsnorm_forward", [&](Backend& b) { b.rmsnorm_forward(x, gamma, y, rstd, args); });
  }
  void rmsnorm_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                        ConstTensorView rstd, TensorView dx, TensorView dgamma,
                        const NormGradModes& modes) override {
    timed("rmsnorm_backward",
          [&](Backend& b) { b.rmsnorm_backward(dy, x, gamma, rstd, dx, dgamma, modes); });
  }
  void rmsnorm_partial_sums(ConstTensorView x, TensorView sums) override {
    timed("rmsnorm_partial_sums", [&](Backend& b) { b.rmsnorm_partial_sums(x, sums); });
  }
  void rmsnorm_apply(ConstTensorView x, ConstTensorView sums, std::int64_t global_columns,
                     ConstTensorView gamma, TensorView y, TensorView rstd,
                     const RmsNormArgs& args) override {
    timed("rmsnorm_apply",
          [&](Backend& b) { b.rmsnorm_apply(x, sums, global_columns, gamma, y, rstd, args); });
  }
  void rmsnorm_backward_partial_sums(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                     ConstTensorView rstd, TensorView sums) override {
    timed("rmsnorm_backward_partial_sums",
          [&](Backend& b) { b.rmsnorm_backward_partial_sums(dy, x, gamma, rstd, sums); });
  }
  void rmsnorm_backward_apply(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                              ConstTensorView rstd, ConstTensorView sums,
                              std::int64_t global_columns, TensorView dx, TensorView dgamma,
                              const NormGradModes& modes) override {
    timed("rmsnorm_backward_apply", [&](Backend& b) {
      b.rmsnorm_backward_apply(dy, x, gamma, rstd, sums, global_columns, dx, dgamma, modes);
    });
  }
  void silu_mul_forward(ConstTensorView gate, ConstTensorView up, TensorView y) override {
    timed("silu_mul_forward", [&](Backend& b) { b.silu_mul_forward(gate, up, y); });
  }
  void silu_mul_backward(ConstTensorView gate, ConstTensorView up, ConstTensorView dy,
                         TensorView dgate, TensorView dup, CopyMode mode) override {
    timed("silu_mul_backward",
          [&](Backend& b) { b.silu_mul_backward(gate, up, dy, dgate, dup, mode); });
  }
  void rotary_forward(ConstTensorView x, TensorView y, const RotaryArgs& args) override {
    timed("rotary_forward", [&](Backend& b) { b.rotary_forward(x, y, args); });
  }
  void rotary_backward(ConstTensorView dy, TensorView dx, const RotaryArgs& args,
                       CopyMode mode) override {
    timed("rotary_backward", [&](Backend& b) { b.rotary_backward(dy, dx, args, mode); });
  }
  void softmax_forward(ConstTensorView x, TensorView y, const SoftmaxArgs& args) override {
    timed("softmax_forward", [&](Backend& b) { b.softmax_forward(x, y, args); });
  }
  void softmax_backward(ConstTensorView y, ConstTensorView dy, TensorView dx,
                        const SoftmaxArgs& args, CopyMode mode) override {
    timed("softmax_backward", [&](Backend& b) { b.softmax_backward(y, dy, dx, args, mode); });
  }
  void attention_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v, TensorView out,
                         TensorView logsumexp, const AttentionArgs& args) override {
    timed("attention_forward",
          [&](Backend& b) { b.attention_forward(q, k, v, out, logsumexp, args); });
  }
  void attention_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                          ConstTensorView out, ConstTensorView logsumexp, ConstTensorView dout,
                          TensorView dq, TensorView dk, TensorView dv, const AttentionArgs& args,
                          CopyMode mode) override {
    timed("attention_backward", [&](Backend& b) {
      b.attention_backward(q, k, v, out, logsumexp, dout, dq, dk, dv, args, mode);
    });
  }

  void gelu_forward(ConstTensorView x, TensorView y) override {
    timed("gelu_forward", [&](Backend& b) { b.gelu_forward(x, y); });
  }
  void gelu_backward(ConstTensorView x, ConstTensorView dy, TensorView dx, CopyMode mode) override {
    timed("gelu_backward", [&](Backend& b) { b.gelu_backward(x, dy, dx, mode); });
  }
  void dropout_forward(ConstTensorView x, TensorView y, const DropoutArgs& args) override {
    timed("dropout_forward", [&](Backend& b) { b.dropout_forward(x, y, args); });
  }
  void dropout_backward(ConstTensorView dy, TensorView dx, const DropoutArgs& args,
                        CopyMode mode) override {
    timed("dropout_backward", [&](Backend& b) { b.dropout_backward(dy, dx, args, mode); });
  }
  void add(ConstTensorView a, ConstTensorView b, TensorView y) override {
    timed("add", [&](Backend& be) { be.add(a, b, y); });
  }
  void scale(ConstTensorView x, float factor, TensorView y) override {
    timed("scale", [&](Backend& b) { b.scale(x, factor, y); });
  }
  void add_scaled(ConstTensorView x, float factor, TensorView y) override {
    timed("add_scaled", [&](Backend& b) { b.add_scaled(x, factor, y); });
  }
  void bias_forward(ConstTensorView x, ConstTensorView bias, TensorView y) override {
    timed("bias_forward", [&](Backend& b) { b.bias_forward(x, bias, y); });
  }
  void bias_backward(ConstTensorView dy, TensorView db, CopyMode mode) override {
    timed("bias_backward", [&](Backend& b) { b.bias_backward(dy, db, mode); });
  }

  void embedding_forward(ConstTensorView table, IndexView ids, TensorView out,
                         const EmbeddingShard& shard) override {
    timed("embedding_forward", [&](Backend& b) { b.embedding_forward(table, ids, out, shard); });
  }
  void embedding_backward(ConstTensorView dout, IndexView ids, TensorView dtable,
                          const EmbeddingShard& shard, CopyMode mode) override {
    timed("embedding_backward",
          [&](Backend& b) { b.embedding_backward(dout, ids, dtable, shard, mode); });
  }

  void cross_entropy_forward(ConstTensorView logits, IndexView targets, TensorView loss,
                             TensorView logsumexp, const CrossEntropyArgs& args) override {
    timed("cross_entropy_forward",
          [&](Backend& b) { b.cross_entropy_forward(logits, targets, loss, logsumexp, args); });
  }
  void cross_entropy_row_max(ConstTensorView logits, TensorView row_max) override {
    timed("cross_entropy_row_max", [&](Backend& b) { b.cross_entropy_row_max(logits, row_max); });
  }
  void cross_entropy_sum_exp(ConstTensorView logits, ConstTensorView row_max,
                             TensorView sum_exp) override {
    timed("cross_entropy_sum_exp",
          [&](Backend& b) { b.cross_entropy_sum_exp(logits, row_max, sum_exp); });
  }
  void cross_entropy_target_logit(ConstTensorView logits, IndexView targets,
                                  TensorView target_logit, const CrossEntropyArgs& args) override {
    timed("cross_entropy_target_logit",
          [&](Backend& b) { b.cross_entropy_target_logit(logits, targets, target_logit, args); });
  }
  void cross_entropy_loss(ConstTensorView row_max, ConstTensorView sum_exp,
                          ConstTensorView target_logit, TensorView loss, TensorView logsumexp,
                          const CrossEntropyArgs& args) override {
    timed("cross_entropy_loss", [&](Backend& b) {
      b.cross_entropy_loss(row_max, sum_exp, target_logit, loss, logsumexp, args);
    });
  }
  void cross_entropy_backward(ConstTensorView logits, IndexView targets, ConstTensorView logsumexp,
                              ConstTensorView dloss, TensorView dlogits,
                              const CrossEntropyArgs& args, CopyMode mode) override {
    timed("cross_entropy_backward", [&](Backend& b) {
      b.cross_entropy_backward(logits, targets, logsumexp, dloss, dlogits, args, mode);
    });
  }

  void adamw_update(TensorView param, ConstTensorView grad, TensorView m, TensorView v,
                    const AdamWArgs& args) override {
    timed("adamw_update", [&](Backend& b) { b.adamw_update(param, grad, m, v, args); });
  }
  void adamw_update_all(std::span<const AdamWShard> shards, const AdamWArgs& args) override {
    timed("adamw_update_all", [&](Backend& b) { b.adamw_update_all(shards, args); });
  }

 private:
  // The inner backend, allocating through the allocator installed on this one (the Trainer's
  // memory tracker), so that its workspace is counted as it would be without the decorator.
  Backend& inner() {
    inner_.use_allocator(&allocator());
    return inner_;
  }
  template <class Kernel>
  void timed(std::string_view name, Kernel&& kernel) {
    Backend& in = inner();
    const double cpu_start = thread_cpu_seconds();
    const auto start = Clock::now();
    kernel(in);
    times_.other_kernel_s += seconds_since(start);
    const double cpu = thread_cpu_seconds() - cpu_start;
    times_.other_kernel_cpu_s += cpu;
    times_.kernel_cpu_s[name] += cpu;
  }

  Backend& inner_;
  RankTimes& times_;
  bool record_ = false;
};

// A GEMM call's three operands, filled with normal draws (stream ids counted by `stream`).
struct GemmOperands {
  Buffer a, b, c;
  GemmOperands(Backend& backend, const GemmCall& call, std::uint32_t seed, std::uint32_t& stream)
      : a(filled(backend, call.a, seed, stream)),
        b(filled(backend, call.b, seed, stream)),
        c(filled(backend, call.c, seed, stream)) {}
  void run(Backend& backend, const GemmCall& call) const {
    backend.gemm(a.view(call.a), b.view(call.b), c.view(call.c), call.args);
  }

 private:
  static Buffer filled(Backend& backend, const TensorShape& shape, std::uint32_t seed,
                       std::uint32_t& stream) {
    Buffer buf = backend.allocate(shape, DType::fp32, MemoryCategory::temporaries);
    backend.fill_normal(buf.view(shape), 1.0f,
                        {.seed = seed, .id = stream_id(RngPurpose::test, stream++, 0)}, {});
    return buf;
  }
};

// OpenBLAS alone on one step's GEMMs: each distinct call replayed through a fresh CPU backend on
// the calling thread, kReplayBatches batches of at least kReplaySeconds of thread CPU time each,
// the fastest batch kept (other processes on the machine only ever slow a batch down), weighted by
// how often the step makes the call. Returns FLOP per CPU second.
// `wall`: on the threads a lone rank gets (CpuBackend's default), per wall second, and each call's
// best time kept in its alone_wall_s; else on one thread per thread CPU second.
inline double replay_gemm_rate(std::map<std::string, GemmCall>& calls, bool wall = false) {
  constexpr double kReplaySeconds = 0.004;
  constexpr int kReplayBatches = 5;
  cpu::CpuBackend backend(cpu::CpuOptions{.threads = wall ? 0 : 1});
  const auto now = [wall] {
    return wall ? std::chrono::duration<double>(Clock::now().time_since_epoch()).count()
                : thread_cpu_seconds();
  };
  double flops = 0, seconds = 0;
  std::uint32_t stream = 0;
  for (auto& [key, call] : calls) {
    const GemmOperands operands(backend, call, 7, stream);
    operands.run(backend, call);                            // warm: caches, OpenBLAS buffers
    double best = std::numeric_limits<double>::infinity();  // seconds per call
    for (int batch = 0; batch < kReplayBatches; ++batch) {
      std::int64_t runs = 0;
      const double start = now();
      double elapsed = 0;
      do {
        operands.run(backend, call);
        ++runs;
        elapsed = now() - start;
      } while (elapsed < kReplaySeconds || runs < 3);
      best = std::min(best, elapsed / static_cast<double>(runs));
    }
    benchmark::DoNotOptimize(operands.c.data());
    if (wall) call.alone_wall_s = best;
    flops += static_cast<double>(call.count) * call.flops;
    seconds += static_cast<double>(call.count) * best;
  }
  return seconds > 0 ? flops / seconds : 0;
}

// OpenBLAS alone on one step's GEMMs with its operands out of the caches, as a step mostly meets
// them (a weight was last touched by the previous step's optimizer): each distinct call timed on
// its own after writing a buffer of twice the last-level cache (at least 256 MiB), the best of
// kColdRuns kept in cold_wall_s, on the threads a lone rank gets. Returns FLOP per wall second.
inline double replay_gemm_rate_cold(std::map<std::string, GemmCall>& calls) {
  constexpr int kColdRuns = 3;
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const std::size_t flush_bytes = std::max<std::size_t>(
      std::size_t{256} << 20, 2 * static_cast<std::size_t>(std::max(llc, 0L)));
  std::vector<unsigned char> flush(flush_bytes);
  cpu::CpuBackend backend;
  double flops = 0, seconds = 0;
  std::uint32_t stream = 0;
  unsigned char byte = 0;
  for (auto& [key, call] : calls) {
    const GemmOperands operands(backend, call, 11, stream);
    operands.run(backend, call);  // OpenBLAS's buffers and threads up
    double best = std::numeric_limits<double>::infinity();
    for (int run = 0; run < kColdRuns; ++run) {
      std::memset(flush.data(), ++byte, flush.size());
      benchmark::ClobberMemory();
      const auto start = Clock::now();
      operands.run(backend, call);
      best = std::min(best, seconds_since(start));
    }
    benchmark::DoNotOptimize(operands.c.data());
    call.cold_wall_s = best;
    flops += static_cast<double>(call.count) * call.flops;
    seconds += static_cast<double>(call.count) * best;
  }
  return seconds > 0 ? flops / seconds : 0;
}

}  // namespace carto::bench
