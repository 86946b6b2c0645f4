// The figures of the HTML report, re-derived from a plan's choices and its graph (see report.hpp).
//
// Design note on the memory timeline. It draws the schedule the cost model prices
// (search/price.hpp evaluate_point, search/gradient_memory.hpp), from the same inputs: the
// forward pass runs the groups in order and each op adds saved_by_op (evaluate_assignment) to
// what its group holds; while op k runs, its temporaries are the gradients live across it, the
// buffers it holds that no op saved (in a checkpointed block's recompute also the gradient of the
// block's output) and ZeRO-3's gathered parameters, and its communication buffers are its forward
// moves' copies. At a group's end it keeps all it saved, or, when checkpointed, only its input
// (stored in its producer's output spec). Backward runs the groups in reverse: a checkpointed
// group first reruns its forward, then each op's backward runs with what its group saved up to it
// still held and its backward part as temporaries (workspace, the gradients it adds into, dY, the
// gradients it writes; its parameters' at ZeRO stages 2-3) beside its regathers and gradient
// moves. One micro-batch's pass is drawn; the persistent states stay throughout. The timeline's
// peak is the cost model's.
#include <carto/search.hpp>
#include <map>
#include <string>
#include <vector>

#include "report.hpp"

namespace carto::tools {

namespace {

std::vector<std::string> axis_names(const AxisList& axes) {
  std::vector<std::string> out;
  for (const AxisName& a : axes) out.emplace_back(a.view());
  return out;
}

TensorView tensor_view(const Graph& g, TensorId t, const ShardingSpec& spec, std::string role) {
  TensorView v;
  v.role = std::move(role);
  const TensorInfo& info = g.tensor(t);
  for (const DimExtent& d : info.shape.dims()) {
    v.dim_names.emplace_back(d.name.view());
    v.extents.push_back(d.extent);
  }
  for (const AxisList& axes : spec.dims()) v.dim_axes.push_back(axis_names(axes));
  v.partial = axis_names(spec.partial());
  v.spec = to_string(spec);
  return v;
}

// The name of a folded run: "block.0" .. "block.95" -> "block.0-95".
std::string run_name(const std::string& first, const std::string& last) {
  const auto dot = first.rfind('.');
  if (dot != std::string::npos && last.size() > dot &&
      last.compare(0, dot + 1, first, 0, dot + 1) == 0)
    return first + "-" + last.substr(dot + 1);
  return first + ".." + last;
}

}  // namespace

ReportData build_report_data(const ReportInput& input) {
  CARTO_CHECK(input.plan != nullptr && input.graph != nullptr,
              "needs a plan and the graph it was made for");
  const Plan& plan = *input.plan;
  const Graph& g = *input.graph;
  CARTO_CHECK(plan.strategy.size() == g.num_ops() && plan.ops.size() == g.num_ops(),
              "the plan has ", plan.strategy.size(), " ops; the model has ", g.num_ops());
  const DeviceMesh& mesh = plan.mesh;
  const HardwareProfile& hw = input.hardware;
  DpOptions dp;
  dp.precision = plan.precision;
  dp.gradient_reduction = plan.gradient_reduction;
  dp.zero_stage = plan.zero_stage;
  dp.micro_batches = plan.micro_batches;
  dp.space = plan.space;
  dp.tolerance = plan.tolerance;
  const StrategyOptions sopt = strategy_options(dp);
  StrategyCache cache(mesh, sopt);
  std::vector<Strategy> chosen;
  for (std::size_t k = 0; k < g.num_ops(); ++k)
    chosen.push_back(cache.at(g, OpId{static_cast<std::int32_t>(k)}, plan.strategy[k]));
  const auto& groups = g.groups();
  std::vector<bool> checkpointed(groups.size(), false);
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    for (std::int32_t k = groups[gi].first_op; k < groups[gi].end_op; ++k)
      if (plan.ops[static_cast<std::size_t>(k)].checkpointed) checkpointed[gi] = true;
  }
  const AssignmentCost a = evaluate_assignment(g, mesh, hw, chosen);
  const PointCost cost = evaluate_point(g, mesh, hw, dp, chosen, checkpointed);
  ReportData out;
  out.cost_peak = cost.peak_bytes;

  // ---- folding: runs of identical blocks with the same choices
  std::vector<std::int64_t> run_count(groups.size(), 1);  // > 0 for a run's first group
  std::vector<std::int32_t> run_last(groups.size());
  for (std::size_t gi = 0; gi < groups.size(); ++gi) run_last[gi] = static_cast<std::int32_t>(gi);
  auto same_choices = [&](std::int32_t x, std::int32_t y) {
    const OpGroup& gx = groups[static_cast<std::size_t>(x)];
    const OpGroup& gy = groups[static_cast<std::size_t>(y)];
    if (gx.end_op - gx.first_op != gy.end_op - gy.first_op) return false;
    if (checkpointed[static_cast<std::size_t>(x)] != checkpointed[static_cast<std::size_t>(y)])
      return false;
    for (std::int32_t i = 0; i < gx.end_op - gx.first_op; ++i) {
      if (plan.ops[static_cast<std::size_t>(gx.first_op + i)].strategy !=
          plan.ops[static_cast<std::size_t>(gy.first_op + i)].strategy)
        return false;
    }
    return true;
  };
  const std::vector<BlockChain> chains =
      block_chains(g, std::vector<std::vector<std::size_t>>(g.num_ops()));
  for (const BlockChain& c : chains) {
    std::int32_t lead = c.first_group;
    for (std::int32_t gi = c.first_group + 1; gi < c.first_group + c.blocks; ++gi) {
      if (same_choices(lead, gi)) {
        ++run_count[static_cast<std::size_t>(lead)];
        run_count[static_cast<std::size_t>(gi)] = 0;
        run_last[static_cast<std::size_t>(lead)] = gi;
      } else {
        lead = gi;
      }
    }
  }
  auto group_label = [&](std::size_t gi) {
    const std::string first(groups[gi].name.view());
    if (run_count[gi] <= 1) return first;
    return run_name(first, std::string(groups[static_cast<std::size_t>(run_last[gi])].name.view()));
  };

  // ---- layout rows
  std::vector<std::int64_t> row_of(g.num_ops(), -1);
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const Op& op = g.ops()[k];
    const auto gi = static_cast<std::size_t>(op.group);
    if (op.group >= 0 && run_count[gi] == 0) continue;
    LayoutRow row;
    row.name = plan.ops[k].name;
    if (op.group >= 0 && run_count[gi] > 1) {
      const std::string prefix(groups[gi].name.view());
      if (row.name.compare(0, prefix.size(), prefix) == 0)
        row.name = group_label(gi) + row.name.substr(prefix.size());
      row.count = run_count[gi];
    }
    row.strategy = plan.ops[k].strategy;
    row.checkpointed = plan.ops[k].checkpointed;
    const Strategy& s = chosen[k];
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
      row.tensors.push_back(
          tensor_view(g, op.inputs[i], s.sharding.inputs[i], "in" + std::to_string(i)));
    row.tensors.push_back(tensor_view(g, op.output, s.sharding.output, "out"));
    row_of[k] = static_cast<std::int64_t>(out.rows.size());
    out.rows.push_back(std::move(row));
  }

  // ---- reshards and the time of each group run
  const double m = static_cast<double>(plan.micro_batches);
  for (std::size_t gi = 0; gi < a.groups.size(); ++gi) {
    const GroupCost& grp = a.groups[gi];
    for (const CommEvent& e : grp.collectives) {
      if (e.role != CommRole::reshard && e.role != CommRole::regather) continue;
      const auto k = static_cast<std::size_t>(e.op.index());
      if (k >= row_of.size() || row_of[k] < 0) continue;
      out.rows[static_cast<std::size_t>(row_of[k])].reshards.push_back(
          {std::string(to_string_view(e.kind)), std::string(e.axis.view()),
           e.phase == Phase::forward ? "forward" : "backward", e.bytes, e.time_s});
    }
    if (gi < groups.size() && run_count[gi] == 0) continue;
    GroupRun run;
    run.name = gi < groups.size() ? group_label(gi) : std::string(grp.name.view());
    run.count = gi < groups.size() ? run_count[gi] : 1;
    run.time["compute"] = m * (grp.compute_forward_s + grp.compute_backward_s);
    if (gi < groups.size() && checkpointed[gi])
      run.time["recompute"] = m * (grp.compute_forward_s + grp.comm_forward_s);
    for (const CommEvent& e : grp.collectives) {
      const double w = e.role == CommRole::gradient_sync ? 1.0 : m;
      const bool move = e.role == CommRole::reshard || e.role == CommRole::regather;
      run.time[move ? std::string("resharding") : std::string(to_string_view(e.kind))] +=
          w * e.time_s;
    }
    out.runs.push_back(std::move(run));
  }

  // ---- persistent states, split as zero_persistent_bytes splits them
  std::vector<bool> seen(g.tensors().size(), false);
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const Op& op = g.ops()[k];
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const TensorInfo& info = g.tensor(op.inputs[i]);
      if (info.kind != TensorKind::parameter || seen[op.inputs[i].index()]) continue;
      seen[op.inputs[i].index()] = true;
      const ShardingSpec& stored = chosen[k].sharding.inputs[i];
      const std::int64_t elements = local_shape(info.shape, stored, mesh).numel();
      const std::int64_t r = replication_factor(stored, mesh);
      auto shard = [&](std::int64_t bytes, bool sharded) {
        return sharded ? (bytes + r - 1) / r : bytes;
      };
      out.parameter_bytes += shard(elements * element_bytes(info), plan.zero_stage >= 3);
      out.gradient_bytes += shard(elements * element_bytes(info), plan.zero_stage >= 2);
      out.optimizer_bytes +=
          shard(elements * optimizer_bytes_per_param(plan.precision), plan.zero_stage >= 1);
    }
  }

  // ---- the timeline (see the design note)
  const std::int64_t persistent = cost.persistent_bytes;
  const std::vector<OpGradientLayout> layouts = gradient_layouts(g, gradient_roots(g));
  std::int64_t kept = 0;
  auto input_bytes = [&](std::size_t gi) -> std::int64_t {
    const TensorId x = detail::group_input(g, static_cast<std::int32_t>(gi));
    if (!x.valid()) return 0;
    const TensorInfo& info = g.tensor(x);
    const ShardingSpec& spec = chosen[info.producer.index()].sharding.output;
    return local_shape(info.shape, spec, mesh).numel() * element_bytes(info);
  };
  // In a recompute, the block output's gradient (evaluate_point's block_gradient) is held too.
  auto excursion = [&](std::size_t gi, std::size_t k, bool recompute) {
    const std::int64_t block_gradient =
        recompute && layouts[k].counts_block_gradient ? input_bytes(gi) : 0;
    return op_excursion(g, mesh, dp, chosen[k], a, k, block_gradient);
  };
  auto forward = [&](std::size_t gi, const std::string& phase) {
    std::int64_t held = 0;
    for (std::int32_t k = groups[gi].first_op; k < groups[gi].end_op; ++k) {
      const auto kk = static_cast<std::size_t>(k);
      held += a.saved_by_op[kk];
      const OpExcursion u = excursion(gi, kk, phase == "recompute");
      out.memory.push_back({phase + " " + plan.ops[kk].name, persistent, kept + held,
                            u.across + u.forward + u.zero, u.forward_moves});
    }
    return held;
  };
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const std::int64_t held = forward(gi, "forward");
    kept += checkpointed[gi] ? input_bytes(gi) : held;
  }
  for (std::size_t gi = groups.size(); gi-- > 0;) {
    std::int64_t held = 0;
    if (checkpointed[gi]) {
      kept -= input_bytes(gi);
      held = forward(gi, "recompute");
    } else {
      for (std::int32_t k = groups[gi].first_op; k < groups[gi].end_op; ++k)
        held += a.saved_by_op[static_cast<std::size_t>(k)];
      kept -= held;
    }
    for (std::int32_t k = groups[gi].end_op; k-- > groups[gi].first_op;) {
      const auto kk = static_cast<std::size_t>(k);
      const OpExcursion u = excursion(gi, kk, false);
      out.memory.push_back({"backward " + plan.ops[kk].name, persistent, kept + held,
                            u.across + u.backward + u.zero, u.backward_moves});
      held -= a.saved_by_op[kk];
    }
  }
  for (const MemoryPoint& p : out.memory)
    out.timeline_peak = std::max(out.timeline_peak, p.total());
  return out;
}

}  // namespace carto::tools
