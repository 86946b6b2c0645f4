// carto/search/dp.hpp — the exact dynamic program over one graph on one mesh: every op's strategy,
// the resharding between ops and activation checkpointing per transformer block, under one ZeRO
// stage and one micro-batch count, with a Pareto frontier of (step time, peak memory).
//
// Design note (DESIGN.md §6).
//
// Cost of an assignment (one strategy per op, one checkpoint flag per block). The per-op rules are
// evaluate_assignment's (search/evaluate.hpp), applied incrementally: a tensor is stored in its
// producer's output spec (a parameter or graph input in its first consumer's input spec); an op
// reading another spec pays the Dijkstra reshard before it, and the gradient it hands back pays the
// move to the spec the producer needs; a parameter read in another spec than stored pays the move
// of its gradient home; saved inputs follow the regather rule; buffers are deduplicated by identity
// (a view without a move aliases its input's buffer). On top of that, for m micro-batches:
//   step time = m · (compute + collectives inside ops + reshards + regathers
//                    + recompute of checkpointed blocks + ZeRO-3 parameter gathers)
//             + parameter-gradient reductions (once per step, after accumulation).
// A checkpointed block recomputes its forward (compute, forward collectives and forward reshards of
// its ops) in backward.
//
// Memory per device (the schedule model of DESIGN.md §5, the same one the brute force uses):
//   peak = P + Σ_g K_g + max(0, max_g X_g)
// P: parameters, gradients and AdamW states of every parameter in its stored spec, persistent for
// the whole step; ZeRO shards them over the N devices that hold the same parameter slice (the
// parameter's data-parallel group): stage 1 the optimizer states, stage 2 also the gradients, stage
// 3 also the parameters (each gathered in forward and again in backward: ZeRO-3's all-gathers).
// K_g: what group g keeps from its forward to its backward: its saved activations A_g, or only its
// input's buffer if it is a checkpointed block. X_g: what g adds on top while it runs: the largest
// excursion T_g of one of its ops (search/strategy.hpp: the buffers its backward writes and its
// workspace, a transient Partial output, under ZeRO-3 its gathered parameters, and the copies its
// moves make), or, for a checkpointed block, its rematerialized activations with the excursion of
// the op running: max_k(A_≤k + T_k) − its input, A_≤k what the block's ops up to k save (in
// backward, op k runs after the later ops freed theirs). All groups' K are held at the start of
// backward, where the peak of a training step lies (Korthikanti et al. 2022 §4 take the same
// point); X_g is the largest excursion above it.
//
// The DP. Ops are visited in graph order. A state is what the rest of the graph can still see of
// the past: for every live tensor (one with a consumer still to come) its stored spec and the
// identity, size and saved-flag of its buffer, and whether the open block is checkpointed (decided
// when the block is entered). A label is a partial cost: time (recompute included), base (P and K
// so far, plus A of an open unchecked group), extra (max X so far), and an open checkpointed
// block's A and open group's T. The rest of the graph adds the same amounts to every label of a
// state, so a label can be dropped when another of its state is no worse for every completion
// (dominates() says when: time, base, base + extra, base + open A and base + open A + open T all
// no larger). That loses no plan on the Pareto frontier of (time, base + extra): the DP is exact,
// and tests/search compares it with brute force.
//
// Search space: every strategy of every op (or the subset a StrategyFilter allows), except that
// an op of these kinds reads its first input, when that is an activation, in the spec it is stored
// in (reads_stored_spec):
//  - views, always: a view moves no data, so moving its input first costs what moving its output
//    afterwards costs, and the consumer of the view can do that (without this rule the three head
//    views of a fused QKV multiply the states by the cube of their specs);
//  - gelu, dropout, bias and scale, unless the stored spec is Partial: the producer picks the
//    spec they run in. A move before such an op carries as many bytes as the same move after it,
//    so the rule gives up only the difference in the op's own compute and saved bytes between
//    the two specs; a Partial input, which gelu, dropout and bias cannot read, may be read in any
//    spec. Without the rule each of these ops multiplies the labels of every state by its spec
//    count.
// The brute force applies the same rule, so the tests compare equal spaces.
//
// Identical transformer blocks (same ops, shapes and wiring) share one transfer table: the first
// block's internal DP is run once per entry spec of the residual stream, from a zero label, and its
// per-exit-state frontiers are combined with the labels arriving at every block. That combination
// is exact because every future cost adds to, or takes the maximum with, a label's components.
// Tensors that live across a block without being used in it (a tied embedding table) ride along
// in the state.
//
// Memoized segments (series-parallel structure inside a block). At op a of a block, the live
// tensors op a does not read (the residual while its branch runs) ride along unread until e, the
// first op that reads one of them. The ops [a, e) see only the tensors op a reads (the entries):
// their transfer table — exit states and frontiers from a zero label — is computed once per entry
// state and combined with every state that agrees on the entries, whatever the riders' specs
// (exact for the same reason). A branch thus costs (its entry specs) × (its inner states) instead
// of also × (the residual's specs), and the table is shared by every entry spec of the block that
// reaches the same branch input. Used when [a, e) spans at least four ops and no rider shares a
// buffer with an entry (saving an entry would mark a rider's buffer saved). A cut — a point inside
// a block where one tensor is live (the residual between attention and MLP) — starts a segment to
// the block's end, shared by every entry spec of the block that reaches the cut in the same
// state.
//
// Combining a memoized table with the labels reaching it (combine_jobs) merges the pairs of each
// next state in time order through a (base, peak) staircase. A pair is a stream position: outer
// label i followed by the table's labels j, j + 1, ... (sorted by time). The suffix minima of the
// table's base and peak bound every later pair of the stream from below, and every later pair is
// at least as slow as what the staircase holds, so once that bound is dominated (or over the
// budget) the rest of the stream is skipped; an outer label whose whole row is already beaten is
// never started. Both skip only pairs the staircase would drop, so the result is unchanged.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "carto/cost/collectives.hpp"
#include "carto/cost/hardware.hpp"
#include "carto/cost/reshard.hpp"
#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/profile/op_cost.hpp"
#include "carto/profile/options.hpp"
#include "carto/search/strategy.hpp"
#include "carto/spec/layout.hpp"
#include "carto/spec/mesh.hpp"

namespace carto {

enum class CheckpointChoice : std::uint8_t { none, all, search };

struct DpPoint;
namespace detail {
// A frontier sorted by time with falling peaks: drops a point whose successor takes the same time
// up to rounding (1e-9 relative; sums of the same terms in another order) with less memory, so two
// summation orders of one plan give one frontier.
template <class Point>
void drop_time_ties(std::vector<Point>& frontier) {
  std::vector<Point> kept;
  for (std::size_t i = 0; i < frontier.size(); ++i) {
    if (i + 1 < frontier.size()) {
      const double a = frontier[i].time_s, b = frontier[i + 1].time_s;
      if (std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b))) continue;
    }
    kept.push_back(std::move(frontier[i]));
  }
  frontier = std::move(kept);
}
}  // namespace detail

struct DpOptions {
  Precision precision = Precision::mixed_bf16;
  LayerNormStats layernorm_stats = LayerNormStats::counted;
  DropoutMasks dropout_masks = DropoutMasks::stored;  // regenerated: what carto's runtime does
  int zero_stage = 0;                                 // 0..3
  std::int64_t micro_batches = 1;                     // m: the step runs m forward/backward passes
  CheckpointChoice checkpoint = CheckpointChoice::search;
  // 0: exact (the frontier equals brute force's). ε > 0: labels within a factor (1 + ε) in memory
  // of a faster one are pruned at every step, which bounds the state sets on deep models; a plan's
  // memory can then exceed the best plan's by up to a factor (1 + ε) per pruning step on its path.
  double tolerance = 0;
  // Bytes per device. A partial plan whose peak already exceeds it, or will once the parameters
  // still to come are stored (each at least in its cheapest spec), is dropped (costs only grow):
  // the frontier then holds exactly the frontier's points that fit. The default keeps everything.
  std::int64_t memory_budget = std::numeric_limits<std::int64_t>::max();
  // Minimize the peak alone: step times are not tracked (every label's time is 0), so a state keeps
  // only the labels no other beats in memory, and the frontier is one point, a plan with the least
  // peak of any plan (its time_s is 0; evaluate_point prices it). What an infeasible budget's error
  // needs, at a fraction of the frontier's cost.
  bool least_memory = false;
  // Past this point in time the DP stops with a carto::Error (a caller's limit on search time).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// The strategies each op may use: all of enumerate_strategies, or a subset (pins). allowed[k] lists
// indices into enumerate_strategies(g, k, mesh) order; empty = all.
struct StrategyFilter {
  std::vector<std::vector<std::size_t>> allowed{};
};

// One point of the frontier, with the choices that give it.
struct DpPoint {
  double time_s = 0;
  std::int64_t peak_bytes = 0;
  std::vector<std::size_t> strategy{};  // per op: index into enumerate_strategies order
  std::vector<bool> checkpointed{};     // per group: a checkpointed transformer block
};

struct DpResult {
  std::vector<DpPoint> frontier{};  // increasing time, decreasing peak
  std::size_t labels_created = 0;   // work done, for benchmarks
  std::size_t segment_tables = 0;   // memoized segments computed (entry states over all segments)
};

namespace detail {

// The input of group gi: the first activation its ops read that was produced before the group.
inline TensorId group_input(const Graph& g, std::int32_t gi) {
  const OpGroup& grp = g.groups()[static_cast<std::size_t>(gi)];
  for (std::int32_t k = grp.first_op; k < grp.end_op; ++k) {
    for (TensorId t : g.ops()[static_cast<std::size_t>(k)].inputs) {
      const TensorInfo& info = g.tensor(t);
      if (info.kind == TensorKind::activation && info.producer.valid() &&
          info.producer.value < grp.first_op) {
        return t;
      }
    }
  }
  return TensorId{};
}

// The search space's rule for the first input of a view or an elementwise op (gelu, dropout, bias,
// scale) when that input is an activation stored in spec `stored`: true when the op must read it
// in `stored`. Views always do; the elementwise ops do unless `stored` is Partial (see the design
// note). The brute force applies the same rule.
inline bool reads_stored_spec(OpKind kind, const ShardingSpec& stored) {
  switch (kind) {
    case OpKind::view: return true;
    case OpKind::gelu:
    case OpKind::dropout:
    case OpKind::bias:
    case OpKind::scale: return !stored.is_partial();
    default: return false;
  }
}

// Per-parameter persistent bytes under a ZeRO stage: parameters + gradients (at the parameter's
// dtype) + optimizer states, the sharded parts divided by the replica count (rounded up).
inline std::int64_t zero_persistent_bytes(std::int64_t elements, std::int64_t element_size,
                                          Precision precision, int zero_stage,
                                          std::int64_t replicas) {
  auto shard = [&](std::int64_t bytes) { return (bytes + replicas - 1) / replicas; };
  const std::int64_t p = elements * element_size;
  const std::int64_t g = elements * element_size;
  const std::int64_t o = elements * optimizer_bytes_per_param(precision);
  switch (zero_stage) {
    case 0: return p + g + o;
    case 1: return p + g + shard(o);
    case 2: return p + shard(g) + shard(o);
    default: return shard(p) + shard(g) + shard(o);
  }
}

// ZeRO-3's all-gather of one parameter buffer of `bytes` per device (its unsharded local size) from
// its shards over the axes that do not split it, innermost axis first; one direction.
inline double zero3_gather_time(std::int64_t bytes, const ShardingSpec& stored,
                                const DeviceMesh& mesh, const HardwareProfile& hw) {
  std::int64_t replicas = 1;
  for (const MeshAxis& a : mesh.axes()) {
    if (!stored.uses(a.name)) replicas *= a.size;
  }
  double t = 0;
  std::int64_t current = (bytes + replicas - 1) / replicas;
  for (std::size_t i = mesh.num_axes(); i-- > 0;) {
    const MeshAxis& a = mesh.axis(i);
    if (stored.uses(a.name) || a.size == 1) continue;
    current *= a.size;
    t += collective_time(Collective::all_gather, mesh, a.name, current, hw);
  }
  return t;
}

// What the DP needs of every op and strategy, computed once.
class DpModel {
 public:
  DpModel(const Graph& g, const DeviceMesh& mesh, const HardwareProfile& hw,
          const DpOptions& options, const StrategyFilter& filter)
      : g_(g), mesh_(mesh), hw_(hw), options_(options) {
    if (options.zero_stage < 0 || options.zero_stage > 3) {
      fail("carto: ZeRO stage ", options.zero_stage, " does not exist; use 0, 1, 2 or 3");
    }
    if (options.micro_batches < 1)
      fail("carto: micro-batches must be at least 1; got ", options.micro_batches);
    if (!(options.tolerance >= 0) || !std::isfinite(options.tolerance))
      fail("carto: the pruning tolerance must be a finite number ≥ 0 (0 = exact); got ",
           options.tolerance);
    const std::size_t nt = g.tensors().size();
    last_use_.assign(nt, -1);
    first_use_.assign(nt, -1);
    uses_.assign(nt, {});
    for (std::size_t k = 0; k < g.num_ops(); ++k) {
      for (TensorId t : g.ops()[k].inputs) {
        last_use_[t.index()] = static_cast<std::int32_t>(k);
        if (first_use_[t.index()] < 0) first_use_[t.index()] = static_cast<std::int32_t>(k);
        if (uses_[t.index()].empty() || uses_[t.index()].back() != static_cast<std::int32_t>(k))
          uses_[t.index()].push_back(static_cast<std::int32_t>(k));
      }
    }
    graphs_.assign(nt, nullptr);
    const StrategyOptions sopt{.precision = options.precision,
                               .layernorm_stats = options.layernorm_stats,
                               .dropout_masks = options.dropout_masks};
    ops_.resize(g.num_ops());
    for (std::size_t k = 0; k < g.num_ops(); ++k) {
      const OpId o{static_cast<std::int32_t>(k)};
      std::vector<Strategy> all = enumerate_strategies(g, o, mesh, sopt);
      std::vector<std::size_t> pick;
      if (k < filter.allowed.size() && !filter.allowed[k].empty()) {
        pick = filter.allowed[k];
      } else {
        for (std::size_t i = 0; i < all.size(); ++i) pick.push_back(i);
      }
      for (std::size_t i : pick) {
        if (i >= all.size())
          fail("carto: strategy index ", i, " of op ", k, " is out of range (", all.size(), ")");
        ops_[k].push_back(make(k, all[i], i));
      }
      if (ops_[k].empty())
        fail("carto: op ", k, " (", to_string_view(g.ops()[k].kind), ") has no strategy left");
    }
    // The least persistent bytes of the parameters stored from op k on: each is stored in the
    // spec its first consumer reads it in, so it takes at least the least of that op's choices.
    param_to_go_.assign(g.num_ops() + 1, 0);
    for (std::size_t k = g.num_ops(); k-- > 0;) {
      std::int64_t here = 0;
      const Op& op = g.ops()[k];
      for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        const TensorId t = op.inputs[i];
        const bool first =
            std::find(op.inputs.begin(), op.inputs.begin() + static_cast<std::ptrdiff_t>(i), t) ==
            op.inputs.begin() + static_cast<std::ptrdiff_t>(i);
        if (g.tensor(t).kind != TensorKind::parameter ||
            first_use_[t.index()] != static_cast<std::int32_t>(k) || !first)
          continue;
        std::int64_t least = std::numeric_limits<std::int64_t>::max();
        for (const Choice& c : ops_[k])
          least = std::min(least, parameter_cost(t, c.inputs[i].want).first);
        here += least;
      }
      param_to_go_[k] = param_to_go_[k + 1] + here;
    }
  }

  struct Input {
    std::uint32_t want = 0;  // spec index of the input spec
    std::uint32_t want_plain =
        0;                   // without Partial (the gradient spec a parameter gets reduced to)
    std::uint32_t grad = 0;  // spec index of the gradient this op hands back
    bool saved = false;      // saved for backward (non-parameter)
  };
  struct Choice {
    std::size_t index = 0;  // in enumerate_strategies order
    StaticVector<Input, 3> inputs{};
    std::uint32_t output = 0;
    double micro_s = 0;    // compute + inside-op collectives, one micro-batch
    double forward_s = 0;  // compute + inside-op collectives of forward (recompute)
    double sync_s = 0;     // parameter-gradient reductions, once per step
    std::int64_t private_saved = 0;
    std::int64_t temporaries = 0;
    bool saves_output = false;
  };

  [[nodiscard]] const Graph& graph() const { return g_; }
  [[nodiscard]] const DeviceMesh& mesh() const { return mesh_; }
  [[nodiscard]] const HardwareProfile& hardware() const { return hw_; }
  [[nodiscard]] const DpOptions& options() const { return options_; }
  [[nodiscard]] const std::vector<Choice>& choices(std::size_t k) const { return ops_[k]; }
  [[nodiscard]] std::int32_t last_use(TensorId t) const { return last_use_[t.index()]; }
  [[nodiscard]] std::int32_t first_use(TensorId t) const { return first_use_[t.index()]; }
  // A lower bound on the persistent bytes the parameters first read at op k or later add to any
  // plan (k = num_ops: 0).
  [[nodiscard]] std::int64_t param_bytes_to_go(std::size_t k) const { return param_to_go_[k]; }
  // The first op at or after k that reads t; INT32_MAX if none.
  [[nodiscard]] std::int32_t next_use(TensorId t, std::int32_t k) const {
    const std::vector<std::int32_t>& u = uses_[t.index()];
    const auto it = std::lower_bound(u.begin(), u.end(), k);
    return it == u.end() ? std::numeric_limits<std::int32_t>::max() : *it;
  }

  ReshardGraph& reshard_graph(TensorId t) { return *shared(t).graph; }
  std::uint32_t spec_index(TensorId t, const ShardingSpec& s) {
    return static_cast<std::uint32_t>(reshard_graph(t).index(s, "strategy spec"));
  }
  const ShardingSpec& spec(TensorId t, std::uint32_t i) { return reshard_graph(t).spec(i); }
  double move_time(TensorId t, std::uint32_t from, std::uint32_t to) {
    if (from == to) return 0;
    return reshard_graph(t).time(from, to);
  }
  // Bytes a move from `from` to `to` holds beyond its source while it runs and while its result
  // lives: the plan's extra memory, which includes the moved copy (search/evaluate.hpp's move
  // transient); 0 for no move.
  // Cached per reshard graph (tensors of one shape and dtype share it), one row per source spec.
  std::int64_t move_transient(TensorId t, std::uint32_t from, std::uint32_t to) {
    if (from == to) return 0;
    SharedGraph& sg = shared(t);
    std::vector<std::int64_t>& row = sg.transient[from];
    if (row.empty()) row.assign(sg.graph->size(), -1);
    std::int64_t& v = row[to];
    if (v < 0) v = std::max(local_bytes(t, to), sg.graph->plan(from, to).extra_memory_bytes);
    return v;
  }
  // The index of spec `i` of t without its Partial axes.
  std::uint32_t plain_index(TensorId t, std::uint32_t i) {
    SharedGraph& sg = shared(t);
    std::uint32_t& p = sg.plain[i];
    if (p == kNoIndex)
      p = static_cast<std::uint32_t>(sg.graph->index(without_partial(sg.graph->spec(i)), "spec"));
    return p;
  }
  // A shard's bytes: the reshard graph's, whose dtype has the tensor's element size (fp32 for
  // int32 token ids) and whose specs split evenly.
  std::int64_t local_bytes(TensorId t, std::uint32_t spec_index) {
    return reshard_graph(t).local_bytes(spec_index);
  }
  // Persistent bytes and ZeRO-3 gather time (both directions, one micro-batch) of a parameter
  // stored in spec `s`.
  std::pair<std::int64_t, double> parameter_cost(TensorId t, std::uint32_t s) {
    const std::int64_t bytes = local_bytes(t, s);
    const std::int64_t elements = bytes / element_bytes(g_.tensor(t));
    const ShardingSpec& stored = spec(t, s);
    const std::int64_t persistent =
        zero_persistent_bytes(elements, element_bytes(g_.tensor(t)), options_.precision,
                              options_.zero_stage, replication_factor(stored, mesh_));
    const double gather =
        options_.zero_stage == 3 ? 2 * zero3_gather_time(bytes, stored, mesh_, hw_) : 0.0;
    return {persistent, gather};
  }

 private:
  Choice make(std::size_t k, const Strategy& s, std::size_t index) {
    const Op& op = g_.ops()[k];
    Choice c;
    c.index = index;
    const auto saved = saved_tensors(g_, op);
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const TensorId t = op.inputs[i];
      Input in;
      in.want = spec_index(t, s.sharding.inputs[i]);
      in.want_plain = spec_index(t, without_partial(s.sharding.inputs[i]));
      in.grad = spec_index(t, s.gradients[i]);
      in.saved = g_.tensor(t).kind != TensorKind::parameter &&
                 std::find(saved.begin(), saved.end(), t) != saved.end();
      c.inputs.push_back(in);
    }
    c.output = spec_index(op.output, s.sharding.output);
    c.saves_output = std::find(saved.begin(), saved.end(), op.output) != saved.end();
    const StrategyTime t = strategy_time(s, mesh_, hw_);
    c.sync_s = collectives_time(s.gradient_sync, mesh_, hw_);
    c.forward_s = t.compute_forward_s + t.comm_forward_s;
    c.micro_s = t.compute_forward_s + t.compute_backward_s + t.comm_forward_s +
                (t.comm_backward_s - c.sync_s);
    c.private_saved = s.cost.private_saved_bytes;
    // ZeRO-3 gathers the op's parameters for the time it runs.
    c.temporaries =
        s.memory.temporaries + (options_.zero_stage == 3 ? parameter_bytes(g_, s, mesh_) : 0);
    return c;
  }

  const Graph& g_;
  const DeviceMesh& mesh_;
  const HardwareProfile& hw_;
  DpOptions options_;
  std::vector<std::int32_t> last_use_;
  std::vector<std::int32_t> first_use_;
  std::vector<std::vector<std::int32_t>> uses_;  // per tensor: the ops that read it, increasing
  std::vector<std::vector<Choice>> ops_;
  std::vector<std::int64_t> param_to_go_;
  // A reshard graph with the caches of the tensors of its shape and dtype.
  static constexpr std::uint32_t kNoIndex = std::numeric_limits<std::uint32_t>::max();
  struct SharedGraph {
    std::unique_ptr<ReshardGraph> graph;
    std::vector<std::vector<std::int64_t>> transient;  // [from][to], rows filled when used
    std::vector<std::uint32_t> plain;                  // spec without Partial axes
  };
  SharedGraph& shared(TensorId t) {
    if (graphs_[t.index()] == nullptr) {
      const TensorInfo& info = g_.tensor(t);
      const DType dt = info.kind == TensorKind::index ? DType::fp32 : info.dtype;
      const std::string key = detail::concat(info.shape, '|', dt);
      auto it = by_shape_.find(key);
      if (it == by_shape_.end()) {
        SharedGraph sg;
        sg.graph = std::make_unique<ReshardGraph>(
            info.shape, dt, mesh_, hw_, ReshardOptions{.make_partial = MakePartial::allow});
        sg.transient.resize(sg.graph->size());
        sg.plain.assign(sg.graph->size(), kNoIndex);
        it = by_shape_.emplace(key, std::move(sg)).first;
      }
      graphs_[t.index()] = &it->second;
    }
    return *graphs_[t.index()];
  }
  std::vector<SharedGraph*> graphs_;
  std::map<std::string, SharedGraph> by_shape_;
};

// A live tensor in a DP state.
struct Live {
  std::int32_t tensor = 0;
  std::uint32_t spec = 0;
  std::int32_t root = 0;   // buffer identity (a tensor index)
  std::int64_t bytes = 0;  // the buffer's bytes
  bool saved = false;      // the buffer is already counted as saved
  friend bool operator==(const Live&, const Live&) = default;
};

// What the rest of the graph can see of the past: the live tensors (sorted by tensor), and whether
// the open transformer block is checkpointed (with its input's bytes, which it keeps).
struct State {
  std::vector<Live> live{};
  bool checkpoint = false;
  std::int64_t checkpoint_input = 0;
  friend bool operator==(const State&, const State&) = default;
};

struct StateHash {
  std::size_t operator()(const State& s) const {
    std::size_t h = 1469598103934665603ULL;
    auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ULL; };
    for (const Live& l : s.live) {
      mix(static_cast<std::uint64_t>(l.tensor));
      mix(l.spec);
      mix(static_cast<std::uint64_t>(l.root));
      mix(static_cast<std::uint64_t>(l.bytes));
      mix(l.saved ? 1 : 0);
    }
    mix(s.checkpoint ? 1 : 0);
    mix(static_cast<std::uint64_t>(s.checkpoint_input));
    return h;
  }
};

// A partial cost. Every component only grows along the graph (see dominates for why comparing
// them in these combinations is safe pruning).
struct Label {
  double time = 0;        // step time so far (recompute of the open checkpointed block included)
  std::int64_t base = 0;  // P so far + K of closed groups + A of the open group if not checkpointed
  std::int64_t extra = 0;       // max over closed groups of X_g
  std::int64_t open_saved = 0;  // open checkpointed block: A so far
  std::int64_t open_temp = 0;   // open checkpointed block: max over its ops k of A_≤k + T_k
  std::int32_t trace = -1;
};

// Whether every completion of `b` is matched or beaten by the same completion of `a` (two labels
// of one state: the rest of the graph adds the same time t', base B', saved bytes S' and
// workspace T' to both and closes the open group with the same input bytes `in`). The final
// cost is time + t' and
//   base + B' + max(extra, max(open_temp, open_saved + S' + T') − in, X''),
// X'' the later groups' excursions. Term by term, that is no larger for `a` for every t', B', S',
// T', X'' ≥ 0 when a.time ≤ b.time, a.base ≤ b.base, and a's base + extra, base + open_saved and
// base + open_temp are ≤ b's. This is coarser than comparing every component alone
// (a label with less extra but more base than another is dropped when its sum is not smaller
// either) and still exact.
inline bool dominates(const Label& a, const Label& b) {
  return a.time <= b.time && a.base <= b.base && a.base + a.extra <= b.base + b.extra &&
         a.base + a.open_saved <= b.base + b.open_saved &&
         a.base + a.open_temp <= b.base + b.open_temp;
}

// Inserts `l` unless dominated; removes the labels it dominates.
inline bool insert_label(std::vector<Label>& labels, const Label& l) {
  for (const Label& x : labels) {
    if (dominates(x, l)) return false;
  }
  labels.erase(
      std::remove_if(labels.begin(), labels.end(), [&](const Label& x) { return dominates(l, x); }),
      labels.end());
  labels.push_back(l);
  return true;
}

// v enlarged by the pruning tolerance ε: v + ε·v, saturating at the largest int64 (so any ε ≥ 0
// is safe; a large ε keeps about one label per state, the fastest).
inline std::int64_t with_tolerance(std::int64_t v, double tolerance) {
  if (tolerance == 0) return v;
  const double add = tolerance * static_cast<double>(v);
  constexpr auto top = std::numeric_limits<std::int64_t>::max();
  if (add >= static_cast<double>(top - v)) return top;
  return v + static_cast<std::int64_t>(add);
}

// The labels of `candidates` that no other candidate dominates (duplicates keep one). Labels with
// no open checkpointed block (open_saved = open_temp = 0) are filtered by a sweep in time order
// over a (base, base + extra) staircase, O(n log n); others by a sweep in the same order over
// staircases bucketed by (base, base + extra). With tolerance ε > 0 a flat candidate is also
// dropped when a kept label is at most as slow and within a factor (1 + ε) in base and
// base + extra: the search is then approximate (see DpOptions::tolerance).
inline std::vector<Label> pareto_filter(std::vector<Label> candidates, double tolerance = 0) {
  const bool flat = std::all_of(candidates.begin(), candidates.end(), [](const Label& l) {
    return l.open_saved == 0 && l.open_temp == 0;
  });
  if (!flat) {
    // In time order (a dominating label sorts before the labels it dominates, so no kept label is
    // dropped later), each label is checked against buckets of kept labels with the same base and
    // base + extra, each a staircase of (base + open_saved) -> least base + open_temp. Inside a
    // checkpointed block every label has extra 0 and a base of a few distinct values (its
    // input and the parameters' persistent bytes), so a check visits a few staircases instead of
    // every kept label.
    auto key = [](const Label& l) {
      return std::tuple(l.time, l.base, l.base + l.extra, l.base + l.open_saved,
                        l.base + l.open_temp);
    };
    std::sort(candidates.begin(), candidates.end(), [&](const Label& a, const Label& b) {
      return a.time != b.time ? a.time < b.time : key(a) < key(b);
    });
    std::map<std::pair<std::int64_t, std::int64_t>, std::map<std::int64_t, std::int64_t>> buckets;
    std::vector<Label> out;
    for (const Label& l : candidates) {
      const std::int64_t b = l.base, e = l.base + l.extra, s = l.base + l.open_saved,
                         t = l.base + l.open_temp;
      bool dominated = false;
      for (auto it = buckets.begin(); it != buckets.end() && it->first.first <= b; ++it) {
        if (it->first.second > e) continue;
        const auto j = it->second.upper_bound(s);
        if (j != it->second.begin() && std::prev(j)->second <= t) {
          dominated = true;
          break;
        }
      }
      if (dominated) continue;
      out.push_back(l);
      std::map<std::int64_t, std::int64_t>& stair = buckets[{b, e}];
      auto it = stair.lower_bound(s);
      while (it != stair.end() && it->second >= t) it = stair.erase(it);
      stair[s] = t;
    }
    return out;
  }
  // Sorting (time, index) pairs moves a quarter of the bytes of sorting the labels.
  std::vector<std::pair<double, std::uint32_t>> order(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i)
    order[i] = {candidates[i].time, static_cast<std::uint32_t>(i)};
  std::sort(order.begin(), order.end(), [&](const auto& x, const auto& y) {
    if (x.first != y.first) return x.first < y.first;
    const Label& a = candidates[x.second];
    const Label& b = candidates[y.second];
    if (a.base != b.base) return a.base < b.base;
    return a.extra < b.extra;
  });
  std::map<std::int64_t, std::int64_t> stair;  // base -> base + extra, falling as base rises
  std::vector<Label> out;
  for (const auto& [time, index] : order) {
    const Label& l = candidates[index];
    const auto slack = [tolerance](std::int64_t v) { return with_tolerance(v, tolerance); };
    const std::int64_t peak = l.base + l.extra;
    auto it = stair.upper_bound(slack(l.base));
    if (it != stair.begin() && std::prev(it)->second <= slack(peak)) continue;  // dominated
    out.push_back(l);
    it = stair.lower_bound(l.base);
    while (it != stair.end() && it->second >= peak) it = stair.erase(it);
    stair[l.base] = peak;
  }
  return out;
}

using Frontier = std::unordered_map<State, std::vector<Label>, StateHash>;

// How a label came to be: an op's choice, a block's checkpoint decision, or a memoized block.
struct Trace {
  std::int32_t parent = -1;
  std::int32_t op = -1;         // op choice: the op index
  std::int32_t choice = -1;     // op choice: index into DpModel::choices(op)
  std::int32_t group = -1;      // block entry or memoized block: the group
  std::int32_t sub = -1;        // memoized block or segment: the last trace of its internal run
  std::int32_t ops_offset = 0;  // memoized block: its first op minus the first block's
  bool checkpoint = false;      // block entry or memoized block: checkpointed
};

class Dp {
 public:
  explicit Dp(DpModel& model) : m_(model), g_(model.graph()) {
    for (const Op& op : g_.ops()) {
      if (op.group < 0) {
        fail("carto: the search needs every op inside a group (Graph::begin_group/end_group); op ",
             to_string_view(op.kind), " is in none");
      }
    }
  }

  DpResult run() {
    Frontier front;
    front[State{}].push_back(Label{});
    const auto& groups = g_.groups();
    std::size_t k = 0;
    while (k < g_.num_ops()) {
      const std::int32_t gi = g_.ops()[k].group;
      const OpGroup& grp = groups[static_cast<std::size_t>(gi)];
      const bool block = grp.kind == GroupKind::transformer_block;
      if (block && static_cast<std::size_t>(grp.first_op) == k && memo_usable(gi, front)) {
        front = apply_block(gi, front);
        k = static_cast<std::size_t>(grp.end_op);
        continue;
      }
      if (block && static_cast<std::size_t>(grp.first_op) == k) front = enter_block(gi, front);
      front = step(k, front);
      if (static_cast<std::size_t>(grp.end_op) == k + 1) front = end_group(front);
      ++k;
    }
    return collect(front);
  }

 private:
  static std::vector<Live>::iterator find(std::vector<Live>& v, std::int32_t t) {
    return std::find_if(v.begin(), v.end(), [t](const Live& l) { return l.tensor == t; });
  }
  static void sort_live(std::vector<Live>& v) {
    std::sort(v.begin(), v.end(), [](const Live& a, const Live& b) { return a.tensor < b.tensor; });
  }

  // The budget for the peak of a label at op position `pos` (before op pos runs): the memory
  // budget less what every completion adds for sure — the least persistent bytes of the parameters
  // still to be stored, and, inside a memoized table (labels from a zero label at its first op
  // `start`), those of the parameters stored before `start`, which every outer label it is
  // combined with already holds (table_offset_). Identical blocks store identical parameters, so
  // the first block's offsets hold for every block that shares its table. Dropping a label over
  // it is exact: its every completion's peak is over the budget.
  std::int64_t budget_at(std::int32_t pos) const {
    const std::int64_t budget = m_.options().memory_budget;
    if (budget == std::numeric_limits<std::int64_t>::max()) return budget;
    return budget - table_offset_ - m_.param_bytes_to_go(static_cast<std::size_t>(pos));
  }
  // Sets table_offset_ for a table that starts at op `start` while it lives; restores it after.
  struct TableScope {
    Dp& dp;
    std::int64_t saved;
    TableScope(Dp& d, std::int32_t start) : dp(d), saved(d.table_offset_) {
      dp.table_offset_ =
          dp.m_.param_bytes_to_go(0) - dp.m_.param_bytes_to_go(static_cast<std::size_t>(start));
    }
    ~TableScope() { dp.table_offset_ = saved; }
    TableScope(const TableScope&) = delete;
    TableScope& operator=(const TableScope&) = delete;
  };

  void check_deadline() const {
    if (m_.options().deadline != std::chrono::steady_clock::time_point::max() &&
        std::chrono::steady_clock::now() > m_.options().deadline) {
      fail("carto: the search passed its time limit");
    }
  }

  // ---- block entry: the checkpoint decision ----
  std::vector<bool> checkpoint_options() const {
    switch (m_.options().checkpoint) {
      case CheckpointChoice::none: return {false};
      case CheckpointChoice::all: return {true};
      case CheckpointChoice::search: return {false, true};
    }
    return {false};
  }

  Frontier enter_block(std::int32_t gi, const Frontier& in) {
    Frontier out;
    const TensorId x = block_input(gi);
    for (const auto& [state, labels] : in) {
      std::int64_t input_bytes = 0;
      for (const Live& l : state.live) {
        if (x.valid() && l.tensor == x.value) input_bytes = l.bytes;
      }
      for (const bool ckpt : checkpoint_options()) {
        State next = state;
        next.checkpoint = ckpt;
        next.checkpoint_input = ckpt ? input_bytes : 0;
        std::vector<Label>& dst = out[next];
        for (const Label& l : labels) {
          Label n = l;
          if (ckpt) n.base += input_bytes;
          n.trace = push_trace({.parent = l.trace, .group = gi, .checkpoint = ckpt});
          if (!insert_label(dst, n)) --traces_used_;
        }
      }
    }
    return out;
  }

  // ---- one op ----
  Frontier step(std::size_t k, const Frontier& in) {
    Frontier pending;
    std::vector<Trace> links;
    for (const auto& [state, labels] : in) {
      check_deadline();
      for (std::size_t c = 0; c < m_.choices(k).size(); ++c) {
        Label delta{};
        State next;
        if (!transition(k, c, state, delta, next)) continue;
        std::vector<Label>& dst = pending[next];
        for (const Label& l : labels) {
          Label n = l;
          n.time += delta.time;
          n.base += delta.base;
          n.open_saved += delta.open_saved;
          if (state.checkpoint) {  // backward of op k runs with A_≤k still held
            n.open_temp = std::max(n.open_temp, n.open_saved + delta.open_temp);
          } else {
            n.extra = std::max(n.extra, delta.open_temp);  // X_g = T_g: no need to wait for the end
          }
          n.trace = static_cast<std::int32_t>(links.size());
          links.push_back({.parent = l.trace,
                           .op = static_cast<std::int32_t>(k),
                           .choice = static_cast<std::int32_t>(c)});
          dst.push_back(n);
          ++labels_created_;
        }
      }
    }
    return filter_pending(pending, links, budget_at(static_cast<std::int32_t>(k) + 1));
  }

  // The cost of op k with choice c from `state` (label-independent), and the next state.
  bool transition(std::size_t k, std::size_t c, const State& state, Label& d, State& next) {
    const Op& op = g_.ops()[k];
    const DpModel::Choice& ch = m_.choices(k)[c];
    const double m = static_cast<double>(m_.options().micro_batches);
    next = state;
    std::vector<Live>& live = next.live;
    double micro = ch.micro_s;
    double fwd = ch.forward_s;
    std::int64_t saved = ch.private_saved;
    d.time = ch.sync_s;
    std::int64_t forward_moves = 0;   // moved inputs, live together while the op runs
    std::int64_t backward_moves = 0;  // the largest gradient move
    auto mark_saved = [&](std::int32_t root) {
      for (Live& l : live) {
        if (l.root == root) l.saved = true;
      }
    };
    std::vector<std::int32_t> saved_roots_now;  // roots saved by this op (dedupe within the op)
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const TensorId t = op.inputs[i];
      const TensorInfo& info = g_.tensor(t);
      const DpModel::Input& in = ch.inputs[i];
      auto it = find(live, t.value);
      Live stored;
      if (it == live.end()) {
        if (info.producer.valid())
          fail("carto: internal: tensor ", t.value, " is not live at op ", k);
        // First consumer of a parameter or graph input: stored as read.
        stored = {.tensor = t.value,
                  .spec = in.want,
                  .root = t.value,
                  .bytes = m_.local_bytes(t, in.want),
                  .saved = false};
        if (info.kind == TensorKind::parameter) {
          const auto [persistent, gather] = m_.parameter_cost(t, in.want);
          d.base += persistent;
          micro += gather;
          fwd += gather / 2;  // the forward gather reruns with the block's recompute
        }
        if (m_.last_use(t) > static_cast<std::int32_t>(k)) {
          live.push_back(stored);
          sort_live(live);
        }
      } else {
        stored = *it;
      }
      const bool moved = stored.spec != in.want;
      if (moved && i == 0 && info.producer.valid() &&
          reads_stored_spec(op.kind, m_.spec(t, stored.spec)))
        return false;  // see the design note's search space
      double forward_move = 0;
      if (moved) {
        forward_move = m_.move_time(t, stored.spec, in.want);
        if (!(forward_move < std::numeric_limits<double>::infinity())) return false;
        micro += forward_move;
        fwd += forward_move;
        forward_moves += m_.move_transient(t, stored.spec, in.want);
      }
      if (info.kind == TensorKind::parameter) {
        if (moved) {
          const double back = m_.move_time(t, in.want_plain, stored.spec);
          if (!(back < std::numeric_limits<double>::infinity())) return false;
          micro += back;
          backward_moves =
              std::max(backward_moves, m_.move_transient(t, in.want_plain, stored.spec));
        }
      } else if (info.kind == TensorKind::activation && info.producer.valid()) {
        const std::uint32_t needed = m_.plain_index(t, stored.spec);
        if (in.grad != needed) {
          const double back = m_.move_time(t, in.grad, needed);
          if (!(back < std::numeric_limits<double>::infinity())) return false;
          micro += back;
          backward_moves = std::max(backward_moves, m_.move_transient(t, in.grad, needed));
        }
      }
      if (in.saved) {
        const bool already =
            stored.saved || std::find(saved_roots_now.begin(), saved_roots_now.end(),
                                      stored.root) != saved_roots_now.end();
        if (!moved || m_.local_bytes(t, stored.spec) < m_.local_bytes(t, in.want)) {
          if (!already) saved += stored.bytes;
          saved_roots_now.push_back(stored.root);
          mark_saved(stored.root);
          if (moved) micro += forward_move;  // regather before the op's backward
        } else {
          saved += m_.local_bytes(t, in.want);
        }
      }
    }
    // The output.
    Live out{.tensor = op.output.value,
             .spec = ch.output,
             .root = op.output.value,
             .bytes = m_.local_bytes(op.output, ch.output),
             .saved = false};
    if (op.kind == OpKind::view) {  // unmoved (checked above): aliases its input's buffer
      auto src = find(live, op.inputs[0].value);
      if (src != live.end()) {
        out.root = src->root;
        out.bytes = src->bytes;
        out.saved = src->saved;
      }
    }
    if (ch.saves_output && !out.saved) {  // softmax, fused attention
      saved += out.bytes;
      out.saved = true;
    }
    // Drop what is dead after op k, then add the output if something reads it later.
    live.erase(std::remove_if(live.begin(), live.end(),
                              [&](const Live& l) {
                                return m_.last_use(TensorId{l.tensor}) <=
                                       static_cast<std::int32_t>(k);
                              }),
               live.end());
    if (m_.last_use(op.output) > static_cast<std::int32_t>(k)) {
      for (const Live& l : live) {
        if (l.root == out.root && l.saved) out.saved = true;
      }
      live.push_back(out);
      sort_live(live);
    }
    d.open_temp = ch.temporaries + std::max(forward_moves, backward_moves);
    d.time += m * micro;
    if (state.checkpoint) {
      d.time += m * fwd;  // recomputed in backward
      d.open_saved = saved;
    } else {
      d.base += saved;
    }
    if (m_.options().least_memory) d.time = 0;
    return true;
  }

  // ---- groups ----
  TensorId block_input(std::int32_t gi) const { return group_input(g_, gi); }

  // X_g of the open group: T_g, or max_k(A_≤k + T_k) − input for a checkpointed block.
  static Label close(const Label& l, const State& state) {
    Label n = l;
    const std::int64_t x = state.checkpoint
                               ? std::max(l.open_temp, l.open_saved) - state.checkpoint_input
                               : l.open_temp;
    n.extra = std::max(l.extra, x);
    n.open_saved = 0;
    n.open_temp = 0;
    return n;
  }

  Frontier end_group(const Frontier& in) {
    Frontier out;
    for (const auto& [state, labels] : in) {
      State next = state;
      next.checkpoint = false;
      next.checkpoint_input = 0;
      std::vector<Label>& dst = out[next];
      for (const Label& l : labels) {
        Label n = close(l, state);
        n.trace = l.trace;
        insert_label(dst, n);
      }
    }
    return out;
  }

  // ---- memoized blocks ----
  static bool flat(const std::vector<Label>& labels) {
    return std::all_of(labels.begin(), labels.end(),
                       [](const Label& l) { return l.open_saved == 0 && l.open_temp == 0; });
  }
  // Whether labels are sorted like combine_jobs' heap: by time, then base, then extra.
  static bool in_order(const Label& a, const Label& b) {
    if (a.time != b.time) return a.time < b.time;
    if (a.base != b.base) return a.base < b.base;
    return a.extra < b.extra;
  }
  static bool sorted(const std::vector<Label>& labels) {
    return std::is_sorted(labels.begin(), labels.end(), in_order);
  }
  // Per position j of an internal list: the least base and base + extra from j to its end.
  struct SuffixMinima {
    std::vector<std::int64_t> base;
    std::vector<std::int64_t> peak;
  };
  struct BlockExit {
    std::vector<Live> live;     // relative to the first block's tensors
    std::vector<Label> labels;  // internal, from a zero label, closed
    SuffixMinima suffix{};
    bool flat = true;
  };
  static BlockExit make_exit(std::vector<Live> live, std::vector<Label> labels) {
    BlockExit x{.live = std::move(live), .labels = std::move(labels)};
    x.flat = flat(x.labels);
    x.suffix.base.resize(x.labels.size());
    x.suffix.peak.resize(x.labels.size());
    std::int64_t b = std::numeric_limits<std::int64_t>::max(), p = b;
    for (std::size_t j = x.labels.size(); j-- > 0;) {
      b = std::min(b, x.labels[j].base);
      p = std::min(p, x.labels[j].base + x.labels[j].extra);
      x.suffix.base[j] = b;
      x.suffix.peak[j] = p;
    }
    return x;
  }
  using ExitKey =
      std::tuple<std::uint32_t, bool, std::int64_t, bool>;  // spec, saved, bytes, checkpoint

  std::int32_t first_block_ = -1;
  std::map<ExitKey, std::vector<BlockExit>> exits_{};

  bool same_structure(std::int32_t a, std::int32_t b) const {
    const OpGroup& ga = g_.groups()[static_cast<std::size_t>(a)];
    const OpGroup& gb = g_.groups()[static_cast<std::size_t>(b)];
    if (ga.end_op - ga.first_op != gb.end_op - gb.first_op) return false;
    const std::int32_t dt = block_input(b).value - block_input(a).value;
    for (std::int32_t i = 0; i < ga.end_op - ga.first_op; ++i) {
      const Op& x = g_.ops()[static_cast<std::size_t>(ga.first_op + i)];
      const Op& y = g_.ops()[static_cast<std::size_t>(gb.first_op + i)];
      if (x.kind != y.kind || x.inputs.size() != y.inputs.size() || x.dim != y.dim ||
          x.view != y.view || x.masking != y.masking || x.probability != y.probability ||
          x.factor != y.factor || !(x.einsum.output == y.einsum.output) ||
          !(x.einsum.inputs == y.einsum.inputs)) {
        return false;
      }
      if (y.output.value - x.output.value != dt) return false;
      const auto& cx = m_.choices(static_cast<std::size_t>(ga.first_op + i));
      const auto& cy = m_.choices(static_cast<std::size_t>(gb.first_op + i));
      if (cx.size() != cy.size()) return false;
      for (std::size_t j = 0; j < cx.size(); ++j) {
        if (cx[j].index != cy[j].index) return false;
      }
      for (std::size_t j = 0; j < x.inputs.size(); ++j) {
        if (y.inputs[j].value - x.inputs[j].value != dt) return false;
        const TensorInfo& tx = g_.tensor(x.inputs[j]);
        const TensorInfo& ty = g_.tensor(y.inputs[j]);
        if (!(tx.shape == ty.shape) || tx.dtype != ty.dtype || tx.kind != ty.kind) return false;
      }
    }
    return true;
  }

  // Whether block gi can use the transfer table: same structure as the first block, its input owns
  // its buffer, no other live tensor is read inside it, and nothing it produces is read after it
  // except its last op's output.
  bool memo_usable(std::int32_t gi, const Frontier& front) {
    if (first_block_ < 0) first_block_ = gi;
    if (!same_structure(first_block_, gi)) return false;
    const TensorId x = block_input(gi);
    if (!x.valid()) return false;
    const OpGroup& grp = g_.groups()[static_cast<std::size_t>(gi)];
    for (std::int32_t k = grp.first_op; k < grp.end_op; ++k) {
      const Op& op = g_.ops()[static_cast<std::size_t>(k)];
      if (k + 1 < grp.end_op && m_.last_use(op.output) >= grp.end_op) return false;
      for (TensorId t : op.inputs) {
        if (t == x) continue;
        if (g_.tensor(t).producer.valid() && g_.tensor(t).producer.value < grp.first_op)
          return false;
        if (!g_.tensor(t).producer.valid() && m_.first_use(t) < grp.first_op) return false;
      }
    }
    for (const auto& [state, labels] : front) {
      for (const Live& l : state.live) {
        if (l.tensor == x.value && l.root != x.value) return false;
      }
    }
    return true;
  }

  const std::vector<BlockExit>& block_exits(const Live& entry, bool checkpoint) {
    const ExitKey key{entry.spec, entry.saved, entry.bytes, checkpoint};
    auto it = exits_.find(key);
    if (it != exits_.end()) return it->second;
    const OpGroup& grp = g_.groups()[static_cast<std::size_t>(first_block_)];
    const TensorId x = block_input(first_block_);
    Live start = entry;
    start.tensor = x.value;
    start.root = x.value;
    State s0{.live = {start},
             .checkpoint = checkpoint,
             .checkpoint_input = checkpoint ? entry.bytes : 0};
    Frontier f;
    Label zero{};
    if (checkpoint) zero.base = entry.bytes;
    f[s0].push_back(zero);
    const TableScope scope(*this, grp.first_op);
    f = run_ops(grp.first_op, grp.end_op, std::move(f));
    f = end_group(f);
    std::vector<BlockExit> exits;
    for (auto& [state, labels] : f) exits.push_back(make_exit(state.live, std::move(labels)));
    return exits_.emplace(key, std::move(exits)).first->second;
  }

  // `outer` followed by a memoized run from a zero label: times and bases add, the other
  // components are the larger of the two or add (an open checkpointed block's saved bytes).
  static Label combine(const Label& outer, const Label& internal) {
    Label n = outer;
    n.time += internal.time;
    n.base += internal.base;
    n.extra = std::max(outer.extra, internal.extra);
    n.open_saved += internal.open_saved;
    n.open_temp = std::max(outer.open_temp, outer.open_saved + internal.open_temp);
    return n;
  }

  // Every label of `outer` followed by every label of `internal` (a memoized run), for one next
  // state; `link` becomes the trace of each pair.
  struct Job {
    const std::vector<Label>* outer = nullptr;
    const BlockExit* exit = nullptr;
    Trace link{};
    bool outer_flat = true;    // flat(*outer)
    bool outer_sorted = true;  // sorted(*outer)
  };
  using Jobs = std::unordered_map<State, std::vector<Job>, StateHash>;

  // The Pareto-optimal pairs of every next state. Flat labels (no open checkpointed block) come
  // out of pareto_filter sorted by (time, base, extra), so each outer label followed by the
  // internal list is a sorted stream: a heap merges the streams in that order through the same
  // staircase pareto_filter uses, without materializing or sorting the pairs. Others go through
  // pareto_filter.
  Frontier combine_jobs(const Jobs& jobs, std::int32_t pos) {
    Frontier out;
    Frontier pending;
    std::vector<Trace> links;
    const double tolerance = m_.options().tolerance;
    const std::int64_t budget = budget_at(pos);
    struct Cursor {
      double time;
      std::int64_t base;
      std::int64_t extra;
      std::uint32_t job;
      std::uint32_t i;
      std::uint32_t j;
    };
    auto later = [](const Cursor& x, const Cursor& y) {
      if (x.time != y.time) return x.time > y.time;
      if (x.base != y.base) return x.base > y.base;
      return x.extra > y.extra;
    };
    std::vector<Cursor> heap;
    for (const auto& [state, list] : jobs) {
      check_deadline();
      const bool all_flat = std::all_of(list.begin(), list.end(),
                                        [](const Job& j) { return j.outer_flat && j.exit->flat; });
      if (!all_flat) {
        std::vector<Label>& dst = pending[state];
        for (const Job& job : list) {
          Trace link = job.link;
          for (const Label& l : *job.outer) {
            for (const Label& i : job.exit->labels) {
              Label n = combine(l, i);
              n.trace = static_cast<std::int32_t>(links.size());
              link.parent = l.trace;
              link.sub = i.trace;
              links.push_back(link);
              dst.push_back(n);
              ++labels_created_;
            }
          }
        }
        continue;
      }
      heap.clear();
      auto cursor = [&](std::uint32_t job, std::uint32_t i, std::uint32_t j) {
        const Label n = combine((*list[job].outer)[i], list[job].exit->labels[j]);
        return Cursor{n.time, n.base, n.extra, job, i, j};
      };
      std::map<std::int64_t, std::int64_t> stair;  // as in pareto_filter
      std::vector<Label> kept;
      auto slack = [tolerance](std::int64_t v) { return with_tolerance(v, tolerance); };
      std::vector<const SuffixMinima*> suffixes(list.size());
      auto dominated = [&](std::int64_t base, std::int64_t peak) {
        const auto it = stair.upper_bound(slack(base));
        return it != stair.begin() && std::prev(it)->second <= slack(peak);
      };
      // Whether the rest of a stream, from its j-th pair on, can still give a kept label: the
      // suffix minima of the internal list bound the base and peak of every later pair from
      // below, and every later pair is at least as slow as any label the staircase holds.
      auto alive = [&](const Cursor& c, std::uint32_t j) {
        const Label& l = (*list[c.job].outer)[c.i];
        const SuffixMinima& sm = *suffixes[c.job];
        const std::int64_t base = l.base + sm.base[j];
        const std::int64_t peak = l.base + std::max(sm.base[j] + l.extra, sm.peak[j]);
        return peak <= budget && !dominated(base, peak);
      };
      // A job whose outer labels are sorted like the heap starts with its first pair only: pair
      // (i + 1, 0) follows no earlier than (i, 0), so it is pushed when (i, 0) is popped and the
      // heap holds one cursor per live stream instead of one per outer label.
      std::vector<bool> lazy(list.size());
      for (std::uint32_t job = 0; job < list.size(); ++job) {
        if (list[job].exit->labels.empty() || list[job].outer->empty()) continue;
        suffixes[job] = &list[job].exit->suffix;
        lazy[job] = list[job].outer_sorted;
        const std::uint32_t n = lazy[job] ? 1 : static_cast<std::uint32_t>(list[job].outer->size());
        for (std::uint32_t i = 0; i < n; ++i) heap.push_back(cursor(job, i, 0));
      }
      std::make_heap(heap.begin(), heap.end(), later);
      auto push = [&](const Cursor& c) {
        heap.push_back(c);
        std::push_heap(heap.begin(), heap.end(), later);
      };
      while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const Cursor c = heap.back();
        heap.pop_back();
        if ((++labels_created_ & 0xfffff) == 0) check_deadline();  // long merges, too
        const Job& job = list[c.job];
        if (c.j == 0 && lazy[c.job]) {  // the next outer label whose row can still give a label
          Cursor next = c;
          for (++next.i; next.i < job.outer->size(); ++next.i) {
            if (alive(next, 0)) {
              push(cursor(c.job, next.i, 0));
              break;
            }
          }
        }
        const std::int64_t peak = c.base + c.extra;
        const bool keep = peak <= budget && !dominated(c.base, peak);
        if (c.j + 1 < job.exit->labels.size() && (keep || alive(c, c.j + 1)))
          push(cursor(c.job, c.i, c.j + 1));
        if (!keep) continue;
        auto it = stair.lower_bound(c.base);
        while (it != stair.end() && it->second >= peak) it = stair.erase(it);
        stair[c.base] = peak;
        const Label& l = (*job.outer)[c.i];
        const Label& i = job.exit->labels[c.j];
        Label n = combine(l, i);
        Trace link = job.link;
        link.parent = l.trace;
        link.sub = i.trace;
        n.trace = push_trace(link);
        kept.push_back(n);
      }
      if (!kept.empty()) out[state] = std::move(kept);
    }
    for (auto& [state, labels] : filter_pending(pending, links, budget))
      out[state] = std::move(labels);
    return out;
  }

  // Keeps the Pareto-optimal candidates of every state; candidates' `trace` indexes `links`.
  Frontier filter_pending(Frontier& pending, const std::vector<Trace>& links, std::int64_t budget) {
    Frontier out;
    for (auto& [state, candidates] : pending) {
      if (budget < std::numeric_limits<std::int64_t>::max()) {
        std::erase_if(candidates, [budget](const Label& l) { return l.base + l.extra > budget; });
      }
      std::vector<Label> kept = pareto_filter(std::move(candidates), m_.options().tolerance);
      if (kept.empty()) continue;
      for (Label& l : kept) l.trace = push_trace(links[static_cast<std::size_t>(l.trace)]);
      out[state] = std::move(kept);
    }
    return out;
  }

  Frontier apply_block(std::int32_t gi, const Frontier& in) {
    const TensorId x = block_input(gi);
    const std::int32_t dt = x.value - block_input(first_block_).value;
    const std::int32_t ops_offset = g_.groups()[static_cast<std::size_t>(gi)].first_op -
                                    g_.groups()[static_cast<std::size_t>(first_block_)].first_op;
    Jobs jobs;
    for (const auto& [state, labels] : in) {
      check_deadline();
      const bool outer_flat = flat(labels), outer_sorted = sorted(labels);
      std::vector<Live> rest;
      Live entry{};
      bool found = false;
      for (const Live& l : state.live) {
        if (l.tensor == x.value) {
          entry = l;
          found = true;
        } else {
          rest.push_back(l);
        }
      }
      if (!found)
        fail("carto: internal: the input of block ", g_.groups()[static_cast<std::size_t>(gi)].name,
             " is not live");
      for (const bool ckpt : checkpoint_options()) {
        for (const BlockExit& exit : block_exits(entry, ckpt)) {
          State next{.live = rest};
          for (Live l : exit.live) {
            l.tensor += dt;
            l.root += dt;
            next.live.push_back(l);
          }
          sort_live(next.live);
          jobs[next].push_back({.outer = &labels,
                                .exit = &exit,
                                .link = {.group = gi, .ops_offset = ops_offset, .checkpoint = ckpt},
                                .outer_flat = outer_flat,
                                .outer_sorted = outer_sorted});
        }
      }
    }
    return combine_jobs(jobs, g_.groups()[static_cast<std::size_t>(gi)].end_op);
  }

  // ---- memoized segments inside a block ----
  // Ops [first, end) of one open group, with memoized segments where they apply.
  Frontier run_ops(std::int32_t first, std::int32_t end, Frontier f) {
    for (std::int32_t k = first; k < end;) {
      const std::int32_t e = segment_end(first, k, end, f);
      if (e > k) {
        f = apply_segment(k, e, f);
        k = e;
      } else {
        f = step(static_cast<std::size_t>(k), f);
        ++k;
      }
    }
    return f;
  }

  // A segment [a, e) of a group: the live tensors that op a does not read ride along unread
  // (riders) until e, the first op that reads one of them; those op a reads are its entries. Its
  // transfer table (exit states and labels from a zero label, per entry state) is computed once
  // and shared by every state that agrees on the entries (exact: see the design note). Used when
  // it spans at least kMinSegment ops and no rider shares a buffer with an entry (an op saving an
  // entry marks the buffer saved, which a rider would see); without riders, only at a cut (one
  // live tensor), where it runs to the group's end. Returns e, or a (none).
  static constexpr std::int32_t kMinSegment = 4;
  std::int32_t segment_end(std::int32_t first, std::int32_t a, std::int32_t end,
                           const Frontier& f) const {
    if (f.empty() || end - a < kMinSegment) return a;
    std::int32_t e = end;
    bool any_entry = false;
    bool any_rider = false;
    for (const Live& l : f.begin()->first.live) {  // every state has the same live tensors
      const std::int32_t next = m_.next_use(TensorId{l.tensor}, a);
      if (next == a) {
        any_entry = true;
      } else {
        any_rider = true;
        e = std::min(e, next);
      }
    }
    if (!any_entry || e - a < kMinSegment) return a;
    // Without riders, only a cut (one live tensor) past the run's first op is worth a table: it is
    // shared by the runs that reach the cut in the same state (the blocks' entry specs).
    if (!any_rider && (f.begin()->first.live.size() != 1 || a == first)) return a;
    for (const auto& [state, labels] : f) {
      for (const Live& r : state.live) {
        if (m_.next_use(TensorId{r.tensor}, a) == a) continue;
        for (const Live& l : state.live) {
          if (m_.next_use(TensorId{l.tensor}, a) == a && l.root == r.root) return a;
        }
      }
    }
    return e;
  }

  using SegmentKey = std::pair<std::int32_t, std::int32_t>;
  std::map<SegmentKey, std::unordered_map<State, std::vector<BlockExit>, StateHash>> segments_{};

  const std::vector<BlockExit>& segment_exits(std::int32_t a, std::int32_t e, const State& entry) {
    auto& table = segments_[{a, e}];
    auto it = table.find(entry);
    if (it != table.end()) return it->second;
    Frontier f;
    f[entry].push_back(Label{});
    const TableScope scope(*this, a);
    f = run_ops(a, e, std::move(f));
    std::vector<BlockExit> exits;
    for (auto& [state, labels] : f) exits.push_back(make_exit(state.live, std::move(labels)));
    return segments_[{a, e}].emplace(entry, std::move(exits)).first->second;
  }

  Frontier apply_segment(std::int32_t a, std::int32_t e, const Frontier& in) {
    Jobs jobs;
    for (const auto& [state, labels] : in) {
      check_deadline();
      const bool outer_flat = flat(labels), outer_sorted = sorted(labels);
      // The open block's input bytes matter only when the block closes, after the segment.
      State entry{.checkpoint = state.checkpoint};
      std::vector<Live> riders;
      for (const Live& l : state.live) {
        (m_.next_use(TensorId{l.tensor}, a) == a ? entry.live : riders).push_back(l);
      }
      for (const BlockExit& exit : segment_exits(a, e, entry)) {
        State next{.live = riders,
                   .checkpoint = state.checkpoint,
                   .checkpoint_input = state.checkpoint_input};
        next.live.insert(next.live.end(), exit.live.begin(), exit.live.end());
        sort_live(next.live);
        jobs[next].push_back({.outer = &labels,
                              .exit = &exit,
                              .outer_flat = outer_flat,
                              .outer_sorted = outer_sorted});
      }
    }
    return combine_jobs(jobs, e);
  }

  // ---- traces and results ----
  std::int32_t push_trace(const Trace& t) {
    if (traces_used_ < traces_.size()) {
      traces_[traces_used_] = t;
    } else {
      traces_.push_back(t);
    }
    return static_cast<std::int32_t>(traces_used_++);
  }

  // Walks a trace back, filling op choices and checkpoint flags; memoized runs recorded for the
  // first block's ops are shifted by their block's offset.
  void unwind(std::int32_t t, std::int32_t ops_offset, DpPoint& p) {
    while (t >= 0) {
      const Trace& tr = traces_[static_cast<std::size_t>(t)];
      if (tr.group >= 0) p.checkpointed[static_cast<std::size_t>(tr.group)] = tr.checkpoint;
      if (tr.sub >= 0) unwind(tr.sub, ops_offset + tr.ops_offset, p);
      if (tr.op >= 0) {
        p.strategy[static_cast<std::size_t>(tr.op + ops_offset)] =
            m_.choices(static_cast<std::size_t>(tr.op))[static_cast<std::size_t>(tr.choice)].index;
      }
      t = tr.parent;
    }
  }

  DpResult collect(const Frontier& front) {
    std::vector<Label> all;
    for (const auto& [state, labels] : front) {
      for (const Label& l : labels) all.push_back(l);
    }
    std::sort(all.begin(), all.end(), [](const Label& a, const Label& b) {
      const std::int64_t pa = a.base + a.extra, pb = b.base + b.extra;
      return a.time != b.time ? a.time < b.time : pa < pb;
    });
    DpResult r;
    r.labels_created = labels_created_;
    for (const auto& [range, table] : segments_) r.segment_tables += table.size();
    std::int64_t best_peak = std::numeric_limits<std::int64_t>::max();
    for (const Label& l : all) {
      const std::int64_t peak = l.base + l.extra;
      if (peak >= best_peak || peak > m_.options().memory_budget) continue;
      best_peak = peak;
      DpPoint p;
      p.time_s = l.time;
      p.peak_bytes = peak;
      p.strategy.assign(g_.num_ops(), 0);
      p.checkpointed.assign(g_.groups().size(), false);
      unwind(l.trace, 0, p);
      r.frontier.push_back(std::move(p));
    }
    drop_time_ties(r.frontier);
    return r;
  }

  DpModel& m_;
  const Graph& g_;
  std::vector<Trace> traces_{};
  std::size_t traces_used_ = 0;
  std::size_t labels_created_ = 0;
  std::int64_t table_offset_ = 0;  // see budget_at
};

}  // namespace detail

// The exact Pareto frontier of (step time, peak memory per device) of `g` on `mesh` under
// `options`.
inline DpResult dp_frontier(const Graph& g, const DeviceMesh& mesh, const HardwareProfile& hw,
                            const DpOptions& options = {}, const StrategyFilter& filter = {}) {
  detail::DpModel model(g, mesh, hw, options, filter);
  return detail::Dp(model).run();
}

}  // namespace carto
