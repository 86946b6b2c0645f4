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

}  // namespace carto::tools
