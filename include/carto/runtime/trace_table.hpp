// carto/runtime/trace_table.hpp — a recorded trace (carto/runtime/trace.hpp) against the cost
// model: per op, the measured time of its forward, backward and recompute beside what the plan's
// strategy for it is priced at.
//
// Design note: measured times are the op scopes' spans (every kernel, collective and reshard the
// op ran, plus the executor's own work between them), averaged over the steps the recorder holds.
// Predictions are strategy_time (carto/search/strategy_core.hpp) of the op's strategy: roofline
// compute plus the collectives inside the op, times the micro-batches; its parameter-gradient
// reductions, which run once per step, go to the gradients row. The
// reshards between ops are priced per plan, not per op, so they appear as one row with the plan's
// "resharding" figure; the gradient reductions after backward and the optimizer likewise, and the
// step row holds the plan's step_time_s.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "carto/cost/hardware.hpp"
#include "carto/graph/graph.hpp"
#include "carto/runtime/trace.hpp"
#include "carto/runtime/trainer.hpp"
#include "carto/search/plan.hpp"
#include "carto/search/space.hpp"
#include "carto/search/strategy_core.hpp"

namespace carto::trace {

struct OpRow {
  std::string name;                // op name, or "reshard", "gradients", "optimizer", "step"
  std::int32_t op = -1;            // the op's index; -1 for the summary rows
  double forward_s = 0;            // measured, per step
  double backward_s = 0;           // measured, per step
  double recompute_s = 0;          // measured, per step
  double predicted_forward_s = 0;  // priced (summary rows: predicted_forward_s holds the figure)
  double predicted_backward_s = 0;
  [[nodiscard]] double measured_s() const { return forward_s + backward_s + recompute_s; }
  [[nodiscard]] double predicted_s() const { return predicted_forward_s + predicted_backward_s; }
};

// The table of one rank: a row per op, then reshard, gradients, optimizer and step. `strategies`
// are the plan's (plan_strategies in carto/runtime/trainer.hpp).
inline std::vector<OpRow> op_table(const Recorder& rec, const Graph& g, const Plan& plan,
                                   const std::vector<Strategy>& strategies,
                                   const HardwareProfile& hw) {
  CARTO_CHECK(strategies.size() == g.num_ops(), "op_table: ", strategies.size(),
              " strategies for a graph of ", g.num_ops(), " ops");
  std::int64_t steps = 0;
  for (const Event& e : rec.events()) steps += e.kind == Kind::step ? 1 : 0;
  const double per = steps > 0 ? 1.0 / static_cast<double>(steps) : 1.0;
  const double m = static_cast<double>(plan.micro_batches);
  std::vector<OpRow> rows(g.num_ops());
  const std::vector<std::string> names = op_names(g);
  OpRow reshard{.name = "reshard"}, gradients{.name = "gradients"};
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    rows[k].name = names[k];
    rows[k].op = static_cast<std::int32_t>(k);
    const Strategy& s = strategies[k];
    const StrategyTime t = strategy_time(s, plan.mesh, hw);
    const double sync = collectives_time(s.gradient_sync, plan.mesh, hw);
    rows[k].predicted_forward_s = m * t.forward_s();
    rows[k].predicted_backward_s = m * (t.backward_s() - sync);
    gradients.predicted_forward_s += sync;  // once per step, after the micro-batches
  }
  OpRow optimizer{.name = "optimizer"}, step{.name = "step"};
  auto find = [&](const std::map<std::string, double>& b, const char* key) {
    const auto it = b.find(key);
    return it == b.end() ? 0.0 : it->second;
  };
  reshard.predicted_forward_s = find(plan.time_breakdown, "resharding");
  optimizer.predicted_forward_s = find(plan.time_breakdown, "optimizer");
  step.predicted_forward_s = plan.step_time_s;
  for (const Event& e : rec.events()) {
    const double s = e.seconds() * per;
    if (e.kind == Kind::step) step.forward_s += s;
    if (e.kind == Kind::reshard) reshard.forward_s += s;
    if (e.kind == Kind::phase && e.phase == Phase::gradients) gradients.forward_s += s;
    if (e.kind == Kind::phase && e.phase == Phase::optimizer) optimizer.forward_s += s;
    if (e.kind != Kind::op || e.op < 0 || static_cast<std::size_t>(e.op) >= rows.size()) continue;
    OpRow& r = rows[static_cast<std::size_t>(e.op)];
    if (e.phase == Phase::forward) r.forward_s += s;
    if (e.phase == Phase::backward) r.backward_s += s;
    if (e.phase == Phase::recompute) r.recompute_s += s;
  }
  rows.push_back(reshard);
  rows.push_back(gradients);
  rows.push_back(optimizer);
  rows.push_back(step);
  return rows;
}

// The same with the plan's strategies picked as a Trainer picks them (`masks`: what the plan was
// searched with, by default SearchOptions'; the runtime regenerates dropout masks either way).
inline std::vector<OpRow> op_table(const Recorder& rec, const Graph& g, const Plan& plan,
                                   const HardwareProfile& hw,
                                   DropoutMasks masks = DropoutMasks::regenerated) {
  return op_table(rec, g, plan,
                  plan_strategies(g, plan,
                                  {.precision = plan.precision,
                                   .dropout_masks = masks,
                                   .gradient_reduction = plan.gradient_reduction}),
                  hw);
}

// The table as text: op, measured forward / backward / recompute and total, predicted total,
// measured / predicted; milliseconds.
inline void write_op_table(std::ostream& out, const std::vector<OpRow>& rows) {
  char line[256];
  std::snprintf(line, sizeof line, "%-34s %10s %10s %10s %10s %10s %8s\n", "op", "fwd ms", "bwd ms",
                "recomp ms", "meas ms", "pred ms", "ratio");
  out << line;
  for (const OpRow& r : rows) {
    const double p = r.predicted_s();
    char ratio[32] = "-";
    if (p > 0) std::snprintf(ratio, sizeof ratio, "%.2f", r.measured_s() / p);
    std::snprintf(line, sizeof line, "%-34.34s %10.3f %10.3f %10.3f %10.3f %10.3f %8s\n",
                  r.name.c_str(), r.forward_s * 1e3, r.backward_s * 1e3, r.recompute_s * 1e3,
                  r.measured_s() * 1e3, p * 1e3, ratio);
    out << line;
  }
}

}  // namespace carto::trace
