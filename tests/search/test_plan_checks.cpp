// Plan files are trusted no further than checked: every number is range-checked before it is
// converted, every strategy_index must name the strategy the op's text fields spell, and files are
// read with a bound and written atomically.
#include <unistd.h>

#include <carto/cost.hpp>
#include <carto/layers.hpp>
#include <carto/search.hpp>
#include <carto/spec.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>

using namespace carto;

namespace {
const GptConfig kTiny{
    .name = "tiny", .layers = 2, .hidden = 32, .heads = 4, .vocab = 64, .seq = 16};
Graph tiny_graph(std::int64_t micro_batch) { return build_gpt(kTiny, {.batch = micro_batch}); }
}  // namespace

TEST_CASE("a plan's numbers are range-checked and its indices must match its text",
          "[search][plan][checks]") {
  const HardwareProfile hw = find_hardware_profile("h100");
  SearchOptions options;
  options.meshes = {parse_mesh("x=2")};
  const Plan p = search(tiny_graph, "tiny", 4, 2, hw, options);
  const Graph g = tiny_graph(4 / p.micro_batches);
  const Json j = to_json(p);
  REQUIRE(plan_from_json(j, g) == p);

  // Another index of the same op: every strategy the op has but the chosen one is refused, and
  // the message names the op's field; the index after the last strategy names the count.
  StrategyCache cache(p.mesh,
                      {.precision = p.precision, .gradient_reduction = p.gradient_reduction});
  std::size_t refused = 0;
  for (std::size_t k = 0; k < p.ops.size(); ++k) {
    const std::size_t n = cache.of(g, OpId{static_cast<std::int32_t>(k)}).size();
    for (std::size_t s = 0; s < n; ++s) {
      if (s == p.strategy[k] ||
          to_string(cache.at(g, OpId{static_cast<std::int32_t>(k)}, s)) == p.ops[k].strategy) {
        continue;
      }
      Json bad = j;
      bad["ops"].as_array()[k]["strategy_index"] = static_cast<std::int64_t>(s);
      REQUIRE_THROWS_WITH(plan_from_json(bad, g),
                          Catch::Contains(detail::concat("ops[", k, "]")) &&
                              Catch::Contains("does not match its strategy_index"));
      ++refused;
    }
    Json past = j;
    past["ops"].as_array()[k]["strategy_index"] = static_cast<std::int64_t>(n);
    REQUIRE_THROWS_WITH(plan_from_json(past, g),
                        Catch::Contains(detail::concat("has ", n, " strategies")));
  }
  REQUIRE(refused > 10);

  auto with = [&](auto&& edit) {
    Json bad = j;
    edit(bad);
    return bad;
  };
  REQUIRE_THROWS_WITH(
      plan_from_json(with([](Json& b) { b["zero_stage"] = std::int64_t{4294967296}; }), g),
      Catch::Contains("field 'zero_stage' is 4294967296; it must be a whole number in [0, 3]"));
  REQUIRE_THROWS_WITH(
      plan_from_json(with([](Json& b) { b["predicted"]["peak_memory_bytes"] = std::int64_t{-5}; }),
                     g),
      Catch::Contains("field 'predicted.peak_memory_bytes' is -5"));
  REQUIRE_THROWS_WITH(
      plan_from_json(with([](Json& b) { b["predicted"]["step_time_s"] = -1.0; }), g),
      Catch::Contains("field 'predicted.step_time_s' is -1"));
  REQUIRE_THROWS_WITH(
      plan_from_json(with([](Json& b) { b["ops"].as_array()[0]["output_spec"] = "S(zz),R,R"; }), g),
      Catch::Contains("field 'ops[0].output_spec'"));
  REQUIRE_THROWS_WITH(
      plan_from_json(
          with([](Json& b) { b["ops"].as_array()[1]["strategy_index"] = std::int64_t{-1}; }), g),
      Catch::Contains("field 'ops[1].strategy_index' is -1"));
  REQUIRE_THROWS_WITH(
      plan_from_json(with([](Json& b) { b["micro_batches"] = std::int64_t{0}; }), g),
      Catch::Contains("field 'micro_batches' is 0"));
  REQUIRE_THROWS_WITH(plan_from_json(with([](Json& b) { b["tolerance"] = 1.5; }), g),
                      Catch::Contains("field 'tolerance' is 1.5"));
  REQUIRE_THROWS_WITH(Json::parse("{\"step_time_s\": 1e309}"),
                      Catch::Contains("within the range of a double"));
}

TEST_CASE("plans are saved atomically and read with a bound", "[search][plan][checks]") {
  const HardwareProfile hw = find_hardware_profile("h100");
  SearchOptions options;
  options.meshes = {parse_mesh("x=2")};
  const Plan p = search(tiny_graph, "tiny", 4, 2, hw, options);
  const Graph g = tiny_graph(4 / p.micro_batches);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("carto_plan_io_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "plan.json").string();
  save_plan(p, path);
  REQUIRE(plan_from_json(read_plan_json(path), g) == p);
  REQUIRE_THROWS_WITH(read_plan_json(dir.string()), Catch::Contains("is a directory"));
  REQUIRE_THROWS_WITH(read_plan_json("/dev/zero"), Catch::Contains("not a regular file"));
  REQUIRE_THROWS_WITH(save_plan(p, (dir / "missing" / "plan.json").string()),
                      Catch::Contains("No such file or directory"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the search's time limit: huge limits are none, bad ones are refused",
          "[search][plan][checks]") {
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(detail::search_deadline(start, 0) == std::chrono::steady_clock::time_point::max());
  REQUIRE(detail::search_deadline(start, 1e10) == std::chrono::steady_clock::time_point::max());
  REQUIRE(detail::search_deadline(start, 1e300) == std::chrono::steady_clock::time_point::max());
  REQUIRE(detail::search_deadline(start, 2.5) - start == std::chrono::milliseconds(2500));
  REQUIRE_THROWS_WITH(detail::search_deadline(start, -1), Catch::Contains("time_limit_s is -1"));
  REQUIRE_THROWS_AS(detail::search_deadline(start, std::nan("")), Error);
}
