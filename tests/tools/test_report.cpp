// carto-plan's HTML plan report: the page of a tiny GPT's plan is well-formed XML (checked by
// support/xml_check.hpp, itself tested on broken inputs), holds every section and one layout row
// per op group (the two identical blocks folded into one with a count), and its figures agree with
// the plan's own predictions (evaluate_point's persistent and kept bytes, the time breakdown);
// `carto-plan report` and `plan --report` write the same kind of page from the command line.
#include <unistd.h>

#include <carto/cost.hpp>
#include <carto/layers.hpp>
#include <carto/search.hpp>
#include <carto/util/json.hpp>
#include <carto/util/units.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "html.hpp"
#include "report.hpp"
#include "report_parts.hpp"
#include "support/carto_plan_run.hpp"
#include "support/xml_check.hpp"
#include "tools/test_report_fixtures.hpp"

using namespace carto;
using carto::testing::xml_problem;

using namespace carto::testing::report_fixtures;

TEST_CASE("the XML checker finds what makes a document ill-formed", "[tools][report]") {
  REQUIRE_FALSE(
      xml_problem("<svg a=\"1\" b='2'><g><text>x &amp; y &#39; &#x41;</text></g><rect/></svg>"));
  REQUIRE(xml_problem("<svg><g></svg>"));                  // unbalanced
  REQUIRE(xml_problem("<svg><g></g>"));                    // never closed
  REQUIRE(xml_problem("<svg a=1></svg>"));                 // unquoted attribute
  REQUIRE(xml_problem("<svg a=\"1\" a=\"2\"></svg>"));     // attribute twice
  REQUIRE(xml_problem("<svg a=\"x<y\"></svg>"));           // '<' in a value
  REQUIRE(xml_problem("<svg><text>a & b</text></svg>"));   // raw '&'
  REQUIRE(xml_problem("<svg><text>&nbsp;</text></svg>"));  // not an XML entity
  REQUIRE(xml_problem("<svg></svg><svg></svg>"));          // two roots
  REQUIRE(xml_problem("<svg a=\"1\"b=\"2\"></svg>"));      // no space between attributes
}

TEST_CASE("html::escape makes any text safe in XML text and attribute values", "[tools][report]") {
  REQUIRE(tools::html::escape("a<b & \"c\" 'd'>") == "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  const std::string wrapped =
      "<t v=\"" + tools::html::escape("<&\"'>") + "\">" + tools::html::escape("x<y&z") + "</t>";
  REQUIRE_FALSE(xml_problem(wrapped));
}

TEST_CASE("the report of a tiny GPT's plan", "[tools][report]") {
  const Plan plan = tiny_plan({0, 1, 2, 3});
  const Plan other = tiny_plan({3});
  const Graph g = tiny_graph(kBatch / plan.micro_batches);
  tools::ReportInput input;
  input.plan = &plan;
  input.graph = &g;
  input.hardware = tiny_hardware();
  input.memory_budget = 1 << 20;
  input.global_batch = kBatch;
  input.model_description = "tiny: 2 layers";
  input.compare = &other;
  input.compare_label = "zero3-plan.json";
  const std::string page = tools::render_report(input);

  SECTION("well-formed: the page and every SVG part") {
    const auto problem = xml_problem(without_doctype(page));
    INFO(problem.value_or(""));
    REQUIRE_FALSE(problem);
    const auto parts = testing::svg_parts(page);
    REQUIRE(parts.size() > 10);
    for (std::string_view svg : parts) {
      const auto p = xml_problem(svg);
      INFO(std::string(svg.substr(0, 200)) << " : " << p.value_or(""));
      REQUIRE_FALSE(p);
    }
    REQUIRE(page.find("<script src") == std::string::npos);
    REQUIRE(page.find("http://") == page.find("http://www.w3.org"));  // namespaces only
    REQUIRE(page.find("https://") == std::string::npos);
  }

  SECTION("every section, the settings") {
    for (const char* id : {"settings", "layout", "memory", "time", "frontier"})
      REQUIRE(page.find(std::string("<section id=\"") + id + "\">") != std::string::npos);
    REQUIRE(page.find("tiny: 2 layers") != std::string::npos);
    REQUIRE(page.find("memory resolution ε = " + tools::html::num(plan.tolerance)) !=
            std::string::npos);
    REQUIRE(page.find("1.00 MiB per device") != std::string::npos);  // the budget
  }

  SECTION("one layout row per op group; the identical blocks fold into one") {
    std::size_t blocks = 0, block_ops = 0;
    for (const OpGroup& grp : g.groups()) {
      if (grp.kind != GroupKind::transformer_block) continue;
      ++blocks;
      block_ops = static_cast<std::size_t>(grp.end_op - grp.first_op);
    }
    REQUIRE(blocks == 2);
    // Block 1 chose what block 0 chose (the standard space shares one layout between them).
    const OpGroup& b0 = g.groups()[1];
    const OpGroup& b1 = g.groups()[2];
    REQUIRE(b0.kind == GroupKind::transformer_block);
    for (std::int32_t i = 0; i < b0.end_op - b0.first_op; ++i)
      REQUIRE(plan.ops[static_cast<std::size_t>(b0.first_op + i)].strategy ==
              plan.ops[static_cast<std::size_t>(b1.first_op + i)].strategy);
    const std::size_t rows = g.num_ops() - block_ops;
    REQUIRE(count(page, "<tr class=\"op-row\">") == rows);
    REQUIRE(count(page, "<span class=\"count\">×2</span>") == block_ops);
    REQUIRE(page.find("block.0-1.") != std::string::npos);
    // Each row draws its inputs and its output.
    std::size_t tensors = 0;
    for (std::size_t k = 0; k < g.num_ops(); ++k) {
      const std::int32_t gi = g.ops()[k].group;
      if (gi >= 0 && g.groups()[static_cast<std::size_t>(gi)].first_op == b1.first_op) continue;
      tensors += g.ops()[k].inputs.size() + 1;
    }
    REQUIRE(count(page, "class=\"tensor\"") == tensors);
  }

  SECTION("the figures agree with the plan's predictions") {
    const tools::ReportData data = tools::build_report_data(input);
    REQUIRE(data.cost_peak == plan.peak_memory_bytes);
    REQUIRE(data.parameter_bytes + data.gradient_bytes + data.optimizer_bytes ==
            plan.memory_breakdown.at("persistent_states"));
    // Two points per op and one per recomputed op; the last forward op holds every kept
    // activation (the loss is never checkpointed).
    std::size_t recomputed = 0;
    for (const PlanOp& op : plan.ops) recomputed += op.checkpointed ? 1 : 0;
    REQUIRE(data.memory.size() == 2 * g.num_ops() + recomputed);
    REQUIRE_FALSE(plan.ops.back().checkpointed);
    REQUIRE(data.memory[g.num_ops() - 1].activations ==
            plan.memory_breakdown.at("kept_activations"));
    REQUIRE(data.memory.back().activations >= 0);
    REQUIRE(data.timeline_peak == data.cost_peak);  // the schedule the cost model prices
    REQUIRE(data.timeline_peak >= plan.memory_breakdown.at("persistent_states") +
                                      plan.memory_breakdown.at("kept_activations"));
    double compute = 0;
    for (const tools::GroupRun& r : data.runs) {
      const auto it = r.time.find("compute");
      if (it != r.time.end()) compute += it->second * static_cast<double>(r.count);
    }
    REQUIRE(compute == Approx(plan.time_breakdown.at("compute")).epsilon(1e-9));
  }

  SECTION("the compared plan appears beside it") {
    REQUIRE(page.find("<th class=\"compare\">zero3-plan.json</th>") != std::string::npos);
    REQUIRE(count(page, "class=\"chosen\"") == 2);
    REQUIRE(count(page, "class=\"frontier-point\"") ==
            plan.frontier.size() + other.frontier.size());
    REQUIRE(page.find(tools::html::escape(other.frontier.front().mesh)) != std::string::npos);
  }
}

TEST_CASE("the report file is written whole or not at all", "[tools][report]") {
  const std::string dir = temp_dir();
  const std::string path = dir + "/r.html";
  tools::html::write_file_atomically(path, "<p>one</p>");
  tools::html::write_file_atomically(path, "<p>two</p>");
  REQUIRE(read_file(path) == "<p>two</p>");
  for (const auto& e : std::filesystem::directory_iterator(dir))
    REQUIRE(e.path().filename() == "r.html");  // no temporary left behind
  REQUIRE_THROWS_WITH(tools::html::write_file_atomically(dir + "/missing/r.html", "x"),
                      Catch::Contains(dir + "/missing/r.html"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("carto-plan report and plan --report", "[tools][report][cli]") {
  const std::string dir = temp_dir();
  const std::string plan_path = dir + "/tiny.json";
  const std::string other_path = dir + "/zero3.json";
  auto run = [](const std::string& args) { return carto::testing::run_carto_plan(args); };
  const std::string plan_flags =
      "plan " + kTinyFlags + " --devices 4 --gpus-per-node 2 --memory 1MiB";
  auto r = run(plan_flags + " --out " + plan_path + " --report " + dir + "/direct.html");
  INFO(r.output);
  REQUIRE(r.code == 0);
  r = run(plan_flags + " --zero 3 --out " + other_path);
  REQUIRE(r.code == 0);
  r = run("report " + plan_path + " -o " + dir + "/tiny.html " + kTinyFlags +
          " --gpus-per-node 2 --memory 1MiB --compare " + other_path);
  REQUIRE(r.code == 0);
  for (const char* name : {"/direct.html", "/tiny.html"}) {
    const std::string page = read_file(dir + name);
    INFO(name);
    REQUIRE_FALSE(xml_problem(without_doctype(page)));
    REQUIRE(page.find("<section id=\"layout\">") != std::string::npos);
    REQUIRE(count(page, "<tr class=\"op-row\">") > 10);
  }
  REQUIRE(read_file(dir + "/tiny.html").find(other_path) != std::string::npos);

  // Bad input: one line naming what is wrong, exit code 2.
  r = run("report " + plan_path + " " + kTinyFlags);
  REQUIRE(r.code == 2);
  REQUIRE(r.output.find("-o") != std::string::npos);
  r = run("report " + plan_path + " -o " + dir +
          "/x.html --layers 2 --hidden 32 --heads 4 "
          "--vocab 64 --seq 16 --batch 8");
  REQUIRE(r.code == 2);
  REQUIRE(r.output.find("fingerprint") != std::string::npos);
  r = run("report " + plan_path + " -o " + dir + "/no/such/dir/x.html " + kTinyFlags);
  REQUIRE(r.code == 2);
  REQUIRE(r.output.find(dir + "/no/such/dir/x.html") != std::string::npos);
  r = run("report " + dir + "/absent.json -o " + dir + "/x.html " + kTinyFlags);
  REQUIRE(r.code == 2);
  REQUIRE(r.output.find("absent.json") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("carto-plan report of a Llama plan, and of a plan read with the other model's flags",
          "[tools][report][cli]") {
  const std::string dir = temp_dir();
  const std::string llama_path = dir + "/llama.json", gpt_path = dir + "/gpt.json";
  auto run = [](const std::string& args) { return carto::testing::run_carto_plan(args); };
  const std::string setup = " --gpus-per-node 2 --memory 1GiB --attention fused";
  auto r = run("plan " + kTinyLlamaFlags + " --devices 4" + setup + " --out " + llama_path +
               " --report " + dir + "/direct.html");
  INFO(r.output);
  REQUIRE(r.code == 0);
  r = run("report " + llama_path + " -o " + dir + "/llama.html " + kTinyLlamaFlags + setup);
  REQUIRE(r.code == 0);

  const Json plan = Json::parse(read_file(llama_path));
  REQUIRE(plan.at("model").as_string() == "llama3-8b");
  const LlamaConfig preset = *find_llama("llama3-8b");
  const std::string model = "llama3-8b (Llama): 2 layers, hidden 64, 8 heads, " +
                            std::to_string(preset.kv_heads) + " kv heads, SwiGLU width " +
                            std::to_string(preset.ffn_hidden) + ", vocabulary 128, sequence 16";
  const std::string peak =
      format_bytes(plan.at("predicted").at("peak_memory_bytes").as_int()) + " per device";
  const std::string step =
      tools::report_detail::duration(plan.at("predicted").at("step_time_s").as_double());
  for (const char* name : {"/direct.html", "/llama.html"}) {
    const std::string page = read_file(dir + name);
    INFO(name);
    REQUIRE_FALSE(xml_problem(without_doctype(page)));
    CHECK(page.find("<tr><th>model</th><td>" + model) != std::string::npos);
    CHECK(page.find("<tr><th>predicted peak memory</th><td>" + peak + "</td>") !=
          std::string::npos);
    CHECK(page.find("<tr><th>predicted step time</th><td>" + step + "</td>") != std::string::npos);
    CHECK(page.find("fused_attention") != std::string::npos);  // the Llama graph, fused
  }

  // Without --attention the fused plan is read with fused attention (its fingerprint names that
  // graph, not the default's).
  r = run("report " + llama_path + " -o " + dir + "/auto.html " + kTinyLlamaFlags +
          " --gpus-per-node 2 --memory 1GiB");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(read_file(dir + "/auto.html") == read_file(dir + "/llama.html"));
  // A Llama plan read with GPT flags, a GPT plan with Llama flags, the fused Llama plan with
  // --attention materialized: each refused naming the fingerprint, exit code 2.
  r = run("plan " + kTinyFlags + " --devices 4" + setup + " --out " + gpt_path);
  REQUIRE(r.code == 0);
  for (const std::string& args :
       {"report " + llama_path + " " + kTinyFlags + setup,
        "report " + gpt_path + " " + kTinyLlamaFlags + setup,
        "report " + llama_path + " " + kTinyLlamaFlags +
            " --gpus-per-node 2 --memory 1GiB --attention materialized"}) {
    r = run(args + " -o " + dir + "/x.html");
    INFO(args << ": " << r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find("fingerprint") != std::string::npos);
    CHECK(r.output.find("another model") != std::string::npos);
  }
  // Without model flags the model is the preset the file names: llama3-8b (not the cut-down one).
  r = run("report " + llama_path + " -o " + dir + "/x.html --batch 4" + setup);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("another model ('llama3-8b')") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir + "/x.html"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the memory timeline of a plan that checkpoints every block", "[tools][report]") {
  SearchOptions options;
  options.checkpoint = CheckpointChoice::all;
  options.zero_stages = {1};
  const Plan plan = search(tiny_graph, "tiny", kBatch, 4, tiny_hardware(), options);
  const Graph g = tiny_graph(kBatch / plan.micro_batches);
  tools::ReportInput input;
  input.plan = &plan;
  input.graph = &g;
  input.hardware = tiny_hardware();
  input.memory_budget = 1 << 20;
  input.global_batch = kBatch;
  const tools::ReportData data = tools::build_report_data(input);
  std::size_t recomputed = 0;
  for (const PlanOp& op : plan.ops) recomputed += op.checkpointed ? 1 : 0;
  REQUIRE(recomputed > 0);
  // Every checkpointed op runs its forward twice: once in the pass, once before its backward.
  REQUIRE(data.memory.size() == 2 * g.num_ops() + recomputed);
  std::size_t recompute_points = 0;
  for (const tools::MemoryPoint& p : data.memory)
    recompute_points += p.label.rfind("recompute ", 0) == 0 ? 1 : 0;
  REQUIRE(recompute_points == recomputed);
  REQUIRE(data.memory[g.num_ops() - 1].activations == plan.memory_breakdown.at("kept_activations"));
  REQUIRE(data.timeline_peak <= data.cost_peak);
  // The pass returns what it kept: the first op's backward holds what its forward held.
  REQUIRE(data.memory.back().activations == data.memory.front().activations);
  for (const tools::MemoryPoint& p : data.memory) REQUIRE(p.activations >= 0);
  const std::string page = tools::render_report(input);
  REQUIRE_FALSE(xml_problem(without_doctype(page)));
  REQUIRE(page.find("<span class=\"ckpt\">checkpointed</span>") != std::string::npos);
  REQUIRE(page.find("recompute") != std::string::npos);
}

TEST_CASE("a plan file's precision builds the report's graph, none recorded reads as fp32",
          "[tools][report][cli]") {
  // The report of an fp32 plan whose file records no precision (as files were written before it
  // was recorded) is the report of the same file with "precision": "fp32"; a bf16 plan's report
  // says mixed_bf16.
  const std::string dir = temp_dir();
  auto run = [](const std::string& args) { return carto::testing::run_carto_plan(args); };
  const std::string plan_flags = "plan " + kTinyFlags + " --devices 2 --memory 1GiB --zero 0";
  auto report = [&](const std::string& plan_path) {
    const std::string page_path = plan_path + ".html";
    const auto r = run("report " + plan_path + " " + kTinyFlags + " --memory 1GiB -o " + page_path);
    INFO(r.output);
    REQUIRE(r.code == 0);
    std::string page = read_file(page_path);
    for (std::size_t at = page.find(plan_path); at != std::string::npos; at = page.find(plan_path))
      page.replace(at, plan_path.size(), "PLAN");  // the pages may name their files
    return page;
  };
  const std::string fp32 = dir + "/fp32.json", legacy = dir + "/legacy.json",
                    bf16 = dir + "/bf16.json";
  for (const auto& [path, dtype] : {std::pair{fp32, "fp32"}, std::pair{bf16, "bf16"}}) {
    const auto r = run(plan_flags + " --dtype " + dtype + " --out " + path);
    INFO(r.output);
    REQUIRE(r.code == 0);
  }
  // The same bytes less the precision line (a Json round trip could reprint the numbers).
  std::string text = read_file(fp32);
  const std::string line = "\n  \"precision\": \"fp32\",";
  const std::size_t at = text.find(line);
  REQUIRE(at != std::string::npos);
  text.erase(at, line.size());
  REQUIRE_FALSE(Json::parse(text).find("precision"));
  std::ofstream(legacy) << text;
  const std::string page = report(fp32);
  REQUIRE(page.find("<td>fp32, gradients reduced in fp32") != std::string::npos);
  CHECK(report(legacy) == page);
  CHECK(report(bf16).find("<td>mixed_bf16, gradients reduced in bf16") != std::string::npos);
  std::filesystem::remove_all(dir);
}

namespace {

std::vector<tools::report_detail::LabelBox> frontier_label_boxes(const std::string& page) {
  // <text x="…" y="…" class="frontier-label" …>text</text>, in the order drawn.
  const std::regex label(
      "<text x=\"([-0-9.e]+)\" y=\"([-0-9.e]+)\" class=\"frontier-label\"[^>]*>"
      "([^<]*)</text>");
  std::vector<tools::report_detail::LabelBox> boxes;
  for (auto it = std::sregex_iterator(page.begin(), page.end(), label);
       it != std::sregex_iterator(); ++it) {
    boxes.push_back(
        tools::report_detail::label_box(std::stod((*it)[1]), std::stod((*it)[2]), (*it)[3].str()));
  }
  return boxes;
}

}  // namespace

TEST_CASE("chart labels of clustered points are placed without overlap", "[tools][report]") {
  using tools::report_detail::LabelAnchor;
  using tools::report_detail::LabelBox;
  // Eight labels on points at most 3 px apart, beside a label already drawn there (the budget's).
  std::vector<LabelAnchor> anchors;
  for (int i = 0; i < 8; ++i) {
    anchors.push_back({.x = 400.0 + (i % 3),
                       .y = 150.0 + (i % 2) * 3,
                       .text = std::string(i % 2 == 0 ? "this plan" : "/tmp/a/compared.json")});
  }
  const LabelBox area{.x0 = 70, .y0 = 0, .x1 = 960, .y1 = 280};
  const LabelBox budget = tools::report_detail::label_box(395, 140, "budget 80.00 GiB");
  const std::vector<LabelBox> boxes = tools::report_detail::place_labels(anchors, {budget}, area);
  REQUIRE(boxes.size() == anchors.size());
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    INFO("label " << i);
    const LabelBox& b = boxes[i];
    CHECK(b.inside(area));
    CHECK_FALSE(b.meets(budget));
    // The box is the label's own size, near its point (within a few label heights).
    const LabelBox size = tools::report_detail::label_box(0, 0, anchors[i].text);
    CHECK(b.x1 - b.x0 == size.x1 - size.x0);
    CHECK(std::min(std::abs(b.x0 - anchors[i].x), std::abs(b.x1 - anchors[i].x)) <= 10.0 + 1e-9);
    CHECK(std::abs((b.y0 + b.y1) / 2 - anchors[i].y) < 100);
    for (std::size_t j = 0; j < i; ++j) CHECK_FALSE(b.meets(boxes[j]));
  }
  // The same anchors, the same boxes.
  const std::vector<LabelBox> again = tools::report_detail::place_labels(anchors, {budget}, area);
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    CHECK(again[i].x0 == boxes[i].x0);
    CHECK(again[i].y0 == boxes[i].y0);
  }

  // The frontier chart of a plan compared with itself: both chosen points, the fastest and the
  // least-memory point sit on a few clustered pixels; the page's labels must not meet.
  Plan plan = tiny_plan({0, 1, 2, 3});
  REQUIRE(plan.frontier.size() >= 2);
  for (std::size_t i = 0; i < plan.frontier.size(); ++i) {  // squeeze the frontier into a cluster
    plan.frontier[i].time_s = plan.step_time_s * (1 + 1e-4 * static_cast<double>(i + 1));
    plan.frontier[i].peak_bytes = plan.peak_memory_bytes - static_cast<std::int64_t>(i + 1);
  }
  const Graph g = tiny_graph(kBatch / plan.micro_batches);
  tools::ReportInput input;
  input.plan = &plan;
  input.compare = &plan;
  input.compare_label = "/tmp/a/the-same-plan.json";
  input.graph = &g;
  input.hardware = tiny_hardware();
  input.memory_budget = plan.peak_memory_bytes;  // the budget's label on the same height
  input.global_batch = kBatch;
  const std::string page = tools::render_report(input);
  REQUIRE_FALSE(xml_problem(without_doctype(page)));
  const std::vector<LabelBox> drawn = frontier_label_boxes(page);
  REQUIRE(drawn.size() == 4);  // this plan, the compared plan, fastest, least memory
  for (std::size_t i = 0; i < drawn.size(); ++i)
    for (std::size_t j = 0; j < i; ++j) CHECK_FALSE(drawn[i].meets(drawn[j]));
}
