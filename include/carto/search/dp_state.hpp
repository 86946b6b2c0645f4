// carto/search/dp_state.hpp — the DP's states, labels' traces and the base every part of the DP
// shares: its model, the budget at each position, the deadline, and reading plans back.
//
// Design note (DESIGN.md §6; the cost and memory model is search/model.hpp's). Ops are visited in
// graph order. A state is what the rest of the graph can still see of the past: for every live
// tensor (one with a consumer still to come) its stored spec and the identity, size and saved-flag
// of its buffer, and whether the open block is checkpointed (decided when the block is entered). A
// label (search/frontier.hpp) is a partial cost: time (recompute included), base (P and K so far,
// plus A of an open unchecked group) with its activations' part (kept), extra (the largest peak
// candidate so far above base), and an open checkpointed block's A and largest A_≤k + U_k. The
// rest of the graph changes every label of a state alike, so a label can be dropped when another
// of its state is no worse for every completion. That loses no plan on the Pareto frontier of
// (time, peak): the DP is exact in its space. A label's
// trace records how it came to be (an op's choice, a block's checkpoint decision, a memoized run,
// a class of chain blocks sharing a layout); unwind() turns it back into a strategy per op.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/search/frontier.hpp"
#include "carto/search/model.hpp"
#include "carto/search/space.hpp"

namespace carto::detail {

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

class DpBase {
 public:
  explicit DpBase(DpModel& model) : m_(model), g_(model.graph()) {
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
    DpBase& dp;
    std::int64_t saved;
    TableScope(DpBase& d, std::int32_t start) : dp(d), saved(d.table_offset_) {
      dp.table_offset_ =
          dp.m_.param_bytes_to_go(0) - dp.m_.param_bytes_to_go(static_cast<std::size_t>(start));
    }
    ~TableScope() { dp.table_offset_ = saved; }
    TableScope(const TableScope&) = delete;
    TableScope& operator=(const TableScope&) = delete;
  };

  // Whether labels compare their parameters' bytes too (frontier.hpp's dominates): in a
  // least-memory DP or with DpOptions::exact_tables, whose tables keep every P that may count when
  // they are combined (dp_merge.hpp's design note).
  [[nodiscard]] bool persistent_matters() const {
    return m_.options().least_memory || m_.options().exact_tables;
  }

  void check_deadline() const {
    if (m_.options().deadline != std::chrono::steady_clock::time_point::max() &&
        std::chrono::steady_clock::now() > m_.options().deadline) {
      fail("carto: the search passed its time limit");
    }
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
      const std::int64_t pa = peak_of(a), pb = peak_of(b);
      return a.time != b.time ? a.time < b.time : pa < pb;
    });
    DpResult r;
    r.labels_created = labels_created_;
    std::int64_t best_peak = std::numeric_limits<std::int64_t>::max();
    for (const Label& l : all) {
      const std::int64_t peak = peak_of(l);
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
