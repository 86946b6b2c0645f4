// carto/search/dp_core.hpp — the DP's core: states, one op's transitions, merging label sets and
// reading plans back from traces.
//
// Design note (DESIGN.md §6; the cost and memory model is search/model.hpp's). Ops are visited in
// graph order. A state is what the rest of the graph can still see of the past: for every live
// tensor (one with a consumer still to come) its stored spec and the identity, size and saved-flag
// of its buffer, and whether the open block is checkpointed (decided when the block is entered). A
// label (search/frontier.hpp) is a partial cost: time (recompute included), base (P and K so far,
// plus A of an open unchecked group), extra (max X so far), and an open checkpointed block's A and
// open group's T. The rest of the graph adds the same amounts to every label of a state, so a
// label can be dropped when another of its state is no worse for every completion. That loses no
// plan on the Pareto frontier of (time, base + extra): the DP is exact in its space.
//
// The space's stored-read rule (search/space.hpp, reads_stored_spec) is applied in transition():
// an op whose first input must be read as stored has no choice that reads another spec.
//
// Merging (combine_jobs). A memoized table — a block, a segment, a chain of blocks, a suffix of the
// graph: exit states and labels computed once from a zero label — is combined with the labels
// reaching it: times and bases add, the other components are the larger of the two (or add, for
// an open checkpointed block's saved bytes), which is exact because every future cost adds to, or
// takes the maximum with, a label's components. The pairs of each next state are merged in time
// order through a (base, peak) staircase. A pair is a stream position: outer label i followed by
// the table's labels j, j + 1, ... (sorted by time). The suffix minima of the table's base and
// peak bound every later pair of the stream from below, and every later pair is at least as slow
// as what the staircase holds, so once that bound is dominated (or over the budget) the rest of the
// stream is skipped; an outer label whose whole row is already beaten is never started. Both skip
// only pairs the staircase would drop, so the result is unchanged. The memory resolution ε of the
// standard space applies here and nowhere else (in the full space also at every step); a label
// counts the combinations with ε > 0 on its path (Label::trims).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/search/frontier.hpp"
#include "carto/search/model.hpp"
#include "carto/search/space.hpp"
#include "carto/util/static_vector.hpp"

namespace carto::detail {

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

using Frontier = std::unordered_map<State, std::vector<Label>, StateHash>;

// How a label came to be: an op's choice, a block's checkpoint decision, a memoized run, or the
// blocks of one checkpoint class of a chain sharing a layout.
struct Trace {
  std::int32_t parent = -1;
  std::int32_t op = -1;         // op choice: the op index
  std::int32_t choice = -1;     // op choice: index into DpModel::choices(op)
  std::int32_t group = -1;      // block entry or memoized block: the group; class: its first block
  std::int32_t sub = -1;        // memoized run: its last trace; class: its first block's layout
  std::int32_t ops_offset = 0;  // memoized block: its first op minus the first block's
  std::int32_t blocks = 0;      // class: groups group .. group + blocks - 1 share a layout
  std::int32_t steady = -1;     // class: the layout of its blocks after the first; -1: sub's
  std::int32_t layout_group = -1;  // class: the block whose ops its layouts' traces name
  bool checkpoint = false;         // block entry, memoized block or class: checkpointed
};

class DpCore {
 public:
  explicit DpCore(DpModel& model) : m_(model), g_(model.graph()) {
    for (const Op& op : g_.ops()) {
      if (op.group < 0) {
        fail("carto: the search needs every op inside a group (Graph::begin_group/end_group); op ",
             to_string_view(op.kind), " is in none");
      }
    }
  }

 protected:
  bool standard() const { return m_.options().space == SearchSpace::standard; }
  // The resolution ε applied where label sets are filtered: at every step in the full space, only
  // where tables are combined in the standard space.
  double step_tolerance() const { return standard() ? 0.0 : m_.options().tolerance; }
  double merge_tolerance() const { return m_.options().tolerance; }

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
    if (budget == std::numeric_limits<std::int64_t>::max() || m_.options().least_time)
      return std::numeric_limits<std::int64_t>::max();
    return budget - table_offset_ - m_.param_bytes_to_go(static_cast<std::size_t>(pos));
  }
  // Sets table_offset_ for a table that starts at op `start` while it lives; restores it after.
  struct TableScope {
    DpCore& dp;
    std::int64_t saved;
    TableScope(DpCore& d, std::int32_t start) : dp(d), saved(d.table_offset_) {
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
          if (ckpt && !m_.options().least_time) n.base += input_bytes;
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
    const Op& op = g_.ops()[k];
    const std::vector<DpModel::Choice>& choices = m_.choices(k);
    // An op that reads its first input as stored (an activation) runs only the choices that read
    // the stored spec: they are listed per spec, so the others are never tried.
    const TensorId first = op.inputs[0];
    const bool stored_reads =
        g_.tensor(first).producer.valid() && g_.tensor(first).kind == TensorKind::activation;
    std::vector<std::vector<std::uint32_t>> by_spec;
    if (stored_reads) {
      for (std::uint32_t c = 0; c < choices.size(); ++c) {
        const std::uint32_t want = choices[c].inputs[0].want;
        if (by_spec.size() <= want) by_spec.resize(want + 1);
        by_spec[want].push_back(c);
      }
    }
    std::vector<std::uint32_t> every(choices.size());
    for (std::uint32_t c = 0; c < choices.size(); ++c) every[c] = c;
    const std::vector<std::uint32_t> none;
    State next;
    for (const auto& [state, labels] : in) {
      check_deadline();
      const std::vector<std::uint32_t>* tried = &every;
      if (stored_reads) {
        const auto it = std::find_if(state.live.begin(), state.live.end(),
                                     [&](const Live& l) { return l.tensor == first.value; });
        if (it != state.live.end() &&
            reads_stored_spec(op.kind, m_.spec(first, it->spec), m_.options().space)) {
          tried = it->spec < by_spec.size() ? &by_spec[it->spec] : &none;
        }
      }
      for (const std::uint32_t c : *tried) {
        Label delta{};
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
          if (step_tolerance() > 0) ++n.trims;
          n.trace = static_cast<std::int32_t>(links.size());
          links.push_back({.parent = l.trace,
                           .op = static_cast<std::int32_t>(k),
                           .choice = static_cast<std::int32_t>(c)});
          dst.push_back(n);
          ++labels_created_;
        }
      }
    }
    return filter_pending(pending, links, budget_at(static_cast<std::int32_t>(k) + 1),
                          step_tolerance());
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
    StaticVector<std::int32_t, 3> saved_roots_now;  // roots saved by this op (dedupe within the op)
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
          reads_stored_spec(op.kind, m_.spec(t, stored.spec), m_.options().space))
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
    if (m_.options().least_time) d.base = d.open_saved = d.open_temp = 0;
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

  // ---- merging ----
  static bool flat(const std::vector<Label>& labels) {
    return std::all_of(labels.begin(), labels.end(), is_flat);
  }
  static bool sorted(const std::vector<Label>& labels) {
    return std::is_sorted(labels.begin(), labels.end(), label_order);
  }
  // Per position j of an internal list: the least of each memory component (search/frontier.hpp's
  // Bound, and base + extra) from j to its end.
  struct SuffixMinima {
    std::vector<Bound> from{};
  };
  struct BlockExit {
    std::vector<Live> live;     // relative to the first block's tensors
    std::vector<Label> labels;  // internal, from a zero label, in label_order
    SuffixMinima suffix{};
    bool flat = true;
  };
  static BlockExit make_exit(std::vector<Live> live, std::vector<Label> labels) {
    if (!sorted(labels)) std::sort(labels.begin(), labels.end(), label_order);
    BlockExit x{.live = std::move(live), .labels = std::move(labels)};
    x.flat = flat(x.labels);
    x.suffix.from.resize(x.labels.size());
    constexpr std::int64_t top = std::numeric_limits<std::int64_t>::max();
    Bound m{top, top, top, top};
    for (std::size_t j = x.labels.size(); j-- > 0;) {
      const Bound b = bound_of(x.labels[j]);
      m = {std::min(m.base, b.base), std::min(m.peak, b.peak), std::min(m.saved, b.saved),
           std::min(m.temp, b.temp)};
      x.suffix.from[j] = m;
    }
    return x;
  }

  // `outer` followed by a memoized run from a zero label: times and bases add, the other
  // components are the larger of the two or add (an open checkpointed block's saved bytes); the
  // trims of both paths add, plus this combination's when it applies a resolution.
  Label combine(const Label& outer, const Label& internal) const {
    Label n = outer;
    n.trims =
        static_cast<std::uint16_t>(outer.trims + internal.trims + (merge_tolerance() > 0 ? 1 : 0));
    n.time += internal.time;
    n.base += internal.base;
    n.extra = std::max(outer.extra, internal.extra);
    n.open_saved += internal.open_saved;
    n.open_temp = std::max(outer.open_temp, outer.open_saved + internal.open_temp);
    return n;
  }
  // A lower bound of every combine(outer, internal[j']) for j' >= j (internal's suffix minima m):
  // each component of the pair is a sum or maximum of the two labels' components.
  static Bound combined_bound(const Label& o, const Bound& m) {
    return {o.base + m.base, o.base + std::max(m.base + o.extra, m.peak),
            o.base + o.open_saved + m.saved,
            o.base + std::max(o.open_temp + m.base, o.open_saved + m.temp)};
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

  // The Pareto-optimal pairs of every next state. Labels come out of pareto_filter and of every
  // merge in label_order, so each outer label followed by the internal list is a stream sorted by
  // time: a heap merges the streams in that order through a Dominance of the kept pairs (the
  // staircase of flat labels, or for an open checkpointed block the staircase tree over the
  // pairs' possible bases), without materializing or sorting the pairs. Pairs of general
  // non-flat labels (with extra) go through pareto_filter.
  Frontier combine_jobs(const Jobs& jobs, std::int32_t pos) {
    Frontier out;
    Frontier pending;
    std::vector<Trace> links;
    const double tolerance = merge_tolerance();
    const std::int64_t budget = budget_at(pos);
    struct Cursor {
      Label pair;
      std::uint32_t job;
      std::uint32_t i;
      std::uint32_t j;
    };
    auto later = [](const Cursor& x, const Cursor& y) { return label_order(y.pair, x.pair); };
    std::vector<Cursor> heap;
    for (const auto& [state, list] : jobs) {
      check_deadline();
      const bool all_flat = std::all_of(list.begin(), list.end(),
                                        [](const Job& j) { return j.outer_flat && j.exit->flat; });
      // The tree form needs every extra 0 and the pairs' bases.
      std::vector<std::int64_t> bases;
      bool tree = !all_flat;
      if (tree) {
        std::vector<std::int64_t> outer_bases, inner_bases;
        for (const Job& job : list) {
          for (const Label& l : *job.outer) {
            tree = tree && l.extra == 0;
            outer_bases.push_back(l.base);
          }
          for (const Label& l : job.exit->labels) {
            tree = tree && l.extra == 0;
            inner_bases.push_back(l.base);
          }
        }
        for (auto* v : {&outer_bases, &inner_bases}) {
          std::sort(v->begin(), v->end());
          v->erase(std::unique(v->begin(), v->end()), v->end());
        }
        tree = tree && outer_bases.size() * inner_bases.size() <= (std::size_t{1} << 16);
        for (const std::int64_t a : outer_bases) {
          for (const std::int64_t b : inner_bases) bases.push_back(a + b);
        }
      }
      if (!all_flat && !tree) {
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
      Dominance kept = all_flat ? Dominance(Dominance::Form::flat, tolerance)
                                : Dominance(Dominance::Form::tree, tolerance, std::move(bases));
      heap.clear();
      auto cursor = [&](std::uint32_t job, std::uint32_t i, std::uint32_t j) {
        return Cursor{combine((*list[job].outer)[i], list[job].exit->labels[j]), job, i, j};
      };
      std::vector<Label> result;
      // Whether the rest of a stream, from its j-th pair on, can still give a kept label: the
      // suffix minima of the internal list bound every later pair from below, and every later
      // pair is at least as slow as any label kept so far.
      auto alive = [&](std::uint32_t job, std::uint32_t i, std::uint32_t j) {
        const Bound b = combined_bound((*list[job].outer)[i], list[job].exit->suffix.from[j]);
        return b.peak <= budget && !kept.dominated(b);
      };
      // A job whose outer labels are sorted starts with its first pair only: pair (i + 1, 0)
      // follows no earlier than (i, 0), so it is pushed when (i, 0) is popped and the heap holds
      // one cursor per live stream instead of one per outer label.
      std::vector<bool> lazy(list.size());
      for (std::uint32_t job = 0; job < list.size(); ++job) {
        if (list[job].exit->labels.empty() || list[job].outer->empty()) continue;
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
          for (std::uint32_t i = c.i + 1; i < job.outer->size(); ++i) {
            if (alive(c.job, i, 0)) {
              push(cursor(c.job, i, 0));
              break;
            }
          }
        }
        const Bound b = bound_of(c.pair);
        const bool keep = b.peak <= budget && !kept.dominated(b);
        if (c.j + 1 < job.exit->labels.size() && (keep || alive(c.job, c.i, c.j + 1)))
          push(cursor(c.job, c.i, c.j + 1));
        if (!keep) continue;
        kept.insert(b);
        Label n = c.pair;
        Trace link = job.link;
        link.parent = (*job.outer)[c.i].trace;
        link.sub = job.exit->labels[c.j].trace;
        n.trace = push_trace(link);
        result.push_back(n);
      }
      if (!result.empty()) out[state] = std::move(result);
    }
    for (auto& [state, labels] : filter_pending(pending, links, budget, tolerance))
      out[state] = std::move(labels);
    return out;
  }

  // Keeps the Pareto-optimal candidates of every state; candidates' `trace` indexes `links`.
  Frontier filter_pending(Frontier& pending, const std::vector<Trace>& links, std::int64_t budget,
                          double tolerance) {
    Frontier out;
    for (auto& [state, candidates] : pending) {
      if (budget < std::numeric_limits<std::int64_t>::max()) {
        std::erase_if(candidates, [budget](const Label& l) { return l.base + l.extra > budget; });
      }
      std::vector<Label> kept = pareto_filter(std::move(candidates), tolerance);
      if (kept.empty()) continue;
      for (Label& l : kept) l.trace = push_trace(links[static_cast<std::size_t>(l.trace)]);
      out[state] = std::move(kept);
    }
    return out;
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
  // first block's ops are shifted by their block's offset, and a class of chain blocks unwinds its
  // layouts once per block.
  void unwind(std::int32_t t, std::int32_t ops_offset, DpPoint& p) {
    while (t >= 0) {
      const Trace& tr = traces_[static_cast<std::size_t>(t)];
      if (tr.blocks > 0) {
        const std::int32_t template_op =
            g_.groups()[static_cast<std::size_t>(tr.layout_group)].first_op;
        for (std::int32_t j = 0; j < tr.blocks; ++j) {
          const std::size_t gj = static_cast<std::size_t>(tr.group + j);
          p.checkpointed[gj] = tr.checkpoint;
          const std::int32_t layout = j == 0 || tr.steady < 0 ? tr.sub : tr.steady;
          unwind(layout, ops_offset + g_.groups()[gj].first_op - template_op, p);
        }
        t = tr.parent;
        continue;
      }
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
    std::int64_t best_peak = std::numeric_limits<std::int64_t>::max();
    for (const Label& l : all) {
      const std::int64_t peak = l.base + l.extra;
      r.trims = std::max<std::size_t>(r.trims, l.trims);
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

}  // namespace carto::detail
