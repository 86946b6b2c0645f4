// The cases the executor's parity tests share (thread ranks in test_executor, MPI processes in
// test_executor_mpi): a 2-layer GPT with small dims (fp32 or mixed bf16), random token batches,
// plans made from strategy indices, and one rank's part of a training run. No test framework here:
// errors throw.
#pragma once

#include <algorithm>
#include <carto/cost/hardware.hpp>
#include <carto/error.hpp>
#include <carto/layers/gpt.hpp>
#include <carto/runtime/executor.hpp>
#include <carto/runtime/trainer.hpp>
#include <carto/search.hpp>
#include <carto/search/strategy.hpp>
#include <cmath>
#include <cpu/cpu_backend.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/workspace_backend.hpp"

namespace carto::testing {

constexpr GptConfig kTiny{
    .name = "tiny", .layers = 2, .hidden = 32, .heads = 4, .vocab = 40, .seq = 16};

inline Graph tiny_graph(std::int64_t batch, AttentionKind attention = AttentionKind::materialized,
                        double dropout = 0.1, Precision precision = Precision::fp32) {
  return build_gpt(
      kTiny, {.batch = batch, .precision = precision, .attention = attention, .dropout = dropout});
}

inline TokenBatch random_batch(std::int64_t batch, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(kTiny.vocab) - 1);
  TokenBatch b{.batch = batch, .seq = kTiny.seq};
  for (std::int64_t i = 0; i < batch * kTiny.seq; ++i) {
    b.ids.push_back(token(gen));
    b.targets.push_back(token(gen));
  }
  return b;
}

struct RunResult {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;
  std::vector<std::vector<float>> initial;  // TrainSetup::diagnostics: parameters before step 1
  double logit_max = 0;  // TrainSetup::diagnostics: max |logit| on the last batch after training
  std::int64_t peak_bytes = 0;  // rank 0
  MemoryBreakdown at_peak{};
  // TrainSetup::split_workspace: the peak of the executor's own allocations, kernel workspace
  // apart (workspace_backend.hpp); else peak_bytes.
  std::int64_t executor_peak_bytes = 0;
};

// How a test run trains: the Trainer's options and the seed of the first step's batch (step s
// draws random_batch(..., batch_seed + s)).
struct TrainSetup {
  TrainerOptions trainer{.seed = 77};
  std::uint32_t batch_seed = 1000;
  // Also gather the parameters before the first step and the largest |logit| after the last.
  bool diagnostics = false;
  // Run on WorkspaceSplitBackend to measure the executor's memory apart from kernel workspace.
  bool split_workspace = false;
};

// The largest |logit| (input 0 of the cross-entropy op) of `batch` under the trainer's parameters.
inline double logit_max(Trainer& trainer, const Graph& g, const TokenBatch& batch) {
  std::vector<HostInput> inputs(2);
  std::vector<TensorId> ids;
  for (std::size_t t = 0; t < g.tensors().size(); ++t)
    if (g.tensors()[t].kind == TensorKind::index) ids.push_back(TensorId{static_cast<int>(t)});
  inputs[0] = {.tensor = ids.at(0), .ids = batch.ids};
  inputs[1] = {.tensor = ids.at(1), .ids = batch.targets};
  for (const Op& op : g.ops()) {
    if (op.kind != OpKind::softmax_cross_entropy) continue;
    double most = 0;
    for (float z : trainer.executor().evaluate(inputs, op.inputs[0]))
      most = std::max(most, std::abs(static_cast<double>(z)));
    return most;
  }
  throw Error("logit_max: the graph has no cross-entropy op");
}

// One rank's part of training `steps` steps of `plan`: the losses and the whole parameters (every
// rank sees the same), and this rank's peak memory.
inline RunResult train_rank(Communicator& world, const Graph& g, const Plan& plan, int steps,
                            std::int64_t global_batch, const TrainSetup& setup = {}) {
  const HardwareProfile hw = hardware::h100();
  RunResult out;
  {
    cpu::CpuBackend cpu_backend;
    WorkspaceSplitBackend split_backend;
    Backend& backend = setup.split_workspace ? static_cast<Backend&>(split_backend) : cpu_backend;
    MeshComms comms(world, plan.mesh);
    Trainer trainer(g, plan, backend, comms, hw, setup.trainer);
    if (setup.diagnostics) {
      for (TensorId t : trainer.executor().parameters())
        out.initial.push_back(trainer.executor().parameter(t));
    }
    trainer.memory().reset_peak();  // the set-up's temporaries are not part of a step
    split_backend.executor_memory().reset_peak();
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
      losses.push_back(trainer.step(
          random_batch(global_batch, setup.batch_seed + static_cast<std::uint32_t>(s))));
    }
    // The training steps' peak, before the gathers below (whole parameters, logits) allocate.
    out.peak_bytes = trainer.memory().peak_bytes();
    out.at_peak = trainer.memory().at_peak();
    out.executor_peak_bytes =
        setup.split_workspace ? split_backend.executor_memory().peak_bytes() : out.peak_bytes;
    if (setup.diagnostics && steps > 0) {
      out.logit_max = logit_max(
          trainer, g, random_batch(global_batch / plan.micro_batches, setup.batch_seed + 999));
    }
    std::vector<std::vector<float>> params;
    for (TensorId t : trainer.executor().parameters())
      params.push_back(trainer.executor().parameter(t));
    out.losses = losses;
    out.params = params;
  }
  return out;
}

// The largest difference between two runs: losses relative, parameters absolute; an empty
// string when they agree within the tolerances of the test's header comment, else a description.
inline std::string compare_runs(const RunResult& got, const RunResult& want, double loss_rel = 1e-4,
                                double param_abs = 1e-4) {
  if (got.losses.size() != want.losses.size() || got.params.size() != want.params.size())
    return "different numbers of steps or parameters";
  std::string problems;
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    if (std::abs(got.losses[s] - want.losses[s]) > loss_rel * std::abs(want.losses[s]))
      problems +=
          detail::concat("step ", s, ": loss ", got.losses[s], " vs ", want.losses[s], "; ");
  }
  double worst = 0;
  std::size_t worst_param = 0;
  for (std::size_t p = 0; p < want.params.size(); ++p) {
    if (got.params[p].size() != want.params[p].size()) return "different parameter sizes";
    for (std::size_t i = 0; i < want.params[p].size(); ++i) {
      const double d = std::abs(static_cast<double>(got.params[p][i]) - want.params[p][i]);
      if (d > worst) worst = d, worst_param = p;
    }
  }
  if (worst > param_abs)
    problems += detail::concat("parameter ", worst_param, " differs by ", worst);
  return problems;
}

// A plan with given strategies (indices) on a mesh; it trains in fp32 unless its precision and
// gradient_reduction are set (see mixed).
inline Plan make_plan(const Graph& g, const DeviceMesh& mesh, std::vector<std::size_t> strategy,
                      int zero = 0, std::int64_t micro = 1, bool checkpoint = false) {
  Plan p;
  p.mesh = mesh;
  p.zero_stage = zero;
  p.micro_batches = micro;
  p.strategy = std::move(strategy);
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    PlanOp op;
    const std::int32_t grp = g.ops()[k].group;
    op.checkpointed =
        checkpoint && grp >= 0 &&
        g.groups()[static_cast<std::size_t>(grp)].kind == GroupKind::transformer_block;
    p.ops.push_back(op);
  }
  return p;
}

// The plan trained in mixed bf16, its gradients reduced in `reduction` (bf16 or fp32).
inline Plan mixed(Plan p, DType reduction = DType::bf16) {
  p.precision = Precision::mixed_bf16;
  p.gradient_reduction = reduction;
  return p;
}

// Every op's fully replicated strategy (the single-device plan on any mesh).
inline std::vector<std::size_t> replicated_strategies(const Graph& g, const DeviceMesh& mesh) {
  std::vector<std::size_t> out;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const auto all = enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh,
                                          {.precision = Precision::fp32});
    std::size_t pick = all.size();
    for (std::size_t i = 0; i < all.size() && pick == all.size(); ++i) {
      bool replicated = all[i].sharding.output.is_replicated();
      for (const ShardingSpec& s : all[i].sharding.inputs)
        replicated = replicated && s.is_replicated();
      if (replicated) pick = i;
    }
    if (pick == all.size())
      throw Error(detail::concat("op ", k, " has no fully replicated strategy"));
    out.push_back(pick);
  }
  return out;
}

inline std::vector<std::size_t> random_strategies(const Graph& g, const DeviceMesh& mesh,
                                                  std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::size_t> out;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const auto n = enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh,
                                        {.precision = Precision::fp32})
                       .size();
    out.push_back(std::uniform_int_distribution<std::size_t>(0, n - 1)(gen));
  }
  return out;
}

}  // namespace carto::testing
