// carto/search/price.hpp — the exact cost of one complete plan: what search() reports and what the
// tests re-derive every plan the DP returns from.
//
// Design note: evaluate_point prices one complete choice (a strategy per op, a checkpoint flag per
// group) from evaluate_assignment (search/evaluate.hpp) and the memory model written in
// search/model.hpp's design note, applied to the whole assignment at once:
//   time = m · (evaluate_assignment's time − its parameter-gradient reductions + ZeRO-3 gathers
//               + the forward time of every checkpointed block) + the reductions
//          + the optimizer step (detail::optimizer_time per parameter, once),
//   peak = P + Σ_g K_g + max(0, max_g X_g),
// with A_g the group's saved bytes as evaluate_assignment counts them, T_g the largest excursion of
// its ops (its strategy's temporaries, ZeRO-3's gathered parameters, its moves' copies), K_g = A_g
// and X_g = T_g, or for a checkpointed block K_g = its input's buffer and X_g = max_k(A_≤k + T_k)
// − K_g (A_≤k: what the block's ops up to k save; op k's backward runs while they are held, those
// of later ops already freed). It walks the plan once, independently of the DP's incremental
// bookkeeping, so a DP answer re-priced here is a check of the DP.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "carto/search/evaluate.hpp"
#include "carto/search/model.hpp"
#include "carto/search/space.hpp"
#include "carto/search/strategy.hpp"

namespace carto {

struct PointCost {
  double time_s = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t persistent_bytes = 0;  // P: parameters, gradients, optimizer states
  std::int64_t kept_bytes = 0;        // Σ K_g: activations kept from forward to backward
  std::int64_t extra_bytes = 0;       // max X_g: the largest excursion above them
  double optimizer_s = 0;             // the optimizer step (part of time_s)
};

// The cost of one complete choice: `chosen[k]` is op k's strategy; `cache` keeps the reshard
// graphs across calls.
inline PointCost evaluate_point(const Graph& g, const DeviceMesh& mesh, const HardwareProfile& hw,
                                const DpOptions& options, const std::vector<Strategy>& chosen,
                                const std::vector<bool>& checkpointed, ReshardCache& cache) {
  const AssignmentCost cost = evaluate_assignment(g, mesh, hw, chosen, cache);
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
  double regather = 0;   // ZeRO-3 forward gathers rerun by checkpointed blocks
  double optimizer = 0;  // the optimizer step of every parameter, once per step
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
      optimizer += detail::optimizer_time(elements, element_bytes(info), options.precision,
                                          options.zero_stage, stored, mesh, hw);
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
      const std::int64_t t =
          s.memory.temporaries +
          zero_transient_bytes(g, s, mesh, options.zero_stage, strategy_options(options)) +
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
  p.time_s = m * (cost.time_s() - sync + gathers + regather) + sync + recompute + optimizer;
  p.optimizer_s = optimizer;
  p.peak_bytes = persistent + kept + extra;
  p.persistent_bytes = persistent;
  p.kept_bytes = kept;
  p.extra_bytes = extra;
  return p;
}

inline PointCost evaluate_point(const Graph& g, const DeviceMesh& mesh, const HardwareProfile& hw,
                                const DpOptions& options, const std::vector<Strategy>& chosen,
                                const std::vector<bool>& checkpointed) {
  ReshardCache cache;
  return evaluate_point(g, mesh, hw, options, chosen, checkpointed, cache);
}

// The same with strategies named by their index in enumerate_strategies order.
inline PointCost evaluate_point(const Graph& g, const DeviceMesh& mesh, const HardwareProfile& hw,
                                const DpOptions& options, const std::vector<std::size_t>& strategy,
                                const std::vector<bool>& checkpointed) {
  const StrategyOptions sopt = strategy_options(options);
  StrategyCache cache(mesh, sopt);
  std::vector<Strategy> chosen;
  for (std::size_t k = 0; k < g.num_ops(); ++k)
    chosen.push_back(cache.at(g, OpId{static_cast<std::int32_t>(k)}, strategy.at(k)));
  return evaluate_point(g, mesh, hw, options, chosen, checkpointed);
}

}  // namespace carto
