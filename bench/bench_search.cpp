// Search time of the joint search (search/outer_loop.hpp over search/dp.hpp), one core, and the
// price of the standard search space (search/space.hpp).
//
//  - BM_SearchGrid: search() as carto-plan runs it by default (standard space, memory resolution
//    0.02, time bounds) with every joint choice on — every logical mesh of 1-3 axes, ZeRO stages
//    0-3, micro-batch counts 1, 2, 4, 8 of a global batch of 1536 sequences, checkpointing per
//    class of blocks — on GPT-3-sized blocks (hidden 12288, 96 heads, sequence 2048, vocab 50257)
//    against depth (12, 48, 96, 128 layers) and device count (8, 64, 512, 4096), H100 hardware,
//    80 GiB per device.
//  - BM_SearchGoal: the goal, gpt3-175b on 1024 devices (8 per node), h100, 80 GiB, batch 1536:
//    the command line's choices (one micro-batch count) and every joint choice (1, 2, 4, 8).
//  - BM_SearchLlama: the same command-line search for llama3-8b on 64 devices, beside the goal,
//    against PyTorch autoparallel's ~50 s for that problem; and with fused attention and
//    micro-batch counts 1-16, which finds a plan (85.9 s here: vs_autoparallel_50s 0.58).
//  - BM_SpacePrice: the fastest plan under five budgets in the standard space against the full
//    space (exact, ZeRO 0, one DP each), on problems where the full DP finishes: counter
//    max_price_pct = the largest (standard / full - 1) over the budgets, in percent.
//  - BM_DpOneMesh: one DP (one mesh, ZeRO 2, 8 micro-batches, ε 0.02) on the same blocks, to show
//    where the time goes: depth against 1-, 2- and 3-axis meshes of 8 devices.
// A point that runs past kLimitS is stopped by SearchOptions::time_limit_s and reported as skipped
// with the reason. A search whose answer is "no plan fits" has run (counter fits = 0). Counters:
// frontier points, configurations searched of all, and for the goal the speed-up over the anchors
// (ColossalAI's ILP capped at 600 s, PyTorch autoparallel's ~50 s for Llama3-8B on 64 GPUs, Alpa's
// ~40 min compile at 64 GPUs): anchor seconds / ours.
#include <benchmark/benchmark.h>

#include <carto/cost.hpp>
#include <carto/layers.hpp>
#include <carto/search.hpp>
#include <carto/spec.hpp>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <limits>
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

// carto-plan's defaults (standard space, ε 0.02, time bounds) with the given micro-batch counts.
SearchOptions joint_options(std::vector<std::int64_t> micro_batches) {
  SearchOptions o;
  o.memory_budget = kBudget;
  o.zero_stages = {0, 1, 2, 3};
  o.micro_batches = std::move(micro_batches);
  o.checkpoint = CheckpointChoice::search;
  o.tolerance = 0.02;
  o.max_mesh_axes = 3;
  o.time_limit_s = kLimitS;
  return o;
}

// Runs one search per iteration; false (and the benchmark skipped) when it passed the limit. A
// search that ends with "no plan fits" has finished (its answer is the least memory any plan
// needs): it counts as run, with the counter fits = 0.
template <class MakeGraph>
bool timed_search(benchmark::State& state, const MakeGraph& make_graph, std::string_view name,
                  std::int64_t global_batch, std::int64_t devices, const HardwareProfile& hw,
                  const SearchOptions& options, Plan& plan) {
  bool fits = true;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    try {
      plan = search(make_graph, std::string(name), global_batch, devices, hw, options);
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

bool timed_search(benchmark::State& state, const GptConfig& config, std::int64_t devices,
                  const HardwareProfile& hw, const SearchOptions& options, Plan& plan) {
  auto make_graph = [&](std::int64_t micro_batch) {
    return build_gpt(config, {.batch = micro_batch});
  };
  return timed_search(state, make_graph, config.name, kGlobalBatch, devices, hw, options, plan);
}

void BM_SearchGrid(benchmark::State& state) {
  const std::int64_t layers = state.range(0);
  const std::int64_t devices = state.range(1);
  const HardwareProfile hw = hardware_for_devices(find_hardware_profile("h100"), devices);
  Plan plan;
  if (!timed_search(state, gpt3_like(layers), devices, hw, joint_options({1, 2, 4, 8}), plan))
    return;
  state.counters["frontier"] = static_cast<double>(plan.frontier.size());
  state.counters["configurations"] = static_cast<double>(plan.configurations);
  state.counters["searched"] = static_cast<double>(plan.configurations_searched);
}
BENCHMARK(BM_SearchGrid)
    ->ArgsProduct({{12, 48, 96, 128}, {8, 64, 512, 4096}})
    ->ArgNames({"layers", "devices"})
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

void BM_SearchGoal(benchmark::State& state) {
  const bool every_micro_batch = state.range(0) != 0;
  HardwareProfile hw = find_hardware_profile("h100");
  if (!hw.links.empty()) hw.links.front().devices = 8;
  hw = hardware_for_devices(hw, 1024);
  Plan plan;
  const auto start = std::chrono::steady_clock::now();
  const SearchOptions options = joint_options(
      every_micro_batch ? std::vector<std::int64_t>{1, 2, 4, 8} : std::vector<std::int64_t>{1});
  if (!timed_search(state, *find_model("gpt3-175b"), 1024, hw, options, plan)) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                   static_cast<double>(state.iterations());
  state.counters["frontier"] = static_cast<double>(plan.frontier.size());
  state.counters["configurations"] = static_cast<double>(plan.configurations);
  state.counters["searched"] = static_cast<double>(plan.configurations_searched);
  state.counters["step_time_s"] = plan.step_time_s;
  state.counters["vs_colossalai_600s"] = 600.0 / s;
  state.counters["vs_autoparallel_50s"] = 50.0 / s;
  state.counters["vs_alpa_2400s"] = 2400.0 / s;
}
BENCHMARK(BM_SearchGoal)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("every_micro_batch")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

// Llama3-8B on 64 devices (8 per node), h100, 80 GiB, global batch 512 of sequence 8192:
// carto-plan's `plan --model llama3-8b --devices 64 --gpus-per-node 8 --hardware h100 --memory
// 80GiB --batch 512 --seq 8192` (one micro-batch count), the problem PyTorch autoparallel plans in
// about 50 s (its announcement, as the issue cites it); counter vs_autoparallel_50s = 50 s / ours.
// Its own limit: ten times the anchor. fused_micro_batches 0: that command as it is (materialized
// attention, one micro-batch count: no plan fits, and the search names the least memory); 1: with
// `--attention fused --micro-batches 1,2,4,8,16`, which returns a plan.
void BM_SearchLlama(benchmark::State& state) {
  const LlamaConfig config = *find_llama("llama3-8b");
  HardwareProfile hw = find_hardware_profile("h100");
  if (!hw.links.empty()) hw.links.front().devices = 8;
  hw = hardware_for_devices(hw, 64);
  const bool fused = state.range(0) == 1;
  SearchOptions options = fused ? joint_options({1, 2, 4, 8, 16}) : joint_options({1});
  options.time_limit_s = 500;
  const AttentionKind attention = fused ? AttentionKind::fused : AttentionKind::materialized;
  auto make_graph = [&](std::int64_t micro_batch) {
    return build_llama(config, {.batch = micro_batch, .attention = attention});
  };
  Plan plan;
  const auto start = std::chrono::steady_clock::now();
  if (!timed_search(state, make_graph, config.name, 512, 64, hw, options, plan)) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                   static_cast<double>(state.iterations());
  state.SetLabel("llama3-8b, 64 devices, mesh " + to_string(plan.mesh));
  state.counters["frontier"] = static_cast<double>(plan.frontier.size());
  state.counters["configurations"] = static_cast<double>(plan.configurations);
  state.counters["searched"] = static_cast<double>(plan.configurations_searched);
  state.counters["step_time_s"] = plan.step_time_s;
  state.counters["vs_autoparallel_50s"] = 50.0 / s;
}
BENCHMARK(BM_SearchLlama)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("fused_micro_batches")
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

// The price of the standard space: problems where the full space's exact DP finishes.
struct PriceProblem {
  const char* name;
  GptConfig config;
  std::int64_t batch;
  const char* mesh;
};
const PriceProblem kPriceProblems[] = {
    {"small GPT, 12 blocks, x=8",
     {.name = "small", .layers = 12, .hidden = 256, .heads = 8, .vocab = 1024, .seq = 128},
     8,
     "x=8"},
    {"small GPT, 1 block, x=2,y=2",
     {.name = "small", .layers = 1, .hidden = 256, .heads = 8, .vocab = 1024, .seq = 128},
     8,
     "x=2,y=2"},
    {"small GPT, 2 blocks, x=2,y=2",
     {.name = "small", .layers = 2, .hidden = 256, .heads = 8, .vocab = 1024, .seq = 128},
     8,
     "x=2,y=2"},
    {"small GPT, 1 block, x=2,y=4",
     {.name = "small", .layers = 1, .hidden = 256, .heads = 8, .vocab = 1024, .seq = 128},
     8,
     "x=2,y=4"},
    {"small GPT, 2 blocks, x=2,y=4",
     {.name = "small", .layers = 2, .hidden = 256, .heads = 8, .vocab = 1024, .seq = 128},
     8,
     "x=2,y=4"},
    {"GPT-3-shaped, 4 blocks, x=8", gpt3_like(4), kGlobalBatch / 8, "x=8"},
};

void BM_SpacePrice(benchmark::State& state) {
  const PriceProblem& p = kPriceProblems[state.range(0)];
  state.SetLabel(p.name);
  const DeviceMesh mesh = parse_mesh(p.mesh);
  const Graph g = build_gpt(p.config, {.batch = p.batch});
  const HardwareProfile hw = hardware_for_devices(find_hardware_profile("h100"), 8);
  const auto deadline = [] {
    return std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               std::chrono::duration<double>(kLimitS));
  };
  DpResult standard, full;
  double standard_s = 0, full_s = 0;
  for (auto _ : state) {
    try {
      auto start = std::chrono::steady_clock::now();
      standard = dp_frontier(g, mesh, hw, {.space = SearchSpace::standard, .deadline = deadline()});
      standard_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      start = std::chrono::steady_clock::now();
      full = dp_frontier(g, mesh, hw, {.space = SearchSpace::full, .deadline = deadline()});
      full_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } catch (const Error& e) {
      state.SkipWithError(
          (std::string("stopped at the ") + std::to_string(kLimitS) + " s limit: " + e.what())
              .c_str());
      return;
    }
  }
  // Budgets from the least memory any standard plan needs to the fastest full plan's memory.
  const std::int64_t low = standard.frontier.back().peak_bytes;
  const std::int64_t high = std::max(low, full.frontier.front().peak_bytes);
  auto best = [](const DpResult& r, std::int64_t budget) {
    for (const DpPoint& q : r.frontier) {
      if (q.peak_bytes <= budget) return q.time_s;
    }
    return std::numeric_limits<double>::infinity();
  };
  double price = 0;
  for (const double f : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const auto budget = low + static_cast<std::int64_t>(f * static_cast<double>(high - low));
    price = std::max(price, best(standard, budget) / best(full, budget) - 1);
  }
  state.counters["max_price_pct"] = 100 * price;
  state.counters["standard_s"] = standard_s;
  state.counters["full_s"] = full_s;
  state.counters["standard_points"] = static_cast<double>(standard.frontier.size());
  state.counters["full_points"] = static_cast<double>(full.frontier.size());
}
BENCHMARK(BM_SpacePrice)
    ->DenseRange(0, static_cast<int>(std::size(kPriceProblems)) - 1)
    ->ArgName("problem")
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
    DpOptions o{.zero_stage = 2, .micro_batches = 8, .tolerance = 0.02};
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
