// carto/search/brute_force.hpp — the whole-assignment cost of a plan, and the frontier by brute
// force: the independent reference the DP is tested against.
//
// Design note: evaluate_point prices one complete choice (a strategy per op, a checkpoint flag per
// group) from evaluate_assignment (search/evaluate.hpp) and the memory model written in
// search/dp.hpp's design note, applied to the whole assignment at once:
//   time = m · (evaluate_assignment's time − its parameter-gradient reductions + ZeRO-3 gathers
//               + the forward time of every checkpointed block) + the reductions,
//   peak = P + Σ_g K_g + max(0, max_g X_g),
// with A_g the group's saved bytes as evaluate_assignment counts them, T_g the largest excursion of
// its ops (its strategy's temporaries, ZeRO-3's gathered parameters, its moves' copies), K_g = A_g
// and X_g = T_g, or for a checkpointed block K_g = its input's buffer and X_g = max_k(A_≤k + T_k)
// − K_g (A_≤k: what the block's ops up to k save; op k's backward runs while they are held, those
// of later ops already freed). brute_force_frontier
// enumerates every assignment (with every checkpoint pattern the options allow) and keeps the
// Pareto-optimal points. It is exponential: for tests on graphs of a few ops.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "carto/search/dp.hpp"
#include "carto/search/evaluate.hpp"

namespace carto {

struct PointCost {
  double time_s = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t persistent_bytes = 0;  // P: parameters, gradients, optimizer states
  std::int64_t kept_bytes = 0;        // Σ K_g: activations kept from forward to backward
  std::int64_t extra_bytes = 0;       // max X_g: the largest excursion above them
};

// The cost of one complete choice: `chosen[k]` is op k's strategy.
inline PointCost evaluate_point(const Graph& g, const DeviceMesh& mesh, const HardwareProfile& hw,
                                const DpOptions& options, const std::vector<Strategy>& chosen,
                                const std::vector<bool>& checkpointed) {
  const AssignmentCost cost = evaluate_assignment(g, mesh, hw, chosen);
  const double m = static_cast<double>(options.micro_batches);

  double sync = 0;
  for (const GroupCost& grp : cost.groups) {
    for (const CommEvent& e : grp.collectives) {
      if (e.role == CommRole::gradient_sync) sync += e.time_s;
    }
  }
  // Parameters: persistent bytes and ZeRO-3 gathers, in the spec of their first consumer.
  std::int64_t persistent = 0;
  double gathers = 0;
  double regather = 0;  // ZeRO-3 forward gathers rerun by checkpointed blocks
  std::vector<bool> seen(g.tensors().size(), false);
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const Op& op = g.ops()[k];
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const TensorId t = op.inputs[i];
      const TensorInfo& info = g.tensor(t);
      if (info.kind != TensorKind::parameter || seen[t.index()]) continue;
      seen[t.index()] = true;
      const ShardingSpec& stored = chosen[k].sharding.inputs[i];
      const std::int64_t elements = local_shape(info.shape, stored, mesh).numel();
      persistent +=
          detail::zero_persistent_bytes(elements, element_bytes(info), options.precision,
                                        options.zero_stage, replication_factor(stored, mesh));
      if (options.zero_stage == 3) {
        const double one_way =
            detail::zero3_gather_time(elements * element_bytes(info), stored, mesh, hw);
        gathers += 2 * one_way;
        const std::size_t gi = static_cast<std::size_t>(op.group);
        if (gi < checkpointed.size() && checkpointed[gi]) regather += one_way;
      }
    }
  }
  double recompute = 0;
  std::int64_t kept = 0;
  std::int64_t extra = 0;
  for (std::size_t gi = 0; gi < g.groups().size(); ++gi) {
    const OpGroup& grp = g.groups()[gi];
    const GroupCost& gc = cost.groups[gi];
    std::int64_t temp = 0;  // max_k T_k
    std::int64_t held = 0;  // A_≤k: what the group has saved up to op k
    std::int64_t peak = 0;  // max_k (A_≤k + T_k): op k's backward runs with A_≤k still held
    for (std::int32_t k = grp.first_op; k < grp.end_op; ++k) {
      const Strategy& s = chosen[static_cast<std::size_t>(k)];
      const std::int64_t t = s.memory.temporaries +
                             (options.zero_stage == 3 ? parameter_bytes(g, s, mesh) : 0) +
                             cost.move_transient_by_op[static_cast<std::size_t>(k)];
      temp = std::max(temp, t);
      held += cost.saved_by_op[static_cast<std::size_t>(k)];
      peak = std::max(peak, held + t);
    }
    if (gi < checkpointed.size() && checkpointed[gi]) {
      recompute += m * (gc.compute_forward_s + gc.comm_forward_s);
      // The block input, stored in its producer's output spec.
      std::int64_t input_bytes = 0;
      if (const TensorId x = detail::group_input(g, static_cast<std::int32_t>(gi)); x.valid()) {
        const TensorInfo& info = g.tensor(x);
        const ShardingSpec& spec = chosen[info.producer.index()].sharding.output;
        input_bytes = local_shape(info.shape, spec, mesh).numel() * element_bytes(info);
      }
      kept += input_bytes;
      extra = std::max(extra, std::max(peak, gc.saved_bytes) - input_bytes);
    } else {
      kept += gc.saved_bytes;
      extra = std::max(extra, temp);
    }
  }
  PointCost p;
  p.time_s = m * (cost.time_s() - sync + gathers + regather) + sync + recompute;
  p.peak_bytes = persistent + kept + extra;
  p.persistent_bytes = persistent;
  p.kept_bytes = kept;
  p.extra_bytes = extra;
  return p;
}

// The same with strategies named by their index in enumerate_strategies order.
inline PointCost evaluate_point(const Graph& g, const DeviceMesh& mesh, const HardwareProfile& hw,
                                const DpOptions& options, const std::vector<std::size_t>& strategy,
                                const std::vector<bool>& checkpointed) {
  const StrategyOptions sopt{.precision = options.precision,
                             .layernorm_stats = options.layernorm_stats,
                             .dropout_masks = options.dropout_masks};
  std::vector<Strategy> chosen;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    chosen.push_back(
        enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh, sopt).at(strategy.at(k)));
  }
  return evaluate_point(g, mesh, hw, options, chosen, checkpointed);
}

// The DP's search-space rule (detail::reads_stored_spec): a view, and an elementwise op whose
// input is not stored Partial, reads its first input in the spec it is stored in.
inline bool reads_follow_stored_specs(const Graph& g, const DeviceMesh& mesh,
                                      const StrategyOptions& sopt,
                                      const std::vector<std::size_t>& strategy,
                                      std::vector<std::vector<Strategy>>& cache) {
  auto strategy_of = [&](std::size_t k) -> const Strategy& {
    if (cache[k].empty())
      cache[k] = enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh, sopt);
    return cache[k][strategy[k]];
  };
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const Op& op = g.ops()[k];
    const TensorInfo& in = g.tensor(op.inputs[0]);
    if (!in.producer.valid()) continue;
    const ShardingSpec& stored = strategy_of(in.producer.index()).sharding.output;
    if (detail::reads_stored_spec(op.kind, stored) &&
        !(stored == strategy_of(k).sharding.inputs[0]))
      return false;
  }
  return true;
}

// Every assignment (strategies within the filter, checkpoint flags as the options allow); Pareto
// frontier of (time, peak), increasing time. Fails past `limit` assignments.
inline std::vector<DpPoint> brute_force_frontier(const Graph& g, const DeviceMesh& mesh,
                                                 const HardwareProfile& hw,
                                                 const DpOptions& options,
                                                 const StrategyFilter& filter = {},
                                                 std::size_t limit = 2'000'000) {
  const StrategyOptions sopt{.precision = options.precision,
                             .layernorm_stats = options.layernorm_stats,
                             .dropout_masks = options.dropout_masks};
  std::vector<std::vector<std::size_t>> allowed(g.num_ops());
  double count = 1;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    if (k < filter.allowed.size() && !filter.allowed[k].empty()) {
      allowed[k] = filter.allowed[k];
    } else {
      const std::size_t n =
          enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh, sopt).size();
      for (std::size_t i = 0; i < n; ++i) allowed[k].push_back(i);
    }
    count *= static_cast<double>(allowed[k].size());
  }
  std::vector<std::size_t> blocks;
  for (std::size_t gi = 0; gi < g.groups().size(); ++gi) {
    if (g.groups()[gi].kind == GroupKind::transformer_block) blocks.push_back(gi);
  }
  const bool vary = options.checkpoint == CheckpointChoice::search;
  const std::size_t patterns = vary ? (std::size_t{1} << blocks.size()) : 1;
  count *= static_cast<double>(patterns);
  if (count > static_cast<double>(limit)) {
    detail::fail("carto: brute force over ", count, " assignments exceeds the limit of ", limit);
  }
  std::vector<DpPoint> points;
  std::vector<std::size_t> pos(g.num_ops(), 0);
  std::vector<std::vector<Strategy>> cache(g.num_ops());
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    cache[k] = enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh, sopt);
  }
  for (;;) {
    std::vector<std::size_t> strategy(g.num_ops());
    for (std::size_t k = 0; k < g.num_ops(); ++k) strategy[k] = allowed[k][pos[k]];
    const bool in_search_space = reads_follow_stored_specs(g, mesh, sopt, strategy, cache);
    for (std::size_t pattern = 0; in_search_space && pattern < patterns; ++pattern) {
      std::vector<bool> ckpt(g.groups().size(), false);
      for (std::size_t b = 0; b < blocks.size(); ++b) {
        ckpt[blocks[b]] =
            vary ? ((pattern >> b) & 1U) != 0 : options.checkpoint == CheckpointChoice::all;
      }
      std::vector<Strategy> chosen;
      for (std::size_t k = 0; k < g.num_ops(); ++k) chosen.push_back(cache[k][strategy[k]]);
      const PointCost c = evaluate_point(g, mesh, hw, options, chosen, ckpt);
      points.push_back({.time_s = c.time_s,
                        .peak_bytes = c.peak_bytes,
                        .strategy = strategy,
                        .checkpointed = ckpt});
    }
    std::size_t k = g.num_ops();
    bool advanced = false;
    while (k-- > 0) {
      if (++pos[k] < allowed[k].size()) {
        advanced = true;
        break;
      }
      pos[k] = 0;
    }
    if (!advanced) break;
  }
  std::sort(points.begin(), points.end(), [](const DpPoint& a, const DpPoint& b) {
    return a.time_s != b.time_s ? a.time_s < b.time_s : a.peak_bytes < b.peak_bytes;
  });
  std::vector<DpPoint> frontier;
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  for (DpPoint& p : points) {
    if (p.peak_bytes < best) {
      best = p.peak_bytes;
      frontier.push_back(std::move(p));
    }
  }
  detail::drop_time_ties(frontier);
  return frontier;
}

}  // namespace carto
