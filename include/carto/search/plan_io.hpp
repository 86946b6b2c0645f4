// carto/search/plan_io.hpp — a Plan as JSON (save and load, checked field by field) and as text.
//
// Design note. JSON format "carto-plan/1": model fingerprint (ops, groups, tensors, shapes), the
// search space and its memory resolution, mesh, zero_stage, micro_batches, ops (name, strategy,
// input_specs, output_spec, checkpointed), predicted time and memory with their breakdowns,
// frontier, search_time_s. plan_from_json checks the format, every field and that the plan fits
// the given graph and mesh, naming the field that does not; a file written before the space was
// recorded reads as the full space. Every number is range-checked before any conversion, and every
// op's strategy_index must name the strategy its text fields spell (check_strategy_indices), so an
// edited index is an error rather than another plan run silently. read_plan_json reads a file with
// a size bound; save_plan writes one atomically.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/search/plan.hpp"
#include "carto/search/space.hpp"
#include "carto/spec/text.hpp"
#include "carto/util/checked.hpp"
#include "carto/util/files.hpp"
#include "carto/util/json.hpp"
#include "carto/util/units.hpp"

namespace carto {

// ---- JSON
// ----------------------------------------------------------------------------------------

inline constexpr std::string_view kPlanFormat = "carto-plan/1";

inline Json to_json(const Plan& p) {
  Json j;
  j["format"] = kPlanFormat;
  j["model"] = p.model;
  j["fingerprint"]["ops"] = p.fingerprint_ops;
  j["fingerprint"]["groups"] = p.fingerprint_groups;
  j["fingerprint"]["tensors"] = p.fingerprint_tensors;
  j["fingerprint"]["shapes"] = p.fingerprint_shapes;
  j["search_space"] = std::string(to_string_view(p.space));
  j["tolerance"] = p.tolerance;
  j["precision"] = std::string(to_string_view(p.precision));
  j["gradient_reduction"] = std::string(to_string_view(p.gradient_reduction));
  j["mesh"] = Json::array();
  for (const MeshAxis& a : p.mesh.axes()) {
    Json axis;
    axis["name"] = std::string(a.name.view());
    axis["size"] = a.size;
    j["mesh"].push_back(axis);
  }
  j["zero_stage"] = p.zero_stage;
  j["micro_batches"] = p.micro_batches;
  j["ops"] = Json::array();
  for (std::size_t k = 0; k < p.ops.size(); ++k) {
    const PlanOp& op = p.ops[k];
    Json o;
    o["name"] = op.name;
    o["strategy"] = op.strategy;
    o["strategy_index"] = static_cast<std::int64_t>(p.strategy[k]);
    o["input_specs"] = Json::array();
    for (const std::string& s : op.input_specs) o["input_specs"].push_back(s);
    o["output_spec"] = op.output_spec;
    o["checkpointed"] = op.checkpointed;
    j["ops"].push_back(o);
  }
  j["predicted"]["step_time_s"] = p.step_time_s;
  for (const auto& [k, v] : p.time_breakdown) j["predicted"]["time_breakdown"][k] = v;
  j["predicted"]["peak_memory_bytes"] = p.peak_memory_bytes;
  for (const auto& [k, v] : p.memory_breakdown) j["predicted"]["memory_breakdown"][k] = v;
  if (p.memory_breakdown.empty()) j["predicted"]["memory_breakdown"] = Json::object();
  if (p.time_breakdown.empty()) j["predicted"]["time_breakdown"] = Json::object();
  j["frontier"] = Json::array();
  for (const FrontierPoint& f : p.frontier) {
    Json o;
    o["time_s"] = f.time_s;
    o["peak_memory_bytes"] = f.peak_bytes;
    o["mesh"] = f.mesh;
    o["zero_stage"] = f.zero_stage;
    o["micro_batches"] = f.micro_batches;
    j["frontier"].push_back(o);
  }
  j["search_time_s"] = p.search_time_s;
  j["configurations"] = p.configurations;
  j["configurations_searched"] = p.configurations_searched;
  return j;
}

namespace detail {
inline const Json& field(const Json& j, std::string_view path, std::string_view name) {
  if (!j.is_object()) fail("carto: plan file: '", path, "' is not an object");
  const Json* v = j.find(name);
  if (v == nullptr)
    fail("carto: plan file: field '", path, path.empty() ? "" : ".", name, "' is missing");
  return *v;
}
template <class F>
auto typed(const Json& j, std::string_view path, F&& get) {
  try {
    return get(j);
  } catch (const Error& e) {
    fail("carto: plan file: field '", path, "' has the wrong type (", e.what(), ")");
  }
}
// A whole number in [lo, hi], checked before any narrowing conversion.
inline std::int64_t count_field(const Json& j, std::string_view path, std::int64_t lo,
                                std::int64_t hi) {
  const std::int64_t v = typed(j, path, [](const Json& x) { return x.as_int(); });
  if (v < lo || v > hi) {
    fail("carto: plan file: field '", path, "' is ", v, "; it must be a whole number in [", lo,
         ", ", hi, "]");
  }
  return v;
}
// A finite number in [lo, hi).
inline double real_field(const Json& j, std::string_view path, double lo, double hi) {
  const double v = typed(j, path, [](const Json& x) { return x.as_double(); });
  if (!std::isfinite(v) || !(v >= lo) || !(v < hi)) {
    fail("carto: plan file: field '", path, "' is ", v, "; it must be a finite number in [", lo,
         ", ", hi, ")");
  }
  return v;
}
// A plan's largest micro-batch count: one sequence per micro-batch of a 2^20-sequence batch.
inline constexpr std::int64_t kMaxPlanMicroBatches = std::int64_t{1} << 20;
inline constexpr double kMaxPlanSeconds = 1e12;  // step and search times, a bound for sanity

// Checks that every op's strategy_index names the strategy its text fields describe (enumerated
// again on the plan's mesh), so a plan cannot print as one plan and run another.
inline void check_strategy_indices(const Plan& p, const Graph& g) {
  StrategyCache cache(p.mesh, StrategyOptions{.precision = p.precision,
                                              .gradient_reduction = p.gradient_reduction});
  for (std::size_t k = 0; k < p.ops.size(); ++k) {
    const OpId o{static_cast<std::int32_t>(k)};
    const std::size_t n = cache.of(g, o).size();
    if (p.strategy[k] >= n) {
      fail("carto: plan file: field 'ops[", k, "].strategy_index' is ", p.strategy[k], "; op '",
           p.ops[k].name, "' has ", n, " strategies on mesh ", p.mesh, " (0 to ", n - 1, ")");
    }
    const Strategy s = cache.at(g, o, p.strategy[k]);
    const PlanOp& op = p.ops[k];
    std::vector<std::string> inputs;
    for (const ShardingSpec& spec : s.sharding.inputs) inputs.push_back(to_string(spec));
    const std::string output = to_string(s.sharding.output);
    const char* wrong = op.strategy != to_string(s) ? "strategy"
                        : op.input_specs != inputs  ? "input_specs"
                        : op.output_spec != output  ? "output_spec"
                                                    : nullptr;
    if (wrong != nullptr) {
      fail("carto: plan file: field 'ops[", k, "].", wrong, "' of op '", op.name,
           "' does not match its strategy_index ", p.strategy[k], ", which is ", to_string(s),
           "; the file was edited: restore it, or search the plan again");
    }
  }
}
}  // namespace detail

// The precision a plan file records (the graph it is checked against must be built at it). A file
// written before precision was recorded reads as fp32, which is what the runtime trained then.
inline Precision plan_file_precision(const Json& j) {
  const Json* v = j.is_object() ? j.find("precision") : nullptr;
  if (v == nullptr) return Precision::fp32;
  const std::string text =
      detail::typed(*v, "precision", [](const Json& x) { return x.as_string(); });
  if (text != "fp32" && text != "mixed_bf16")
    detail::fail("carto: plan file: field 'precision' is '", text, "'; use fp32 or mixed_bf16");
  return text == "fp32" ? Precision::fp32 : Precision::mixed_bf16;
}

// Reads a plan and checks it against the graph and mesh it is meant for; errors name the field.
inline Plan plan_from_json(const Json& j, const Graph& g, const DeviceMesh* mesh = nullptr) {
  using detail::count_field;
  using detail::field;
  using detail::real_field;
  using detail::typed;
  auto str = [](const Json& v) { return v.as_string(); };
  Plan p;
  const std::string format = typed(field(j, "", "format"), "format", str);
  if (format != kPlanFormat) {
    detail::fail("carto: plan file: field 'format' is '", format, "'; this carto reads '",
                 kPlanFormat, "'");
  }
  p.model = typed(field(j, "", "model"), "model", str);
  const Json& fp = field(j, "", "fingerprint");
  p.fingerprint_ops = count_field(field(fp, "fingerprint", "ops"), "fingerprint.ops", 0, kInt64Max);
  p.fingerprint_groups =
      count_field(field(fp, "fingerprint", "groups"), "fingerprint.groups", 0, kInt64Max);
  p.fingerprint_tensors =
      count_field(field(fp, "fingerprint", "tensors"), "fingerprint.tensors", 0, kInt64Max);
  if (p.fingerprint_ops != static_cast<std::int64_t>(g.num_ops()) ||
      p.fingerprint_groups != static_cast<std::int64_t>(g.groups().size()) ||
      p.fingerprint_tensors != static_cast<std::int64_t>(g.tensors().size())) {
    detail::fail("carto: plan file: field 'fingerprint' describes a model of ", p.fingerprint_ops,
                 " ops, ", p.fingerprint_groups, " groups and ", p.fingerprint_tensors,
                 " tensors; this model has ", g.num_ops(), ", ", g.groups().size(), " and ",
                 g.tensors().size(), ": the plan was made for another model ('", p.model, "')");
  }
  p.fingerprint_shapes = typed(field(fp, "fingerprint", "shapes"), "fingerprint.shapes", str);
  if (p.fingerprint_shapes != shape_fingerprint(g)) {
    detail::fail("carto: plan file: field 'fingerprint.shapes' is ", p.fingerprint_shapes,
                 " but this model's tensors give ", shape_fingerprint(g),
                 ": the plan was made for the same layers with other sizes (batch, sequence, "
                 "hidden, heads or vocabulary) of '",
                 p.model, "'; search again for these sizes");
  }
  if (const Json* v = j.find("search_space")) {
    const std::string space = typed(*v, "search_space", str);
    if (space != "standard" && space != "full")
      detail::fail("carto: plan file: field 'search_space' is '", space, "'; use standard or full");
    p.space = parse_search_space(space);
  } else {
    p.space = SearchSpace::full;  // written before the space was recorded
  }
  if (const Json* v = j.find("tolerance")) {
    p.tolerance = real_field(*v, "tolerance", 0.0, 1.0);
  }
  p.precision = plan_file_precision(j);
  p.gradient_reduction = compute_dtype(p.precision);
  if (const Json* v = j.find("gradient_reduction")) {
    const std::string text = typed(*v, "gradient_reduction", str);
    const std::optional<DType> dtype = parse_dtype(text);
    if (!dtype || (*dtype != DType::fp32 && *dtype != compute_dtype(p.precision)))
      detail::fail("carto: plan file: field 'gradient_reduction' is '", text, "'; a ",
                   to_string_view(p.precision), " plan reduces gradients in ",
                   p.precision == Precision::fp32 ? "fp32" : "fp32 or bf16");
    p.gradient_reduction = *dtype;
  }
  StaticVector<MeshAxis, kMaxMeshAxes> axes;
  const Json& mj = field(j, "", "mesh");
  for (const Json& a : typed(mj, "mesh", [](const Json& v) { return v.as_array(); })) {
    if (axes.size() == kMaxMeshAxes)
      detail::fail("carto: plan file: field 'mesh' has more than 3 axes");
    const std::string name = typed(field(a, "mesh[]", "name"), "mesh[].name", str);
    if (!is_valid_name(name))
      detail::fail("carto: plan file: field 'mesh[].name' is '", name, "', not an axis name");
    axes.push_back(
        {AxisName(name), count_field(field(a, "mesh[]", "size"), "mesh[].size", 1, kMaxDevices)});
  }
  p.mesh = detail::mesh_from_axes(axes);
  if (mesh != nullptr && !(*mesh == p.mesh)) {
    detail::fail("carto: plan file: field 'mesh' is ", p.mesh, " but the run's mesh is ", *mesh);
  }
  p.zero_stage = static_cast<int>(count_field(field(j, "", "zero_stage"), "zero_stage", 0, 3));
  p.micro_batches =
      count_field(field(j, "", "micro_batches"), "micro_batches", 1, detail::kMaxPlanMicroBatches);
  const auto& ops = typed(field(j, "", "ops"), "ops", [](const Json& v) { return v.as_array(); });
  if (ops.size() != g.num_ops()) {
    detail::fail("carto: plan file: field 'ops' has ", ops.size(), " entries; the model has ",
                 g.num_ops(), " ops");
  }
  const std::vector<std::string> names = op_names(g);
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const Json& o = ops[k];
    PlanOp op;
    op.name = typed(field(o, "ops[]", "name"), "ops[].name", str);
    if (op.name != names[k]) {
      detail::fail("carto: plan file: field 'ops[", k, "].name' is '", op.name,
                   "'; the model's op ", k, " is '", names[k], "'");
    }
    op.strategy = typed(field(o, "ops[]", "strategy"), "ops[].strategy", str);
    p.strategy.push_back(static_cast<std::size_t>(
        count_field(field(o, "ops[]", "strategy_index"),
                    detail::concat("ops[", k, "].strategy_index"), 0, kInt64Max)));
    for (const Json& s : typed(field(o, "ops[]", "input_specs"), "ops[].input_specs",
                               [](const Json& v) { return v.as_array(); })) {
      op.input_specs.push_back(typed(s, "ops[].input_specs[]", str));
      (void)parse_spec(op.input_specs.back());
    }
    op.output_spec = typed(field(o, "ops[]", "output_spec"), "ops[].output_spec", str);
    (void)parse_spec(op.output_spec);
    op.checkpointed = typed(field(o, "ops[]", "checkpointed"), "ops[].checkpointed",
                            [](const Json& v) { return v.as_bool(); });
    p.ops.push_back(std::move(op));
  }
  detail::check_strategy_indices(p, g);
  constexpr double kSeconds = detail::kMaxPlanSeconds;
  const Json& pred = field(j, "", "predicted");
  p.step_time_s =
      real_field(field(pred, "predicted", "step_time_s"), "predicted.step_time_s", 0, kSeconds);
  p.peak_memory_bytes = count_field(field(pred, "predicted", "peak_memory_bytes"),
                                    "predicted.peak_memory_bytes", 0, kInt64Max);
  for (const auto& [k, v] :
       typed(field(pred, "predicted", "time_breakdown"), "predicted.time_breakdown",
             [](const Json& x) { return x.as_object(); })) {
    p.time_breakdown[k] =
        real_field(v, detail::concat("predicted.time_breakdown.", k), 0, kSeconds);
  }
  for (const auto& [k, v] :
       typed(field(pred, "predicted", "memory_breakdown"), "predicted.memory_breakdown",
             [](const Json& x) { return x.as_object(); })) {
    p.memory_breakdown[k] =
        count_field(v, detail::concat("predicted.memory_breakdown.", k), 0, kInt64Max);
  }
  for (const Json& f :
       typed(field(j, "", "frontier"), "frontier", [](const Json& v) { return v.as_array(); })) {
    p.frontier.push_back(
        {.time_s = real_field(field(f, "frontier[]", "time_s"), "frontier[].time_s", 0, kSeconds),
         .peak_bytes = count_field(field(f, "frontier[]", "peak_memory_bytes"),
                                   "frontier[].peak_memory_bytes", 0, kInt64Max),
         .mesh = typed(field(f, "frontier[]", "mesh"), "frontier[].mesh", str),
         .zero_stage = static_cast<int>(
             count_field(field(f, "frontier[]", "zero_stage"), "frontier[].zero_stage", 0, 3)),
         .micro_batches =
             count_field(field(f, "frontier[]", "micro_batches"), "frontier[].micro_batches", 1,
                         detail::kMaxPlanMicroBatches)});
  }
  p.search_time_s = real_field(field(j, "", "search_time_s"), "search_time_s", 0, kSeconds);
  if (const Json* v = j.find("configurations"))
    p.configurations = count_field(*v, "configurations", 0, kInt64Max);
  if (const Json* v = j.find("configurations_searched"))
    p.configurations_searched = count_field(*v, "configurations_searched", 0, p.configurations);
  return p;
}

// The JSON of the plan file `path`: a regular file of at most kMaxPlanFileBytes (64 MiB), parsed;
// errors name the file.
inline Json read_plan_json(const std::string& path) {
  const std::string text = read_file_bounded(path, kMaxPlanFileBytes, "plan file");
  try {
    return Json::parse(text);
  } catch (const Error& e) {
    detail::fail("carto: the plan file '", path, "' is not a plan: ", e.what());
  }
}

// Writes the plan as JSON to `path` atomically (util/files.hpp): a failed write leaves the old
// file.
inline void save_plan(const Plan& p, const std::string& path) {
  atomic_write(path, to_json(p).dump(2) + "\n", "plan");
}

inline std::ostream& operator<<(std::ostream& out, const Plan& p) {
  out << "plan for " << p.model << " on mesh " << p.mesh << ", ZeRO stage " << p.zero_stage << ", "
      << p.micro_batches << " micro-batch" << (p.micro_batches == 1 ? "" : "es") << " ("
      << to_string_view(p.space) << " search space, memory resolution " << p.tolerance << ", "
      << to_string_view(p.precision) << ", gradients reduced in "
      << to_string_view(p.gradient_reduction) << ")\n";
  out << "predicted step time " << p.step_time_s << " s, peak memory "
      << format_bytes(p.peak_memory_bytes) << " per device\n";
  for (const auto& [k, v] : p.time_breakdown) {
    if (v > 0) out << "  time " << k << ": " << v << " s\n";
  }
  std::size_t width = 4;
  for (const PlanOp& op : p.ops) width = std::max(width, op.name.size());
  for (const PlanOp& op : p.ops) {
    out << "  " << op.name << std::string(width - op.name.size() + 2, ' ') << op.strategy
        << (op.checkpointed ? "  [checkpointed]" : "") << "\n";
  }
  return out;
}

}  // namespace carto
