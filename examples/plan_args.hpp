// plan_args.hpp — the command line of the planning examples (plan_gpt3, plan_llama):
// `PROGRAM [OUT_DIR] [--all-meshes]`.
#pragma once

#include <iostream>
#include <optional>
#include <string>

struct PlanArgs {
  std::string out_dir = ".";  // where the plan file (and report) go
  bool all_meshes = false;    // also search the 3-axis meshes
};

// The parsed arguments, or nothing after printing the usage to stderr for an unknown flag.
inline std::optional<PlanArgs> parse_plan_args(int argc, char** argv, const std::string& program) {
  PlanArgs args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--all-meshes") {
      args.all_meshes = true;
    } else if (arg.rfind("--", 0) == 0) {
      std::cerr << program << ": unknown flag '" << arg << "'; usage: " << program
                << " [OUT_DIR] [--all-meshes]\n";
      return std::nullopt;
    } else {
      args.out_dir = arg;
    }
  }
  return args;
}
