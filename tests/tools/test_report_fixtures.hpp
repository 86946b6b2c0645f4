// What the report tests share: a tiny GPT, its hardware and plans, and small text helpers.
#pragma once

#include <unistd.h>

#include <carto/cost.hpp>
#include <carto/layers.hpp>
#include <carto/search.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace carto::testing::report_fixtures {

inline const GptConfig kTiny{
    .name = "tiny", .layers = 2, .hidden = 32, .heads = 4, .vocab = 64, .seq = 16};
inline constexpr std::int64_t kBatch = 4;
inline const std::string kTinyFlags =
    "--layers 2 --hidden 32 --heads 4 --vocab 64 --seq 16 --batch 4";

// A Llama preset cut down by the size flags (it keeps llama3-8b's 8 kv heads and SwiGLU width).
inline const std::string kTinyLlamaFlags =
    "--model llama3-8b --layers 2 --hidden 64 --heads 8 --vocab 128 --seq 16 --batch 4";

inline Graph tiny_graph(std::int64_t micro_batch) {
  return build_gpt(kTiny, {.batch = micro_batch});
}

inline HardwareProfile tiny_hardware() {
  HardwareProfile hw = find_hardware_profile("h100");
  hw.links.front().devices = 2;
  return hardware_for_devices(hw, 4);
}

inline Plan tiny_plan(std::vector<int> zero_stages) {
  SearchOptions options;
  options.micro_batches = {1, 2};
  options.zero_stages = std::move(zero_stages);
  options.time_bounds = false;  // the whole frontier
  return search(tiny_graph, "tiny", kBatch, 4, tiny_hardware(), options);
}

inline std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t i = text.find(what); i != std::string::npos; i = text.find(what, i + 1)) ++n;
  return n;
}

// The page as one XML document (the HTML5 doctype line is not XML).
inline std::string without_doctype(const std::string& page) {
  const std::string doctype = "<!DOCTYPE html>";
  REQUIRE(page.rfind(doctype, 0) == 0);
  return page.substr(doctype.size());
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string temp_dir() {
  const auto dir =
      std::filesystem::temp_directory_path() / ("carto_report_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace carto::testing::report_fixtures
