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

// The labels of `candidates` that no other candidate dominates (duplicates keep one). Labels with
// no open checkpointed block (open_saved = open_temp = 0) are filtered by a sweep in time order
// over a (base, base + extra) staircase, O(n log n); others by a sweep in the same order over
// staircases bucketed by (base, base + extra). With tolerance ε > 0 a flat candidate is also
// dropped when a kept label is at most as slow and within a factor (1 + ε) in base and
// base + extra: the search is then approximate (see the design note).
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

}  // namespace detail

}  // namespace carto
