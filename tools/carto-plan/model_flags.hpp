// The model flags shared by carto-plan's subcommands: a preset (--model) and the size flags that
// build or override it (--layers --hidden --heads --vocab --seq --ffn-ratio --untied-head).
#pragma once

#include <carto/layers.hpp>
#include <string>
#include <vector>

#include "cli.hpp"

namespace carto::tools {

std::vector<cli::FlagSpec> model_flag_specs();

// The model the flags describe; a cli::UsageError naming the command for a bad or missing flag.
GptConfig model_from_flags(const cli::Flags& flags, const std::string& command);

}  // namespace carto::tools
