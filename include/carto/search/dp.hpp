// carto/search/dp.hpp — the exact dynamic program over one graph on one mesh: every op's strategy,
// the resharding between ops and activation checkpointing per transformer block, under one ZeRO
// stage and one micro-batch count, with a Pareto frontier of (step time, peak memory), in a stated
// search space (search/space.hpp).
//
// Design note (DESIGN.md §6). States and traces are search/dp_state.hpp's, merging tables
// search/dp_merge.hpp's, one op's transitions search/dp_core.hpp's, the cost and memory model
// search/model.hpp's. This file holds the memoized tables and the walk.
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
// Blocks. A block's table (block_exits: its exit states and closed labels from a zero label, per
// entry state of its input and checkpoint decision) is computed once on the first block of its
// kind. In the full space every identical block is combined with the labels reaching it through
// that table; tensors that live across a block without being used in it (a tied embedding table)
// ride along in the state.
//
// Chains (the standard space's rule 3). The identical blocks of a chain share one layout per
// checkpoint class, the first k checkpointed. For n blocks of one class entering in spec E, the
// class's labels are those of one layout repeated: n·l (time and base times n, the same extra) for
// each label l of the table at E whose exit is E again; for an exit X ≠ E, a first block's label τ
// plus (n − 1)·σ, σ a label of the table at X whose exit is X (class_run). Scaling keeps the order
// of dominance (n·a.base + a.extra ≤ n·b.base + b.extra when a.base ≤ b.base and
// a.base + a.extra ≤ b.base + b.extra), so the class's frontier is the scaled frontier. A chain's
// table per entry spec (chain_exits) merges, for every k, the checkpointed class's labels with the
// other class's from the first class's exit, through the same heap merge as any table; it is then
// combined once with every state reaching the chain (riders — the tied embedding table — ride
// along). A chain of 96 blocks thus costs two block tables per entry spec and one merge over k,
// not 96 combinations.
//
// The suffix (standard space, after the last transformer block: the final layernorm, the LM head
// and the loss). Its table is computed once per state reaching it and merged once; inside it every
// later position is memoized by its state too, so the LM head's table is shared by every
// residual spec that reaches it with the same embedding table spec and layernorm output. Without
// it, the labels of every chain entry would each walk the head's ops.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "carto/cost/hardware.hpp"
#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/search/dp_core.hpp"
#include "carto/search/frontier.hpp"
#include "carto/search/model.hpp"
#include "carto/search/space.hpp"
#include "carto/spec/mesh.hpp"

namespace carto {

namespace detail {

class Dp : public DpCore {
 public:
  explicit Dp(DpModel& model) : DpCore(model) {
    std::vector<std::vector<std::size_t>> allowed(g_.num_ops());
    for (std::size_t k = 0; k < g_.num_ops(); ++k) {
      for (const DpModel::Choice& c : m_.choices(k)) allowed[k].push_back(c.index);
    }
    allowed_ = std::move(allowed);
    if (standard()) {
      chains_ = block_chains(g_, allowed_);
      for (std::size_t gi = 0; gi < g_.groups().size(); ++gi) {
        if (g_.groups()[gi].kind == GroupKind::transformer_block)
          suffix_start_ = g_.groups()[gi].end_op;
      }
      if (chains_.empty() || suffix_start_ >= static_cast<std::int32_t>(g_.num_ops()))
        suffix_start_ = -1;
    }
  }

  DpResult run() {
    // Every plan stores every parameter, each in at least its least persistent bytes: past the
    // budget, no plan fits.
    if (!m_.options().least_time && budget_at(0) < 0) return DpResult{};
    Frontier front;
    front[State{}].push_back(Label{});
    const auto& groups = g_.groups();
    std::size_t next_chain = 0;
    std::size_t k = 0;
    while (k < g_.num_ops()) {
      const std::int32_t gi = g_.ops()[k].group;
      const OpGroup& grp = groups[static_cast<std::size_t>(gi)];
      const bool block = grp.kind == GroupKind::transformer_block;
      const bool entering = block && static_cast<std::size_t>(grp.first_op) == k;
      if (next_chain < chains_.size() && entering && chains_[next_chain].first_group == gi) {
        front = apply_chain(next_chain, front);
        const BlockChain& c = chains_[next_chain++];
        k = static_cast<std::size_t>(
            groups[static_cast<std::size_t>(c.first_group + c.blocks - 1)].end_op);
        continue;
      }
      if (static_cast<std::int32_t>(k) == suffix_start_) {
        front = apply_suffix(suffix_start_, front);
        break;
      }
      if (!standard() && entering && memo_usable(gi, front)) {
        front = apply_block(gi, first_block_, gi, front);
        k = static_cast<std::size_t>(grp.end_op);
        continue;
      }
      if (entering) front = enter_block(gi, front);
      front = step(k, front);
      if (static_cast<std::size_t>(grp.end_op) == k + 1) front = end_group(front);
      ++k;
    }
    DpResult r = collect(front);
    for (const auto& [range, table] : segments_) r.segment_tables += table.size();
    for (const auto& [pos, table] : suffixes_) r.segment_tables += table.size();
    r.chains = chains_.size();
    r.loose_merges = loose_merges_;
    return r;
  }

 private:
  // ---- memoized blocks ----
  // An entry's (or exit's) spec, saved flag and bytes: what a block table is keyed by.
  using LiveKey = std::tuple<std::uint32_t, bool, std::int64_t>;
  static LiveKey key_of(const Live& l) { return {l.spec, l.saved, l.bytes}; }

  std::vector<std::vector<std::size_t>> allowed_{};  // per op: the indices of its choices
  std::int32_t first_block_ = -1;
  // (template block, entry, checkpointed) -> the template's exits
  std::map<std::tuple<std::int32_t, LiveKey, bool>, std::vector<BlockExit>> exits_{};

  // Whether block gi can use the full space's table (that of the first block met): same structure
  // as it and self-contained.
  bool memo_usable(std::int32_t gi, const Frontier& front) {
    if (first_block_ < 0) first_block_ = gi;
    if (!same_structure(g_, allowed_, first_block_, gi) || !self_contained_block(g_, gi))
      return false;
    const TensorId x = block_input(gi);
    for (const auto& [state, labels] : front) {
      for (const Live& l : state.live) {
        if (l.tensor == x.value && l.root != x.value) return false;
      }
    }
    return true;
  }

  // The exits of block `tmpl` (labels closed, from a zero label) entered in `entry`'s spec.
  const std::vector<BlockExit>& block_exits(std::int32_t tmpl, const Live& entry, bool checkpoint) {
    const auto key = std::tuple(tmpl, key_of(entry), checkpoint);
    auto it = exits_.find(key);
    if (it != exits_.end()) return it->second;
    const OpGroup& grp = g_.groups()[static_cast<std::size_t>(tmpl)];
    const TensorId x = block_input(tmpl);
    Live start = entry;
    start.tensor = x.value;
    start.root = x.value;
    State s0{.live = {start},
             .checkpoint = checkpoint,
             .checkpoint_input = checkpoint ? entry.bytes : 0};
    Frontier f;
    Label zero{};
    if (checkpoint && !m_.options().least_time) {  // K_g: the input, kept (enter_block)
      zero.base = entry.bytes;
      zero.kept = entry.bytes;
      zero.extra = -entry.bytes;
    }
    f[s0].push_back(zero);
    const TableScope scope(*this, grp.first_op);
    f = run_ops(grp.first_op, grp.end_op, std::move(f));
    f = end_group(f);
    std::vector<BlockExit> exits;
    for (auto& [state, labels] : f) exits.push_back(make_exit(state.live, std::move(labels)));
    return exits_.emplace(key, std::move(exits)).first->second;
  }

  // The state of `rest` and a table's exit tensors, shifted by `dt` tensor ids (from the table's
  // block to the one it stands for).
  static State joined(std::vector<Live> rest, const std::vector<Live>& exit, std::int32_t dt) {
    State next{.live = std::move(rest)};
    for (Live l : exit) {
      l.tensor += dt;
      l.root += dt;
      next.live.push_back(l);
    }
    sort_live(next.live);
    return next;
  }

  // Splits a state into the Live of tensor x and the others.
  std::pair<Live, std::vector<Live>> take(const State& state, TensorId x, std::int32_t gi) const {
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
    return {entry, std::move(rest)};
  }

  // Block gi through the table of `tmpl` (full space: its own checkpoint decision).
  Frontier apply_block(std::int32_t gi, std::int32_t tmpl, std::int32_t link_group,
                       const Frontier& in) {
    const TensorId x = block_input(gi);
    const std::int32_t dt = x.value - block_input(tmpl).value;
    const std::int32_t ops_offset = g_.groups()[static_cast<std::size_t>(gi)].first_op -
                                    g_.groups()[static_cast<std::size_t>(tmpl)].first_op;
    Jobs jobs;
    for (const auto& [state, labels] : in) {
      check_deadline();
      const bool outer_flat = flat(labels), outer_sorted = sorted(labels);
      const auto [entry, rest] = take(state, x, gi);
      const std::int64_t ride = ride_bytes(g_.groups()[static_cast<std::size_t>(gi)].first_op, rest);
      for (const bool ckpt : checkpoint_options()) {
        const std::vector<BlockExit>& exits = block_exits(tmpl, entry, ckpt);
        note_loose_merge(labels, exits, ride, false);
        for (const BlockExit& exit : exits) {
          jobs[joined(rest, exit.live, dt)].push_back(
              {.outer = &labels,
               .exit = &exit,
               .link = {.group = link_group, .ops_offset = ops_offset, .checkpoint = ckpt},
               .outer_flat = outer_flat,
               .outer_sorted = outer_sorted,
               .ride = ride});
        }
      }
    }
    return combine_jobs(jobs, g_.groups()[static_cast<std::size_t>(gi)].end_op);
  }

  // The gradient bytes of the tensors that ride along a memoized run starting at op `a` unread:
  // those of op a's `across` (search/gradient_memory.hpp, one per gradient buffer) among `riders`,
  // in their stored specs. The run's table does not see them; every op of the run counts them.
  std::int64_t ride_bytes(std::int32_t a, const std::vector<Live>& riders) {
    if (m_.options().least_time) return 0;  // no memory is tracked
    std::int64_t bytes = 0;
    for (const std::int32_t t : m_.gradient_layout(static_cast<std::size_t>(a)).across) {
      for (const Live& r : riders) {
        if (r.tensor == t) bytes += m_.local_bytes(TensorId{t}, r.spec);
      }
    }
    return bytes;
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
    const SegmentKey key{a, e};
    auto& table = segments_[key];
    auto it = table.find(entry);
    if (it != table.end()) return it->second;
    Frontier f;
    f[entry].push_back(Label{});
    const TableScope scope(*this, a);
    f = run_ops(a, e, std::move(f));
    std::vector<BlockExit> exits;
    for (auto& [state, labels] : f) exits.push_back(make_exit(state.live, std::move(labels)));
    return segments_[key].emplace(entry, std::move(exits)).first->second;
  }

  Frontier apply_segment(std::int32_t a, std::int32_t e, const Frontier& in) {
    Jobs jobs;
    for (const auto& [state, labels] : in) {
      check_deadline();
      const bool outer_flat = flat(labels), outer_sorted = sorted(labels);
      // An open checkpointed block's input bytes stand for its output's gradient in a recompute
      // (dp_core.hpp's transition): part of the key.
      State entry{.checkpoint = state.checkpoint, .checkpoint_input = state.checkpoint_input};
      std::vector<Live> riders;
      for (const Live& l : state.live) {
        (m_.next_use(TensorId{l.tensor}, a) == a ? entry.live : riders).push_back(l);
      }
      const std::int64_t ride = ride_bytes(a, riders);
      const std::vector<BlockExit>& exits = segment_exits(a, e, entry);
      note_loose_merge(labels, exits, ride, state.checkpoint);
      for (const BlockExit& exit : exits) {
        State next{.live = riders,
                   .checkpoint = state.checkpoint,
                   .checkpoint_input = state.checkpoint_input};
        next.live.insert(next.live.end(), exit.live.begin(), exit.live.end());
        sort_live(next.live);
        jobs[next].push_back({.outer = &labels,
                              .exit = &exit,
                              .outer_flat = outer_flat,
                              .outer_sorted = outer_sorted,
                              .ride = ride});
      }
    }
    return combine_jobs(jobs, e);
  }

  // ---- chains of blocks sharing a layout per checkpoint class (standard space) ----
  std::vector<BlockChain> chains_{};
  // (chain, entry, n, checkpointed) -> the class's exits; (chain, entry) -> the chain's exits.
  std::map<std::tuple<std::size_t, LiveKey, std::int32_t, bool>, std::vector<BlockExit>> classes_{};
  std::map<std::pair<std::size_t, LiveKey>, std::vector<BlockExit>> chain_tables_{};
  const BlockExit nothing_ = make_exit({}, {Label{}});  // no blocks after, nothing live

  std::int32_t chain_end_op(const BlockChain& c) const {
    return g_.groups()[static_cast<std::size_t>(c.first_group + c.blocks - 1)].end_op;
  }
  // The template's output and input tensors.
  TensorId template_output(const BlockChain& c) const {
    return g_
        .ops()[static_cast<std::size_t>(
            g_.groups()[static_cast<std::size_t>(c.first_group)].end_op - 1)]
        .output;
  }
  Live as_input(const BlockChain& c, Live l) const {
    l.tensor = l.root = block_input(c.first_group).value;
    return l;
  }
  Live as_output(const BlockChain& c, Live l) const {
    l.tensor = l.root = template_output(c).value;
    return l;
  }

  // n blocks of one class of chain ci entering in `entry` (see the design note): per exit, the
  // labels of one layout σ repeated (or a first layout τ, then σ), each traced by a class record.
  const std::vector<BlockExit>& class_run(std::size_t ci, const Live& entry, std::int32_t n,
                                          bool checkpoint) {
    const auto key = std::tuple(ci, key_of(entry), n, checkpoint);
    if (auto it = classes_.find(key); it != classes_.end()) return it->second;
    const BlockChain& c = chains_[ci];
    std::vector<BlockExit> out;
    if (n == 0) {
      out.push_back(make_exit({as_output(c, entry)}, {Label{}}));
      return classes_.emplace(key, std::move(out)).first->second;
    }
    const std::int32_t group = checkpoint ? c.first_group : c.first_group + c.blocks - n;
    const Trace record{
        .group = group, .blocks = n, .layout_group = c.first_group, .checkpoint = checkpoint};
    const double scale = static_cast<double>(n);
    // The first block's label plus n - 1 blocks of `steady`'s (itself, when the class runs one
    // layout: then it was trimmed once, not n times, so its trims count once).
    // Each later block's candidates sit on what the blocks before it kept: the last one's are
    // steady.extra above the class's end, an earlier one's lower by the steady blocks after it.
    auto repeat = [&](const Label& first, const Label& steady) {
      Label l = first;
      l.trace = -1;
      l.time += (scale - 1) * steady.time;
      l.base += (n - 1) * steady.base;
      l.kept += (n - 1) * steady.kept;
      if (n > 1) l.extra = std::max(first.extra - (n - 1) * steady.kept, steady.extra);
      if (&steady != &first) l.trims = static_cast<std::uint16_t>(l.trims + steady.trims);
      return l;
    };
    for (const BlockExit& x : block_exits(c.first_group, entry, checkpoint)) {
      // A chain of one block whose output nothing reads leaves nothing live.
      if (x.live.size() != 1 && !(x.live.empty() && c.blocks == 1))
        fail("carto: internal: a block of chain ", ci, " leaves ", x.live.size(), " tensors live");
      std::vector<Label> candidates;
      std::vector<Trace> links;
      auto add = [&](Label l, std::int32_t first, std::int32_t steady) {
        Trace t = record;
        t.sub = first;
        t.steady = steady;
        l.trace = static_cast<std::int32_t>(links.size());
        links.push_back(t);
        candidates.push_back(l);
      };
      if (n == 1 || key_of(x.live.at(0)) == key_of(entry)) {
        // A label repeated: its extra is at most its own top - P (dp_merge.hpp's floor).
        for (const Label& l : x.labels) add(repeat(l, l), l.trace, -1);
      } else {
        const Live next = as_input(c, x.live[0]);
        const std::vector<BlockExit>& ys = block_exits(c.first_group, next, checkpoint);
        note_loose_merge(x.labels, ys, 0, false);  // τ followed by σ
        for (const BlockExit& y : ys) {
          if (y.live.size() != 1 || key_of(y.live[0]) != key_of(x.live[0])) continue;
          for (const Label& tau : x.labels) {
            for (const Label& sigma : y.labels) add(repeat(tau, sigma), tau.trace, sigma.trace);
          }
        }
      }
      const double tolerance = merge_tolerance();
      std::vector<Label> kept = pareto_filter(std::move(candidates), tolerance, persistent_matters());
      if (kept.empty()) continue;
      for (Label& l : kept) {
        if (tolerance > 0) ++l.trims;
        l.trace = push_trace(links[static_cast<std::size_t>(l.trace)]);
      }
      out.push_back(make_exit(
          x.live.empty() ? std::vector<Live>{} : std::vector<Live>{as_output(c, x.live[0])},
          std::move(kept)));
    }
    return classes_.emplace(key, std::move(out)).first->second;
  }

  // Chain ci entered in `entry`: per exit (the template's output), the labels of every k with the
  // first k blocks checkpointed.
  const std::vector<BlockExit>& chain_exits(std::size_t ci, const Live& entry) {
    const auto key = std::pair(ci, key_of(entry));
    if (auto it = chain_tables_.find(key); it != chain_tables_.end()) return it->second;
    const BlockChain& c = chains_[ci];
    std::vector<std::int32_t> ks;
    switch (m_.options().checkpoint) {
      case CheckpointChoice::none: ks = {0}; break;
      case CheckpointChoice::all: ks = {c.blocks}; break;
      case CheckpointChoice::search:
        for (std::int32_t k = 0; k <= c.blocks; ++k) ks.push_back(k);
        break;
    }
    const OpGroup& first = g_.groups()[static_cast<std::size_t>(c.first_group)];
    const TableScope scope(*this, first.first_op);
    Jobs jobs;
    for (const std::int32_t k : ks) {
      for (const BlockExit& xc : class_run(ci, entry, k, true)) {
        const bool outer_flat = flat(xc.labels), outer_sorted = sorted(xc.labels);
        if (xc.live.empty()) {  // one checkpointed block whose output nothing reads
          jobs[State{}].push_back({.outer = &xc.labels,
                                   .exit = &nothing_,
                                   .outer_flat = outer_flat,
                                   .outer_sorted = outer_sorted});
          continue;
        }
        const Live next = as_input(c, xc.live[0]);
        const std::vector<BlockExit>& xns = class_run(ci, next, c.blocks - k, false);
        note_loose_merge(xc.labels, xns, 0, false);
        for (const BlockExit& xn : xns) {
          jobs[State{.live = xn.live}].push_back({.outer = &xc.labels,
                                                  .exit = &xn,
                                                  .outer_flat = outer_flat,
                                                  .outer_sorted = outer_sorted});
        }
      }
    }
    std::vector<BlockExit> exits;
    for (auto& [state, labels] : combine_jobs(jobs, chain_end_op(c)))
      exits.push_back(make_exit(state.live, std::move(labels)));
    return chain_tables_.emplace(key, std::move(exits)).first->second;
  }

  Frontier apply_chain(std::size_t ci, const Frontier& in) {
    const BlockChain& c = chains_[ci];
    const TensorId x = block_input(c.first_group);
    const std::int32_t last = c.first_group + c.blocks - 1;
    const std::int32_t dt = block_input(last).value - x.value;  // template -> last block
    Jobs jobs;
    for (const auto& [state, labels] : in) {
      check_deadline();
      const bool outer_flat = flat(labels), outer_sorted = sorted(labels);
      const auto [entry, rest] = take(state, x, c.first_group);
      for (const Live& r : rest) {
        if (r.root == entry.root)
          fail("carto: internal: a tensor read after chain ", ci, " shares its input's buffer");
      }
      const std::int64_t ride =
          ride_bytes(g_.groups()[static_cast<std::size_t>(c.first_group)].first_op, rest);
      const std::vector<BlockExit>& exits = chain_exits(ci, entry);
      note_loose_merge(labels, exits, ride, false);
      for (const BlockExit& exit : exits) {
        jobs[joined(rest, exit.live, dt)].push_back({.outer = &labels,
                                                     .exit = &exit,
                                                     .outer_flat = outer_flat,
                                                     .outer_sorted = outer_sorted,
                                                     .ride = ride});
      }
    }
    return combine_jobs(jobs, chain_end_op(c));
  }

  // ---- the suffix after the last transformer block (standard space) ----
  std::int32_t suffix_start_ = -1;
  std::map<std::int32_t, std::unordered_map<State, std::vector<BlockExit>, StateHash>> suffixes_{};

  // Ops [a, end) from `state` (a zero label), each later position memoized by its state too.
  const std::vector<BlockExit>& suffix_exits(std::int32_t a, const State& state) {
    const std::int32_t key = a;
    auto& table = suffixes_[key];
    if (auto it = table.find(state); it != table.end()) return it->second;
    Frontier f;
    f[state].push_back(Label{});
    const TableScope scope(*this, a);
    f = step(static_cast<std::size_t>(a), f);
    if (a + 1 < static_cast<std::int32_t>(g_.num_ops())) f = apply_suffix(a + 1, f);
    std::vector<BlockExit> exits;
    for (auto& [s, labels] : f) exits.push_back(make_exit(s.live, std::move(labels)));
    return suffixes_[key].emplace(state, std::move(exits)).first->second;
  }

  Frontier apply_suffix(std::int32_t a, const Frontier& in) {
    Jobs jobs;
    for (const auto& [state, labels] : in) {
      check_deadline();
      const bool outer_flat = flat(labels), outer_sorted = sorted(labels);
      const std::vector<BlockExit>& exits = suffix_exits(a, state);
      note_loose_merge(labels, exits, 0, false);
      for (const BlockExit& exit : exits) {
        jobs[State{.live = exit.live}].push_back({.outer = &labels,
                                                  .exit = &exit,
                                                  .outer_flat = outer_flat,
                                                  .outer_sorted = outer_sorted});
      }
    }
    return combine_jobs(jobs, static_cast<std::int32_t>(g_.num_ops()));
  }
};

}  // namespace detail

// The least persistent bytes (parameters, gradients, optimizer states) any plan of `g` on `mesh`
// holds: every parameter in its cheapest spec among the choices the space allows. A lower bound on
// every plan's peak.
inline std::int64_t least_parameter_bytes(const Graph& g, const DeviceMesh& mesh,
                                          const HardwareProfile& hw, const DpOptions& options = {},
                                          const StrategyFilter& filter = {}) {
  return detail::DpModel(g, mesh, hw, options, filter).param_bytes_to_go(0);
}

// The exact Pareto frontier of (step time, peak memory per device) of `g` on `mesh` under
// `options`, in the space options.space states (with options.tolerance ε: within the bound the
// design notes state).
inline DpResult dp_frontier(const Graph& g, const DeviceMesh& mesh, const HardwareProfile& hw,
                            const DpOptions& options = {}, const StrategyFilter& filter = {}) {
  detail::DpModel model(g, mesh, hw, options, filter);
  return detail::Dp(model).run();
}

}  // namespace carto
