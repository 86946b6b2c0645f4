// carto/runtime/executor.hpp — runs a plan: one rank's forward, backward, resharding, ZeRO and
// AdamW on its local shards.
//
// Design note (DESIGN.md §7-§8). An Executor is one rank of a sharded training step. It takes the
// graph of one micro-batch, one Strategy per op (a Plan names them by index), the checkpoint flag
// of every group, the ZeRO stage, a Backend for the local kernels and the MeshComms of the mesh. It
// follows the cost model's rules (search/evaluate.hpp, search/dp.hpp) so that what runs is what was
// priced:
//  - A tensor is stored in its producer's output spec; a parameter in its first consumer's input
//    spec. An op that reads another spec reshards first (runtime/reshard_exec.hpp runs the same
//    Dijkstra plan the cost model charged). Token ids are sliced from the host batch in the spec
//    each consumer reads (every rank has the batch, as a data loader gives it).
//  - The local kernel runs on local shards; contracted einsum letters split over an axis leave the
//    output Partial over it, which the next reshard resolves when a consumer needs it. Distributed
//    layernorm all-reduces its row sums (Σx, Σx²), distributed RMSNorm its Σx² (and Σdy·γ·x̂ in
//    backward); rotary rotates a sequence shard at its global positions (the head dim is never
//    split); vocab-parallel embedding leaves a Partial output;
//    vocab-parallel cross-entropy all-reduces the row max, Σexp and the target logit (Megatron-LM's
//    scheme); fused attention with the query sequence split all-gathers K and V (and
//    reduce-scatters dK, dV).
//  - Views (split/merge heads, split groups, transpose) move no data in the model: a view of a
//  tensor read as
//    stored is kept as a reference to its base storage and materialized into a temporary only
//    while an op runs, so saved views cost their base once, as the schedule counts them. The fused
//    QKV dim is ordered per head (graph.hpp's split_heads note), so a split of it is a heads split;
//    grouped-query tensors (B, n, g, S, d) keep whole groups on every shard (split_groups).
//  - Saved tensors are those of profile/op_cost.hpp's saved_tensors, kept by reference until the
//    op's backward; an input the op read through a move is kept as the moved copy, unless the
//    stored copy is smaller: then the stored copy is kept and the move runs again in backward (the
//    regather rule). Everything else is freed after its last forward consumer.
//  - A checkpointed group keeps only its external inputs; its forward runs again (same dropout
//    streams, so the same masks) when backward reaches it.
//  - Gradients: an op's backward writes each input gradient in Strategy::gradients' spec (maybe
//    Partial), then moves it to the spec the producer needs (output spec without Partial) and adds
//    it up. Parameter gradients accumulate over micro-batches in their Partial local form and are
//    reduced once per step (Strategy::gradient_sync), then moved to the stored spec.
//  - ZeRO over each parameter's replica group (the devices holding the same slice): stage 1 keeps
//    1/r of the AdamW moments and all-gathers the updated parameter; stage 2 also keeps 1/r of the
//    gradient (reduced at each backward, as DeepSpeed does, rather than once per step); stage 3
//    also keeps 1/r of the parameter and all-gathers it before each use in forward and backward.
//    Shards are contiguous ranges of the flat local tensor, the last one padded.
//  - Randomness: parameters from rng streams keyed by the parameter's tensor id and the global
//    element index; dropout from a stream keyed by (op, step·m + micro-batch). So every plan
//    computes the same function as one device.
// Memory goes through the backend's allocator; install a MemoryTracker (TrackingAllocator) to
// measure it. Dtypes (ExecutorOptions::precision): fp32, or mixed_bf16 — bf16 activations, their
// gradients, parameter compute copies and parameter gradients; fp32 master weights beside AdamW's
// m and v (sharded with them under ZeRO), fp32 statistics, partial sums and loss; gradients reduced
// in ExecutorOptions::gradient_reduction (executor_class.hpp's note has the details). The graph's
// dtype sizes only the plan: build it with the precision the executor runs, so the two agree.
//
// The code is split along these rules into the headers of carto/runtime/executor/, each with its
// own note: executor_class.hpp (the class, its options and bookkeeping types, small helpers),
// storage.hpp (stored specs, reshards, collectives, lazy views), parameters.hpp (parameters,
// ZeRO, gradients, AdamW), inputs.hpp (the host batch; reading an op's inputs), einsum.hpp (local
// einsum through GEMM), forward.hpp (the forward pass; distributed layernorm, cross-entropy and
// attention) and backward.hpp (the backward pass, gradient routing, recomputation). This header
// includes them all and defines the constructor and the entry points that order a step; include
// it, not the parts.
#pragma once

#include "carto/runtime/executor/backward.hpp"
#include "carto/runtime/executor/einsum.hpp"
#include "carto/runtime/executor/executor_class.hpp"
#include "carto/runtime/executor/forward.hpp"
#include "carto/runtime/executor/inputs.hpp"
#include "carto/runtime/executor/parameters.hpp"
#include "carto/runtime/executor/storage.hpp"

namespace carto {

inline Executor::Executor(const Graph& graph, const DeviceMesh& mesh,
                          std::vector<Strategy> strategies, Backend& backend, MeshComms& comms,
                          const HardwareProfile& hw, ExecutorOptions options)
    : g_(graph),
      mesh_(mesh),
      st_(std::move(strategies)),
      be_(backend),
      comms_(comms),
      hw_(hw),
      opt_(std::move(options)),
      device_(comms.world().rank()) {
  validate();
  layout();
  init_parameters();
}

inline double Executor::forward_backward(std::span<const HostInput> inputs,
                                         std::int64_t micro_batch, std::int64_t micro_batches) {
  CARTO_CHECK(micro_batches >= 1 && micro_batch >= 0 && micro_batch < micro_batches, "micro-batch ",
              micro_batch, " of ", micro_batches);
  set_inputs(inputs);
  micro_ = micro_batch;
  micro_count_ = micro_batches;
  if (micro_batch == 0) begin_step();
  forward();
  const double loss = result_value();
  backward();
  host_.clear();
  return loss;
}

inline std::vector<float> Executor::evaluate(std::span<const HostInput> inputs, TensorId t) {
  const TensorInfo& info = g_.tensor(t);
  CARTO_CHECK(info.kind == TensorKind::activation && info.producer.valid(), "evaluate: tensor ",
              t.value, " is not produced by an op");
  set_inputs(inputs);
  evaluate_target_ = t;
  inference_ = true;  // no dropout
  for (std::size_t i = 0; i < remaining_.size(); ++i) remaining_[i] = consumers_[i];
  const std::size_t last = info.producer.index();
  std::vector<float> out;
  for (std::size_t k = 0; k <= last; ++k) run_forward(k, false);
  std::shared_ptr<Buffer> value = materialize(t, act_[t.index()]);
  out = gather_to_host(info.shape, view_of(t, *value, local_of(t, stored_[t.index()])),
                       stored_[t.index()]);
  evaluate_target_ = TensorId{};
  inference_ = false;
  for (auto& a : act_) a.reset();
  for (Saved& sv : saved_) sv = Saved{};
  host_.clear();
  return out;
}

}  // namespace carto
