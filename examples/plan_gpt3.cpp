// plan_gpt3 — what a user with no GPU does first: plan GPT-3 175B for 1024 H100s (8 per node,
// InfiniBand between nodes) under 80 GiB per device, print the plan's summary, and write its plan
// file and its HTML report (open it in a browser: the layout of every op, memory over the step,
// where the time goes, the time/memory frontier).
//
//   build/examples/plan_gpt3 [OUT_DIR] [--all-meshes]
//
// By default the search tries the logical meshes of 1 and 2 axes (a few seconds); --all-meshes
// also tries the 3-axis ones, which finds a faster plan and takes minutes (README: "Searching").
#include <carto/cost/hardware.hpp>
#include <carto/layers/gpt.hpp>
#include <carto/search.hpp>
#include <carto/util/units.hpp>
#include <chrono>
#include <exception>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "html.hpp"  // carto-plan's HTML report (target carto_plan_report)
#include "plan_args.hpp"
#include "report.hpp"

int main(int argc, char** argv) {
  using namespace carto;
  try {
    const std::optional<PlanArgs> args = parse_plan_args(argc, argv, "plan_gpt3");
    if (!args) return 2;
    const bool all_meshes = args->all_meshes;
    const std::string& out_dir = args->out_dir;
    const GptConfig gpt3 = *find_model("gpt3-175b");
    constexpr std::int64_t kDevices = 1024, kGlobalBatch = 1536;
    // 8 H100s per node over NVLink; enough nodes joined by InfiniBand for 1024 devices.
    const HardwareProfile hw = hardware_for_devices(find_hardware_profile("h100"), kDevices);
    // Mixed bf16 (the default of both build_gpt and SearchOptions), dropout 0.1 as GPT-3 trained.
    auto make_graph = [&](std::int64_t micro_batch) {
      return build_gpt(gpt3, {.batch = micro_batch, .precision = Precision::mixed_bf16});
    };
    SearchOptions options{.precision = Precision::mixed_bf16,
                          .memory_budget = parse_bytes("80GiB"),
                          .max_mesh_axes = all_meshes ? std::size_t{3} : std::size_t{2}};
    const auto start = std::chrono::steady_clock::now();
    const Plan plan = search(make_graph, gpt3.name, kGlobalBatch, kDevices, hw, options);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    std::cout << "GPT-3 175B on " << kDevices << " x " << hw.name << ", global batch "
              << kGlobalBatch << ", budget 80 GiB per device (searched in " << seconds << " s, "
              << plan.configurations_searched << " of " << plan.configurations
              << " configurations)\n";
    std::cout << "  mesh " << plan.mesh << ", ZeRO stage " << plan.zero_stage << ", "
              << plan.micro_batches << " micro-batch(es)\n";
    std::cout << "  predicted step time " << plan.step_time_s << " s, peak memory "
              << format_bytes(plan.peak_memory_bytes) << " per device\n";
    for (const auto& [what, s] : plan.time_breakdown)
      if (s > 1e-9) std::cout << "    time   " << what << ": " << s << " s\n";
    for (const auto& [what, bytes] : plan.memory_breakdown)
      std::cout << "    memory " << what << ": " << format_bytes(bytes) << "\n";

    const std::string plan_path = out_dir + "/gpt3-plan.json";
    std::ofstream(plan_path) << to_json(plan).dump(1) << "\n";
    const Graph graph = make_graph(kGlobalBatch / plan.micro_batches);
    tools::ReportInput report{.plan = &plan,
                              .graph = &graph,
                              .hardware = hw,
                              .memory_budget = options.memory_budget,
                              .global_batch = kGlobalBatch,
                              .model_description = "gpt3-175b: 96 layers, hidden 12288, 96 heads"};
    const std::string report_path = out_dir + "/gpt3-plan.html";
    tools::html::write_file_atomically(report_path, tools::render_report(report));
    std::cout << "wrote " << plan_path << " and " << report_path << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "plan_gpt3: " << e.what() << "\n";
    return 2;
  }
}
