// carto/search/dp_merge.hpp — combining memoized tables with the labels that reach them.
//
// Design note (DESIGN.md §6). A memoized table — a block, a segment, a chain of blocks, a suffix of
// the graph: exit states and labels computed once from a zero label — is combined with the labels
// reaching it (combine): times, bases and kept bytes add; the run's peak candidates sit on the
// outer base, and the outer ones rise by the run's parameters' bytes P (persistent for the whole
// step) but not by what the run keeps; an open checkpointed block's saved bytes add. Every later
// step is monotone in those components, so merging is exact for the labels a table keeps.
//
// Which labels a table keeps. A pair's top is max(outer top + the run's P, outer base + the run's
// top + ride): the first term makes a run label with less P better for an outer label whose
// extra exceeds the run's own candidates above its K and P (top - P), which comparing base and
// top alone would miss. A table of a least-memory DP (persistent_matters) also compares P (a 3-D
// dominance: search/frontier.hpp's persistent form), so its least memory is exact. A frontier
// DP's tables compare base and top alone (P as well multiplies their labels: tensor- and
// data-parallel choices trade P against K): that is exact for every outer label whose extra is at
// most each kept label's top - P plus the ride (then the second term decides for every label and
// its dominator: BlockExit::floor). The outer labels that reach a table almost always meet that
// (an identical block before it left an extra below its own candidates); a combination where one
// does not is counted (DpResult::loose_merges: there a table label with fewer parameter bytes may
// have given a lower peak).
//
// The pairs of each next state are merged in time
// order through a Dominance of the pairs kept (search/frontier.hpp). A pair is a stream position:
// outer label i followed by the table's labels j, j + 1, ... (sorted by time). The suffix minima of
// the table's components bound every later pair of the stream from below, and every later pair is
// at least as slow as what has been kept, so once that bound is dominated (or over the budget) the
// rest of the stream is skipped; an outer label whose whole row is already beaten is never
// started. Both skip only pairs the filter would drop, so the result is unchanged. The memory
// resolution ε of the standard space applies here and nowhere else (in the full space also at
// every step); a label counts the combinations with ε > 0 on its path (Label::trims).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "carto/search/dp_state.hpp"
#include "carto/search/frontier.hpp"

namespace carto::detail {

class DpMerge : public DpBase {
 public:
  using DpBase::DpBase;

 protected:
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
    // The least top - P of its labels (extra + kept: their peak candidates above their own K and
    // P): an outer label whose extra is at most this plus the ride meets every label's candidates
    // first (see the design note).
    std::int64_t floor = std::numeric_limits<std::int64_t>::max();
  };
  static BlockExit make_exit(std::vector<Live> live, std::vector<Label> labels) {
    if (!sorted(labels)) std::sort(labels.begin(), labels.end(), label_order);
    BlockExit x{.live = std::move(live), .labels = std::move(labels)};
    x.flat = flat(x.labels);
    for (const Label& l : x.labels) x.floor = std::min(x.floor, l.extra + l.kept);
    x.suffix.from.resize(x.labels.size());
    constexpr std::int64_t top = std::numeric_limits<std::int64_t>::max();
    Bound m{top, top, top, top, top};
    for (std::size_t j = x.labels.size(); j-- > 0;) {
      const Bound b = bound_of(x.labels[j]);
      m = {std::min(m.base, b.base), std::min(m.peak, b.peak), std::min(m.saved, b.saved),
           std::min(m.temp, b.temp), std::min(m.persistent, b.persistent)};
      x.suffix.from[j] = m;
    }
    return x;
  }

  // Counts a combination of `outer` with a table kept by base and top alone that may not be
  // exact: some outer extra exceeds an exit's floor plus `ride` (the design note). A table of a
  // least-memory DP compares P too, and inside an open checkpointed block (`checkpoint`) a run
  // adds to the block's open components only, whose outcome does not depend on its P: both exact.
  void note_loose_merge(const std::vector<Label>& outer, const std::vector<BlockExit>& exits,
                        std::int64_t ride, bool checkpoint) {
    if (persistent_matters() || checkpoint || outer.empty()) return;
    std::int64_t most = std::numeric_limits<std::int64_t>::min();
    for (const Label& l : outer) most = std::max(most, l.extra);
    for (const BlockExit& x : exits) {
      if (x.floor != std::numeric_limits<std::int64_t>::max() && most > x.floor + ride) {
        ++loose_merges_;
        return;
      }
    }
  }
  std::size_t loose_merges_ = 0;

  // `outer` followed by a memoized run from a zero label: times, bases and kept bytes add; the
  // run's peak candidates sit on the outer base, each raised by `ride` (the gradients of the
  // tensors that ride along the run unread: search/gradient_memory.hpp's `across`, which the
  // run's table does not see), and the outer ones rise by the run's parameters but not by what
  // it keeps; inside an open checkpointed block (`checkpoint`) the run's candidates are in its
  // open_temp and its saved bytes add to the block's. The trims of both paths add, plus this
  // combination's when it applies a resolution.
  Label combine(const Label& outer, const Label& internal, std::int64_t ride,
                bool checkpoint) const {
    Label n = outer;
    n.trims =
        static_cast<std::uint16_t>(outer.trims + internal.trims + (merge_tolerance() > 0 ? 1 : 0));
    n.time += internal.time;
    n.base += internal.base;
    n.kept += internal.kept;
    if (checkpoint) {
      n.open_saved += internal.open_saved;
      n.open_temp = std::max(outer.open_temp, outer.open_saved + internal.open_temp + ride);
    } else {
      n.extra = std::max(outer.extra - internal.kept, internal.extra + ride);
    }
    return n;
  }
  // A lower bound of every combine(outer, internal[j']) for j' >= j (internal's suffix minima m):
  // each component of the pair is a sum or maximum of the two labels' components (its top:
  // outer top + the run's P, or outer base + the run's top + ride).
  static Bound combined_bound(const Label& o, const Bound& m, std::int64_t ride, bool checkpoint) {
    const std::int64_t top = o.base + o.extra;
    const std::int64_t peak = checkpoint
                                  ? top + m.base
                                  : std::max(top + m.persistent, o.base + m.peak + ride);
    const std::int64_t temp =
        checkpoint ? o.base + std::max(o.open_temp + m.base, o.open_saved + m.temp + ride)
                   : o.base + o.open_temp + m.base;
    return {o.base + m.base, peak, o.base + o.open_saved + m.saved, temp,
            o.base - o.kept + m.persistent};
  }

  // Every label of `outer` followed by every label of `internal` (a memoized run), for one next
  // state; `link` becomes the trace of each pair.
  struct Job {
    const std::vector<Label>* outer = nullptr;
    const BlockExit* exit = nullptr;
    Trace link{};
    bool outer_flat = true;    // flat(*outer)
    bool outer_sorted = true;  // sorted(*outer)
    std::int64_t ride = 0;     // the riders' gradient bytes (combine)
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
    for (const auto& entry : jobs) {  // not a structured binding: the lambdas below capture it
      const State& state = entry.first;
      const std::vector<Job>& list = entry.second;
      check_deadline();
      const bool all_flat = std::all_of(list.begin(), list.end(),
                                        [](const Job& j) { return j.outer_flat && j.exit->flat; });
      // In a table, flat pairs compare their parameters' bytes too (persistent_form), through the
      // tree form.
      const bool mapped = all_flat && persistent_matters();
      // The tree form needs the pairs' bases, and for non-flat pairs one extra for all (the outer
      // labels', which the pairs keep).
      std::vector<std::int64_t> bases;
      bool tree = !all_flat || mapped;
      if (tree) {
        std::vector<std::int64_t> outer_bases, inner_bases;
        const std::int64_t extra = list.front().outer->empty() ? 0 : list.front().outer->front().extra;
        for (const Job& job : list) {
          for (const Label& l : *job.outer) {
            tree = tree && (mapped || (state.checkpoint && l.extra == extra));
            outer_bases.push_back(l.base);
          }
          for (const Label& l : job.exit->labels) inner_bases.push_back(l.base);
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
      if (!(all_flat && !mapped) && !tree) {
        std::vector<Label>& dst = pending[state];
        for (const Job& job : list) {
          Trace link = job.link;
          for (const Label& l : *job.outer) {
            for (const Label& i : job.exit->labels) {
              Label n = combine(l, i, job.ride, state.checkpoint);
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
      Dominance kept = !tree ? Dominance(Dominance::Form::flat, tolerance)
                             : Dominance(Dominance::Form::tree, tolerance, std::move(bases));
      heap.clear();
      auto cursor = [&](std::uint32_t job, std::uint32_t i, std::uint32_t j) {
        return Cursor{combine((*list[job].outer)[i], list[job].exit->labels[j], list[job].ride,
                              state.checkpoint),
                      job, i, j};
      };
      std::vector<Label> result;
      // Whether the rest of a stream, from its j-th pair on, can still give a kept label: the
      // suffix minima of the internal list bound every later pair from below, and every later
      // pair is at least as slow as any label kept so far.
      auto alive = [&](std::uint32_t job, std::uint32_t i, std::uint32_t j) {
        Bound b = combined_bound((*list[job].outer)[i], list[job].exit->suffix.from[j],
                                 list[job].ride, state.checkpoint);
        if (std::max(b.base, b.peak) > budget) return false;
        if (mapped) b = persistent_form(b);
        return !kept.dominated(b);
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
        const Bound b = bound_for(c.pair, mapped);
        const bool keep = peak_of(c.pair) <= budget && !kept.dominated(b);
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
        std::erase_if(candidates, [budget](const Label& l) { return peak_of(l) > budget; });
      }
      std::vector<Label> kept = pareto_filter(std::move(candidates), tolerance, persistent_matters());
      if (kept.empty()) continue;
      for (Label& l : kept) l.trace = push_trace(links[static_cast<std::size_t>(l.trace)]);
      out[state] = std::move(kept);
    }
    return out;
  }
};

}  // namespace carto::detail
