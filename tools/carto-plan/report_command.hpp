// What `carto-plan report` and `carto-plan plan --report` share: reading a plan file back for a
// model and writing the HTML report of a plan.
#pragma once

#include <carto/cost.hpp>
#include <carto/layers.hpp>
#include <carto/search.hpp>
#include <functional>
#include <optional>
#include <string>

#include "model_flags.hpp"
#include "report.hpp"

namespace carto::tools {

// "gpt3-175b: 96 layers, hidden 12288, 96 heads, vocabulary 51200, sequence 2048"
std::string describe_model(const GptConfig& config);
// "llama3-8b (Llama): 32 layers, hidden 4096, 32 heads, 8 kv heads, SwiGLU width 14336, ..."
std::string describe_model(const LlamaConfig& config);
// The Llama's description when the model is one, the GPT's otherwise.
std::string describe_model(const ModelChoice& model);

// Builds the graph of one micro-batch of `micro_batch` sequences, at `precision`.
using GraphMaker = std::function<Graph(std::int64_t micro_batch, Precision precision)>;

// A plan file read and checked against the model it is for (its micro-batch count and precision
// come from the file, a file that records no precision being fp32 as plan_from_json reads it; the
// graph is make_graph's for global_batch / micro-batches at that precision).
Plan read_plan_file(const std::string& path, const GraphMaker& make_graph,
                    std::int64_t global_batch);

// Renders the report of `plan` (made for `graph`) and writes it atomically to `out_path`;
// `compare_path`, when given, is another plan file of the same model shown beside it.
void write_plan_report(const std::string& out_path, const Plan& plan, const Graph& graph,
                       const GraphMaker& make_graph, const std::string& model_description,
                       const HardwareProfile& hw, std::int64_t memory_budget,
                       std::int64_t global_batch, const std::optional<std::string>& compare_path,
                       const Measurements* measured = nullptr);

}  // namespace carto::tools
