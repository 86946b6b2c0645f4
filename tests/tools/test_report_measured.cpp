// The HTML report's "measured" section: a training run's report (carto-demo's --json format) read
// back with every member checked, drawn beside the plan's prediction: the ratios printed are the
// test's own measured / predicted, one bar per rank, and the loss curve's points sit where a
// linear axis from 0 to 1.05 × the largest loss puts them. Bad run files are errors naming the
// member.
#include <carto/cost.hpp>
#include <carto/layers.hpp>
#include <carto/search.hpp>
#include <carto/util/json.hpp>
#include <catch2/catch.hpp>
#include <regex>
#include <string>
#include <vector>

#include "html.hpp"
#include "report.hpp"
#include "support/xml_check.hpp"
#include "tools/test_report_fixtures.hpp"

using namespace carto;
using namespace carto::testing::report_fixtures;

namespace {

// A run report of `plan` as carto-demo writes it (examples/train_gpt/report.cpp).
Json run_report(const Plan& plan, const std::vector<double>& losses,
                const std::vector<std::int64_t>& peaks, double step_s) {
  Json j;
  j["format"] = "carto-demo-report/1";
  j["model"]["layers"] = kTiny.layers;
  j["hardware_profile"] = "h100";
  j["plan"] = to_json(plan);
  j["training"]["losses"] = Json::array();
  j["training"]["step_seconds"] = Json::array();
  for (const double l : losses) {
    j["training"]["losses"].push_back(l);
    j["training"]["step_seconds"].push_back(step_s);
  }
  j["memory"]["ranks"] = Json::array();
  for (const std::int64_t b : peaks) {
    Json r;
    r["measured_peak_bytes"] = b;
    j["memory"]["ranks"].push_back(r);
  }
  j["step_time"]["measured_s"] = step_s;
  return j;
}

}  // namespace

TEST_CASE("the report of a plan with a training run's measurements", "[tools][report]") {
  const Plan plan = tiny_plan({0, 1, 2, 3});
  const Graph g = tiny_graph(kBatch / plan.micro_batches);
  const std::vector<double> losses = {4.1, 3.7, 3.0, 2.6, 2.45};
  const std::vector<std::int64_t> peaks = {plan.peak_memory_bytes + 12345,
                                           plan.peak_memory_bytes - 777, plan.peak_memory_bytes * 2,
                                           plan.peak_memory_bytes};
  const double step_s = 3.5 * plan.step_time_s;
  const tools::Measurements m =
      tools::measurements_from_json(run_report(plan, losses, peaks, step_s), "run.json");
  REQUIRE(m.losses == losses);
  REQUIRE(m.peak_bytes == peaks);
  REQUIRE(m.step_s == step_s);
  REQUIRE(m.hardware == "h100");

  tools::ReportInput input;
  input.plan = &plan;
  input.graph = &g;
  input.hardware = tiny_hardware();
  input.memory_budget = 1 << 20;
  input.global_batch = kBatch;
  const std::string without = tools::render_report(input);
  REQUIRE(without.find("<section id=\"measured\">") == std::string::npos);
  input.measured = &m;
  const std::string page = tools::render_report(input);
  REQUIRE_FALSE(carto::testing::xml_problem(without_doctype(page)));
  REQUIRE(page.find("<section id=\"measured\">") != std::string::npos);
  REQUIRE(page.find("From run.json: 5 steps on 4 ranks") != std::string::npos);

  // One table row and one bar per rank, each with its measured / predicted.
  REQUIRE(count(page, "<tr class=\"measured-rank\">") == peaks.size());
  REQUIRE(count(page, "class=\"measured-bar\"") == peaks.size() + 1);  // and the prediction's
  for (const std::int64_t b : peaks) {
    const double r = static_cast<double>(b) / static_cast<double>(plan.peak_memory_bytes);
    REQUIRE(page.find("<td class=\"num\">" + tools::html::num(r, 3) + "</td>") !=
            std::string::npos);
  }
  REQUIRE(page.find("<td class=\"num\">" + tools::html::num(3.5, 3) + "</td>") !=
          std::string::npos);  // the step time's ratio

  // The loss curve: a point per step on a linear axis (the chart's plot area: y from 16 to 224).
  const std::smatch curve = [&] {
    std::smatch s;
    const std::regex re("id=\"loss-curve\".*?<polyline points=\"([^\"]*)\"");
    REQUIRE(std::regex_search(page, s, re));
    return s;
  }();
  const std::string points = curve[1];
  std::vector<double> ys;
  const std::regex pair("([0-9.]+),([0-9.]+)");
  for (auto it = std::sregex_iterator(points.begin(), points.end(), pair);
       it != std::sregex_iterator(); ++it)
    ys.push_back(std::stod((*it)[2]));
  REQUIRE(ys.size() == losses.size());
  const double top = 1.05 * 4.1, plot_top = 16, plot_h = 260 - 16 - 36;
  for (std::size_t i = 0; i < losses.size(); ++i)
    REQUIRE(ys[i] == Approx(plot_top + plot_h * (1 - losses[i] / top)).margin(1e-3));
}

TEST_CASE("a bad training report is an error naming what is wrong", "[tools][report]") {
  const Plan plan = tiny_plan({0});
  const Json good = run_report(plan, {3.0, 2.0}, {1000, 1000}, 0.01);
  auto broken = [&](auto&& edit) {
    Json j = good;
    edit(j);
    return j;
  };
  REQUIRE_THROWS_WITH(tools::measurements_from_json(
                          broken([](Json& j) { j["format"] = "carto-plan/1"; }), "r.json"),
                      Catch::Contains("r.json") && Catch::Contains("carto-demo-report/1"));
  REQUIRE_THROWS_WITH(
      tools::measurements_from_json(
          broken([](Json& j) { j["training"]["losses"] = Json::array(); }), "r.json"),
      Catch::Contains("records no training step"));
  REQUIRE_THROWS_WITH(
      tools::measurements_from_json(
          broken([](Json& j) { j["training"]["losses"].push_back("nan"); }), "r.json"),
      Catch::Contains("training.losses"));
  REQUIRE_THROWS_WITH(tools::measurements_from_json(
                          broken([](Json& j) { j["memory"]["ranks"] = Json::array(); }), "r.json"),
                      Catch::Contains("memory.ranks"));
  REQUIRE_THROWS_WITH(tools::measurements_from_json(
                          broken([](Json& j) { j["step_time"]["measured_s"] = -1.0; }), "r.json"),
                      Catch::Contains("step_time.measured_s"));
}
