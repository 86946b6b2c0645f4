#include "model_flags.hpp"

#include <carto/util/checked.hpp>

namespace carto::tools {

namespace {
constexpr std::string_view kLayersWhy = "the graph and the profile hold every layer's ops";
}  // namespace

std::vector<cli::FlagSpec> model_flag_specs() {
  return {
      {"model", true, "a preset (see 'carto-plan models'); the size flags override its values"},
      {"layers", true, "transformer blocks"},
      {"hidden", true, "hidden size h"},
      {"heads", true, "attention heads a (must divide hidden)"},
      {"vocab", true, "vocabulary size V"},
      {"seq", true, "sequence length s"},
      {"ffn-ratio", true, "MLP width as a multiple of hidden (default 4)"},
      {"untied-head", false, "give the LM head its own weights (default: tied to the embedding)"},
  };
}

GptConfig model_from_flags(const cli::Flags& flags, const std::string& command) {
  GptConfig config{.name = "custom"};
  if (const auto name = flags.text("model")) {
    const auto preset = find_model(*name);
    if (!preset) {
      std::string names;
      for (const GptConfig& c : model_presets())
        names += (names.empty() ? "" : ", ") + std::string(c.name);
      for (const LlamaConfig& c : llama_presets()) names += ", " + std::string(c.name);
      throw cli::UsageError(command + ": unknown model '" + *name + "'; the presets are " + names);
    }
    config = *preset;
  } else {
    std::string missing;
    for (const char* f : {"layers", "hidden", "heads", "vocab", "seq"}) {
      if (!flags.has(f)) missing += std::string(missing.empty() ? "" : ", ") + "--" + f;
    }
    if (!missing.empty()) {
      throw cli::UsageError(
          command +
          ": without --model, give --layers, --hidden, --heads, --vocab and --seq (missing: " +
          missing + ")");
    }
  }
  if (auto v = flags.positive_at_most("layers", kMaxLayers, kLayersWhy)) config.layers = *v;
  if (auto v = flags.positive("hidden")) config.hidden = *v;
  if (auto v = flags.positive("heads")) config.heads = *v;
  if (auto v = flags.positive("vocab")) config.vocab = *v;
  if (auto v = flags.positive("seq")) config.seq = *v;
  if (auto v = flags.positive("ffn-ratio")) config.ffn_ratio = *v;
  if (flags.has("untied-head")) config.tied_lm_head = false;
  if (auto problem = check_config(config)) throw cli::UsageError(command + ": " + *problem);
  return config;
}

std::optional<LlamaConfig> llama_from_flags(const cli::Flags& flags, const std::string& command) {
  const auto name = flags.text("model");
  if (!name) return std::nullopt;
  std::optional<LlamaConfig> config = find_llama(*name);
  if (!config) return std::nullopt;
  if (auto v = flags.positive_at_most("layers", kMaxLayers, kLayersWhy)) config->layers = *v;
  if (auto v = flags.positive("hidden")) config->hidden = *v;
  if (auto v = flags.positive("heads")) config->heads = *v;
  if (auto v = flags.positive("vocab")) config->vocab = *v;
  if (auto v = flags.positive("seq")) config->seq = *v;
  if (flags.has("ffn-ratio") || flags.has("untied-head")) {
    throw cli::UsageError(command + ": --ffn-ratio and --untied-head do not apply to " + *name +
                          " (a Llama preset: SwiGLU width ffn_hidden, untied head)");
  }
  if (auto problem = check_config(*config)) throw cli::UsageError(command + ": " + *problem);
  return config;
}

ModelChoice choose_model(const cli::Flags& flags, const std::string& command) {
  if (std::optional<LlamaConfig> llama = llama_from_flags(flags, command)) {
    return {.gpt = {.name = llama->name,
                    .layers = llama->layers,
                    .hidden = llama->hidden,
                    .heads = llama->heads,
                    .vocab = llama->vocab,
                    .seq = llama->seq,
                    .tied_lm_head = llama->tied_lm_head},
            .llama = llama};
  }
  return {.gpt = model_from_flags(flags, command), .llama = std::nullopt};
}

Graph build_model(const ModelChoice& model, const ProfileOptions& options) {
  return model.llama ? build_llama(*model.llama, options) : build_gpt(model.gpt, options);
}

std::optional<AttentionKind> attention_from_flags(const cli::Flags& flags) {
  const std::optional<std::string> v = flags.choice("attention", {"materialized", "fused"});
  if (!v) return std::nullopt;
  return *v == "fused" ? AttentionKind::fused : AttentionKind::materialized;
}

}  // namespace carto::tools
