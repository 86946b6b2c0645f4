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
//    layernorm all-reduces its row sums; vocab-parallel embedding leaves a Partial output;
//    vocab-parallel cross-entropy all-reduces the row max, Σexp and the target logit (Megatron-LM's
//    scheme); fused attention with the query sequence split all-gathers K and V (and
//    reduce-scatters dK, dV).
//  - Views (split/merge heads, transpose) move no data in the model: a view of a tensor read as
//    stored is kept as a reference to its base storage and materialized into a temporary only
//    while an op runs, so saved views cost their base once, as the schedule counts them. The fused
//    QKV dim is ordered per head (graph.hpp's split_heads note), so a split of it is a heads split.
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
// measure it. Only fp32 runs (the CPU backend's dtype); the graph's dtype sizes only the plan.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "carto/cost/hardware.hpp"
#include "carto/cost/reshard.hpp"
#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/profile/op_cost.hpp"
#include "carto/runtime/backend.hpp"
#include "carto/runtime/communicator.hpp"
#include "carto/runtime/memory.hpp"
#include "carto/runtime/reshard_exec.hpp"
#include "carto/runtime/rng.hpp"
#include "carto/search/strategy.hpp"
#include "carto/spec/layout.hpp"
#include "carto/spec/mesh.hpp"
#include "carto/spec/sharding.hpp"

namespace carto {

namespace exec_detail {
// An index of n entries, each `value`.
inline Index filled(std::size_t n, std::int64_t value) {
  Index out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(value);
  return out;
}
// The extents of a shape, as an Index.
inline Index extents_of(const TensorShape& shape) {
  Index out;
  for (const DimExtent& d : shape.dims()) out.push_back(d.extent);
  return out;
}
}  // namespace exec_detail

// An Allocator that records every allocation in a MemoryTracker and forwards to another allocator.
class TrackingAllocator final : public Allocator {
 public:
  TrackingAllocator(Allocator& base, MemoryTracker& tracker) : base_(&base), tracker_(&tracker) {}
  void* allocate(std::size_t bytes, MemoryCategory category) override {
    void* p = base_->allocate(bytes, category);
    tracker_->record_allocate(category, static_cast<std::int64_t>(bytes));
    return p;
  }
  void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) noexcept override {
    try {
      tracker_->record_free(category, static_cast<std::int64_t>(bytes));
    } catch (...) {  // a tracker inconsistency must not leak the memory
    }
    base_->deallocate(pointer, bytes, category);
  }

 private:
  Allocator* base_;
  MemoryTracker* tracker_;
};

struct ExecutorOptions {
  int zero_stage = 0;                // 0-3
  std::vector<bool> checkpointed{};  // per group; missing entries are false
  std::uint64_t seed = 1234;
  float init_stddev = rng::kGpt2InitStd;
  AdamWArgs adamw{};
  LayerNormArgs layernorm{};
};

// Host data of one micro-batch: one entry per graph input, in tensor-id order. Token ids for
// TensorKind::index inputs, values for activation inputs; global, row-major.
struct HostInput {
  TensorId tensor{};
  std::vector<std::int32_t> ids{};
  std::vector<float> values{};
};

class Executor {
 public:
  Executor(const Graph& graph, const DeviceMesh& mesh, std::vector<Strategy> strategies,
           Backend& backend, MeshComms& comms, const HardwareProfile& hw,
           ExecutorOptions options = {})
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

  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  [[nodiscard]] const Graph& graph() const { return g_; }
  [[nodiscard]] const DeviceMesh& mesh() const { return mesh_; }
  [[nodiscard]] const std::vector<Strategy>& strategies() const { return st_; }
  [[nodiscard]] std::int64_t step_count() const { return step_; }

  // One forward and backward pass over one micro-batch of a step of `micro_batches`; parameter
  // gradients accumulate. Returns the micro-batch's loss (the result scalar; for a non-scalar
  // result, Σ result ∘ G with G the fixed normal seed gradient, see seed_gradient).
  double forward_backward(std::span<const HostInput> inputs, std::int64_t micro_batch = 0,
                          std::int64_t micro_batches = 1) {
    CARTO_CHECK(micro_batches >= 1 && micro_batch >= 0 && micro_batch < micro_batches,
                "micro-batch ", micro_batch, " of ", micro_batches);
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

  // Forward only (inference): runs the graph on `inputs` and returns the whole value of tensor
  // `t` on the host (row-major); nothing is kept afterwards and no gradient changes. Collective.
  std::vector<float> evaluate(std::span<const HostInput> inputs, TensorId t) {
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
    out = gather_to_host(info.shape, value->view(local_of(t, stored_[t.index()])),
                         stored_[t.index()]);
    evaluate_target_ = TensorId{};
    inference_ = false;
    for (auto& a : act_) a.reset();
    for (Saved& sv : saved_) sv = Saved{};
    host_.clear();
    return out;
  }

  // Reduces the accumulated parameter gradients to their stored specs (once per step).
  void finish_gradients() {
    if (opt_.zero_stage >= 2) return;  // reduced at each backward into the shards
    for (Param& p : params_) {
      bool first = true;
      for (Use& u : p.uses) {
        if (!u.accumulated) continue;
        if (u.direct) {
          reduce_partial(*u.accumulator, u.grad_spec, p.global);
          first = false;
        }
      }
      for (Use& u : p.uses) {
        if (!u.accumulated || u.direct) continue;
        reduce_partial(*u.accumulator, u.grad_spec, p.global);
        Buffer moved =
            move(p.global, u.accumulator->view(local_shape(p.global, u.grad_spec, mesh_)),
                 without_partial(u.grad_spec), p.spec, MemoryCategory::temporaries);
        if (first) be_.fill(p.grad.view(p.local), 0.0f);
        first = false;
        be_.add_scaled(moved.view(p.local), 1.0f, p.grad.view(p.local));
      }
      if (first) be_.fill(p.grad.view(p.local), 0.0f);  // no gradient reached it
    }
  }

  // One AdamW step on the local shards (after finish_gradients), then zeroes the gradients.
  void optimizer_step() {
    ++step_;
    AdamWArgs args = opt_.adamw;
    args.step = step_;
    for (Param& p : params_) {
      const std::int64_t n = p.local.numel();
      const TensorShape flat{{"flat", n}};
      if (opt_.zero_stage == 0) {
        be_.adamw_update(p.value.view(flat), p.grad.view(flat), p.m.view(flat), p.v.view(flat),
                         args);
      } else {
        const std::int64_t begin = std::min(n, p.group_rank * p.chunk);
        const std::int64_t len = std::min(n, begin + p.chunk) - begin;
        if (len > 0) {
          const TensorShape piece{{"flat", len}};
          TensorView value =
              opt_.zero_stage == 3 ? p.value.view(piece) : offset_view(p.value, begin, piece);
          ConstTensorView grad = opt_.zero_stage >= 2
                                     ? ConstTensorView(p.grad.view(piece))
                                     : ConstTensorView(offset_view(p.grad, begin, piece));
          be_.adamw_update(value, grad, p.m.view(piece), p.v.view(piece), args);
        }
        if (opt_.zero_stage < 3 && p.replicas > 1) {
          // All-gather the updated parameter over the replica group.
          Buffer send =
              be_.allocate({{"chunk", p.chunk}}, DType::fp32, MemoryCategory::temporaries);
          be_.fill(send.view({{"chunk", p.chunk}}), 0.0f);
          if (len > 0) {
            be_.copy_box(offset_view(p.value, begin, {{"flat", len}}),
                         {.offset = {0}, .extent = {len}}, send.view({{"chunk", p.chunk}}), {0},
                         CopyMode::assign);
          }
          all_gather_chunks(p, send.view({{"chunk", p.chunk}}), p.value.view(flat));
        }
      }
      be_.fill(p.grad.view(opt_.zero_stage >= 2 ? TensorShape{{"chunk", p.chunk}} : flat), 0.0f);
    }
    be_.synchronize();
  }

  // The whole (global) value of a parameter on the host, row-major. Collective: every rank calls.
  std::vector<float> parameter(TensorId t) {
    Param& p = param_of(t);
    std::shared_ptr<Buffer> full = parameter_local(p);
    return gather_to_host(p.global, full->view(p.local), p.spec);
  }
  // The whole reduced gradient of a parameter (after finish_gradients). Collective.
  std::vector<float> gradient(TensorId t) {
    Param& p = param_of(t);
    if (opt_.zero_stage >= 2) {
      Buffer full = gather_chunks(p, p.grad);
      return gather_to_host(p.global, full.view(p.local), p.spec);
    }
    return gather_to_host(p.global, p.grad.view(p.local), p.spec);
  }
  // Every parameter tensor of the graph, in tensor-id order.
  [[nodiscard]] std::vector<TensorId> parameters() const {
    std::vector<TensorId> out;
    for (const Param& p : params_) out.push_back(p.id);
    return out;
  }
  // The stored spec of a tensor.
  [[nodiscard]] const ShardingSpec& stored_spec(TensorId t) const { return stored_.at(t.index()); }

  // The normal seed gradient of a non-scalar result: G[i] = rng::normal(stream, i).
  [[nodiscard]] RngStream seed_stream() const {
    return {.seed = opt_.seed, .id = stream_id(RngPurpose::test, 0, 0)};
  }

 private:
  // ---- bookkeeping types ----
  struct Use {  // one op reading a parameter
    std::size_t op = 0;
    std::size_t input = 0;
    ShardingSpec want{};
    ShardingSpec grad_spec{};
    bool direct = false;  // accumulates straight into Param::grad (first consumer, same spec)
    bool accumulated = false;
    std::shared_ptr<Buffer> accumulator{};  // Partial local gradient (ZeRO 0-1)
  };
  struct Param {
    TensorId id{};
    TensorShape global{};
    ShardingSpec spec{};
    TensorShape local{};
    AxisList replica_axes{};
    std::int64_t replicas = 1;
    std::int64_t chunk = 0;  // ZeRO shard length (elements)
    std::int64_t group_rank = 0;
    Communicator* comm = nullptr;  // the replica group, if replicas > 1
    Buffer value, grad, m, v;
    std::vector<Use> uses;
  };
  struct SavedInput {
    std::shared_ptr<Buffer> buffer{};  // the moved copy, or the stored (base) storage
    bool moved_copy = false;
  };
  struct Saved {
    std::array<SavedInput, 3> inputs{};
    std::shared_ptr<Buffer> output{};
    std::shared_ptr<Buffer> extra{};  // cross-entropy: the logits read
    Buffer state1, state2;            // mean/rstd, logsumexp
  };

  // ---- set-up ----
  void validate() {
    CARTO_CHECK(st_.size() == g_.num_ops(), "an Executor needs one strategy per op: got ",
                st_.size(), " for ", g_.num_ops(), " ops");
    for (std::size_t k = 0; k < st_.size(); ++k) {
      CARTO_CHECK(st_[k].op.value == static_cast<std::int32_t>(k), "strategy ", k, " is for op ",
                  st_[k].op.value, "; op k's goes at index k");
    }
    CARTO_CHECK(opt_.zero_stage >= 0 && opt_.zero_stage <= 3, "ZeRO stage ", opt_.zero_stage,
                " is not 0, 1, 2 or 3");
    CARTO_CHECK(comms_.mesh() == mesh_, "the plan's mesh ", mesh_,
                " differs from the communicators' mesh ", comms_.mesh());
    for (const Op& op : g_.ops()) {
      if ((op.kind == OpKind::softmax || op.kind == OpKind::layernorm) &&
          op.dim + 1 != g_.tensor(op.inputs[0]).shape.rank()) {
        detail::fail("carto: the executor runs ", to_string_view(op.kind),
                     " over the last dim only; this one reduces dim ", op.dim);
      }
    }
  }

  void layout() {
    const std::size_t n = g_.tensors().size();
    stored_.assign(n, ShardingSpec{});
    consumers_.assign(n, 0);
    lazy_.assign(n, false);
    act_.assign(n, nullptr);
    grad_.assign(n, nullptr);
    remaining_.assign(n, 0);
    saved_.clear();
    saved_.resize(g_.num_ops());
    std::vector<bool> has(n, false);
    for (std::size_t k = 0; k < g_.num_ops(); ++k) {
      const Op& op = g_.ops()[k];
      for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        const std::size_t t = op.inputs[i].index();
        ++consumers_[t];
        if (!has[t]) {
          stored_[t] = st_[k].sharding.inputs[i];
          has[t] = true;
        }
      }
      stored_[op.output.index()] = st_[k].sharding.output;
      has[op.output.index()] = true;
      // A view of its input as stored is lazy (aliases the base storage).
      const TensorInfo& in = g_.tensor(op.inputs[0]);
      lazy_[op.output.index()] = op.kind == OpKind::view && in.kind == TensorKind::activation &&
                                 in.producer.valid() &&
                                 stored_[op.inputs[0].index()] == st_[k].sharding.inputs[0];
    }
  }

  void init_parameters() {
    for (std::size_t t = 0; t < g_.tensors().size(); ++t) {
      const TensorInfo& info = g_.tensors()[t];
      if (info.kind != TensorKind::parameter) continue;
      Param p;
      p.id = TensorId{static_cast<std::int32_t>(t)};
      p.global = info.shape;
      p.spec = stored_[t];
      p.local = local_shape(p.global, p.spec, mesh_);
      for (std::size_t a = 0; a < mesh_.num_axes(); ++a) {
        const AxisName& name = mesh_.axis(a).name;
        if (!p.spec.uses(name) && mesh_.axis(a).size > 1) p.replica_axes.push_back(name);
      }
      p.replicas = replication_factor(p.spec, mesh_);
      const std::int64_t n = p.local.numel();
      p.chunk = (n + p.replicas - 1) / p.replicas;
      if (p.replicas > 1) {
        p.comm = &comms_.axes(p.replica_axes);
        p.group_rank = p.comm->rank();
      }
      // Value: GPT-2's initialisation, by the op that reads it.
      Buffer full = be_.allocate(
          p.local, DType::fp32,
          opt_.zero_stage == 3 ? MemoryCategory::temporaries : MemoryCategory::parameters);
      init_value(p, full.view(p.local));
      const TensorShape chunk{{"chunk", p.chunk}};
      if (opt_.zero_stage == 3) {
        p.value = be_.allocate(chunk, DType::fp32, MemoryCategory::parameters);
        copy_chunk(full.view(p.local), p, p.value.view(chunk));
      } else {
        p.value = std::move(full);
      }
      const TensorShape& state = opt_.zero_stage >= 1 ? chunk : p.local;
      p.m = be_.allocate(state, DType::fp32, MemoryCategory::optimizer);
      p.v = be_.allocate(state, DType::fp32, MemoryCategory::optimizer);
      be_.fill(p.m.view(state), 0.0f);
      be_.fill(p.v.view(state), 0.0f);
      const TensorShape& grad = opt_.zero_stage >= 2 ? chunk : p.local;
      p.grad = be_.allocate(grad, DType::fp32, MemoryCategory::gradients);
      be_.fill(p.grad.view(grad), 0.0f);
      // Uses.
      for (std::size_t k = 0; k < g_.num_ops(); ++k) {
        const Op& op = g_.ops()[k];
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
          if (op.inputs[i].index() != t) continue;
          Use u{.op = k,
                .input = i,
                .want = st_[k].sharding.inputs[i],
                .grad_spec = st_[k].gradients[i]};
          u.direct = p.uses.empty() && without_partial(u.grad_spec) == p.spec;
          p.uses.push_back(std::move(u));
        }
      }
      param_index_[t] = params_.size();
      params_.push_back(std::move(p));
    }
    be_.synchronize();
  }

  void init_value(const Param& p, TensorView value) {
    // The first consumer decides: layernorm gamma 1, beta 0; a bias 0; otherwise normal.
    float constant = -1;
    for (const Op& op : g_.ops()) {
      for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        if (op.inputs[i] != p.id) continue;
        if (op.kind == OpKind::layernorm) constant = i == 1 ? 1.0f : 0.0f;
        if (op.kind == OpKind::bias) constant = 0.0f;
        goto decided;
      }
    }
  decided:
    if (constant >= 0) {
      be_.fill(value, constant);
    } else {
      be_.fill_normal(
          value, opt_.init_stddev,
          {.seed = opt_.seed,
           .id = stream_id(RngPurpose::parameter_init, static_cast<std::uint32_t>(p.id.value), 0)},
          placement(p.global, p.spec));
    }
  }

  // ---- small helpers ----
  [[nodiscard]] ShardPlacement placement(const TensorShape& global,
                                         const ShardingSpec& spec) const {
    const Slice s = device_slice(global, without_partial(spec), mesh_, device_);
    ShardPlacement p;
    for (std::size_t d = 0; d < global.rank(); ++d)
      p.global_extents.push_back(global.dims()[d].extent);
    p.offset = s.offset;
    return p;
  }
  [[nodiscard]] TensorShape local_of(TensorId t, const ShardingSpec& spec) const {
    return local_shape(g_.tensor(t).shape, spec, mesh_);
  }
  static TensorView offset_view(const Buffer& b, std::int64_t offset, const TensorShape& shape) {
    CARTO_CHECK(static_cast<std::size_t>((offset + shape.numel()) * 4) <= b.bytes(),
                "a view past the end of a buffer");
    return {.data = static_cast<float*>(b.data()) + offset, .shape = shape, .dtype = DType::fp32};
  }
  std::shared_ptr<Buffer> allocate(const TensorShape& shape, MemoryCategory c) {
    return std::make_shared<Buffer>(be_.allocate(shape, DType::fp32, c));
  }
  std::shared_ptr<Buffer> zeros(const TensorShape& shape, MemoryCategory c) {
    auto b = allocate(shape, c);
    be_.fill(b->view(shape), 0.0f);
    return b;
  }
  Param& param_of(TensorId t) {
    const auto it = param_index_.find(t.index());
    CARTO_CHECK(it != param_index_.end(), "tensor ", t.value, " is not a parameter");
    return params_[it->second];
  }

  Buffer move(const TensorShape& global, ConstTensorView local, const ShardingSpec& from,
              const ShardingSpec& to, MemoryCategory category) {
    be_.synchronize();
    return reshard_tensor(be_, comms_, cache_, hw_, global, local, from, to, category);
  }

  // All-reduce a Partial local tensor over its Partial axes, in place.
  void reduce_partial(Buffer& b, const ShardingSpec& spec, const TensorShape& global) {
    if (!spec.is_partial()) return;
    const TensorShape local = local_shape(global, without_partial(spec), mesh_);
    be_.synchronize();
    comms_.axes(spec.partial())
        .all_reduce(std::span<float>(b.view(local).f32(), static_cast<std::size_t>(local.numel())),
                    ReduceOp::sum)
        .wait();
  }

  // The flat chunk of this rank (ZeRO) of a full local tensor.
  void copy_chunk(ConstTensorView full, const Param& p, TensorView chunk) {
    const std::int64_t n = full.numel();
    const std::int64_t begin = std::min(n, p.group_rank * p.chunk);
    const std::int64_t len = std::min(n, begin + p.chunk) - begin;
    be_.fill(chunk, 0.0f);
    if (len > 0) {
      be_.copy_box(reshaped(full, {{"flat", n}}), {.offset = {begin}, .extent = {len}},
                   reshaped(chunk, {{"chunk", p.chunk}}), {0}, CopyMode::assign);
    }
  }
  // dst (the full local tensor, n elements) = the first n elements of the replica group's chunks
  // concatenated in group-rank order.
  void all_gather_chunks(Param& p, ConstTensorView chunk, TensorView dst) {
    const std::int64_t n = p.local.numel();
    if (p.replicas == 1) {
      be_.copy_box(chunk, {.offset = {0}, .extent = {n}}, reshaped(dst, {{"flat", n}}), {0},
                   CopyMode::assign);
      return;
    }
    const TensorShape all_shape{{"all", p.chunk * p.replicas}};
    Buffer all = be_.allocate(all_shape, DType::fp32, MemoryCategory::temporaries);
    be_.synchronize();
    p.comm
        ->all_gather(std::span<const float>(chunk.f32(), static_cast<std::size_t>(p.chunk)),
                     std::span<float>(all.view(all_shape).f32(),
                                      static_cast<std::size_t>(p.chunk * p.replicas)))
        .wait();
    be_.copy_box(all.view(all_shape), {.offset = {0}, .extent = {n}}, reshaped(dst, {{"flat", n}}),
                 {0}, CopyMode::assign);
  }
  // The full local tensor from the chunks of the replica group (ZeRO-3 gather).
  Buffer gather_chunks(Param& p, const Buffer& chunk) {
    Buffer out = be_.allocate(p.local, DType::fp32, MemoryCategory::temporaries);
    all_gather_chunks(p, chunk.view({{"chunk", p.chunk}}), out.view(p.local));
    return out;
  }
  std::shared_ptr<Buffer> parameter_local(Param& p) {
    if (opt_.zero_stage == 3) return std::make_shared<Buffer>(gather_chunks(p, p.value));
    return std::shared_ptr<Buffer>(&p.value, [](Buffer*) {});  // borrowed
  }

  std::vector<float> gather_to_host(const TensorShape& global, ConstTensorView local,
                                    const ShardingSpec& spec) {
    const ShardingSpec whole = ShardingSpec::replicated(global.rank());
    std::vector<float> out(static_cast<std::size_t>(global.numel()));
    if (spec == whole) {
      be_.synchronize();
      be_.copy_to_host(local, out.data());
      return out;
    }
    Buffer b = move(global, local, spec, whole, MemoryCategory::temporaries);
    be_.synchronize();
    be_.copy_to_host(b.view(global), out.data());
    return out;
  }

  // ---- inputs ----
  void set_inputs(std::span<const HostInput> inputs) {
    host_.clear();
    for (const HostInput& in : inputs) {
      const TensorInfo& info = g_.tensor(in.tensor);
      CARTO_CHECK(!info.producer.valid() && info.kind != TensorKind::parameter, "tensor ",
                  in.tensor.value, " is not a graph input");
      const auto n = static_cast<std::size_t>(info.shape.numel());
      if (info.kind == TensorKind::index) {
        CARTO_CHECK(in.ids.size() == n, "input ", in.tensor.value, " of shape ", info.shape,
                    " needs ", n, " token ids; got ", in.ids.size());
      } else {
        CARTO_CHECK(in.values.size() == n, "input ", in.tensor.value, " of shape ", info.shape,
                    " needs ", n, " values; got ", in.values.size());
      }
      host_[in.tensor.index()] = &in;
    }
    for (std::size_t t = 0; t < g_.tensors().size(); ++t) {
      const TensorInfo& info = g_.tensors()[t];
      if (!info.producer.valid() && info.kind != TensorKind::parameter && consumers_[t] > 0) {
        CARTO_CHECK(host_.contains(t), "graph input ", t, " (", info.shape,
                    ") got no data; pass one HostInput per graph input");
      }
    }
  }
  // The local slice of a host input in `spec` (no Partial for inputs: a Partial spec keeps the
  // value on coordinate 0 of each Partial axis).
  std::shared_ptr<Buffer> host_slice(TensorId t, const ShardingSpec& spec) {
    const HostInput& in = *host_.at(t.index());
    const TensorShape& global = g_.tensor(t).shape;
    const TensorShape local = local_shape(global, without_partial(spec), mesh_);
    const Slice s = device_slice(global, without_partial(spec), mesh_, device_);
    bool zero = false;
    for (const AxisName& a : spec.partial())
      zero = zero || mesh_.coord(device_)[mesh_.index_of(a)] != 0;
    std::vector<float> data(static_cast<std::size_t>(local.numel()));
    Index idx = exec_detail::filled(local.rank(), 0);
    Index gstride = exec_detail::filled(global.rank(), 1);
    for (std::size_t d = global.rank(); d-- > 1;)
      gstride[d - 1] = gstride[d] * global.dims()[d].extent;
    for (std::size_t e = 0; e < data.size(); ++e) {
      std::int64_t gi = 0;
      for (std::size_t d = 0; d < local.rank(); ++d) gi += (s.offset[d] + idx[d]) * gstride[d];
      const auto g = static_cast<std::size_t>(gi);
      if (g_.tensor(t).kind == TensorKind::index) {
        std::int32_t v = in.ids[g];
        std::memcpy(&data[e], &v, 4);
      } else {
        data[e] = zero ? 0.0f : in.values[g];
      }
      for (std::size_t d = local.rank(); d-- > 0;) {
        if (++idx[d] < local.dims()[d].extent) break;
        idx[d] = 0;
      }
    }
    auto b = allocate(local, MemoryCategory::activations);
    be_.copy_from_host(data.data(), b->view(local));
    return b;
  }
  static IndexView index_view(const Buffer& b, const TensorShape& shape) {
    return {.data = static_cast<const std::int32_t*>(b.data()), .shape = shape};
  }

  // ---- materialization of a tensor as stored ----
  // The local tensor `t` in its stored spec, given the storage `base` of its (lazy view) chain.
  std::shared_ptr<Buffer> materialize(TensorId t, const std::shared_ptr<Buffer>& base) {
    if (!lazy_[t.index()]) return base;
    const Op& op = g_.op(g_.tensor(t).producer);
    std::shared_ptr<Buffer> in = materialize(op.inputs[0], base);
    const TensorShape in_local = local_of(op.inputs[0], stored_[op.inputs[0].index()]);
    const TensorShape out_local = local_of(t, stored_[t.index()]);
    auto out = allocate(out_local, MemoryCategory::temporaries);
    view_copy(op, in->view(in_local), out->view(out_local), CopyMode::assign, false);
    return out;
  }

  // y = view(x) (forward), or dx (+)= view⁻¹(dy) (inverse).
  void view_copy(const Op& op, ConstTensorView x, TensorView y, CopyMode mode, bool inverse) {
    // x is the view's input shape when !inverse; when inverse, x is the view's output (dy) and y
    // the input's gradient.
    const TensorShape& out = inverse ? x.shape() : y.shape;
    const TensorShape& in = inverse ? y.shape : x.shape();
    const Index extents = exec_detail::extents_of(out);
    const StridedBox contiguous =
        box_of(out, {.offset = exec_detail::filled(out.rank(), 0), .extent = extents});
    StridedBox in_box;
    switch (op.view) {
      case ViewKind::split_heads: {
        // Local shards keep whole heads (the fused dim is ordered per head), so the box of the
        // local fused tensor is the local split.
        const std::int64_t heads = out.dims()[1].extent, d = out.dims()[3].extent;
        in_box = heads_box(in, in.dims()[2].extent / (heads * d), static_cast<std::int64_t>(op.dim),
                           heads);
        break;
      }
      case ViewKind::merge_heads: {
        // out (B, S, a·d) seen as (B, a, S, d) is heads_box(out, 1, 0, a); walk in's index space.
        const Index in_ext = exec_detail::extents_of(in);
        const StridedBox out_box = heads_box(out, 1, 0, in.dims()[1].extent);
        const StridedBox in_contig =
            box_of(in, {.offset = exec_detail::filled(4, 0), .extent = in_ext});
        if (!inverse) {
          be_.copy_strided(x, in_contig, y, out_box, in_ext, mode);
        } else {
          be_.copy_strided(x, out_box, y, in_contig, in_ext, mode);
        }
        return;
      }
      case ViewKind::transpose: {
        // out = in with the last two dims swapped: walk out's index space, read in transposed.
        in_box = box_of(in, {.offset = exec_detail::filled(in.rank(), 0),
                             .extent = exec_detail::extents_of(in)});
        std::swap(in_box.strides[in.rank() - 1], in_box.strides[in.rank() - 2]);
        break;
      }
    }
    if (!inverse) {
      be_.copy_strided(x, in_box, y, contiguous, extents, mode);
    } else {
      be_.copy_strided(x, contiguous, y, in_box, extents, mode);
    }
  }

  // ---- reading an op's input in the spec it wants ----
  struct Read {
    std::shared_ptr<Buffer> buffer;  // holds the local tensor in `want`
    std::shared_ptr<Buffer> stored;  // the stored storage (for saving)
    bool moved = false;
  };
  Read read_input(std::size_t k, std::size_t i) {
    const Op& op = g_.ops()[k];
    const TensorId t = op.inputs[i];
    const TensorInfo& info = g_.tensor(t);
    const ShardingSpec& want = st_[k].sharding.inputs[i];
    const ShardingSpec& have = stored_[t.index()];
    if (info.kind == TensorKind::parameter) {
      Param& p = param_of(t);
      std::shared_ptr<Buffer> full = parameter_local(p);
      if (want == have) return {full, nullptr, false};
      return {std::make_shared<Buffer>(
                  move(p.global, full->view(p.local), have, want, MemoryCategory::temporaries)),
              nullptr, true};
    }
    if (!info.producer.valid()) {  // graph input: slice the host data in the wanted spec
      auto b = host_slice(t, want);
      return {b, b, false};
    }
    CARTO_CHECK(act_[t.index()] != nullptr, "op ", k, " reads tensor ", t.value,
                " after it was freed");
    std::shared_ptr<Buffer> value = materialize(t, act_[t.index()]);
    if (want == have) return {value, act_[t.index()], false};
    return {std::make_shared<Buffer>(move(info.shape, value->view(local_of(t, have)), have, want,
                                          MemoryCategory::activations)),
            act_[t.index()], true};
  }

  // The input again in backward: a saved moved copy, or the stored storage (plus the move), or a
  // parameter / host input re-read.
  std::shared_ptr<Buffer> reread(std::size_t k, std::size_t i) {
    const Op& op = g_.ops()[k];
    const TensorId t = op.inputs[i];
    const TensorInfo& info = g_.tensor(t);
    const ShardingSpec& want = st_[k].sharding.inputs[i];
    const ShardingSpec& have = stored_[t.index()];
    const SavedInput& s = saved_[k].inputs[i];
    if (info.kind == TensorKind::parameter) return read_input(k, i).buffer;
    if (!info.producer.valid()) return s.buffer != nullptr ? s.buffer : host_slice(t, want);
    CARTO_CHECK(s.buffer != nullptr, "op ", k, " input ", i, " was not saved for backward");
    if (s.moved_copy) return s.buffer;
    std::shared_ptr<Buffer> value = materialize(t, s.buffer);
    if (want == have) return value;
    return std::make_shared<Buffer>(
        move(info.shape, value->view(local_of(t, have)), have, want, MemoryCategory::temporaries));
  }

  // ---- forward ----
  void begin_step() {
    for (Param& p : params_) {
      for (Use& u : p.uses) {
        if (u.accumulator != nullptr) {
          be_.fill(u.accumulator->view(local_of(p.id, without_partial(u.grad_spec))), 0.0f);
        }
        u.accumulated = false;
      }
    }
  }

  [[nodiscard]] bool checkpointed(std::int32_t group) const {
    return group >= 0 && static_cast<std::size_t>(group) < opt_.checkpointed.size() &&
           opt_.checkpointed[static_cast<std::size_t>(group)] &&
           g_.groups()[static_cast<std::size_t>(group)].kind == GroupKind::transformer_block;
  }

  void forward() {
    for (std::size_t t = 0; t < remaining_.size(); ++t) remaining_[t] = consumers_[t];
    ckpt_inputs_.assign(g_.groups().size(), {});
    for (std::size_t k = 0; k < g_.num_ops(); ++k) {
      const Op& op = g_.ops()[k];
      const bool ckpt = checkpointed(op.group);
      if (ckpt) {  // keep the external inputs of the group for its recompute
        const OpGroup& grp = g_.groups()[static_cast<std::size_t>(op.group)];
        for (TensorId t : op.inputs) {
          const TensorInfo& info = g_.tensor(t);
          if (info.kind == TensorKind::activation && info.producer.valid() &&
              (info.producer.value < grp.first_op || info.producer.value >= grp.end_op)) {
            ckpt_inputs_[static_cast<std::size_t>(op.group)].push_back({t, act_[t.index()]});
          }
        }
      }
      run_forward(k, !ckpt);
    }
  }

  double result_value() {
    const TensorId r = g_.result();
    const TensorInfo& info = g_.tensor(r);
    CARTO_CHECK(act_[r.index()] != nullptr, "the result tensor was freed");
    std::shared_ptr<Buffer> value = materialize(r, act_[r.index()]);
    std::vector<float> host = gather_to_host(
        info.shape, value->view(local_of(r, stored_[r.index()])), stored_[r.index()]);
    if (info.shape.numel() == 1) return host[0];
    double sum = 0;
    const RngStream s = seed_stream();
    for (std::size_t i = 0; i < host.size(); ++i)
      sum += static_cast<double>(host[i]) * rng::normal(s, static_cast<std::int64_t>(i));
    return sum;
  }

  [[nodiscard]] RngStream dropout_stream(std::size_t k) const {
    return {.seed = opt_.seed,
            .id = stream_id(RngPurpose::dropout, static_cast<std::uint32_t>(k),
                            static_cast<std::uint32_t>(step_ * micro_count_ + micro_))};
  }

  [[nodiscard]] bool kept(TensorId t) const { return t == g_.result() || t == evaluate_target_; }
  void release_after_use(TensorId t) {
    if (--remaining_[t.index()] <= 0 && !kept(t)) act_[t.index()].reset();
  }

  void run_forward(std::size_t k, bool keep) {
    const Op& op = g_.ops()[k];
    const Strategy& s = st_[k];
    Saved& sv = saved_[k];
    sv = Saved{};
    const auto saved_list = saved_tensors(g_, op);
    auto is_saved = [&](TensorId t) {
      return std::find(saved_list.begin(), saved_list.end(), t) != saved_list.end();
    };
    const TensorId out = op.output;
    const TensorShape out_global = g_.tensor(out).shape;
    const TensorShape out_local = local_of(out, s.sharding.output);

    if (op.kind == OpKind::view && lazy_[out.index()]) {  // alias the base storage
      act_[out.index()] = act_[op.inputs[0].index()];
      release_after_use(op.inputs[0]);
      if (remaining_[out.index()] <= 0 && !kept(out)) act_[out.index()].reset();
      return;
    }

    std::array<Read, 3> in{};
    std::array<TensorShape, 3> in_local{};
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      in[i] = read_input(k, i);
      in_local[i] = local_of(op.inputs[i], without_partial(s.sharding.inputs[i]));
      const TensorId t = op.inputs[i];
      if (keep && is_saved(t)) {
        const TensorInfo& info = g_.tensor(t);
        const bool regather = in[i].moved && info.producer.valid() &&
                              local_of(t, stored_[t.index()]).numel() < in_local[i].numel();
        if (!in[i].moved || regather) {
          sv.inputs[i] = {in[i].stored != nullptr ? in[i].stored : in[i].buffer, false};
        } else {
          sv.inputs[i] = {in[i].buffer, true};
        }
      }
    }
    auto X = [&](std::size_t i) { return ConstTensorView(in[i].buffer->view(in_local[i])); };
    auto Ids = [&](std::size_t i) { return index_view(*in[i].buffer, in_local[i]); };

    auto y = allocate(out_local, MemoryCategory::activations);
    TensorView Y = y->view(out_local);
    switch (op.kind) {
      case OpKind::einsum:
        local_einsum(op.einsum.inputs[0], X(0), op.einsum.inputs[1], X(1), op.einsum.output, Y,
                     false);
        break;
      case OpKind::gelu: be_.gelu_forward(X(0), Y); break;
      case OpKind::dropout:
        be_.dropout_forward(X(0), Y,
                            {.probability = inference_ ? 0.0f : static_cast<float>(op.probability),
                             .rng = dropout_stream(k),
                             .placement = placement(out_global, s.sharding.output)});
        break;
      case OpKind::scale: be_.scale(X(0), static_cast<float>(op.factor), Y); break;
      case OpKind::add: be_.add(X(0), X(1), Y); break;
      case OpKind::bias: be_.bias_forward(X(0), X(1), Y); break;
      case OpKind::softmax:
        be_.softmax_forward(X(0), Y,
                            {.scale = 1.0f,
                             .masking = op.masking,
                             .placement = placement(out_global, s.sharding.output)});
        break;
      case OpKind::layernorm: layernorm_forward(k, X(0), X(1), X(2), Y, sv); break;
      case OpKind::gather: {
        const Slice table =
            device_slice(g_.tensor(op.inputs[0]).shape, s.sharding.inputs[0], mesh_, device_);
        be_.embedding_forward(X(0), Ids(1), Y, {.vocab_offset = table.offset[0]});
        break;
      }
      case OpKind::softmax_cross_entropy:
        cross_entropy_forward(k, X(0), Ids(1), Y, sv);
        sv.extra = in[0].buffer;  // the logits, in place of the fp32 softmax the model counts
        break;
      case OpKind::fused_attention: attention_forward(k, X(0), X(1), X(2), Y, sv); break;
      case OpKind::view: view_copy(op, X(0), Y, CopyMode::assign, false); break;
    }
    act_[out.index()] = y;
    if (keep && is_saved(out)) sv.output = y;
    if (!keep) sv = Saved{};  // a checkpointed group keeps nothing; it recomputes
    for (TensorId t : op.inputs) {
      if (g_.tensor(t).kind == TensorKind::activation && g_.tensor(t).producer.valid())
        release_after_use(t);
    }
    if (remaining_[out.index()] <= 0 && !kept(out)) act_[out.index()].reset();
  }

  // ---- local einsum through GEMM ----
  // C (=, +=) einsum(la·A, lb·B -> lc). Letters: batch (A, B, C), m (A, C), n (B, C), k (A, B).
  void local_einsum(const IndexLetters& la, ConstTensorView A, const IndexLetters& lb,
                    ConstTensorView B, const IndexLetters& lc, TensorView C, bool accumulate) {
    std::string batch, m, n, kk;
    auto has = [](const IndexLetters& l, char c) { return contains(l, c); };
    for (char c : lc) {
      if (has(la, c) && has(lb, c))
        batch += c;
      else if (has(la, c))
        m += c;
      else if (has(lb, c))
        n += c;
      else
        detail::fail("carto: einsum output letter '", c, "' is in no operand");
    }
    for (char c : la) {
      if (has(lb, c) && !has(lc, c))
        kk += c;
      else if (!has(lb, c) && !has(lc, c))
        detail::fail("carto: the executor's einsum sums letter '", c,
                     "' of one operand; only contractions between both operands run");
    }
    for (char c : lb) {
      if (!has(la, c) && !has(lc, c))
        detail::fail("carto: the executor's einsum sums letter '", c,
                     "' of one operand; only contractions between both operands run");
    }
    auto extent_of = [&](char c) -> std::int64_t {
      for (std::size_t d = 0; d < la.size(); ++d)
        if (la[d] == c) return A.shape().dims()[d].extent;
      for (std::size_t d = 0; d < lb.size(); ++d)
        if (lb[d] == c) return B.shape().dims()[d].extent;
      return 1;
    };
    auto prod = [&](const std::string& ls) {
      std::int64_t p = 1;
      for (char c : ls) p *= extent_of(c);
      return p;
    };
    const std::int64_t nb = prod(batch), M = prod(m), N = prod(n), K = prod(kk);
    auto letters = [](const IndexLetters& l) { return std::string(l.begin(), l.end()); };
    const std::string sa = letters(la), sb = letters(lb), sc = letters(lc);

    // Operand A as (batch, M, K) or (batch, K, M).
    std::shared_ptr<Buffer> a_tmp, b_tmp;
    Transpose ta = Transpose::no, tb = Transpose::no;
    ConstTensorView a = A, b = B;
    if (sa == batch + m + kk) {
    } else if (sa == batch + kk + m) {
      ta = Transpose::yes;
    } else {
      a_tmp = permuted(A, sa, batch + m + kk);
      a = a_tmp->view(permuted_shape(A.shape(), sa, batch + m + kk));
    }
    if (sb == batch + kk + n) {
    } else if (sb == batch + n + kk) {
      tb = Transpose::yes;
    } else {
      b_tmp = permuted(B, sb, batch + kk + n);
      b = b_tmp->view(permuted_shape(B.shape(), sb, batch + kk + n));
    }
    auto shape3 = [&](std::int64_t r, std::int64_t c) {
      return nb > 1 || !batch.empty() ? TensorShape{{"batch", nb}, {"rows", r}, {"cols", c}}
                                      : TensorShape{{"rows", r}, {"cols", c}};
    };
    const TensorShape a_shape = ta == Transpose::no ? shape3(M, K) : shape3(K, M);
    const TensorShape b_shape = tb == Transpose::no ? shape3(K, N) : shape3(N, K);
    const GemmArgs args{.a = ta, .b = tb, .alpha = 1.0f, .beta = accumulate ? 1.0f : 0.0f};
    if (sc == batch + m + n) {
      be_.gemm(reshaped(a, a_shape), reshaped(b, b_shape), reshaped(C, shape3(M, N)), args);
    } else if (sc == batch + n + m) {  // Cᵀ = Bᵀ Aᵀ
      const GemmArgs swapped{.a = tb == Transpose::no ? Transpose::yes : Transpose::no,
                             .b = ta == Transpose::no ? Transpose::yes : Transpose::no,
                             .alpha = 1.0f,
                             .beta = args.beta};
      be_.gemm(reshaped(b, b_shape), reshaped(a, a_shape), reshaped(C, shape3(N, M)), swapped);
    } else {
      const std::string canon = batch + m + n;
      const TensorShape cs = permuted_shape(C.shape, sc, canon);
      auto c_tmp = allocate(cs, MemoryCategory::temporaries);
      be_.gemm(reshaped(a, a_shape), reshaped(b, b_shape), reshaped(c_tmp->view(cs), shape3(M, N)),
               {.a = ta, .b = tb, .alpha = 1.0f, .beta = 0.0f});
      // C[sc order] (=, +=) c_tmp[canon order].
      copy_permuted(c_tmp->view(cs), canon, C, sc,
                    accumulate ? CopyMode::accumulate : CopyMode::assign);
    }
  }
  // The shape of `x` (letters `from`) permuted to letters `to`.
  static TensorShape permuted_shape(const TensorShape& x, const std::string& from,
                                    const std::string& to) {
    TensorShape out;
    for (char c : to) out.push_back(x.dims()[from.find(c)]);
    return out;
  }
  std::shared_ptr<Buffer> permuted(ConstTensorView x, const std::string& from,
                                   const std::string& to) {
    const TensorShape shape = permuted_shape(x.shape(), from, to);
    auto out = allocate(shape, MemoryCategory::temporaries);
    copy_permuted(x, from, out->view(shape), to, CopyMode::assign);
    return out;
  }
  // dst (letters `to`) (=, +=) src (letters `from`), walking dst's index space.
  void copy_permuted(ConstTensorView src, const std::string& from, TensorView dst,
                     const std::string& to, CopyMode mode) {
    const TensorShape& ss = src.shape();
    Index src_strides = exec_detail::filled(ss.rank(), 1);
    for (std::size_t d = ss.rank(); d-- > 1;)
      src_strides[d - 1] = src_strides[d] * ss.dims()[d].extent;
    StridedBox from_box{.offset = 0, .strides = {}};
    Index extents;
    for (char c : to) {
      const std::size_t d = from.find(c);
      from_box.strides.push_back(src_strides[d]);
      extents.push_back(ss.dims()[d].extent);
    }
    const StridedBox to_box =
        box_of(dst.shape, {.offset = exec_detail::filled(to.size(), 0), .extent = extents});
    be_.copy_strided(src, from_box, dst, to_box, extents, mode);
  }

  // ---- layernorm, cross-entropy, attention ----
  void layernorm_forward(std::size_t k, ConstTensorView x, ConstTensorView gamma,
                         ConstTensorView beta, TensorView y, Saved& sv) {
    const Op& op = g_.ops()[k];
    const Strategy& s = st_[k];
    const TensorShape rows = rows_shape(x.shape());
    sv.state1 = be_.allocate(rows, DType::fp32, MemoryCategory::activations);
    sv.state2 = be_.allocate(rows, DType::fp32, MemoryCategory::activations);
    if (s.sharding.variant != OpVariant::distributed_statistics) {
      be_.layernorm_forward(x, gamma, beta, y, sv.state1.view(rows), sv.state2.view(rows),
                            opt_.layernorm);
      return;
    }
    const AxisList& axes = s.sharding.inputs[0].dims()[op.dim];
    TensorShape sums_shape = rows;
    sums_shape.push_back({"stats", 2});
    Buffer sums = be_.allocate(sums_shape, DType::fp32, MemoryCategory::temporaries);
    be_.layernorm_partial_sums(x, sums.view(sums_shape));
    all_reduce(sums.view(sums_shape), axes, ReduceOp::sum);
    be_.layernorm_apply(x, sums.view(sums_shape),
                        g_.tensor(op.inputs[0]).shape.dims()[op.dim].extent, gamma, beta, y,
                        sv.state1.view(rows), sv.state2.view(rows), opt_.layernorm);
  }
  static TensorShape rows_shape(const TensorShape& x) {
    TensorShape rows;
    for (std::size_t d = 0; d + 1 < x.rank(); ++d) rows.push_back(x.dims()[d]);
    if (rows.rank() == 0) rows.push_back({"rows", 1});
    return rows;
  }
  void all_reduce(TensorView v, const AxisList& axes, ReduceOp op) {
    if (axes.empty() || split_factor(axes, mesh_) == 1) return;
    be_.synchronize();
    comms_.axes(axes)
        .all_reduce(std::span<float>(v.f32(), static_cast<std::size_t>(v.numel())), op)
        .wait();
  }

  [[nodiscard]] const AxisList& vocab_axes(std::size_t k) const {
    const ShardingSpec& logits = st_[k].sharding.inputs[0];
    return logits.dims()[logits.rank() - 1];
  }
  CrossEntropyArgs ce_args(std::size_t k) const {
    const Op& op = g_.ops()[k];
    const Slice s =
        device_slice(g_.tensor(op.inputs[0]).shape, st_[k].sharding.inputs[0], mesh_, device_);
    return {.vocab_offset = s.offset[s.offset.size() - 1],
            .token_count = g_.tensor(op.inputs[1]).shape.numel()};
  }
  void cross_entropy_forward(std::size_t k, ConstTensorView logits, IndexView targets,
                             TensorView loss, Saved& sv) {
    const TensorShape rows = rows_shape(logits.shape());
    sv.state1 = be_.allocate(rows, DType::fp32, MemoryCategory::activations);
    const CrossEntropyArgs args = ce_args(k);
    const TensorView one = reshaped(loss, {{"loss", 1}});
    const AxisList& axes = vocab_axes(k);
    if (axes.empty() || split_factor(axes, mesh_) == 1) {
      be_.cross_entropy_forward(logits, targets, one, sv.state1.view(rows), args);
      return;
    }
    Buffer mx = be_.allocate(rows, DType::fp32, MemoryCategory::temporaries);
    Buffer se = be_.allocate(rows, DType::fp32, MemoryCategory::temporaries);
    Buffer tl = be_.allocate(rows, DType::fp32, MemoryCategory::temporaries);
    be_.cross_entropy_row_max(logits, mx.view(rows));
    all_reduce(mx.view(rows), axes, ReduceOp::max);
    be_.cross_entropy_sum_exp(logits, mx.view(rows), se.view(rows));
    be_.cross_entropy_target_logit(logits, targets, tl.view(rows), args);
    all_reduce(se.view(rows), axes, ReduceOp::sum);
    all_reduce(tl.view(rows), axes, ReduceOp::sum);
    be_.cross_entropy_loss(mx.view(rows), se.view(rows), tl.view(rows), one, sv.state1.view(rows),
                           args);
  }

  AttentionArgs attention_args(std::size_t k) const {
    const Op& op = g_.ops()[k];
    const TensorShape& q = g_.tensor(op.inputs[0]).shape;  // (B, a, S, d)
    const Slice s = device_slice(q, st_[k].sharding.inputs[0], mesh_, device_);
    ShardPlacement p;
    p.global_extents = {q.dims()[0].extent, q.dims()[1].extent, q.dims()[2].extent,
                        q.dims()[2].extent};
    p.offset = {s.offset[0], s.offset[1], s.offset[2], 0};
    return {.scale = static_cast<float>(op.factor),
            .masking = op.masking,
            .dropout = inference_ ? 0.0f : static_cast<float>(op.probability),
            .rng = dropout_stream(k),
            .placement = p};
  }
  [[nodiscard]] bool gathers_kv(std::size_t k) const {
    return st_[k].sharding.variant == OpVariant::gathered_kv &&
           split_factor(st_[k].sharding.inputs[0].dims()[2], mesh_) > 1;
  }
  // K or V gathered along the sequence over the query's sequence axes.
  std::shared_ptr<Buffer> gather_seq(std::size_t k, ConstTensorView local) {
    const AxisList& axes = st_[k].sharding.inputs[0].dims()[2];
    Communicator& c = comms_.axes(axes);
    const auto r = static_cast<std::int64_t>(c.size());
    const TensorShape& ls = local.shape();
    TensorShape full = ls;
    full = TensorShape{
        ls.dims()[0], ls.dims()[1], {ls.dims()[2].name, ls.dims()[2].extent * r}, ls.dims()[3]};
    auto all = allocate({{"gathered", local.numel() * r}}, MemoryCategory::temporaries);
    be_.synchronize();
    c.all_gather(std::span<const float>(local.f32(), static_cast<std::size_t>(local.numel())),
                 std::span<float>(all->view({{"gathered", local.numel() * r}}).f32(),
                                  static_cast<std::size_t>(local.numel() * r)))
        .wait();
    auto out = allocate(full, MemoryCategory::temporaries);
    const Index ext{ls.dims()[0].extent, ls.dims()[1].extent, ls.dims()[2].extent,
                    ls.dims()[3].extent};
    for (std::int64_t j = 0; j < r; ++j) {
      const StridedBox from = box_of(ls, {.offset = exec_detail::filled(4, 0), .extent = ext});
      StridedBox piece = from;
      piece.offset += j * local.numel();
      be_.copy_strided(all->view({{"gathered", local.numel() * r}}), piece, out->view(full),
                       box_of(full, {.offset = {0, 0, j * ext[2], 0}, .extent = ext}), ext,
                       CopyMode::assign);
    }
    return out;
  }
  // d (local, += ) = reduce-scatter of the gathered gradient along the sequence.
  void scatter_seq(std::size_t k, ConstTensorView gathered, TensorView local) {
    const AxisList& axes = st_[k].sharding.inputs[0].dims()[2];
    Communicator& c = comms_.axes(axes);
    const auto r = static_cast<std::int64_t>(c.size());
    const TensorShape& ls = local.shape;
    const Index ext{ls.dims()[0].extent, ls.dims()[1].extent, ls.dims()[2].extent,
                    ls.dims()[3].extent};
    auto send = allocate({{"send", local.numel() * r}}, MemoryCategory::temporaries);
    for (std::int64_t j = 0; j < r; ++j) {
      StridedBox piece = box_of(ls, {.offset = exec_detail::filled(4, 0), .extent = ext});
      piece.offset += j * local.numel();
      be_.copy_strided(gathered,
                       box_of(gathered.shape(), {.offset = {0, 0, j * ext[2], 0}, .extent = ext}),
                       send->view({{"send", local.numel() * r}}), piece, ext, CopyMode::assign);
    }
    auto recv = allocate(ls, MemoryCategory::temporaries);
    be_.synchronize();
    c.reduce_scatter(
         std::span<const float>(send->view({{"send", local.numel() * r}}).f32(),
                                static_cast<std::size_t>(local.numel() * r)),
         std::span<float>(recv->view(ls).f32(), static_cast<std::size_t>(local.numel())),
         ReduceOp::sum)
        .wait();
    be_.add_scaled(recv->view(ls), 1.0f, local);
  }
  void attention_forward(std::size_t k, ConstTensorView q, ConstTensorView kk, ConstTensorView v,
                         TensorView out, Saved& sv) {
    const TensorShape lse = {q.shape().dims()[0], q.shape().dims()[1], q.shape().dims()[2]};
    sv.state1 = be_.allocate(lse, DType::fp32, MemoryCategory::activations);
    if (!gathers_kv(k)) {
      be_.attention_forward(q, kk, v, out, sv.state1.view(lse), attention_args(k));
      return;
    }
    auto kf = gather_seq(k, kk);
    auto vf = gather_seq(k, v);
    const TensorShape fs{
        kk.shape().dims()[0],
        kk.shape().dims()[1],
        {kk.shape().dims()[2].name, g_.tensor(g_.ops()[k].inputs[1]).shape.dims()[2].extent},
        kk.shape().dims()[3]};
    be_.attention_forward(q, kf->view(fs), vf->view(fs), out, sv.state1.view(lse),
                          attention_args(k));
  }

  // ---- backward ----
  void backward() {
    // Seed: d(step loss)/d(result) = 1/m (a scalar loss), or G/m (a non-scalar result).
    const TensorId r = g_.result();
    const ShardingSpec seed_spec = without_partial(stored_[r.index()]);
    const TensorShape local = local_of(r, seed_spec);
    auto seed = allocate(local, MemoryCategory::temporaries);
    const float inv_m = 1.0f / static_cast<float>(micro_count_);
    if (g_.tensor(r).shape.numel() == 1) {
      be_.fill(seed->view(local), inv_m);
    } else {
      be_.fill_normal(seed->view(local), inv_m, seed_stream(),
                      placement(g_.tensor(r).shape, seed_spec));
    }
    grad_[r.index()] = seed;
    act_[r.index()].reset();
    recomputed_.assign(g_.groups().size(), false);
    for (std::size_t k = g_.num_ops(); k-- > 0;) {
      const Op& op = g_.ops()[k];
      if (checkpointed(op.group) && !recomputed_[static_cast<std::size_t>(op.group)]) {
        recompute(op.group);
      }
      run_backward(k);
      saved_[k] = Saved{};
      grad_[op.output.index()].reset();
    }
    for (auto& a : act_) a.reset();
    for (auto& gr : grad_) gr.reset();
  }

  void recompute(std::int32_t group) {
    recomputed_[static_cast<std::size_t>(group)] = true;
    const OpGroup& grp = g_.groups()[static_cast<std::size_t>(group)];
    for (auto& [t, b] : ckpt_inputs_[static_cast<std::size_t>(group)]) act_[t.index()] = b;
    // Consumers inside the group only.
    for (std::int32_t k = grp.first_op; k < grp.end_op; ++k) {
      for (TensorId t : g_.ops()[static_cast<std::size_t>(k)].inputs) remaining_[t.index()] = 0;
      remaining_[g_.ops()[static_cast<std::size_t>(k)].output.index()] = 0;
    }
    for (std::int32_t k = grp.first_op; k < grp.end_op; ++k) {
      for (TensorId t : g_.ops()[static_cast<std::size_t>(k)].inputs) ++remaining_[t.index()];
    }
    for (std::int32_t k = grp.first_op; k < grp.end_op; ++k)
      run_forward(static_cast<std::size_t>(k), true);
    ckpt_inputs_[static_cast<std::size_t>(group)].clear();
    for (std::int32_t k = grp.first_op; k < grp.end_op; ++k) {
      for (TensorId t : g_.ops()[static_cast<std::size_t>(k)].inputs) act_[t.index()].reset();
    }
  }

  // Adds an input gradient (in the strategy's gradient spec) where it belongs.
  void route_gradient(std::size_t k, std::size_t i, std::shared_ptr<Buffer> grad) {
    const Op& op = g_.ops()[k];
    const TensorId t = op.inputs[i];
    const TensorInfo& info = g_.tensor(t);
    const ShardingSpec& have = st_[k].gradients[i];
    if (info.kind == TensorKind::parameter) {
      Param& p = param_of(t);
      Use* use = nullptr;
      for (Use& u : p.uses)
        if (u.op == k && u.input == i) use = &u;
      const TensorShape glocal = local_of(t, without_partial(have));
      if (opt_.zero_stage >= 2) {  // reduce now, keep this rank's chunk
        reduce_partial(*grad, have, p.global);
        std::shared_ptr<Buffer> full = grad;
        if (!(without_partial(have) == p.spec)) {
          full = std::make_shared<Buffer>(move(p.global, grad->view(glocal), without_partial(have),
                                               p.spec, MemoryCategory::temporaries));
        }
        const TensorShape chunk{{"chunk", p.chunk}};
        Buffer mine = be_.allocate(chunk, DType::fp32, MemoryCategory::temporaries);
        copy_chunk(full->view(p.local), p, mine.view(chunk));
        be_.add_scaled(mine.view(chunk), 1.0f, p.grad.view(chunk));
        return;
      }
      if (use->direct) {
        if (!use->accumulated) be_.fill(p.grad.view(p.local), 0.0f);
        be_.add_scaled(grad->view(glocal), 1.0f, p.grad.view(p.local));
        use->accumulator = std::shared_ptr<Buffer>(&p.grad, [](Buffer*) {});
      } else {
        if (use->accumulator == nullptr)
          use->accumulator = zeros(glocal, MemoryCategory::gradients);
        be_.add_scaled(grad->view(glocal), 1.0f, use->accumulator->view(glocal));
      }
      use->accumulated = true;
      return;
    }
    if (info.kind != TensorKind::activation || !info.producer.valid()) return;  // no gradient
    const ShardingSpec need = without_partial(stored_[t.index()]);
    const TensorShape need_local = local_of(t, need);
    std::shared_ptr<Buffer> moved = grad;
    if (!(have == need)) {
      moved =
          std::make_shared<Buffer>(move(info.shape, grad->view(local_of(t, without_partial(have))),
                                        have, need, MemoryCategory::temporaries));
    }
    if (grad_[t.index()] == nullptr) {
      grad_[t.index()] = moved;
    } else {
      be_.add_scaled(moved->view(need_local), 1.0f, grad_[t.index()]->view(need_local));
    }
  }

  void run_backward(std::size_t k) {
    const Op& op = g_.ops()[k];
    const Strategy& s = st_[k];
    const TensorId out = op.output;
    std::shared_ptr<Buffer> dy_buf = grad_[out.index()];
    if (dy_buf == nullptr) return;  // the output does not reach the result
    const TensorShape out_local = local_of(out, without_partial(s.sharding.output));
    const ConstTensorView dY = dy_buf->view(out_local);
    Saved& sv = saved_[k];

    std::array<std::shared_ptr<Buffer>, 3> dx{};
    std::array<TensorShape, 3> in_local{};
    std::array<TensorShape, 3> g_local{};
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      in_local[i] = local_of(op.inputs[i], without_partial(s.sharding.inputs[i]));
      g_local[i] = local_of(op.inputs[i], without_partial(s.gradients[i]));
      // Every non-index input gets a gradient buffer (graph inputs' are dropped by routing).
      if (g_.tensor(op.inputs[i]).kind != TensorKind::index)
        dx[i] = zeros(g_local[i], MemoryCategory::temporaries);
    }
    auto DX = [&](std::size_t i) { return dx[i]->view(g_local[i]); };
    std::array<std::shared_ptr<Buffer>, 3> x{};
    auto X = [&](std::size_t i) -> ConstTensorView {
      if (x[i] == nullptr) x[i] = reread(k, i);
      return x[i]->view(in_local[i]);
    };
    auto Ids = [&](std::size_t i) {
      if (x[i] == nullptr) x[i] = reread(k, i);
      return index_view(*x[i], in_local[i]);
    };

    switch (op.kind) {
      case OpKind::einsum: {
        const IndexLetters& la = op.einsum.inputs[0];
        const IndexLetters& lb = op.einsum.inputs[1];
        const IndexLetters& lc = op.einsum.output;
        if (dx[0]) local_einsum(lc, dY, lb, X(1), la, DX(0), true);
        if (dx[1]) local_einsum(la, X(0), lc, dY, lb, DX(1), true);
        break;
      }
      case OpKind::gelu: be_.gelu_backward(X(0), dY, DX(0)); break;
      case OpKind::dropout:
        be_.dropout_backward(dY, DX(0),
                             {.probability = static_cast<float>(op.probability),
                              .rng = dropout_stream(k),
                              .placement = placement(g_.tensor(out).shape, s.sharding.output)});
        break;
      case OpKind::scale: be_.add_scaled(dY, static_cast<float>(op.factor), DX(0)); break;
      case OpKind::add:
        if (dx[0]) be_.add_scaled(dY, 1.0f, DX(0));
        if (dx[1]) be_.add_scaled(dY, 1.0f, DX(1));
        break;
      case OpKind::bias:
        if (dx[0]) be_.add_scaled(dY, 1.0f, DX(0));
        if (dx[1]) be_.bias_backward(dY, DX(1));
        break;
      case OpKind::softmax:
        be_.softmax_backward(sv.output->view(out_local), dY, DX(0),
                             {.scale = 1.0f,
                              .masking = op.masking,
                              .placement = placement(g_.tensor(out).shape, s.sharding.output)});
        break;
      case OpKind::layernorm: {
        const TensorShape rows = rows_shape(in_local[0]);
        auto tmp0 = dx[0] ? nullptr : zeros(in_local[0], MemoryCategory::temporaries);
        auto tmp1 = dx[1] ? nullptr : zeros(in_local[1], MemoryCategory::temporaries);
        auto tmp2 = dx[2] ? nullptr : zeros(in_local[2], MemoryCategory::temporaries);
        TensorView d0 = dx[0] ? DX(0) : tmp0->view(in_local[0]);
        TensorView d1 = dx[1] ? DX(1) : tmp1->view(in_local[1]);
        TensorView d2 = dx[2] ? DX(2) : tmp2->view(in_local[2]);
        if (s.sharding.variant != OpVariant::distributed_statistics) {
          be_.layernorm_backward(dY, X(0), X(1), sv.state1.view(rows), sv.state2.view(rows), d0, d1,
                                 d2);
        } else {
          TensorShape sums_shape = rows;
          sums_shape.push_back({"stats", 2});
          Buffer sums = be_.allocate(sums_shape, DType::fp32, MemoryCategory::temporaries);
          be_.layernorm_backward_partial_sums(dY, X(0), X(1), sv.state1.view(rows),
                                              sv.state2.view(rows), sums.view(sums_shape));
          all_reduce(sums.view(sums_shape), s.sharding.inputs[0].dims()[op.dim], ReduceOp::sum);
          be_.layernorm_backward_apply(
              dY, X(0), X(1), sv.state1.view(rows), sv.state2.view(rows), sums.view(sums_shape),
              g_.tensor(op.inputs[0]).shape.dims()[op.dim].extent, d0, d1, d2);
        }
        break;
      }
      case OpKind::gather: {
        if (!dx[0]) break;
        const Slice table =
            device_slice(g_.tensor(op.inputs[0]).shape, s.sharding.inputs[0], mesh_, device_);
        be_.embedding_backward(dY, Ids(1), DX(0), {.vocab_offset = table.offset[0]});
        break;
      }
      case OpKind::softmax_cross_entropy: {
        const TensorShape rows = rows_shape(in_local[0]);
        be_.cross_entropy_backward(sv.extra->view(in_local[0]), Ids(1), sv.state1.view(rows),
                                   reshaped(dY, {{"loss", 1}}), DX(0), ce_args(k));
        break;
      }
      case OpKind::fused_attention: {
        const TensorShape lse = {in_local[0].dims()[0], in_local[0].dims()[1],
                                 in_local[0].dims()[2]};
        const AttentionArgs args = attention_args(k);
        if (!gathers_kv(k)) {
          be_.attention_backward(X(0), X(1), X(2), sv.output->view(out_local), sv.state1.view(lse),
                                 dY, DX(0), DX(1), DX(2), args);
          break;
        }
        const TensorShape fs{
            in_local[1].dims()[0],
            in_local[1].dims()[1],
            {in_local[1].dims()[2].name, g_.tensor(op.inputs[1]).shape.dims()[2].extent},
            in_local[1].dims()[3]};
        auto kf = gather_seq(k, X(1));
        auto vf = gather_seq(k, X(2));
        auto dkf = zeros(fs, MemoryCategory::temporaries);
        auto dvf = zeros(fs, MemoryCategory::temporaries);
        be_.attention_backward(X(0), kf->view(fs), vf->view(fs), sv.output->view(out_local),
                               sv.state1.view(lse), dY, DX(0), dkf->view(fs), dvf->view(fs), args);
        scatter_seq(k, dkf->view(fs), DX(1));
        scatter_seq(k, dvf->view(fs), DX(2));
        break;
      }
      case OpKind::view: view_copy(op, dY, DX(0), CopyMode::accumulate, true); break;
    }
    x = {};
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      if (dx[i]) route_gradient(k, i, std::move(dx[i]));
    }
  }

  // ---- state ----
  const Graph& g_;
  DeviceMesh mesh_;
  std::vector<Strategy> st_;
  Backend& be_;
  MeshComms& comms_;
  HardwareProfile hw_;  // a copy: callers may pass a temporary
  ExecutorOptions opt_;
  std::int64_t device_ = 0;
  ReshardCache cache_{};

  std::vector<ShardingSpec> stored_{};
  std::vector<int> consumers_{};
  std::vector<int> remaining_{};
  std::vector<bool> lazy_{};
  std::vector<std::shared_ptr<Buffer>> act_{};
  std::vector<std::shared_ptr<Buffer>> grad_{};
  std::vector<Saved> saved_{};
  std::vector<std::vector<std::pair<TensorId, std::shared_ptr<Buffer>>>> ckpt_inputs_{};
  std::vector<bool> recomputed_{};
  std::vector<Param> params_{};
  std::map<std::size_t, std::size_t> param_index_{};
  std::map<std::size_t, const HostInput*> host_{};
  TensorId evaluate_target_{};
  bool inference_ = false;
  std::int64_t step_ = 0;
  std::int64_t micro_ = 0;
  std::int64_t micro_count_ = 1;
};

}  // namespace carto
