// The model flags shared by carto-plan's subcommands: a preset (--model) and the size flags that
// build or override it (--layers --hidden --heads --vocab --seq --ffn-ratio --untied-head).
#pragma once

#include <carto/layers.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"

namespace carto::tools {

std::vector<cli::FlagSpec> model_flag_specs();

// The model the flags describe; a cli::UsageError naming the command for a bad or missing flag.
GptConfig model_from_flags(const cli::Flags& flags, const std::string& command);

// The Llama preset --model names (llama3-8b, ...), with --layers --hidden --heads --vocab --seq
// applied; nullopt when --model names no Llama preset.
std::optional<LlamaConfig> llama_from_flags(const cli::Flags& flags, const std::string& command);

// The model the flags describe: a Llama preset (`llama` set) or a GPT. A Llama's sizes also fill
// `gpt`'s name, layers, hidden, heads, vocab, seq and tied head, the fields the subcommands print.
struct ModelChoice {
  GptConfig gpt;
  std::optional<LlamaConfig> llama;
};

// llama_from_flags when --model names a Llama preset, model_from_flags otherwise.
ModelChoice choose_model(const cli::Flags& flags, const std::string& command);

// build_llama's graph of a Llama, build_gpt's of a GPT.
Graph build_model(const ModelChoice& model, const ProfileOptions& options);

// --attention materialized|fused; nullopt when not given.
std::optional<AttentionKind> attention_from_flags(const cli::Flags& flags);

}  // namespace carto::tools
