// carto/search/model.hpp — what the DP knows of one graph on one mesh: its options, every op's
// choices with their costs computed once, and the reshard graphs of its tensors.
//
// Design note (DESIGN.md §4-§6). Cost of an assignment (one strategy per op, one checkpoint flag
// per block). The per-op rules are evaluate_assignment's (search/evaluate.hpp), applied
// incrementally: a tensor is stored in its producer's output spec (a parameter or graph input in
// its first consumer's input spec); an op reading another spec pays the Dijkstra reshard before
// it, and the gradient it hands back pays the move to the spec the producer needs; a parameter
// read in another spec than stored pays the move of its gradient home; saved inputs follow the
// regather rule; buffers are deduplicated by identity (a view without a move aliases its input's
// buffer). On top of that, for m micro-batches:
//   step time = m · (compute + collectives inside ops + reshards + regathers
//                    + recompute of checkpointed blocks + ZeRO-3 parameter gathers)
//             + parameter-gradient reductions (once per step, after accumulation).
// A checkpointed block recomputes its forward (compute, forward collectives and forward reshards of
// its ops) in backward.
//
// Memory per device (the schedule model of DESIGN.md §5, the same one search/price.hpp uses):
//   peak = P + max(Σ_g K_g, max_g (K_<g + Y_g)),  Y_g = max over g's ops k of (A_g,≤k + U_k)
// P: parameters, gradients and AdamW states of every parameter in its stored spec, persistent for
// the whole step; ZeRO shards them over the N devices that hold the same parameter slice (the
// parameter's data-parallel group): stage 1 the optimizer states, stage 2 also the gradients, stage
// 3 also the parameters (each gathered in forward and again in backward: ZeRO-3's all-gathers).
// K_g: what group g keeps from its forward to its backward: its saved activations A_g, or only its
// input's buffer if it is a checkpointed block. In backward the groups after g have freed theirs
// when g runs, and op k of g runs with what g's ops up to k saved (A_g,≤k; recomputed, in a
// checkpointed block), those of later ops freed. U_k is what op k adds while it runs
// (search/gradient_memory.hpp): the gradients of the activations live across it (one buffer per
// root: the residual stream's gradient is one buffer), then the larger of its forward part (its
// inputs and output that no op saved, its forward moves' copies; in a recompute the block
// output's gradient, the size of the block's input) and its backward part (its workspace, the
// gradients it adds into, dY unless handed on, the input gradients it writes — a parameter's only
// at ZeRO 2-3 —, its regathers and gradient moves), plus ZeRO-3's gathered parameters. The DP
// adds A and U op by op (search/dp_core.hpp), so what an op keeps lowers the candidates before it
// (frontier.hpp's Label).
//
// DpModel computes per op the choices the space allows (search/space.hpp: the pins' subset, in the
// standard space also in mesh order) with their times, saved bytes and temporaries, once; per
// tensor shape class a reshard graph (cost/reshard.hpp) with dense caches of move transients and
// Partial-free spec indices, shared by every tensor of that shape and dtype.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "carto/cost/collectives.hpp"
#include "carto/cost/hardware.hpp"
#include "carto/cost/reshard.hpp"
#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/profile/op_cost.hpp"
#include "carto/profile/options.hpp"
#include "carto/search/gradient_memory.hpp"
#include "carto/search/space.hpp"
#include "carto/search/strategy.hpp"
#include "carto/spec/layout.hpp"
#include "carto/spec/mesh.hpp"
#include "carto/util/static_vector.hpp"

namespace carto {

enum class CheckpointChoice : std::uint8_t { none, all, search };

struct DpOptions {
  Precision precision = Precision::mixed_bf16;
  LayerNormStats layernorm_stats = LayerNormStats::counted;
  // Regenerated in backward, as carto's runtime does; stored: Korthikanti et al.'s 1-byte masks.
  DropoutMasks dropout_masks = DropoutMasks::regenerated;
  std::optional<DType> gradient_reduction{};  // StrategyOptions::gradient_reduction
  int zero_stage = 0;                         // 0..3
  std::int64_t micro_batches = 1;             // m: the step runs m forward/backward passes
  CheckpointChoice checkpoint = CheckpointChoice::search;
  SearchSpace space = SearchSpace::standard;  // search/space.hpp
  // The memory resolution ε. 0: exact (the frontier equals brute force's in the space). ε > 0: a
  // label within a factor (1 + ε) in memory of one at most as slow is dropped (search/frontier.hpp)
  // — in the standard space only where memoized tables are combined with the labels reaching them,
  // in the full space at every step; a returned plan's memory then exceeds the best plan's by at
  // most a factor (1 + ε) per trim on its path (DpResult::trims bounds their number).
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
  // Minimize the step time alone: no memory is tracked (every label's memory is 0) and the budget
  // is ignored, so a state keeps one label, and the frontier is one point, a plan with the least
  // time of any plan whatever its memory (its peak_bytes is 0; evaluate_point prices it). A lower
  // bound on the time of every plan under any budget: what search() skips configurations with.
  bool least_time = false;
  // Past this point in time the DP stops with a carto::Error (a caller's limit on search time).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // Memoized tables keep their labels by parameter bytes too (search/dp_merge.hpp's design note):
  // the frontier is then exact in its space whatever the earlier excursions, at many times the
  // cost (a GPT-2 350M search on 8 devices: 160x). Without it a table keeps labels by base and top
  // alone, and DpResult::loose_merges counts where that can miss a plan with fewer parameter bytes
  // (on a 2-block GPT of hidden 32 and vocabulary 64, at most 1.7 % more memory at the same time;
  // none on the wider-vocabulary GPT and the Llama models measured). A least-memory DP always
  // keeps them exact.
  bool exact_tables = false;
};

// The strategy options a DP's options imply.
inline StrategyOptions strategy_options(const DpOptions& o) {
  return {.precision = o.precision,
          .layernorm_stats = o.layernorm_stats,
          .dropout_masks = o.dropout_masks,
          .gradient_reduction = o.gradient_reduction};
}

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
  std::size_t chains = 0;           // block chains laid out with shared layouts (standard space)
  // Combinations of labels with a memoized table whose labels were kept by base and top alone
  // where an outer label's extra exceeded a table label's own candidates: there the frontier may
  // miss a plan with fewer parameter bytes (search/dp_merge.hpp's design note; DpOptions::
  // exact_tables). 0: the frontier is exact in its space.
  std::size_t loose_merges = 0;
  // The most label sets combined with a tolerance on one path from the first op to the end: the
  // n of the (1 + ε)^n memory bound (0 when the tolerance is 0).
  std::size_t trims = 0;
};

namespace detail {

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

// The optimizer step's time for one parameter of `elements` local elements stored in `stored`
// (once per step, after the micro-batches), as the runtime runs it: AdamW on this device's share
// (its ZeRO chunk at stages 1-3), memory-bound: it reads the weights, gradient, m and v and writes
// the weights, m and v (fp32: 28 bytes per element; mixed bf16: the fp32 master, a bf16 gradient,
// then the bf16 copy of the master written: 32). The all-gather of the updated chunks at stages
// 1-2 is not priced (see the body).
inline double optimizer_time(std::int64_t elements, std::int64_t element_size, Precision precision,
                             int zero_stage, const ShardingSpec& stored, const DeviceMesh& mesh,
                             const HardwareProfile& hw);

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

inline double optimizer_time(std::int64_t elements, std::int64_t element_size, Precision precision,
                             int zero_stage, const ShardingSpec& stored, const DeviceMesh& mesh,
                             const HardwareProfile& hw) {
  const std::int64_t replicas = zero_stage >= 1 ? replication_factor(stored, mesh) : 1;
  const std::int64_t share = (elements + replicas - 1) / replicas;
  const std::int64_t per_element = precision == Precision::mixed_bf16 ? 32 : 28;
  // The all-gather of the updated chunks at stages 1-2 is not added here: search()'s outer loop
  // runs stage 1 for stages 0-1 on the premise that stage 1 is never slower than 0, and one
  // least-time DP for stages 1 and 2 on the premise that they take the same time (test_plan
  // checks both against every stage); those hold only while stages 1-2 are priced as reducing
  // the gradients as stage 0 does. Pricing the regather needs the stages' gradient reductions
  // priced apart first.
  (void)element_size;
  (void)stored;
  (void)mesh;
  return compute_time({.flops = 0, .bytes = share * per_element, .dtype = DType::fp32}, hw);
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
    if (options.least_memory && options.least_time)
      fail("carto: DpOptions::least_memory and least_time exclude each other; set one");
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
    roots_ = gradient_roots(g);
    layouts_ = gradient_layouts(g, roots_);
    const StrategyOptions sopt = strategy_options(options);
    // Ops with one signature and one filter (the ops of identical blocks) share their choices:
    // enumerated and priced once.
    StrategyCache strategies(mesh, sopt);
    std::map<std::string, std::size_t> shared_choices;
    op_choices_.resize(g.num_ops());
    for (std::size_t k = 0; k < g.num_ops(); ++k) {
      const OpId o{static_cast<std::int32_t>(k)};
      const bool pinned = k < filter.allowed.size() && !filter.allowed[k].empty();
      std::string key = detail::op_signature(g, o);
      if (pinned) {
        for (const std::size_t i : filter.allowed[k]) key += concat('#', i);
      }
      if (auto it = shared_choices.find(key); it != shared_choices.end()) {
        op_choices_[k] = it->second;
        continue;
      }
      const std::vector<Strategy>& all = strategies.of(g, o);
      std::vector<std::size_t> pick;
      if (pinned) {
        pick = filter.allowed[k];
      } else {
        for (std::size_t i = 0; i < all.size(); ++i) pick.push_back(i);
      }
      const bool ordered = options.space == SearchSpace::standard;
      std::vector<Choice> choices;
      for (std::size_t i : pick) {
        if (i >= all.size())
          fail("carto: strategy index ", i, " of op ", k, " is out of range (", all.size(), ")");
        if (ordered && !in_mesh_order(all[i], mesh)) continue;      // the standard space's rule 1
        if (ordered && untied_vocab_split(g, k, all[i])) continue;  // and its rule 4
        choices.push_back(make(k, all[i], i));
      }
      op_choices_[k] = pool_.size();
      shared_choices.emplace(std::move(key), pool_.size());
      pool_.push_back(std::move(choices));
      if (pool_.back().empty()) {
        fail("carto: op ", op_names(g)[k], " (", to_string_view(g.ops()[k].kind),
             ") has no strategy left on mesh ", mesh,
             ordered ? " that the standard search space allows (rule 1: a dim's axes in mesh "
                       "order; rule 4: an untied embedding does not split the vocabulary); drop "
                       "the pin that asks for it or search the full space"
                     : "; drop the pin that removes them");
      }
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
        for (const Choice& c : choices(k))
          least = std::min(least, parameter_cost(t, c.inputs[i].want).persistent);
        here += least;
      }
      param_to_go_[k] = param_to_go_[k + 1] + here;
    }
  }

  struct Input {
    std::uint32_t want = 0;  // spec index of the input spec
    // want without Partial (the gradient spec a parameter gets reduced to)
    std::uint32_t want_plain = 0;
    std::uint32_t grad = 0;       // spec index of the gradient this op hands back
    bool saved = false;           // saved for backward (non-parameter)
    std::int64_t grad_bytes = 0;  // that gradient's local bytes
  };
  struct Choice {
    std::size_t index = 0;  // in enumerate_strategies order
    StaticVector<Input, 3> inputs{};
    std::uint32_t output = 0;
    double micro_s = 0;    // compute + inside-op collectives, one micro-batch
    double forward_s = 0;  // compute + inside-op collectives of forward (recompute)
    double sync_s = 0;     // parameter-gradient reductions, once per step
    std::int64_t private_saved = 0;
    std::int64_t workspace = 0;     // the backward's own (Strategy::memory.workspace)
    std::int64_t zero_held = 0;     // ZeRO-3's gathered parameters, a widened gradient reduction
    std::int64_t output_bytes = 0;  // the output's local bytes (dY's)
    bool saves_output = false;
  };

  [[nodiscard]] const Graph& graph() const { return g_; }
  [[nodiscard]] const DeviceMesh& mesh() const { return mesh_; }
  [[nodiscard]] const HardwareProfile& hardware() const { return hw_; }
  [[nodiscard]] const DpOptions& options() const { return options_; }
  [[nodiscard]] const std::vector<Choice>& choices(std::size_t k) const {
    return pool_[op_choices_[k]];
  }
  [[nodiscard]] std::int32_t last_use(TensorId t) const { return last_use_[t.index()]; }
  // The gradient buffers' roots and op k's layout of them (search/gradient_memory.hpp).
  [[nodiscard]] const GradientRoots& roots() const { return roots_; }
  [[nodiscard]] const OpGradientLayout& gradient_layout(std::size_t k) const { return layouts_[k]; }
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
  // stored in spec `s`; optimizer_s is its optimizer step (once per step).
  struct ParameterCost {
    std::int64_t persistent = 0;
    double gather = 0;
    double optimizer_s = 0;
  };
  ParameterCost parameter_cost(TensorId t, std::uint32_t s) {
    const std::int64_t bytes = local_bytes(t, s);
    const std::int64_t elements = bytes / element_bytes(g_.tensor(t));
    const ShardingSpec& stored = spec(t, s);
    const std::int64_t persistent =
        zero_persistent_bytes(elements, element_bytes(g_.tensor(t)), options_.precision,
                              options_.zero_stage, replication_factor(stored, mesh_));
    const double gather =
        options_.zero_stage == 3 ? 2 * zero3_gather_time(bytes, stored, mesh_, hw_) : 0.0;
    const double optimizer =
        optimizer_time(elements, element_bytes(g_.tensor(t)), options_.precision,
                       options_.zero_stage, stored, mesh_, hw_);
    return {.persistent = persistent, .gather = gather, .optimizer_s = optimizer};
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
      in.grad_bytes = g_.tensor(t).kind == TensorKind::index ? 0 : local_bytes(t, in.grad);
      c.inputs.push_back(in);
    }
    c.output = spec_index(op.output, s.sharding.output);
    c.output_bytes = local_bytes(op.output, c.output);
    c.saves_output = std::find(saved.begin(), saved.end(), op.output) != saved.end();
    const StrategyTime t = strategy_time(s, mesh_, hw_);
    c.sync_s = collectives_time(s.gradient_sync, mesh_, hw_);
    c.forward_s = t.compute_forward_s + t.comm_forward_s;
    c.micro_s = t.compute_forward_s + t.compute_backward_s + t.comm_forward_s +
                (t.comm_backward_s - c.sync_s);
    c.private_saved = s.cost.private_saved_bytes;
    // ZeRO-3 gathers the op's parameters for the time it runs; a widened gradient reduction.
    c.workspace = s.memory.workspace;
    c.zero_held =
        zero_transient_bytes(g_, s, mesh_, options_.zero_stage, strategy_options(options_));
    return c;
  }

  const Graph& g_;
  const DeviceMesh& mesh_;
  const HardwareProfile& hw_;
  DpOptions options_;
  std::vector<std::int32_t> last_use_;
  std::vector<std::int32_t> first_use_;
  GradientRoots roots_;
  std::vector<OpGradientLayout> layouts_;
  std::vector<std::vector<std::int32_t>> uses_;  // per tensor: the ops that read it, increasing
  std::vector<std::vector<Choice>> pool_;        // the distinct choice lists
  std::vector<std::size_t> op_choices_;          // per op: its list in pool_
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

}  // namespace detail

}  // namespace carto
