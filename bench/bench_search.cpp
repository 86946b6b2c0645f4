// Search time of the joint DP (search/dp.hpp) against model depth and device count, with the
// tolerance carto-plan uses by default (0.02) and exact (0). Counters: frontier points, labels
// created, and the one-core search time per layer. Meshes are 1-D here (the DP's state sets on 2-D
// and 3-D meshes are large: see the README's status).
#include <benchmark/benchmark.h>

#include <carto/cost.hpp>
#include <carto/layers.hpp>
#include <carto/search/dp.hpp>
#include <carto/spec.hpp>

namespace {

using namespace carto;

void BM_SearchGpt(benchmark::State& state) {
  const std::int64_t layers = state.range(0);
  const std::int64_t devices = state.range(1);
  const double tolerance = static_cast<double>(state.range(2)) / 1000.0;
  const Graph g = build_gpt(
      {.name = "bench", .layers = layers, .hidden = 256, .heads = 8, .vocab = 1024, .seq = 128},
      {.batch = 8});
  const DeviceMesh mesh = parse_mesh("x=" + std::to_string(devices));
  const HardwareProfile hw = hardware_for_devices(find_hardware_profile("h100"), devices);
  std::size_t points = 0;
  std::size_t labels = 0;
  for (auto _ : state) {
    const DpResult r = dp_frontier(g, mesh, hw, {.tolerance = tolerance});
    points = r.frontier.size();
    labels = r.labels_created;
    benchmark::DoNotOptimize(points);
  }
  state.counters["frontier"] = static_cast<double>(points);
  state.counters["labels"] = static_cast<double>(labels);
  state.counters["s/layer"] = benchmark::Counter(
      static_cast<double>(layers),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SearchGpt)
    ->ArgsProduct({{1, 2, 4}, {2, 8}, {0, 20}})
    ->ArgNames({"layers", "devices", "tolerance_permille"})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
