// carto/runtime/trainer.hpp — a training loop step for C++ trainers: trainer.step(batch) -> loss.
//
// Design note (DESIGN.md §8). A Trainer is one rank: it owns the memory tracker and the Executor
// of a Plan and splits a global batch into the plan's micro-batches (gradient accumulation), then
// reduces the gradients and runs AdamW. It is built from the graph of one micro-batch (the plan
// was searched for it) and the plan; the plan's mesh must be the communicators' mesh. Token
// batches are (batch, seq) int32 ids and next-token targets, row-major; the graph's index inputs
// are taken in tensor order as (ids, targets), as build_gpt makes them. It trains in the plan's
// precision and reduces gradients in the plan's gradient_reduction (Plan::precision,
// Plan::gradient_reduction: what the plan was priced for), picking the plan's strategies with the
// same options.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "carto/cost/hardware.hpp"
#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/runtime/backend.hpp"
#include "carto/runtime/communicator.hpp"
#include "carto/runtime/executor.hpp"
#include "carto/runtime/memory.hpp"
#include "carto/runtime/trace.hpp"
#include "carto/runtime/tracing_backend.hpp"
#include "carto/runtime/tracing_comm.hpp"
#include "carto/search/plan.hpp"
#include "carto/search/strategy.hpp"

namespace carto {

// The strategies a plan names, checked against the graph and mesh.
inline std::vector<Strategy> plan_strategies(const Graph& g, const Plan& plan,
                                             const StrategyOptions& options = {}) {
  if (plan.strategy.size() != g.num_ops()) {
    detail::fail("carto: the plan has ", plan.strategy.size(), " op strategies; the graph has ",
                 g.num_ops(), " ops (a plan for another model?)");
  }
  std::vector<Strategy> out;
  out.reserve(g.num_ops());
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const std::vector<Strategy> all =
        enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, plan.mesh, options);
    if (plan.strategy[k] >= all.size()) {
      detail::fail("carto: the plan's strategy ", plan.strategy[k], " for op ", k,
                   " is out of range: that op has ", all.size(), " strategies on mesh ", plan.mesh);
    }
    out.push_back(all[plan.strategy[k]]);
  }
  return out;
}

// The checkpoint flag of every group, from the plan's per-op flags.
inline std::vector<bool> plan_checkpoints(const Graph& g, const Plan& plan) {
  std::vector<bool> flags(g.groups().size(), false);
  for (std::size_t k = 0; k < g.num_ops() && k < plan.ops.size(); ++k) {
    const std::int32_t grp = g.ops()[k].group;
    if (grp >= 0 && plan.ops[k].checkpointed) flags[static_cast<std::size_t>(grp)] = true;
  }
  return flags;
}

struct TokenBatch {
  std::int64_t batch = 0;
  std::int64_t seq = 0;
  std::vector<std::int32_t> ids{};
  std::vector<std::int32_t> targets{};
};

struct TrainerOptions {
  std::uint64_t seed = 1234;
  AdamWArgs adamw{};
  float init_stddev = rng::kGpt2InitStd;
  LayerNormArgs layernorm{};
  RmsNormArgs rmsnorm{};  // a Llama's norm_eps
  // Records every kernel, reshard and collective of each step into trace->rank(world rank)
  // (carto/runtime/trace.hpp). Every rank of the mesh or none: the trainer then builds its own
  // traced communicators, which is collective over the world.
  trace::Trace* trace = nullptr;
};

struct StepStats {
  double loss = 0;
  double seconds = 0;
  std::int64_t peak_bytes = 0;  // this rank's peak since the trainer was made
};

class Trainer {
 public:
  Trainer(const Graph& micro_graph, const Plan& plan, Backend& backend, MeshComms& comms,
          const HardwareProfile& hw, const TrainerOptions& options = {})
      : graph_(micro_graph),
        plan_(plan),
        backend_(backend),
        comms_(comms),
        tracking_(backend.device_allocator(), tracker_) {
    if (!(comms.mesh() == plan.mesh)) {
      detail::fail("carto: the plan is for mesh ", plan.mesh, " but the ranks form mesh ",
                   comms.mesh(), "; search a plan for this mesh or run on ",
                   plan.mesh.num_devices(), " ranks");
    }
    for (std::size_t t = 0; t < graph_.tensors().size(); ++t) {
      if (graph_.tensors()[t].kind == TensorKind::index)
        index_inputs_.push_back(TensorId{static_cast<std::int32_t>(t)});
    }
    if (index_inputs_.size() != 2) {
      detail::fail(
          "carto: a Trainer takes a graph with two token inputs (ids, targets); this one "
          "has ",
          index_inputs_.size());
    }
    backend_.use_allocator(&tracking_);
    if (options.trace != nullptr) {
      recorder_ = &options.trace->rank(comms.world().world_rank());
      recorder_->set_op_names(op_names(graph_));
      traced_backend_ = std::make_unique<TracingBackend>(backend, *recorder_);
      traced_backend_->use_allocator(&tracking_);
      traced_world_ = std::make_unique<TracingComm>(comms.world(), *recorder_);
      traced_comms_ = std::make_unique<MeshComms>(*traced_world_, comms.mesh());
    }
    ExecutorOptions eo{.precision = plan.precision,
                       .gradient_reduction = plan.gradient_reduction,
                       .zero_stage = plan.zero_stage,
                       .checkpointed = plan_checkpoints(graph_, plan),
                       .seed = options.seed,
                       .init_stddev = options.init_stddev,
                       .adamw = options.adamw,
                       .layernorm = options.layernorm,
                       .rmsnorm = options.rmsnorm};
    executor_ = std::make_unique<Executor>(
        graph_, plan.mesh,
        plan_strategies(
            graph_, plan,
            {.precision = plan.precision, .gradient_reduction = plan.gradient_reduction}),
        traced_backend_ ? *traced_backend_ : backend, traced_comms_ ? *traced_comms_ : comms, hw,
        std::move(eo));
  }
  ~Trainer() {
    executor_.reset();
    backend_.use_allocator(nullptr);
  }
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer step on a global batch: plan.micro_batches forward/backward passes, the
  // gradient reduction and AdamW. Returns the mean loss over the batch.
  double step(const TokenBatch& batch) { return step_with_stats(batch).loss; }

  StepStats step_with_stats(const TokenBatch& batch) {
    const trace::Active traced(recorder_ != nullptr ? recorder_ : trace::context().recorder);
    const trace::Span step_span(trace::Kind::step, "step");
    const auto start = std::chrono::steady_clock::now();
    const std::int64_t m = plan_.micro_batches;
    const TensorShape& ids_shape = graph_.tensor(index_inputs_[0]).shape;
    const std::int64_t mb = ids_shape.dims()[0].extent;
    const std::int64_t seq = ids_shape.dims()[1].extent;
    if (batch.batch != mb * m || batch.seq != seq ||
        batch.ids.size() != static_cast<std::size_t>(batch.batch * batch.seq) ||
        batch.targets.size() != batch.ids.size()) {
      detail::fail("carto: Trainer::step needs a batch of ", mb * m, " x ", seq, " tokens (", m,
                   " micro-batches of ", mb, "); got ", batch.batch, " x ", batch.seq, " with ",
                   batch.ids.size(), " ids and ", batch.targets.size(), " targets");
    }
    double loss = 0;
    const auto per = static_cast<std::size_t>(mb * seq);
    for (std::int64_t i = 0; i < m; ++i) {
      const auto begin = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(i) * per);
      std::vector<HostInput> inputs(2);
      inputs[0].tensor = index_inputs_[0];
      inputs[0].ids.assign(batch.ids.begin() + begin,
                           batch.ids.begin() + begin + static_cast<std::ptrdiff_t>(per));
      inputs[1].tensor = index_inputs_[1];
      inputs[1].ids.assign(batch.targets.begin() + begin,
                           batch.targets.begin() + begin + static_cast<std::ptrdiff_t>(per));
      loss += executor_->forward_backward(inputs, i, m) / static_cast<double>(m);
    }
    {
      const trace::OpScope phase(-1, trace::Phase::gradients);
      executor_->finish_gradients();
    }
    {
      const trace::OpScope phase(-1, trace::Phase::optimizer);
      executor_->optimizer_step();
    }
    ++data_position_;
    StepStats s;
    s.loss = loss;
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    s.peak_bytes = tracker_.peak_bytes();
    return s;
  }

  [[nodiscard]] Executor& executor() { return *executor_; }
  [[nodiscard]] const MemoryTracker& memory() const { return tracker_; }
  [[nodiscard]] MemoryTracker& memory() { return tracker_; }
  [[nodiscard]] const Plan& plan() const { return plan_; }
  [[nodiscard]] const Graph& graph() const { return graph_; }
  [[nodiscard]] MeshComms& comms() { return comms_; }
  // Where the trainer's data stream stands, kept in checkpoints (carto/runtime/checkpoint.hpp):
  // the number of batches stepped unless the caller sets it (an offset into its own data).
  [[nodiscard]] std::int64_t data_position() const { return data_position_; }
  void set_data_position(std::int64_t position) { data_position_ = position; }

 private:
  const Graph& graph_;
  Plan plan_;
  Backend& backend_;
  MeshComms& comms_;
  MemoryTracker tracker_;
  TrackingAllocator tracking_;
  std::vector<TensorId> index_inputs_;
  trace::Recorder* recorder_ = nullptr;  // with TrainerOptions::trace: this rank's
  std::unique_ptr<TracingBackend> traced_backend_;
  std::unique_ptr<TracingComm> traced_world_;
  std::unique_ptr<MeshComms> traced_comms_;
  std::unique_ptr<Executor> executor_;
  std::int64_t data_position_ = 0;
};

}  // namespace carto
