// carto/search/plan.hpp — the search's answer: a Plan (the chosen strategy of every op, its mesh,
// ZeRO stage, micro-batches and checkpointed blocks, with its predicted time and memory and the
// frontier it was chosen from), and how one DP point becomes one.
//
// Design note (DESIGN.md §6). A Plan is self-describing: every op's strategy and specs as text
// beside its strategy index, the search space and memory resolution it was found in, and a model
// fingerprint (op, group and tensor counts and a hash of every tensor's dims) that load_plan
// (search/plan_io.hpp) checks against the graph it is run on. Its predictions are re-derived from
// its choices alone by evaluate_point (search/price.hpp), never copied from the DP's labels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "carto/search/evaluate.hpp"
#include "carto/search/model.hpp"
#include "carto/search/price.hpp"
#include "carto/search/space.hpp"
#include "carto/search/strategy.hpp"
#include "carto/spec/text.hpp"

namespace carto {

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
  SearchSpace space = SearchSpace::standard;  // the space the search was exact in
  double tolerance = 0;                       // its memory resolution ε (0: exact)
  // What the plan was priced for and what a Trainer runs: the precision and the dtype parameter
  // gradients are all-reduced in (StrategyOptions::gradient_reduction, resolved). A Plan built
  // by hand trains in fp32 unless it says otherwise; search() records its options.
  Precision precision = Precision::fp32;
  DType gradient_reduction = DType::fp32;
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
  // Configurations (micro-batch count, mesh of a cost class, ZeRO stage) of the search, and how
  // many of them it searched (the others' least time was no better than the plan it found).
  std::int64_t configurations = 0;
  std::int64_t configurations_searched = 0;
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
  const StrategyOptions sopt = strategy_options(options);
  const std::vector<std::string> names = op_names(g);
  StrategyCache cache(mesh, sopt);
  std::vector<Strategy> chosen;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    chosen.push_back(cache.at(g, OpId{static_cast<std::int32_t>(k)}, point.strategy[k]));
  }
  plan.mesh = mesh;
  plan.space = options.space;
  plan.tolerance = options.tolerance;
  plan.precision = options.precision;
  plan.gradient_reduction = gradient_reduction_dtype(options.precision, options.gradient_reduction);
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
  t["optimizer"] = cost.optimizer_s;
  double accounted = 0;
  for (const auto& [k, v] : t) accounted += v;
  t["zero3_gathers"] = std::max(0.0, cost.time_s - accounted);
  plan.time_breakdown = t;
}

}  // namespace detail

}  // namespace carto
