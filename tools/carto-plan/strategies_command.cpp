// carto-plan strategies: every op of one transformer block of a GPT model, with its number of
// sharding strategies on a mesh and the cheapest few by forward + backward time
// (carto/search/strategy.hpp). The ranking is per op in isolation: resharding between ops is the
// search's business.
#include <algorithm>
#include <carto/cost.hpp>
#include <carto/layers.hpp>
#include <carto/search.hpp>
#include <carto/spec.hpp>
#include <carto/util/json.hpp>
#include <cstdio>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"

namespace carto::tools {

namespace {

std::vector<cli::FlagSpec> strategies_flags() {
  return {
      {"model", true, "a preset (see 'carto-plan models'), e.g. gpt3-175b"},
      {"mesh", true, "device mesh, e.g. 8x8 (axes x, y) or dp=8,tp=8 (the last axis is innermost)"},
      {"hardware", true,
       "h100 (default), h200, a100, pcie, cpu, or <node>x<nodes>; a mesh larger than one node "
       "spans "
       "the fewest nodes joined by InfiniBand"},
      {"batch", true, "micro-batch size b (default 1)"},
      {"attention", true, "materialized (default) or fused"},
      {"top", true, "how many of the cheapest strategies to list per op (default 3)"},
      {"json", false, "print one JSON object with an `ops` list instead of the table"},
      {"help", false, "this text"},
  };
}

std::string einsum_text(const Einsum& e) {
  std::string t;
  for (std::size_t i = 0; i < e.inputs.size(); ++i) {
    if (i > 0) t += ',';
    for (char c : e.inputs[i]) t += c;
  }
  t += "->";
  for (char c : e.output) t += c;
  return t;
}

std::string describe(const Graph& g, const Op& op) {
  std::string d(to_string_view(op.kind));
  if (op.kind == OpKind::einsum) d += " " + einsum_text(op.einsum);
  return d + " " + detail::concat(g.tensor(op.output).shape);
}

struct Ranked {
  const Strategy* strategy = nullptr;
  StrategyTime time{};
};

void append_collectives(Json& out, const CollectiveList& calls, std::string_view phase) {
  for (const CollectiveCall& c : calls) {
    Json j;
    j["phase"] = phase;
    j["kind"] = to_string_view(c.kind);
    j["axis"] = c.axis.view();
    j["bytes"] = c.bytes;
    out.push_back(std::move(j));
  }
}

Json strategy_json(const Ranked& r) {
  const Strategy& s = *r.strategy;
  Json j;
  j["kind"] = to_string_view(s.kind);
  j["variant"] = to_string_view(s.sharding.variant);
  j["inputs"] = Json::array();
  for (const ShardingSpec& in : s.sharding.inputs) j["inputs"].push_back(to_string(in));
  j["output"] = to_string(s.sharding.output);
  j["gradients"] = Json::array();
  for (const ShardingSpec& gr : s.gradients) j["gradients"].push_back(to_string(gr));
  j["time_s"] = r.time.total_s();
  j["forward_s"] = r.time.forward_s();
  j["backward_s"] = r.time.backward_s();
  j["flops_forward"] = s.cost.flops_forward;
  j["flops_backward"] = s.cost.flops_backward();
  j["comm_bytes"] = s.comm_bytes();
  j["memory_bytes"] = s.memory.total();
  j["memory"]["parameters"] = s.memory.parameters;
  j["memory"]["gradients"] = s.memory.gradients;
  j["memory"]["optimizer"] = s.memory.optimizer;
  j["memory"]["activations"] = s.memory.activations;
  j["memory"]["temporaries"] = s.memory.temporaries;
  Json calls = Json::array();
  append_collectives(calls, s.forward, "forward");
  append_collectives(calls, s.backward, "backward");
  append_collectives(calls, s.gradient_sync, "gradient_sync");
  j["collectives"] = std::move(calls);
  return j;
}

}  // namespace

int strategies_command(const std::vector<std::string>& args, std::ostream& out) {
  const cli::Flags flags("strategies", strategies_flags(), args);
  if (flags.has("help")) {
    out << "usage: carto-plan strategies --model NAME --mesh AXES [--hardware NAME] [--batch B] "
           "[--top K] [--json]\n"
        << flags.help();
    return 0;
  }
  const auto name = flags.text("model");
  if (!name) throw cli::UsageError("strategies: --model is required (see 'carto-plan models')");
  const auto preset = find_model(*name);
  if (!preset) {
    std::string names;
    for (const GptConfig& c : model_presets())
      names += (names.empty() ? "" : ", ") + std::string(c.name);
    throw cli::UsageError("strategies: unknown model '" + *name + "'; the presets are " + names);
  }
  const auto mesh_text = flags.text("mesh");
  if (!mesh_text) throw cli::UsageError("strategies: --mesh is required, e.g. --mesh 8x8");
  const DeviceMesh mesh = parse_mesh(*mesh_text);
  const HardwareProfile hw = hardware_for_devices(
      find_hardware_profile(flags.text("hardware").value_or("h100")), mesh.num_devices());
  const std::int64_t top = flags.positive("top").value_or(3);
  ProfileOptions options{.batch = flags.positive("batch").value_or(1)};
  if (auto v = flags.choice("attention", {"materialized", "fused"})) {
    options.attention = *v == "fused" ? AttentionKind::fused : AttentionKind::materialized;
  }

  GptConfig config = *preset;
  config.layers = 1;
  const Graph g = build_gpt(config, options);
  const OpGroup* block = nullptr;
  for (const OpGroup& grp : g.groups()) {
    if (grp.kind == GroupKind::transformer_block) block = &grp;
  }
  const StrategyOptions strategy_options{.precision = options.precision};

  Json ops = Json::array();
  std::string table;
  std::int64_t total = 0;
  for (std::int32_t k = block->first_op; k < block->end_op; ++k) {
    const OpId id{k};
    const Op& op = g.op(id);
    const std::vector<Strategy> all = enumerate_strategies(g, id, mesh, strategy_options);
    total += static_cast<std::int64_t>(all.size());
    std::vector<Ranked> ranked;
    ranked.reserve(all.size());
    for (const Strategy& s : all)
      ranked.push_back({.strategy = &s, .time = strategy_time(s, mesh, hw)});
    // Cheapest first; ties by communicated bytes, then memory, then enumeration order.
    std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
      if (a.time.total_s() != b.time.total_s()) return a.time.total_s() < b.time.total_s();
      if (a.strategy->comm_bytes() != b.strategy->comm_bytes())
        return a.strategy->comm_bytes() < b.strategy->comm_bytes();
      return a.strategy->memory.total() < b.strategy->memory.total();
    });
    const std::size_t shown = std::min(ranked.size(), static_cast<std::size_t>(top));
    Json j;
    j["op"] = k;
    j["kind"] = to_string_view(op.kind);
    if (op.kind == OpKind::einsum) j["einsum"] = einsum_text(op.einsum);
    j["output_shape"] = detail::concat(g.tensor(op.output).shape);
    j["strategies"] = static_cast<std::int64_t>(all.size());
    j["best"] = Json::array();
    table += detail::concat("op ", k, "  ", describe(g, op), "  ", all.size(), " strategies\n");
    for (std::size_t r = 0; r < shown; ++r) {
      j["best"].push_back(strategy_json(ranked[r]));
      const Strategy& s = *ranked[r].strategy;
      table += detail::concat("    ", r + 1, ". ", to_string(s), "\n       time ",
                              cli::seconds(ranked[r].time.total_s()), " (forward ",
                              cli::seconds(ranked[r].time.forward_s()), ", backward ",
                              cli::seconds(ranked[r].time.backward_s()), "), comm ",
                              cli::bytes(s.comm_bytes()), ", memory ", cli::bytes(s.memory.total()),
                              "\n");
    }
    ops.push_back(j);
  }

  if (flags.has("json")) {
    Json j;
    j["model"] = std::string(config.name);
    j["mesh"] = to_string(mesh);
    j["devices"] = mesh.num_devices();
    j["hardware"] = hw.name;
    j["batch"] = options.batch;
    j["attention"] = to_string_view(options.attention);
    j["block"] = std::string(block->name.view());
    j["total_strategies"] = total;
    j["ops"] = ops;
    out << j.dump(2) << "\n";
    return 0;
  }
  out << "model " << config.name << ", one transformer block (hidden " << config.hidden
      << ", heads " << config.heads << ", seq " << config.seq << ", batch " << options.batch << ", "
      << to_string_view(options.attention) << " attention)\n"
      << "mesh " << mesh << " (" << mesh.num_devices() << " devices) on " << hw.name << "; "
      << total << " strategies over " << (block->end_op - block->first_op) << " ops\n"
      << "per op, cheapest first by forward + backward time (compute roofline + collectives inside "
         "the "
         "op and gradient reductions; resharding between ops not included)\n\n"
      << table;
  return 0;
}

}  // namespace carto::tools
