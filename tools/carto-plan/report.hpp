// carto-plan's HTML plan report: one self-contained page (inline CSS and SVG, no scripts, nothing
// fetched) that shows a plan — its settings, the layout of every op, one device's memory over the
// step, where the step time goes, and the time/memory frontier beside another plan.
//
// Design note. The report re-derives what it draws from the plan's choices and the graph it was
// made for, with the cost model's own functions (evaluate_assignment, evaluate_point, the
// strategies' memory), so that it shows the plan a Trainer would run, not a copy of the search's
// labels. build_report_data computes the figures (tested on their own); render_report turns them
// into HTML. With a training run's measurements, a last section puts measured memory and step
// time beside the prediction and draws the loss curve (report_measured.cpp). Repeated transformer
// blocks (block_chains of search/space.hpp) whose ops chose the same strategies fold into one row
// group with a count, so GPT-3's 96 blocks take the space of one.
#pragma once

#include <carto/cost.hpp>
#include <carto/search.hpp>
#include <carto/util/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace carto::tools {

// What a training run of the plan measured (carto-demo's --json report, format
// carto-demo-report/1): the loss of every step, each step's wall time, each rank's peak memory.
struct Measurements {
  std::string source;  // the file it came from
  std::vector<double> losses;
  std::vector<double> step_seconds;
  std::vector<std::int64_t> peak_bytes;  // measured, per rank
  double step_s = 0;                     // the run's own mean step time (its steps after the first)
  std::string hardware;                  // the hardware profile its prediction used
};

// Reads a carto-demo-report/1 document; a missing or ill-typed member is a carto::Error naming
// it and the file.
Measurements measurements_from_json(const Json& run, const std::string& source);

struct ReportInput {
  const Plan* plan = nullptr;
  const Graph* graph = nullptr;  // the graph of one micro-batch the plan was made for
  HardwareProfile hardware{};
  std::int64_t memory_budget = 0;  // bytes per device
  std::int64_t global_batch = 1;
  std::string model_description{};         // "gpt3-175b: 96 layers, hidden 12288, ..."
  const Plan* compare = nullptr;           // optional: a plan shown beside this one
  std::string compare_label{};             // e.g. the file it came from
  const Measurements* measured = nullptr;  // optional: a training run of this plan
};

// One tensor of a layout row: its dims (name, extent, mesh axes splitting it) and Partial axes.
struct TensorView {
  std::string role;  // "in0", "in1", "out"
  std::vector<std::string> dim_names;
  std::vector<std::int64_t> extents;
  std::vector<std::vector<std::string>> dim_axes;
  std::vector<std::string> partial;
  std::string spec;  // the spec's text
};

struct ReshardView {
  std::string collective;  // all_gather, all_to_all, ...
  std::string axis;
  std::string phase;  // forward / backward
  std::int64_t bytes = 0;
  double time_s = 0;
};

struct LayoutRow {
  std::string name;  // "block.0-95.einsum0" for a folded run
  std::int64_t count = 1;
  std::string strategy;
  bool checkpointed = false;
  std::vector<TensorView> tensors;
  std::vector<ReshardView> reshards;  // the moves into this op's inputs (and their gradients)
};

// A run of groups shown as one: the first group's name, the run's span and how many it holds.
struct GroupRun {
  std::string name;
  std::int64_t count = 1;
  std::map<std::string, double> time;  // per group: compute, collective kinds, resharding, ...
};

// One point of the memory timeline of one device: the op running and what is held (bytes).
struct MemoryPoint {
  std::string label;  // "forward block.3" ...
  std::int64_t persistent = 0;
  std::int64_t activations = 0;
  std::int64_t temporaries = 0;
  std::int64_t communication = 0;
  [[nodiscard]] std::int64_t total() const {
    return persistent + activations + temporaries + communication;
  }
};

struct ReportData {
  std::vector<LayoutRow> rows;
  std::vector<GroupRun> runs;
  std::vector<MemoryPoint> memory;
  std::int64_t parameter_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0;  // per device
  std::int64_t timeline_peak = 0;  // the largest total of `memory`
  std::int64_t cost_peak = 0;      // evaluate_point's peak (the plan's prediction)
};

ReportData build_report_data(const ReportInput& input);

// The whole page.
std::string render_report(const ReportInput& input);

}  // namespace carto::tools
