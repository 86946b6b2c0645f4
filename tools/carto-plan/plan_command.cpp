// carto-plan plan: the fastest sharded plan of a GPT model that fits a per-device memory budget.
#include <carto/cost.hpp>
#include <carto/layers.hpp>
#include <carto/search.hpp>
#include <carto/util/checked.hpp>
#include <carto/util/files.hpp>
#include <carto/util/json.hpp>
#include <carto/util/numbers.hpp>
#include <carto/util/units.hpp>
#include <iomanip>
#include <iostream>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "model_flags.hpp"
#include "report_command.hpp"

namespace carto::tools {

namespace {

std::vector<cli::FlagSpec> plan_flags() {
  std::vector<cli::FlagSpec> flags = model_flag_specs();
  flags.insert(
      flags.end(),
      {
          {"devices", true, "number of devices (every mesh of 1-3 axes over them is searched)"},
          {"gpus-per-node", true,
           "devices per node of the hardware (default: the profile's node size)"},
          {"hardware", true,
           "h100, h200, a100, pcie, cpu, or a profile file written by bench_calibrate"},
          {"memory", true, "memory budget per device: 80GiB, 40GB, 512MiB or bytes"},
          {"batch", true, "global batch (sequences per step, default 1)"},
          {"micro-batches", true, "candidate micro-batch counts, comma-separated (default 1)"},
          {"zero", true, "candidate ZeRO stages, comma-separated (default 0,1,2,3)"},
          {"dtype", true, "bf16 (mixed precision) or fp32"},
          {"attention", true,
           "materialized (default: the scores are a tensor) or fused (flash-style, one op)"},
          {"gradient-reduction", true,
           "dtype of the gradient all-reduce: bf16 (default under --dtype bf16) or fp32"},
          {"checkpoint", true, "search (default), none or all"},
          {"pin", true,
           "OP=SPEC: fix an op's output spec (op names as printed, '*' matches any text)", true},
          {"mesh-axes", true, "search logical meshes of at most this many axes, 1-3 (default 3)"},
          {"mesh", true,
           "search this logical mesh only (x=8,y=128: axis sizes, the last axis innermost)"},
          {"time-limit", true, "stop the search after this many seconds (default: no limit)"},
          {"space", true,
           "standard (default: mesh order, stored reads, one layout per checkpoint class of "
           "identical blocks) or full (every strategy of every op; the reference, for small "
           "models)"},
          {"tolerance", true,
           "memory resolution ε where tables are combined (default 0.02; 0 = exact)"},
          {"frontier", false,
           "also print the time/memory frontier (searches every configuration: without it, "
           "configurations whose least time cannot beat the plan found are skipped)"},
          {"verbose", false,
           "print each DP the search runs on stderr as it ends (configuration, seconds, labels)"},
          {"json", false, "print one JSON object"},
          {"out", true, "also write the plan as JSON to this file"},
          {"report", true, "also write the plan's HTML report to this file"},
          {"compare", true, "with --report: another plan file of the model, shown beside it"},
          {"help", false, "this text"},
      });
  return flags;
}

std::vector<std::int64_t> positive_list(const std::string& text, const std::string& flag) {
  std::vector<std::int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::optional<std::int64_t> v = parse_int64(item);
    if (!v || *v < 0) {
      throw cli::UsageError("plan: --" + flag + " needs comma-separated whole numbers, got '" +
                            text + "'");
    }
    out.push_back(*v);
  }
  if (out.empty()) throw cli::UsageError("plan: --" + flag + " needs at least one value");
  return out;
}

}  // namespace

int plan_command(const std::vector<std::string>& args, std::ostream& out) {
  const cli::Flags flags("plan", plan_flags(), args);
  if (flags.has("help")) {
    out << "usage: carto-plan plan (--model NAME | size flags) --devices N --memory SIZE [flags]\n"
        << flags.help();
    return 0;
  }
  // A Llama preset plans build_llama's graph.
  const ModelChoice model = choose_model(flags, "plan");
  const std::int64_t devices =
      flags.positive_at_most("devices", kMaxDevices, "2^20, beyond any cluster built").value_or(0);
  if (devices == 0) throw cli::UsageError("plan: give --devices N");
  // Output paths are checked before the search, which may run for minutes.
  for (const char* flag : {"out", "report"}) {
    if (auto path = flags.text(flag)) {
      try {
        check_output_path(*path, std::string("--") + flag + " file");
      } catch (const Error& e) {
        throw cli::UsageError(std::string("plan: --") + flag + ": " + e.what());
      }
    }
  }
  const std::string hw_name = flags.text("hardware").value_or("h100");
  HardwareProfile hw;
  if (hw_name == "cpu") {  // this machine's calibrated profile when bench_calibrate wrote one
    const CpuProfileChoice cpu = cpu_profile(devices, std::thread::hardware_concurrency());
    hw = cpu.profile;
    std::cerr << "carto-plan: " << cpu.note << "\n";
  } else {
    hw = hw_name.find('/') != std::string::npos || hw_name.ends_with(".json")
             ? load_hardware_profile(hw_name)
             : find_hardware_profile(hw_name);
  }
  if (auto per_node = flags.positive("gpus-per-node")) {
    if (*per_node < devices && devices % *per_node != 0) {
      throw cli::UsageError("plan: --gpus-per-node " + std::to_string(*per_node) +
                            " does not divide --devices " + std::to_string(devices) +
                            "; every node holds the same number of devices");
    }
    if (!hw.links.empty()) hw.links.front().devices = *per_node;
  }
  hw = hardware_for_devices(hw, devices);

  SearchOptions options;
  if (auto m = flags.text("memory")) {
    try {
      options.memory_budget = parse_bytes(*m);
    } catch (const Error& e) {
      throw cli::UsageError(std::string("plan: --memory: ") + e.what());
    }
  } else {
    options.memory_budget = hw.memory_capacity;
  }
  const std::int64_t batch = flags.positive("batch").value_or(1);
  if (auto v = flags.text("micro-batches"))
    options.micro_batches = positive_list(*v, "micro-batches");
  if (auto v = flags.text("zero")) {
    options.zero_stages.clear();
    for (std::int64_t z : positive_list(*v, "zero")) {
      if (z > 3)
        throw cli::UsageError("plan: --zero stages are 0, 1, 2 or 3, got " + std::to_string(z));
      options.zero_stages.push_back(static_cast<int>(z));
    }
  }
  if (auto v = flags.choice("dtype", {"bf16", "fp32"})) {
    options.precision = *v == "fp32" ? Precision::fp32 : Precision::mixed_bf16;
  }
  if (auto v = flags.choice("gradient-reduction", {"bf16", "fp32"})) {
    if (*v == "bf16" && options.precision == Precision::fp32)
      throw cli::UsageError(
          "plan: --gradient-reduction bf16 needs --dtype bf16 (fp32 training reduces in fp32)");
    options.gradient_reduction = *v == "fp32" ? DType::fp32 : DType::bf16;
  }
  if (auto v = flags.choice("checkpoint", {"search", "none", "all"})) {
    options.checkpoint = *v == "none"  ? CheckpointChoice::none
                         : *v == "all" ? CheckpointChoice::all
                                       : CheckpointChoice::search;
  }
  options.tolerance = 0.02;
  if (auto v = flags.text("tolerance")) {
    const std::optional<double> t = parse_real(*v);
    if (!t || !(*t >= 0 && *t < 1)) {
      throw cli::UsageError("plan: --tolerance needs a number in [0, 1), got '" + *v + "'");
    }
    options.tolerance = *t;
  }
  for (const std::string& pin : flags.all("pin")) options.pins.push_back(parse_pin(pin));
  if (auto v = flags.positive("mesh-axes")) {
    if (*v > 3) throw cli::UsageError("plan: --mesh-axes is 1, 2 or 3, got " + std::to_string(*v));
    options.max_mesh_axes = static_cast<std::size_t>(*v);
  }
  if (auto v = flags.text("mesh")) {
    DeviceMesh mesh;
    try {
      mesh = parse_mesh(*v);
    } catch (const Error& e) {
      throw cli::UsageError(std::string("plan: --mesh: ") + e.what());
    }
    if (mesh.num_devices() != devices) {
      throw cli::UsageError("plan: --mesh " + *v + " has " + std::to_string(mesh.num_devices()) +
                            " devices; --devices is " + std::to_string(devices));
    }
    options.meshes = {mesh};
  }
  if (auto t = flags.positive_real("time-limit")) options.time_limit_s = *t;
  if (auto v = flags.choice("space", {"standard", "full"})) {
    options.space = parse_search_space(*v);
  }

  if (flags.has("frontier")) options.time_bounds = false;
  if (flags.has("verbose")) {
    options.progress = [](const SearchEvent& e) {
      std::cerr << "carto-plan: [" << std::fixed << std::setprecision(1) << e.elapsed_s << " s] "
                << to_string_view(e.kind) << " DP, mesh " << e.mesh << ", ZeRO " << e.zero_stage
                << ", " << e.micro_batches << " micro-batches: " << std::setprecision(2)
                << e.seconds << " s, " << e.labels << " labels";
      if (e.kind == SearchEvent::Kind::least_time) {
        std::cerr << ", least time " << std::defaultfloat << e.least_time_s << " s";
      } else if (e.kind == SearchEvent::Kind::least_memory) {
        std::cerr << ", least memory " << format_bytes(e.least_bytes);
      } else {
        std::cerr << ", " << e.points << " plans that fit";
      }
      std::cerr << std::defaultfloat << "\n";
    };
  }
  ProfileOptions profile{.precision = options.precision};
  if (auto v = attention_from_flags(flags)) profile.attention = *v;
  auto make_graph = [&](std::int64_t micro_batch) {
    ProfileOptions o = profile;
    o.batch = micro_batch;
    return build_model(model, o);
  };
  const Plan plan = search(make_graph, model.gpt.name, batch, devices, hw, options);

  const Json j = to_json(plan);
  if (auto path = flags.text("out")) save_plan(plan, *path);
  if (auto path = flags.text("report")) {
    const GraphMaker graph_of = [&](std::int64_t micro_batch, Precision) {
      return make_graph(micro_batch);
    };
    write_plan_report(*path, plan, make_graph(batch / plan.micro_batches), graph_of,
                      describe_model(model), hw, options.memory_budget, batch,
                      flags.text("compare"));
  } else if (flags.has("compare")) {
    throw cli::UsageError("plan: --compare needs --report FILE.html");
  }
  if (flags.has("json")) {
    out << j.dump(2) << "\n";
    return 0;
  }
  out << plan;
  if (flags.has("frontier")) {
    out << "frontier (time, peak memory per device):\n";
    for (const FrontierPoint& f : plan.frontier) {
      out << "  " << f.time_s << " s  " << format_bytes(f.peak_bytes) << "  mesh " << f.mesh
          << ", ZeRO " << f.zero_stage << ", " << f.micro_batches << " micro-batches\n";
    }
  }
  out << "search time " << plan.search_time_s << " s (" << plan.configurations_searched << " of "
      << plan.configurations << " configurations searched)\n";
  return 0;
}

}  // namespace carto::tools
