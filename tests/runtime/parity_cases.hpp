// Helpers the executor's parity tests share (test_executor.cpp for GPT, test_executor_llama.cpp):
// training a plan on thread ranks, one forward/backward's loss and parameter gradients, a token
// batch as the graph's inputs, the largest difference of two gradient results, and the plan of a
// frontier point within a budget.
#pragma once

#include <algorithm>
#include <carto/cost/hardware.hpp>
#include <carto/runtime/executor.hpp>
#include <carto/runtime/thread_comm.hpp>
#include <carto/search.hpp>
#include <carto/search/strategy.hpp>
#include <cmath>
#include <cpu/cpu_backend.hpp>
#include <cstdint>
#include <mutex>
#include <vector>

#include "runtime/executor_cases.hpp"

namespace carto::testing {

// Trains `steps` steps of `plan` on thread ranks; rank 0's view.
inline RunResult train(const Graph& g, const Plan& plan, int steps, std::int64_t global_batch,
                       const TrainSetup& setup = {}) {
  RunResult out;
  std::mutex mutex;
  run_threads(static_cast<int>(plan.mesh.num_devices()), [&](Communicator& world) {
    RunResult r = train_rank(world, g, plan, steps, global_batch, setup);
    if (world.rank() == 0) {
      std::lock_guard lock(mutex);
      out = std::move(r);
    }
  });
  return out;
}

struct GradResult {
  double loss = 0;
  std::vector<std::vector<float>> grads;
  std::vector<std::vector<float>> params;  // the parameters the pass ran with
};

// One forward/backward of `strategy` on thread ranks; the loss and every parameter gradient. With
// `params`, the parameters (in parameters() order) are set to them first.
inline GradResult gradients(const Graph& g, const DeviceMesh& mesh,
                            const std::vector<std::size_t>& strategy,
                            const std::vector<HostInput>& inputs,
                            const std::vector<std::vector<float>>* params = nullptr,
                            RmsNormArgs rmsnorm = {}) {
  GradResult out;
  std::mutex mutex;
  const HardwareProfile hw = hardware::h100();
  run_threads(static_cast<int>(mesh.num_devices()), [&](Communicator& world) {
    cpu::CpuBackend backend;
    MeshComms comms(world, mesh);
    std::vector<Strategy> st;
    for (std::size_t k = 0; k < g.num_ops(); ++k) {
      st.push_back(enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh,
                                        {.precision = Precision::fp32})
                       .at(strategy[k]));
    }
    Executor ex(g, mesh, st, backend, comms, hw, {.seed = 5, .rmsnorm = rmsnorm});
    const std::vector<TensorId> ids = ex.parameters();
    if (params != nullptr) {
      if (params->size() != ids.size()) throw Error("gradients: wrong number of parameters");
      for (std::size_t p = 0; p < ids.size(); ++p) ex.set_parameter(ids[p], (*params)[p]);
    }
    std::vector<std::vector<float>> values;
    for (TensorId t : ids) values.push_back(ex.parameter(t));
    const double loss = ex.forward_backward(inputs);
    ex.finish_gradients();
    std::vector<std::vector<float>> grads;
    for (TensorId t : ids) grads.push_back(ex.gradient(t));
    if (world.rank() == 0) {
      std::lock_guard lock(mutex);
      out.loss = loss;
      out.grads = grads;
      out.params = values;
    }
  });
  return out;
}

// The graph's inputs (ids, targets: tensors 0 and 1 of build_gpt and build_llama) from a token
// batch.
inline std::vector<HostInput> token_inputs(const TokenBatch& batch) {
  std::vector<HostInput> inputs(2);
  inputs[0].tensor = TensorId{0};
  inputs[0].ids = batch.ids;
  inputs[1].tensor = TensorId{1};
  inputs[1].ids = batch.targets;
  return inputs;
}

// The largest absolute difference of the losses and of any gradient element.
inline double largest_difference(const GradResult& got, const GradResult& ref) {
  double worst = std::abs(got.loss - ref.loss);
  if (got.grads.size() != ref.grads.size()) return 1e30;
  for (std::size_t p = 0; p < ref.grads.size(); ++p) {
    if (got.grads[p].size() != ref.grads[p].size()) return 1e30;
    for (std::size_t e = 0; e < ref.grads[p].size(); ++e)
      worst = std::max(worst, static_cast<double>(std::abs(got.grads[p][e] - ref.grads[p][e])));
  }
  return worst;
}

// The fastest point of a frontier within `budget` (the leanest when none fits), as a Plan.
inline Plan plan_within(const Graph& g, const DeviceMesh& mesh, const HardwareProfile& hw,
                        const DpOptions& dp, const DpResult& r, std::int64_t budget) {
  const DpPoint* best = &r.frontier.back();  // the least memory
  for (const DpPoint& p : r.frontier) {
    if (p.peak_bytes <= budget) {
      best = &p;
      break;
    }
  }
  Plan plan;
  detail::describe_plan(plan, g, mesh, hw, dp, *best);
  return plan;
}

}  // namespace carto::testing
