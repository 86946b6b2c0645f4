// carto-plan reshard: the cheapest sequence of collectives that turns one sharding spec of a tensor
// into another on a device mesh and hardware profile (carto/cost/reshard.hpp), with its time and
// peak extra memory per device.
#include <carto/cost.hpp>
#include <carto/spec.hpp>
#include <carto/util/checked.hpp>
#include <carto/util/json.hpp>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"

namespace carto::tools {

namespace {

std::vector<cli::FlagSpec> reshard_flags() {
  return {
      {"shape", true, "tensor extents, e.g. 8,2048,12288 or b=8,s=2048,h=12288"},
      {"from", true, "source spec, e.g. 'S(dp),R,R' or 'R,R,R|P(tp)'"},
      {"to", true, "target spec, e.g. 'R,R,S(tp)'"},
      {"mesh", true, "device mesh, e.g. dp=8,tp=8 (the last axis is innermost)"},
      {"hardware", true,
       "h100 (default), h200, a100, pcie, cpu, or <node>x<nodes> (e.g. h100x16); a mesh larger "
       "than one node spans the fewest nodes joined by InfiniBand"},
      {"hardware-file", true, "a hardware profile JSON file (e.g. written by bench_calibrate)"},
      {"dtype", true, "element type: fp32, bf16 (default), fp16, fp8_e4m3, fp8_e5m2"},
      {"make-partial", false, "allow the free local step that makes a replicated value Partial"},
      {"json", false, "print one JSON object instead of the table"},
      {"help", false, "this text"},
  };
}

std::string rate(double bytes_per_s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f GB/s", bytes_per_s / 1e9);
  return buf;
}

std::string pad(std::string s, std::size_t width) {
  if (s.size() < width) s.resize(width, ' ');
  return s;
}

std::string require(const cli::Flags& flags, const char* name) {
  const auto v = flags.text(name);
  if (!v)
    throw cli::UsageError(std::string("reshard: --") + name + " is required (see reshard --help)");
  return *v;
}

}  // namespace

int reshard_command(const std::vector<std::string>& args, std::ostream& out) {
  const cli::Flags flags("reshard", reshard_flags(), args);
  if (flags.has("help")) {
    out << "usage: carto-plan reshard --shape EXTENTS --from SPEC --to SPEC --mesh AXES "
           "[--hardware NAME | --hardware-file PATH] [--dtype T] [--json]\n"
        << flags.help();
    return 0;
  }
  const TensorShape shape = parse_shape(require(flags, "shape"));
  const ShardingSpec from = parse_spec(require(flags, "from"));
  const ShardingSpec to = parse_spec(require(flags, "to"));
  const DeviceMesh mesh = parse_mesh(require(flags, "mesh"));
  DType dtype = DType::bf16;
  if (const auto t = flags.choice("dtype", {"fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"}))
    dtype = *parse_dtype(*t);
  if (flags.has("hardware") && flags.has("hardware-file"))
    throw cli::UsageError("reshard: give --hardware or --hardware-file, not both");
  const HardwareProfile given =
      flags.has("hardware-file") ? load_hardware_profile(*flags.text("hardware-file"))
                                 : find_hardware_profile(flags.text("hardware").value_or("h100"));
  const HardwareProfile hw = hardware_for_devices(given, mesh.num_devices());
  const ReshardOptions options{.make_partial = flags.has("make-partial") ? MakePartial::allow
                                                                         : MakePartial::forbid};
  const std::int64_t tensor_bytes =
      checked_mul(shape.numel(), size_bytes(dtype), "the byte size of the --shape tensor");
  const ReshardPlan plan = reshard(shape, dtype, from, to, mesh, hw, options);

  if (flags.has("json")) {
    Json j;
    j["shape"] = to_string(shape);
    j["dtype"] = to_string_view(dtype);
    j["mesh"] = to_string(mesh);
    j["hardware"] = hw.name;
    j["from"] = to_string(from);
    j["to"] = to_string(to);
    Json axes = Json::array();
    for (std::size_t i = 0; i < mesh.num_axes(); ++i) {
      const LinkLevel& l = axis_link(mesh, i, hw);
      Json a;
      a["axis"] = std::string(mesh.axis(i).name.view());
      a["size"] = mesh.axis(i).size;
      a["link"] = l.name;
      a["bandwidth"] = l.bandwidth;
      a["latency_s"] = l.latency;
      axes.push_back(a);
    }
    j["axes"] = axes;
    Json steps = Json::array();
    for (const ReshardStep& s : plan.steps) {
      Json sj;
      sj["kind"] = to_string_view(s.kind);
      sj["axis"] = std::string(s.axis.view());
      if (s.dim != kNoDim) sj["dim"] = static_cast<std::int64_t>(s.dim);
      if (s.to_dim != kNoDim) sj["to_dim"] = static_cast<std::int64_t>(s.to_dim);
      sj["bytes"] = s.bytes;
      sj["time_s"] = s.time_s;
      sj["extra_bytes"] = s.extra_bytes;
      sj["after"] = to_string(s.after);
      steps.push_back(sj);
    }
    j["steps"] = steps;
    j["time_s"] = plan.time_s;
    j["extra_memory_bytes"] = plan.extra_memory_bytes;
    out << j.dump(2) << '\n';
    return 0;
  }

  out << "tensor " << shape << " " << dtype << ", " << cli::bytes(tensor_bytes) << "\n";
  out << "mesh " << mesh << " on " << hw.name << " (" << hw.description << ")\n";
  for (std::size_t i = 0; i < mesh.num_axes(); ++i) {
    const LinkLevel& l = axis_link(mesh, i, hw);
    out << "  axis " << pad(std::string(mesh.axis(i).name.view()), 6) << " -> " << pad(l.name, 11)
        << rate(l.bandwidth) << ", " << cli::seconds(l.latency) << " per step\n";
  }
  out << from << "  ->  " << to << "\n";
  if (plan.steps.empty()) out << "  (no steps: the specs are equal)\n";
  for (std::size_t k = 0; k < plan.steps.size(); ++k) {
    const ReshardStep& s = plan.steps[k];
    std::string where;
    if (s.dim != kNoDim) where = "dim " + std::to_string(s.dim);
    if (s.to_dim != kNoDim) where += " -> " + std::to_string(s.to_dim);
    out << "  " << k + 1 << ". " << pad(std::string(to_string_view(s.kind)), 15)
        << pad(std::string(s.axis.view()), 6) << pad(where, 12) << pad(cli::bytes(s.bytes), 12)
        << pad(cli::seconds(s.time_s), 12) << "-> " << s.after << "\n";
  }
  out << "time " << cli::seconds(plan.time_s) << ", peak extra memory "
      << cli::bytes(plan.extra_memory_bytes) << " per device\n";
  return 0;
}

}  // namespace carto::tools
