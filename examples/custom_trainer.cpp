// A training loop of your own with carto: a GPT composed from the layer templates, a plan the
// search picks for 2 CPU ranks under a per-rank memory budget, and Trainer::step in a plain loop.
// The task is learnable by a tiny model: each sequence counts up from a random start modulo the
// vocabulary, so the next token is always the current one plus one and the loss must fall to ~0.
//
//   build/examples/custom_trainer [budget, e.g. 4MiB]
#include <carto/cost/hardware.hpp>
#include <carto/layers/gpt.hpp>
#include <carto/runtime/thread_comm.hpp>
#include <carto/runtime/trainer.hpp>
#include <carto/search.hpp>
#include <carto/util/units.hpp>
#include <cpu/cpu_backend.hpp>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <random>

int main(int argc, char** argv) {
  using namespace carto;
  try {
    const GptConfig config{
        .name = "counter", .layers = 2, .hidden = 64, .heads = 4, .vocab = 16, .seq = 32};
    constexpr std::int64_t kBatch = 8;
    constexpr std::int64_t kRanks = 2;
    // The runtime computes in fp32 and draws dropout masks again in backward; plan for that.
    auto make_graph = [&](std::int64_t batch) {
      return build_gpt(config, {.batch = batch, .precision = Precision::fp32, .dropout = 0.0});
    };
    const HardwareProfile hw = hardware::cpu();
    const SearchOptions options{.precision = Precision::fp32,
                                .dropout_masks = DropoutMasks::regenerated,
                                .memory_budget = parse_bytes(argc > 1 ? argv[1] : "4MiB"),
                                .micro_batches = {1, 2}};
    const Plan plan = search(make_graph, config.name, kBatch, kRanks, hw, options);
    std::cout << plan << "\n";

    const Graph graph = make_graph(kBatch / plan.micro_batches);
    run_threads(static_cast<int>(kRanks), [&](Communicator& world) {
      cpu::CpuBackend backend;
      MeshComms comms(world, plan.mesh);
      Trainer trainer(graph, plan, backend, comms, hw, {.adamw = {.learning_rate = 3e-3f}});
      std::mt19937 rng(1);  // every rank draws the same batches
      std::uniform_int_distribution<std::int32_t> start(0, config.vocab - 1);
      for (int step = 1; step <= 60; ++step) {
        TokenBatch batch{.batch = kBatch, .seq = config.seq};
        for (std::int64_t b = 0; b < kBatch; ++b) {
          const std::int32_t first = start(rng);
          for (std::int64_t s = 0; s < config.seq; ++s) {
            batch.ids.push_back(static_cast<std::int32_t>((first + s) % config.vocab));
            batch.targets.push_back(static_cast<std::int32_t>((first + s + 1) % config.vocab));
          }
        }
        const StepStats stats = trainer.step_with_stats(batch);
        if (world.rank() == 0 && (step == 1 || step % 10 == 0)) {
          std::printf("step %2d  loss %.4f  %.1f ms  peak %s on rank 0\n", step, stats.loss,
                      stats.seconds * 1e3, format_bytes(stats.peak_bytes).c_str());
        }
      }
    });
    std::printf("predicted peak %s per rank, step %.2f ms under the cpu profile\n",
                format_bytes(plan.peak_memory_bytes).c_str(), plan.step_time_s * 1e3);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "custom_trainer: " << e.what() << "\n";
    return 2;
  }
}
