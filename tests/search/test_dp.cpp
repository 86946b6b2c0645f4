// The DP against brute-force enumeration (DESIGN.md §6: exactness is a tested property), in both
// search spaces. Random small problems — shapes, meshes (1 to 3 axes), hardware numbers, ZeRO
// stages, micro-batches, checkpointing, chains of identical blocks, a Partial residual and pins —
// are solved both ways; the frontiers of (time, peak) must be equal and so must the best time
// under random budgets. Each problem's seed is printed so a failure replays (CARTO_DP_SEED=<seed>
// runs that one alone, in both spaces).
#include <algorithm>
#include <carto/cost.hpp>
#include <carto/graph.hpp>
#include <carto/layers.hpp>
#include <carto/search/dp.hpp>
#include <carto/search/price.hpp>
#include <carto/search/space.hpp>
#include <carto/spec.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>

#include "support/brute_force.hpp"
#include "support/small_graphs.hpp"

using namespace carto;
using carto::testing::BlockShape;
using carto::testing::brute_force_frontier;
using carto::testing::make_graph;
using carto::testing::Prefix;

namespace {

struct Problem {
  Graph graph{};
  DeviceMesh mesh{};
  HardwareProfile hw{};
  DpOptions options{};
  StrategyFilter filter{};
  std::string description{};
  bool prenorm = false;
  int blocks = 1;
};

// Kinds: 0 mlp block on 1-D; 1 two small blocks on 1-D; 2 small on 2x2; 3 prenorm on 1-D (long
// enough for memoized segments); 4 two small blocks after an einsum prefix on 1-D (the residual
// can arrive Partial); 5 two or three small blocks on 2x2; 6 one or two small blocks on 2x2x2;
// 7 two mlp blocks on x=2.
Problem make_problem(std::uint32_t seed, SearchSpace space) {
  std::mt19937 rng(seed);
  auto pick = [&](auto... v) {
    const std::int64_t items[] = {static_cast<std::int64_t>(v)...};
    return items[std::uniform_int_distribution<std::size_t>(0, sizeof...(v) - 1)(rng)];
  };
  Problem p;
  const int kind = static_cast<int>(pick(0, 0, 1, 1, 2, 3, 3, 4, 4, 5, 6, 7));
  const char* mesh_text = kind == 2 || kind == 5 ? "dp=2,tp=2"
                          : kind == 6            ? "x=2,y=2,z=2"
                          : kind == 7            ? "x=2"
                                                 : (pick(0, 1) == 0 ? "x=2" : "x=4");
  p.mesh = parse_mesh(mesh_text);
  const std::int64_t b = pick(4, 8, 6), h = pick(4, 8), f = pick(8, 16);
  p.blocks = kind == 1 || kind == 4 || kind == 7 ? 2
             : kind == 5                         ? static_cast<int>(pick(2, 3))
             : kind == 6                         ? static_cast<int>(pick(1, 2))
                                                 : 1;
  const BlockShape shape = kind == 0 || kind == 7 ? BlockShape::mlp
                           : kind == 3            ? BlockShape::prenorm
                                                  : BlockShape::small;
  p.graph = make_graph(b, h, f, shape, p.blocks, kind == 4 ? Prefix::einsum : Prefix::gelu);
  p.prenorm = kind == 3;
  std::uniform_real_distribution<double> scale(0.05, 20.0);
  p.hw = find_hardware_profile("h100");
  p.hw.peak_flops.bf16 *= scale(rng);
  p.hw.memory_bandwidth *= scale(rng);
  p.hw.links[0].bandwidth *= scale(rng);
  p.hw.links[0].latency *= scale(rng);
  p.options.space = space;
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
  p.description =
      std::string("seed ") + std::to_string(seed) + ", " + std::string(to_string_view(space)) +
      " space, mesh " + mesh_text + ", b " + std::to_string(b) + ", h " + std::to_string(h) +
      ", kind " + std::to_string(kind) + ", blocks " + std::to_string(p.blocks) + ", ZeRO " +
      std::to_string(p.options.zero_stage) + ", m " + std::to_string(p.options.micro_batches) +
      (p.filter.allowed.empty() ? "" : ", pinned");
  return p;
}

// Whether a pinned problem still has a plan in the standard space (a pin may leave an op only
// strategies out of mesh order).
bool has_plan(const Problem& p) {
  try {
    (void)detail::DpModel(p.graph, p.mesh, p.hw, p.options, p.filter);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Relative tolerance on times: the DP and the brute force add the same terms in different orders
// (double precision, a few dozen terms; a chain's layout times n): 1e-9 is far above that rounding
// and far below any real difference between plans (the cheapest step differs by more than 1e-6
// relative).
bool same_time(double a, double b) {
  return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b));
}

void require_equal(const std::vector<DpPoint>& dp, const std::vector<DpPoint>& bf) {
  REQUIRE(dp.size() == bf.size());
  for (std::size_t i = 0; i < bf.size(); ++i) {
    INFO("frontier point " << i << ": dp " << dp[i].time_s << " s " << dp[i].peak_bytes
                           << " B, brute force " << bf[i].time_s << " s " << bf[i].peak_bytes
                           << " B");
    REQUIRE(same_time(dp[i].time_s, bf[i].time_s));
    REQUIRE(dp[i].peak_bytes == bf[i].peak_bytes);
  }
}

void check(const Problem& p) {
  INFO(p.description);
  const DpResult dp = dp_frontier(p.graph, p.mesh, p.hw, p.options, p.filter);
  const std::vector<DpPoint> bf = brute_force_frontier(p.graph, p.mesh, p.hw, p.options, p.filter);
  if (bf.empty()) {  // a pin can leave no plan in the space
    REQUIRE(dp.frontier.empty());
    return;
  }
  if (p.prenorm) REQUIRE(dp.segment_tables > 0);  // the memoized segments are what is tested
  if (p.options.space == SearchSpace::standard) REQUIRE(dp.chains >= 1);
  require_equal(dp.frontier, bf);
  for (const DpPoint& q : dp.frontier) {  // the DP's choices really cost what it says
    const PointCost again =
        evaluate_point(p.graph, p.mesh, p.hw, p.options, q.strategy, q.checkpointed);
    REQUIRE(same_time(again.time_s, q.time_s));
    REQUIRE(again.peak_bytes == q.peak_bytes);
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
  std::mt19937 rng(static_cast<std::uint32_t>(bf.size() * 7919 + bf.front().peak_bytes));
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
  require_equal(fit.frontier, bf_fit);
}

// The seeds to run: CARTO_DP_SEED alone, or 1..count.
std::vector<std::uint32_t> seeds(std::uint32_t count) {
  if (const char* one = std::getenv("CARTO_DP_SEED"))
    return {static_cast<std::uint32_t>(std::strtoul(one, nullptr, 10))};
  std::vector<std::uint32_t> out;
  for (std::uint32_t s = 1; s <= count; ++s) out.push_back(s);
  return out;
}

}  // namespace

TEST_CASE("the standard space's DP equals its brute force on 240 random problems", "[search][dp]") {
  int partial_entries = 0, multi_axis = 0, chains = 0;
  for (const std::uint32_t seed : seeds(240)) {
    const Problem p = make_problem(seed, SearchSpace::standard);
    if (!has_plan(p)) continue;
    check(p);
    partial_entries += p.description.find("kind 4") != std::string::npos;
    multi_axis += p.mesh.num_axes() > 1;
    chains += p.blocks > 1;
  }
  if (std::getenv("CARTO_DP_SEED") == nullptr) {
    REQUIRE(partial_entries > 10);  // the Partial residual case is in the sample
    REQUIRE(multi_axis > 30);
    REQUIRE(chains > 60);
  }
}

TEST_CASE("the full space's DP equals its brute force on 200 random problems", "[search][dp]") {
  for (const std::uint32_t seed : seeds(200)) {
    const Problem p = make_problem(seed, SearchSpace::full);
    // The full space of several blocks on 2x2 and of 2x2x2 is too big for brute force.
    if (p.mesh.num_axes() == 3 || (p.mesh.num_axes() == 2 && p.blocks > 1)) continue;
    check(p);
  }
}

TEST_CASE("a Partial residual reaches a chain in another spec than its layout's output",
          "[search][dp]") {
  // An einsum prefix whose contraction is split hands the first block a Partial residual; the
  // blocks after it receive it in their layout's output spec, so the first block runs a layout of
  // its own (τ) from the Partial spec to σ's output spec. The brute force states that rule
  // independently; the DP must find such plans, with σ repeated after the first block.
  const Graph g = make_graph(8, 8, 16, BlockShape::small, 3, Prefix::einsum);
  const DeviceMesh mesh = parse_mesh("x=2");
  const HardwareProfile hw = find_hardware_profile("h100");
  const DpOptions o{.checkpoint = CheckpointChoice::none};
  const StrategyFilter partial = pin_filter(g, mesh, {parse_pin("prefix.einsum0=R,R|P(x)")});
  const DpResult dp = dp_frontier(g, mesh, hw, o, partial);
  require_equal(dp.frontier, brute_force_frontier(g, mesh, hw, o, partial));
  // Without the pin the Partial residual is one choice among others: the same equality.
  require_equal(dp_frontier(g, mesh, hw, o).frontier, brute_force_frontier(g, mesh, hw, o));
  auto output = [&](const DpPoint& q, std::size_t k) {
    return enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh)[q.strategy[k]]
        .sharding.output;
  };
  bool own_layout = false;
  for (const DpPoint& q : dp.frontier) {
    const std::size_t first = static_cast<std::size_t>(g.groups()[1].first_op);
    const std::size_t second = static_cast<std::size_t>(g.groups()[2].first_op);
    const std::size_t third = static_cast<std::size_t>(g.groups()[3].first_op);
    for (std::size_t i = 0; i < second - first; ++i)
      REQUIRE(q.strategy[second + i] == q.strategy[third + i]);  // σ repeats
    REQUIRE(output(q, first - 1).is_partial());                  // the pinned prefix
    own_layout = own_layout || !(output(q, second - 1) == output(q, first - 1));
  }
  REQUIRE(own_layout);  // some plan's first block turns the Partial residual into σ's spec
  // On a 2-D mesh a Partial residual can stay Partial in another spec: blocks whose einsum is
  // pinned to a row-parallel split hand their adds a Partial branch, the adds choose freely.
  const DeviceMesh square = parse_mesh("dp=2,tp=2");
  const StrategyFilter rows = pin_filter(
      g, square,
      {parse_pin("prefix.einsum0=R,R|P(dp,tp)"), parse_pin("block.*.einsum0=R,R|P(tp)")});
  require_equal(dp_frontier(g, square, hw, o, rows).frontier,
                brute_force_frontier(g, square, hw, o, rows));
}

TEST_CASE("the full space's DP equals brute force where a dim's axes keep mesh order",
          "[search][dp]") {
  int run = 0;
  for (std::uint32_t seed = 1; seed <= 200 && run < 12; ++seed) {
    const Problem p = make_problem(seed, SearchSpace::full);
    if (p.mesh.num_axes() != 2 || p.blocks > 1) continue;
    INFO(p.description);
    const StrategyFilter ordered = mesh_order_filter(p.graph, p.mesh, p.filter);
    require_equal(dp_frontier(p.graph, p.mesh, p.hw, p.options, ordered).frontier,
                  brute_force_frontier(p.graph, p.mesh, p.hw, p.options, ordered));
    ++run;
  }
  REQUIRE(run == 12);
}

TEST_CASE("a memory resolution ε keeps within (1 + ε)^n of every brute-force point",
          "[search][dp]") {
  // The bound of search/frontier.hpp: every brute-force point (t*, m*) has a returned point with
  // t ≤ t* and m ≤ (1 + ε)^n · m*, n = DpResult::trims; every returned point re-prices exactly.
  int trimmed = 0;
  for (const std::uint32_t seed : seeds(60)) {
    for (const double eps : {0.01, 0.1, 0.5}) {
      Problem p = make_problem(seed, SearchSpace::standard);
      if (!has_plan(p)) continue;
      INFO(p.description << ", ε " << eps);
      const std::vector<DpPoint> bf =
          brute_force_frontier(p.graph, p.mesh, p.hw, p.options, p.filter);
      p.options.tolerance = eps;
      const DpResult dp = dp_frontier(p.graph, p.mesh, p.hw, p.options, p.filter);
      REQUIRE(dp.frontier.size() <= bf.size());
      REQUIRE(dp.trims > 0);
      trimmed += dp.frontier.size() < bf.size();
      const double factor = std::pow(1 + eps, static_cast<double>(dp.trims));
      for (const DpPoint& star : bf) {
        const bool covered =
            std::any_of(dp.frontier.begin(), dp.frontier.end(), [&](const DpPoint& q) {
              return q.time_s <= star.time_s * (1 + 1e-9) &&
                     static_cast<double>(q.peak_bytes) <=
                         factor * static_cast<double>(star.peak_bytes);
            });
        REQUIRE(covered);
      }
      REQUIRE(same_time(dp.frontier.front().time_s, bf.front().time_s));  // the fastest is exact
      for (const DpPoint& q : dp.frontier) {
        const PointCost again =
            evaluate_point(p.graph, p.mesh, p.hw, p.options, q.strategy, q.checkpointed);
        REQUIRE(same_time(again.time_s, q.time_s));
        REQUIRE(again.peak_bytes == q.peak_bytes);
      }
    }
  }
  if (std::getenv("CARTO_DP_SEED") == nullptr) REQUIRE(trimmed > 5);  // ε really trimmed
}

TEST_CASE("the DP's choices on a GPT block match their evaluation", "[search][dp]") {
  // A whole (tiny) GPT with two blocks on a 1-D mesh: too big for brute force, so every frontier
  // point is re-priced from scratch by evaluate_point, in both spaces.
  for (const SearchSpace space : {SearchSpace::standard, SearchSpace::full}) {
    for (const int zero : {0, 3}) {
      const Graph g =
          build_gpt({.name = "tiny", .layers = 2, .hidden = 32, .heads = 4, .vocab = 64, .seq = 16},
                    {.batch = 4});
      const DeviceMesh mesh = parse_mesh("x=2");
      const HardwareProfile hw = find_hardware_profile("h100");
      const DpOptions options{.zero_stage = zero, .micro_batches = 2, .space = space};
      const DpResult r = dp_frontier(g, mesh, hw, options);
      REQUIRE(r.frontier.size() >= 2);
      if (space == SearchSpace::standard) REQUIRE(r.chains == 1);
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
}

TEST_CASE("tables kept by base and top stay within 2 % of exact tables, which equal their pricing",
          "[search][dp]") {
  // A memoized table's label with fewer parameter bytes can give a lower peak after an earlier
  // excursion larger than the table's own (search/dp_merge.hpp's design note). With
  // DpOptions::exact_tables the tables keep those labels too, and the frontier is exact: every
  // point re-priced by evaluate_point, and at least as lean as the default frontier at every
  // time. The default frontier is within 2 % of it in memory at the same time (1.7 % measured on
  // this 2-block GPT, the worst case found), and is exact when no merge was loose.
  const Graph g =
      build_gpt({.name = "tiny", .layers = 2, .hidden = 32, .heads = 4, .vocab = 64, .seq = 16},
                {.batch = 4});
  const HardwareProfile hw = find_hardware_profile("h100");
  std::size_t loose = 0;
  double worst = 1;
  for (const char* m : {"x=2", "x=4"}) {
    for (const int zero : {1, 2}) {
      const DeviceMesh mesh = parse_mesh(m);
      DpOptions options{.zero_stage = zero};
      const DpResult fast = dp_frontier(g, mesh, hw, options);
      options.exact_tables = true;
      const DpResult exact = dp_frontier(g, mesh, hw, options);
      REQUIRE(exact.loose_merges == 0);
      loose += fast.loose_merges;
      for (const DpPoint& p : exact.frontier) {
        const PointCost c = evaluate_point(g, mesh, hw, options, p.strategy, p.checkpointed);
        REQUIRE(c.peak_bytes == p.peak_bytes);
      }
      auto leanest_by = [](const DpResult& r, double time) {
        std::int64_t best = std::numeric_limits<std::int64_t>::max();
        for (const DpPoint& q : r.frontier) {
          if (q.time_s <= time * (1 + 1e-9)) best = std::min(best, q.peak_bytes);
        }
        return best;
      };
      for (const DpPoint& p : fast.frontier) {  // the exact frontier is no worse anywhere
        REQUIRE(leanest_by(exact, p.time_s) <= p.peak_bytes);
      }
      for (const DpPoint& p : exact.frontier) {
        const double ratio = static_cast<double>(leanest_by(fast, p.time_s)) /
                             static_cast<double>(p.peak_bytes);
        worst = std::max(worst, ratio);
        CHECK(ratio <= 1.02);
      }
    }
  }
  CHECK(loose > 0);  // the case this checks arose
  WARN("default tables against exact ones: worst memory ratio " << worst);
}

TEST_CASE("a pruning tolerance keeps the fastest plan, a bad one is an error", "[search][dp]") {
  // Tolerance pruning drops a label only for one at most as slow, so the fastest time is exact;
  // any ε ≥ 0 works (a huge one keeps about one label per state without overflowing).
  const Graph g =
      build_gpt({.name = "tiny", .layers = 2, .hidden = 32, .heads = 4, .vocab = 64, .seq = 16},
                {.batch = 4});
  const DeviceMesh mesh = parse_mesh("x=2");
  const HardwareProfile hw = find_hardware_profile("h100");
  for (const SearchSpace space : {SearchSpace::standard, SearchSpace::full}) {
    const DpOptions exact{.micro_batches = 2, .space = space};
    const DpResult all = dp_frontier(g, mesh, hw, exact);
    for (const double eps : {0.02, 1.0, 1e12}) {
      INFO("tolerance " << eps << ", " << to_string_view(space));
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
  }
  for (const double bad :
       {-0.5, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    DpOptions o{.micro_batches = 2};
    o.tolerance = bad;
    REQUIRE_THROWS_WITH(dp_frontier(g, mesh, hw, o),
                        Catch::Contains("the pruning tolerance must be a finite number"));
  }
}

namespace {

// The DP's frontier equals brute force's for graph g on x=2 and x=4, in both spaces, at ZeRO 0
// and 3, checkpointing searched.
void require_dp_matches_brute_force_1d(const Graph& g) {
  const HardwareProfile hw = find_hardware_profile("h100");
  for (const char* mesh_text : {"x=2", "x=4"}) {
    for (const SearchSpace space : {SearchSpace::standard, SearchSpace::full}) {
      for (const int zero : {0, 3}) {
        INFO(mesh_text << ", " << to_string_view(space) << " space, ZeRO " << zero);
        const DeviceMesh mesh = parse_mesh(mesh_text);
        const DpOptions o{
            .zero_stage = zero, .checkpoint = CheckpointChoice::search, .space = space};
        const DpResult dp = dp_frontier(g, mesh, hw, o);
        REQUIRE(!dp.frontier.empty());
        require_equal(dp.frontier, brute_force_frontier(g, mesh, hw, o));
      }
    }
  }
}

// A (4, 2, 8) input through a gelu prefix into one transformer block whose residual branch
// `branch` builds from the block input.
template <class Branch>
Graph one_block(Branch branch) {
  Graph g{};
  const TensorId in = g.input({{"batch", 4}, {"seq", 2}, {"hidden", 8}}, DType::bf16);
  g.begin_group("prefix", GroupKind::layer);
  const TensorId x = g.gelu(in);
  g.end_group();
  g.begin_group("block.0", GroupKind::transformer_block);
  g.add(x, branch(g, x));
  g.end_group();
  return g;
}

}  // namespace

TEST_CASE("the DP equals its brute force on a tiny Llama block (RMSNorm, rotary GQA, SiLU product)",
          "[search][dp][llama]") {
  // One pre-norm block with the Llama ops: rmsnorm, a q projection viewed as (B, n, g, S, d),
  // rotary, the grouped merge, silu_mul with the norm output, and the residual add.
  const Graph g = one_block([](Graph& b, TensorId x) {
    const TensorId n = rms_norm(b, x);
    const TensorId q = linear(b, n, {.out_name = "q", .out_features = 8, .bias = Bias::none});
    const TensorId r = b.rotary(b.split_groups(q, 2, 2), 10000.0);  // (4, 2, 2, 2, 2)
    return b.silu_mul(b.merge_heads(r, "hidden"), n);
  });
  require_dp_matches_brute_force_1d(g);  // 2x2 exceeds the brute force's plan limit
}

TEST_CASE("the DP equals its brute force on Llama's fused gate/up SwiGLU MLP",
          "[search][dp][llama]") {
  // swiglu as build_llama writes it: one gate/up projection with interleaved columns, gate and up
  // split_heads views of it (F heads of one column), silu_mul on them, the merge and the down
  // projection, under the residual add.
  const Graph g =
      one_block([](Graph& b, TensorId x) { return swiglu(b, rms_norm(b, x), {.ffn_hidden = 8}); });
  require_dp_matches_brute_force_1d(g);
}

TEST_CASE("an untied embedding does not split the vocabulary in the standard space, a tied one may",
          "[search][dp][llama]") {
  // Rule 4 (search/space.hpp): a gather whose table no other op reads keeps the table's rows
  // unsplit in the standard space; the full space and a tied table (read again by the LM head)
  // keep the vocabulary split. The DP equals the brute force, which states the rule again, on an
  // untied embedding feeding a chain of two blocks.
  auto embedded = [](bool tied) {
    Graph g{};
    const TensorId ids = g.input({{"batch", 4}, {"seq", 2}}, DType::fp32, TensorKind::index);
    g.begin_group("embedding", GroupKind::embedding);
    const TensorId table = g.parameter({{"vocab", 8}, {"hidden", 8}}, DType::bf16);
    TensorId x = g.gather(table, ids);
    g.end_group();
    for (int i = 0; i < 2; ++i) {
      g.begin_group(LayerName("block.").append(i), GroupKind::transformer_block);
      x = g.add(x, linear(g, rms_norm(g, x),
                          {.out_name = "hidden", .out_features = 8, .bias = Bias::none}));
      g.end_group();
    }
    if (tied) {
      g.begin_group("lm_head", GroupKind::head);
      x = lm_head(g, x, table, LmHeadWeights::tied, 8);
      g.end_group();
    }
    return g;
  };
  const HardwareProfile hw = find_hardware_profile("h100");
  const DeviceMesh mesh = parse_mesh("x=2");
  const char* vocab_split = "embedding.gather0=R,R,R|P(x)";
  for (const SearchSpace space : {SearchSpace::standard, SearchSpace::full}) {
    for (const bool tied : {false, true}) {
      if (space == SearchSpace::full && tied) continue;  // the full space's brute force: 40 s more
      INFO(to_string_view(space) << " space, " << (tied ? "tied" : "untied"));
      const Graph g = embedded(tied);
      const DpOptions o{.checkpoint = CheckpointChoice::search, .space = space};
      const StrategyFilter pin = pin_filter(g, mesh, {parse_pin(vocab_split)});
      if (space == SearchSpace::standard && !tied) {
        REQUIRE_THROWS_WITH(
            dp_frontier(g, mesh, hw, o, pin),
            Catch::Contains("embedding.gather0") &&
                Catch::Contains("an untied embedding does not split the vocabulary"));
        REQUIRE_THROWS_WITH(brute_force_frontier(g, mesh, hw, o, pin),
                            Catch::Contains("has no strategy"));
      } else {
        const DpResult pinned = dp_frontier(g, mesh, hw, o, pin);
        REQUIRE(!pinned.frontier.empty());
        require_equal(pinned.frontier, brute_force_frontier(g, mesh, hw, o, pin));
      }
      const DpResult dp = dp_frontier(g, mesh, hw, o);
      require_equal(dp.frontier, brute_force_frontier(g, mesh, hw, o));
    }
  }
}

TEST_CASE("the DP equals its brute force on Llama's fused-QKV grouped-query attention",
          "[search][dp][llama]") {
  // grouped_query_attention as build_llama writes it: one QKV projection in per-group order, q
  // viewed with split_groups over 4 slots per group (2 query heads, a key and a value head), k
  // and v with split_heads, rotary q and k, the grouped einsums, the merge and the output
  // projection, under the residual add; fused attention in both spaces at ZeRO 0 and 3, the
  // materialized form (three more ops, about 20 s of brute force each) in the standard space at
  // ZeRO 0.
  for (const AttentionKind kind : {AttentionKind::materialized, AttentionKind::fused}) {
    Graph g{};
    const TensorId in = g.input({{"batch", 4}, {"seq", 2}, {"hidden", 8}}, DType::bf16);
    g.begin_group("prefix", GroupKind::layer);
    TensorId x = g.gelu(in);
    g.end_group();
    g.begin_group("block.0", GroupKind::transformer_block);
    x = g.add(x, grouped_query_attention(g, x, {.heads = 4, .kv_heads = 2, .kind = kind}));
    g.end_group();
    const HardwareProfile hw = find_hardware_profile("h100");
    for (const SearchSpace space : {SearchSpace::standard, SearchSpace::full}) {
      for (const int zero : {0, 3}) {
        if (kind == AttentionKind::materialized && (space == SearchSpace::full || zero == 3))
          continue;
        INFO("x=2, " << to_string_view(space) << " space, ZeRO " << zero << ", attention "
                     << (kind == AttentionKind::fused ? "fused" : "materialized"));
        const DeviceMesh mesh = parse_mesh("x=2");
        const DpOptions o{
            .zero_stage = zero, .checkpoint = CheckpointChoice::search, .space = space};
        const DpResult dp = dp_frontier(g, mesh, hw, o);
        REQUIRE(!dp.frontier.empty());
        require_equal(dp.frontier, brute_force_frontier(g, mesh, hw, o));
      }
    }
  }
}
