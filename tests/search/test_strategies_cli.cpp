// carto-plan strategies as a user runs it: the JSON report of one GPT-3 175B block on an 8x8 mesh
// against the enumeration it prints (the closed-form count of einsum strategies), and one error
// line with exit code 2 for bad input. The binary's path comes from CMake (CARTO_PLAN_PATH).
#include <carto/util/json.hpp>
#include <catch2/catch.hpp>
#include <string>

#include "support/carto_plan_run.hpp"

using carto::Json;
using carto::testing::Run;

namespace {

Run run(const std::string& args) { return carto::testing::run_carto_plan(args); }

std::size_t lines(const std::string& s) {
  std::size_t n = 0;
  for (char c : s) n += c == '\n' ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("carto-plan strategies --json: one block of GPT-3 175B on 8x8", "[tools][search]") {
  const Run r = run("strategies --model gpt3-175b --mesh 8x8 --top 2 --json");
  INFO(r.output.substr(0, 2000));
  REQUIRE(r.code == 0);
  const Json j = Json::parse(r.output);
  REQUIRE(j.at("devices").as_int() == 64);
  const Json::Array& ops = j.at("ops").as_array();
  // A pre-LN block with materialized attention and dropout: 24 ops (2 layernorms, 6 einsums, 4
  // biases, 4 views, scale, softmax, 3 dropouts, GELU, 2 adds).
  REQUIRE(ops.size() == 24);
  std::int64_t total = 0;
  for (const Json& op : ops) {
    total += op.at("strategies").as_int();
    REQUIRE(op.at("best").as_array().size() == 2);
    const Json::Array& best = op.at("best").as_array();
    REQUIRE(best[0].at("time_s").as_double() <= best[1].at("time_s").as_double());
    if (op.at("kind").as_string() != "view") REQUIRE(best[0].at("time_s").as_double() > 0.0);
    if (op.at("kind").as_string() != "einsum") continue;
    // Batch 1: letter b cannot be split. The linears have 4 letters, 3 of them splittable
    // (s 2048, i and o multiples of 64); with m = 2 axes of 8: Σ_k C(2,k)·L(L+1)…: 1 + 2·3 + 3·4
    // = 19. The attention einsums have 5 letters, 4 splittable (heads 96, queries, keys, head_dim
    // 128): 1 + 2·4 + 4·5 = 29, less the 2 orders of both axes on the heads (96 is no multiple of
    // 64): 27.
    const std::string text = op.at("einsum").as_string();
    REQUIRE(op.at("strategies").as_int() == (text.size() == 11 ? 19 : 27));
  }
  REQUIRE(total == j.at("total_strategies").as_int());
}

TEST_CASE("carto-plan strategies: the table, and one error line with exit code 2",
          "[tools][search]") {
  const Run ok = run("strategies --model gpt3-175b --mesh dp=8,tp=8 --hardware h200 --top 1");
  REQUIRE(ok.code == 0);
  REQUIRE(ok.output.find("h200x8") != std::string::npos);
  for (const char* bad : {"strategies --model nope --mesh 8x8", "strategies --model gpt3-175b",
                          "strategies --model gpt3-175b --mesh 8x0",
                          "strategies --model gpt3-175b --mesh 8x8 --top 0",
                          "strategies --model gpt3-175b --mesh 8x8 --hardware tpu",
                          "strategies --model gpt3-175b --mesh 8x8 --bogus"}) {
    INFO(bad);
    const Run r = run(bad);
    INFO(r.output);
    REQUIRE(r.code == 2);
    REQUIRE(lines(r.output) == 1);
  }
}
