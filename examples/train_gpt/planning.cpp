#include "planning.hpp"

#include <algorithm>
#include <atomic>
#include <carto/search/dp.hpp>
#include <carto/util/units.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

namespace demo {

using carto::detail::fail;

namespace {

struct Candidate {
  carto::DpPoint point;
  carto::DpOptions options;
};

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
  // One DP per (micro-batch count, ZeRO stage), spread over the cores: each is a pure function.
  std::vector<std::int64_t> micro;
  std::vector<carto::Graph> graphs;
  for (const std::int64_t m : request.micro_batches) {
    if (m < 1 || request.batch % m != 0) continue;
    micro.push_back(m);
    graphs.push_back(make_graph(request.batch / m));
  }
  if (micro.empty()) {
    fail("carto-demo: no --micro-batches candidate (", list(request.micro_batches),
         ") divides --batch ", request.batch, "; pass a count that divides it, e.g. 1");
  }
  constexpr int kZeroStages = 4;
  const std::size_t tasks = micro.size() * kZeroStages;
  std::vector<std::vector<Candidate>> found(tasks);
  std::vector<std::exception_ptr> errors(tasks);
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t t = next++; t < tasks; t = next++) {
      const std::size_t i = t / kZeroStages;
      const carto::DpOptions options{.precision = carto::Precision::fp32,
                                     .zero_stage = static_cast<int>(t % kZeroStages),
                                     .micro_batches = micro[i],
                                     .tolerance = request.tolerance};
      try {
        for (carto::DpPoint& p : carto::dp_frontier(graphs[i], request.mesh, hw, options).frontier)
          found[t].push_back({std::move(p), options});
      } catch (...) {
        errors[t] = std::current_exception();
      }
    }
  };
  const std::size_t workers =
      std::min<std::size_t>(tasks, std::max(1U, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (std::size_t w = 1; w < workers; ++w) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  std::vector<Candidate> all;
  for (std::size_t t = 0; t < tasks; ++t) {
    if (errors[t]) std::rethrow_exception(errors[t]);
    for (Candidate& c : found[t]) all.push_back(std::move(c));
  }
  if (all.empty()) fail("carto-demo: the search found no plan on mesh ", request.mesh);

  PlanChoice choice;
  const Candidate* least = &all.front();
  const Candidate* fastest = &all.front();
  for (const Candidate& c : all) {
    if (c.point.peak_bytes < least->point.peak_bytes) least = &c;
    if (c.point.time_s < fastest->point.time_s) fastest = &c;
  }
  choice.least_bytes = least->point.peak_bytes;
  choice.fastest_bytes = fastest->point.peak_bytes;
  choice.fastest_time_s = fastest->point.time_s;
  choice.default_budget = !request.budget.has_value();
  choice.budget = request.budget.value_or((choice.least_bytes + choice.fastest_bytes) / 2);

  const Candidate* best = nullptr;
  for (const Candidate& c : all) {
    if (c.point.peak_bytes <= choice.budget &&
        (best == nullptr || c.point.time_s < best->point.time_s))
      best = &c;
  }
  if (best == nullptr) {
    const std::int64_t m = least->options.micro_batches;
    fail("carto-demo: no plan fits the memory budget of ", carto::format_bytes(choice.budget),
         " per rank on mesh ", request.mesh, "; the least memory any plan needs is ",
         carto::format_bytes(choice.least_bytes), " (ZeRO stage ", least->options.zero_stage, ", ",
         m, " micro-batch", m == 1 ? "" : "es", "): pass --budget ",
         (choice.least_bytes + 1023) / 1024, "KiB or more");
  }

  carto::Plan& plan = choice.plan;
  const carto::Graph g = make_graph(request.batch / best->options.micro_batches);
  plan.model = request.model;
  carto::set_fingerprint(plan, g);
  carto::detail::describe_plan(plan, g, request.mesh, hw, best->options, best->point);
  // The frontier over every ZeRO stage and micro-batch count: increasing time, decreasing memory.
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    return a.point.time_s != b.point.time_s ? a.point.time_s < b.point.time_s
                                            : a.point.peak_bytes < b.point.peak_bytes;
  });
  std::int64_t lowest = std::numeric_limits<std::int64_t>::max();
  for (const Candidate& c : all) {
    if (c.point.peak_bytes >= lowest) continue;
    lowest = c.point.peak_bytes;
    plan.frontier.push_back({.time_s = c.point.time_s,
                             .peak_bytes = c.point.peak_bytes,
                             .mesh = carto::to_string(request.mesh),
                             .zero_stage = c.options.zero_stage,
                             .micro_batches = c.options.micro_batches});
  }
  plan.search_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return choice;
}

carto::Plan load_plan(const std::string& file, const std::string& model,
                      const MakeGraph& make_graph, const carto::DeviceMesh& mesh,
                      std::int64_t batch) {
  std::ifstream in(file);
  if (!in) {
    fail("carto-demo: cannot read --plan file '", file, "': ", std::strerror(errno),
         "; pass a plan written by --save-plan, or drop --plan to search one");
  }
  std::ostringstream text;
  text << in.rdbuf();
  carto::Json j;
  try {
    j = carto::Json::parse(text.str());
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
  if (m < 1 || batch % m != 0) {
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

void write_json(const carto::Json& json, const std::string& file, const std::string& flag) {
  std::ofstream out(file);
  out << json.dump(2) << '\n';
  out.close();
  if (!out) {
    fail("carto-demo: cannot write the ", flag, " file '", file, "': ", std::strerror(errno),
         "; pass a path in a writable directory");
  }
}

}  // namespace demo
