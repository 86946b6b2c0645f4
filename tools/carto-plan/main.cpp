// carto-plan — the planner's command line.
//
//   carto-plan profile --model gpt3-175b --batch 1 --seq 2048 [--json] ...
//
// Every error is one line on stderr and exit code 2.
#include <carto/error.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"

namespace {

const char* const kUsage =
    "usage: carto-plan <command> [flags]\n"
    "commands:\n"
    "  profile   FLOPs, parameters and memory of one training step of a GPT model, per layer\n"
    "  models    the model presets\n"
    "  plan      the fastest sharded plan that fits a memory budget (joint DP search)\n"
    "  reshard   the cheapest steps from one sharding spec of a tensor to another, time and "
    "memory\n"
    "  strategies  each op of one transformer block: its sharding strategies, the cheapest first\n"
    "  report    the HTML report of a saved plan (carto-plan report PLAN.json -o PLAN.html)\n"
    "'carto-plan <command> --help' lists a command's flags.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (command == "profile") return carto::tools::profile_command(args, std::cout);
    if (command == "plan") return carto::tools::plan_command(args, std::cout);
    if (command == "models") return carto::tools::models_command(args, std::cout);
    if (command == "reshard") return carto::tools::reshard_command(args, std::cout);
    if (command == "strategies") return carto::tools::strategies_command(args, std::cout);
    if (command == "report") return carto::tools::report_command(args, std::cout);
    if (command == "--help" || command == "-h" || command == "help") {
      std::cout << kUsage;
      return 0;
    }
    std::cerr << "carto-plan: unknown command '" << command << "'\n" << kUsage;
    return 2;
  } catch (const carto::cli::UsageError& e) {
    std::cerr << "carto-plan " << e.what() << "\n";
    return 2;
  } catch (const carto::Error& e) {
    std::cerr << "carto-plan " << command << ": " << e.what() << "\n";
    return 2;
  }
}
