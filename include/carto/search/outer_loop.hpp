// carto/search/outer_loop.hpp — the joint search: the DP (search/dp.hpp) over every outer choice,
// merged into one Plan.
//
// Design note (DESIGN.md §6). search() runs the DP once per combination of the outer choices —
// every logical mesh for the device count (each factorisation into 1 to 3 axes of size ≥ 2, in the
// order given by mesh_candidates, the last axis innermost), every ZeRO stage in
// SearchOptions::zero_stages, every micro-batch count in SearchOptions::micro_batches that divides
// the global batch — merges the frontiers, and returns the fastest plan whose peak fits the budget,
// with the merged frontier of the plans that fit (the DP drops partial plans over the budget, which
// is exact for them and makes a tight budget cheaper to search). Once one budgeted DP has found
// nothing, each later configuration first runs an exact DP of the peak alone
// (DpOptions::least_memory; a fraction of a budgeted frontier's cost on 1-2-axis meshes, about
// as much on 3-axis ones): one whose least memory is over the budget is skipped. The check is
// left out where it would most likely be wasted, when the configuration of the same mesh and
// ZeRO stage with fewer micro-batches has a plan that fits (it prunes only, so no result
// changes).
// No plan fits: a carto::Error that states the least memory any plan needs and which plan that is
// (the least of those DPs, run also for the configurations not yet tried, in increasing
// parameter bytes until those alone reach the least found). Two reductions keep that exact while
// running fewer DPs: of ZeRO stages 0-1 only the higher listed is searched (stage 0 takes the same
// time with no less memory; the chosen plan is then reported under the lowest listed stage of 0-2
// it fits at as fast), stages 2 and 3 on their own, and of meshes that differ only by a renaming of
// axes with the same size and link, only
// the first (detail::mesh_cost_class; in the standard space the renaming must keep the axes' order,
// as its specs do).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "carto/cost/hardware.hpp"
#include "carto/search/dp.hpp"
#include "carto/search/model.hpp"
#include "carto/search/plan.hpp"
#include "carto/search/price.hpp"
#include "carto/search/space.hpp"
#include "carto/spec/mesh.hpp"
#include "carto/util/units.hpp"

namespace carto {

// Every logical mesh of `devices`: factorisations into 1-3 axes of size >= 2 (the last innermost),
// named x, y, z. One device: the mesh {x:1}.
inline std::vector<DeviceMesh> mesh_candidates(std::int64_t devices, std::size_t max_axes = 3) {
  if (devices < 1) detail::fail("carto: the device count must be positive; got ", devices);
  std::vector<DeviceMesh> out;
  if (devices == 1) return {parse_mesh("x=1")};
  std::vector<std::int64_t> sizes;
  std::function<void(std::int64_t)> rec = [&](std::int64_t rest) {
    if (rest == 1) {
      StaticVector<MeshAxis, kMaxMeshAxes> axes;
      constexpr std::string_view kNames[] = {"x", "y", "z"};
      for (std::size_t i = 0; i < sizes.size(); ++i)
        axes.push_back({AxisName(kNames[i]), sizes[i]});
      out.push_back(detail::mesh_from_axes(axes));
      return;
    }
    if (sizes.size() == max_axes) return;
    for (std::int64_t f = 2; f <= rest; ++f) {
      if (rest % f != 0) continue;
      sizes.push_back(f);
      rec(rest / f);
      sizes.pop_back();
    }
  };
  rec(devices);
  return out;
}

// One DP search() ran (SearchOptions::progress): which, for which configuration, and what it cost
// and found.
struct SearchEvent {
  enum class Kind : std::uint8_t {
    least_time,    // the configuration's least time, memory ignored (its bound)
    least_memory,  // its least memory, time ignored (whether any plan of it fits)
    frontier,      // the budgeted DP: its plans that fit
  };
  Kind kind = Kind::frontier;
  DeviceMesh mesh{};
  int zero_stage = 0;
  std::int64_t micro_batches = 1;
  double seconds = 0;            // this DP's wall time
  double elapsed_s = 0;          // since search() began, at its end
  std::size_t labels = 0;        // labels it created (DpResult::labels_created)
  std::size_t points = 0;        // points on its frontier
  double least_time_s = 0;       // least_time: the bound (infinity: no plan)
  std::int64_t least_bytes = 0;  // least_memory: the least peak
};

constexpr std::string_view to_string_view(SearchEvent::Kind k) {
  switch (k) {
    case SearchEvent::Kind::least_time: return "least-time";
    case SearchEvent::Kind::least_memory: return "least-memory";
    case SearchEvent::Kind::frontier: return "frontier";
  }
  return "?";
}

struct SearchOptions {
  Precision precision = Precision::mixed_bf16;
  LayerNormStats layernorm_stats = LayerNormStats::counted;
  // Regenerated in backward, as carto's runtime does; stored: Korthikanti et al.'s 1-byte masks.
  DropoutMasks dropout_masks = DropoutMasks::regenerated;
  std::optional<DType> gradient_reduction{};  // StrategyOptions::gradient_reduction
  std::int64_t memory_budget = std::numeric_limits<std::int64_t>::max();  // bytes per device
  std::vector<int> zero_stages{0, 1, 2, 3};
  std::vector<std::int64_t> micro_batches{1};  // candidates; each must divide the global batch
  CheckpointChoice checkpoint = CheckpointChoice::search;
  SearchSpace space = SearchSpace::standard;  // search/space.hpp
  double tolerance = 0;                       // the memory resolution ε (DpOptions::tolerance)
  std::vector<Pin> pins{};
  std::size_t max_mesh_axes = 3;  // logical meshes of 1 .. max_mesh_axes axes
  double time_limit_s = 0;        // > 0: search() fails once it has run this long
  // The logical meshes to try; empty: every factorisation of the device count (max_mesh_axes).
  std::vector<DeviceMesh> meshes{};
  // Skip the configurations (micro-batch count, mesh, ZeRO stage) whose least time, whatever the
  // memory, is no less than the fastest plan that fits found in another: exact for the plan
  // returned; the frontier then holds only the configurations searched. false: every one.
  bool time_bounds = true;
  // Called after each DP the search runs, on the calling thread (carto-plan --verbose prints
  // them); empty: nothing is reported.
  std::function<void(const SearchEvent&)> progress{};
};

namespace detail {

// The deadline of a search started at `start` with SearchOptions::time_limit_s `limit_s` (0: none).
// A limit beyond what the clock can hold (about 292 years) is no limit; a negative or NaN one is an
// error.
inline std::chrono::steady_clock::time_point search_deadline(
    std::chrono::steady_clock::time_point start, double limit_s) {
  using Clock = std::chrono::steady_clock;
  if (!(limit_s >= 0)) {
    fail("carto: SearchOptions::time_limit_s is ", limit_s,
         "; give a positive number of seconds, or 0 for no limit");
  }
  if (limit_s == 0) return Clock::time_point::max();
  const double room = std::chrono::duration<double>(Clock::time_point::max() - start).count();
  if (limit_s >= room * 0.5) return Clock::time_point::max();
  return start +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_s));
}

// The ZeRO stages whose DPs are run for `stages`. Stages 0 and 1 differ only in a parameter's
// optimizer states (sharded over its replicas at stage 1, rounded up, so never more) and in
// AdamW's time (stage 1 updates that shard only): every plan under stage 0 takes at least the
// time and the memory of the same plan under stage 1, so the higher of 0-1 present stands for both.
// Stage 2 also shards the gradients, but holds each op's parameter gradients whole while that
// op's backward reduces them (search/gradient_memory.hpp): a plan whose peak lies at such an op
// (a replicated embedding or head under tensor parallelism, say) can need more memory under
// stage 2 than under stage 1, so both run, as does stage 3 (which adds gathers).
inline std::vector<int> zero_stages_to_run(const std::vector<int>& stages) {
  std::vector<int> out;
  int low = -1;
  for (const int z : stages) {
    if (z == 0 || z == 1) {
      low = std::max(low, z);
    } else if (std::find(out.begin(), out.end(), z) == out.end()) {
      out.push_back(z);  // 2, 3, or a stage the DP rejects by name
    }
  }
  std::sort(out.begin(), out.end());
  if (low >= 0) out.insert(out.begin(), low);
  return out;
}

// A key equal for two meshes whose DPs give the same frontier: the link level of every axis in
// axis order, and per level the sizes of its axes. Renaming axes of one level (and size) onto
// each other maps every spec, strategy and move of one mesh onto the other's at the same cost:
// a collective's time depends only on its axis's size and link (cost/collectives.hpp), and
// ZeRO-3's gathers, which run innermost first, keep their order across levels, while within one
// link level a chain of ring all-gathers costs the same in any order (the (n-1)/n terms
// telescope to the product's). Pins name axes, so a search with pins keeps every mesh. With
// `ordered` (the standard space's mesh order) a renaming must also keep the axes' order, so
// the key is each axis's level and size in axis order.
inline std::string mesh_cost_class(const DeviceMesh& mesh, const HardwareProfile& hw,
                                   bool ordered = false) {
  std::vector<std::pair<std::size_t, std::int64_t>> sizes;
  std::string key;
  for (std::size_t i = 0; i < mesh.num_axes(); ++i) {
    const std::size_t level = axis_link_level(mesh, i, hw);
    key += ordered ? concat(level, ':', mesh.axis(i).size, ',') : concat(level, ',');
    sizes.emplace_back(level, mesh.axis(i).size);
  }
  std::sort(sizes.begin(), sizes.end());
  key += '|';
  for (const auto& [level, size] : sizes) key += concat(level, ':', size, ',');
  return key;
}

// When every micro-batch count tried leaves more than one sequence per micro-batch, a hint that
// more micro-batches (fewer sequences each, so less activation memory) may fit; else "".
inline std::string more_micro_batches_hint(const std::vector<std::int64_t>& tried,
                                           std::int64_t global_batch) {
  std::int64_t most = 0;
  std::string list;
  for (const std::int64_t m : tried) {
    if (m < 1 || global_batch % m != 0) continue;
    most = std::max(most, m);
    list += (list.empty() ? "" : ",") + concat(m);
  }
  if (most == 0 || most >= global_batch) return "";
  std::string next = list;
  for (std::int64_t m = most * 2; m <= std::min(global_batch, most * 16); m *= 2) {
    if (global_batch % m == 0) next += "," + concat(m);
  }
  return concat("; micro-batch counts tried: ", list,
                "; more micro-batches carry fewer sequences each and need less activation "
                "memory: try ",
                next, " (SearchOptions::micro_batches, carto-plan --micro-batches)");
}

// When attention is materialized: what the softmax outputs (the attention probabilities, one
// s × s matrix per head and sequence) of one block take per device in the plan `strategy`
// (indices in enumerate_strategies order), if that is at least a quarter of `peak`, with the
// remedy; else "". A fused (flash-style) attention keeps none of them, which is what long
// sequences need.
inline std::string fused_attention_hint(const Graph& g, const DeviceMesh& mesh,
                                        const DpOptions& options,
                                        const std::vector<std::size_t>& strategy,
                                        std::int64_t peak) {
  StrategyCache cache(mesh, strategy_options(options));
  std::vector<std::int64_t> by_group(g.groups().size(), 0);
  for (std::size_t k = 0; k < g.num_ops() && k < strategy.size(); ++k) {
    const Op& op = g.ops()[k];
    if (op.kind != OpKind::softmax || op.group < 0) continue;
    const Strategy st = cache.at(g, OpId{static_cast<std::int32_t>(k)}, strategy[k]);
    const TensorInfo& out = g.tensor(op.output);
    by_group[static_cast<std::size_t>(op.group)] +=
        local_shape(out.shape, st.sharding.output, mesh).numel() * element_bytes(out);
  }
  const std::int64_t block = *std::max_element(by_group.begin(), by_group.end());
  if (block == 0 || block < peak / 4) return "";
  return concat("; one block's attention probabilities (materialized attention) take ",
                format_bytes(block),
                " per device in that plan: a fused, flash-style attention keeps none "
                "(ProfileOptions::attention = AttentionKind::fused, carto-plan "
                "--attention fused)");
}

}  // namespace detail

// The joint search (see the design note). `make_graph(micro_batch)` builds the graph for one
// micro-batch size; `global_batch` is split into m micro-batches for each candidate m.
template <class MakeGraph>
Plan search(MakeGraph&& make_graph, std::string_view model, std::int64_t global_batch,
            std::int64_t devices, const HardwareProfile& hw, const SearchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = detail::search_deadline(start, options.time_limit_s);
  // The time limit holds everywhere the search spends time: graph building, strategy
  // enumeration and pricing between the DPs, as well as inside them (DpOptions::deadline).
  auto check_time = [&](std::string_view during) {
    if (deadline != std::chrono::steady_clock::time_point::max() &&
        std::chrono::steady_clock::now() > deadline) {
      detail::fail("carto: the search passed its time limit of ", options.time_limit_s, " s ",
                   during);
    }
  };
  struct Best {
    bool found = false;
    double time = 0;
    DpPoint point;
    DeviceMesh mesh;
    DpOptions dp;
    std::int64_t micro = 0;
  };
  Best best, least;
  least.point.peak_bytes = std::numeric_limits<std::int64_t>::max();
  std::vector<FrontierPoint> all;
  bool any_micro = false;
  const std::vector<DeviceMesh> meshes =
      options.meshes.empty() ? mesh_candidates(devices, options.max_mesh_axes) : options.meshes;
  for (const DeviceMesh& mesh : meshes) {
    if (mesh.num_devices() != devices) {
      detail::fail("carto: SearchOptions::meshes holds mesh ", mesh, " of ", mesh.num_devices(),
                   " devices; the search is for ", devices, " devices");
    }
  }
  // The configurations: one micro-batch count, one mesh of each cost class, one ZeRO stage.
  struct Config {
    std::size_t graph = 0;  // into graphs
    std::int64_t micro = 1;
    DeviceMesh mesh{};
    StrategyFilter filter{};
    int zero = 0;
    double bound = 0;               // no more than the least time of any of its plans
    bool exact_bound = false;       // bound is that least time (else its lower stage's)
    std::int64_t parameters = 0;    // the least persistent bytes of any of its plans
    std::int64_t least_bytes = -1;  // the least peak of any of its plans (-1: not yet known)
    bool fits = false;              // a plan of it is known to fit the budget
  };
  std::vector<Graph> graphs;
  std::vector<Config> configs;
  for (const std::int64_t m : options.micro_batches) {
    if (m < 1 || global_batch % m != 0) continue;
    any_micro = true;
    check_time("before building a graph");
    graphs.push_back(make_graph(global_batch / m));
    check_time("while building the graphs");
    const Graph& g = graphs.back();
    std::vector<std::string> classes;
    for (const DeviceMesh& mesh : meshes) {
      if (options.pins.empty()) {  // one mesh of each cost class (see mesh_cost_class)
        std::string key = detail::mesh_cost_class(mesh, hw, options.space == SearchSpace::standard);
        if (std::find(classes.begin(), classes.end(), key) != classes.end()) continue;
        classes.push_back(std::move(key));
      }
      const StrategyOptions sopt{.precision = options.precision,
                                 .layernorm_stats = options.layernorm_stats,
                                 .dropout_masks = options.dropout_masks,
                                 .gradient_reduction = options.gradient_reduction};
      const StrategyFilter filter = pin_filter(g, mesh, options.pins, sopt);
      check_time("while enumerating strategies");
      for (const int zero : detail::zero_stages_to_run(options.zero_stages)) {
        configs.push_back(
            {.graph = graphs.size() - 1, .micro = m, .mesh = mesh, .filter = filter, .zero = zero});
      }
    }
  }
  auto dp_options = [&](const Config& c, std::int64_t budget) {
    return DpOptions{.precision = options.precision,
                     .layernorm_stats = options.layernorm_stats,
                     .dropout_masks = options.dropout_masks,
                     .gradient_reduction = options.gradient_reduction,
                     .zero_stage = c.zero,
                     .micro_batches = c.micro,
                     .checkpoint = options.checkpoint,
                     .space = options.space,
                     .tolerance = options.tolerance,
                     .memory_budget = budget,
                     .deadline = deadline};
  };
  // One DP of configuration c, reported to options.progress.
  auto run_dp = [&](const Config& c, const DpOptions& dp, SearchEvent::Kind kind) {
    const auto t0 = std::chrono::steady_clock::now();
    DpResult r = dp_frontier(graphs[c.graph], c.mesh, hw, dp, c.filter);
    if (options.progress) {
      const auto t1 = std::chrono::steady_clock::now();
      SearchEvent e{.kind = kind,
                    .mesh = c.mesh,
                    .zero_stage = c.zero,
                    .micro_batches = c.micro,
                    .seconds = std::chrono::duration<double>(t1 - t0).count(),
                    .elapsed_s = std::chrono::duration<double>(t1 - start).count(),
                    .labels = r.labels_created,
                    .points = r.frontier.size()};
      if (kind == SearchEvent::Kind::least_time) {
        e.least_time_s = r.frontier.empty() ? std::numeric_limits<double>::infinity()
                                            : r.frontier.front().time_s;
      }
      if (kind == SearchEvent::Kind::least_memory && !r.frontier.empty())
        e.least_bytes = r.frontier.front().peak_bytes;
      options.progress(e);
    }
    return r;
  };
  auto record = [&](const Config& c, const DpOptions& dp, const DpResult& r) {
    for (const DpPoint& p : r.frontier) {
      all.push_back({.time_s = p.time_s,
                     .peak_bytes = p.peak_bytes,
                     .mesh = to_string(c.mesh),
                     .zero_stage = c.zero,
                     .micro_batches = c.micro});
      if (p.peak_bytes <= options.memory_budget && (!best.found || p.time_s < best.time)) {
        best = {.found = true,
                .time = p.time_s,
                .point = p,
                .mesh = c.mesh,
                .dp = dp,
                .micro = c.micro};
      }
      if (p.peak_bytes < least.point.peak_bytes) {
        least = {.found = true,
                 .time = p.time_s,
                 .point = p,
                 .mesh = c.mesh,
                 .dp = dp,
                 .micro = c.micro};
      }
    }
  };
  // With time bounds: each configuration's least time (a DP of time alone, without checkpointing
  // unless every block must be), then the configurations in increasing bound, stopping at the
  // first whose bound is no less than the fastest plan that fits found so far — none of its plans
  // could be faster. Exact for the fastest plan that fits; the frontier then lacks the plans of
  // the configurations skipped, all slower than the plan returned.
  std::size_t searched = 0;
  // A configuration's least time, memory ignored: without checkpointing unless every block must
  // be (recomputation only adds time).
  auto least_time = [&](const Config& c) {
    DpOptions dp = dp_options(c, std::numeric_limits<std::int64_t>::max());
    dp.least_time = true;
    dp.tolerance = 0;
    if (dp.checkpoint == CheckpointChoice::search) dp.checkpoint = CheckpointChoice::none;
    const DpResult r = run_dp(c, dp, SearchEvent::Kind::least_time);
    return r.frontier.empty() ? std::numeric_limits<double>::infinity() : r.frontier.front().time_s;
  };
  // Stages 1 and 2 price every plan at the same time (the same AdamW shard, the gradients reduced
  // as stage 0 does), and stage 3 adds gathers to it; stage 0's AdamW runs on every replica's
  // elements, so its least time bounds neither.
  auto same_time_stage = [](int zero) { return zero == 1 || zero == 2; };
  // The stage-1-2 configuration of c's mesh and micro-batch count whose plans can fit, if any.
  auto lower_stage = [&](const Config& c) -> const Config* {
    for (const Config& o : configs) {
      if (same_time_stage(o.zero) && o.graph == c.graph && o.mesh == c.mesh &&
          o.parameters <= options.memory_budget)
        return &o;
    }
    return nullptr;
  };
  // A configuration's least memory, time ignored (an exact DP of the peak alone, run once):
  // before a budgeted DP, it tells whether any plan of the configuration fits (the budgeted DP of
  // one that does not finds nothing, at the cost of a whole frontier), and when none fits
  // anywhere it names the least memory. It keeps the leanest plan seen in `least`.
  auto least_memory = [&](Config& c) {
    if (c.least_bytes >= 0) return c.least_bytes;
    DpOptions dp = dp_options(c, std::numeric_limits<std::int64_t>::max());
    dp.least_memory = true;
    dp.tolerance = 0;
    const DpResult r = run_dp(c, dp, SearchEvent::Kind::least_memory);
    c.least_bytes = std::numeric_limits<std::int64_t>::max();
    for (const DpPoint& p : r.frontier) {
      c.least_bytes = std::min(c.least_bytes, p.peak_bytes);
      if (p.peak_bytes < least.point.peak_bytes) {
        least = {.found = true, .time = 0, .point = p, .mesh = c.mesh, .dp = dp, .micro = c.micro};
      }
    }
    return c.least_bytes;
  };
  for (Config& c : configs) {
    c.parameters = least_parameter_bytes(graphs[c.graph], c.mesh, hw,
                                         dp_options(c, options.memory_budget), c.filter);
    check_time("while pricing the configurations' parameters");
  }
  auto sweep = [&](std::int64_t budget) {
    if (options.time_bounds) {
      // ZeRO-3 adds parameter gathers to every plan of stage 2 and changes nothing else in time,
      // so a stage-1-2 configuration's bound bounds the stage-3 one of its mesh and micro-batch
      // count; the stage-3 configuration's own bound is computed only if that one is not enough.
      // Stages 1 and 2 take the same time for every plan: one least-time DP serves both.
      for (Config& c : configs) {
        if (c.parameters > budget) {  // no plan fits: never searched
          c.bound = std::numeric_limits<double>::infinity();
          continue;
        }
        if (c.zero == 3 && lower_stage(c) != nullptr) continue;
        const auto same_time = std::find_if(configs.begin(), configs.end(), [&](const Config& o) {
          return &o != &c && same_time_stage(o.zero) && same_time_stage(c.zero) &&
                 o.graph == c.graph && o.mesh == c.mesh && o.exact_bound;
        });
        if (same_time != configs.end()) {
          c.bound = same_time->bound;
        } else {
          c.bound = least_time(c);
        }
        c.exact_bound = true;
      }
      for (Config& c : configs) {
        if (!c.exact_bound && c.parameters <= budget) c.bound = lower_stage(c)->bound;
      }
      std::stable_sort(configs.begin(), configs.end(),
                       [](const Config& a, const Config& b) { return a.bound < b.bound; });
    }
    // Least-memory checks start once a budgeted DP has found nothing (the budget is tight): until
    // then every configuration searched had a plan that fits, and a check would only add time.
    bool check_fit = false;
    for (Config& c : configs) {
      if (options.time_bounds && best.found && c.bound >= best.time) break;
      if (c.parameters > budget) continue;  // its parameters alone are over the budget
      if (options.time_bounds && best.found && !c.exact_bound) {
        c.bound = least_time(c);
        c.exact_bound = true;
        if (c.bound >= best.time) continue;
      }
      // The check is skipped where it would most likely be wasted: when the configuration of
      // the same mesh and stage with fewer micro-batches (more activation memory each) has a
      // plan that fits. It only saves work, so skipping it changes no result.
      const bool fewer_fit = std::any_of(configs.begin(), configs.end(), [&](const Config& o) {
        return o.fits && o.graph != c.graph && o.micro < c.micro && o.zero == c.zero &&
               o.mesh == c.mesh;
      });
      if (check_fit && !fewer_fit && least_memory(c) > budget) continue;  // no plan of it fits
      const DpOptions dp = dp_options(c, budget);
      const DpResult r = run_dp(c, dp, SearchEvent::Kind::frontier);
      c.fits = !r.frontier.empty();
      check_fit = check_fit || r.frontier.empty();
      record(c, dp, r);
      ++searched;
    }
  };
  if (!any_micro) {
    detail::fail("carto: no micro-batch count in the candidates divides the global batch ",
                 global_batch);
  }
  sweep(options.memory_budget);
  if (!best.found) {
    // Only to name the least memory: each DP minimizing the peak alone, in increasing least
    // parameter bytes, until those alone are no less than the least memory found (exact).
    std::stable_sort(configs.begin(), configs.end(),
                     [](const Config& a, const Config& b) { return a.parameters < b.parameters; });
    for (Config& c : configs) {
      if (least.found && c.parameters >= least.point.peak_bytes) break;
      least_memory(c);
    }
    std::string attention_hint;
    {
      DpOptions dp = least.dp;
      dp.least_memory = false;
      const Graph lg = make_graph(global_batch / least.micro);
      least.time =
          evaluate_point(lg, least.mesh, hw, dp, least.point.strategy, least.point.checkpointed)
              .time_s;
      attention_hint = detail::fused_attention_hint(lg, least.mesh, dp, least.point.strategy,
                                                    least.point.peak_bytes);
    }
    detail::fail(
        "carto: no plan fits the memory budget of ", format_bytes(options.memory_budget),
        " per device; the least memory any plan needs is ", format_bytes(least.point.peak_bytes),
        " (", least.point.peak_bytes, " bytes): mesh ", least.mesh, ", ZeRO stage ",
        least.dp.zero_stage, ", ", least.micro, " micro-batches, step time ", least.time, " s",
        detail::more_micro_batches_hint(options.micro_batches, global_batch), attention_hint);
  }
  // The merged frontier over every outer choice.
  std::sort(all.begin(), all.end(), [](const FrontierPoint& a, const FrontierPoint& b) {
    return a.time_s != b.time_s ? a.time_s < b.time_s : a.peak_bytes < b.peak_bytes;
  });
  Plan plan;
  std::int64_t lowest = std::numeric_limits<std::int64_t>::max();
  for (const FrontierPoint& p : all) {
    if (p.peak_bytes < lowest) {
      lowest = p.peak_bytes;
      plan.frontier.push_back(p);
    }
  }
  const Graph g = make_graph(global_batch / best.micro);
  // The best plan under the lowest listed ZeRO stage of 0-2 that it fits at and that is as fast
  // (a lower stage runs AdamW on more elements, so it may be slower).
  if (best.dp.zero_stage <= 2) {
    std::vector<int> lower = options.zero_stages;
    std::sort(lower.begin(), lower.end());
    for (const int z : lower) {
      if (z < 0 || z >= best.dp.zero_stage) continue;
      DpOptions dp = best.dp;
      dp.zero_stage = z;
      const PointCost at =
          evaluate_point(g, best.mesh, hw, dp, best.point.strategy, best.point.checkpointed);
      if (at.peak_bytes <= options.memory_budget && at.time_s <= best.point.time_s * (1 + 1e-9)) {
        best.dp = dp;
        break;
      }
    }
  }
  plan.model = std::string(model);
  plan.configurations = static_cast<std::int64_t>(configs.size());
  plan.configurations_searched = static_cast<std::int64_t>(searched);
  set_fingerprint(plan, g);
  detail::describe_plan(plan, g, best.mesh, hw, best.dp, best.point);
  plan.search_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return plan;
}

}  // namespace carto
