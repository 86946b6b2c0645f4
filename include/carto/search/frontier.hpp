// carto/search/frontier.hpp — labels (partial costs of a plan) and the Pareto filters the DP keeps
// them with.
//
// Design note (DESIGN.md §5-§6). A label is what a partial plan has cost so far: its step time, its
// base (persistent bytes and activations kept so far), its extra (the largest excursion above the
// base so far) and, inside an open checkpointed block, that block's saved bytes and excursion.
// Every component only grows along the graph, and the rest of a plan adds to or takes the maximum
// with each, so a label can be dropped when another one of its state is no worse for every
// completion (dominates). The filters keep the labels no other dominates; with a memory
// resolution ε > 0 they also drop a label when a kept one is at most as slow and within a factor
// (1 + ε) in memory: every completion of the dropped label then has a completion of the kept one
// at most as slow and within (1 + ε) of its peak, so after n such trims on a plan's path the
// search has a plan at most as slow within (1 + ε)^n of its memory.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

namespace carto {

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

// A partial cost (search/model.hpp's memory model). base and time only grow along the graph;
// top = base + extra is the largest peak candidate so far, with every parameter stored so far
// (a parameter stored later raises base and top alike); an activation kept later raises base
// only, so extra falls by it: an excursion sits only on what was kept before it.
struct Label {
  double time = 0;        // step time so far (recompute of the open checkpointed block included)
  std::int64_t base = 0;  // P so far + K of closed groups + A of the open group if not checkpointed
  std::int64_t kept = 0;  // the activations in base (base - kept: the parameters' P)
  std::int64_t extra = 0;       // top - base (may be negative until the next op's excursion)
  std::int64_t open_saved = 0;  // open checkpointed block: A so far
  std::int64_t open_temp = 0;   // open checkpointed block: max over its ops k of A_≤k + U_k
  std::int32_t trace = -1;
  std::uint16_t trims = 0;  // filters with a resolution ε > 0 on this label's path
};

// The peak of a complete label: its top, or its base if that is larger (the moment every kept
// activation is held).
inline std::int64_t peak_of(const Label& l) { return l.base + std::max<std::int64_t>(0, l.extra); }

// Whether every completion of `b` is matched or beaten by the same completion of `a` (two labels
// of one state: the rest of the graph adds the same time t', parameters P', kept bytes K' and
// excursions to both). Every later step is monotone in base, top = base + extra, base +
// open_saved and base + open_temp (a later op's excursion takes the maximum with base + U, a later
// activation raises base, a parameter raises base and top, closing a checkpointed block takes the
// maximum of top with base - input + max(open_temp, open_saved)), so the final peak of `a` is no
// larger when each of those is no larger, and its time when its time is no larger. A label of a
// memoized table is also combined as the inner part of a pair (search/dp_merge.hpp), where the
// outer label's top rises by the table's P but not by its K: there `persistent` also compares the
// parameters' bytes, base - kept.
inline bool dominates(const Label& a, const Label& b, bool persistent = false) {
  return a.time <= b.time && a.base <= b.base && a.base + a.extra <= b.base + b.extra &&
         a.base + a.open_saved <= b.base + b.open_saved &&
         a.base + a.open_temp <= b.base + b.open_temp &&
         (!persistent || a.base - a.kept <= b.base - b.kept);
}

// Inserts `l` unless dominated; removes the labels it dominates.
inline bool insert_label(std::vector<Label>& labels, const Label& l, bool persistent = false) {
  for (const Label& x : labels) {
    if (dominates(x, l, persistent)) return false;
  }
  labels.erase(std::remove_if(labels.begin(), labels.end(),
                              [&](const Label& x) { return dominates(l, x, persistent); }),
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

// A label's components as dominates() compares them: base, base + extra, base + open_saved,
// base + open_temp (a flat label's last two are its base) and base - kept. For flat labels whose
// parameters' bytes count (a table's), bound_for puts base - kept and the peak in the saved and
// temp places, which the tree form compares.
struct Bound {
  std::int64_t base = 0;
  std::int64_t peak = 0;
  std::int64_t saved = 0;
  std::int64_t temp = 0;
  std::int64_t persistent = 0;
};
inline Bound bound_of(const Label& l) {
  return {l.base, l.base + l.extra, l.base + l.open_saved, l.base + l.open_temp, l.base - l.kept};
}
inline bool is_flat(const Label& l) { return l.open_saved == 0 && l.open_temp == 0; }
// A bound (or lower bound) `b` of flat labels as the tree form compares it when `persistent`.
inline Bound persistent_form(Bound b) {
  b.saved = b.persistent;
  b.temp = b.peak;
  return b;
}
inline Bound bound_for(const Label& l, bool persistent) {
  return persistent ? persistent_form(bound_of(l)) : bound_of(l);
}

// The kept labels of one state, inserted in time order, answering whether a (bound of a) later
// label is dominated — within a factor (1 + ε) in every memory component when ε > 0. Three forms:
//  - flat (no open checkpointed block): a (base -> least peak) staircase, O(log n) per query;
//  - tree (the bases known in advance; open checkpointed block with one extra for all — what
//    tables inside a checkpointed block hold — or flat labels of a table, whose parameters' bytes
//    count: bound_for): a Fenwick tree over the bases' ranks whose node i holds the
//    (saved -> least temp) staircase of the labels with a base rank in its range, so a query visits
//    O(log n) staircases (a 3-D dominance query);
//  - buckets (any label): staircases of (saved -> least temp) bucketed by (base, peak), a query
//    visits every bucket of no larger base.
class Dominance {
 public:
  enum class Form : std::uint8_t { flat, tree, buckets };
  Dominance(Form form, double tolerance, std::vector<std::int64_t> bases = {})
      : form_(form), tolerance_(tolerance), bases_(std::move(bases)) {
    if (form_ == Form::tree) {
      std::sort(bases_.begin(), bases_.end());
      bases_.erase(std::unique(bases_.begin(), bases_.end()), bases_.end());
      tree_.resize(bases_.size());
    }
  }

  [[nodiscard]] bool dominated(const Bound& b) const {
    const Bound s{slack(b.base), slack(b.peak), slack(b.saved), slack(b.temp), slack(b.persistent)};
    switch (form_) {
      case Form::flat: return below(flat_, s.base, s.peak);
      case Form::tree: {
        for (auto i = static_cast<std::size_t>(
                 std::upper_bound(bases_.begin(), bases_.end(), s.base) - bases_.begin());
             i > 0; i -= i & (~i + 1)) {
          if (below(tree_[i - 1], s.saved, s.temp)) return true;
        }
        return false;
      }
      case Form::buckets:
        for (auto it = buckets_.begin(); it != buckets_.end() && it->first.first <= s.base; ++it) {
          if (it->first.second <= s.peak && below(it->second, s.saved, s.temp)) return true;
        }
        return false;
    }
    return false;
  }

  void insert(const Bound& b) {
    switch (form_) {
      case Form::flat: add(flat_, b.base, b.peak); break;
      case Form::tree: {
        const auto rank = static_cast<std::size_t>(
            std::lower_bound(bases_.begin(), bases_.end(), b.base) - bases_.begin());
        for (std::size_t i = rank + 1; i <= tree_.size(); i += i & (~i + 1))
          add(tree_[i - 1], b.saved, b.temp);
        break;
      }
      case Form::buckets: add(buckets_[{b.base, b.peak}], b.saved, b.temp); break;
    }
  }

 private:
  using Stair = std::map<std::int64_t, std::int64_t>;  // x -> least y, y falling as x rises
  // Whether the staircase holds a point (x', y') with x' <= x and y' <= y.
  static bool below(const Stair& stair, std::int64_t x, std::int64_t y) {
    const auto it = stair.upper_bound(x);
    return it != stair.begin() && std::prev(it)->second <= y;
  }
  static void add(Stair& stair, std::int64_t x, std::int64_t y) {
    if (below(stair, x, y)) return;
    auto it = stair.lower_bound(x);
    while (it != stair.end() && it->second >= y) it = stair.erase(it);
    stair[x] = y;
  }
  [[nodiscard]] std::int64_t slack(std::int64_t v) const { return with_tolerance(v, tolerance_); }

  Form form_;
  double tolerance_;
  std::vector<std::int64_t> bases_;
  Stair flat_{};
  std::vector<Stair> tree_{};
  std::map<std::pair<std::int64_t, std::int64_t>, Stair> buckets_{};
};

// The form of Dominance for labels like `labels` (see Dominance), with the bases a tree needs;
// `persistent`: flat labels compare their parameters' bytes too (bound_for).
template <class Labels>
Dominance dominance_for(const Labels& labels, double tolerance, bool persistent = false) {
  const bool all_flat = std::all_of(labels.begin(), labels.end(), is_flat);
  if (all_flat && !persistent) return Dominance(Dominance::Form::flat, tolerance);
  if (all_flat || std::all_of(labels.begin(), labels.end(), [&](const Label& l) {
        return l.extra == labels.begin()->extra;
      })) {
    std::vector<std::int64_t> bases;
    bases.reserve(labels.size());
    for (const Label& l : labels) bases.push_back(l.base);
    return Dominance(Dominance::Form::tree, tolerance, std::move(bases));
  }
  return Dominance(Dominance::Form::buckets, tolerance);
}

// Whether a sorts before b in the order every filter and merge visits labels: by time, then by
// the memory components, so that a label sorts before those it dominates.
inline bool label_order(const Label& a, const Label& b) {
  if (a.time != b.time) return a.time < b.time;
  const Bound x = bound_of(a), y = bound_of(b);
  return std::tie(x.base, x.peak, x.saved, x.temp, x.persistent) <
         std::tie(y.base, y.peak, y.saved, y.temp, y.persistent);
}

// The labels of `candidates` that no other candidate dominates (duplicates keep one), in
// label_order: a sweep in that order (a dominating label comes before the labels it dominates, so
// no kept label is dropped later) through a Dominance of the kept ones. With tolerance ε > 0 a
// candidate is also dropped when a kept label is at most as slow and within a factor (1 + ε) in
// every memory component (see the design note).
inline std::vector<Label> pareto_filter(std::vector<Label> candidates, double tolerance = 0,
                                        bool persistent = false) {
  // Sorting (time, index) pairs moves a quarter of the bytes of sorting the labels.
  std::vector<std::pair<double, std::uint32_t>> order(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i)
    order[i] = {candidates[i].time, static_cast<std::uint32_t>(i)};
  std::sort(order.begin(), order.end(), [&](const auto& x, const auto& y) {
    if (x.first != y.first) return x.first < y.first;
    return label_order(candidates[x.second], candidates[y.second]);
  });
  // The parameters' bytes count for flat labels only (an open checkpointed block's labels keep
  // one K each: their base orders their P).
  const bool mapped =
      persistent && std::all_of(candidates.begin(), candidates.end(), is_flat);
  Dominance kept = dominance_for(candidates, tolerance, persistent);
  std::vector<Label> out;
  for (const auto& [time, index] : order) {
    const Label& l = candidates[index];
    const Bound b = bound_for(l, mapped);
    if (kept.dominated(b)) continue;
    out.push_back(l);
    kept.insert(b);
  }
  return out;
}

}  // namespace detail

}  // namespace carto
