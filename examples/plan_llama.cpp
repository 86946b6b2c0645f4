// plan_llama — plan Llama3-8B (Dubey et al. 2024) for 64 H100s (8 per node) under 80 GiB per
// device, a global batch of 512 sequences of 8192 tokens, with flash-style fused attention and
// with materialized attention, and print both plans' summaries and write the fused one's plan
// file. At 8192 tokens the materialized (B, heads, S, S) scores are what decides the layout.
//
//   build/examples/plan_llama [OUT_DIR] [--all-meshes]
//
// By default the search tries the logical meshes of 1 and 2 axes (seconds); --all-meshes also
// tries the 3-axis ones, which does not return in minutes yet (docs/search-performance.md,
// "Llama").
#include <carto/cost/hardware.hpp>
#include <carto/layers/llama.hpp>
#include <carto/search.hpp>
#include <carto/util/units.hpp>
#include <chrono>
#include <exception>
#include <iostream>
#include <optional>
#include <string>

#include "plan_args.hpp"

int main(int argc, char** argv) {
  using namespace carto;
  try {
    const std::optional<PlanArgs> args = parse_plan_args(argc, argv, "plan_llama");
    if (!args) return 2;
    const bool all_meshes = args->all_meshes;
    const std::string& out_dir = args->out_dir;
    LlamaConfig llama = *find_llama("llama3-8b");
    llama.seq = 8192;
    constexpr std::int64_t kDevices = 64, kGlobalBatch = 512;
    // 8 H100s per node over NVLink, 8 nodes joined by InfiniBand.
    HardwareProfile hw = find_hardware_profile("h100");
    hw.links.front().devices = 8;
    hw = hardware_for_devices(hw, kDevices);
    // carto-plan's defaults: the standard space, memory resolution 0.02, ZeRO 0-3, checkpointing
    // searched; micro-batch counts 1-64 (a step of 4 M tokens does not fit in one pass).
    const SearchOptions options{.precision = Precision::mixed_bf16,
                                .memory_budget = parse_bytes("80GiB"),
                                .micro_batches = {1, 2, 4, 8, 16, 32, 64},
                                .tolerance = 0.02,
                                .max_mesh_axes = all_meshes ? std::size_t{3} : std::size_t{2}};
    for (const AttentionKind attention : {AttentionKind::fused, AttentionKind::materialized}) {
      auto make_graph = [&](std::int64_t micro_batch) {
        return build_llama(
            llama,
            {.batch = micro_batch, .precision = Precision::mixed_bf16, .attention = attention});
      };
      const auto start = std::chrono::steady_clock::now();
      const Plan plan = search(make_graph, llama.name, kGlobalBatch, kDevices, hw, options);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::cout << "Llama3-8B, " << to_string_view(attention) << " attention, on " << kDevices
                << " x " << hw.name << ", global batch " << kGlobalBatch << " x " << llama.seq
                << " tokens, budget 80 GiB per device (searched in " << seconds << " s, "
                << plan.configurations_searched << " of " << plan.configurations
                << " configurations)\n";
      std::cout << "  mesh " << plan.mesh << ", ZeRO stage " << plan.zero_stage << ", "
                << plan.micro_batches << " micro-batches\n";
      std::cout << "  predicted step time " << plan.step_time_s << " s, peak memory "
                << format_bytes(plan.peak_memory_bytes) << " per device\n";
      for (const auto& [what, s] : plan.time_breakdown)
        if (s > 1e-9) std::cout << "    time   " << what << ": " << s << " s\n";
      if (attention == AttentionKind::fused) {
        const std::string path = out_dir + "/llama3-8b-plan.json";
        save_plan(plan, path);  // atomically: a temporary file renamed over the target
        std::cout << "  wrote " << path << "\n";
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "plan_llama: " << e.what() << "\n";
    return 1;
  }
}
