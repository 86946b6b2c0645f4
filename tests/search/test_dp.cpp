// The DP against brute-force enumeration (DESIGN.md §6: exactness is a tested property). Random
// small problems — shapes, meshes (1-D and 2x2), hardware numbers, ZeRO stages, micro-batches,
// checkpointing and pins — are solved both ways; the frontiers of (time, peak) must be equal and so
// must the best time under random budgets. Each problem's seed is printed so a failure replays
// (CARTO_DP_SEED=<seed> runs that one alone).
#include <algorithm>
#include <carto/cost.hpp>
#include <carto/graph.hpp>
#include <carto/layers.hpp>
#include <carto/search/brute_force.hpp>
#include <carto/search/dp.hpp>
#include <carto/search/plan.hpp>
#include <carto/spec.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>

#include "support/small_graphs.hpp"

using namespace carto;
using carto::testing::BlockShape;
using carto::testing::make_graph;

namespace {

struct Problem {
  Graph graph{};
  DeviceMesh mesh{};
  HardwareProfile hw{};
  DpOptions options{};
  StrategyFilter filter{};
  std::string description{};
  bool prenorm = false;
};

Problem make_problem(std::uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](auto... v) {
    const std::int64_t items[] = {static_cast<std::int64_t>(v)...};
    return items[std::uniform_int_distribution<std::size_t>(0, sizeof...(v) - 1)(rng)];
  };
  Problem p;
  // mlp on 1-D, two small on 1-D, small on 2x2, prenorm on 1-D
  const int kind = static_cast<int>(pick(0, 0, 0, 1, 1, 2, 3, 3));
  const char* mesh_text = kind == 2 ? "dp=2,tp=2" : (pick(0, 1) == 0 ? "x=2" : "x=4");
  p.mesh = parse_mesh(mesh_text);
  const std::int64_t b = pick(4, 8, 6), h = pick(4, 8), f = pick(8, 16);
  p.graph = kind == 0   ? make_graph(b, h, f, BlockShape::mlp, 1)
            : kind == 3 ? make_graph(b, h, f, BlockShape::prenorm, 1)
                        : make_graph(b, h, f, BlockShape::small, kind == 1 ? 2 : 1);
  p.prenorm = kind == 3;
  std::uniform_real_distribution<double> scale(0.05, 20.0);
  p.hw = find_hardware_profile("h100");
  p.hw.peak_flops.bf16 *= scale(rng);
  p.hw.memory_bandwidth *= scale(rng);
  p.hw.links[0].bandwidth *= scale(rng);
  p.hw.links[0].latency *= scale(rng);
  p.options.zero_stage = static_cast<int>(pick(0, 1, 2, 3));
  p.options.micro_batches = pick(1, 2, 4);
  p.options.checkpoint = pick(0, 0, 1) == 0 ? CheckpointChoice::search : CheckpointChoice::none;
  // Pins: sometimes restrict one op to a random half of its strategies.
  if (pick(0, 0, 1) == 1) {
    const std::size_t k = std::uniform_int_distribution<std::size_t>(0, p.graph.num_ops() - 1)(rng);
    const std::size_t n =
        enumerate_strategies(p.graph, OpId{static_cast<std::int32_t>(k)}, p.mesh).size();
    p.filter.allowed.resize(p.graph.num_ops());
    for (std::size_t i = 0; i < n; ++i) {
      if (rng() % 2 == 0) p.filter.allowed[k].push_back(i);
    }
    if (p.filter.allowed[k].empty()) p.filter.allowed[k].push_back(n - 1);
  }
  p.description = std::string("seed ") + std::to_string(seed) + ", mesh " + mesh_text + ", b " +
                  std::to_string(b) + ", h " + std::to_string(h) + ", kind " +
                  std::to_string(kind) + ", ZeRO " + std::to_string(p.options.zero_stage) + ", m " +
                  std::to_string(p.options.micro_batches) +
                  (p.filter.allowed.empty() ? "" : ", pinned");
  return p;
}

// Relative tolerance on times: the DP and the brute force add the same terms in different orders
// (double precision, a few dozen terms): 1e-9 is far above that rounding and far below any real
// difference between plans (the cheapest step differs by more than 1e-6 relative).
bool same_time(double a, double b) {
  return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b));
}

void check(std::uint32_t seed) {
  const Problem p = make_problem(seed);
  INFO(p.description);
  const DpResult dp = dp_frontier(p.graph, p.mesh, p.hw, p.options, p.filter);
  const std::vector<DpPoint> bf = brute_force_frontier(p.graph, p.mesh, p.hw, p.options, p.filter);
  REQUIRE(!bf.empty());
  if (p.prenorm) REQUIRE(dp.segment_tables > 0);  // the memoized segments are what is tested
  REQUIRE(dp.frontier.size() == bf.size());
  for (std::size_t i = 0; i < bf.size(); ++i) {
    INFO("frontier point " << i << ": dp " << dp.frontier[i].time_s << " s "
                           << dp.frontier[i].peak_bytes << " B, brute force " << bf[i].time_s
                           << " s " << bf[i].peak_bytes << " B");
    REQUIRE(same_time(dp.frontier[i].time_s, bf[i].time_s));
    REQUIRE(dp.frontier[i].peak_bytes == bf[i].peak_bytes);
    // The DP's choices really cost what it says.
    const PointCost again = evaluate_point(p.graph, p.mesh, p.hw, p.options,
                                           dp.frontier[i].strategy, dp.frontier[i].checkpointed);
    REQUIRE(same_time(again.time_s, dp.frontier[i].time_s));
    REQUIRE(again.peak_bytes == dp.frontier[i].peak_bytes);
  }
  // Minimizing the peak alone finds brute force's least peak, with choices that cost it.
  DpOptions least = p.options;
  least.least_memory = true;
  const DpResult low = dp_frontier(p.graph, p.mesh, p.hw, least, p.filter);
  REQUIRE(low.frontier.size() == 1);
  REQUIRE(low.frontier[0].peak_bytes == bf.back().peak_bytes);
  REQUIRE(evaluate_point(p.graph, p.mesh, p.hw, p.options, low.frontier[0].strategy,
                         low.frontier[0].checkpointed)
              .peak_bytes == bf.back().peak_bytes);
  // Best time under random budgets between the least and the largest frontier peak.
  std::mt19937 rng(seed ^ 0x9e3779b9U);
  std::uniform_int_distribution<std::int64_t> budget(bf.back().peak_bytes, bf.front().peak_bytes);
  for (int trial = 0; trial < 5; ++trial) {
    const std::int64_t cap = budget(rng);
    auto best = [&](const std::vector<DpPoint>& f) {
      for (const DpPoint& q : f) {
        if (q.peak_bytes <= cap) return q.time_s;  // increasing time
      }
      return -1.0;
    };
    REQUIRE(same_time(best(dp.frontier), best(bf)));
  }
  // With the budget given to the DP, its frontier is brute force's points that fit.
  DpOptions capped = p.options;
  capped.memory_budget = budget(rng);
  const DpResult fit = dp_frontier(p.graph, p.mesh, p.hw, capped, p.filter);
  std::vector<DpPoint> bf_fit;
  for (const DpPoint& q : bf) {
    if (q.peak_bytes <= capped.memory_budget) bf_fit.push_back(q);
  }
  INFO("budget " << capped.memory_budget);
  REQUIRE(fit.frontier.size() == bf_fit.size());
  for (std::size_t i = 0; i < bf_fit.size(); ++i) {
    REQUIRE(same_time(fit.frontier[i].time_s, bf_fit[i].time_s));
    REQUIRE(fit.frontier[i].peak_bytes == bf_fit[i].peak_bytes);
  }
}

// The same comparison in the space SearchOptions::axes_in_mesh_order states: the DP and the brute
// force get one filter, which must really remove strategies on a 2-axis mesh.
void check_mesh_order(const Problem& p) {
  const StrategyFilter ordered = mesh_order_filter(p.graph, p.mesh, p.filter);
  std::size_t removed = 0;
  for (std::size_t k = 0; k < p.graph.num_ops(); ++k) {
    const std::vector<Strategy> all =
        enumerate_strategies(p.graph, OpId{static_cast<std::int32_t>(k)}, p.mesh);
    const bool pinned = p.filter.allowed.size() > k && !p.filter.allowed[k].empty();
    const std::size_t before = pinned ? p.filter.allowed[k].size() : all.size();
    REQUIRE(!ordered.allowed[k].empty());
    removed += before - ordered.allowed[k].size();
    for (std::size_t i = 0; i < all.size(); ++i) {
      const bool kept = std::find(ordered.allowed[k].begin(), ordered.allowed[k].end(), i) !=
                        ordered.allowed[k].end();
      bool in_order = axes_in_mesh_order(all[i].sharding.output, p.mesh);
      for (const ShardingSpec& in : all[i].sharding.inputs)
        in_order = in_order && axes_in_mesh_order(in, p.mesh);
      const bool allowed =
          !pinned || std::find(p.filter.allowed[k].begin(), p.filter.allowed[k].end(), i) !=
                         p.filter.allowed[k].end();
      REQUIRE(kept == (allowed && in_order));  // exactly the allowed strategies in mesh order
    }
  }
  REQUIRE(removed > 0);
  const DpResult dp = dp_frontier(p.graph, p.mesh, p.hw, p.options, ordered);
  const std::vector<DpPoint> bf = brute_force_frontier(p.graph, p.mesh, p.hw, p.options, ordered);
  REQUIRE(dp.frontier.size() == bf.size());
  for (std::size_t i = 0; i < bf.size(); ++i) {
    REQUIRE(same_time(dp.frontier[i].time_s, bf[i].time_s));
    REQUIRE(dp.frontier[i].peak_bytes == bf[i].peak_bytes);
  }
}

}  // namespace

TEST_CASE("the DP equals brute force where a dim's axes keep mesh order", "[search][dp]") {
  int run = 0;
  for (std::uint32_t seed = 1; seed <= 200 && run < 12; ++seed) {
    const Problem p = make_problem(seed);
    if (p.mesh.num_axes() < 2) continue;
    INFO(p.description);
    check_mesh_order(p);
    ++run;
  }
  REQUIRE(run == 12);
}

TEST_CASE("the DP's frontier equals brute force on 200 random small problems", "[search][dp]") {
  if (const char* one = std::getenv("CARTO_DP_SEED")) {
    check(static_cast<std::uint32_t>(std::strtoul(one, nullptr, 10)));
    return;
  }
  for (std::uint32_t seed = 1; seed <= 200; ++seed) check(seed);
}

TEST_CASE("the DP's choices on a GPT block match their evaluation", "[search][dp]") {
  // A whole (tiny) GPT with two blocks on a 1-D mesh: too big for brute force, so every frontier
  // point is re-priced from scratch by evaluate_point.
  for (const int zero : {0, 3}) {
    const Graph g =
        build_gpt({.name = "tiny", .layers = 2, .hidden = 32, .heads = 4, .vocab = 64, .seq = 16},
                  {.batch = 4});
    const DeviceMesh mesh = parse_mesh("x=2");
    const HardwareProfile hw = find_hardware_profile("h100");
    const DpOptions options{.zero_stage = zero, .micro_batches = 2};
    const DpResult r = dp_frontier(g, mesh, hw, options);
    REQUIRE(r.frontier.size() >= 2);
    for (std::size_t i = 1; i < r.frontier.size(); ++i) {
      REQUIRE(r.frontier[i].time_s > r.frontier[i - 1].time_s);
      REQUIRE(r.frontier[i].peak_bytes < r.frontier[i - 1].peak_bytes);
    }
    for (const DpPoint& p : r.frontier) {
      const PointCost c = evaluate_point(g, mesh, hw, options, p.strategy, p.checkpointed);
      REQUIRE(same_time(c.time_s, p.time_s));
      REQUIRE(c.peak_bytes == p.peak_bytes);
    }
  }
}

TEST_CASE("a pruning tolerance keeps the fastest plan; a bad one is an error", "[search][dp]") {
  // Tolerance pruning drops a label only for one at most as slow, so the fastest time is exact;
  // any ε ≥ 0 works (a huge one keeps about one label per state without overflowing).
  const Graph g =
      build_gpt({.name = "tiny", .layers = 2, .hidden = 32, .heads = 4, .vocab = 64, .seq = 16},
                {.batch = 4});
  const DeviceMesh mesh = parse_mesh("x=2");
  const HardwareProfile hw = find_hardware_profile("h100");
  const DpOptions exact{.micro_batches = 2};
  const DpResult all = dp_frontier(g, mesh, hw, exact);
  for (const double eps : {0.02, 1.0, 1e12}) {
    INFO("tolerance " << eps);
    DpOptions o = exact;
    o.tolerance = eps;
    const DpResult r = dp_frontier(g, mesh, hw, o);
    REQUIRE(!r.frontier.empty());
    REQUIRE(r.frontier.size() <= all.frontier.size());
    REQUIRE(same_time(r.frontier.front().time_s, all.frontier.front().time_s));
    for (const DpPoint& p : r.frontier) {
      const PointCost c = evaluate_point(g, mesh, hw, o, p.strategy, p.checkpointed);
      REQUIRE(same_time(c.time_s, p.time_s));
      REQUIRE(c.peak_bytes == p.peak_bytes);
    }
  }
  for (const double bad :
       {-0.5, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    DpOptions o = exact;
    o.tolerance = bad;
    REQUIRE_THROWS_WITH(dp_frontier(g, mesh, hw, o),
                        Catch::Contains("the pruning tolerance must be a finite number"));
  }
}
