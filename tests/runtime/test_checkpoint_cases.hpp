// What the checkpoint tests share: a run of the tiny GPT on thread ranks that may load a checkpoint
// before its steps and save one after them, and a fresh scratch folder.
#pragma once

#include <carto/runtime/checkpoint.hpp>
#include <carto/runtime/thread_comm.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/executor_cases.hpp"

namespace carto::testing {

constexpr std::int64_t kCkptBatch = 4;

struct CkptRun {
  std::vector<double> losses;              // rank 0's, per step
  std::vector<std::vector<float>> params;  // the whole parameters after the steps (and load)
  CheckpointLoadInfo loaded{};
  std::int64_t step_count = 0;
  std::int64_t data_position = 0;
};

struct CkptSteps {
  int first = 0;  // the first step's batch: random_batch(kCkptBatch, 1000 + first + s)
  int steps = 0;
  std::string load{};  // loaded before the steps when not empty
  std::string save{};  // saved after the steps when not empty
  std::uint64_t seed = 77;
  CheckpointSaveOptions save_options{};
};

inline CkptRun ckpt_run(const Graph& g, const Plan& plan, const CkptSteps& how) {
  CkptRun out;
  run_threads(static_cast<int>(plan.mesh.num_devices()), [&](Communicator& world) {
    cpu::CpuBackend backend;
    MeshComms comms(world, plan.mesh);
    Trainer trainer(g, plan, backend, comms, hardware::h100(), {.seed = how.seed});
    CheckpointLoadInfo info;
    if (!how.load.empty()) info = load_checkpoint(trainer, how.load);
    std::vector<double> losses;
    for (int s = 0; s < how.steps; ++s)
      losses.push_back(
          trainer.step(random_batch(kCkptBatch, static_cast<std::uint32_t>(1000 + how.first + s))));
    if (!how.save.empty()) save_checkpoint(trainer, how.save, how.save_options);
    std::vector<std::vector<float>> params;
    for (TensorId t : trainer.executor().parameters())
      params.push_back(trainer.executor().parameter(t));
    if (world.rank() == 0) {
      out.losses = losses;
      out.params = params;
      out.loaded = info;
      out.step_count = trainer.executor().step_count();
      out.data_position = trainer.data_position();
    }
  });
  return out;
}

// Random strategy indices for a plan trained in `precision` (gradients reduced in its compute
// dtype, as mixed() sets it).
inline std::vector<std::size_t> random_indices(const Graph& g, const DeviceMesh& mesh,
                                               std::uint32_t seed, Precision precision) {
  std::mt19937 gen(seed);
  std::vector<std::size_t> out;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const auto n = enumerate_strategies(
                       g, OpId{static_cast<std::int32_t>(k)}, mesh,
                       {.precision = precision, .gradient_reduction = compute_dtype(precision)})
                       .size();
    out.push_back(std::uniform_int_distribution<std::size_t>(0, n - 1)(gen));
  }
  return out;
}

// A plan of random strategies in `precision`.
inline Plan random_plan(const Graph& g, const char* mesh, std::uint32_t seed, int zero,
                        Precision precision, std::int64_t micro = 1) {
  const DeviceMesh m = parse_mesh(mesh);
  Plan p = make_plan(g, m, random_indices(g, m, seed, precision), zero, micro);
  return precision == Precision::mixed_bf16 ? mixed(p) : p;
}

// The tiny GPT's graph of one micro-batch in `precision`.
inline Graph ckpt_graph(Precision precision, std::int64_t micro = 1) {
  return tiny_graph(kCkptBatch / micro, AttentionKind::materialized, 0.1, precision);
}

// An empty folder under the system's temporary folder, unique to `name`.
inline std::string scratch_folder(const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() /
      ("carto-test-checkpoint-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

}  // namespace carto::testing
