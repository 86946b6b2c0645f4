// carto/runtime/executor/executor_class.hpp — the Executor class: its public API, its bookkeeping
// types and data members, the small helpers every part uses; and the types a caller names with it
// (ExecutorOptions, HostInput, TrackingAllocator).
//
// Design note (DESIGN.md §7; the rules it follows are listed in carto/runtime/executor.hpp).
// The class is defined here once; its member functions are defined out of class, as inline
// functions, in the part headers beside this one, each of which includes what it calls:
//   storage.hpp     where each tensor lives (validate, layout), reshards, collectives on local
//                   tensors, gathering to the host, materializing lazy views
//   parameters.hpp  parameters and their optimizer state under ZeRO 0-3: initialisation, chunks,
//                   gathers, gradient accumulation and reduction, AdamW
//   inputs.hpp      the host batch, and reading an op's input in the spec it wants (forward)
//                   or again (backward)
//   einsum.hpp      a local einsum through the backend's GEMM
//   forward.hpp     the forward pass, and the distributed forms of layernorm, cross-entropy and
//                   attention
//   backward.hpp    the backward pass, gradient routing and checkpoint recomputation
//   executor.hpp    the constructor and the entry points that order a step
// Members defined in the parts are declared `inline` here, so every translation unit that sees
// the class sees them as inline. Include carto/runtime/executor.hpp to use the class: the parts
// alone leave the entry points undefined.
//
// Buffers and dtypes (mixed precision, DESIGN.md §7): ExecutorOptions::precision decides. Under
// fp32 every value is fp32. Under mixed_bf16 activations, their gradients, the parameters' compute
// copies (MemoryCategory::parameters) and the parameter gradients (gradients) are bf16; each
// parameter keeps an fp32 master (optimizer, beside AdamW's m and v, sharded like them); the
// statistics saved for backward (Saved::state1/state2), layernorm and cross-entropy partial sums
// and the loss are fp32. dtype_of names the dtype of a tensor's values and of its gradient. A
// Buffer carries no dtype: every view names it (Buffer::view(shape, dtype), offset_view), and
// collectives take byte spans plus the view's dtype. Token ids live in their own 4-byte int32
// buffers (index_buffer), read through index_view. Buffers come from `buffer` (dtype named at the
// call) or its shared forms `allocate` / `zeros`, and index_buffer.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
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
#include "carto/profile/options.hpp"
#include "carto/runtime/backend.hpp"
#include "carto/runtime/bf16.hpp"
#include "carto/runtime/communicator.hpp"
#include "carto/runtime/memory.hpp"
#include "carto/runtime/reshard_exec.hpp"
#include "carto/runtime/rng.hpp"
#include "carto/search/strategy.hpp"
#include "carto/spec/dtype.hpp"
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
  // fp32: every value fp32. mixed_bf16: bf16 activations, gradients and parameter compute copies,
  // fp32 master weights, AdamW moments, statistics and loss (see the note above).
  Precision precision = Precision::fp32;
  // The dtype parameter gradients are reduced in (Strategy::gradient_sync, and ZeRO 2-3's reduction
  // at each backward): fp32 under fp32; under mixed_bf16 either bf16 (the bf16 gradients reduced as
  // they are) or fp32 (widened for the reduction, rounded back to bf16 once). Others throw.
  DType gradient_reduction = DType::fp32;
  int zero_stage = 0;                // 0-3
  std::vector<bool> checkpointed{};  // per group; missing entries are false
  std::uint64_t seed = 1234;
  float init_stddev = rng::kGpt2InitStd;
  AdamWArgs adamw{};
  LayerNormArgs layernorm{};
  RmsNormArgs rmsnorm{};  // Llama's norm_eps
};

// Host data of one micro-batch: one entry per graph input, in tensor-id order. Token ids for
// TensorKind::index inputs, values for activation inputs; global, row-major. Values are fp32 on
// the host and stored in the compute dtype (rounded to bf16 under mixed_bf16).
struct HostInput {
  TensorId tensor{};
  std::vector<std::int32_t> ids{};
  std::vector<float> values{};
};

class Executor {
 public:
  // Checks the plan against the graph and the communicators' mesh, lays out every tensor's stored
  // spec and initialises the parameters (executor.hpp).
  inline Executor(const Graph& graph, const DeviceMesh& mesh, std::vector<Strategy> strategies,
                  Backend& backend, MeshComms& comms, const HardwareProfile& hw,
                  ExecutorOptions options = {});

  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  [[nodiscard]] const Graph& graph() const { return g_; }
  [[nodiscard]] const DeviceMesh& mesh() const { return mesh_; }
  [[nodiscard]] const std::vector<Strategy>& strategies() const { return st_; }
  [[nodiscard]] std::int64_t step_count() const { return step_; }

  // One forward and backward pass over one micro-batch of a step of `micro_batches`; parameter
  // gradients accumulate. Returns the micro-batch's loss (the result scalar; for a non-scalar
  // result, Σ result ∘ G with G the fixed normal seed gradient, see seed_stream).
  inline double forward_backward(std::span<const HostInput> inputs, std::int64_t micro_batch = 0,
                                 std::int64_t micro_batches = 1);

  // Forward only (inference): runs the graph on `inputs` and returns the whole value of tensor
  // `t` on the host (row-major); nothing is kept afterwards and no gradient changes. Collective.
  inline std::vector<float> evaluate(std::span<const HostInput> inputs, TensorId t);

  // Reduces the accumulated parameter gradients to their stored specs (once per step).
  inline void finish_gradients();

  // One AdamW step on the local shards (after finish_gradients); the next step's first
  // contributions assign the gradients, so nothing is zeroed.
  inline void optimizer_step();

  // The whole (global) value of a parameter on the host, row-major: under mixed_bf16 the fp32
  // master weights (the bf16 compute copy is their rounding). Collective: every rank calls.
  inline std::vector<float> parameter(TensorId t);
  // The whole reduced gradient of a parameter (after finish_gradients), widened to fp32 from the
  // compute dtype. Collective.
  inline std::vector<float> gradient(TensorId t);
  // Sets a parameter's value from this rank's local tensor (row-major, the box
  // device_slice(global shape, stored_spec(t), mesh(), device()) of the global tensor), given in
  // fp32: the value (rounded to the compute dtype) and, under mixed_bf16, the fp32 master; under
  // ZeRO 1-3 the rank keeps only its chunk of whichever of them are chunked. Not collective.
  inline void set_parameter_local(TensorId t, std::span<const float> local_values);
  // The same from the whole (global, row-major) value: each rank takes its own box.
  inline void set_parameter(TensorId t, std::span<const float> global_values);
  // This rank's device index in the mesh.
  [[nodiscard]] std::int64_t device() const { return device_; }
  // Every parameter tensor of the graph, in tensor-id order.
  [[nodiscard]] inline std::vector<TensorId> parameters() const;
  // The stored spec of a tensor.
  [[nodiscard]] const ShardingSpec& stored_spec(TensorId t) const { return stored_.at(t.index()); }

  // ---- checkpoints (carto/runtime/checkpoint.hpp): a parameter's state exactly as held ----
  // The buffers of a parameter: the compute value, the fp32 master (mixed_bf16 only) and AdamW's
  // m and v. Each holds elements [begin, begin + count) of the flat local tensor: all of it, or
  // this rank's ZeRO chunk without its padding (value at ZeRO 3, master and m, v at ZeRO 1-3).
  enum class StateBuffer : std::uint8_t { value, master, m, v };
  struct StatePiece {
    bool held = false;
    DType dtype = DType::fp32;
    std::int64_t begin = 0;
    std::int64_t count = 0;
  };
  [[nodiscard]] StatePiece state_piece(TensorId t, StateBuffer b) {
    const Param& p = param_of(t);
    const bool mixed = opt_.precision == Precision::mixed_bf16;
    if (b == StateBuffer::master && !mixed) return {};
    const bool chunked = b == StateBuffer::value ? opt_.zero_stage == 3 : opt_.zero_stage >= 1;
    const std::int64_t n = p.local.numel();
    const std::int64_t begin = chunked ? std::min(n, p.group_rank * p.chunk) : 0;
    const std::int64_t count = chunked ? std::min(n, begin + p.chunk) - begin : n;
    return {.held = true,
            .dtype = b == StateBuffer::value ? compute_ : DType::fp32,
            .begin = begin,
            .count = count};
  }
  // The piece's bytes (count elements of its dtype). Not collective.
  [[nodiscard]] std::vector<std::byte> state_bytes(TensorId t, StateBuffer b) {
    const StatePiece s = state_piece(t, b);
    CARTO_CHECK(s.held, "parameter ", t.value, " holds no fp32 master under fp32");
    std::vector<std::byte> out(static_cast<std::size_t>(s.count * size_bytes(s.dtype)));
    if (s.count > 0)
      be_.copy_to_host(offset_view(state_buffer(t, b), 0, {{"flat", s.count}}, s.dtype),
                       out.data());
    be_.synchronize();
    return out;
  }
  // Sets the piece from its bytes (as state_bytes gives them), or from fp32 values rounded to
  // its dtype. Not collective.
  void set_state_bytes(TensorId t, StateBuffer b, std::span<const std::byte> bytes) {
    const StatePiece s = state_piece(t, b);
    CARTO_CHECK(s.held && bytes.size() == static_cast<std::size_t>(s.count * size_bytes(s.dtype)),
                "parameter ", t.value, ": set_state_bytes takes the ", s.count,
                " elements this rank holds; got ", bytes.size(), " bytes");
    if (s.count > 0)
      be_.copy_from_host(bytes.data(),
                         offset_view(state_buffer(t, b), 0, {{"flat", s.count}}, s.dtype));
    be_.synchronize();
  }
  void set_state_values(TensorId t, StateBuffer b, std::span<const float> values) {
    const StatePiece s = state_piece(t, b);
    CARTO_CHECK(s.held && static_cast<std::int64_t>(values.size()) == s.count, "parameter ",
                t.value, ": set_state_values takes the ", s.count,
                " elements this rank holds; got ", values.size());
    if (s.count == 0) return;
    const TensorShape flat{{"flat", s.count}};
    Buffer host = buffer(flat, DType::fp32, MemoryCategory::temporaries);
    be_.copy_from_host(values.data(), host.view(flat, DType::fp32));
    be_.convert(host.view(flat, DType::fp32), offset_view(state_buffer(t, b), 0, flat, s.dtype));
    be_.synchronize();
  }
  // The optimizer step count and the seed of the parameter and dropout streams: with them the
  // next step draws what an uninterrupted run would.
  [[nodiscard]] std::uint64_t seed() const { return opt_.seed; }
  void restore_step(std::int64_t step, std::uint64_t seed) {
    CARTO_CHECK(step >= 0, "restore_step: the step count is ", step, "; it must be >= 0");
    step_ = step;
    opt_.seed = seed;
  }
  [[nodiscard]] Precision precision() const { return opt_.precision; }
  [[nodiscard]] int zero_stage() const { return opt_.zero_stage; }

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
    // Accumulates straight into Param::grad: its gradient spec without Partial is the stored
    // spec, and its Partial axes are those of the parameter's other direct uses (a tied
    // embedding's lookup and head share one gradient buffer).
    bool direct = false;
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
    Buffer value;   // the compute copy (compute dtype): local, or this rank's chunk under ZeRO 3
    Buffer grad;    // compute dtype: local, or this rank's chunk under ZeRO 2-3
    bool grad_written = false;  // a direct use wrote Param::grad this step (later ones add)
    Buffer master;  // mixed_bf16 only: fp32, local at ZeRO 0, this rank's chunk at ZeRO 1-3
    Buffer m, v;    // fp32: local at ZeRO 0, this rank's chunk at ZeRO 1-3
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
    Buffer state1, state2;            // mean/rstd (RMSNorm: rstd), logsumexp
  };
  struct Read {                      // an op's input as read in forward
    std::shared_ptr<Buffer> buffer;  // holds the local tensor in `want`
    std::shared_ptr<Buffer> stored;  // the stored storage (for saving)
    bool moved = false;
  };

  // ---- storage.hpp: where tensors live, reshards, collectives, views ----
  inline void validate();
  inline void layout();
  inline Buffer move(const TensorShape& global, ConstTensorView local, const ShardingSpec& from,
                     const ShardingSpec& to, MemoryCategory category);
  inline void reduce_gradient(Buffer& b, const ShardingSpec& spec, const TensorShape& global);
  inline void all_reduce(TensorView v, const AxisList& axes, ReduceOp op);
  inline std::vector<float> gather_to_host(const TensorShape& global, ConstTensorView local,
                                           const ShardingSpec& spec);
  inline std::shared_ptr<Buffer> materialize(TensorId t, const std::shared_ptr<Buffer>& base);
  inline void view_copy(const Op& op, ConstTensorView x, TensorView y, CopyMode mode, bool inverse);

  // ---- parameters.hpp: parameters, ZeRO chunks, gradients ----
  inline void init_parameters();
  inline void init_value(const Param& p, TensorView value);
  inline void copy_chunk(ConstTensorView full, const Param& p, TensorView chunk);
  inline void all_gather_chunks(Param& p, ConstTensorView chunk, TensorView dst);
  inline Buffer gather_chunks(Param& p, const Buffer& chunk, DType dtype);
  inline std::shared_ptr<Buffer> parameter_local(Param& p);
  inline void begin_step();
  inline void accumulate_parameter_gradient(std::size_t k, std::size_t i,
                                            std::shared_ptr<Buffer> grad);

  // ---- inputs.hpp: the host batch, reading an op's inputs ----
  inline void set_inputs(std::span<const HostInput> inputs);
  inline std::shared_ptr<Buffer> host_slice(TensorId t, const ShardingSpec& spec);
  inline Read read_input(std::size_t k, std::size_t i);
  inline std::shared_ptr<Buffer> reread(std::size_t k, std::size_t i);

  // ---- einsum.hpp: local einsum through GEMM ----
  inline void local_einsum(const IndexLetters& la, ConstTensorView A, const IndexLetters& lb,
                           ConstTensorView B, const IndexLetters& lc, TensorView C,
                           bool accumulate);
  static inline TensorShape permuted_shape(const TensorShape& x, const std::string& from,
                                           const std::string& to);
  inline std::shared_ptr<Buffer> permuted(ConstTensorView x, const std::string& from,
                                          const std::string& to);
  inline void copy_permuted(ConstTensorView src, const std::string& from, TensorView dst,
                            const std::string& to, CopyMode mode);

  // ---- forward.hpp: the forward pass and the distributed op forms ----
  inline void forward();
  inline double result_value();
  inline void release_after_use(TensorId t);
  inline void run_forward(std::size_t k, bool keep);
  inline void layernorm_forward(std::size_t k, ConstTensorView x, ConstTensorView gamma,
                                ConstTensorView beta, TensorView y, Saved& sv);
  inline void rmsnorm_forward(std::size_t k, ConstTensorView x, ConstTensorView gamma, TensorView y,
                              Saved& sv);
  [[nodiscard]] inline RotaryArgs rotary_args(std::size_t k) const;
  [[nodiscard]] inline bool silu_mul_in_place(std::size_t k) const;
  using ChunkBody = std::function<void(ConstTensorView gate, ConstTensorView up,
                                       std::int64_t offset, const TensorShape& chunk)>;
  inline void silu_mul_chunks(std::size_t k, const Buffer& base, const ChunkBody& body);
  [[nodiscard]] inline const AxisList& vocab_axes(std::size_t k) const;
  inline CrossEntropyArgs ce_args(std::size_t k) const;
  inline void cross_entropy_forward(std::size_t k, ConstTensorView logits, IndexView targets,
                                    TensorView loss, Saved& sv);
  inline AttentionArgs attention_args(std::size_t k) const;
  [[nodiscard]] inline const AxisList& kv_seq_axes(std::size_t k) const;
  [[nodiscard]] inline bool gathers_kv(std::size_t k) const;
  inline std::shared_ptr<Buffer> gather_seq(std::size_t k, ConstTensorView local);
  inline void scatter_seq(std::size_t k, ConstTensorView gathered, TensorView local);
  inline void attention_forward(std::size_t k, ConstTensorView q, ConstTensorView kk,
                                ConstTensorView v, TensorView out, Saved& sv);

  // ---- backward.hpp: the backward pass and recomputation ----
  inline void backward();
  inline void recompute(std::int32_t group);
  [[nodiscard]] inline bool adds_part_in_place(std::size_t k) const;
  [[nodiscard]] inline bool writes_part_slot(std::size_t k) const;
  inline void complete_parts(TensorId t);
  [[nodiscard]] inline bool hands_gradient_on(std::size_t k, std::size_t i) const;
  [[nodiscard]] inline bool accumulates_in_place(std::size_t k, std::size_t i) const;
  inline void route_gradient(std::size_t k, std::size_t i, std::shared_ptr<Buffer> grad);
  inline void run_backward(std::size_t k);

  // ---- small helpers ----
  // The one place the executor allocates values: a buffer of `shape` in `dtype`, charged to `c`.
  Buffer buffer(const TensorShape& shape, DType dtype, MemoryCategory c) {
    return be_.allocate(shape, dtype, c);
  }
  // A shared buffer for a tensor's values (activations, gradients, temporaries), and one filled
  // with zeros.
  std::shared_ptr<Buffer> allocate(const TensorShape& shape, DType dtype, MemoryCategory c) {
    return std::make_shared<Buffer>(buffer(shape, dtype, c));
  }
  std::shared_ptr<Buffer> zeros(const TensorShape& shape, DType dtype, MemoryCategory c) {
    auto b = allocate(shape, dtype, c);
    be_.fill(b->view(shape, dtype), 0.0f);
    return b;
  }
  // Storage for int32 token ids of `shape` (4 bytes each, whatever the compute dtype).
  std::shared_ptr<Buffer> index_buffer(const TensorShape& shape) {
    return std::make_shared<Buffer>(be_.allocator(),
                                    static_cast<std::size_t>(shape.numel()) * sizeof(std::int32_t),
                                    MemoryCategory::activations);
  }
  // A view of `shape` in `dtype` at element `offset` of a buffer holding `dtype` elements.
  static TensorView offset_view(const Buffer& b, std::int64_t offset, const TensorShape& shape,
                                DType dtype) {
    const std::int64_t elem = size_bytes(dtype);
    CARTO_CHECK(static_cast<std::size_t>((offset + shape.numel()) * elem) <= b.bytes(),
                "a view of ", shape, " (", to_string_view(dtype), ") at element ", offset,
                " past the end of a buffer of ", b.bytes(), " bytes");
    return {
        .data = static_cast<std::byte*>(b.data()) + offset * elem, .shape = shape, .dtype = dtype};
  }
  static IndexView index_view(const Buffer& b, const TensorShape& shape) {
    CARTO_CHECK(static_cast<std::size_t>(shape.numel()) * sizeof(std::int32_t) <= b.bytes(),
                "token ids ", shape, " past the end of a buffer of ", b.bytes(), " bytes");
    return {.data = static_cast<const std::int32_t*>(b.data()), .shape = shape};
  }
  // A view's bytes, for the byte-level collectives (with the view's dtype).
  static std::span<const std::byte> bytes_of(ConstTensorView v) {
    return {static_cast<const std::byte*>(v.data()), static_cast<std::size_t>(v.bytes())};
  }
  static std::span<std::byte> bytes_of(TensorView v) {
    return {static_cast<std::byte*>(v.data), static_cast<std::size_t>(v.bytes())};
  }
  // The dtype of a tensor's values and of its gradient (token ids aside: index_buffer): fp32 for a
  // cross-entropy loss, the compute dtype otherwise.
  [[nodiscard]] DType dtype_of(TensorId t) const {
    const TensorInfo& info = g_.tensor(t);
    if (info.producer.valid() && g_.op(info.producer).kind == OpKind::softmax_cross_entropy)
      return DType::fp32;
    return compute_;
  }
  // The local tensor `t` of `shape` held by `b`, in t's dtype.
  [[nodiscard]] TensorView view_of(TensorId t, const Buffer& b, const TensorShape& shape) const {
    return b.view(shape, dtype_of(t));
  }
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
  Param& param_of(TensorId t) {
    const auto it = param_index_.find(t.index());
    CARTO_CHECK(it != param_index_.end(), "tensor ", t.value, " is not a parameter");
    return params_[it->second];
  }
  Buffer& state_buffer(TensorId t, StateBuffer b) {
    Param& p = param_of(t);
    return b == StateBuffer::value    ? p.value
           : b == StateBuffer::master ? p.master
           : b == StateBuffer::m      ? p.m
                                      : p.v;
  }
  [[nodiscard]] bool checkpointed(std::int32_t group) const {
    return group >= 0 && static_cast<std::size_t>(group) < opt_.checkpointed.size() &&
           opt_.checkpointed[static_cast<std::size_t>(group)] &&
           g_.groups()[static_cast<std::size_t>(group)].kind == GroupKind::transformer_block;
  }
  [[nodiscard]] RngStream dropout_stream(std::size_t k) const {
    return {.seed = opt_.seed,
            .id = stream_id(RngPurpose::dropout, static_cast<std::uint32_t>(k),
                            static_cast<std::uint32_t>(step_ * micro_count_ + micro_))};
  }
  [[nodiscard]] bool kept(TensorId t) const { return t == g_.result() || t == evaluate_target_; }
  // The row shape of a tensor reduced over its last dim (layernorm and cross-entropy statistics).
  static TensorShape rows_shape(const TensorShape& x) {
    TensorShape rows;
    for (std::size_t d = 0; d + 1 < x.rank(); ++d) rows.push_back(x.dims()[d]);
    if (rows.rank() == 0) rows.push_back({"rows", 1});
    return rows;
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
  DType compute_ = DType::fp32;  // the compute dtype: compute_dtype(opt_.precision)
  ReshardCache cache_{};

  std::vector<ShardingSpec> stored_{};
  std::vector<int> consumers_{};
  std::vector<int> remaining_{};
  std::vector<bool> lazy_{};
  std::vector<std::shared_ptr<Buffer>> act_{};
  std::vector<std::shared_ptr<Buffer>> grad_{};
  // Part views (split_heads, split_groups of a fused projection): per op, its bit among its
  // input's consumers; per tensor, the bits of all its consumers when every one is such a part
  // view (else 0), and the parts whose slots its gradient buffer holds so far (backward.hpp).
  std::vector<std::uint32_t> part_bit_{};
  std::vector<std::uint32_t> parts_all_{};
  std::vector<std::uint32_t> parts_written_{};
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
