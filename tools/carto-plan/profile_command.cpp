// carto-plan profile: FLOPs, parameters and memory of one training step, per layer and in total.
#include <carto/layers.hpp>
#include <carto/profile.hpp>
#include <carto/util/json.hpp>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "model_flags.hpp"

namespace carto::tools {

namespace {

std::vector<cli::FlagSpec> profile_flags() {
  std::vector<cli::FlagSpec> flags = model_flag_specs();
  flags.insert(
      flags.end(),
      {
          {"batch", true, "micro-batch size b (default 1)"},
          {"dtype", true, "bf16 (mixed precision, fp32 master weights and AdamW states) or fp32"},
          {"attention", true, "materialized (scores stored) or fused (flash-style)"},
          {"recompute", true, "none or full (checkpoint every transformer block)"},
          {"dropout", true, "dropout probability in [0, 1) (default 0.1; 0 removes dropout)"},
          {"layernorm-stats", true,
           "counted (default) or ignored (as Korthikanti et al. 2022 assume)"},
          {"json", false, "print one JSON object instead of the table"},
          {"help", false, "this text"},
      });
  return flags;
}

Json layer_json(const LayerProfile& l) {
  Json j;
  j["name"] = l.name.view();
  j["flops_forward"] = l.flops_forward;
  j["flops_backward_input"] = l.flops_backward_input;
  j["flops_backward_weight"] = l.flops_backward_weight;
  j["flops_recompute"] = l.flops_recompute;
  j["saved_activation_bytes"] = l.saved_bytes;
  j["params"] = l.params;
  return j;
}

Json memory_json(const MemoryBytes& m) {
  Json j;
  j["parameters"] = m.parameters;
  j["gradients"] = m.gradients;
  j["optimizer"] = m.optimizer;
  j["activations"] = m.activations;
  j["temporaries"] = m.temporaries;
  return j;
}

std::string pad(std::string s, std::size_t width, bool left = false) {
  if (s.size() >= width) return s;
  return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}

}  // namespace

int profile_command(const std::vector<std::string>& args, std::ostream& out) {
  const cli::Flags flags("profile", profile_flags(), args);
  if (flags.has("help")) {
    out << "usage: carto-plan profile (--model NAME | --layers L --hidden H --heads A --vocab V "
           "--seq S) [flags]\n"
        << flags.help();
    return 0;
  }

  // A Llama preset profiles build_llama's graph; its sizes fill the GPT fields the output shows.
  const ModelChoice model = choose_model(flags, "profile");
  const GptConfig& config = model.gpt;
  const std::optional<LlamaConfig>& llama = model.llama;

  ProfileOptions options;
  if (auto v = flags.positive("batch")) options.batch = *v;
  if (auto v = flags.choice("dtype", {"bf16", "fp32"})) {
    options.precision = *v == "fp32" ? Precision::fp32 : Precision::mixed_bf16;
  }
  if (auto v = attention_from_flags(flags)) options.attention = *v;
  if (auto v = flags.choice("recompute", {"none", "full"})) {
    options.recompute = *v == "full" ? Recompute::full : Recompute::none;
  }
  if (auto v = flags.probability("dropout")) options.dropout = *v;
  if (auto v = flags.choice("layernorm-stats", {"counted", "ignored"})) {
    options.layernorm_stats = *v == "ignored" ? LayerNormStats::ignored : LayerNormStats::counted;
  }

  const ModelProfile p = llama ? profile_llama(*llama, options) : profile_gpt(config, options);

  if (flags.has("json")) {
    Json j;
    j["model"]["name"] = std::string(config.name);
    j["model"]["layers"] = config.layers;
    j["model"]["hidden"] = config.hidden;
    j["model"]["heads"] = config.heads;
    j["model"]["vocab"] = config.vocab;
    j["model"]["seq"] = config.seq;
    if (llama) {
      j["model"]["architecture"] = "llama";
      j["model"]["kv_heads"] = llama->kv_heads;
      j["model"]["ffn_hidden"] = llama->ffn_hidden;
      j["model"]["rope_theta"] = llama->rope_theta;
    } else {
      j["model"]["ffn_ratio"] = config.ffn_ratio;
    }
    j["model"]["tied_lm_head"] = config.tied_lm_head;
    j["options"]["batch"] = options.batch;
    j["options"]["precision"] = to_string_view(options.precision);
    j["options"]["attention"] = to_string_view(options.attention);
    j["options"]["recompute"] = to_string_view(options.recompute);
    j["options"]["dropout"] = options.dropout;
    j["options"]["layernorm_stats"] = to_string_view(options.layernorm_stats);
    j["params"] = p.params;
    j["flops"]["forward"] = p.flops.forward;
    j["flops"]["backward"] = p.flops.backward;
    j["flops"]["backward_input"] = p.flops.backward_input;
    j["flops"]["backward_weight"] = p.flops.backward_weight;
    j["flops"]["recompute"] = p.flops.recompute;
    j["flops"]["step"] = p.flops.step;
    j["flops"]["matmul_step"] = p.flops.matmul_step;
    j["memory"]["params_bytes"] = p.memory.params_bytes;
    j["memory"]["grads_bytes"] = p.memory.grads_bytes;
    j["memory"]["optimizer_bytes"] = p.memory.optimizer_bytes;
    j["memory"]["activation_bytes_per_layer"] = p.memory.activation_bytes_per_layer;
    j["memory"]["activation_bytes"] = p.memory.activation_bytes;
    j["memory"]["peak_bytes"] = p.memory.peak_bytes;
    j["memory"]["peak_breakdown"] = memory_json(p.memory.peak);
    j["layers"] = Json::array();
    for (const LayerProfile& l : p.layers) j["layers"].push_back(layer_json(l));
    out << j.dump(2) << "\n";
    return 0;
  }

  out << "model " << config.name << ": layers " << config.layers << ", hidden " << config.hidden
      << ", heads " << config.heads << ", vocab " << config.vocab << ", seq " << config.seq
      << (config.tied_lm_head ? ", tied LM head" : ", untied LM head") << "\n"
      << "step: batch " << options.batch << ", " << to_string_view(options.precision) << ", "
      << to_string_view(options.attention) << " attention, recompute "
      << to_string_view(options.recompute) << ", dropout " << options.dropout
      << ", layernorm statistics " << to_string_view(options.layernorm_stats) << "\n\n";
  out << pad("layer", 18, true) << pad("forward", 15) << pad("backward", 15) << pad("recompute", 15)
      << pad("saved act.", 14) << pad("params", 16) << "\n";
  for (const LayerProfile& l : p.layers) {
    out << pad(std::string(l.name.view()), 18, true) << pad(cli::flops(l.flops_forward), 15)
        << pad(cli::flops(l.flops_backward()), 15) << pad(cli::flops(l.flops_recompute), 15)
        << pad(cli::bytes(l.saved_bytes), 14) << pad(cli::grouped(l.params), 16) << "\n";
  }
  out << "\nparameters        " << cli::grouped(p.params) << "\n"
      << "FLOPs per step    " << cli::flops(p.flops.step) << " (forward "
      << cli::flops(p.flops.forward) << ", backward " << cli::flops(p.flops.backward)
      << ", recompute " << cli::flops(p.flops.recompute) << "); matmul only "
      << cli::flops(p.flops.matmul_step) << "\n"
      << "model states      " << cli::bytes(p.memory.params_bytes) << " parameters + "
      << cli::bytes(p.memory.grads_bytes) << " gradients + " << cli::bytes(p.memory.optimizer_bytes)
      << " optimizer\n"
      << "activations       " << cli::bytes(p.memory.activation_bytes_per_layer)
      << " saved per transformer block, " << cli::bytes(p.memory.activation_bytes)
      << " at the end of forward\n"
      << "peak memory       " << cli::bytes(p.memory.peak_bytes) << " (parameters "
      << cli::bytes(p.memory.peak.parameters) << ", gradients "
      << cli::bytes(p.memory.peak.gradients) << ", optimizer "
      << cli::bytes(p.memory.peak.optimizer) << ", activations "
      << cli::bytes(p.memory.peak.activations) << ", temporaries "
      << cli::bytes(p.memory.peak.temporaries) << ")\n";
  return 0;
}

int models_command(const std::vector<std::string>& args, std::ostream& out) {
  const cli::Flags flags("models", {{"help", false, "this text"}}, args);
  if (flags.has("help")) {
    out << "usage: carto-plan models\n  lists the model presets\n";
    return 0;
  }
  out << pad("name", 16, true) << pad("layers", 8) << pad("hidden", 8) << pad("heads", 7)
      << pad("vocab", 8) << pad("seq", 6) << pad("parameters", 20) << "\n";
  for (const GptConfig& c : model_presets()) {
    out << pad(std::string(c.name), 16, true) << pad(std::to_string(c.layers), 8)
        << pad(std::to_string(c.hidden), 8) << pad(std::to_string(c.heads), 7)
        << pad(std::to_string(c.vocab), 8) << pad(std::to_string(c.seq), 6)
        << pad(cli::grouped(profile_gpt(c, {}).params), 20) << "\n";
  }
  for (const LlamaConfig& c : llama_presets()) {  // grouped-query: heads/kv_heads
    out << pad(std::string(c.name), 16, true) << pad(std::to_string(c.layers), 8)
        << pad(std::to_string(c.hidden), 8)
        << pad(std::to_string(c.heads) + "/" + std::to_string(c.kv_heads), 7)
        << pad(std::to_string(c.vocab), 8) << pad(std::to_string(c.seq), 6)
        << pad(cli::grouped(build_llama(c, {}).num_params()), 20) << "\n";
  }
  return 0;
}

}  // namespace carto::tools
