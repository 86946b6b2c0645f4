// Run-time profile of a whole training step: build the GPT graph, cost every op, walk forward,
// backward (with recomputation when asked) and the optimizer with liveness, and find the peak.
// Counters: microseconds per profile, ops in the graph, timeline events, and beside them what the
// profile predicts (matmul TFLOP per step, peak GB) so a run shows the figures it computed.
#include <benchmark/benchmark.h>

#include <carto/profile.hpp>
#include <chrono>

namespace {

using namespace carto;

void BM_ProfileGpt(benchmark::State& state, const char* model, Recompute recompute) {
  const GptConfig config = *find_model(model);
  const ProfileOptions options{.batch = 1, .recompute = recompute};
  std::size_t events = 0;
  double tflop = 0;
  double peak_gb = 0;
  double seconds = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    ModelProfile p = profile_gpt(config, options);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    events = p.timeline.size();
    tflop = static_cast<double>(p.flops.matmul_step) * 1e-12;
    peak_gb = static_cast<double>(p.memory.peak_bytes) * 1e-9;
    benchmark::DoNotOptimize(p.memory.peak_bytes);
  }
  state.counters["us_per_profile"] = seconds * 1e6 / static_cast<double>(state.iterations());
  state.counters["ops"] = static_cast<double>(build_gpt(config, options).num_ops());
  state.counters["events"] = static_cast<double>(events);
  state.counters["matmul_TFLOP_step"] = tflop;
  state.counters["peak_GB"] = peak_gb;
}

BENCHMARK_CAPTURE(BM_ProfileGpt, gpt3_175b, "gpt3-175b", Recompute::none)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ProfileGpt, gpt3_175b_recompute, "gpt3-175b", Recompute::full)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ProfileGpt, gpt2_124m, "gpt2-124m", Recompute::none)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
