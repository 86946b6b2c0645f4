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

// A partial cost. Every component only grows along the graph (see dominates for why comparing
// them in these combinations is safe pruning).
struct Label {
  double time = 0;        // step time so far (recompute of the open checkpointed block included)
  std::int64_t base = 0;  // P so far + K of closed groups + A of the open group if not checkpointed
  std::int64_t extra = 0;       // max over closed groups of X_g
  std::int64_t open_saved = 0;  // open checkpointed block: A so far
  std::int64_t open_temp = 0;   // open checkpointed block: max over its ops k of A_≤k + T_k
  std::int32_t trace = -1;
  std::uint16_t trims = 0;  // filters with a resolution ε > 0 on this label's path
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

// A label's components as dominates() compares them: base, base + extra, base + open_saved and
// base + open_temp (a flat label's last two are its base).
struct Bound {
  std::int64_t base = 0;
  std::int64_t peak = 0;
  std::int64_t saved = 0;
  std::int64_t temp = 0;
};
inline Bound bound_of(const Label& l) {
  return {l.base, l.base + l.extra, l.base + l.open_saved, l.base + l.open_temp};
}

// The kept labels of one state, inserted in time order, answering whether a (bound of a) later
// label is dominated — within a factor (1 + ε) in every memory component when ε > 0. Three forms:
//  - flat (no open checkpointed block): a (base -> least peak) staircase, O(log n) per query;
//  - tree (open checkpointed block, every extra 0 — what tables inside a checkpointed block hold —
//    and the bases known in advance): a Fenwick tree over the bases' ranks whose node i holds the
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
    const Bound s{slack(b.base), slack(b.peak), slack(b.saved), slack(b.temp)};
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

inline bool is_flat(const Label& l) { return l.open_saved == 0 && l.open_temp == 0; }

// The form of Dominance for labels like `labels` (see Dominance), with the bases a tree needs.
template <class Labels>
Dominance dominance_for(const Labels& labels, double tolerance) {
  if (std::all_of(labels.begin(), labels.end(), is_flat))
    return Dominance(Dominance::Form::flat, tolerance);
  if (std::all_of(labels.begin(), labels.end(), [](const Label& l) { return l.extra == 0; })) {
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
  return std::tie(x.base, x.peak, x.saved, x.temp) < std::tie(y.base, y.peak, y.saved, y.temp);
}

// The labels of `candidates` that no other candidate dominates (duplicates keep one), in
// label_order: a sweep in that order (a dominating label comes before the labels it dominates, so
// no kept label is dropped later) through a Dominance of the kept ones. With tolerance ε > 0 a
// candidate is also dropped when a kept label is at most as slow and within a factor (1 + ε) in
// every memory component (see the design note).
inline std::vector<Label> pareto_filter(std::vector<Label> candidates, double tolerance = 0) {
  // Sorting (time, index) pairs moves a quarter of the bytes of sorting the labels.
  std::vector<std::pair<double, std::uint32_t>> order(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i)
    order[i] = {candidates[i].time, static_cast<std::uint32_t>(i)};
  std::sort(order.begin(), order.end(), [&](const auto& x, const auto& y) {
    if (x.first != y.first) return x.first < y.first;
    return label_order(candidates[x.second], candidates[y.second]);
  });
  Dominance kept = dominance_for(candidates, tolerance);
  std::vector<Label> out;
  for (const auto& [time, index] : order) {
    const Label& l = candidates[index];
    const Bound b = bound_of(l);
    if (kept.dominated(b)) continue;
    out.push_back(l);
    kept.insert(b);
  }
  return out;
}

}  // namespace detail

}  // namespace carto
