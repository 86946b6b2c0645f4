// The CPU backend's kernels on one thread (one rank): OpenBLAS sgemm GFLOP/s at the demo's sizes,
// and GB/s of layernorm, softmax and fused attention. Each benchmark prints the FLOPs and bytes it
// counts per call and the time the cost model's CPU profile predicts for that work (the roofline
// of carto/cost/hardware.hpp with hardware::cpu()), with the ratio measured / predicted.
//
// Bytes count each tensor read or written once (fp32): a kernel that streams its operands through
// cache once moves exactly these; more traffic shows as a lower GB/s.
#include <benchmark/benchmark.h>

#include <carto/cost/hardware.hpp>
#include <cpu/cpu_backend.hpp>
#include <cstdint>
#include <vector>

namespace {

using namespace carto;

struct Tensor {
  Buffer buffer;
  TensorView view;
};

Tensor make(Backend& backend, const TensorShape& shape, std::uint32_t stream) {
  Buffer b = backend.allocate(shape, DType::fp32, MemoryCategory::temporaries);
  const TensorView v = b.view(shape);
  backend.fill_normal(v, 1.0f, {.seed = 1, .id = stream_id(RngPurpose::test, stream, 0)}, {});
  return {std::move(b), v};
}

// Counters: FLOP and bytes per call, their rates, and measured / predicted time per call.
void report(benchmark::State& state, std::int64_t flops, std::int64_t bytes) {
  const double predicted =
      compute_time({.flops = flops, .bytes = bytes, .dtype = DType::fp32}, hardware::cpu());
  state.counters["flop_per_call"] = static_cast<double>(flops);
  state.counters["bytes_per_call"] = static_cast<double>(bytes);
  state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(flops) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["predicted_us"] = predicted * 1e6;
  // predicted · iterations / elapsed, inverted: seconds per call measured over predicted.
  state.counters["measured/predicted"] = benchmark::Counter(
      predicted, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// (m, k) · (k, n): 2mnk FLOPs; A, B read and C written once.
void BM_Sgemm(benchmark::State& state) {
  cpu::CpuBackend backend;
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Tensor a = make(backend, {{"m", m}, {"k", k}}, 1), b = make(backend, {{"k", k}, {"n", n}}, 2),
         c = make(backend, {{"m", m}, {"n", n}}, 3);
  for (auto _ : state) {
    backend.gemm(a.view, b.view, c.view, {});
    benchmark::ClobberMemory();
  }
  report(state, 2 * m * n * k, 4 * (m * k + k * n + m * n));
  state.SetLabel("blas threads " + std::to_string(cpu::blas_threads()));
}
BENCHMARK(BM_Sgemm)
    ->Args({256, 256, 1024})
    ->Args({256, 1024, 256})
    ->Args({256, 768, 256})
    ->Args({512, 512, 512})
    ->Args({1024, 1024, 1024})
    ->Unit(benchmark::kMicrosecond);

// Layernorm over rows of C: ~8 FLOPs per element; x read, y written, gamma/beta read, mean/rstd
// written.
void BM_LayerNormForward(benchmark::State& state) {
  cpu::CpuBackend backend;
  const std::int64_t rows = state.range(0), c = state.range(1);
  Tensor x = make(backend, {{"rows", rows}, {"c", c}}, 4),
         y = make(backend, {{"rows", rows}, {"c", c}}, 5);
  Tensor g = make(backend, {{"c", c}}, 6), b = make(backend, {{"c", c}}, 7);
  Tensor mean = make(backend, {{"rows", rows}}, 8), rstd = make(backend, {{"rows", rows}}, 9);
  for (auto _ : state) {
    backend.layernorm_forward(x.view, g.view, b.view, y.view, mean.view, rstd.view, {});
    benchmark::ClobberMemory();
  }
  report(state, 8 * rows * c, 4 * (2 * rows * c + 2 * c + 2 * rows));
}
BENCHMARK(BM_LayerNormForward)->Args({256, 256})->Args({1024, 768})->Unit(benchmark::kMicrosecond);

// dy, x read, dx accumulated (read + write), dgamma/dbeta accumulated: ~12 FLOPs per element.
void BM_LayerNormBackward(benchmark::State& state) {
  cpu::CpuBackend backend;
  const std::int64_t rows = state.range(0), c = state.range(1);
  const TensorShape s{{"rows", rows}, {"c", c}};
  Tensor x = make(backend, s, 4), dy = make(backend, s, 5), dx = make(backend, s, 10);
  Tensor g = make(backend, {{"c", c}}, 6), dg = make(backend, {{"c", c}}, 11),
         db = make(backend, {{"c", c}}, 12);
  Tensor mean = make(backend, {{"rows", rows}}, 8), rstd = make(backend, {{"rows", rows}}, 9);
  for (auto _ : state) {
    backend.layernorm_backward(dy.view, x.view, g.view, mean.view, rstd.view, dx.view, dg.view,
                               db.view);
    benchmark::ClobberMemory();
  }
  report(state, 12 * rows * c, 4 * (4 * rows * c + 5 * c + 2 * rows));
}
BENCHMARK(BM_LayerNormBackward)->Args({256, 256})->Args({1024, 768})->Unit(benchmark::kMicrosecond);

// Causal scaled softmax over (B·a, S, S): ~5 FLOPs per element (scale, max, exp, sum, divide).
void BM_SoftmaxCausal(benchmark::State& state) {
  cpu::CpuBackend backend;
  const std::int64_t bh = state.range(0), s = state.range(1);
  const TensorShape shape{{"bh", bh}, {"q", s}, {"k", s}};
  Tensor x = make(backend, shape, 13), y = make(backend, shape, 14);
  for (auto _ : state) {
    backend.softmax_forward(x.view, y.view, {.scale = 0.125f, .masking = Masking::causal});
    benchmark::ClobberMemory();
  }
  report(state, 5 * bh * s * s, 4 * 2 * bh * s * s);
}
BENCHMARK(BM_SoftmaxCausal)->Args({8, 128})->Args({8, 256})->Unit(benchmark::kMicrosecond);

// Fused causal attention (B, a, S, d): the FLOPs the profiler counts for QKᵀ and P·V, 4·B·a·S²·d
// (the kernel skips the masked half, so it does about half); bytes: q, k, v read, out and the
// logsumexp written; the S×S scores never reach memory.
void BM_AttentionForward(benchmark::State& state) {
  cpu::CpuBackend backend;
  const std::int64_t b = 2, a = state.range(0), s = state.range(1), d = state.range(2);
  const TensorShape shape{{"b", b}, {"a", a}, {"s", s}, {"d", d}};
  Tensor q = make(backend, shape, 15), k = make(backend, shape, 16), v = make(backend, shape, 17),
         out = make(backend, shape, 18), lse = make(backend, {{"b", b}, {"a", a}, {"s", s}}, 19);
  const AttentionArgs args{
      .scale = 0.125f, .masking = Masking::causal, .dropout = 0.1f, .rng = {.seed = 1, .id = 2}};
  for (auto _ : state) {
    backend.attention_forward(q.view, k.view, v.view, out.view, lse.view, args);
    benchmark::ClobberMemory();
  }
  report(state, 4 * b * a * s * s * d, 4 * (4 * b * a * s * d + b * a * s));
}
BENCHMARK(BM_AttentionForward)
    ->Args({4, 128, 64})
    ->Args({4, 256, 64})
    ->Unit(benchmark::kMicrosecond);

void BM_AttentionBackward(benchmark::State& state) {
  cpu::CpuBackend backend;
  const std::int64_t b = 2, a = state.range(0), s = state.range(1), d = state.range(2);
  const TensorShape shape{{"b", b}, {"a", a}, {"s", s}, {"d", d}};
  const TensorShape rows{{"b", b}, {"a", a}, {"s", s}};
  Tensor q = make(backend, shape, 15), k = make(backend, shape, 16), v = make(backend, shape, 17),
         out = make(backend, shape, 18), lse = make(backend, rows, 19),
         dout = make(backend, shape, 20), dq = make(backend, shape, 21),
         dk = make(backend, shape, 22), dv = make(backend, shape, 23);
  const AttentionArgs args{
      .scale = 0.125f, .masking = Masking::causal, .dropout = 0.1f, .rng = {.seed = 1, .id = 2}};
  backend.attention_forward(q.view, k.view, v.view, out.view, lse.view, args);
  for (auto _ : state) {
    backend.attention_backward(q.view, k.view, v.view, out.view, lse.view, dout.view, dq.view,
                               dk.view, dv.view, args);
    benchmark::ClobberMemory();
  }
  // Backward recomputes QKᵀ and does dP, dQ, dK, dV: 5 S×S×d products, 10·B·a·S²·d FLOPs.
  report(state, 10 * b * a * s * s * d, 4 * (5 * b * a * s * d + 3 * b * a * s * d + b * a * s));
}
BENCHMARK(BM_AttentionBackward)->Args({4, 128, 64})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
