// carto/search/price.hpp — the exact cost of one complete plan: what search() reports and what the
// tests re-derive every plan the DP returns from.
//
// Design note: evaluate_point prices one complete choice (a strategy per op, a checkpoint flag per
// group) from evaluate_assignment (search/evaluate.hpp) and the memory model written in
// search/model.hpp's design note, applied to the whole assignment at once:
//   time = m · (evaluate_assignment's time − its parameter-gradient reductions + ZeRO-3 gathers
//               + the forward time of every checkpointed block) + the reductions
//          + the optimizer step (detail::optimizer_time per parameter, once),
//   peak = P + max(Σ_g K_g, max_g (K_<g + Y_g)),
// with A_g the group's saved bytes as evaluate_assignment counts them, K_g = A_g (a checkpointed
// block: its input's buffer), and Y_g = max_k (A_g,≤k + U_k) over the group's ops: A_g,≤k what its
// ops up to k save (recomputed, in a checkpointed block), still held when op k's backward runs
// (those of later ops already freed), U_k the op's excursion (op_excursion). The groups after g
// have freed what they kept when g's backward runs. It walks the plan once, independently of the
// DP's incremental bookkeeping, so a DP answer re-priced here is a check of the DP.
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

// U_k, op k's excursion above the activations kept when it runs, in its parts: the gradients of
// the tensors live across it; its forward part (the buffers it holds that no op saved; in a
// checkpointed block's recompute, the gradient of the block's output, counted as the size of the
// block's input — the residual stream's — `block_gradient`) with its forward moves' copies; its
// backward part (workspace, the gradients it adds into, dY, those it writes; its parameters' at
// ZeRO stages 2-3) with its regathers and gradient moves; ZeRO-3's gathered parameters in both.
// U_k = across + max(forward + forward moves, backward + backward moves) + zero
// (search/gradient_memory.hpp's ExcursionParts).
struct OpExcursion {
  std::int64_t across = 0;
  std::int64_t forward = 0;
  std::int64_t forward_moves = 0;
  std::int64_t backward = 0;
  std::int64_t backward_moves = 0;
  std::int64_t zero = 0;
  [[nodiscard]] std::int64_t total() const {
    return ExcursionParts{.across = across,
                          .forward = forward + forward_moves,
                          .backward = backward + backward_moves,
                          .fixed = zero}
        .total();
  }
};
inline OpExcursion op_excursion(const Graph& g, const DeviceMesh& mesh, const DpOptions& options,
                                const Strategy& s, const AssignmentCost& cost, std::size_t k,
                                std::int64_t block_gradient) {
  return {.across = cost.across_gradient_bytes_by_op[k],
          .forward = cost.forward_live_by_op[k] + block_gradient,
          .forward_moves = cost.forward_move_bytes_by_op[k],
          .backward = s.memory.workspace + cost.gradient_bytes_by_op[k] +
                      (options.zero_stage >= 2 ? cost.parameter_gradient_bytes_by_op[k] : 0),
          .backward_moves = cost.backward_move_bytes_by_op[k],
          .zero = zero_transient_bytes(g, s, mesh, options.zero_stage, strategy_options(options))};
}

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
  const std::vector<OpGradientLayout> layouts = gradient_layouts(g, gradient_roots(g));
  double recompute = 0;
  std::int64_t kept = 0;  // Σ K_g so far
  std::int64_t top = 0;   // max over ops k so far of K_<g + A_g,≤k + U_k
  for (std::size_t gi = 0; gi < g.groups().size(); ++gi) {
    const OpGroup& grp = g.groups()[gi];
    const GroupCost& gc = cost.groups[gi];
    const bool ckpt = gi < checkpointed.size() && checkpointed[gi];
    // A checkpointed block's input, stored in its producer's output spec.
    std::int64_t input_bytes = 0;
    if (const TensorId x = detail::group_input(g, static_cast<std::int32_t>(gi)); ckpt && x.valid()) {
      const TensorInfo& info = g.tensor(x);
      const ShardingSpec& spec = chosen[info.producer.index()].sharding.output;
      input_bytes = local_shape(info.shape, spec, mesh).numel() * element_bytes(info);
    }
    std::int64_t held = 0;  // A_g,≤k: what the group has saved up to op k
    std::int64_t peak = 0;  // max_k (A_g,≤k + U_k): op k's backward runs with A_g,≤k still held
    for (std::int32_t k = grp.first_op; k < grp.end_op; ++k) {
      const auto kk = static_cast<std::size_t>(k);
      held += cost.saved_by_op[kk];
      const std::int64_t block_gradient =
          ckpt && layouts[kk].counts_block_gradient ? input_bytes : 0;
      peak = std::max(
          peak,
          held + op_excursion(g, mesh, options, chosen[kk], cost, kk, block_gradient).total());
    }
    top = std::max(top, kept + std::max(peak, gc.saved_bytes));
    if (ckpt) {
      recompute += m * (gc.compute_forward_s + gc.comm_forward_s);
      kept += input_bytes;
    } else {
      kept += gc.saved_bytes;
    }
  }
  const std::int64_t extra = std::max<std::int64_t>(0, top - kept);
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
