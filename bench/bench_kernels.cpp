// The CPU backend's kernels on one rank with its default threads (every core; CARTO_CPU_THREADS=1
// for one): OpenBLAS sgemm GFLOP/s at the demo's sizes,
// and GB/s of every other kernel (layernorm, softmax, fused attention, GELU, dropout, the
// elementwise ones, cross-entropy, AdamW, strided copies) at GPT-2 small's activation sizes
// (1024 tokens of 768, MLP 3072). Each benchmark prints the FLOPs and bytes it counts per call and
// the time the cost model's CPU profile predicts for that work (the roofline of
// carto/cost/hardware.hpp with hardware::cpu()), with the ratio measured / predicted.
//
// Bytes count each tensor read or written once (fp32): a kernel that streams its operands through
// cache once moves exactly these; more traffic shows as a lower GB/s. FLOPs are the profiler's
// conventions (op_cost.hpp), which count an exp as one FLOP and dropout's random numbers (ten
// Philox rounds per four elements) as none: GELU, softmax, cross-entropy and dropout do more
// arithmetic than their counts, and sit above the roofline by that much.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <carto/cost/hardware.hpp>
#include <chrono>
#include <cpu/cpu_backend.hpp>
#include <cstdint>
#include <limits>
#include <thread>
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

// Runs `kernel` once per iteration and reports the FLOPs and bytes of one call.
template <class Kernel>
void measure(benchmark::State& state, std::int64_t flops, std::int64_t bytes, Kernel&& kernel) {
  for (auto _ : state) {
    kernel();
    benchmark::ClobberMemory();
  }
  report(state, flops, bytes);
}

// (m, k) · (k, n): 2mnk FLOPs; A, B read and C written once.
void BM_Sgemm(benchmark::State& state) {
  cpu::CpuBackend backend;
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Tensor a = make(backend, {{"m", m}, {"k", k}}, 1), b = make(backend, {{"k", k}, {"n", n}}, 2),
         c = make(backend, {{"m", m}, {"n", n}}, 3);
  measure(state, 2 * m * n * k, 4 * (m * k + k * n + m * n),
          [&] { backend.gemm(a.view, b.view, c.view, {}); });
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
  measure(state, 8 * rows * c, 4 * (2 * rows * c + 2 * c + 2 * rows), [&] {
    backend.layernorm_forward(x.view, g.view, b.view, y.view, mean.view, rstd.view, {});
  });
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
  measure(state, 12 * rows * c, 4 * (4 * rows * c + 5 * c + 2 * rows), [&] {
    backend.layernorm_backward(dy.view, x.view, g.view, mean.view, rstd.view, dx.view, dg.view,
                               db.view,
                               {.dx = CopyMode::accumulate,
                                .dgamma = CopyMode::accumulate,
                                .dbeta = CopyMode::accumulate});
  });
}
BENCHMARK(BM_LayerNormBackward)->Args({256, 256})->Args({1024, 768})->Unit(benchmark::kMicrosecond);

// Causal scaled softmax over (B·a, S, S): ~5 FLOPs per element (scale, max, exp, sum, divide).
void BM_SoftmaxCausal(benchmark::State& state) {
  cpu::CpuBackend backend;
  const std::int64_t bh = state.range(0), s = state.range(1);
  const TensorShape shape{{"bh", bh}, {"q", s}, {"k", s}};
  Tensor x = make(backend, shape, 13), y = make(backend, shape, 14);
  measure(state, 5 * bh * s * s, 4 * 2 * bh * s * s, [&] {
    backend.softmax_forward(x.view, y.view, {.scale = 0.125f, .masking = Masking::causal});
  });
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
  measure(state, 4 * b * a * s * s * d, 4 * (4 * b * a * s * d + b * a * s),
          [&] { backend.attention_forward(q.view, k.view, v.view, out.view, lse.view, args); });
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
  // Backward recomputes QKᵀ and does dP, dQ, dK, dV: 5 S×S×d products, 10·B·a·S²·d FLOPs.
  measure(state, 10 * b * a * s * s * d, 4 * (5 * b * a * s * d + 3 * b * a * s * d + b * a * s),
          [&] {
            backend.attention_backward(q.view, k.view, v.view, out.view, lse.view, dout.view,
                                       dq.view, dk.view, dv.view, args, CopyMode::accumulate);
          });
}
BENCHMARK(BM_AttentionBackward)->Args({4, 128, 64})->Unit(benchmark::kMicrosecond);

// The split layernorm's two forward calls (OpVariant::distributed_statistics) on a quarter of the
// columns: partial sums read x (2 FLOPs per element), apply reads x and writes y (about 4).
void BM_LayerNormSplitForward(benchmark::State& state) {
  cpu::CpuBackend backend;
  const std::int64_t rows = state.range(0), c = state.range(1), local = c / 4;
  Tensor x = make(backend, {{"rows", rows}, {"c", local}}, 4),
         y = make(backend, {{"rows", rows}, {"c", local}}, 5);
  Tensor g = make(backend, {{"c", local}}, 6), b = make(backend, {{"c", local}}, 7);
  Tensor sums = make(backend, {{"rows", rows}, {"sums", 2}}, 8);
  Tensor mean = make(backend, {{"rows", rows}}, 9), rstd = make(backend, {{"rows", rows}}, 10);
  backend.layernorm_partial_sums(x.view, sums.view);
  measure(state, 6 * rows * local, 4 * (3 * rows * local + 2 * local + 6 * rows), [&] {
    backend.layernorm_partial_sums(x.view, sums.view);
    backend.layernorm_apply(x.view, sums.view, c, g.view, b.view, y.view, mean.view, rstd.view, {});
  });
}
BENCHMARK(BM_LayerNormSplitForward)->Args({1024, 768})->Unit(benchmark::kMicrosecond);

void BM_SoftmaxBackwardCausal(benchmark::State& state) {
  cpu::CpuBackend backend;
  const std::int64_t bh = state.range(0), s = state.range(1);
  const TensorShape shape{{"bh", bh}, {"q", s}, {"k", s}};
  Tensor x = make(backend, shape, 13), y = make(backend, shape, 14), dy = make(backend, shape, 15),
         dx = make(backend, shape, 16);
  const SoftmaxArgs args{.scale = 0.125f, .masking = Masking::causal};
  backend.softmax_forward(x.view, y.view, args);
  // y, dy read, dx read and written: 4 FLOPs per element (the profiler's count).
  measure(state, 4 * bh * s * s, 4 * 4 * bh * s * s,
          [&] { backend.softmax_backward(y.view, dy.view, dx.view, args, CopyMode::accumulate); });
}
BENCHMARK(BM_SoftmaxBackwardCausal)->Args({8, 256})->Unit(benchmark::kMicrosecond);

// ---- elementwise: n = rows · cols elements; FLOPs as the profiler counts them (op_cost.hpp) ----

void BM_GeluForward(benchmark::State& state) {
  cpu::CpuBackend backend;
  const TensorShape s{{"rows", state.range(0)}, {"c", state.range(1)}};
  Tensor x = make(backend, s, 24), y = make(backend, s, 25);
  measure(state, 8 * s.numel(), 8 * s.numel(), [&] { backend.gelu_forward(x.view, y.view); });
}
BENCHMARK(BM_GeluForward)->Args({1024, 3072})->Unit(benchmark::kMicrosecond);

void BM_GeluBackward(benchmark::State& state) {
  cpu::CpuBackend backend;
  const TensorShape s{{"rows", state.range(0)}, {"c", state.range(1)}};
  Tensor x = make(backend, s, 24), dy = make(backend, s, 25), dx = make(backend, s, 26);
  measure(state, 16 * s.numel(), 16 * s.numel(),
          [&] { backend.gelu_backward(x.view, dy.view, dx.view, CopyMode::accumulate); });
}
BENCHMARK(BM_GeluBackward)->Args({1024, 3072})->Unit(benchmark::kMicrosecond);

void BM_DropoutForward(benchmark::State& state) {
  cpu::CpuBackend backend;
  const TensorShape s{{"rows", state.range(0)}, {"c", state.range(1)}};
  Tensor x = make(backend, s, 27), y = make(backend, s, 28);
  const DropoutArgs args{.probability = 0.1f, .rng = {.seed = 1, .id = 3}};
  measure(state, 2 * s.numel(), 8 * s.numel(),
          [&] { backend.dropout_forward(x.view, y.view, args); });
}
BENCHMARK(BM_DropoutForward)->Args({1024, 768})->Unit(benchmark::kMicrosecond);

void BM_DropoutBackward(benchmark::State& state) {
  cpu::CpuBackend backend;
  const TensorShape s{{"rows", state.range(0)}, {"c", state.range(1)}};
  Tensor dy = make(backend, s, 27), dx = make(backend, s, 28);
  const DropoutArgs args{.probability = 0.1f, .rng = {.seed = 1, .id = 3}};
  measure(state, 2 * s.numel(), 12 * s.numel(),
          [&] { backend.dropout_backward(dy.view, dx.view, args, CopyMode::accumulate); });
}
BENCHMARK(BM_DropoutBackward)->Args({1024, 768})->Unit(benchmark::kMicrosecond);

void BM_Add(benchmark::State& state) {
  cpu::CpuBackend backend;
  const TensorShape s{{"rows", state.range(0)}, {"c", state.range(1)}};
  Tensor a = make(backend, s, 29), b = make(backend, s, 30), y = make(backend, s, 31);
  measure(state, s.numel(), 12 * s.numel(), [&] { backend.add(a.view, b.view, y.view); });
}
BENCHMARK(BM_Add)->Args({1024, 768})->Unit(benchmark::kMicrosecond);

void BM_AddScaled(benchmark::State& state) {
  cpu::CpuBackend backend;
  const TensorShape s{{"rows", state.range(0)}, {"c", state.range(1)}};
  Tensor x = make(backend, s, 29), y = make(backend, s, 31);
  measure(state, 2 * s.numel(), 12 * s.numel(), [&] { backend.add_scaled(x.view, 0.5f, y.view); });
}
BENCHMARK(BM_AddScaled)->Args({1024, 768})->Unit(benchmark::kMicrosecond);

void BM_BiasForward(benchmark::State& state) {
  cpu::CpuBackend backend;
  const std::int64_t rows = state.range(0), c = state.range(1);
  const TensorShape s{{"rows", rows}, {"c", c}};
  Tensor x = make(backend, s, 32), b = make(backend, {{"c", c}}, 33), y = make(backend, s, 34);
  measure(state, rows * c, 4 * (2 * rows * c + c),
          [&] { backend.bias_forward(x.view, b.view, y.view); });
}
BENCHMARK(BM_BiasForward)->Args({1024, 3072})->Unit(benchmark::kMicrosecond);

void BM_BiasBackward(benchmark::State& state) {
  cpu::CpuBackend backend;
  const std::int64_t rows = state.range(0), c = state.range(1);
  Tensor dy = make(backend, {{"rows", rows}, {"c", c}}, 32), db = make(backend, {{"c", c}}, 33);
  measure(state, rows * c, 4 * (rows * c + 2 * c),
          [&] { backend.bias_backward(dy.view, db.view, CopyMode::accumulate); });
}
BENCHMARK(BM_BiasBackward)->Args({1024, 3072})->Unit(benchmark::kMicrosecond);

// ---- cross-entropy over (rows, V) logits; AdamW; copies ----

std::vector<std::int32_t> token_ids(std::int64_t n, std::int64_t vocab) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = (i * 7919) % vocab;
  return ids;
}

// logits read (5 FLOPs per logit, the profiler's count), the logsumexp and the loss written.
void BM_CrossEntropyForward(benchmark::State& state) {
  cpu::CpuBackend backend;
  const std::int64_t rows = state.range(0), vocab = state.range(1);
  Tensor logits = make(backend, {{"rows", rows}, {"v", vocab}}, 35),
         lse = make(backend, {{"rows", rows}}, 36), loss = make(backend, {{"one", 1}}, 37);
  const std::vector<std::int32_t> ids = token_ids(rows, vocab);
  const IndexView targets{.data = ids.data(), .shape = {{"rows", rows}}};
  measure(state, 5 * rows * vocab, 4 * (rows * vocab + 2 * rows),
          [&] { backend.cross_entropy_forward(logits.view, targets, loss.view, lse.view, {}); });
}
BENCHMARK(BM_CrossEntropyForward)->Args({256, 16384})->Unit(benchmark::kMicrosecond);

// logits read, dlogits read and written.
void BM_CrossEntropyBackward(benchmark::State& state) {
  cpu::CpuBackend backend;
  const std::int64_t rows = state.range(0), vocab = state.range(1);
  const TensorShape s{{"rows", rows}, {"v", vocab}};
  Tensor logits = make(backend, s, 35), dlogits = make(backend, s, 38),
         lse = make(backend, {{"rows", rows}}, 36), loss = make(backend, {{"one", 1}}, 37);
  const std::vector<std::int32_t> ids = token_ids(rows, vocab);
  const IndexView targets{.data = ids.data(), .shape = {{"rows", rows}}};
  backend.cross_entropy_forward(logits.view, targets, loss.view, lse.view, {});
  measure(state, 2 * rows * vocab, 4 * (3 * rows * vocab + rows), [&] {
    backend.cross_entropy_backward(logits.view, targets, lse.view, loss.view, dlogits.view, {},
                                   CopyMode::accumulate);
  });
}
BENCHMARK(BM_CrossEntropyBackward)->Args({256, 16384})->Unit(benchmark::kMicrosecond);

// param, grad, m, v read; param, m, v written; about 12 FLOPs per parameter.
void BM_AdamW(benchmark::State& state) {
  cpu::CpuBackend backend;
  const TensorShape s{{"n", state.range(0)}};
  Tensor p = make(backend, s, 39), g = make(backend, s, 40), m = make(backend, s, 41),
         v = make(backend, s, 42);
  backend.fill(m.view, 0.0f);
  backend.fill(v.view, 0.0f);
  measure(state, 12 * s.numel(), 28 * s.numel(),
          [&] { backend.adamw_update(p.view, g.view, m.view, v.view, {}); });
}
BENCHMARK(BM_AdamW)->Arg(1 << 22)->Unit(benchmark::kMicrosecond);

// adamw_update_all over GPT-2 124M's parameter count in four shards, on the backend's default
// threads (every core of a lone rank), against a plain loop of the same traffic measured in the
// same run: read param, grad, m and v, write param, m and v, one multiply-add per stream and no
// division or square root, on as many std::threads. At these sizes nothing stays in cache, so the
// loop is the memory's speed for AdamW's 28 bytes per parameter: adamw/stream near 1 means AdamW
// is bound by memory, not arithmetic, and a faster optimizer must move fewer bytes.
void BM_AdamWAllAgainstStream(benchmark::State& state) {
  constexpr std::int64_t kParams = 124'439'808;  // GPT-2 124M (hidden 768, 12 layers, 50257 tokens)
  constexpr int kShards = 4;
  cpu::CpuBackend backend;
  const int threads = backend.threads();
  const TensorShape s{{"n", kParams / kShards}};
  std::vector<Tensor> p, g, m, v;
  std::vector<AdamWShard> shards;
  for (int i = 0; i < kShards; ++i) {
    const auto id = static_cast<std::uint32_t>(50 + 4 * i);
    p.push_back(make(backend, s, id));
    g.push_back(make(backend, s, id + 1));
    m.push_back(make(backend, s, id + 2));
    v.push_back(make(backend, s, id + 3));
    backend.fill(m.back().view, 0.0f);
    backend.fill(v.back().view, 0.0f);
  }
  for (int i = 0; i < kShards; ++i)
    shards.push_back({.param = p[i].view, .grad = g[i].view, .m = m[i].view, .v = v[i].view});
  // The baseline: each thread a contiguous part of every shard.
  const auto stream = [&] {
    std::vector<std::thread> team;
    const std::int64_t n = s.numel();
    for (int t = 0; t < threads; ++t) {
      team.emplace_back([&, t] {
        const std::int64_t begin = n * t / threads, end = n * (t + 1) / threads;
        for (int i = 0; i < kShards; ++i) {
          float* __restrict pp = p[i].view.f32();
          float* __restrict mm = m[i].view.f32();
          float* __restrict vv = v[i].view.f32();
          const float* __restrict gg = g[i].view.f32();
          for (std::int64_t j = begin; j < end; ++j) {
            mm[j] = 0.9f * mm[j] + gg[j];
            vv[j] = 0.99f * vv[j] + gg[j];
            pp[j] = 0.999f * pp[j] + 1e-3f * mm[j];
          }
        }
      });
    }
    for (std::thread& t : team) t.join();
  };
  double stream_s = std::numeric_limits<double>::infinity();
  for (int run = 0; run < 3; ++run) {
    const auto start = std::chrono::steady_clock::now();
    stream();
    stream_s = std::min(
        stream_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  benchmark::DoNotOptimize(p[0].view.data);
  AdamWArgs args{};
  double adamw_s = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    backend.adamw_update_all(shards, args);
    adamw_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++args.step;
    benchmark::ClobberMemory();
  }
  adamw_s /= static_cast<double>(state.iterations());
  const double bytes = 28.0 * static_cast<double>(kParams / kShards * kShards);
  state.counters["adamw_GB/s"] = bytes * 1e-9 / adamw_s;
  state.counters["stream_GB/s"] = bytes * 1e-9 / stream_s;
  state.counters["adamw/stream_time"] = adamw_s / stream_s;
  state.counters["threads"] = threads;
}
BENCHMARK(BM_AdamWAllAgainstStream)->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);

// Q out of the fused (B, S, 3H) projection into (B, a, S, d) (split_heads), and the gradient's way
// back accumulated (range(2) = 1): each element read and written once (accumulate also reads dst).
void BM_CopyHeads(benchmark::State& state) {
  cpu::CpuBackend backend;
  const std::int64_t b = 4, s = 256, h = 768, heads = 12, d = h / heads;
  const TensorShape fused{{"b", b}, {"s", s}, {"h3", 3 * h}};
  const TensorShape split{{"b", b}, {"a", heads}, {"s", s}, {"d", d}};
  Tensor qkv = make(backend, fused, 43), q = make(backend, split, 44);
  const StridedBox from = heads_box(fused, 3, 0, heads);
  const StridedBox to = box_of(split, {.offset = {0, 0, 0, 0}, .extent = {b, heads, s, d}});
  const Index extents{b, heads, s, d};
  const bool accumulate = state.range(0) == 1;
  measure(state, accumulate ? b * s * h : 0, 4 * b * s * h * (accumulate ? 3 : 2), [&] {
    if (accumulate) {
      backend.copy_strided(q.view, to, qkv.view, from, extents, CopyMode::accumulate);
    } else {
      backend.copy_strided(qkv.view, from, q.view, to, extents, CopyMode::assign);
    }
  });
  state.SetLabel(accumulate ? "merge, accumulate" : "split, assign");
}
BENCHMARK(BM_CopyHeads)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
