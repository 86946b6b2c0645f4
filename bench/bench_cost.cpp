// Resharding costs: building the spec graph of one rank-3 tensor and solving all pairs of specs by
// Dijkstra (one single-source run per spec), on 2-D and 3-D meshes of 64 and 512 devices, on H100
// nodes joined by InfiniBand. Counters: specs (graph nodes), edges, pairs/s, µs per Dijkstra run,
// and the mean and largest all-pairs move time in ms as a sanity figure (the tensor is 16 GiB).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <carto/cost.hpp>
#include <carto/spec.hpp>
#include <cstddef>

namespace {

using namespace carto;

// (1024, 2048, 4096) bf16: every split of every dim over up to 512 devices is even, so the graph
// holds every spec the mesh allows.
const TensorShape kTensor = parse_shape("b=1024,s=2048,h=4096");

DeviceMesh mesh_of(std::int64_t which) {
  switch (which) {
    case 0: return parse_mesh("dp=8,tp=8");
    case 1: return parse_mesh("pp=4,dp=4,tp=4");
    default: return parse_mesh("pp=8,dp=8,tp=8");
  }
}

void BM_ReshardGraphBuild(benchmark::State& state) {
  const DeviceMesh mesh = mesh_of(state.range(0));
  const HardwareProfile hw = hardware_for_devices(hardware::h100(), mesh.num_devices());
  std::size_t specs = 0;
  std::size_t edges = 0;
  for (auto _ : state) {
    ReshardGraph g(kTensor, DType::bf16, mesh, hw);
    specs = g.size();
    edges = 0;
    for (std::size_t i = 0; i < g.size(); ++i) edges += g.edges(i).size();
    benchmark::DoNotOptimize(&g);
  }
  state.SetLabel(to_string(mesh) + " on " + hw.name);
  state.counters["specs"] = static_cast<double>(specs);
  state.counters["edges"] = static_cast<double>(edges);
}
BENCHMARK(BM_ReshardGraphBuild)->DenseRange(0, 2)->ArgName("mesh")->Unit(benchmark::kMicrosecond);

// All pairs from a fresh graph each iteration (no cached trees): N Dijkstra runs.
void BM_ReshardAllPairs(benchmark::State& state) {
  const DeviceMesh mesh = mesh_of(state.range(0));
  const HardwareProfile hw = hardware_for_devices(hardware::h100(), mesh.num_devices());
  std::size_t n = 0;
  double sum = 0;
  double worst = 0;
  std::size_t reachable = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ReshardGraph g(kTensor, DType::bf16, mesh, hw);
    state.ResumeTiming();
    n = g.size();
    sum = 0;
    worst = 0;
    reachable = 0;
    for (std::size_t a = 0; a < n; ++a)
      for (std::size_t b = 0; b < n; ++b) {
        const double t = g.time(a, b);
        if (g.reachable(a, b)) {
          sum += t;
          worst = std::max(worst, t);
          ++reachable;
        }
      }
    benchmark::DoNotOptimize(sum);
  }
  const double iters = static_cast<double>(state.iterations());
  state.SetLabel(to_string(mesh) + " on " + hw.name);
  state.counters["specs"] = static_cast<double>(n);
  state.counters["pairs/s"] =
      benchmark::Counter(static_cast<double>(n * n) * iters, benchmark::Counter::kIsRate);
  // Seconds per single-source run (printed with an SI prefix: "21.1u" is 21.1 µs).
  state.counters["s/dijkstra"] = benchmark::Counter(
      static_cast<double>(n) * iters, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["mean_ms"] = sum / static_cast<double>(std::max<std::size_t>(reachable, 1)) * 1e3;
  state.counters["max_ms"] = worst * 1e3;
}
BENCHMARK(BM_ReshardAllPairs)->DenseRange(0, 2)->ArgName("mesh")->Unit(benchmark::kMillisecond);

// One plan from a warm graph: the lookup and path reconstruction the search pays per query.
void BM_ReshardPlanWarm(benchmark::State& state) {
  const DeviceMesh mesh = mesh_of(state.range(0));
  const HardwareProfile hw = hardware_for_devices(hardware::h100(), mesh.num_devices());
  ReshardGraph g(kTensor, DType::bf16, mesh, hw);
  const std::size_t n = g.size();
  for (std::size_t a = 0; a < n; ++a) (void)g.time(a, 0);  // warm every tree
  std::size_t a = 0;
  std::size_t b = 1;
  std::size_t steps = 0;
  for (auto _ : state) {
    if (g.reachable(a, b)) {
      const ReshardPlan p = g.plan(a, b);
      steps += p.steps.size();
      benchmark::DoNotOptimize(p.time_s);
    }
    a = (a + 7) % n;
    b = (b + 13) % n;
  }
  state.SetLabel(to_string(mesh) + " on " + hw.name);
  state.counters["mean_steps"] =
      static_cast<double>(steps) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_ReshardPlanWarm)->DenseRange(0, 2)->ArgName("mesh");

}  // namespace

BENCHMARK_MAIN();
