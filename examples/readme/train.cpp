// README "Training with a plan": two CPU thread ranks learn to count (every next token is the
// current one plus one) on the plan the search picks under 4 MiB per rank. Exit code 0 when the
// loss fell.
#include <carto/layers/gpt.hpp>
#include <carto/runtime/thread_comm.hpp>
#include <carto/runtime/trainer.hpp>
#include <carto/search.hpp>
#include <carto/util/units.hpp>
#include <cpu/cpu_backend.hpp>  // link carto::cpu
#include <iostream>
using namespace carto;

int main() {
  // seq is the step's sequence length and also the size of the position table.
  const GptConfig config{
      .name = "counter", .layers = 2, .hidden = 64, .heads = 4, .vocab = 16, .seq = 32};
  // Plan what the runtime runs: here fp32 without dropout (see "Planning what runs" below).
  auto make_graph = [&](std::int64_t batch) {
    return build_gpt(config, {.batch = batch, .precision = Precision::fp32, .dropout = 0.0});
  };
  const SearchOptions options{
      .precision = Precision::fp32, .memory_budget = parse_bytes("4MiB"), .micro_batches = {1, 2}};
  constexpr std::int64_t kBatch = 8, kRanks = 2;  // kRanks = 1: a single-device plan
  const Plan plan = search(make_graph, config.name, kBatch, kRanks, hardware::cpu(), options);
  const Graph graph = make_graph(kBatch / plan.micro_batches);
  double first = 0, last = 0;
  run_threads(kRanks, [&](Communicator& world) {  // or mpi::run(argc, argv, ...): carto::mpi
    cpu::CpuBackend backend;
    MeshComms comms(world, plan.mesh);
    Trainer trainer(graph, plan, backend, comms, hardware::cpu(),
                    {.adamw = {.learning_rate = 3e-3f}});
    for (int step = 0; step < 40; ++step) {
      // A TokenBatch: batch x seq token ids, row-major, and each position's target (the next
      // token).
      TokenBatch tokens{.batch = kBatch, .seq = config.seq};
      for (std::int64_t b = 0; b < kBatch; ++b) {
        for (std::int64_t s = 0; s < config.seq; ++s) {
          tokens.ids.push_back(static_cast<std::int32_t>((3 * b + step + s) % config.vocab));
          tokens.targets.push_back(
              static_cast<std::int32_t>((3 * b + step + s + 1) % config.vocab));
        }
      }
      const double loss = trainer.step(tokens);  // every rank gets the same loss
      if (world.rank() != 0) continue;
      if (step == 0) first = loss;
      last = loss;
      if (step % 10 == 0) std::cout << "step " << step << "  loss " << loss << "\n";
    }
  });
  std::cout << "loss " << first << " -> " << last << "\n";
  return last < 0.5 * first ? 0 : 1;
}
