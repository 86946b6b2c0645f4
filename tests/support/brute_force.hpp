// The frontier by brute force: the independent reference the DP is tested against, in either
// search space (search/space.hpp).
//
// Every complete plan — a strategy per op, a checkpoint flag per transformer block — of the space
// is enumerated and priced whole by evaluate_point (search/price.hpp); the Pareto-optimal points
// are kept. The space is stated as predicates on a complete plan, checked as early as possible
// while ops are assigned in graph order (so the enumeration stays small), never by reusing the
// DP's tables:
//  - every space: each op's strategy is allowed (pins), and an op reads its first input as stored
//    where reads_stored_spec says so;
//  - standard: strategies in mesh order, an untied embedding's table not split by rows; in each
//  chain (block_chains) the first k blocks are
//    checkpointed, for every k the options allow; within one class, the blocks after the first
//    all run the second block's strategies σ, and the first block runs σ too when it receives its
//    input in σ's output spec, else any strategies whose output spec is σ's; a class of one block
//    runs any strategies. Blocks outside chains take any checkpoint flag the options allow.
// The rules are stated here again, apart from the DP's helpers, so that a change to one of those
// shows as a difference; only which blocks form a chain (block_chains) is shared, and the tests
// check its answer on models whose chains they know. It is exponential: for tests on graphs of a
// few ops.
#pragma once

#include <algorithm>
#include <carto/search/dp.hpp>
#include <carto/search/price.hpp>
#include <carto/search/space.hpp>
#include <carto/search/strategy.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

namespace carto::testing {

namespace detail_bf {

// The stored-read rule, stated again here (not search/space.hpp's reads_stored_spec): a view
// always reads its first input as stored; gelu, dropout, bias and scale unless it is Partial;
// rotary unless it splits the head (last) dim (Partial or not); in the standard space the add too.
inline bool must_read_stored(OpKind kind, const ShardingSpec& stored, SearchSpace space) {
  if (kind == OpKind::view) return true;
  if (kind == OpKind::rotary) return stored.dims()[stored.rank() - 1].empty();
  if (stored.is_partial()) return false;
  if (kind == OpKind::add) return space == SearchSpace::standard;
  return kind == OpKind::gelu || kind == OpKind::dropout || kind == OpKind::bias ||
         kind == OpKind::scale;
}

// Rule 4, stated again: a gather (embedding) whose table (input 0) is an input of no other op
// splits the table's rows (the vocabulary) over no axis.
inline bool untied_table_split(const Graph& g, std::size_t k, const Strategy& s) {
  const Op& op = g.ops()[k];
  if (op.kind != OpKind::gather || s.sharding.inputs[0].dims()[0].empty()) return false;
  std::size_t readers = 0;
  for (const Op& other : g.ops()) {
    for (const TensorId t : other.inputs) readers += t == op.inputs[0] ? 1 : 0;
  }
  return readers == 1;
}

// Mesh order, stated again: in every spec of the strategy, a dim's axes by increasing mesh index.
inline bool ordered(const Strategy& s, const DeviceMesh& mesh) {
  auto spec_ordered = [&](const ShardingSpec& spec) {
    for (const AxisList& dim : spec.dims()) {
      for (std::size_t i = 1; i < dim.size(); ++i) {
        if (!(mesh.index_of(dim[i - 1]) < mesh.index_of(dim[i]))) return false;
      }
    }
    return true;
  };
  if (!spec_ordered(s.sharding.output)) return false;
  for (const ShardingSpec& in : s.sharding.inputs) {
    if (!spec_ordered(in)) return false;
  }
  return true;
}

struct ChainSlot {
  int chain = -1;          // index into the chains, -1: a free op
  std::int32_t block = 0;  // block within the chain
  std::size_t offset = 0;  // op index minus its block's first op
};

}  // namespace detail_bf

// Pareto frontier of (time, peak) over every plan of options.space within `filter`, increasing
// time. Fails past `limit` complete plans.
inline std::vector<DpPoint> brute_force_frontier(const Graph& g, const DeviceMesh& mesh,
                                                 const HardwareProfile& hw,
                                                 const DpOptions& options,
                                                 const StrategyFilter& filter = {},
                                                 std::size_t limit = 2'000'000) {
  const StrategyOptions sopt{.precision = options.precision,
                             .layernorm_stats = options.layernorm_stats,
                             .dropout_masks = options.dropout_masks};
  const bool standard = options.space == SearchSpace::standard;
  const std::size_t n = g.num_ops();
  std::vector<std::vector<Strategy>> all(n);
  std::vector<std::vector<std::size_t>> allowed(n);
  for (std::size_t k = 0; k < n; ++k) {
    all[k] = enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh, sopt);
    const bool pinned = k < filter.allowed.size() && !filter.allowed[k].empty();
    for (std::size_t i = 0; i < all[k].size(); ++i) {
      if (pinned && std::find(filter.allowed[k].begin(), filter.allowed[k].end(), i) ==
                        filter.allowed[k].end())
        continue;
      if (standard && !detail_bf::ordered(all[k][i], mesh)) continue;
      if (standard && detail_bf::untied_table_split(g, k, all[k][i])) continue;
      allowed[k].push_back(i);
    }
    if (allowed[k].empty()) carto::detail::fail("brute force: op ", k, " has no strategy");
  }
  const std::vector<BlockChain> chains =
      standard ? block_chains(g, allowed) : std::vector<BlockChain>{};
  std::vector<detail_bf::ChainSlot> slot(n);
  std::vector<int> chain_of_group(g.groups().size(), -1);
  for (std::size_t c = 0; c < chains.size(); ++c) {
    for (std::int32_t j = 0; j < chains[c].blocks; ++j) {
      const std::size_t gi = static_cast<std::size_t>(chains[c].first_group + j);
      chain_of_group[gi] = static_cast<int>(c);
      const OpGroup& grp = g.groups()[gi];
      for (std::int32_t k = grp.first_op; k < grp.end_op; ++k) {
        slot[static_cast<std::size_t>(k)] = {.chain = static_cast<int>(c),
                                             .block = j,
                                             .offset = static_cast<std::size_t>(k - grp.first_op)};
      }
    }
  }
  // Checkpoint patterns: a k per chain, a flag per block outside chains.
  std::vector<std::size_t> free_blocks;
  for (std::size_t gi = 0; gi < g.groups().size(); ++gi) {
    if (g.groups()[gi].kind == GroupKind::transformer_block && chain_of_group[gi] < 0)
      free_blocks.push_back(gi);
  }
  auto flags = [&]() -> std::vector<bool> {
    switch (options.checkpoint) {
      case CheckpointChoice::none: return {false};
      case CheckpointChoice::all: return {true};
      case CheckpointChoice::search: return {false, true};
    }
    return {false};
  };
  auto ks_of = [&](const BlockChain& c) {
    std::vector<std::int32_t> ks;
    if (options.checkpoint == CheckpointChoice::none)
      ks = {0};
    else if (options.checkpoint == CheckpointChoice::all)
      ks = {c.blocks};
    else
      for (std::int32_t k = 0; k <= c.blocks; ++k) ks.push_back(k);
    return ks;
  };

  std::vector<DpPoint> points;
  ReshardCache cache;
  std::size_t leaves = 0;
  std::vector<std::size_t> pick(n, 0);  // op k's strategy index
  std::vector<std::int32_t> k_of(chains.size(), 0);
  std::vector<bool> ckpt(g.groups().size(), false);

  // Op index of template op `offset` in block j of chain c.
  auto op_in_block = [&](int c, std::int32_t j, std::size_t offset) {
    const std::size_t gi =
        static_cast<std::size_t>(chains[static_cast<std::size_t>(c)].first_group + j);
    return static_cast<std::size_t>(g.groups()[gi].first_op) + offset;
  };
  auto last_op = [&](int c, std::int32_t j) {
    const std::size_t gi =
        static_cast<std::size_t>(chains[static_cast<std::size_t>(c)].first_group + j);
    return static_cast<std::size_t>(g.groups()[gi].end_op - 1);
  };
  auto out_spec = [&](std::size_t k) -> const ShardingSpec& {
    return all[k][pick[k]].sharding.output;
  };
  // The spec block j of chain c receives its input in (its producer's output spec).
  auto entry_spec = [&](int c, std::int32_t j) -> const ShardingSpec& {
    const std::int32_t gi = chains[static_cast<std::size_t>(c)].first_group + j;
    const TensorId x = carto::detail::group_input(g, gi);
    return out_spec(g.tensor(x).producer.index());
  };
  // Class bounds of block j: [first, first + size).
  auto class_of = [&](int c, std::int32_t j) {
    const std::int32_t k = k_of[static_cast<std::size_t>(c)];
    const std::int32_t blocks = chains[static_cast<std::size_t>(c)].blocks;
    return j < k ? std::pair<std::int32_t, std::int32_t>{0, k}
                 : std::pair<std::int32_t, std::int32_t>{k, blocks - k};
  };

  std::function<void(std::size_t)> assign = [&](std::size_t k) {
    if (k == n) {
      if (++leaves > limit)
        carto::detail::fail("brute force: more than ", limit, " plans; make the problem smaller");
      std::vector<Strategy> chosen;
      chosen.reserve(n);
      for (std::size_t i = 0; i < n; ++i) chosen.push_back(all[i][pick[i]]);
      const PointCost c = evaluate_point(g, mesh, hw, options, chosen, ckpt, cache);
      points.push_back(
          {.time_s = c.time_s, .peak_bytes = c.peak_bytes, .strategy = pick, .checkpointed = ckpt});
      return;
    }
    const Op& op = g.ops()[k];
    const detail_bf::ChainSlot& s = slot[k];
    std::vector<std::size_t> candidates = allowed[k];
    if (s.chain >= 0) {
      const auto [first, size] = class_of(s.chain, s.block);
      if (size >= 2 && s.block >= first + 2) {  // σ's later blocks repeat the second block's
        candidates = {pick[op_in_block(s.chain, first + 1, s.offset)]};
      }
    }
    for (const std::size_t i : candidates) {
      pick[k] = i;
      // Stored reads.
      const TensorInfo& in = g.tensor(op.inputs[0]);
      if (in.producer.valid()) {
        const ShardingSpec& stored = out_spec(in.producer.index());
        if (detail_bf::must_read_stored(op.kind, stored, options.space) &&
            !(stored == all[k][i].sharding.inputs[0]))
          continue;
      }
      // A class's first block against σ, once σ's block (the second) is complete.
      if (s.chain >= 0 && k == last_op(s.chain, s.block)) {
        const auto [first, size] = class_of(s.chain, s.block);
        if (size >= 2 && s.block == first + 1) {
          const ShardingSpec& sigma_out = out_spec(k);
          if (entry_spec(s.chain, first) == sigma_out) {
            bool same = true;  // τ = σ
            const OpGroup& grp = g.groups()[static_cast<std::size_t>(
                chains[static_cast<std::size_t>(s.chain)].first_group + first)];
            for (std::int32_t o = 0; o < grp.end_op - grp.first_op && same; ++o) {
              same = pick[op_in_block(s.chain, first, static_cast<std::size_t>(o))] ==
                     pick[op_in_block(s.chain, first + 1, static_cast<std::size_t>(o))];
            }
            if (!same) continue;
          } else if (!(out_spec(last_op(s.chain, first)) == sigma_out)) {
            continue;
          }
        }
      }
      assign(k + 1);
    }
  };

  // Every checkpoint pattern: odometers over the chains' k and the free blocks' flags.
  std::function<void(std::size_t)> patterns_of_chains;
  std::function<void(std::size_t)> patterns_of_free = [&](std::size_t b) {
    if (b == free_blocks.size()) {
      assign(0);
      return;
    }
    for (const bool f : flags()) {
      ckpt[free_blocks[b]] = f;
      patterns_of_free(b + 1);
    }
  };
  patterns_of_chains = [&](std::size_t c) {
    if (c == chains.size()) {
      patterns_of_free(0);
      return;
    }
    for (const std::int32_t k : ks_of(chains[c])) {
      k_of[c] = k;
      for (std::int32_t j = 0; j < chains[c].blocks; ++j)
        ckpt[static_cast<std::size_t>(chains[c].first_group + j)] = j < k;
      patterns_of_chains(c + 1);
    }
  };
  patterns_of_chains(0);

  std::sort(points.begin(), points.end(), [](const DpPoint& a, const DpPoint& b) {
    return a.time_s != b.time_s ? a.time_s < b.time_s : a.peak_bytes < b.peak_bytes;
  });
  std::vector<DpPoint> frontier;
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  for (DpPoint& p : points) {
    if (p.peak_bytes < best) {
      best = p.peak_bytes;
      frontier.push_back(std::move(p));
    }
  }
  carto::detail::drop_time_ties(frontier);
  return frontier;
}

}  // namespace carto::testing
