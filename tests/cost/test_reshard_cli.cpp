// carto-plan reshard as a user runs it: the JSON report against the library and the closed form,
// and one error line with exit code 2 for bad input. The binary's path comes from CMake
// (CARTO_PLAN_PATH).
#include <array>
#include <carto/cost.hpp>
#include <carto/spec.hpp>
#include <carto/util/json.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "cost/cost_support.hpp"
#include "support/carto_plan_run.hpp"

using namespace carto;
using carto::test::close;

namespace {

using carto::testing::Run;
Run run(const std::string& args) { return carto::testing::run_carto_plan(args); }

const std::string kIssueExample =
    "reshard --shape 8,2048,12288 --from 'S(dp),R,R' --to 'R,R,S(tp)' --mesh dp=8,tp=8 "
    "--hardware h100";

}  // namespace

TEST_CASE("carto-plan reshard --json reports the steps, time and memory", "[tools][reshard]") {
  const Run r = run(kIssueExample + " --dtype bf16 --json");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const Json j = Json::parse(r.output);
  // 64 devices on 8-GPU H100 nodes: 8 nodes; dp crosses them (InfiniBand 46 GB/s, 14 µs per
  // step), tp stays in one (NVLink). Slice tp (free), then gather dp on an eighth of the tensor:
  // 7/8 · (8·2048·12288·2 / 8) / 46e9 + 7 · 14e-6 s.
  CHECK(j.at("hardware").as_string() == "h100x8");
  const Json::Array& steps = j.at("steps").as_array();
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].at("kind").as_string() == "local_slice");
  CHECK(steps[0].at("axis").as_string() == "tp");
  CHECK(steps[0].at("bytes").as_int() == 0);
  CHECK(steps[1].at("kind").as_string() == "all_gather");
  CHECK(steps[1].at("axis").as_string() == "dp");
  CHECK(steps[1].at("bytes").as_int() == 8LL * 2048 * 12288 * 2 / 8);
  CHECK(close(j.at("time_s").as_double(), 7.0 / 8 * 50331648.0 / 46e9 + 7 * 14e-6));
  // Extra memory: the sliced intermediate (full/64) plus the gathered output (full/8).
  CHECK(j.at("extra_memory_bytes").as_int() == 8LL * 2048 * 12288 * 2 / 64 + 50331648);

  // The same numbers as the library gives.
  const ReshardPlan p =
      reshard(parse_shape("8,2048,12288"), DType::bf16, parse_spec("S(dp),R,R"),
              parse_spec("R,R,S(tp)"), parse_mesh("dp=8,tp=8"), find_hardware_profile("h100x8"));
  CHECK(j.at("time_s").as_double() == p.time_s);
  CHECK(j.at("extra_memory_bytes").as_int() == p.extra_memory_bytes);
}

TEST_CASE("carto-plan reshard prints a table", "[tools][reshard]") {
  const Run r = run(kIssueExample);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("local_slice") && Catch::Contains("all_gather") &&
                           Catch::Contains("infiniband") && Catch::Contains("nvlink") &&
                           Catch::Contains("peak extra memory"));
  const Run same = run("reshard --shape 8,16 --from 'S(x),R' --to 'S(x),R' --mesh x=4");
  REQUIRE(same.code == 0);
  CHECK_THAT(same.output, Catch::Contains("no steps"));
}

TEST_CASE("carto-plan reshard: bad input is one line and exit code 2", "[tools][reshard]") {
  struct Bad {
    const char* args;
    const char* says;
  };
  const Bad cases[] = {
      {"reshard --shape 8,2048,12288 --from 'S(dp),R,R' --to 'R,R,S(tp)'", "--mesh is required"},
      {"reshard --shape 6,8,8 --from 'S(dp),R,R' --to 'R,R,R' --mesh dp=4", "'S(dp),R,R'"},
      {"reshard --shape 8,8,8 --from 'S(dp),R,R' --to 'R,R,S(pp)' --mesh dp=4", "'pp'"},
      {"reshard --shape 8,8,8 --from 'S(dp),R' --to 'R,R,R' --mesh dp=4", "rank 3"},
      {"reshard --shape 8,8,8 --from 'S(dp),R,R' --to 'R,R,R|P(dp)' --mesh dp=4",
       "no resharding path"},
      {"reshard --shape 8,8,8 --from 'S(dp' --to 'R,R,R' --mesh dp=4", "cannot parse"},
      {"reshard --shape 8,8,8 --from R,R,R --to R,R,R --mesh dp=4 --hardware tpu",
       "unknown hardware"},
      {"reshard --shape 8,8,8 --from R,R,R --to R,R,R --mesh dp=4 --dtype int8", "--dtype"},
      {"reshard --shape 8,8,8 --from R,R,R --to R,R,R --mesh dp=4 --hardware-file "
       "/nonexistent.json",
       "/nonexistent.json"},
      {"reshard --shape 8,8,8 --from R,R,R --to R,R,R --mesh dp=4 --colour", "unknown flag"},
  };
  for (const Bad& b : cases) {
    const Run r = run(b.args);
    INFO(b.args << "\n" << r.output);
    CHECK(r.code == 2);
    CHECK_THAT(r.output, Catch::Contains(b.says));
    CHECK(r.output.find('\n') == r.output.size() - 1);  // exactly one line
  }
  // --make-partial makes the Partial target reachable at zero cost.
  const Run ok =
      run("reshard --shape 8,8,8 --from 'S(dp),R,R' --to 'S(dp),R,R|P(tp)' --mesh dp=4,tp=2 "
          "--make-partial --json");
  INFO(ok.output);
  REQUIRE(ok.code == 0);
  CHECK(Json::parse(ok.output).at("time_s").as_double() == 0.0);
}
