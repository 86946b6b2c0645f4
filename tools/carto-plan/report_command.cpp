// carto-plan report: the HTML report of a saved plan.
//
//   carto-plan report PLAN.json -o PLAN.html [--compare OTHER.json] [--model NAME | size flags]
//                     [--batch N] [--attention KIND] [--hardware NAME] [--gpus-per-node N]
//                     [--memory SIZE] [--measured RUN.json]
//   carto-plan report RUN.json -o RUN.html      (RUN.json: carto-demo's --json report)
//
// Design note: a plan file names its model and records its mesh, micro-batches and precision, but
// not the global batch, the hardware or the budget it was searched under; those come from the same
// flags `plan` takes (the model defaults to the preset the file names). The graph is rebuilt from
// them and the file is checked against it (plan_from_json), so a wrong --batch is an error naming
// the fingerprint, not a wrong picture. A Llama preset (--model llama3-8b and its size flags)
// builds build_llama's graph, as `plan` did; a plan of one architecture read with the other's flags
// fails the same check. Without --attention the default (materialized) is tried, then fused: the
// file records no attention, and its fingerprint tells the two graphs apart. A training run's
// report (carto-demo --json, which holds the plan it trained, the model's sizes, the batch, the
// hardware profile and the budget) fills in every flag not given, and its measurements are drawn
// beside the prediction; a run of another plan than PLAN.json is refused.
#include "report_command.hpp"

#include <carto/util/files.hpp>
#include <carto/util/json.hpp>
#include <carto/util/units.hpp>
#include <exception>
#include <ostream>

#include "cli.hpp"
#include "commands.hpp"
#include "html.hpp"
#include "model_flags.hpp"
#include "report.hpp"

namespace carto::tools {

namespace {

// A plan file or a training report, read through the bounded reader: a directory, a device such as
// /dev/zero or a file above kMaxPlanFileBytes is refused naming `what` and the path.
Json read_json_file(const std::string& path, std::string_view what) {
  const std::string text = read_file_bounded(path, kMaxPlanFileBytes, what);
  try {
    return Json::parse(text);
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
                   {"attention", true,
                    "materialized or fused: the --attention the plan was made with (default: the "
                    "one whose graph the plan file's fingerprint names)"},
                   {"hardware", true, "h100 (default), h200, a100, pcie, cpu, or a profile file"},
                   {"gpus-per-node", true, "devices per node of the hardware"},
                   {"memory", true, "the memory budget per device (default: the device's)"},
                   {"measured", true,
                    "a training run of the plan (carto-demo --json): measured beside predicted"},
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

std::string describe_model(const LlamaConfig& c) {
  return std::string(c.name) + " (Llama): " + std::to_string(c.layers) + " layers, hidden " +
         std::to_string(c.hidden) + ", " + std::to_string(c.heads) + " heads, " +
         std::to_string(c.kv_heads) + " kv heads, SwiGLU width " + std::to_string(c.ffn_hidden) +
         ", vocabulary " + std::to_string(c.vocab) + ", sequence " + std::to_string(c.seq) +
         (c.tied_lm_head ? ", tied LM head" : ", untied LM head");
}

std::string describe_model(const ModelChoice& model) {
  return model.llama ? describe_model(*model.llama) : describe_model(model.gpt);
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

namespace {

constexpr std::string_view kRunFormat = "carto-demo-report/1";

bool is_run_report(const Json& j) {
  const Json* f = j.is_object() ? j.find("format") : nullptr;
  return f != nullptr && f->is_string() && f->as_string() == kRunFormat;
}

// The plan of a plan file, or the plan a run report holds.
Json plan_json_of(const Json& j, const std::string& path) {
  if (!is_run_report(j)) return j;
  const Json* plan = j.find("plan");
  if (plan == nullptr || !plan->is_object())
    detail::fail("the training report '", path, "' holds no 'plan'");
  return *plan;
}

Plan plan_from_file_json(const Json& j, const std::string& path, const GraphMaker& make_graph,
                         std::int64_t global_batch) {
  const Json* m = j.is_object() ? j.find("micro_batches") : nullptr;
  const std::int64_t micro_batch =
      micro_batch_of(global_batch, m != nullptr && m->is_int() ? m->as_int() : 1);
  try {
    // The graph at the precision plan_from_json gives the plan (fp32 when the file has none).
    const Graph g = make_graph(micro_batch, plan_file_precision(j));
    return plan_from_json(j, g);
  } catch (const Error& e) {
    detail::fail("'", path, "': ", e.what(), " (is it a plan of this model at global batch ",
                 global_batch, "?)");
  }
}

// The member at `path` of a run report, when it has the type `ok` accepts.
const Json* run_member(const Json& run, std::initializer_list<std::string_view> path) {
  const Json* j = &run;
  for (std::string_view key : path) {
    j = j->is_object() ? j->find(key) : nullptr;
    if (j == nullptr) return nullptr;
  }
  return j;
}

std::string run_int(const Json& run, std::initializer_list<std::string_view> path) {
  const Json* j = run_member(run, path);
  return j != nullptr && j->is_int() ? std::to_string(j->as_int()) : std::string();
}

// The Llama a run report describes (carto-demo --arch llama: model.architecture "llama" with its
// sizes), named `name`; nullopt for a GPT run.
std::optional<LlamaConfig> run_llama(const Json& run, const std::string& path,
                                     const std::string& name) {
  const Json* arch = run_member(run, {"model", "architecture"});
  if (arch == nullptr || !arch->is_string() || arch->as_string() != "llama") return std::nullopt;
  auto size = [&](std::string_view f) {
    const Json* j = run_member(run, {"model", f});
    if (j == nullptr || !j->is_int())
      throw cli::UsageError("report: '" + path + "' lacks model." + std::string(f));
    return j->as_int();
  };
  auto number = [&](std::string_view f) {
    const Json* j = run_member(run, {"model", f});
    if (j == nullptr || !j->is_number())
      throw cli::UsageError("report: '" + path + "' lacks model." + std::string(f));
    return j->as_double();
  };
  const Json* tied = run_member(run, {"model", "tied_lm_head"});
  LlamaConfig c{.name = name,
                .layers = size("layers"),
                .hidden = size("hidden"),
                .heads = size("heads"),
                .kv_heads = size("kv_heads"),
                .ffn_hidden = size("ffn_hidden"),
                .vocab = size("vocab"),
                .seq = size("seq"),
                .rope_theta = number("rope_theta"),
                .norm_eps = number("norm_eps"),
                .tied_lm_head = tied != nullptr && tied->is_bool() && tied->as_bool()};
  if (auto problem = check_config(c))
    throw cli::UsageError("report: '" + path + "' describes no valid Llama: " + *problem);
  return c;
}

bool same_plan(const Plan& a, const Plan& b) {
  return a.strategy == b.strategy && a.zero_stage == b.zero_stage &&
         a.micro_batches == b.micro_batches && a.precision == b.precision &&
         to_string(a.mesh) == to_string(b.mesh);
}

}  // namespace

Plan read_plan_file(const std::string& path, const GraphMaker& make_graph,
                    std::int64_t global_batch) {
  return plan_from_file_json(plan_json_of(read_json_file(path, "plan file"), path), path,
                             make_graph, global_batch);
}

void write_plan_report(const std::string& out_path, const Plan& plan, const Graph& graph,
                       const GraphMaker& make_graph, const std::string& model_description,
                       const HardwareProfile& hw, std::int64_t memory_budget,
                       std::int64_t global_batch, const std::optional<std::string>& compare_path,
                       const Measurements* measured) {
  ReportInput input;
  input.measured = measured;
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
  // A training run: the plan file itself, or --measured.
  const Json plan_file = read_json_file(*plan_path, "plan file");
  std::optional<std::string> run_path = probe.text("measured");
  if (!run_path && is_run_report(plan_file)) run_path = *plan_path;
  const Json run = run_path ? read_json_file(*run_path, "--measured training report") : Json();
  if (run_path && !is_run_report(run)) {
    throw cli::UsageError("report: --measured '" + *run_path + "' is not a training report (" +
                          std::string(kRunFormat) + ", from carto-demo --json)");
  }
  // Without model flags, the model is the run's, or the preset the plan file names.
  bool model_given = false;
  for (const cli::FlagSpec& f : model_flag_specs()) model_given = model_given || probe.has(f.name);
  if (!model_given && run_path) {
    for (const char* f : {"layers", "hidden", "heads", "vocab", "seq"}) {
      const std::string v = run_int(run, {"model", f});
      if (v.empty()) throw cli::UsageError("report: '" + *run_path + "' lacks model." + f);
      args.insert(args.end(), {std::string("--") + f, v});
    }
  } else if (!model_given) {
    const Json j = plan_json_of(plan_file, *plan_path);
    const Json* name = j.is_object() ? j.find("model") : nullptr;
    if (name == nullptr || !name->is_string() ||
        (!find_model(name->as_string()) && !find_llama(name->as_string())))
      throw cli::UsageError(
          "report: the plan file does not name a preset model; give --model or the size flags");
    args.insert(args.end(), {"--model", name->as_string()});
  }
  if (run_path) {  // the run's batch, hardware profile and budget, unless given
    if (!probe.has("batch") && !run_int(run, {"model", "batch"}).empty())
      args.insert(args.end(), {"--batch", run_int(run, {"model", "batch"})});
    const Json* hw = run_member(run, {"hardware_profile"});
    if (!probe.has("hardware") && hw != nullptr && hw->is_string())
      args.insert(args.end(), {"--hardware", hw->as_string()});
    if (!probe.has("memory") && !run_int(run, {"budget_bytes"}).empty())
      args.insert(args.end(), {"--memory", run_int(run, {"budget_bytes"})});
  }
  const cli::Flags flags("report", specs, args);
  ModelChoice model = choose_model(flags, "report");
  // A Llama run's own sizes (kv heads, SwiGLU width, rotary θ), which no size flag carries.
  std::string run_model_name = "llama";  // the first word of the run's model name
  if (const Json* n = run_path ? run_member(run, {"model", "name"}) : nullptr;
      n != nullptr && n->is_string() && !n->as_string().empty()) {
    run_model_name = n->as_string().substr(0, n->as_string().find(' '));
  }
  if (!model_given && run_path) {
    if (auto llama = run_llama(run, *run_path, run_model_name)) {
      model.llama = llama;
      model.gpt.name = llama->name;
      model.gpt.tied_lm_head = llama->tied_lm_head;
    }
  }
  const std::optional<AttentionKind> attention_flag = attention_from_flags(flags);
  AttentionKind attention = attention_flag.value_or(ProfileOptions{}.attention);
  const std::int64_t batch = flags.positive("batch").value_or(1);
  // A run records its dropout (carto-demo's default is 0); a plan file alone: the profiler's.
  const Json* run_dropout = run_path ? run_member(run, {"model", "dropout"}) : nullptr;
  const double dropout = run_dropout != nullptr && run_dropout->is_number()
                             ? run_dropout->as_double()
                             : ProfileOptions{}.dropout;
  const GraphMaker make_graph = [&model, dropout, &attention](std::int64_t micro_batch,
                                                              Precision precision) {
    ProfileOptions o{.precision = precision, .attention = attention, .dropout = dropout};
    o.batch = micro_batch;
    return build_model(model, o);
  };
  auto read_plan = [&] {
    return plan_from_file_json(plan_json_of(plan_file, *plan_path), *plan_path, make_graph, batch);
  };
  // Without --attention, a plan made with the other attention (the file's fingerprint tells the
  // two graphs apart) is read with that one; when neither fits, the default's error stands.
  Plan plan;
  try {
    plan = read_plan();
  } catch (...) {
    if (attention_flag) throw;
    const std::exception_ptr first = std::current_exception();
    attention =
        attention == AttentionKind::fused ? AttentionKind::materialized : AttentionKind::fused;
    try {
      plan = read_plan();
    } catch (...) {
      std::rethrow_exception(first);
    }
  }
  std::optional<Measurements> measured;
  if (run_path) {
    measured = measurements_from_json(run, *run_path);
    if (run_path != plan_path) {
      const Plan trained =
          plan_from_file_json(plan_json_of(run, *run_path), *run_path, make_graph, batch);
      if (!same_plan(plan, trained)) {
        throw cli::UsageError(
            "report: '" + *run_path + "' trained another plan (mesh " + to_string(trained.mesh) +
            ", ZeRO " + std::to_string(trained.zero_stage) + ") than '" + *plan_path + "' (mesh " +
            to_string(plan.mesh) + ", ZeRO " + std::to_string(plan.zero_stage) + ")");
      }
    }
  }
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
  write_plan_report(*out_path, plan, graph, make_graph, describe_model(model), hw, budget, batch,
                    flags.text("compare"), measured ? &*measured : nullptr);
  out << "wrote " << *out_path << "\n";
  return 0;
}

}  // namespace carto::tools
