// carto/search/plan.hpp — the search's answer: a Plan, the outer loops of the joint search, pins,
// and JSON save/load.
//
// Design note (DESIGN.md §6). search() runs the DP (search/dp.hpp) once per combination of the
// outer choices — every logical mesh for the device count (each factorisation into 1 to 3 axes of
// size ≥ 2, in the order given by mesh_candidates, the last axis innermost), every ZeRO stage in
// SearchOptions::zero_stages, every micro-batch count in SearchOptions::micro_batches that divides
// the global batch — merges the frontiers, and returns the fastest plan whose peak fits the budget,
// with the merged frontier of the plans that fit (the DP drops partial plans over the budget, which
// is exact for them and makes a tight budget cheaper to search). No plan fits: a carto::Error that
// states the least memory any plan needs and which plan that is (found by a second sweep whose
// DPs minimize the peak alone, DpOptions::least_memory). Two reductions keep that exact while
// running fewer DPs: of ZeRO stages 0-2 only the highest listed is searched (the others take the
// same time with no less memory; the chosen plan is then reported under the lowest listed stage it
// fits at), and of meshes that differ only by a renaming of axes with the same size and link, only
// the first (detail::mesh_cost_class). SearchOptions::axes_in_mesh_order narrows every op to the
// strategies whose specs list a dim's axes in mesh order (mesh_order_filter): a stated smaller
// space, searched exactly.
//
// Op names: "<group>.<kind><n>", n counting ops of that kind within the group (block.3.einsum0 is
// the fused QKV projection of block 3). A pin "NAME=SPEC" keeps only the strategies of the named op
// whose output spec is SPEC; '*' in NAME matches any text (block.*.einsum0). A pin naming no op, or
// leaving an op without strategies on some mesh, is an error that names the pin.
//
// JSON (format "carto-plan/1"): model fingerprint (ops, groups, tensors, shapes), mesh, zero_stage,
// micro_batches, ops (name, strategy, input_specs, output_spec, checkpointed), predicted time and
// memory with their breakdowns, frontier, search_time_s. load_plan checks the format, every field
// and that the plan fits the given graph and mesh, naming the field that does not.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "carto/search/brute_force.hpp"
#include "carto/search/dp.hpp"
#include "carto/search/evaluate.hpp"
#include "carto/search/strategy.hpp"
#include "carto/spec/text.hpp"
#include "carto/util/json.hpp"
#include "carto/util/units.hpp"

namespace carto {

// "block.3.einsum0" for every op, in graph order.
inline std::vector<std::string> op_names(const Graph& g) {
  std::vector<std::string> names(g.num_ops());
  for (std::size_t gi = 0; gi < g.groups().size(); ++gi) {
    const OpGroup& grp = g.groups()[gi];
    std::map<OpKind, int> count;
    for (std::int32_t k = grp.first_op; k < grp.end_op; ++k) {
      const OpKind kind = g.ops()[static_cast<std::size_t>(k)].kind;
      names[static_cast<std::size_t>(k)] =
          detail::concat(grp.name, '.', to_string_view(kind), count[kind]++);
    }
  }
  for (std::size_t k = 0; k < names.size(); ++k) {
    if (names[k].empty()) names[k] = detail::concat("op", k, '.', to_string_view(g.ops()[k].kind));
  }
  return names;
}

struct Pin {
  std::string op;    // a name, '*' matching any text
  std::string spec;  // the output spec text
};

inline Pin parse_pin(std::string_view text) {
  const std::size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size()) {
    detail::fail("carto: pin '", text, "' is not OP=SPEC (e.g. block.*.einsum0=R,R,S(tp))");
  }
  Pin p{std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
  (void)parse_spec(p.spec);  // fails naming the position
  return p;
}

namespace detail {
inline bool glob_match(std::string_view pattern, std::string_view text) {
  if (pattern.empty()) return text.empty();
  if (pattern[0] == '*') {
    for (std::size_t i = 0; i <= text.size(); ++i) {
      if (glob_match(pattern.substr(1), text.substr(i))) return true;
    }
    return false;
  }
  return !text.empty() && pattern[0] == text[0] && glob_match(pattern.substr(1), text.substr(1));
}
}  // namespace detail

// The filter the pins give on one mesh; throws naming a pin that matches no op or no strategy.
inline StrategyFilter pin_filter(const Graph& g, const DeviceMesh& mesh,
                                 const std::vector<Pin>& pins, const StrategyOptions& sopt = {}) {
  StrategyFilter f;
  if (pins.empty()) return f;
  f.allowed.resize(g.num_ops());
  const std::vector<std::string> names = op_names(g);
  for (const Pin& pin : pins) {
    const ShardingSpec want = parse_spec(pin.spec);
    bool any = false;
    for (std::size_t k = 0; k < g.num_ops(); ++k) {
      if (!detail::glob_match(pin.op, names[k])) continue;
      any = true;
      const std::vector<Strategy> all =
          enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh, sopt);
      std::vector<std::size_t> keep;
      const std::vector<std::size_t> before = f.allowed[k];
      for (std::size_t i = 0; i < all.size(); ++i) {
        const bool allowed =
            before.empty() || std::find(before.begin(), before.end(), i) != before.end();
        if (allowed && all[i].sharding.output == want) keep.push_back(i);
      }
      if (keep.empty()) {
        detail::fail("carto: pin '", pin.op, '=', pin.spec, "' leaves op ", names[k], " (",
                     to_string_view(g.ops()[k].kind), ", output ",
                     g.tensor(g.ops()[k].output).shape, ") without a strategy on mesh ", mesh,
                     "; pin an output spec it can produce");
      }
      f.allowed[k] = keep;
    }
    if (!any)
      detail::fail("carto: pin '", pin.op, '=', pin.spec,
                   "' names no op; op names look like block.0.einsum0");
  }
  return f;
}

// Whether every dim of `spec` that is split over several axes lists them in mesh order (outermost
// first).
inline bool axes_in_mesh_order(const ShardingSpec& spec, const DeviceMesh& mesh) {
  for (const AxisList& dim : spec.dims()) {
    for (std::size_t i = 1; i < dim.size(); ++i) {
      if (mesh.index_of(dim[i - 1]) > mesh.index_of(dim[i])) return false;
    }
  }
  return true;
}

// `base` (all strategies, or the pins' subset) narrowed to the strategies whose input and output
// specs keep a dim's axes in mesh order (SearchOptions::axes_in_mesh_order). Tensors are then
// stored in such specs only; moves between them may still pass through others. An op left without
// a strategy (a pin that asks for another order) is an error naming it.
inline StrategyFilter mesh_order_filter(const Graph& g, const DeviceMesh& mesh, StrategyFilter base,
                                        const StrategyOptions& sopt = {}) {
  base.allowed.resize(g.num_ops());
  const std::vector<std::string> names = op_names(g);
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const std::vector<Strategy> all =
        enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh, sopt);
    std::vector<std::size_t> from = base.allowed[k];
    if (from.empty()) {
      for (std::size_t i = 0; i < all.size(); ++i) from.push_back(i);
    }
    std::vector<std::size_t> keep;
    for (const std::size_t i : from) {
      const OpSharding& sh = all[i].sharding;
      bool ordered = axes_in_mesh_order(sh.output, mesh);
      for (const ShardingSpec& in : sh.inputs) ordered = ordered && axes_in_mesh_order(in, mesh);
      if (ordered) keep.push_back(i);
    }
    if (keep.empty()) {
      detail::fail("carto: op ", names[k],
                   " has no strategy left whose specs keep a dim's axes in mesh order on mesh ",
                   mesh,
                   "; drop the pin that asks for another order or turn "
                   "SearchOptions::axes_in_mesh_order off");
    }
    base.allowed[k] = std::move(keep);
  }
  return base;
}

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

struct SearchOptions {
  Precision precision = Precision::mixed_bf16;
  LayerNormStats layernorm_stats = LayerNormStats::counted;
  DropoutMasks dropout_masks = DropoutMasks::stored;  // regenerated: what carto's runtime does
  std::int64_t memory_budget = std::numeric_limits<std::int64_t>::max();  // bytes per device
  std::vector<int> zero_stages{0, 1, 2, 3};
  std::vector<std::int64_t> micro_batches{1};  // candidates; each must divide the global batch
  CheckpointChoice checkpoint = CheckpointChoice::search;
  double tolerance = 0;
  std::vector<Pin> pins{};
  std::size_t max_mesh_axes = 3;  // logical meshes of 1 .. max_mesh_axes axes
  double time_limit_s = 0;        // > 0: search() fails once it has run this long
  // The logical meshes to try; empty: every factorisation of the device count (max_mesh_axes).
  std::vector<DeviceMesh> meshes{};
  // A stated restriction of the search space: a dim split over several axes lists them in mesh
  // order (mesh_order_filter). On 3-axis meshes a (B, S, H) tensor then has 64 specs instead of
  // 106 and the DP does 3-4 times less work; docs/search-performance.md measures what it costs.
  bool axes_in_mesh_order = false;
};

// The tensors' dim names and extents in tensor order, hashed (FNV-1a, 64 bits) to 16 hex digits:
// a plan file remembers the sizes it was made for.
inline std::string shape_fingerprint(const Graph& g) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  for (const TensorInfo& t : g.tensors()) {
    mix(t.shape.rank());
    for (const DimExtent& d : t.shape.dims()) {
      for (char c : d.name.view()) mix(static_cast<unsigned char>(c));
      mix(static_cast<std::uint64_t>(d.extent));
    }
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[static_cast<std::size_t>(i)] = kHex[h & 0xfu];
  return out;
}

struct PlanOp {
  std::string name;
  std::string strategy;  // to_string(Strategy)
  std::vector<std::string> input_specs;
  std::string output_spec;
  bool checkpointed = false;  // its group is a checkpointed block
  friend bool operator==(const PlanOp&, const PlanOp&) = default;
};

struct FrontierPoint {
  double time_s = 0;
  std::int64_t peak_bytes = 0;
  std::string mesh;
  int zero_stage = 0;
  std::int64_t micro_batches = 1;
  friend bool operator==(const FrontierPoint&, const FrontierPoint&) = default;
};

struct Plan {
  std::string model;
  std::int64_t fingerprint_ops = 0;
  std::int64_t fingerprint_groups = 0;
  std::int64_t fingerprint_tensors = 0;
  std::string fingerprint_shapes{};  // shape_fingerprint of the graph the plan was made for
  DeviceMesh mesh{};

  int zero_stage = 0;
  std::int64_t micro_batches = 1;
  std::vector<PlanOp> ops{};
  std::vector<std::size_t> strategy{};  // per op: index in enumerate_strategies order
  double step_time_s = 0;
  std::map<std::string, double>
      time_breakdown{};  // compute, each collective kind, resharding, recompute, ...
  std::int64_t peak_memory_bytes = 0;
  std::map<std::string, std::int64_t> memory_breakdown{};  // persistent, kept_activations, extra
  std::vector<FrontierPoint> frontier{};
  double search_time_s = 0;
  friend bool operator==(const Plan&, const Plan&) = default;
};

// Records which model the plan is for: op, group and tensor counts and the shape fingerprint.
inline void set_fingerprint(Plan& plan, const Graph& g) {
  plan.fingerprint_ops = static_cast<std::int64_t>(g.num_ops());
  plan.fingerprint_groups = static_cast<std::int64_t>(g.groups().size());
  plan.fingerprint_tensors = static_cast<std::int64_t>(g.tensors().size());
  plan.fingerprint_shapes = shape_fingerprint(g);
}

namespace detail {

// Fills the plan's ops and breakdowns from one DP point.
inline void describe_plan(Plan& plan, const Graph& g, const DeviceMesh& mesh,
                          const HardwareProfile& hw, const DpOptions& options,
                          const DpPoint& point) {
  const StrategyOptions sopt{.precision = options.precision,
                             .layernorm_stats = options.layernorm_stats,
                             .dropout_masks = options.dropout_masks};
  const std::vector<std::string> names = op_names(g);
  std::vector<Strategy> chosen;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    chosen.push_back(enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh, sopt)
                         .at(point.strategy[k]));
  }
  plan.mesh = mesh;
  plan.zero_stage = options.zero_stage;
  plan.micro_batches = options.micro_batches;
  plan.strategy = point.strategy;
  plan.ops.clear();
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    PlanOp op;
    op.name = names[k];
    op.strategy = to_string(chosen[k]);
    for (const ShardingSpec& s : chosen[k].sharding.inputs) op.input_specs.push_back(to_string(s));
    op.output_spec = to_string(chosen[k].sharding.output);
    const std::int32_t gi = g.ops()[k].group;
    op.checkpointed = gi >= 0 && point.checkpointed[static_cast<std::size_t>(gi)];
    plan.ops.push_back(std::move(op));
  }
  const PointCost cost = evaluate_point(g, mesh, hw, options, chosen, point.checkpointed);
  plan.step_time_s = cost.time_s;
  plan.peak_memory_bytes = cost.peak_bytes;
  plan.memory_breakdown = {{"persistent_states", cost.persistent_bytes},
                           {"kept_activations", cost.kept_bytes},
                           {"largest_excursion", cost.extra_bytes}};
  // Time breakdown (one micro-batch pass times m, reductions once).
  const AssignmentCost a = evaluate_assignment(g, mesh, hw, chosen);
  const double m = static_cast<double>(options.micro_batches);
  std::map<std::string, double> t;
  double recompute = 0;
  for (std::size_t gi = 0; gi < a.groups.size(); ++gi) {
    const GroupCost& grp = a.groups[gi];
    t["compute"] += m * (grp.compute_forward_s + grp.compute_backward_s);
    if (gi < point.checkpointed.size() && point.checkpointed[gi]) {
      recompute += m * (grp.compute_forward_s + grp.comm_forward_s);
    }
    for (const CommEvent& e : grp.collectives) {
      const double w = e.role == CommRole::gradient_sync ? 1.0 : m;
      if (e.role == CommRole::reshard || e.role == CommRole::regather) {
        t["resharding"] += w * e.time_s;
      } else {
        t[std::string(to_string_view(e.kind))] += w * e.time_s;
      }
    }
  }
  t["recompute"] = recompute;
  double accounted = 0;
  for (const auto& [k, v] : t) accounted += v;
  t["zero3_gathers"] = std::max(0.0, cost.time_s - accounted);
  plan.time_breakdown = t;
}

}  // namespace detail

namespace detail {

// The ZeRO stages whose DPs are run for `stages`. Stages 0, 1 and 2 differ only in the persistent
// bytes of a parameter (optimizer states, then gradients, sharded over its replicas, rounded up,
// so never more), not in time or in any other memory: every plan under stage 0 or 1 takes the
// same time and at least the memory of the same plan under stage 2. So the highest of 0-2 present
// stands for the three (its frontier is the frontier of the three) and stage 3 (which adds
// gathers) is run on its own.
inline std::vector<int> zero_stages_to_run(const std::vector<int>& stages) {
  std::vector<int> out;
  int top = -1;
  for (const int z : stages) {
    if (z >= 0 && z <= 2) {
      top = std::max(top, z);
    } else if (std::find(out.begin(), out.end(), z) == out.end()) {
      out.push_back(z);  // 3, or a stage the DP rejects by name
    }
  }
  if (top >= 0) out.insert(out.begin(), top);
  return out;
}

// A key equal for two meshes whose DPs give the same frontier: the link level of every axis in
// axis order, and per level the sizes of its axes. Renaming axes of one level (and size) onto
// each other maps every spec, strategy and move of one mesh onto the other's at the same cost:
// a collective's time depends only on its axis's size and link (cost/collectives.hpp), and
// ZeRO-3's gathers, which run innermost first, keep their order across levels, while within one
// link level a chain of ring all-gathers costs the same in any order (the (n-1)/n terms
// telescope to the product's). Pins name axes, so a search with pins keeps every mesh. With
// `ordered` (SearchOptions::axes_in_mesh_order) a renaming must also keep the axes' order, so
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

}  // namespace detail

// The joint search (see the design note). `make_graph(micro_batch)` builds the graph for one
// micro-batch size; `global_batch` is split into m micro-batches for each candidate m.
template <class MakeGraph>
Plan search(MakeGraph&& make_graph, std::string_view model, std::int64_t global_batch,
            std::int64_t devices, const HardwareProfile& hw, const SearchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline =
      options.time_limit_s > 0
          ? start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(options.time_limit_s))
          : std::chrono::steady_clock::time_point::max();
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
  // Every outer choice; the DP drops partial plans over `budget`. `least_memory`: each DP minimizes
  // the peak alone (for the error of an infeasible budget).
  auto sweep = [&](std::int64_t budget, bool least_memory) {
    for (const std::int64_t m : options.micro_batches) {
      if (m < 1 || global_batch % m != 0) continue;
      any_micro = true;
      const Graph g = make_graph(global_batch / m);
      std::vector<std::string> classes;
      for (const DeviceMesh& mesh : meshes) {
        if (options.pins.empty()) {  // one mesh of each cost class (see mesh_cost_class)
          std::string key = detail::mesh_cost_class(mesh, hw, options.axes_in_mesh_order);
          if (std::find(classes.begin(), classes.end(), key) != classes.end()) continue;
          classes.push_back(std::move(key));
        }
        const StrategyOptions sopt{.precision = options.precision,
                                   .layernorm_stats = options.layernorm_stats,
                                   .dropout_masks = options.dropout_masks};
        StrategyFilter filter = pin_filter(g, mesh, options.pins, sopt);
        if (options.axes_in_mesh_order) filter = mesh_order_filter(g, mesh, filter, sopt);
        for (const int zero : detail::zero_stages_to_run(options.zero_stages)) {
          const DpOptions dp{.precision = options.precision,
                             .layernorm_stats = options.layernorm_stats,
                             .dropout_masks = options.dropout_masks,
                             .zero_stage = zero,
                             .micro_batches = m,
                             .checkpoint = options.checkpoint,
                             .tolerance = least_memory ? 0.0 : options.tolerance,
                             .memory_budget = budget,
                             .least_memory = least_memory,
                             .deadline = deadline};
          const DpResult r = dp_frontier(g, mesh, hw, dp, filter);
          for (const DpPoint& p : r.frontier) {
            all.push_back({.time_s = p.time_s,
                           .peak_bytes = p.peak_bytes,
                           .mesh = to_string(mesh),
                           .zero_stage = zero,
                           .micro_batches = m});
            if (p.peak_bytes <= options.memory_budget && (!best.found || p.time_s < best.time)) {
              best = {
                  .found = true, .time = p.time_s, .point = p, .mesh = mesh, .dp = dp, .micro = m};
            }
            if (p.peak_bytes < least.point.peak_bytes) {
              least = {
                  .found = true, .time = p.time_s, .point = p, .mesh = mesh, .dp = dp, .micro = m};
            }
          }
        }
      }
    }
  };
  sweep(options.memory_budget, false);
  if (!any_micro) {
    detail::fail("carto: no micro-batch count in the candidates divides the global batch ",
                 global_batch);
  }
  if (!best.found) {
    sweep(std::numeric_limits<std::int64_t>::max(), true);  // only to name the least memory
    {
      DpOptions dp = least.dp;
      dp.least_memory = false;
      least.time = evaluate_point(make_graph(global_batch / least.micro), least.mesh, hw, dp,
                                  least.point.strategy, least.point.checkpointed)
                       .time_s;
    }
    detail::fail("carto: no plan fits the memory budget of ", format_bytes(options.memory_budget),
                 " per device; the least memory any plan needs is ",
                 format_bytes(least.point.peak_bytes), " (", least.point.peak_bytes,
                 " bytes): mesh ", least.mesh, ", ZeRO stage ", least.dp.zero_stage, ", ",
                 least.micro, " micro-batches, step time ", least.time, " s");
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
  // The best plan under the lowest listed ZeRO stage of 0-2 that it fits at: the same time.
  if (best.dp.zero_stage <= 2) {
    std::vector<int> lower = options.zero_stages;
    std::sort(lower.begin(), lower.end());
    for (const int z : lower) {
      if (z < 0 || z >= best.dp.zero_stage) continue;
      DpOptions dp = best.dp;
      dp.zero_stage = z;
      if (evaluate_point(g, best.mesh, hw, dp, best.point.strategy, best.point.checkpointed)
              .peak_bytes <= options.memory_budget) {
        best.dp = dp;
        break;
      }
    }
  }
  plan.model = std::string(model);
  set_fingerprint(plan, g);
  detail::describe_plan(plan, g, best.mesh, hw, best.dp, best.point);
  plan.search_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return plan;
}

// ---- JSON
// ----------------------------------------------------------------------------------------

inline constexpr std::string_view kPlanFormat = "carto-plan/1";

inline Json to_json(const Plan& p) {
  Json j;
  j["format"] = kPlanFormat;
  j["model"] = p.model;
  j["fingerprint"]["ops"] = p.fingerprint_ops;
  j["fingerprint"]["groups"] = p.fingerprint_groups;
  j["fingerprint"]["tensors"] = p.fingerprint_tensors;
  j["fingerprint"]["shapes"] = p.fingerprint_shapes;
  j["mesh"] = Json::array();
  for (const MeshAxis& a : p.mesh.axes()) {
    Json axis;
    axis["name"] = std::string(a.name.view());
    axis["size"] = a.size;
    j["mesh"].push_back(axis);
  }
  j["zero_stage"] = p.zero_stage;
  j["micro_batches"] = p.micro_batches;
  j["ops"] = Json::array();
  for (std::size_t k = 0; k < p.ops.size(); ++k) {
    const PlanOp& op = p.ops[k];
    Json o;
    o["name"] = op.name;
    o["strategy"] = op.strategy;
    o["strategy_index"] = static_cast<std::int64_t>(p.strategy[k]);
    o["input_specs"] = Json::array();
    for (const std::string& s : op.input_specs) o["input_specs"].push_back(s);
    o["output_spec"] = op.output_spec;
    o["checkpointed"] = op.checkpointed;
    j["ops"].push_back(o);
  }
  j["predicted"]["step_time_s"] = p.step_time_s;
  for (const auto& [k, v] : p.time_breakdown) j["predicted"]["time_breakdown"][k] = v;
  j["predicted"]["peak_memory_bytes"] = p.peak_memory_bytes;
  for (const auto& [k, v] : p.memory_breakdown) j["predicted"]["memory_breakdown"][k] = v;
  if (p.memory_breakdown.empty()) j["predicted"]["memory_breakdown"] = Json::object();
  if (p.time_breakdown.empty()) j["predicted"]["time_breakdown"] = Json::object();
  j["frontier"] = Json::array();
  for (const FrontierPoint& f : p.frontier) {
    Json o;
    o["time_s"] = f.time_s;
    o["peak_memory_bytes"] = f.peak_bytes;
    o["mesh"] = f.mesh;
    o["zero_stage"] = f.zero_stage;
    o["micro_batches"] = f.micro_batches;
    j["frontier"].push_back(o);
  }
  j["search_time_s"] = p.search_time_s;
  return j;
}

namespace detail {
inline const Json& field(const Json& j, std::string_view path, std::string_view name) {
  if (!j.is_object()) fail("carto: plan file: '", path, "' is not an object");
  const Json* v = j.find(name);
  if (v == nullptr)
    fail("carto: plan file: field '", path, path.empty() ? "" : ".", name, "' is missing");
  return *v;
}
template <class F>
auto typed(const Json& j, std::string_view path, F&& get) {
  try {
    return get(j);
  } catch (const Error& e) {
    fail("carto: plan file: field '", path, "' has the wrong type (", e.what(), ")");
  }
}
}  // namespace detail

// Reads a plan and checks it against the graph and mesh it is meant for; errors name the field.
inline Plan plan_from_json(const Json& j, const Graph& g, const DeviceMesh* mesh = nullptr) {
  using detail::field;
  using detail::typed;
  auto str = [](const Json& v) { return v.as_string(); };
  auto i64 = [](const Json& v) { return v.as_int(); };
  auto dbl = [](const Json& v) { return v.as_double(); };
  Plan p;
  const std::string format = typed(field(j, "", "format"), "format", str);
  if (format != kPlanFormat) {
    detail::fail("carto: plan file: field 'format' is '", format, "'; this carto reads '",
                 kPlanFormat, "'");
  }
  p.model = typed(field(j, "", "model"), "model", str);
  const Json& fp = field(j, "", "fingerprint");
  p.fingerprint_ops = typed(field(fp, "fingerprint", "ops"), "fingerprint.ops", i64);
  p.fingerprint_groups = typed(field(fp, "fingerprint", "groups"), "fingerprint.groups", i64);
  p.fingerprint_tensors = typed(field(fp, "fingerprint", "tensors"), "fingerprint.tensors", i64);
  if (p.fingerprint_ops != static_cast<std::int64_t>(g.num_ops()) ||
      p.fingerprint_groups != static_cast<std::int64_t>(g.groups().size()) ||
      p.fingerprint_tensors != static_cast<std::int64_t>(g.tensors().size())) {
    detail::fail("carto: plan file: field 'fingerprint' describes a model of ", p.fingerprint_ops,
                 " ops, ", p.fingerprint_groups, " groups and ", p.fingerprint_tensors,
                 " tensors; this model has ", g.num_ops(), ", ", g.groups().size(), " and ",
                 g.tensors().size(), ": the plan was made for another model ('", p.model, "')");
  }
  p.fingerprint_shapes = typed(field(fp, "fingerprint", "shapes"), "fingerprint.shapes", str);
  if (p.fingerprint_shapes != shape_fingerprint(g)) {
    detail::fail("carto: plan file: field 'fingerprint.shapes' is ", p.fingerprint_shapes,
                 " but this model's tensors give ", shape_fingerprint(g),
                 ": the plan was made for the same layers with other sizes (batch, sequence, "
                 "hidden, heads or vocabulary) of '",
                 p.model, "'; search again for these sizes");
  }
  StaticVector<MeshAxis, kMaxMeshAxes> axes;
  const Json& mj = field(j, "", "mesh");
  for (const Json& a : typed(mj, "mesh", [](const Json& v) { return v.as_array(); })) {
    if (axes.size() == kMaxMeshAxes)
      detail::fail("carto: plan file: field 'mesh' has more than 3 axes");
    const std::string name = typed(field(a, "mesh[]", "name"), "mesh[].name", str);
    if (!is_valid_name(name))
      detail::fail("carto: plan file: field 'mesh[].name' is '", name, "', not an axis name");
    axes.push_back({AxisName(name), typed(field(a, "mesh[]", "size"), "mesh[].size", i64)});
  }
  p.mesh = detail::mesh_from_axes(axes);
  if (mesh != nullptr && !(*mesh == p.mesh)) {
    detail::fail("carto: plan file: field 'mesh' is ", p.mesh, " but the run's mesh is ", *mesh);
  }
  p.zero_stage = static_cast<int>(typed(field(j, "", "zero_stage"), "zero_stage", i64));
  if (p.zero_stage < 0 || p.zero_stage > 3)
    detail::fail("carto: plan file: field 'zero_stage' is ", p.zero_stage, "; use 0-3");
  p.micro_batches = typed(field(j, "", "micro_batches"), "micro_batches", i64);
  if (p.micro_batches < 1)
    detail::fail("carto: plan file: field 'micro_batches' must be at least 1");
  const auto& ops = typed(field(j, "", "ops"), "ops", [](const Json& v) { return v.as_array(); });
  if (ops.size() != g.num_ops()) {
    detail::fail("carto: plan file: field 'ops' has ", ops.size(), " entries; the model has ",
                 g.num_ops(), " ops");
  }
  const std::vector<std::string> names = op_names(g);
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const Json& o = ops[k];
    PlanOp op;
    op.name = typed(field(o, "ops[]", "name"), "ops[].name", str);
    if (op.name != names[k]) {
      detail::fail("carto: plan file: field 'ops[", k, "].name' is '", op.name,
                   "'; the model's op ", k, " is '", names[k], "'");
    }
    op.strategy = typed(field(o, "ops[]", "strategy"), "ops[].strategy", str);
    p.strategy.push_back(static_cast<std::size_t>(
        typed(field(o, "ops[]", "strategy_index"), "ops[].strategy_index", i64)));
    for (const Json& s : typed(field(o, "ops[]", "input_specs"), "ops[].input_specs",
                               [](const Json& v) { return v.as_array(); })) {
      op.input_specs.push_back(typed(s, "ops[].input_specs[]", str));
      (void)parse_spec(op.input_specs.back());
    }
    op.output_spec = typed(field(o, "ops[]", "output_spec"), "ops[].output_spec", str);
    (void)parse_spec(op.output_spec);
    op.checkpointed = typed(field(o, "ops[]", "checkpointed"), "ops[].checkpointed",
                            [](const Json& v) { return v.as_bool(); });
    p.ops.push_back(std::move(op));
  }
  const Json& pred = field(j, "", "predicted");
  p.step_time_s = typed(field(pred, "predicted", "step_time_s"), "predicted.step_time_s", dbl);
  p.peak_memory_bytes =
      typed(field(pred, "predicted", "peak_memory_bytes"), "predicted.peak_memory_bytes", i64);
  for (const auto& [k, v] :
       typed(field(pred, "predicted", "time_breakdown"), "predicted.time_breakdown",
             [](const Json& x) { return x.as_object(); })) {
    p.time_breakdown[k] = typed(v, "predicted.time_breakdown", dbl);
  }
  for (const auto& [k, v] :
       typed(field(pred, "predicted", "memory_breakdown"), "predicted.memory_breakdown",
             [](const Json& x) { return x.as_object(); })) {
    p.memory_breakdown[k] = typed(v, "predicted.memory_breakdown", i64);
  }
  for (const Json& f :
       typed(field(j, "", "frontier"), "frontier", [](const Json& v) { return v.as_array(); })) {
    p.frontier.push_back(
        {.time_s = typed(field(f, "frontier[]", "time_s"), "frontier[].time_s", dbl),
         .peak_bytes = typed(field(f, "frontier[]", "peak_memory_bytes"),
                             "frontier[].peak_memory_bytes", i64),
         .mesh = typed(field(f, "frontier[]", "mesh"), "frontier[].mesh", str),
         .zero_stage = static_cast<int>(
             typed(field(f, "frontier[]", "zero_stage"), "frontier[].zero_stage", i64)),
         .micro_batches =
             typed(field(f, "frontier[]", "micro_batches"), "frontier[].micro_batches", i64)});
  }
  p.search_time_s = typed(field(j, "", "search_time_s"), "search_time_s", dbl);
  return p;
}

inline std::ostream& operator<<(std::ostream& out, const Plan& p) {
  out << "plan for " << p.model << " on mesh " << p.mesh << ", ZeRO stage " << p.zero_stage << ", "
      << p.micro_batches << " micro-batch" << (p.micro_batches == 1 ? "" : "es") << "\n";
  out << "predicted step time " << p.step_time_s << " s, peak memory "
      << format_bytes(p.peak_memory_bytes) << " per device\n";
  for (const auto& [k, v] : p.time_breakdown) {
    if (v > 0) out << "  time " << k << ": " << v << " s\n";
  }
  std::size_t width = 4;
  for (const PlanOp& op : p.ops) width = std::max(width, op.name.size());
  for (const PlanOp& op : p.ops) {
    out << "  " << op.name << std::string(width - op.name.size() + 2, ' ') << op.strategy
        << (op.checkpointed ? "  [checkpointed]" : "") << "\n";
  }
  return out;
}

}  // namespace carto
