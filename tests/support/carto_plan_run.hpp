// Runs the carto-plan binary (path from CMake: CARTO_PLAN_PATH), or any command line, as a user
// would, with stdout and stderr captured together, for the command-line tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

namespace carto::testing {

struct Run {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line, stdout and stderr captured together.
inline Run run_command(const std::string& line) {
  const std::string command = line + " 2>&1";
  Run r;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    r.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline Run run_carto_plan(const std::string& args) {
  return run_command(std::string(CARTO_PLAN_PATH) + " " + args);
}

}  // namespace carto::testing
