// The joint search's outer loops, pins, Plan JSON and the budget error, on a tiny GPT over two
// devices (meshes {x:2}); every predicted figure is re-derived by evaluate_point.
#include <algorithm>
#include <carto/cost.hpp>
#include <carto/layers.hpp>
#include <carto/search.hpp>
#include <carto/spec.hpp>
#include <catch2/catch.hpp>
#include <limits>

#include "support/small_graphs.hpp"

using namespace carto;

namespace {
const GptConfig kTiny{
    .name = "tiny", .layers = 2, .hidden = 32, .heads = 4, .vocab = 64, .seq = 16};
Graph tiny_graph(std::int64_t micro_batch) { return build_gpt(kTiny, {.batch = micro_batch}); }

// Two MLP blocks (B=16/m, H=8, F=16) per micro-batch of m, for the outer-loop tests.
Graph mlp_blocks(std::int64_t b) {
  return testing::make_graph(b, 8, 16, testing::BlockShape::mlp, 2);
}
constexpr std::int64_t kMlpBatch = 16;

HardwareProfile cluster(std::int64_t per_node, std::int64_t devices) {
  HardwareProfile hw = find_hardware_profile("h100");
  hw.links.front().devices = per_node;
  return hardware_for_devices(hw, devices);
}

struct Point {
  double time_s;
  std::int64_t peak_bytes;
};

// What search() did before its outer reductions: the DP for every mesh of 8 devices (1-2 axes),
// every ZeRO stage and every micro-batch count of `options`, in its search space, frontiers
// merged.
std::vector<Point> full_outer_loop(const HardwareProfile& hw, const SearchOptions& options) {
  std::vector<Point> points;
  for (const std::int64_t m : options.micro_batches) {
    const Graph g = mlp_blocks(kMlpBatch / m);
    for (const DeviceMesh& mesh : mesh_candidates(8, 2)) {
      for (const int z : {0, 1, 2, 3}) {
        const DpOptions dp{.zero_stage = z, .micro_batches = m, .space = options.space};
        for (const DpPoint& p : dp_frontier(g, mesh, hw, dp).frontier)
          points.push_back({p.time_s, p.peak_bytes});
      }
    }
  }
  std::sort(points.begin(), points.end(), [](const Point& a, const Point& b) {
    return a.time_s != b.time_s ? a.time_s < b.time_s : a.peak_bytes < b.peak_bytes;
  });
  std::vector<Point> reference;
  for (const Point& p : points) {
    if (reference.empty() || p.peak_bytes < reference.back().peak_bytes) reference.push_back(p);
  }
  detail::drop_time_ties(reference);
  return reference;
}

void require_same_frontier(const Plan& plan, const std::vector<Point>& reference) {
  REQUIRE(plan.frontier.size() == reference.size());
  for (std::size_t i = 0; i < reference.size(); ++i) {
    INFO("frontier point " << i);
    REQUIRE(plan.frontier[i].time_s == Approx(reference[i].time_s).epsilon(1e-9));
    REQUIRE(plan.frontier[i].peak_bytes == reference[i].peak_bytes);
  }
}
}  // namespace

TEST_CASE("mesh candidates are every factorisation into 1-3 axes", "[search][plan]") {
  // 12 = 12 | 2·6, 3·4, 4·3, 6·2 | 2·2·3, 2·3·2, 3·2·2: 1 + 4 + 3 ordered factorisations.
  const auto meshes = mesh_candidates(12);
  REQUIRE(meshes.size() == 8);
  for (const DeviceMesh& m : meshes) REQUIRE(m.num_devices() == 12);
  REQUIRE(mesh_candidates(1).size() == 1);
  REQUIRE(mesh_candidates(8).size() == 1 + 2 + 1);  // 8 | 2·4, 4·2 | 2·2·2
}

TEST_CASE("search picks the fastest plan under the budget and its figures hold", "[search][plan]") {
  const HardwareProfile hw = find_hardware_profile("h100");
  SearchOptions options;
  options.micro_batches = {1, 2};
  options.zero_stages = {0, 3};
  options.time_bounds = false;  // the whole frontier, to pick budgets from
  const Plan unlimited = search(tiny_graph, "tiny", 8, 2, hw, options);
  options.time_bounds = true;
  REQUIRE(unlimited.frontier.size() >= 2);
  REQUIRE(unlimited.step_time_s == Approx(unlimited.frontier.front().time_s).epsilon(1e-9));
  // A budget between the frontier's extremes: the plan fits and is the fastest that fits.
  const std::int64_t budget =
      (unlimited.frontier.front().peak_bytes + unlimited.frontier.back().peak_bytes) / 2;
  options.memory_budget = budget;
  const Plan fitted = search(tiny_graph, "tiny", 8, 2, hw, options);
  REQUIRE(fitted.peak_memory_bytes <= budget);
  double best = -1;
  for (const FrontierPoint& f : unlimited.frontier) {
    if (f.peak_bytes <= budget) {
      best = f.time_s;
      break;
    }
  }
  REQUIRE(fitted.step_time_s == Approx(best).epsilon(1e-9));
  // Re-derive its cost from the choices alone.
  const Graph g = tiny_graph(8 / fitted.micro_batches);
  std::vector<bool> ckpt(g.groups().size(), false);
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    if (fitted.ops[k].checkpointed) ckpt[static_cast<std::size_t>(g.ops()[k].group)] = true;
  }
  const PointCost again = evaluate_point(
      g, fitted.mesh, hw, {.zero_stage = fitted.zero_stage, .micro_batches = fitted.micro_batches},
      fitted.strategy, ckpt);
  REQUIRE(again.peak_bytes == fitted.peak_memory_bytes);
  REQUIRE(again.time_s == Approx(fitted.step_time_s).epsilon(1e-9));
  std::int64_t parts = 0;
  for (const auto& [name, bytes] : fitted.memory_breakdown) parts += bytes;
  REQUIRE(parts == fitted.peak_memory_bytes);
  double seconds = 0;
  for (const auto& [name, s] : fitted.time_breakdown) seconds += s;
  REQUIRE(seconds == Approx(fitted.step_time_s).epsilon(1e-9));
}

TEST_CASE("an infeasible budget states the least memory any plan needs", "[search][plan]") {
  const HardwareProfile hw = find_hardware_profile("h100");
  SearchOptions options;
  const Plan any = search(tiny_graph, "tiny", 4, 2, hw, options);
  const std::int64_t least = any.frontier.back().peak_bytes;
  options.memory_budget = least - 1;
  REQUIRE_THROWS_WITH(search(tiny_graph, "tiny", 4, 2, hw, options),
                      Catch::Contains("no plan fits the memory budget") &&
                          Catch::Contains("the least memory any plan needs is") &&
                          Catch::Contains("(" + std::to_string(least) + " bytes): mesh {x:2}") &&
                          Catch::Contains("micro-batch counts tried: 1; more micro-batches") &&
                          Catch::Contains("try 1,2,4 (SearchOptions::micro_batches"));
  // Every count that divides the batch of 4 tried down to one sequence each: no hint.
  options.micro_batches = {1, 2, 4};
  options.memory_budget = 1;
  REQUIRE_THROWS_WITH(search(tiny_graph, "tiny", 4, 2, hw, options),
                      Catch::Contains("the least memory any plan needs is") &&
                          !Catch::Contains("micro-batch counts tried"));
  options.micro_batches = {1};
  options.memory_budget = least;
  REQUIRE(search(tiny_graph, "tiny", 4, 2, hw, options).peak_memory_bytes == least);
}

TEST_CASE("an infeasible budget with long sequences suggests fused attention", "[search][plan]") {
  // Sequence 256 on hidden 16: one block's attention probabilities (batch 2, 4 heads, 256 x 256
  // fp32 = 2 MiB, halved by any split over the 2 devices) outweigh everything else the least
  // plan holds. The hint names their size in that plan; with fused attention there are none.
  const GptConfig config{
      .name = "long", .layers = 2, .hidden = 16, .heads = 4, .vocab = 32, .seq = 256};
  const HardwareProfile hw = find_hardware_profile("h100");
  SearchOptions options{.memory_budget = 1};
  for (const AttentionKind attention : {AttentionKind::materialized, AttentionKind::fused}) {
    INFO(to_string_view(attention));
    const auto graph = [&](std::int64_t b) {
      return build_gpt(config, {.batch = b, .attention = attention});
    };
    std::string message;
    try {
      (void)search(graph, config.name, 2, 2, hw, options);
    } catch (const Error& e) {
      message = e.what();
    }
    REQUIRE_THAT(message, Catch::Contains("the least memory any plan needs is"));
    if (attention == AttentionKind::materialized) {
      CHECK_THAT(message, Catch::Contains("one block's attention probabilities (materialized "
                                          "attention) take ") &&
                              Catch::Contains("--attention fused"));
      // 2 sequences x 4 heads x 256 x 256 x 2 bytes (bf16) = 1 MiB per block, split over the 2
      // devices or not.
      CHECK_THAT(message, Catch::Contains("take 1.00 MiB") || Catch::Contains("take 512.00 KiB"));
    } else {
      CHECK_THAT(message, !Catch::Contains("attention probabilities"));
    }
  }
  // The tiny model's scores (sequence 16) are no quarter of its least plan: no hint.
  options.memory_budget = 1;
  REQUIRE_THROWS_WITH(search(tiny_graph, "tiny", 4, 2, hw, options),
                      !Catch::Contains("attention probabilities"));
}

TEST_CASE("SearchOptions::progress reports every DP the search runs", "[search][plan]") {
  const HardwareProfile hw = find_hardware_profile("h100");
  std::vector<SearchEvent> events;
  SearchOptions options{.micro_batches = {1, 2}};
  options.progress = [&](const SearchEvent& e) { events.push_back(e); };
  const Plan p = search(tiny_graph, "tiny", 4, 4, hw, options);
  REQUIRE(!events.empty());
  std::int64_t frontiers = 0;
  double elapsed = 0;
  for (const SearchEvent& e : events) {
    INFO(to_string_view(e.kind) << " " << e.mesh << " ZeRO " << e.zero_stage);
    CHECK(e.mesh.num_devices() == 4);
    CHECK((e.micro_batches == 1 || e.micro_batches == 2));
    CHECK(e.seconds >= 0);
    CHECK(e.elapsed_s >= elapsed);  // in the order they ran
    elapsed = e.elapsed_s;
    CHECK(e.labels > 0);
    if (e.kind == SearchEvent::Kind::frontier) ++frontiers;
    if (e.kind == SearchEvent::Kind::least_time) {
      CHECK(e.least_time_s > 0);
      CHECK(e.points == 1);
    }
  }
  // One budgeted DP per configuration searched; the plan's is among them.
  CHECK(frontiers == p.configurations_searched);
  CHECK(std::any_of(events.begin(), events.end(), [&](const SearchEvent& e) {
    return e.kind == SearchEvent::Kind::frontier && e.mesh == p.mesh &&
           e.micro_batches == p.micro_batches && e.points > 0;
  }));
  // With time bounds, every configuration's least time was reported first.
  CHECK(std::any_of(events.begin(), events.end(),
                    [](const SearchEvent& e) { return e.kind == SearchEvent::Kind::least_time; }));
  // A budget none fits: the least-memory DPs report the least peak the error names.
  events.clear();
  options.memory_budget = 1;
  std::string message;
  try {
    (void)search(tiny_graph, "tiny", 4, 4, hw, options);
  } catch (const Error& e) {
    message = e.what();
  }
  std::int64_t least = std::numeric_limits<std::int64_t>::max();
  for (const SearchEvent& e : events) {
    if (e.kind == SearchEvent::Kind::least_memory) least = std::min(least, e.least_bytes);
  }
  REQUIRE(least < std::numeric_limits<std::int64_t>::max());
  CHECK_THAT(message, Catch::Contains("(" + std::to_string(least) + " bytes)"));

  // A budget that one micro-batch misses and more meet: once a budgeted DP found nothing, a
  // configuration is checked by a least-memory DP first, unless the one of its mesh and stage
  // with fewer micro-batches had plans that fit. The plan is the one without the skips.
  options.micro_batches = {1, 2, 4};
  options.memory_budget = std::numeric_limits<std::int64_t>::max();
  options.progress = {};
  std::int64_t least_one = 0, least_two = 0;
  for (const std::int64_t m : {1, 2}) {
    SearchOptions o = options;
    o.micro_batches = {m};
    o.time_bounds = false;
    (m == 1 ? least_one : least_two) =
        search(tiny_graph, "tiny", 4, 4, hw, o).frontier.back().peak_bytes;
  }
  REQUIRE(least_two < least_one);
  options.memory_budget = (least_one + least_two) / 2;
  options.time_bounds = false;  // every configuration, in the order listed: one micro-batch first
  // The reference: each micro-batch count searched alone (no sibling, no skip).
  double reference = std::numeric_limits<double>::infinity();
  for (const std::int64_t m : {1, 2, 4}) {
    SearchOptions o = options;
    o.micro_batches = {m};
    try {
      reference = std::min(reference, search(tiny_graph, "tiny", 4, 4, hw, o).step_time_s);
    } catch (const Error&) {
      CHECK(m == 1);  // one micro-batch misses the budget
    }
  }
  events.clear();
  options.progress = [&](const SearchEvent& e) { events.push_back(e); };
  const Plan fitted = search(tiny_graph, "tiny", 4, 4, hw, options);
  CHECK(fitted.step_time_s == Approx(reference).epsilon(1e-12));
  CHECK(fitted.micro_batches > 1);
  bool skipped = false, empty_seen = false;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const SearchEvent& e = events[i];
    if (e.kind != SearchEvent::Kind::frontier) continue;
    const bool checked = i > 0 && events[i - 1].kind == SearchEvent::Kind::least_memory &&
                         events[i - 1].mesh == e.mesh && events[i - 1].zero_stage == e.zero_stage &&
                         events[i - 1].micro_batches == e.micro_batches;
    const bool fewer_fit = std::any_of(
        events.begin(), events.begin() + static_cast<std::ptrdiff_t>(i), [&](const SearchEvent& f) {
          return f.kind == SearchEvent::Kind::frontier && f.points > 0 && f.mesh == e.mesh &&
                 f.zero_stage == e.zero_stage && f.micro_batches < e.micro_batches;
        });
    if (empty_seen) CHECK(checked == !fewer_fit);  // checked exactly when no sibling fits
    if (empty_seen && fewer_fit) skipped = true;
    if (e.points == 0) empty_seen = true;
  }
  CHECK(empty_seen);
  CHECK(skipped);
}

TEST_CASE("pins fix an op's output spec, bad pins name themselves", "[search][plan]") {
  const HardwareProfile hw = find_hardware_profile("h100");
  SearchOptions options;
  options.pins = {parse_pin("block.*.einsum0=R,R,S(x)")};  // column-parallel QKV in every block
  const Plan p = search(tiny_graph, "tiny", 4, 2, hw, options);
  for (const PlanOp& op : p.ops) {
    if (op.name.ends_with(".einsum0") && op.name.starts_with("block."))
      REQUIRE(op.output_spec == "R,R,S(x)");
  }
  options.pins = {parse_pin("block.0.nothing=R,R,R")};
  REQUIRE_THROWS_WITH(search(tiny_graph, "tiny", 4, 2, hw, options),
                      Catch::Contains("pin 'block.0.nothing=R,R,R' names no op"));
  options.pins = {parse_pin("block.0.einsum0=R,R,S(q)")};
  REQUIRE_THROWS_WITH(search(tiny_graph, "tiny", 4, 2, hw, options),
                      Catch::Contains("leaves op block.0.einsum0 (einsum"));
  REQUIRE_THROWS_WITH(parse_pin("block.0.einsum0"), Catch::Contains("is not OP=SPEC"));
}

TEST_CASE("SearchOptions::meshes fixes the logical mesh", "[search][plan]") {
  const HardwareProfile hw = find_hardware_profile("h100");
  SearchOptions options;
  options.meshes = {parse_mesh("dp=2")};
  const Plan p = search(tiny_graph, "tiny", 4, 2, hw, options);
  REQUIRE(p.mesh == parse_mesh("dp=2"));
  options.meshes = {parse_mesh("dp=4")};
  REQUIRE_THROWS_WITH(search(tiny_graph, "tiny", 4, 2, hw, options),
                      Catch::Contains("mesh {dp:4} of 4 devices") &&
                          Catch::Contains("the search is for 2 devices"));
}

TEST_CASE("skipping ZeRO stage 0 and equivalent meshes loses no frontier point", "[search][plan]") {
  // A node per device: every axis of 8 devices crosses the network, so x=2,y=4 and x=4,y=2 are
  // one cost class; search() runs one of them, and of ZeRO stages 0-1 only stage 1. The
  // reference runs the DP for every mesh, stage and micro-batch count and merges the frontiers,
  // as search() did before these reductions.
  auto same_class = [](const char* a, const char* b, const HardwareProfile& hw) {
    return detail::mesh_cost_class(parse_mesh(a), hw) == detail::mesh_cost_class(parse_mesh(b), hw);
  };
  const HardwareProfile hw = cluster(1, 8);
  REQUIRE(same_class("x=2,y=4", "x=4,y=2", hw));
  REQUIRE_FALSE(same_class("x=2,y=4", "x=8", hw));
  // Nodes of two: y and x on the network, z in the node; renaming x and y maps one onto the other.
  REQUIRE(same_class("x=4,y=2,z=2", "x=2,y=4,z=2", cluster(2, 16)));
  REQUIRE_FALSE(same_class("x=4,y=2,z=2", "x=2,y=2,z=4", cluster(2, 16)));
  REQUIRE(detail::zero_stages_to_run({0, 1, 2, 3}) == std::vector<int>{1, 2, 3});
  REQUIRE(detail::zero_stages_to_run({0, 1}) == std::vector<int>{1});
  REQUIRE(detail::zero_stages_to_run({3, 2, 0}) == std::vector<int>{0, 2, 3});
  REQUIRE(detail::zero_stages_to_run({3}) == std::vector<int>{3});

  for (const SearchSpace space : {SearchSpace::standard, SearchSpace::full}) {
    INFO(to_string_view(space) << " space");
    SearchOptions options;
    options.micro_batches = {1, 2};
    options.max_mesh_axes = 2;
    options.space = space;
    options.time_bounds = false;  // every configuration: the whole frontier
    const std::vector<Point> reference = full_outer_loop(hw, options);
    const std::int64_t batch = kMlpBatch;
    auto blocks = mlp_blocks;
    require_same_frontier(search(blocks, "blocks", batch, 8, hw, options), reference);
    // Under budgets across the frontier: the fastest plan that fits, reported under the lowest
    // stage at which it fits and is as fast.
    for (std::size_t i = 0; i < reference.size();
         i += std::max<std::size_t>(1, reference.size() / 5)) {
      options.memory_budget = reference[i].peak_bytes;
      const Plan p = search(blocks, "blocks", batch, 8, hw, options);
      REQUIRE(p.step_time_s == Approx(reference[i].time_s).epsilon(1e-9));
      REQUIRE(p.peak_memory_bytes <= options.memory_budget);
      const Graph g = blocks(batch / p.micro_batches);
      std::vector<bool> ckpt(g.groups().size(), false);
      for (std::size_t k = 0; k < g.num_ops(); ++k) {
        if (p.ops[k].checkpointed) ckpt[static_cast<std::size_t>(g.ops()[k].group)] = true;
      }
      for (int z = 0; z < p.zero_stage; ++z) {
        const PointCost lower = evaluate_point(
            g, p.mesh, hw, {.zero_stage = z, .micro_batches = p.micro_batches}, p.strategy, ckpt);
        INFO("plan at ZeRO " << p.zero_stage << ", priced at " << z);
        // Below stage 3 a lower stage is never faster (AdamW on more elements); below a stage-3
        // plan it is (no gathers) but does not fit.
        if (p.zero_stage <= 2) REQUIRE(lower.time_s >= p.step_time_s * (1 - 1e-9));
        REQUIRE((lower.peak_bytes > options.memory_budget ||
                 lower.time_s > p.step_time_s * (1 + 1e-9)));
      }
    }
  }
}

TEST_CASE("time bounds skip configurations and keep the fastest plan that fits", "[search][plan]") {
  // A configuration is skipped when its least time (memory ignored) is no less than the best
  // plan found so far: the best plan under any budget is the one every configuration gives.
  // Under every set of ZeRO stages: stage 0 runs AdamW on more elements than stages 1-2, so its
  // least time bounds neither theirs nor stage 3's.
  const HardwareProfile hw = cluster(2, 8);
  std::int64_t skipped = 0;
  for (const std::vector<int>& stages :
       {std::vector<int>{0, 1, 2, 3}, {0, 2}, {0, 3}, {0, 2, 3}, {1, 3}}) {
    INFO("ZeRO stages " << stages.front() << ".." << stages.back() << " (" << stages.size()
                        << " of them)");
    SearchOptions all;
    all.micro_batches = {1, 2, 4};
    all.max_mesh_axes = 3;
    all.zero_stages = stages;
    all.time_bounds = false;
    const Plan every = search(mlp_blocks, "blocks", kMlpBatch, 8, hw, all);
    REQUIRE(every.configurations_searched == every.configurations);
    SearchOptions bounded = all;
    bounded.time_bounds = true;
    for (std::size_t i = 0; i < every.frontier.size();
         i += std::max<std::size_t>(1, every.frontier.size() / 6)) {
      INFO("budget " << every.frontier[i].peak_bytes);
      all.memory_budget = bounded.memory_budget = every.frontier[i].peak_bytes;
      const Plan reference = search(mlp_blocks, "blocks", kMlpBatch, 8, hw, all);
      const Plan p = search(mlp_blocks, "blocks", kMlpBatch, 8, hw, bounded);
      REQUIRE(p.step_time_s == Approx(reference.step_time_s).epsilon(1e-9));
      REQUIRE(p.step_time_s == Approx(every.frontier[i].time_s).epsilon(1e-9));
      REQUIRE(p.peak_memory_bytes <= bounded.memory_budget);
      REQUIRE(p.configurations == reference.configurations);
      skipped += p.configurations - p.configurations_searched;
      // What it reports fits, starts with the plan returned, and is matched or beaten by the
      // whole frontier of what fits (a configuration skipped may hold a point that beats a
      // slower one).
      REQUIRE(p.frontier.front().time_s == Approx(p.step_time_s).epsilon(1e-9));
      for (const FrontierPoint& f : p.frontier) {
        REQUIRE(f.peak_bytes <= bounded.memory_budget);
        REQUIRE(std::any_of(
            reference.frontier.begin(), reference.frontier.end(), [&](const FrontierPoint& q) {
              return q.time_s <= f.time_s * (1 + 1e-9) && q.peak_bytes <= f.peak_bytes;
            }));
      }
    }
  }
  REQUIRE(skipped > 0);  // the bounds really skip configurations
  // A GPT whose AdamW time tells stage 0 from stage 2 (carto-plan --zero 0,2 once returned the
  // stage-0 plan: stage 2 had been given stage 0's least time as its bound and was skipped).
  const HardwareProfile h100 = find_hardware_profile("h100");
  const GptConfig gpt{
      .name = "gpt", .layers = 2, .hidden = 256, .heads = 8, .vocab = 1024, .seq = 128};
  auto gpt_graph = [&](std::int64_t b) { return build_gpt(gpt, {.batch = b}); };
  for (const std::vector<int>& stages : {std::vector<int>{0, 2}, {0, 3}}) {
    INFO("ZeRO stages " << stages.front() << " and " << stages.back());
    SearchOptions options;
    options.max_mesh_axes = 1;
    options.zero_stages = stages;
    options.time_bounds = false;
    const Plan reference = search(gpt_graph, "gpt", 8, 8, h100, options);
    options.time_bounds = true;
    const Plan p = search(gpt_graph, "gpt", 8, 8, h100, options);
    REQUIRE(p.step_time_s == Approx(reference.step_time_s).epsilon(1e-9));
    REQUIRE(p.zero_stage == reference.zero_stage);
  }
}

TEST_CASE("the standard space keeps axes in mesh order and is covered by the full space",
          "[search][plan]") {
  const HardwareProfile hw = cluster(1, 8);
  // x=2,y=4 and x=4,y=2 map onto each other only by swapping the axes' order: in the standard
  // space (mesh order) they are two cost classes.
  REQUIRE(detail::mesh_cost_class(parse_mesh("x=2,y=4"), hw, true) !=
          detail::mesh_cost_class(parse_mesh("x=4,y=2"), hw, true));
  SearchOptions options;
  options.micro_batches = {1, 2};
  options.max_mesh_axes = 2;
  const Plan standard = search(mlp_blocks, "blocks", kMlpBatch, 8, hw, options);
  REQUIRE(standard.space == SearchSpace::standard);
  const Graph g = mlp_blocks(kMlpBatch / standard.micro_batches);
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const std::vector<Strategy> all =
        enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, standard.mesh);
    REQUIRE(in_mesh_order(all[standard.strategy[k]], standard.mesh));
  }
  // A smaller space: every point is matched or beaten by the full space's frontier.
  options.space = SearchSpace::full;
  const Plan full = search(mlp_blocks, "blocks", kMlpBatch, 8, hw, options);
  REQUIRE(full.space == SearchSpace::full);
  for (const FrontierPoint& p : standard.frontier) {
    const bool covered =
        std::any_of(full.frontier.begin(), full.frontier.end(), [&](const FrontierPoint& q) {
          return q.time_s <= p.time_s * (1 + 1e-9) && q.peak_bytes <= p.peak_bytes;
        });
    REQUIRE(covered);
  }
  // A pin that asks for the other order leaves its op without a strategy: an error naming it.
  options.space = SearchSpace::standard;
  options.meshes = {parse_mesh("x=2,y=4")};
  options.pins = {parse_pin("block.0.einsum0=S(y,x),R")};
  REQUIRE_THROWS_WITH(
      search(mlp_blocks, "blocks", kMlpBatch, 8, hw, options),
      Catch::Contains("has no strategy left") && Catch::Contains("a dim's axes in mesh order"));
}

TEST_CASE("plans round-trip through JSON, wrong files name the field", "[search][plan]") {
  const HardwareProfile hw = find_hardware_profile("h100");
  SearchOptions options;
  options.micro_batches = {1, 2};
  const Plan p = search(tiny_graph, "tiny", 4, 2, hw, options);
  const Graph g = tiny_graph(4 / p.micro_batches);
  const Json j = to_json(p);
  const Plan back = plan_from_json(Json::parse(j.dump(2)), g, &p.mesh);
  REQUIRE(back == p);

  // Another model, another mesh, a missing field, a wrong type.
  const Graph other =
      build_gpt({.name = "other", .layers = 3, .hidden = 32, .heads = 4, .vocab = 64, .seq = 16},
                {.batch = 4 / p.micro_batches});
  REQUIRE_THROWS_WITH(
      plan_from_json(j, other),
      Catch::Contains("field 'fingerprint'") && Catch::Contains("made for another model ('tiny')"));
  // The same layers with another batch: the shape fingerprint differs.
  const Graph bigger = tiny_graph(8 / p.micro_batches);
  REQUIRE(bigger.num_ops() == g.num_ops());
  REQUIRE_THROWS_WITH(plan_from_json(j, bigger), Catch::Contains("field 'fingerprint.shapes'") &&
                                                     Catch::Contains("search again"));
  const DeviceMesh four = parse_mesh("x=4");
  REQUIRE_THROWS_WITH(plan_from_json(j, g, &four), Catch::Contains("field 'mesh' is {x:2}"));
  Json missing = j;
  Json::Object& obj = missing.as_object();
  obj.erase(std::remove_if(obj.begin(), obj.end(),
                           [](const auto& kv) { return kv.first == "zero_stage"; }),
            obj.end());
  REQUIRE_THROWS_WITH(plan_from_json(missing, g), Catch::Contains("field 'zero_stage' is missing"));
  Json wrong = j;
  wrong["micro_batches"] = "two";
  REQUIRE_THROWS_WITH(plan_from_json(wrong, g),
                      Catch::Contains("field 'micro_batches' has the wrong type"));
  Json format = j;
  format["format"] = "carto-plan/0";
  REQUIRE_THROWS_WITH(plan_from_json(format, g),
                      Catch::Contains("field 'format' is 'carto-plan/0'"));
}

TEST_CASE("a plan records its precision and gradient reduction, and prices the reduction's bytes",
          "[search][plan]") {
  const HardwareProfile hw = find_hardware_profile("h100");
  const Graph g = tiny_graph(4);
  const DeviceMesh mesh = parse_mesh("x=2");
  // Every strategy with a gradient all-reduce moves the gradient's elements at the reduction's
  // dtype: bf16 by default under mixed precision, fp32 when asked (twice the bytes).
  std::int64_t syncs = 0;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const OpId op{static_cast<std::int32_t>(k)};
    const auto bf16 = enumerate_strategies(g, op, mesh, {.precision = Precision::mixed_bf16});
    const auto fp32 = enumerate_strategies(
        g, op, mesh, {.precision = Precision::mixed_bf16, .gradient_reduction = DType::fp32});
    REQUIRE(bf16.size() == fp32.size());
    for (std::size_t s = 0; s < bf16.size(); ++s) {
      REQUIRE(bf16[s].gradient_sync.size() == fp32[s].gradient_sync.size());
      for (std::size_t c = 0; c < bf16[s].gradient_sync.size(); ++c) {
        REQUIRE(bf16[s].gradient_sync[c].bytes > 0);
        REQUIRE(fp32[s].gradient_sync[c].bytes == 2 * bf16[s].gradient_sync[c].bytes);
        ++syncs;
      }
      REQUIRE(bf16[s].memory == fp32[s].memory);
    }
  }
  REQUIRE(syncs > 0);
  REQUIRE_THROWS_WITH(
      enumerate_strategies(g, OpId{0}, mesh,
                           {.precision = Precision::fp32, .gradient_reduction = DType::bf16}),
      Catch::Contains("reduced in fp32, not bf16"));

  // search() records both; the fp32 reduction is no faster, and the JSON keeps them.
  SearchOptions options;
  options.meshes = {mesh};
  const Plan mixed = search(tiny_graph, "tiny", 4, 2, hw, options);
  REQUIRE(mixed.precision == Precision::mixed_bf16);
  REQUIRE(mixed.gradient_reduction == DType::bf16);
  options.gradient_reduction = DType::fp32;
  const Plan wide = search(tiny_graph, "tiny", 4, 2, hw, options);
  REQUIRE(wide.gradient_reduction == DType::fp32);
  REQUIRE(wide.step_time_s >= mixed.step_time_s);
  const Graph g1 = tiny_graph(4 / wide.micro_batches);
  REQUIRE(plan_from_json(Json::parse(to_json(wide).dump()), g1) == wide);
  Json bad = to_json(wide);
  bad["gradient_reduction"] = "fp16";
  REQUIRE_THROWS_WITH(plan_from_json(bad, g1),
                      Catch::Contains("field 'gradient_reduction' is 'fp16'"));
  Json old = to_json(wide);
  Json::Object& obj = old.as_object();
  obj.erase(std::remove_if(obj.begin(), obj.end(),
                           [](const auto& kv) {
                             return kv.first == "precision" || kv.first == "gradient_reduction";
                           }),
            obj.end());
  const Plan back = plan_from_json(old, g1);
  REQUIRE(back.precision == Precision::fp32);  // files from before: trained in fp32
  REQUIRE(back.gradient_reduction == DType::fp32);
}
