// The CUDA backend's fused attention, forward and backward, causal, no dropout, in TFLOP/s, at the
// shapes bench/cuda/sdpa_reference.py times PyTorch's scaled_dot_product_attention on.
//
// FLOPs (FlashAttention's convention, which sdpa_reference.py uses too): forward 4·B·a·S²·d (the
// two GEMMs q·kᵀ and p·v, 2 FLOPs per multiply-add), halved under the causal mask; backward 2.5×
// the forward (five GEMMs of that size against two, one of them the recomputed q·kᵀ). Softmax
// arithmetic is not counted.
//
// With --sdpa=<file> (the file sdpa_reference.py --out writes: one line per shape and pass,
// "<pass> <B> <a> <S> <d> <dtype> <TFLOP/s>"), each benchmark also reports vs_sdpa, its rate over
// PyTorch's on the same shape, pass and dtype.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_bench.hpp"

namespace {

using namespace carto;

struct Shape {
  std::int64_t batch, heads, seq, dim;
};
constexpr Shape kShapes[] = {{8, 12, 1024, 64}, {4, 16, 2048, 64}, {2, 16, 4096, 64}};

// (pass, B, a, S, d, dtype) -> PyTorch's TFLOP/s.
using SdpaKey =
    std::tuple<std::string, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::string>;
std::map<SdpaKey, double>& sdpa_rates() {
  static std::map<SdpaKey, double> rates;
  return rates;
}

void load_sdpa(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "bench_cuda_attention: cannot read --sdpa file %s\n", path.c_str());
    return;
  }
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string pass, dtype;
    std::int64_t b = 0, a = 0, s = 0, d = 0;
    double rate = 0;
    if (fields >> pass >> b >> a >> s >> d >> dtype >> rate) {
      sdpa_rates()[{pass, b, a, s, d, dtype}] = rate;
    }
  }
}

double forward_flops(const Shape& s) {
  return 4.0 * static_cast<double>(s.batch * s.heads) * static_cast<double>(s.seq) *
         static_cast<double>(s.seq) * static_cast<double>(s.dim) / 2.0;
}

struct Tensors {
  Tensors(const Shape& s, DType dt)
      : shape{{"b", s.batch}, {"a", s.heads}, {"s", s.seq}, {"d", s.dim}} {
    const TensorShape rows{{"b", s.batch}, {"a", s.heads}, {"s", s.seq}};
    for (int i = 0; i < 7; ++i) {
      buffers.push_back(bench::backend().allocate(shape, dt, MemoryCategory::activations));
      views.push_back(buffers.back().view(shape, dt));
    }
    lse_buffer = bench::backend().allocate(rows, DType::fp32, MemoryCategory::activations);
    lse = lse_buffer.view(rows, DType::fp32);
    for (int i = 0; i < 4; ++i) {  // q, k, v, dout
      const int which = i < 3 ? i : 4;
      bench::backend().fill_normal(views[static_cast<std::size_t>(which)], 1.0f,
                                   {.seed = 3, .id = static_cast<std::uint64_t>(i)}, {});
    }
  }
  TensorShape shape;
  std::vector<Buffer> buffers;
  std::vector<TensorView> views;  // q, k, v, out, dout, dq, dk (dv is the benchmark's own)
  Buffer lse_buffer;
  TensorView lse;
};

void report(benchmark::State& state, const Shape& s, DType dt, const char* pass, double flops,
            double seconds, std::int64_t iterations) {
  state.SetLabel(std::string(pass) + " " + std::string(to_string_view(dt)) + " " +
                 std::to_string(s.batch) + "x" + std::to_string(s.heads) + "x" +
                 std::to_string(s.seq) + "x" + std::to_string(s.dim));
  bench::set_rate(state, "TFLOP/s", flops * 1e-12);
  const auto it =
      sdpa_rates().find({pass, s.batch, s.heads, s.seq, s.dim, std::string(to_string_view(dt))});
  if (it != sdpa_rates().end() && iterations > 0 && seconds > 0) {
    const double ours = flops * 1e-12 * static_cast<double>(iterations) / seconds;
    state.counters["sdpa_TFLOP/s"] = it->second;
    state.counters["vs_sdpa"] = ours / it->second;
  }
}

AttentionArgs causal(const Shape& s) {
  return {.scale = 1.0f / std::sqrt(static_cast<float>(s.dim)), .masking = Masking::causal};
}

void BM_AttentionForward(benchmark::State& state) {
  const Shape s = kShapes[state.range(0)];
  const DType dt = state.range(1) == 0 ? DType::fp32 : DType::bf16;
  Tensors t(s, dt);
  const double seconds = bench::time_iterations(state, [&] {
    bench::backend().attention_forward(t.views[0], t.views[1], t.views[2], t.views[3], t.lse,
                                       causal(s));
  });
  report(state, s, dt, "fwd", forward_flops(s), seconds, state.iterations());
}

void BM_AttentionBackward(benchmark::State& state) {
  const Shape s = kShapes[state.range(0)];
  const DType dt = state.range(1) == 0 ? DType::fp32 : DType::bf16;
  Tensors t(s, dt);
  Buffer dv_buffer = bench::backend().allocate(t.shape, dt, MemoryCategory::temporaries);
  const TensorView dv = dv_buffer.view(t.shape, dt);
  bench::backend().attention_forward(t.views[0], t.views[1], t.views[2], t.views[3], t.lse,
                                     causal(s));
  bench::backend().fill(t.views[5], 0.0f);
  bench::backend().fill(t.views[6], 0.0f);
  bench::backend().fill(dv, 0.0f);
  const double seconds = bench::time_iterations(state, [&] {
    // Gradients accumulate (backward adds); the values grow but the work is the same.
    bench::backend().attention_backward(t.views[0], t.views[1], t.views[2], t.views[3], t.lse,
                                        t.views[4], t.views[5], t.views[6], dv, causal(s),
                                        CopyMode::accumulate);
  });
  report(state, s, dt, "bwd", 2.5 * forward_flops(s), seconds, state.iterations());
}

void shapes_and_dtypes(benchmark::internal::Benchmark* b) {
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(std::size(kShapes)); ++i) {
    b->Args({i, 1});  // bf16
  }
  b->Args({0, 0});  // fp32 at GPT-2's shape
}

BENCHMARK(BM_AttentionForward)
    ->Apply(shapes_and_dtypes)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AttentionBackward)
    ->Apply(shapes_and_dtypes)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  if (cuda::device_count() == 0) {
    std::puts("no CUDA device found; skipping");
    return 77;
  }
  // Our own flag first; Google Benchmark rejects arguments it does not know.
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--sdpa=", 7) == 0) {
      load_sdpa(argv[i] + 7);
    } else {
      rest.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  if (benchmark::ReportUnrecognizedArguments(n, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
