// carto/runtime/backend.hpp — the interface between the executor and a device's kernels.
//
// Design note (DESIGN.md §7): a Backend runs the local kernels of one rank on local shards. It is
// an abstract class so that one executor (and one test body) serves the CPU backend (carto::cpu,
// OpenBLAS + C++ loops) and a later CUDA backend (cuBLAS + kernels/cuda). This header is host-only:
// no BLAS, CUDA or MPI header is reachable from it.
//
// Invariants every implementation keeps, and every caller may rely on:
//  - Tensors are views (pointer + TensorShape + DType), contiguous row-major, never owning; a
//    view's pointer is device memory of the backend that allocated it.
//  - Dtypes (mixed precision, DESIGN.md §7): a backend takes fp32 and bf16 (bf16.hpp). Activations,
//    the compute copies of parameters and gradients may be either, and one call may mix them (a
//    bf16 x with an fp32 dx); every kernel loads to fp32, computes in fp32 and rounds to nearest
//    even when it stores bf16, and a kernel that adds into an output (backward, beta = 1, CopyMode
//    accumulate) adds in fp32 and rounds once. Statistics saved for backward (layernorm mean and
//    rstd, logsumexp, the cross-entropy pieces, the loss, partial sums) are fp32 always. GEMMs on
//    bf16 inputs accumulate in fp32. AdamW's param, m and v are fp32 (the master weights); its
//    grad is either. Other dtypes throw.
//  - Calls are enqueued in order on the backend's one queue (a CUDA stream later); results are
//    visible to host code after synchronize(). The CPU backend runs each call before returning.
//  - Forward kernels overwrite their outputs. Backward kernels store each gradient output in the
//    CopyMode the caller passes: `assign` writes it (the first contribution to a gradient, into
//    memory that may hold anything: no zero fill beforehand), `accumulate` adds to what it holds
//    (dx += ..., dW += ...: the later consumers of a tensor, the later micro-batches). A GEMM's
//    beta = 0 is its assign, beta = 1 its accumulate; add_scaled always adds, and scale is its
//    assign. An assigned gradient equals a zero fill followed by the accumulate, bit for bit
//    (0 + v == v), so the two modes agree exactly. embedding_backward's assign also writes the
//    zero rows no token hits.
//  - Outputs never alias inputs unless a function says so (elementwise ones allow y == x).
//  - Randomness (dropout) is a pure function of (RngStream, global element index), see rng.hpp;
//    a shard passes its ShardPlacement so it draws the values a single device would.
//  - Every byte a kernel needs, workspace included, comes from the backend's current Allocator
//    (by default the device allocator; the memory tracker installs itself with use_allocator), so
//    measured peaks include everything.
//  - Misuse (mismatched shapes, a dtype the backend lacks) throws carto::Error naming the call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>

#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/profile/schedule.hpp"
#include "carto/runtime/rng.hpp"
#include "carto/spec/dtype.hpp"
#include "carto/spec/layout.hpp"
#include "carto/spec/shape.hpp"

namespace carto {

// ---- views
// ---------------------------------------------------------------------------------------

// A mutable view of a contiguous tensor in device memory.
struct TensorView {
  void* data = nullptr;
  TensorShape shape{};
  DType dtype = DType::fp32;

  [[nodiscard]] std::int64_t numel() const { return shape.numel(); }
  [[nodiscard]] std::int64_t bytes() const { return numel() * size_bytes(dtype); }
  [[nodiscard]] float* f32() const {
    CARTO_CHECK(dtype == DType::fp32, "a view of ", to_string_view(dtype), " ", shape,
                " read as fp32");
    return static_cast<float*>(data);
  }
};

// A read-only view; every TensorView converts to one.
class ConstTensorView {
 public:
  ConstTensorView(const void* data, TensorShape shape, DType dtype = DType::fp32)
      : data_(data), shape_(std::move(shape)), dtype_(dtype) {}
  ConstTensorView(const TensorView& v)  // NOLINT(google-explicit-constructor): mutable -> const
      : ConstTensorView(v.data, v.shape, v.dtype) {}

  [[nodiscard]] const void* data() const { return data_; }
  [[nodiscard]] const TensorShape& shape() const { return shape_; }
  [[nodiscard]] DType dtype() const { return dtype_; }
  [[nodiscard]] std::int64_t numel() const { return shape_.numel(); }
  [[nodiscard]] std::int64_t bytes() const { return numel() * size_bytes(dtype_); }
  [[nodiscard]] const float* f32() const {
    CARTO_CHECK(dtype_ == DType::fp32, "a view of ", to_string_view(dtype_), " ", shape_,
                " read as fp32");
    return static_cast<const float*>(data_);
  }

 private:
  const void* data_;
  TensorShape shape_;
  DType dtype_;
};

// Token ids (int32; carto::DType has no integer types), in device memory.
struct IndexView {
  const std::int32_t* data = nullptr;
  TensorShape shape{};
  [[nodiscard]] std::int64_t numel() const { return shape.numel(); }
};

// The same storage seen with another shape of the same element count, e.g. (B, S, H) as (B·S, H).
inline TensorView reshaped(const TensorView& v, const TensorShape& shape) {
  CARTO_CHECK(shape.numel() == v.numel(), "reshape of ", v.shape, " to ", shape,
              " changes the element count");
  return {.data = v.data, .shape = shape, .dtype = v.dtype};
}
inline ConstTensorView reshaped(const ConstTensorView& v, const TensorShape& shape) {
  CARTO_CHECK(shape.numel() == v.numel(), "reshape of ", v.shape(), " to ", shape,
              " changes the element count");
  return {v.data(), shape, v.dtype()};
}
// (d0, ..., dn-1, c) as the matrix (d0·...·dn-1, c): a GEMM over all tokens at once.
inline TensorShape matrix_shape(const TensorShape& s) {
  CARTO_CHECK(s.rank() >= 1, "a matrix view of a rank-0 tensor");
  const std::int64_t cols = s.dims()[s.rank() - 1].extent;
  return {{"rows", s.numel() / cols}, {s.dims()[s.rank() - 1].name, cols}};
}

// ---- memory
// --------------------------------------------------------------------------------------

// Device memory by the byte. Kept minimal on purpose: the memory tracker is an Allocator that
// counts current and peak bytes per MemoryCategory and forwards to the backend's device allocator.
class Allocator {
 public:
  virtual ~Allocator() = default;
  // Memory aligned to at least 64 bytes; throws carto::Error when none is left.
  virtual void* allocate(std::size_t bytes, MemoryCategory category) = 0;
  // Gets back exactly what allocate returned, with the same bytes and category.
  virtual void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) noexcept = 0;
};

// Owns one allocation; move-only. The allocator must outlive the buffer.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Allocator& allocator, std::size_t bytes, MemoryCategory category)
      : allocator_(&allocator),
        bytes_(bytes),
        category_(category),
        data_(bytes > 0 ? allocator.allocate(bytes, category) : nullptr) {}
  Buffer(Buffer&& other) noexcept { swap(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    Buffer(std::move(other)).swap(*this);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (data_ != nullptr) allocator_->deallocate(data_, bytes_, category_);
  }

  [[nodiscard]] void* data() const { return data_; }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }
  [[nodiscard]] MemoryCategory category() const { return category_; }
  // The buffer (or its start) as a tensor of `shape`.
  [[nodiscard]] TensorView view(const TensorShape& shape, DType dtype = DType::fp32) const {
    const auto need = static_cast<std::size_t>(shape.numel() * size_bytes(dtype));
    CARTO_CHECK(need <= bytes_, "a view ", shape, " of ", to_string_view(dtype), " needs ", need,
                " bytes; the buffer has ", bytes_);
    return {.data = data_, .shape = shape, .dtype = dtype};
  }

 private:
  void swap(Buffer& o) noexcept {
    std::swap(allocator_, o.allocator_);
    std::swap(bytes_, o.bytes_);
    std::swap(category_, o.category_);
    std::swap(data_, o.data_);
  }
  Allocator* allocator_ = nullptr;
  std::size_t bytes_ = 0;
  MemoryCategory category_ = MemoryCategory::temporaries;
  void* data_ = nullptr;
};

// ---- arguments of the kernels
// --------------------------------------------------------------------

enum class Transpose : std::uint8_t { no, yes };
// How a copy or a backward kernel stores into its output: assign writes, accumulate adds.
enum class CopyMode : std::uint8_t { assign, accumulate };

// The store modes of layernorm backward's three gradients (dx is an activation's, dgamma and dbeta
// parameters'; each is assigned on its first contribution).
struct NormGradModes {
  CopyMode dx = CopyMode::assign;
  CopyMode dgamma = CopyMode::assign;
  CopyMode dbeta = CopyMode::assign;
};

// C = alpha · op(A) · op(B) + beta · C per batch entry; beta = 1 accumulates.
struct GemmArgs {
  Transpose a = Transpose::no;
  Transpose b = Transpose::no;
  float alpha = 1.0f;
  float beta = 0.0f;
};

struct LayerNormArgs {
  float epsilon = 1e-5f;  // GPT-2's
};

struct RmsNormArgs {
  float epsilon = 1e-5f;  // Llama 3's norm_eps
};

// Rotary position embedding (Su et al. 2021) of x (..., S, d): pairs (2i, 2i+1) of the last dim
// rotated by the angle p·θ^(-2i/d), p the global position of the row (position_offset plus the
// local index of the second-to-last dim, so a sequence shard rotates as the whole tensor does).
struct RotaryArgs {
  double theta = 10000.0;
  std::int64_t position_offset = 0;
};

// softmax(scale · x) along the last dim; causal masks key k > query q, with q and k the global
// indices of the last two dims (placement.offset of those dims plus the local index).
struct SoftmaxArgs {
  float scale = 1.0f;
  Masking masking = Masking::none;
  ShardPlacement placement{};
};

// Drops each element with `probability` and scales the kept ones by 1 / (1 - probability); the
// mask of element i is rng::keep(rng, global index of i, probability).
struct DropoutArgs {
  float probability = 0.0f;
  RngStream rng{};
  ShardPlacement placement{};
};

// Fused (flash-style) attention over q, k, v (B, a, S, d): softmax(scale · q kᵀ, masked) with
// dropout on the probabilities, times v. `placement` places the local probabilities (B, a, Sq, Sk)
// in the global ones: it gives the dropout indices (equal to a materialized dropout with the same
// args) and the causal mask's global positions.
struct AttentionArgs {
  float scale = 1.0f;
  Masking masking = Masking::causal;
  float dropout = 0.0f;
  RngStream rng{};
  ShardPlacement placement{};
};

// A vocab-parallel table or logits shard holds vocab rows [vocab_offset, vocab_offset + local
// rows).
struct EmbeddingShard {
  std::int64_t vocab_offset = 0;
};

// Cross-entropy averaged over token_count tokens: the global count when the rows are split over
// devices (each device's loss is then a summand of the mean); 0 means the local rows.
struct CrossEntropyArgs {
  std::int64_t vocab_offset = 0;
  std::int64_t token_count = 0;
};

// AdamW (Loshchilov & Hutter 2019, decoupled weight decay) with bias-corrected moments, as
// PyTorch's torch.optim.AdamW (its defaults):
//   m = b1·m + (1-b1)·g;  v = b2·v + (1-b2)·g²;  m̂ = m / (1-b1^t);  v̂ = v / (1-b2^t)
//   p = p - lr·wd·p - lr·m̂ / (sqrt(v̂) + eps)
struct AdamWArgs {
  float learning_rate = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.01f;
  std::int64_t step = 1;  // t, from 1
};

// One parameter shard of adamw_update_all: param, grad, m, v of one shape (dtypes as
// adamw_update's).
struct AdamWShard {
  TensorView param;
  ConstTensorView grad;
  TensorView m;
  TensorView v;
};

// Elements of a strided box: element (i0, ..., ir) at offset + Σ i_d · strides[d] (in elements).
struct StridedBox {
  std::int64_t offset = 0;
  Index strides{};
};

// The box `slice` of a contiguous tensor of `shape`, as a StridedBox.
inline StridedBox box_of(const TensorShape& shape, const Slice& slice) {
  CARTO_CHECK(slice.offset.size() == shape.rank() && slice.extent.size() == shape.rank(),
              "a slice of rank ", slice.offset.size(), " of a tensor ", shape);
  StridedBox box;
  box.strides = slice.offset;
  std::int64_t stride = 1;
  for (std::size_t d = shape.rank(); d-- > 0;) {
    const std::int64_t e = shape.dims()[d].extent;
    CARTO_CHECK(
        slice.offset[d] >= 0 && slice.extent[d] >= 0 && slice.offset[d] + slice.extent[d] <= e,
        "slice [", slice.offset[d], ", ", slice.offset[d] + slice.extent[d], ") of dim ", d, " of ",
        shape);
    box.strides[d] = stride;
    box.offset += slice.offset[d] * stride;
    stride *= e;
  }
  return box;
}

// Part `part` of `parts` of a (B, S, parts·heads·d) tensor seen as (B, heads, S, d): the source box
// of split_heads (Q, K, V out of the fused QKV projection) and the destination box of merge_heads
// (parts = 1, part = 0). The box's extents are (B, heads, S, d). The fused dim is ordered per head
// (graph.hpp's split_heads): element (b, n, s, e) of part p is fused column n·parts·d + p·d + e, so
// a contiguous shard of the fused dim holds whole heads and the same box applies to it locally.
inline StridedBox heads_box(const TensorShape& fused, std::int64_t parts, std::int64_t part,
                            std::int64_t heads) {
  CARTO_CHECK(fused.rank() == 3 && parts >= 1 && part >= 0 && part < parts && heads >= 1 &&
                  fused.dims()[2].extent % (parts * heads) == 0,
              "heads_box of ", fused, " into ", parts, " parts of ", heads, " heads");
  const std::int64_t s = fused.dims()[1].extent, f = fused.dims()[2].extent;
  const std::int64_t d = f / (parts * heads);
  return {.offset = part * d, .strides = {s * f, parts * d, f, 1}};
}

// ---- the interface
// -------------------------------------------------------------------------------

class Backend {
 public:
  virtual ~Backend() = default;

  [[nodiscard]] virtual std::string_view name() const = 0;

  // ---- memory and queue ----
  // The untracked device allocator.
  virtual Allocator& device_allocator() = 0;
  // Installs the allocator every later allocation goes through (the memory tracker), or nullptr
  // for the device allocator. It must outlive the buffers allocated through it.
  void use_allocator(Allocator* allocator) { allocator_ = allocator; }
  [[nodiscard]] Allocator& allocator() {
    return allocator_ != nullptr ? *allocator_ : device_allocator();
  }
  [[nodiscard]] Buffer allocate(const TensorShape& shape, DType dtype, MemoryCategory category) {
    return Buffer(allocator(), static_cast<std::size_t>(shape.numel() * size_bytes(dtype)),
                  category);
  }
  // Waits until every enqueued call has finished.
  virtual void synchronize() = 0;
  virtual void copy_from_host(const void* host, TensorView dst) = 0;  // dst.bytes() bytes
  virtual void copy_to_host(ConstTensorView src, void* host) = 0;     // src.bytes() bytes

  // ---- fills, and copies for resharding: slices, concatenation, head split and merge ----
  virtual void fill(TensorView x, float value) = 0;
  // x = stddev · rng::normal(rng, global index) (parameter initialisation; GPT-2 uses 0.02).
  virtual void fill_normal(TensorView x, float stddev, RngStream rng,
                           const ShardPlacement& placement) = 0;
  // dst[to + i·to.strides] (=, +=) src[from + i·from.strides] for every i in the box `extents`;
  // every element touched must lie inside its tensor; src and dst must not overlap. src and dst
  // may differ in dtype (the copy converts, see convert below).
  virtual void copy_strided(ConstTensorView src, const StridedBox& from, TensorView dst,
                            const StridedBox& to, const Index& extents, CopyMode mode) = 0;
  // dst = src element by element in dst's dtype (fp32 <-> bf16, rounding to nearest even; the
  // bf16 copy of an fp32 master weight); the element counts must agree.
  void convert(ConstTensorView src, TensorView dst) {
    CARTO_CHECK(src.numel() == dst.numel(), "convert of ", src.shape(), " (",
                to_string_view(src.dtype()), ") to ", dst.shape, " (", to_string_view(dst.dtype),
                ") changes the element count");
    const TensorShape flat{{"elements", src.numel()}};
    copy_strided(reshaped(src, flat), StridedBox{.offset = 0, .strides = {1}}, reshaped(dst, flat),
                 StridedBox{.offset = 0, .strides = {1}}, {src.numel()}, CopyMode::assign);
  }
  // The box `from` of src into dst at `to_offset` (extents from.extent).
  void copy_box(ConstTensorView src, const Slice& from, TensorView dst, const Index& to_offset,
                CopyMode mode) {
    copy_strided(src, box_of(src.shape(), from), dst,
                 box_of(dst.shape, Slice{.offset = to_offset, .extent = from.extent}), from.extent,
                 mode);
  }

  // ---- GEMM ----
  // a (batch..., m, k) or (batch..., k, m) when transposed, b (batch..., k, n) or (batch..., n, k),
  // c (batch..., m, n). The batch of a and of b is c's (same leading dims' product) or 1
  // (broadcast). For dW = Xᵀ·dY over all tokens pass matrix views (reshaped + matrix_shape).
  virtual void gemm(ConstTensorView a, ConstTensorView b, TensorView c, const GemmArgs& args) = 0;

  // ---- layernorm over the last dim ----
  // x, y (rows..., C); gamma, beta (C); mean, rstd (rows...): saved for backward.
  virtual void layernorm_forward(ConstTensorView x, ConstTensorView gamma, ConstTensorView beta,
                                 TensorView y, TensorView mean, TensorView rstd,
                                 const LayerNormArgs& args) = 0;
  // dx, dgamma, dbeta (=, +=) the gradients, each in its mode.
  virtual void layernorm_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                  ConstTensorView mean, ConstTensorView rstd, TensorView dx,
                                  TensorView dgamma, TensorView dbeta,
                                  const NormGradModes& modes) = 0;

  // ---- layernorm with the normalized (last) dim split across devices: x holds C_local of the
  // global C columns; the executor all-reduces `sums` between the partial and apply calls ----
  // The variance is E[x²] − mean², from one all-reduce of (Σx, Σx²) instead of two (mean, then
  // Σ(x − mean)²). The subtraction cancels: its relative error is about u·C·(1 + mean²/var) with u
  // the fp32 unit roundoff (2^-24) and C the terms in a sum, so for activations of order 1 (the
  // residual stream a transformer normalizes, |mean| a fraction of the spread) it stays within a
  // few times the two-pass form's error; it degrades only when |mean| ≫ the standard deviation.
  // Implementations accumulate each row's sums in double, which makes the sums exact to fp32
  // before they are rounded for the all-reduce.
  // sums (rows..., 2) = (Σ x, Σ x²) over the local columns.
  virtual void layernorm_partial_sums(ConstTensorView x, TensorView sums) = 0;
  // From the global sums: mean, rstd (rows...) and y = (x - mean)·rstd·gamma + beta on the local
  // columns; gamma, beta (C_local).
  virtual void layernorm_apply(ConstTensorView x, ConstTensorView sums, std::int64_t global_columns,
                               ConstTensorView gamma, ConstTensorView beta, TensorView y,
                               TensorView mean, TensorView rstd, const LayerNormArgs& args) = 0;
  // sums (rows..., 2) = (Σ dy·γ, Σ dy·γ·x̂) over the local columns.
  virtual void layernorm_backward_partial_sums(ConstTensorView dy, ConstTensorView x,
                                               ConstTensorView gamma, ConstTensorView mean,
                                               ConstTensorView rstd, TensorView sums) = 0;
  // From the global sums: dx (=, +=) rstd·(dy·γ − (Σdyγ + x̂·Σdyγx̂)/C); dgamma (=, +=)
  // Σ_rows dy·x̂; dbeta (=, +=) Σ_rows dy (local columns), each in its mode.
  virtual void layernorm_backward_apply(ConstTensorView dy, ConstTensorView x,
                                        ConstTensorView gamma, ConstTensorView mean,
                                        ConstTensorView rstd, ConstTensorView sums,
                                        std::int64_t global_columns, TensorView dx,
                                        TensorView dgamma, TensorView dbeta,
                                        const NormGradModes& modes) = 0;

  // ---- RMSNorm over the last dim (Zhang & Sennrich 2019): y = x·rstd·γ, rstd = 1/sqrt(mean(x²)
  // + eps); x, y (rows..., C); gamma (C); rstd (rows...) saved for backward ----
  virtual void rmsnorm_forward(ConstTensorView x, ConstTensorView gamma, TensorView y,
                               TensorView rstd, const RmsNormArgs& args) = 0;
  // With x̂ = x·rstd: dx (=, +=) rstd·(dy·γ − x̂·Σ(dy·γ·x̂)/C); dgamma (=, +=) Σ_rows dy·x̂, in
  // modes.dx and modes.dgamma (modes.dbeta is not read: RMSNorm has no β).
  virtual void rmsnorm_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                ConstTensorView rstd, TensorView dx, TensorView dgamma,
                                const NormGradModes& modes) = 0;
  // The normalized dim split across devices (x holds C_local of C columns); the executor
  // all-reduces `sums` between the partial and apply calls. sums (rows...) = Σ x² over the local
  // columns (accumulated in double, rounded once).
  virtual void rmsnorm_partial_sums(ConstTensorView x, TensorView sums) = 0;
  // From the global sums: rstd (rows...) and y = x·rstd·γ on the local columns; gamma (C_local).
  virtual void rmsnorm_apply(ConstTensorView x, ConstTensorView sums, std::int64_t global_columns,
                             ConstTensorView gamma, TensorView y, TensorView rstd,
                             const RmsNormArgs& args) = 0;
  // sums (rows...) = Σ dy·γ·x̂ over the local columns.
  virtual void rmsnorm_backward_partial_sums(ConstTensorView dy, ConstTensorView x,
                                             ConstTensorView gamma, ConstTensorView rstd,
                                             TensorView sums) = 0;
  // From the global sums: dx (=, +=) rstd·(dy·γ − x̂·sums/C); dgamma (=, +=) Σ_rows dy·x̂ (local
  // columns), in modes.dx and modes.dgamma.
  virtual void rmsnorm_backward_apply(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                      ConstTensorView rstd, ConstTensorView sums,
                                      std::int64_t global_columns, TensorView dx, TensorView dgamma,
                                      const NormGradModes& modes) = 0;

  // ---- softmax over the last dim (x, y: (..., Sq, Sk); y may be x) ----
  virtual void softmax_forward(ConstTensorView x, TensorView y, const SoftmaxArgs& args) = 0;
  // dx (=, +=) scale · y ∘ (dy - Σ_k dy ∘ y).
  virtual void softmax_backward(ConstTensorView y, ConstTensorView dy, TensorView dx,
                                const SoftmaxArgs& args, CopyMode mode) = 0;

  // ---- fused attention; q, k, v, out (B, a, S, d), logsumexp (B, a, S) saved for backward ----
  // Grouped-query form: q, out (B, n, g, S, d), k, v (B, n, S, d), logsumexp (B, n, g, S): query
  // head (n, j) attends with key/value head n; args.placement then places (B, n, g, Sq, Sk).
  virtual void attention_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                 TensorView out, TensorView logsumexp,
                                 const AttentionArgs& args) = 0;
  // Recomputes the probabilities (and dropout mask) from q, k and logsumexp; dq, dk, dv (=, +=)
  // ..., all three in `mode`.
  virtual void attention_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                  ConstTensorView out, ConstTensorView logsumexp,
                                  ConstTensorView dout, TensorView dq, TensorView dk, TensorView dv,
                                  const AttentionArgs& args, CopyMode mode) = 0;

  // ---- elementwise (y may be x) ----
  // GELU with the tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³))).
  virtual void gelu_forward(ConstTensorView x, TensorView y) = 0;
  // dx (=, +=) dy · gelu'(x).
  virtual void gelu_backward(ConstTensorView x, ConstTensorView dy, TensorView dx,
                             CopyMode mode) = 0;
  virtual void dropout_forward(ConstTensorView x, TensorView y, const DropoutArgs& args) = 0;
  // dx (=, +=) dy ∘ mask / (1 - probability).
  virtual void dropout_backward(ConstTensorView dy, TensorView dx, const DropoutArgs& args,
                                CopyMode mode) = 0;
  virtual void add(ConstTensorView a, ConstTensorView b, TensorView y) = 0;  // y = a + b
  virtual void scale(ConstTensorView x, float factor, TensorView y) = 0;     // y = f·x
  // y += factor · x: the backward of add (factor 1) and of scale, and gradient accumulation.
  virtual void add_scaled(ConstTensorView x, float factor, TensorView y) = 0;
  // SwiGLU's product (Shazeer 2020): y = silu(gate)·up, silu(z) = z·sigmoid(z).
  virtual void silu_mul_forward(ConstTensorView gate, ConstTensorView up, TensorView y) = 0;
  // dgate (=, +=) dy·up·silu'(gate), dup (=, +=) dy·silu(gate), both in `mode`;
  // silu'(z) = σ(z)·(1 + z·(1 − σ(z))).
  virtual void silu_mul_backward(ConstTensorView gate, ConstTensorView up, ConstTensorView dy,
                                 TensorView dgate, TensorView dup, CopyMode mode) = 0;
  // y = rotary(x) (y may be x); backward: dx (=, +=) the inverse rotation of dy.
  virtual void rotary_forward(ConstTensorView x, TensorView y, const RotaryArgs& args) = 0;
  virtual void rotary_backward(ConstTensorView dy, TensorView dx, const RotaryArgs& args,
                               CopyMode mode) = 0;
  // y = x + b with b (the trailing dims of x) broadcast over the leading dims.
  virtual void bias_forward(ConstTensorView x, ConstTensorView b, TensorView y) = 0;
  // db (=, +=) Σ_leading dy.
  virtual void bias_backward(ConstTensorView dy, TensorView db, CopyMode mode) = 0;

  // ---- embedding: table (V_local, H), ids (...), out (..., H) ----
  // out = table[id - vocab_offset] for ids in the shard's rows, 0 for the others (so the sum over
  // vocab shards is the full lookup: the output is Partial over the vocab axis).
  virtual void embedding_forward(ConstTensorView table, IndexView ids, TensorView out,
                                 const EmbeddingShard& shard) = 0;
  // dtable[id - vocab_offset] += dout for ids in the shard's rows; assign first sets every row of
  // dtable to 0 (the rows no id hits included).
  virtual void embedding_backward(ConstTensorView dout, IndexView ids, TensorView dtable,
                                  const EmbeddingShard& shard, CopyMode mode) = 0;

  // ---- softmax cross-entropy: logits (rows..., V), targets (rows...) ----
  // One device holding whole rows: loss (a one-element tensor) = Σ_rows (lse - logit[target]) /
  // token_count, and logsumexp (rows...) saved for backward.
  virtual void cross_entropy_forward(ConstTensorView logits, IndexView targets, TensorView loss,
                                     TensorView logsumexp, const CrossEntropyArgs& args) = 0;
  // Vocab-parallel pieces; between them the executor all-reduces (max, then sum, sum).
  virtual void cross_entropy_row_max(ConstTensorView logits, TensorView row_max) = 0;
  // sum_exp = Σ_local exp(logit - global row max).
  virtual void cross_entropy_sum_exp(ConstTensorView logits, ConstTensorView row_max,
                                     TensorView sum_exp) = 0;
  // The target's logit when the target is in this shard's vocab rows, else 0.
  virtual void cross_entropy_target_logit(ConstTensorView logits, IndexView targets,
                                          TensorView target_logit,
                                          const CrossEntropyArgs& args) = 0;
  // From the reduced values: logsumexp = max + log(sum_exp), loss = Σ (logsumexp - target) / count.
  virtual void cross_entropy_loss(ConstTensorView row_max, ConstTensorView sum_exp,
                                  ConstTensorView target_logit, TensorView loss,
                                  TensorView logsumexp, const CrossEntropyArgs& args) = 0;
  // dlogits (=, +=) dloss / count · (exp(logit - logsumexp) - [vocab row == target]); dloss is a
  // one-element tensor. The same call serves the full and the vocab-parallel forms.
  virtual void cross_entropy_backward(ConstTensorView logits, IndexView targets,
                                      ConstTensorView logsumexp, ConstTensorView dloss,
                                      TensorView dlogits, const CrossEntropyArgs& args,
                                      CopyMode mode) = 0;

  // ---- optimizer: one AdamW step on a local shard (param, grad, m, v of one shape) ----
  virtual void adamw_update(TensorView param, ConstTensorView grad, TensorView m, TensorView v,
                            const AdamWArgs& args) = 0;
  // One AdamW step on every shard of a rank's parameters in one call (the same args for each, the
  // same results as one adamw_update per shard): a backend may fuse them into one pass. By default
  // one adamw_update each.
  virtual void adamw_update_all(std::span<const AdamWShard> shards, const AdamWArgs& args) {
    for (const AdamWShard& s : shards) adamw_update(s.param, s.grad, s.m, s.v, args);
  }

 private:
  Allocator* allocator_ = nullptr;
};

}  // namespace carto
