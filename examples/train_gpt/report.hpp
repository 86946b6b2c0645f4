// What carto-demo prints and writes: the chosen plan, the closing comparison of measured against
// predicted memory and step time, and the --json report.
#pragma once

#include <carto/cost/hardware.hpp>
#include <carto/layers/gpt.hpp>
#include <carto/layers/llama.hpp>
#include <carto/search.hpp>
#include <carto/util/json.hpp>
#include <iosfwd>
#include <optional>

#include "corpus.hpp"
#include "planning.hpp"
#include "training.hpp"

namespace demo {

struct RunInfo {
  carto::GptConfig model{};  // the sizes (layers, hidden, heads, vocab, seq) of either architecture
  std::optional<carto::LlamaConfig> llama{};  // set: the run trains this Llama (--arch llama)
  double dropout = 0;
  std::int64_t parameters = 0;
  const Corpus* corpus = nullptr;
  carto::HardwareProfile hardware{};
  std::optional<PlanChoice> search{};  // none: the plan was loaded from plan_file
  std::string plan_file{};
  double tolerance = 0;
  unsigned cores = 0;  // hardware threads of this machine
};

// The plan: mesh, ZeRO stage, micro-batches, predicted time and memory with their breakdowns, and
// each op's strategy (transformer blocks with the same strategies as block 0 are folded).
void print_plan(std::ostream& out, const carto::Plan& plan, const RunInfo& info);

// Loss first vs last, measured vs predicted peak memory per rank and step time.
void print_summary(std::ostream& out, const carto::Plan& plan, const TrainResult& result,
                   const TrainSettings& settings, const RunInfo& info);

// The mean step time after the first step (which allocates the optimizer states).
double measured_step_seconds(const TrainResult& result);

carto::Json report_json(const carto::Plan& plan, const TrainResult& result,
                        const TrainSettings& settings, const RunInfo& info);

}  // namespace demo
