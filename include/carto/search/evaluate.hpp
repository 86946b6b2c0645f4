// carto/search/evaluate.hpp — the per-device cost of one fixed strategy per op: what the search
// computes for every choice it weighs.
//
// Design note (DESIGN.md §3-§5). Given a graph, a mesh, hardware and one Strategy per op (op k's at
// index k), evaluate_assignment walks the ops in graph order and reports, per group (layer): FLOPs,
// compute time, the saved activation bytes (storage-deduplicated, as profile/schedule.hpp counts
// them), and every collective with its kind, axis, bytes (nccl-tests' S) and time. Rules:
//  - Stored spec of a tensor: its producer's output spec; a parameter or graph input is stored in
//    the input spec of its first consumer (a later consumer that wants another spec reshards it).
//  - Forward move: when an op's input spec differs from the stored spec, the cheapest resharding
//    (cost/reshard.hpp, Dijkstra; the free local step to Partial allowed) runs before the op.
//  - Backward move: the gradient an op hands an input (Strategy::gradients) is moved to the spec
//  the
//    producer needs, its output spec without Partial axes (output_gradient_spec), by the same
//    Dijkstra. For the moves a forward step makes this is its transpose: an all-gather's backward
//    is a reduce-scatter when the consumer's gradient is Partial over the gathered axis (and a free
//    slice when it is not); a reduce-scatter's or a slice's backward is an all-gather; an
//    all-reduce P→R needs nothing (every summand's gradient is the whole gradient); an all-to-all's
//    is the reverse all-to-all. Gradients of several consumers are each moved, then summed locally.
//    A parameter's gradient is reduced by its first consumer's Strategy::gradient_sync; a later
//    consumer's gradient is reduced by its own gradient_sync and then moved to the stored spec.
//    Graph inputs and index tensors receive no gradient.
//  - Saved activations: an op that saves an input keeps it in the spec it reads it in, except when
//    the stored spec is smaller per device (the forward move gathered it): then the stored copy is
//    kept and the forward move runs again before the op's backward (role regather), as Megatron-LM
//    does for the sequence-parallel input of its column-parallel linear
//    (megatron/core/tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication).
//    Buffers are deduplicated like the schedule does storages: a view without a move aliases its
//    input's buffer; a moved input is a buffer of its own. A buffer counts once, in the group of
//    the first op that saves it; an op's private saved state (masks, statistics) counts in its
//    group.
//  - A collective over a mesh axis of size 1 moves nothing and is not listed.
//  - Times: compute by the roofline (strategy_time) and each collective by cost/collectives.hpp, in
//    seconds, summed without overlap; forward and backward apart.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string_view>
#include <vector>

#include "carto/cost/collectives.hpp"
#include "carto/cost/hardware.hpp"
#include "carto/cost/reshard.hpp"
#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/profile/op_cost.hpp"
#include "carto/profile/schedule.hpp"
#include "carto/search/gradient_memory.hpp"
#include "carto/search/strategy.hpp"
#include "carto/spec/layout.hpp"
#include "carto/spec/mesh.hpp"
#include "carto/spec/sharding.hpp"
#include "carto/util/static_vector.hpp"

namespace carto {

// Why a collective runs.
enum class CommRole : std::uint8_t { inside_op, reshard, regather, gradient_sync };

constexpr std::string_view to_string_view(CommRole r) {
  switch (r) {
    case CommRole::inside_op: return "inside_op";
    case CommRole::reshard: return "reshard";
    case CommRole::regather: return "regather";
    case CommRole::gradient_sync: return "gradient_sync";
  }
  return "?";
}

struct CommEvent {
  OpId op{};          // the op it runs for (a consumer, for moves)
  TensorId tensor{};  // the tensor (or gradient) it moves
  CommRole role = CommRole::inside_op;
  Phase phase = Phase::forward;  // forward or backward
  Collective kind = Collective::all_reduce;
  AxisName axis{};
  std::int64_t bytes = 0;  // S per device, nccl-tests' convention
  double time_s = 0;
};

struct GroupCost {
  LayerName name{};
  GroupKind kind = GroupKind::layer;
  std::int64_t flops_forward = 0;
  std::int64_t flops_backward = 0;
  std::int64_t saved_bytes = 0;  // per device, kept from forward to backward
  std::int64_t param_bytes = 0;  // per device, parameters first used here
  double compute_forward_s = 0;
  double compute_backward_s = 0;
  double comm_forward_s = 0;
  double comm_backward_s = 0;
  std::vector<CommEvent> collectives{};
  [[nodiscard]] double time_s() const {
    return compute_forward_s + compute_backward_s + comm_forward_s + comm_backward_s;
  }
};

struct AssignmentCost {
  std::vector<GroupCost>
      groups{};  // the graph's groups in order, then "(ungrouped)" if any op has none
  std::int64_t flops_forward = 0;
  std::int64_t flops_backward = 0;
  std::int64_t saved_bytes = 0;
  std::vector<std::int64_t> saved_by_op{};  // what op k adds to its group's saved_bytes
  // Transient bytes of op k's moves: the larger of its forward moves' (all moved inputs live
  // together while it runs) and its largest gradient move's; a move counts the plan's extra memory
  // beyond its source (the moved copy included).
  std::vector<std::int64_t> move_transient_by_op{};
  // The same apart: its forward moves' (a moved input kept for backward as the moved copy counts
  // only what its move holds beyond the copy, which is saved), and its backward's: the inputs it
  // regathers, held through it, and its largest gradient move's.
  std::vector<std::int64_t> forward_move_bytes_by_op{};
  std::vector<std::int64_t> backward_move_bytes_by_op{};
  // Op k's excursion parts (search/gradient_memory.hpp), in bytes: the gradients of the tensors
  // live across it; its backward's gradients (those it adds into, dY, those it writes; its
  // parameters' apart, a temporary at ZeRO stages 2-3 only); the buffers held in its forward that
  // no op has saved yet (its inputs and output).
  std::vector<std::int64_t> across_gradient_bytes_by_op{};
  std::vector<std::int64_t> gradient_bytes_by_op{};
  std::vector<std::int64_t> parameter_gradient_bytes_by_op{};
  std::vector<std::int64_t> forward_live_by_op{};
  double forward_s = 0;
  double backward_s = 0;
  [[nodiscard]] double time_s() const { return forward_s + backward_s; }
};

struct EvaluateOptions {
  StrategyOptions strategy{};  // used by the OpSharding overload
};

namespace detail {

class AssignmentWalk {
 public:
  AssignmentWalk(const Graph& g, const DeviceMesh& mesh, const HardwareProfile& hw,
                 const std::vector<Strategy>& strategies, ReshardCache& cache)
      : g_(g), mesh_(mesh), hw_(hw), st_(strategies), cache_(cache) {}

  AssignmentCost run() {
    if (st_.size() != g_.num_ops()) {
      fail("carto: evaluate_assignment got ", st_.size(), " strategies for a graph of ",
           g_.num_ops(), " ops; give one per op, op k's at index k");
    }
    for (std::size_t k = 0; k < st_.size(); ++k) {
      if (st_[k].op.value != static_cast<std::int32_t>(k)) {
        fail("carto: evaluate_assignment: strategy ", k, " is for op ", st_[k].op.value,
             "; op k's strategy goes at index k");
      }
    }
    for (const OpGroup& grp : g_.groups())
      result_.groups.push_back({.name = grp.name, .kind = grp.kind});
    ungrouped_ = result_.groups.size();
    stored_specs();
    result_.saved_by_op.assign(g_.num_ops(), 0);
    result_.move_transient_by_op.assign(g_.num_ops(), 0);
    result_.forward_move_bytes_by_op.assign(g_.num_ops(), 0);
    result_.backward_move_bytes_by_op.assign(g_.num_ops(), 0);
    result_.across_gradient_bytes_by_op.assign(g_.num_ops(), 0);
    result_.gradient_bytes_by_op.assign(g_.num_ops(), 0);
    result_.parameter_gradient_bytes_by_op.assign(g_.num_ops(), 0);
    result_.forward_live_by_op.assign(g_.num_ops(), 0);
    roots_ = gradient_roots(g_);
    layouts_ = gradient_layouts(g_, roots_);
    for (std::size_t k = 0; k < g_.num_ops(); ++k) {
      const std::int64_t before = group_of(k).saved_bytes;
      gradients(k);
      visit(k);
      result_.saved_by_op[k] = group_of(k).saved_bytes - before;
      result_.forward_live_by_op[k] = unsaved_live(k);
    }
    for (const GroupCost& c : result_.groups) {
      result_.flops_forward += c.flops_forward;
      result_.flops_backward += c.flops_backward;
      result_.saved_bytes += c.saved_bytes;
      result_.forward_s += c.compute_forward_s + c.comm_forward_s;
      result_.backward_s += c.compute_backward_s + c.comm_backward_s;
    }
    return std::move(result_);
  }

 private:
  struct Buffer {
    std::size_t id = 0;
    std::int64_t bytes = 0;
  };

  [[nodiscard]] std::int64_t local_bytes(TensorId t, const ShardingSpec& s) const {
    return local_shape(g_.tensor(t).shape, s, mesh_).numel() * element_bytes(g_.tensor(t));
  }

  GroupCost& group_of(std::size_t k) {
    const std::int32_t grp = g_.ops()[k].group;
    if (grp >= 0) return result_.groups[static_cast<std::size_t>(grp)];
    if (result_.groups.size() == ungrouped_) result_.groups.push_back({.name = "(ungrouped)"});
    return result_.groups[ungrouped_];
  }

  void stored_specs() {
    const std::size_t n = g_.tensors().size();
    stored_.assign(n, ShardingSpec{});
    has_stored_.assign(n, false);
    first_consumer_.assign(n, -1);
    buffer_.assign(n, Buffer{});
    for (std::size_t k = 0; k < g_.num_ops(); ++k) {
      const Op& op = g_.ops()[k];
      for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        const std::size_t t = op.inputs[i].index();
        if (!has_stored_[t] && !g_.tensor(op.inputs[i]).producer.valid()) {
          stored_[t] = st_[k].sharding.inputs[i];
          has_stored_[t] = true;
          first_consumer_[t] = static_cast<std::int32_t>(k);
          buffer_[t] = {.id = t, .bytes = local_bytes(op.inputs[i], stored_[t])};
        }
      }
      stored_[op.output.index()] = st_[k].sharding.output;
      has_stored_[op.output.index()] = true;
    }
    next_buffer_ = n;
  }

  void record(std::size_t k, TensorId t, CommRole role, Phase phase, Collective kind,
              const AxisName& axis, std::int64_t bytes) {
    if (mesh_.size_of(axis) == 1) return;  // a group of one device moves nothing
    const double time = collective_time(kind, mesh_, axis, bytes, hw_);
    GroupCost& grp = group_of(k);
    (phase == Phase::forward ? grp.comm_forward_s : grp.comm_backward_s) += time;
    grp.collectives.push_back({.op = OpId{static_cast<std::int32_t>(k)},
                               .tensor = t,
                               .role = role,
                               .phase = phase,
                               .kind = kind,
                               .axis = axis,
                               .bytes = bytes,
                               .time_s = time});
  }

  void record_plan(std::size_t k, TensorId t, CommRole role, Phase phase, const ReshardPlan& plan) {
    for (const ReshardStep& step : plan.steps) {
      if (const auto c = collective_of(step.kind))
        record(k, t, role, phase, *c, step.axis, step.bytes);
    }
  }

  ReshardPlan move(TensorId t, const ShardingSpec& from, const ShardingSpec& to) {
    const TensorInfo& info = g_.tensor(t);
    // Index tensors are int32 (4 bytes), which carto::DType spells fp32.
    const DType dt = info.kind == TensorKind::index ? DType::fp32 : info.dtype;
    return cache_.plan(info.shape, dt, from, to, mesh_, hw_, {.make_partial = MakePartial::allow});
  }

  // The gradient parts of op k's excursion (search/gradient_memory.hpp), each gradient in its
  // tensor's stored spec without Partial.
  void gradients(std::size_t k) {
    const Op& op = g_.ops()[k];
    const Strategy& s = st_[k];
    const OpGradientLayout& layout = layouts_[k];
    auto kept_bytes = [&](TensorId t) {
      return local_bytes(t, without_partial(stored_[t.index()]));
    };
    std::int64_t across = 0;
    for (const std::int32_t t : layout.across) across += kept_bytes(TensorId{t});
    std::int64_t backward = 0;
    for (const std::uint8_t i : layout.read_later) backward += kept_bytes(op.inputs[i]);
    if (layout.counts_dy) backward += local_bytes(op.output, without_partial(s.sharding.output));
    StaticVector<InputGradient, 3> inputs;
    std::int64_t params = 0;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const TensorId t = op.inputs[i];
      const ShardingSpec& grad = s.gradients[i];
      const std::int64_t bytes = local_bytes(t, without_partial(grad));
      inputs.push_back(
          {.bytes = bytes,
           .moved = grad.is_partial() || !(grad == without_partial(stored_[t.index()]))});
      if (g_.tensor(t).kind == TensorKind::parameter) params += bytes;
    }
    backward += written_gradient_bytes(g_, roots_, k, {inputs.begin(), inputs.size()}, 0);
    result_.across_gradient_bytes_by_op[k] = across;
    result_.gradient_bytes_by_op[k] = backward;
    result_.parameter_gradient_bytes_by_op[k] = params;
  }

  // The buffers op k's forward holds that no op has saved yet (after k saved its own): its
  // activation inputs and its output, each buffer once.
  std::int64_t unsaved_live(std::size_t k) const {
    std::vector<std::size_t> ids;
    std::int64_t bytes = 0;
    auto count = [&](std::size_t t) {
      const Buffer& b = buffer_[t];
      if (saved_.contains(b.id) || std::find(ids.begin(), ids.end(), b.id) != ids.end()) return;
      ids.push_back(b.id);
      bytes += b.bytes;
    };
    const Op& op = g_.ops()[k];
    count(op.output.index());
    for (const TensorId t : op.inputs) {
      if (g_.tensor(t).kind == TensorKind::activation && g_.tensor(t).producer.valid())
        count(t.index());
    }
    return bytes;
  }

  void save(std::size_t k, std::size_t key, std::int64_t bytes) {
    if (saved_.contains(key)) return;
    saved_.emplace(key, bytes);
    group_of(k).saved_bytes += bytes;
  }

  void visit(std::size_t k) {
    const Op& op = g_.ops()[k];
    const Strategy& s = st_[k];
    GroupCost& grp = group_of(k);
    const StrategyTime time = strategy_time(s, mesh_, hw_);
    grp.flops_forward += s.cost.flops_forward;
    grp.flops_backward += s.cost.flops_backward();
    grp.compute_forward_s += time.compute_forward_s;
    grp.compute_backward_s += time.compute_backward_s;
    grp.saved_bytes += s.cost.private_saved_bytes;
    for (const CollectiveCall& c : s.forward) {
      record(k, op.output, CommRole::inside_op, Phase::forward, c.kind, c.axis, c.bytes);
    }
    for (const CollectiveCall& c : s.backward) {
      record(k, op.output, CommRole::inside_op, Phase::backward, c.kind, c.axis, c.bytes);
    }

    const auto saved = saved_tensors(g_, op);
    std::int64_t forward_moves = 0;
    std::int64_t forward_kept_copies = 0;  // moved copies kept for backward (saved)
    std::int64_t regathers = 0;            // moved again before the backward, held through it
    std::int64_t backward_moves = 0;
    auto transient = [&](TensorId t, const ReshardPlan& plan, const ShardingSpec& to) {
      return std::max(local_bytes(t, to), plan.extra_memory_bytes);
    };
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const TensorId t = op.inputs[i];
      const TensorInfo& info = g_.tensor(t);
      const ShardingSpec& want = s.sharding.inputs[i];
      const ShardingSpec& have = stored_[t.index()];
      const bool moved = !(have == want);
      ReshardPlan forward{};
      if (moved) {
        forward = move(t, have, want);
        record_plan(k, t, CommRole::reshard, Phase::forward, forward);
        forward_moves += transient(t, forward, want);
      }
      // Gradients.
      if (info.kind == TensorKind::parameter) {
        if (first_consumer_[t.index()] == static_cast<std::int32_t>(k))
          grp.param_bytes += buffer_[t.index()].bytes;
        // gradient_sync (below) reduces the gradient to `want`; a later consumer then moves it
        // home.
        if (moved) {
          const ReshardPlan back = move(t, without_partial(want), have);
          record_plan(k, t, CommRole::reshard, Phase::backward, back);
          backward_moves = std::max(backward_moves, transient(t, back, have));
        }
      } else if (info.kind == TensorKind::activation && info.producer.valid()) {
        const ShardingSpec needed = without_partial(have);
        if (!(s.gradients[i] == needed)) {
          const ReshardPlan back = move(t, s.gradients[i], needed);
          record_plan(k, t, CommRole::reshard, Phase::backward, back);
          backward_moves = std::max(backward_moves, transient(t, back, needed));
        }
      }
      // Saved activations.
      if (std::find(saved.begin(), saved.end(), t) != saved.end() &&
          info.kind != TensorKind::parameter) {
        if (!moved) {
          save(k, buffer_[t.index()].id, buffer_[t.index()].bytes);
        } else if (local_bytes(t, have) < local_bytes(t, want)) {
          save(k, buffer_[t.index()].id, buffer_[t.index()].bytes);
          record_plan(k, t, CommRole::regather, Phase::backward, forward);
          regathers += transient(t, forward, want);
        } else {
          save(k, next_buffer_++, local_bytes(t, want));
          forward_kept_copies += local_bytes(t, want);
        }
      }
    }
    result_.move_transient_by_op[k] = std::max(forward_moves, backward_moves);
    result_.forward_move_bytes_by_op[k] = forward_moves - forward_kept_copies;
    result_.backward_move_bytes_by_op[k] = regathers + backward_moves;
    for (const CollectiveCall& c : s.gradient_sync) {
      record(k, op.inputs[static_cast<std::size_t>(c.input)], CommRole::gradient_sync,
             Phase::backward, c.kind, c.axis, c.bytes);
    }
    // The output's buffer: a view without a move aliases its input's.
    if (op.kind == OpKind::view && stored_[op.inputs[0].index()] == s.sharding.inputs[0]) {
      buffer_[op.output.index()] = buffer_[op.inputs[0].index()];
    } else if (op.kind == OpKind::view) {
      buffer_[op.output.index()] = {.id = next_buffer_++,
                                    .bytes = local_bytes(op.inputs[0], s.sharding.inputs[0])};
    } else {
      buffer_[op.output.index()] = {.id = op.output.index(),
                                    .bytes = local_bytes(op.output, s.sharding.output)};
    }
    if (std::find(saved.begin(), saved.end(), op.output) != saved.end()) {
      save(k, buffer_[op.output.index()].id,
           buffer_[op.output.index()].bytes);  // softmax, attention
    }
  }

  const Graph& g_;
  const DeviceMesh& mesh_;
  const HardwareProfile& hw_;
  const std::vector<Strategy>& st_;
  AssignmentCost result_{};
  std::size_t ungrouped_ = 0;
  std::vector<ShardingSpec> stored_{};
  std::vector<bool> has_stored_{};
  std::vector<std::int32_t> first_consumer_{};
  std::vector<Buffer> buffer_{};
  std::size_t next_buffer_ = 0;
  std::map<std::size_t, std::int64_t> saved_{};
  GradientRoots roots_{};
  std::vector<OpGradientLayout> layouts_{};
  ReshardCache& cache_;
};

}  // namespace detail

// The cost of running `g` with strategies[k] for op k (see the design note).
inline AssignmentCost evaluate_assignment(const Graph& g, const DeviceMesh& mesh,
                                          const HardwareProfile& hw,
                                          const std::vector<Strategy>& strategies) {
  ReshardCache cache;
  return detail::AssignmentWalk(g, mesh, hw, strategies, cache).run();
}

// The same with the reshard graphs kept in `cache` across calls (many plans of one problem).
inline AssignmentCost evaluate_assignment(const Graph& g, const DeviceMesh& mesh,
                                          const HardwareProfile& hw,
                                          const std::vector<Strategy>& strategies,
                                          ReshardCache& cache) {
  return detail::AssignmentWalk(g, mesh, hw, strategies, cache).run();
}

// The same from one OpSharding per op (each checked and turned into a Strategy by make_strategy).
inline AssignmentCost evaluate_assignment(const Graph& g, const DeviceMesh& mesh,
                                          const HardwareProfile& hw,
                                          const std::vector<OpSharding>& shardings,
                                          const EvaluateOptions& options = {}) {
  if (shardings.size() != g.num_ops()) {
    detail::fail("carto: evaluate_assignment got ", shardings.size(), " shardings for a graph of ",
                 g.num_ops(), " ops; give one per op");
  }
  std::vector<Strategy> strategies;
  strategies.reserve(shardings.size());
  for (std::size_t k = 0; k < shardings.size(); ++k) {
    strategies.push_back(
        make_strategy(g, OpId{static_cast<std::int32_t>(k)}, shardings[k], mesh, options.strategy));
  }
  return evaluate_assignment(g, mesh, hw, strategies);
}

}  // namespace carto
