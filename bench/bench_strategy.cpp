// Enumerating and costing every strategy of every op of one GPT-3 175B transformer block
// (carto/search/strategy.hpp): enumerate_strategies (which runs op_cost per strategy) and
// strategy_time (roofline + α-β collectives) on 2-D and 3-D meshes of 64 and 512 devices.
// Counters: strategies per block, strategies per second, microseconds per block; beside them what
// the costing predicts: the fastest forward + backward time of the block's ops taken one by one
// (each op's cheapest strategy; resharding between ops not included).
#include <benchmark/benchmark.h>

#include <carto/cost.hpp>
#include <carto/layers.hpp>
#include <carto/search.hpp>
#include <carto/spec.hpp>
#include <chrono>
#include <limits>

namespace {

using namespace carto;

void BM_StrategiesOfBlock(benchmark::State& state, const char* mesh_text) {
  GptConfig config = *find_model("gpt3-175b");
  config.layers = 1;
  const Graph g = build_gpt(config, {.batch = 1});
  const DeviceMesh mesh = parse_mesh(mesh_text);
  const HardwareProfile hw = hardware_for_devices(hardware::h100(), mesh.num_devices());
  const OpGroup* block = nullptr;
  for (const OpGroup& grp : g.groups()) {
    if (grp.kind == GroupKind::transformer_block) block = &grp;
  }
  std::size_t strategies = 0;
  double best_sum_s = 0;
  double seconds = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    strategies = 0;
    best_sum_s = 0;
    for (std::int32_t k = block->first_op; k < block->end_op; ++k) {
      const std::vector<Strategy> all = enumerate_strategies(g, OpId{k}, mesh);
      double best = std::numeric_limits<double>::infinity();
      for (const Strategy& s : all) {
        const double t = strategy_time(s, mesh, hw).total_s();
        best = t < best ? t : best;
      }
      strategies += all.size();
      best_sum_s += best;
      benchmark::DoNotOptimize(best);
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const double per_block = seconds / static_cast<double>(state.iterations());
  state.counters["devices"] = static_cast<double>(mesh.num_devices());
  state.counters["strategies"] = static_cast<double>(strategies);
  state.counters["strategies_per_s"] = static_cast<double>(strategies) / per_block;
  state.counters["us_per_block"] = per_block * 1e6;
  state.counters["best_ops_ms"] = best_sum_s * 1e3;
}

BENCHMARK_CAPTURE(BM_StrategiesOfBlock, mesh_8x8, "8x8")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StrategiesOfBlock, mesh_4x4x4, "4x4x4")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StrategiesOfBlock, mesh_16x32, "16x32")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StrategiesOfBlock, mesh_8x8x8, "8x8x8")->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
