// Planning for carto-demo: the fastest plan on the run's mesh under a memory budget per rank, or a
// saved plan checked against the run.
//
// Design note: carto::search() on the one logical mesh the user names (SearchOptions::meshes), in
// the precision the run trains in (--dtype: fp32, or mixed bf16 with its gradients reduced in
// bf16), every ZeRO stage and every micro-batch count among the candidates that divides the batch,
// in the standard search space. With no budget given, the budget is halfway between the least
// memory any plan needs and the memory of the fastest plan (both read from an unbudgeted search's
// frontier), so the search has to give up some speed to fit.
#pragma once

#include <carto/graph/graph.hpp>
#include <carto/search.hpp>
#include <carto/util/json.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace demo {

// The graph of one micro-batch of the given size.
using MakeGraph = std::function<carto::Graph(std::int64_t micro_batch)>;

struct PlanRequest {
  std::string model;
  carto::DeviceMesh mesh{};
  std::int64_t batch = 1;                               // the global batch (rows per step)
  std::vector<std::int64_t> micro_batches{1};           // candidates
  std::optional<std::int64_t> budget{};                 // bytes per rank; none: see the design note
  double tolerance = 0;                                 // SearchOptions::tolerance
  carto::Precision precision = carto::Precision::fp32;  // what the plan is priced for and runs
};

struct PlanChoice {
  carto::Plan plan;
  std::int64_t budget = 0;
  bool default_budget = false;
  std::int64_t least_bytes = 0;    // the least memory any plan needs
  std::int64_t fastest_bytes = 0;  // the memory of the fastest plan
  double fastest_time_s = 0;
};

// Throws carto::Error when no micro-batch count divides the batch or no plan fits the budget (the
// message states the least memory any plan needs).
PlanChoice search_plan(const MakeGraph& make_graph, const PlanRequest& request,
                       const carto::HardwareProfile& hw);

// Reads a plan saved with --save-plan and checks it against the model (named as search_plan's
// request named it), the batch and the mesh.
carto::Plan load_plan(const std::string& file, const std::string& model,
                      const MakeGraph& make_graph, const carto::DeviceMesh& mesh,
                      std::int64_t batch);

// How to write `mesh` as a --mesh value: "2x2" for axes named x, y, z; else "dp=2,tp=2".
std::string mesh_flag(const carto::DeviceMesh& mesh);

// Checks before training that `file` can be written (its folder exists and is writable, it is not
// a directory); `flag` names the flag that asked for it in the error message.
void check_output(const std::string& file, const std::string& flag);

// Writes `json` to `file` atomically (a failed write keeps the old file); `flag` names the flag
// that asked for it in the error message.
void write_json(const carto::Json& json, const std::string& file, const std::string& flag);

}  // namespace demo
