// carto-plan report: the HTML report of a saved plan.
//
//   carto-plan report PLAN.json -o PLAN.html [--compare OTHER.json] [--model NAME | size flags]
//                     [--batch N] [--hardware NAME] [--gpus-per-node N] [--memory SIZE]
//
// Design note: a plan file names its model and records its mesh, micro-batches and precision, but
// not the global batch, the hardware or the budget it was searched under; those come from the same
// flags `plan` takes (the model defaults to the preset the file names). The graph is rebuilt from
// them and the file is checked against it (plan_from_json), so a wrong --batch is an error naming
// the fingerprint, not a wrong picture.
#include "report_command.hpp"

#include <carto/util/json.hpp>
#include <carto/util/units.hpp>
#include <fstream>
#include <ostream>
#include <sstream>

#include "cli.hpp"
#include "commands.hpp"
#include "html.hpp"
#include "model_flags.hpp"
#include "report.hpp"

namespace carto::tools {

namespace {

Json read_json_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) detail::fail("cannot read the plan file '", path, "'");
  std::ostringstream text;
  text << file.rdbuf();
  try {
    return Json::parse(text.str());
  } catch (const Error& e) {
    detail::fail("'", path, "' is not JSON: ", e.what());
  }
}

std::vector<cli::FlagSpec> report_flags() {
  std::vector<cli::FlagSpec> flags = model_flag_specs();
  flags.insert(flags.end(),
               {
                   {"out", true, "the HTML file to write (also -o)"},
                   {"compare", true, "another plan file of the same model, shown beside it"},
                   {"batch", true, "the global batch the plan was made for (default 1)"},
                   {"hardware", true, "h100 (default), h200, a100, pcie, cpu, or a profile file"},
                   {"gpus-per-node", true, "devices per node of the hardware"},
                   {"memory", true, "the memory budget per device (default: the device's)"},
                   {"help", false, "this text"},
               });
  return flags;
}

}  // namespace

std::string describe_model(const GptConfig& c) {
  return std::string(c.name) + ": " + std::to_string(c.layers) + " layers, hidden " +
         std::to_string(c.hidden) + ", " + std::to_string(c.heads) + " heads, vocabulary " +
         std::to_string(c.vocab) + ", sequence " + std::to_string(c.seq) + ", MLP ×" +
         std::to_string(c.ffn_ratio) + (c.tied_lm_head ? ", tied LM head" : ", untied LM head");
}

namespace {

std::int64_t micro_batch_of(std::int64_t global_batch, std::int64_t micro_batches) {
  if (micro_batches < 1 || global_batch % micro_batches != 0) {
    detail::fail("the plan's ", micro_batches, " micro-batches do not divide the global batch ",
                 global_batch, " (give the --batch the plan was made for)");
  }
  return global_batch / micro_batches;
}

}  // namespace

Plan read_plan_file(const std::string& path, const GraphMaker& make_graph,
                    std::int64_t global_batch) {
  const Json j = read_json_file(path);
  const Json* m = j.is_object() ? j.find("micro_batches") : nullptr;
  const Json* precision = j.is_object() ? j.find("precision") : nullptr;
  const std::int64_t micro = m != nullptr && m->is_int() ? m->as_int() : 1;
  const Precision p = precision != nullptr && precision->is_string() &&
                              precision->as_string() == to_string_view(Precision::fp32)
                          ? Precision::fp32
                          : Precision::mixed_bf16;
  const Graph g = make_graph(micro_batch_of(global_batch, micro), p);
  try {
    return plan_from_json(j, g);
  } catch (const Error& e) {
    detail::fail("'", path, "': ", e.what(), " (is it a plan of this model at global batch ",
                 global_batch, "?)");
  }
}

void write_plan_report(const std::string& out_path, const Plan& plan, const Graph& graph,
                       const GraphMaker& make_graph, const std::string& model_description,
                       const HardwareProfile& hw, std::int64_t memory_budget,
                       std::int64_t global_batch, const std::optional<std::string>& compare_path) {
  ReportInput input;
  input.plan = &plan;
  input.graph = &graph;
  input.hardware = hw;
  input.memory_budget = memory_budget;
  input.global_batch = global_batch;
  input.model_description = model_description;
  std::optional<Plan> other;
  if (compare_path) {
    other = read_plan_file(*compare_path, make_graph, global_batch);
    input.compare = &*other;
    input.compare_label = *compare_path;
  }
  html::write_file_atomically(out_path, render_report(input));
}

int report_command(const std::vector<std::string>& raw, std::ostream& out) {
  // The plan file is the one argument that is neither a flag nor a flag's value; -o is --out.
  const std::vector<cli::FlagSpec> specs = report_flags();
  std::vector<std::string> args;
  std::optional<std::string> plan_path;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const std::string arg = raw[i] == "-o" ? "--out" : raw[i];
    if (arg.rfind("--", 0) == 0) {
      args.push_back(arg);
      bool takes_value = false;
      for (const cli::FlagSpec& f : specs)
        takes_value = takes_value || (f.name == arg.substr(2) && f.takes_value);
      if (takes_value && i + 1 < raw.size()) args.push_back(raw[++i]);
    } else if (!plan_path) {
      plan_path = arg;
    } else {
      throw cli::UsageError("report: give one plan file, got '" + *plan_path + "' and '" + arg +
                            "'");
    }
  }
  const cli::Flags probe("report", specs, args);
  if (probe.has("help")) {
    out << "usage: carto-plan report PLAN.json -o PLAN.html [flags]\n" << probe.help();
    return 0;
  }
  if (!plan_path)
    throw cli::UsageError("report: give the plan file: carto-plan report PLAN.json -o PLAN.html");
  const auto out_path = probe.text("out");
  if (!out_path) throw cli::UsageError("report: give the HTML file to write with -o PLAN.html");
  // Without model flags, the model is the preset the plan file names.
  bool model_given = false;
  for (const cli::FlagSpec& f : model_flag_specs()) model_given = model_given || probe.has(f.name);
  if (!model_given) {
    const Json j = read_json_file(*plan_path);
    const Json* name = j.is_object() ? j.find("model") : nullptr;
    if (name == nullptr || !name->is_string() || !find_model(name->as_string()))
      throw cli::UsageError(
          "report: the plan file does not name a preset model; give --model or the size flags");
    args.insert(args.end(), {"--model", name->as_string()});
  }
  const cli::Flags flags("report", specs, args);
  const GptConfig config = model_from_flags(flags, "report");
  const std::int64_t batch = flags.positive("batch").value_or(1);
  const GraphMaker make_graph = [&config](std::int64_t micro_batch, Precision precision) {
    ProfileOptions o{.precision = precision};
    o.batch = micro_batch;
    return build_gpt(config, o);
  };
  const Plan plan = read_plan_file(*plan_path, make_graph, batch);
  const std::string hw_name = flags.text("hardware").value_or("h100");
  HardwareProfile hw = hw_name.find('/') != std::string::npos || hw_name.ends_with(".json")
                           ? load_hardware_profile(hw_name)
                           : find_hardware_profile(hw_name);
  if (auto per_node = flags.positive("gpus-per-node")) {
    if (!hw.links.empty()) hw.links.front().devices = *per_node;
  }
  hw = hardware_for_devices(hw, plan.mesh.num_devices());
  std::int64_t budget = hw.memory_capacity;
  if (auto m = flags.text("memory")) {
    try {
      budget = parse_bytes(*m);
    } catch (const Error& e) {
      throw cli::UsageError(std::string("report: --memory: ") + e.what());
    }
  }
  const Graph graph = make_graph(micro_batch_of(batch, plan.micro_batches), plan.precision);
  write_plan_report(*out_path, plan, graph, make_graph, describe_model(config), hw, budget, batch,
                    flags.text("compare"));
  out << "wrote " << *out_path << "\n";
  return 0;
}

}  // namespace carto::tools
