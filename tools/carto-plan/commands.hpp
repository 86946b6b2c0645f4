// carto-plan's subcommands. Each returns the exit code; usage errors throw cli::UsageError and
// library errors carto::Error (main prints either as one line, exit code 2).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace carto::tools {

int profile_command(const std::vector<std::string>& args, std::ostream& out);
int models_command(const std::vector<std::string>& args, std::ostream& out);
int plan_command(const std::vector<std::string>& args, std::ostream& out);
int reshard_command(const std::vector<std::string>& args, std::ostream& out);
int strategies_command(const std::vector<std::string>& args, std::ostream& out);
int report_command(const std::vector<std::string>& args, std::ostream& out);

}  // namespace carto::tools
