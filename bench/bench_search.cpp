// Search time of the exact joint search (search/plan.hpp over search/dp.hpp), one core.
//
//  - BM_SearchGrid: search() with every joint choice on — every logical mesh of 1-3 axes, ZeRO
//    stages 0-3, micro-batch counts 1, 2, 4, 8 of a global batch of 1536 sequences, checkpointing
//    per block — on GPT-3-sized blocks (hidden 12288, 96 heads, sequence 2048, vocab 50257) against
//    depth (12, 48, 96, 128 layers) and device count (8, 64, 512, 4096), H100 hardware, 80 GiB per
//    device, exact (tolerance 0).
//  - BM_SearchGoal: the goal, gpt3-175b on 1024 devices (8 per node), h100, 80 GiB, batch
//    1536, the same joint choices; exact and with carto-plan's default tolerance (0.02).
//  - BM_DpOneMesh: one DP (one mesh, ZeRO 0, 8 micro-batches) on the same blocks, to show where the
//    time goes: depth against 1-, 2- and 3-axis meshes of 8 devices.
// A point that runs past kLimitS is stopped by SearchOptions::time_limit_s and reported as skipped
// with the reason; a point at least as deep on at least as many devices as a stopped one is skipped
// without running (the search space only grows). A search whose answer is "no plan fits" has run
// (counter fits = 0). Counters: frontier points, and for the goal the speed-up over the anchors of
// the issue (ColossalAI's ILP capped at 600 s, PyTorch autoparallel's ~50 s for Llama3-8B on 64
// GPUs, Alpa's ~40 min compile at 64 GPUs): anchor seconds / ours.
#include <benchmark/benchmark.h>

#include <carto/cost.hpp>
#include <carto/layers.hpp>
#include <carto/search.hpp>
#include <carto/spec.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace carto;

constexpr double kLimitS = 60;
constexpr std::int64_t kGlobalBatch = 1536;
constexpr std::int64_t kBudget = std::int64_t{80} << 30;

GptConfig gpt3_like(std::int64_t layers) {
  GptConfig c = *find_model("gpt3-175b");
  c.layers = layers;
  return c;
}

SearchOptions joint_options(double tolerance) {
  SearchOptions o;
  o.memory_budget = kBudget;
  o.zero_stages = {0, 1, 2, 3};
  o.micro_batches = {1, 2, 4, 8};
  o.checkpoint = CheckpointChoice::search;
  o.tolerance = tolerance;
  o.max_mesh_axes = 3;
  o.time_limit_s = kLimitS;
  return o;
}

// (layers, devices) of grid points stopped at the limit.
std::vector<std::pair<std::int64_t, std::int64_t>>& stopped() {
  static std::vector<std::pair<std::int64_t, std::int64_t>> points;
  return points;
}

// Runs one search per iteration; false (and the benchmark skipped) when it passed the limit. A
// search that ends with "no plan fits" has finished (its answer is the least memory any plan
// needs): it counts as run, with the counter fits = 0.
bool timed_search(benchmark::State& state, const GptConfig& config, std::int64_t devices,
                  const HardwareProfile& hw, const SearchOptions& options, Plan& plan) {
  auto make_graph = [&](std::int64_t micro_batch) {
    return build_gpt(config, {.batch = micro_batch});
  };
  bool fits = true;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    try {
      plan = search(make_graph, config.name, kGlobalBatch, devices, hw, options);
    } catch (const Error& e) {
      if (std::string_view(e.what()).find("no plan fits") != std::string_view::npos) {
        fits = false;
        continue;
      }
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      state.SkipWithError(("stopped after " + std::to_string(s) + " s (limit " +
                           std::to_string(kLimitS) + " s): " + e.what())
                              .c_str());
      return false;
    }
  }
  state.counters["fits"] = fits ? 1 : 0;
  return true;
}

void BM_SearchGrid(benchmark::State& state) {
  const std::int64_t layers = state.range(0);
  const std::int64_t devices = state.range(1);
  for (const auto& [l, d] : stopped()) {
    if (layers >= l && devices >= d) {
      state.SkipWithError(("not run: the search at " + std::to_string(l) + " layers on " +
                           std::to_string(d) + " devices already passed the " +
                           std::to_string(kLimitS) + " s limit")
                              .c_str());
      for (auto _ : state) {
      }
      return;
    }
  }
  const HardwareProfile hw = hardware_for_devices(find_hardware_profile("h100"), devices);
  Plan plan;
  if (!timed_search(state, gpt3_like(layers), devices, hw, joint_options(0), plan)) {
    stopped().emplace_back(layers, devices);
    return;
  }
  state.counters["frontier"] = static_cast<double>(plan.frontier.size());
  state.counters["meshes"] = static_cast<double>(mesh_candidates(devices).size());
}
BENCHMARK(BM_SearchGrid)
    ->ArgsProduct({{12, 48, 96, 128}, {8, 64, 512, 4096}})
    ->ArgNames({"layers", "devices"})
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

void BM_SearchGoal(benchmark::State& state) {
  const double tolerance = static_cast<double>(state.range(0)) / 1000.0;
  HardwareProfile hw = find_hardware_profile("h100");
  if (!hw.links.empty()) hw.links.front().devices = 8;
  hw = hardware_for_devices(hw, 1024);
  Plan plan;
  const auto start = std::chrono::steady_clock::now();
  if (!timed_search(state, *find_model("gpt3-175b"), 1024, hw, joint_options(tolerance), plan))
    return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                   static_cast<double>(state.iterations());
  state.counters["frontier"] = static_cast<double>(plan.frontier.size());
  state.counters["step_time_s"] = plan.step_time_s;
  state.counters["vs_colossalai_600s"] = 600.0 / s;
  state.counters["vs_autoparallel_50s"] = 50.0 / s;
  state.counters["vs_alpa_2400s"] = 2400.0 / s;
}
BENCHMARK(BM_SearchGoal)
    ->Arg(0)
    ->Arg(20)
    ->ArgName("tolerance_permille")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

void BM_DpOneMesh(benchmark::State& state) {
  const std::int64_t layers = state.range(0);
  const std::int64_t axes = state.range(1);
  const char* text = axes == 1 ? "x=8" : axes == 2 ? "x=2,y=4" : "x=2,y=2,z=2";
  const DeviceMesh mesh = parse_mesh(text);
  const Graph g = build_gpt(gpt3_like(layers), {.batch = kGlobalBatch / 8});
  const HardwareProfile hw = hardware_for_devices(find_hardware_profile("h100"), 8);
  DpResult r;
  for (auto _ : state) {
    DpOptions o{.micro_batches = 8};
    o.deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(kLimitS));
    try {
      r = dp_frontier(g, mesh, hw, o);
    } catch (const Error& e) {
      state.SkipWithError((std::string("stopped at the ") + std::to_string(kLimitS) +
                           " s limit on mesh " + text + ": " + e.what())
                              .c_str());
      return;
    }
  }
  state.counters["frontier"] = static_cast<double>(r.frontier.size());
  state.counters["labels"] = static_cast<double>(r.labels_created);
}
BENCHMARK(BM_DpOneMesh)
    ->ArgsProduct({{1, 12, 96}, {1, 2, 3}})
    ->ArgNames({"layers", "mesh_axes"})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
