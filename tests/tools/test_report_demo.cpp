// From a training run to its report: carto-demo trains a tiny GPT on two thread ranks, writing its
// --json report and the plan it trained (--save-plan); `carto-plan report PLAN --measured RUN`
// must show that run's numbers in the measured-vs-predicted section: per rank the measured peak
// from the JSON beside the plan file's predicted peak and their ratio, the step time's ratio, and
// the first and last loss. The expected values are read from the two JSON files here.
#include <unistd.h>

#include <carto/util/json.hpp>
#include <carto/util/units.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "support/carto_plan_run.hpp"

namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// |got - want| within the 3 or 4 significant digits the report prints.
bool near(double got, double want, double relative) {
  return std::abs(got - want) <= relative * std::abs(want);
}

}  // namespace

TEST_CASE("carto-plan report --measured shows a carto-demo run's numbers",
          "[tools][report][demo]") {
  const fs::path dir =
      fs::temp_directory_path() / ("carto_report_demo_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string run_path = (dir / "run.json").string(),
                    plan_path = (dir / "plan.json").string(),
                    page_path = (dir / "run.html").string();
  const std::string demo = std::string(CARTO_DEMO_PATH) +
                           " --layers 1 --hidden 32 --heads 2 --seq 16 --batch 8 --steps 3"
                           " --sample 0 --mesh 2 --json " +
                           run_path + " --save-plan " + plan_path;
  const carto::testing::Run trained = carto::testing::run_command(demo);
  INFO(trained.output);
  REQUIRE(trained.code == 0);
  const carto::testing::Run reported = carto::testing::run_carto_plan(
      "report " + plan_path + " --measured " + run_path + " -o " + page_path);
  INFO(reported.output);
  REQUIRE(reported.code == 0);

  const carto::Json run = carto::Json::parse(slurp(run_path));
  const carto::Json plan = carto::Json::parse(slurp(plan_path));
  const std::string page = slurp(page_path);
  REQUIRE(page.find("<section id=\"measured\">") != std::string::npos);
  const std::int64_t predicted_peak = plan.at("predicted").at("peak_memory_bytes").as_int();
  const double predicted_step = plan.at("predicted").at("step_time_s").as_double();
  const carto::Json::Array& losses = run.at("training").at("losses").as_array();
  const carto::Json::Array& ranks = run.at("memory").at("ranks").as_array();
  REQUIRE(losses.size() == 3);
  REQUIRE(ranks.size() == 2);
  REQUIRE(page.find("From " + run_path + ": 3 steps on 2 ranks") != std::string::npos);

  // One row per rank: measured (the JSON's), predicted (the plan file's), measured / predicted.
  const std::regex row(
      "<tr class=\"measured-rank\"><th>peak memory, rank ([0-9]+)</th><td class=\"num\">([^<]*)"
      "</td><td class=\"num\">([^<]*)</td><td class=\"num\">([^<]*)</td></tr>");
  std::size_t rows = 0;
  for (auto it = std::sregex_iterator(page.begin(), page.end(), row); it != std::sregex_iterator();
       ++it, ++rows) {
    const std::size_t r = std::stoul((*it)[1]);
    INFO("rank " << r);
    REQUIRE(r == rows);
    const std::int64_t measured = ranks.at(r).at("measured_peak_bytes").as_int();
    REQUIRE(measured > 0);
    CHECK((*it)[2].str() == carto::format_bytes(measured));
    CHECK((*it)[3].str() == carto::format_bytes(predicted_peak));
    CHECK(near(std::stod((*it)[4]),
               static_cast<double>(measured) / static_cast<double>(predicted_peak), 5e-3));
  }
  CHECK(rows == 2);
  // Step time: measured / predicted; loss: first → last.
  const std::regex step(
      "<tr><th>step time</th><td class=\"num\">[^<]*</td><td class=\"num\">[^<]*"
      "</td><td class=\"num\">([^<]*)</td></tr>");
  std::smatch m;
  REQUIRE(std::regex_search(page, m, step));
  const double measured_step = run.at("step_time").at("measured_s").as_double();
  CHECK(near(std::stod(m[1]), measured_step / predicted_step, 5e-3));
  const std::regex loss("<tr><th>loss</th><td class=\"num\">([-0-9.e]+) → ([-0-9.e]+)</td>");
  REQUIRE(std::regex_search(page, m, loss));
  CHECK(near(std::stod(m[1]), losses.front().as_double(), 5e-4));
  CHECK(near(std::stod(m[2]), losses.back().as_double(), 5e-4));
  fs::remove_all(dir);
}

TEST_CASE("carto-plan report of a carto-demo --arch llama run rebuilds the run's Llama",
          "[tools][report][demo]") {
  const fs::path dir =
      fs::temp_directory_path() / ("carto_report_demo_llama_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string run_path = (dir / "run.json").string(),
                    plan_path = (dir / "plan.json").string();
  const carto::testing::Run trained = carto::testing::run_command(
      std::string(CARTO_DEMO_PATH) +
      " --arch llama --layers 1 --hidden 32 --heads 4 --kv-heads 2 --ffn 40 --seq 16 --batch 8"
      " --steps 2 --sample 0 --mesh 2 --json " +
      run_path + " --save-plan " + plan_path);
  INFO(trained.output);
  REQUIRE(trained.code == 0);
  // The run alone, and the plan file with the run as --measured: the run's kv heads and SwiGLU
  // width (which no size flag carries) rebuild the graph the plan's fingerprint names.
  for (const std::string& args :
       {"report " + run_path + " -o " + (dir / "a.html").string(),
        "report " + plan_path + " --measured " + run_path + " -o " + (dir / "b.html").string()}) {
    const carto::testing::Run reported = carto::testing::run_carto_plan(args);
    INFO(args << ": " << reported.output);
    REQUIRE(reported.code == 0);
  }
  for (const char* name : {"a.html", "b.html"}) {
    const std::string page = slurp((dir / name).string());
    INFO(name);
    CHECK(page.find("char-llama (Llama): 1 layers, hidden 32, 4 heads, 2 kv heads, SwiGLU width "
                    "40") != std::string::npos);
    CHECK(page.find("<section id=\"measured\">") != std::string::npos);
  }
  fs::remove_all(dir);
}
