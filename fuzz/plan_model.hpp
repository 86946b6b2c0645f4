// fuzz/plan_model.hpp — the model and mesh fuzz_plan reads plans for, and plan_seed writes its seed
// plans of (fuzz/corpus/plan/): a 1-block GPT small enough that a plan file is a few kilobytes.
#pragma once

#include <carto/layers/gpt.hpp>
#include <carto/spec.hpp>
#include <cstdint>

namespace carto::fuzz {

inline constexpr GptConfig kPlanModel{
    .name = "fuzz", .layers = 1, .hidden = 16, .heads = 2, .vocab = 8, .seq = 4};
inline constexpr std::int64_t kPlanBatch = 4;

inline Graph plan_graph(std::int64_t batch) {
  return build_gpt(kPlanModel, {.batch = batch, .precision = Precision::fp32, .dropout = 0.0});
}

}  // namespace carto::fuzz
