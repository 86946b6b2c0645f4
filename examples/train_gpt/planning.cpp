#include "planning.hpp"

#include <algorithm>
#include <carto/search.hpp>
#include <carto/util/files.hpp>
#include <carto/util/units.hpp>
#include <chrono>
#include <string>

namespace demo {

using carto::detail::fail;

namespace {

std::string list(const std::vector<std::int64_t>& values) {
  std::string out;
  for (const std::int64_t v : values) {
    if (!out.empty()) out += ',';
    out += std::to_string(v);
  }
  return out;
}

}  // namespace

std::string mesh_flag(const carto::DeviceMesh& mesh) {
  constexpr std::string_view kShorthand[] = {"x", "y", "z"};
  bool shorthand = true;
  std::string sizes, named;
  for (std::size_t a = 0; a < mesh.num_axes(); ++a) {
    const carto::MeshAxis& axis = mesh.axis(a);
    shorthand = shorthand && axis.name.view() == kShorthand[a];
    if (a > 0) {
      sizes += 'x';
      named += ',';
    }
    sizes += std::to_string(axis.size);
    named += carto::detail::concat(axis.name.view(), '=', axis.size);
  }
  return shorthand ? sizes : named;
}

PlanChoice search_plan(const MakeGraph& make_graph, const PlanRequest& request,
                       const carto::HardwareProfile& hw) {
  const auto start = std::chrono::steady_clock::now();
  if (std::none_of(request.micro_batches.begin(), request.micro_batches.end(),
                   [&](std::int64_t m) { return m >= 1 && request.batch % m == 0; })) {
    fail("carto-demo: no --micro-batches candidate (", list(request.micro_batches),
         ") divides --batch ", request.batch, "; pass a count that divides it, e.g. 1");
  }
  carto::SearchOptions options{.precision = request.precision,
                               .micro_batches = request.micro_batches,
                               .tolerance = request.tolerance,
                               .meshes = {request.mesh}};
  // The unbudgeted frontier: the fastest plan and the least memory any plan needs.
  const carto::Plan any = carto::search(make_graph, request.model, request.batch,
                                        request.mesh.num_devices(), hw, options);
  PlanChoice choice;
  choice.least_bytes = any.frontier.back().peak_bytes;
  choice.fastest_bytes = any.frontier.front().peak_bytes;
  choice.fastest_time_s = any.frontier.front().time_s;
  choice.default_budget = !request.budget.has_value();
  choice.budget = request.budget.value_or((choice.least_bytes + choice.fastest_bytes) / 2);
  if (choice.budget < choice.least_bytes) {
    const carto::FrontierPoint& least = any.frontier.back();
    fail("carto-demo: no plan fits the memory budget of ", carto::format_bytes(choice.budget),
         " per rank on mesh ", request.mesh, "; the least memory any plan needs is ",
         carto::format_bytes(choice.least_bytes), " (ZeRO stage ", least.zero_stage, ", ",
         least.micro_batches, " micro-batch", least.micro_batches == 1 ? "" : "es",
         "): pass --budget ", (choice.least_bytes + 1023) / 1024, "KiB or more");
  }
  options.memory_budget = choice.budget;
  choice.plan = carto::search(make_graph, request.model, request.batch, request.mesh.num_devices(),
                              hw, options);
  // The frontier shown is the whole one (over every ZeRO stage and micro-batch count), not only
  // the plans under the budget.
  choice.plan.frontier = any.frontier;
  choice.plan.search_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return choice;
}

carto::Plan load_plan(const std::string& file, const std::string& model,
                      const MakeGraph& make_graph, const carto::DeviceMesh& mesh,
                      std::int64_t batch) {
  std::string text;
  try {
    text = carto::read_file_bounded(file, carto::kMaxPlanFileBytes, "--plan file");
  } catch (const carto::Error& e) {
    fail("carto-demo: ", std::string(e.what()).substr(7),
         "; pass a plan written by --save-plan, or drop --plan to search one");
  }
  carto::Json j;
  try {
    j = carto::Json::parse(text);
  } catch (const carto::Error& e) {
    fail("carto-demo: --plan file '", file, "' is not a plan: ", e.what());
  }
  if (const carto::Json* v = j.is_object() ? j.find("model") : nullptr;
      v != nullptr && v->is_string() && v->as_string() != model) {
    fail("carto-demo: the --plan file '", file, "' is for model '", v->as_string(),
         "' but this run trains '", model,
         "'; pass the model flags it was saved with, or drop --plan");
  }
  // The micro-batch count decides the graph the plan is checked against.
  std::int64_t m = 1;
  if (const carto::Json* v = j.is_object() ? j.find("micro_batches") : nullptr;
      v != nullptr && v->is_int()) {
    m = v->as_int();
  }
  if (m < 1) {
    fail("carto-demo: --plan file '", file, "': field 'micro_batches' is ", m,
         "; it must be at least 1");
  }
  if (batch % m != 0) {
    fail("carto-demo: the --plan file '", file, "' runs ", m,
         " micro-batches, which do not divide --batch ", batch,
         "; pass a --batch that is a multiple of ", m);
  }
  carto::Plan plan;
  try {
    plan = carto::plan_from_json(j, make_graph(batch / m));
  } catch (const carto::Error& e) {
    std::string message = e.what();
    if (message.rfind("carto: plan file: ", 0) == 0) message.erase(0, 18);
    fail("carto-demo: --plan file '", file, "': ", message);
  }
  if (!(plan.mesh == mesh)) {
    fail("carto-demo: the --plan file '", file, "' is for mesh ", plan.mesh, " but --mesh is ",
         mesh, "; run with --mesh ", mesh_flag(plan.mesh), ", or drop --plan to search a plan for ",
         mesh_flag(mesh));
  }
  return plan;
}

void check_output(const std::string& file, const std::string& flag) {
  try {
    carto::check_output_path(file, flag + " file");
  } catch (const carto::Error& e) {
    fail("carto-demo: ", std::string(e.what()).substr(7), "; pass a path in a writable directory");
  }
}

void write_json(const carto::Json& json, const std::string& file, const std::string& flag) {
  try {
    carto::atomic_write(file, json.dump(2) + "\n", flag + " file");
  } catch (const carto::Error& e) {
    fail("carto-demo: ", std::string(e.what()).substr(7), "; pass a path in a writable directory");
  }
}

}  // namespace demo
