// carto/graph/graph.hpp — the op IR: tensors with shapes and dtypes, ops in execution order,
// groups.
//
// Design note (DESIGN.md §3): a Graph is a list of ops in a valid execution order (each op's inputs
// exist before it), so it is a DAG; the builders produce series-parallel graphs (chains plus
// residual branches: a tensor may feed several ops, e.g. a block input feeds the layernorm and the
// residual add). Every tensor has a TensorShape (named dims) and a DType; parameters are marked by
// TensorKind::parameter, token ids by TensorKind::index (int32: 4 bytes per element, as
// carto::DType has no integer types). A view (split/merge heads, transpose) moves no data: its
// output aliases the storage of its input (TensorInfo::storage), which the memory schedule counts
// once.
//
// Op kinds: einsum (matmul, batched matmul), elementwise unary (gelu, dropout, scale) and binary
// (add: equal shapes; bias: the second operand matches the trailing dims of the first and is
// broadcast over the leading ones), reductions along one dim (softmax, layernorm with its mean and
// rstd), gather (embedding lookup), softmax_cross_entropy (per-token loss averaged to a scalar),
// fused_attention (flash-style softmax(QKᵀ·scale)·V with dropout inside) and views.
// Llama-family ops: rmsnorm (x·rstd·γ along one dim, rstd = 1/sqrt(mean(x²) + eps); Zhang &
// Sennrich 2019: no mean, no β), silu_mul (the SwiGLU product silu(gate)·up of two equal-shaped
// tensors, fused into one op so that silu(gate) is never a graph tensor), and rotary (Su et al.
// 2021: pairs (2i, 2i+1) of the last dim rotated by position·θ^(-2i/d), the position being the
// second-to-last dim; Op::factor holds θ). Grouped-query attention keeps each query head beside
// its key/value head: split_groups views (B, S, n·c·d) as (B, n, g, S, d) (n key/value heads, g
// query heads per group, the first g of c slots per group: the queries of a fused QKV projection in
// per-group order), merge_heads accepts that rank-5 form, and fused_attention takes q of rank 5
// with k, v (B, n, S, d).
//
// Groups name contiguous op ranges (one layer each: "embedding", "block.3", "lm_head", ...); the
// profiler reports per group and checkpoints groups of kind transformer_block under
// Recompute::full. Everything is constexpr: std::vector and std::string are freed before a
// constant expression ends, so a Graph lives inside a constexpr function, not in a constexpr
// variable.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "carto/error.hpp"
#include "carto/graph/einsum.hpp"
#include "carto/spec/dtype.hpp"
#include "carto/spec/shape.hpp"
#include "carto/util/static_vector.hpp"

namespace carto {

struct TensorId {
  std::int32_t value = -1;
  [[nodiscard]] constexpr bool valid() const { return value >= 0; }
  [[nodiscard]] constexpr std::size_t index() const { return static_cast<std::size_t>(value); }
  friend constexpr bool operator==(TensorId, TensorId) = default;
};

struct OpId {
  std::int32_t value = -1;
  [[nodiscard]] constexpr bool valid() const { return value >= 0; }
  [[nodiscard]] constexpr std::size_t index() const { return static_cast<std::size_t>(value); }
  friend constexpr bool operator==(OpId, OpId) = default;
};

enum class TensorKind : std::uint8_t { activation, parameter, index };

struct TensorInfo {
  TensorShape shape{};
  DType dtype = DType::fp32;
  TensorKind kind = TensorKind::activation;
  OpId producer{};     // invalid for graph inputs and parameters
  TensorId storage{};  // the tensor whose memory this one uses: itself, or the input of a view
};

// Bytes per element: the dtype's size, or 4 for int32 token ids.
constexpr std::int64_t element_bytes(const TensorInfo& t) {
  return t.kind == TensorKind::index ? 4 : size_bytes(t.dtype);
}
constexpr std::int64_t tensor_bytes(const TensorInfo& t) {
  return checked_mul(t.shape.numel(), element_bytes(t), "the byte size of a tensor");
}

enum class OpKind : std::uint8_t {
  einsum,
  gelu,
  dropout,
  scale,
  add,
  bias,
  softmax,
  layernorm,
  gather,
  softmax_cross_entropy,
  fused_attention,
  view,
  rmsnorm,
  silu_mul,
  rotary,
};

constexpr std::string_view to_string_view(OpKind k) {
  switch (k) {
    case OpKind::einsum: return "einsum";
    case OpKind::gelu: return "gelu";
    case OpKind::dropout: return "dropout";
    case OpKind::scale: return "scale";
    case OpKind::add: return "add";
    case OpKind::bias: return "bias";
    case OpKind::softmax: return "softmax";
    case OpKind::layernorm: return "layernorm";
    case OpKind::gather: return "gather";
    case OpKind::softmax_cross_entropy: return "softmax_cross_entropy";
    case OpKind::fused_attention: return "fused_attention";
    case OpKind::view: return "view";
    case OpKind::rmsnorm: return "rmsnorm";
    case OpKind::silu_mul: return "silu_mul";
    case OpKind::rotary: return "rotary";
  }
  return "?";
}

enum class Masking : std::uint8_t { none, causal };
enum class ViewKind : std::uint8_t { split_heads, merge_heads, transpose, split_groups };

struct Op {
  OpKind kind = OpKind::view;
  StaticVector<TensorId, 3> inputs{};
  TensorId output{};
  Einsum einsum{};           // einsum only
  std::size_t dim = 0;       // softmax, layernorm, rmsnorm: the reduced dim; split_heads: the part
  double probability = 0.0;  // dropout, fused_attention: the drop probability
  double factor = 1.0;       // scale, fused_attention: the multiplier; rotary: θ
  Masking masking = Masking::none;      // softmax, fused_attention
  ViewKind view = ViewKind::transpose;  // view only
  std::int32_t group = -1;              // index of the enclosing OpGroup, or -1
};

enum class GroupKind : std::uint8_t { embedding, transformer_block, layer, head, loss };

// A layer name of at most kMaxLayerName characters, usable in constant expressions (constexpr
// std::string is not reliable across compilers for short strings).
inline constexpr std::size_t kMaxLayerName = 39;
class LayerName {
 public:
  constexpr LayerName() = default;
  constexpr LayerName(std::string_view text) {
    append(text);
  }  // NOLINT(google-explicit-constructor)
  constexpr LayerName(const char* text) : LayerName(std::string_view(text)) {}  // NOLINT
  constexpr LayerName& append(std::string_view text) {
    if (size_ + text.size() > kMaxLayerName) {
      detail::fail("carto: layer name '", view(), text, "' is longer than ", kMaxLayerName,
                   " characters");
    }
    for (char c : text) chars_[size_++] = c;
    return *this;
  }
  // Appends the decimal digits of a non-negative integer ("block." then 11).
  constexpr LayerName& append(std::int64_t value) {
    char digits[20]{};
    std::size_t n = 0;
    do {
      digits[n++] = static_cast<char>('0' + value % 10);
      value /= 10;
    } while (value > 0);
    while (n > 0) append(std::string_view(&digits[--n], 1));
    return *this;
  }
  [[nodiscard]] constexpr std::string_view view() const { return {chars_.data(), size_}; }
  friend constexpr bool operator==(const LayerName& a, const LayerName& b) {
    return a.view() == b.view();
  }
  friend std::ostream& operator<<(std::ostream& out, const LayerName& n) { return out << n.view(); }

 private:
  std::array<char, kMaxLayerName> chars_{};
  std::size_t size_ = 0;
};

struct OpGroup {
  LayerName name{};
  GroupKind kind = GroupKind::layer;
  std::int32_t first_op = 0;  // [first_op, end_op)
  std::int32_t end_op = 0;
};

// Decimal digits of a non-negative integer, for group names ("block.11").
constexpr std::string decimal(std::int64_t value) {
  std::string digits{};
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + value % 10));
    value /= 10;
  } while (value > 0);
  return digits;
}

class Graph {
 public:
  // ---- tensors without a producer ----
  constexpr TensorId input(const TensorShape& shape, DType dtype,
                           TensorKind kind = TensorKind::activation) {
    if (kind == TensorKind::parameter) {
      detail::fail("carto: Graph::input got TensorKind::parameter; use Graph::parameter");
    }
    return add_tensor(shape, dtype, kind, OpId{});
  }
  constexpr TensorId parameter(const TensorShape& shape, DType dtype) {
    return add_tensor(shape, dtype, TensorKind::parameter, OpId{});
  }

  // ---- ops; each returns its output ----

  // Y = einsum(text, a, b): the output dims take the names and extents of the input dims that
  // carry their letters; the output dtype is a's.
  constexpr TensorId einsum(std::string_view text, TensorId a, TensorId b) {
    Op op{.kind = OpKind::einsum};
    op.einsum = Einsum::parse(text);
    if (op.einsum.inputs.size() != 2) {
      detail::fail("carto: Graph::einsum('", text, "') takes two operands; got ",
                   op.einsum.inputs.size());
    }
    op.inputs = {a, b};
    const TensorId operands[2] = {a, b};
    for (std::size_t i = 0; i < 2; ++i) {
      if (tensor(operands[i]).shape.rank() != op.einsum.inputs[i].size()) {
        detail::fail("carto: einsum '", text, "': operand ", i, " has rank ",
                     tensor(operands[i]).shape.rank(), " but ", op.einsum.inputs[i].size(),
                     " letters; give one letter per dim");
      }
    }
    for (char c : op.einsum.letters()) (void)letter_extent(op, c, text);  // checks agreement
    TensorShape out;
    for (char c : op.einsum.output) out.push_back(letter_dim(op, c));
    return add_op(op, out, tensor(a).dtype);
  }

  constexpr TensorId gelu(TensorId x) { return unary(OpKind::gelu, x); }
  constexpr TensorId scale(TensorId x, double factor) {
    Op op{.kind = OpKind::scale, .factor = factor};
    op.inputs = {x};
    return add_op(op, tensor(x).shape, tensor(x).dtype);
  }
  constexpr TensorId dropout(TensorId x, double probability) {
    check_probability(probability);
    Op op{.kind = OpKind::dropout, .probability = probability};
    op.inputs = {x};
    return add_op(op, tensor(x).shape, tensor(x).dtype);
  }
  constexpr TensorId add(TensorId a, TensorId b) {
    if (!(tensor(a).shape == tensor(b).shape)) {
      detail::fail("carto: add needs equal shapes; got ", tensor(a).shape, " and ", tensor(b).shape,
                   " (for a broadcast over leading dims use bias)");
    }
    Op op{.kind = OpKind::add};
    op.inputs = {a, b};
    return add_op(op, tensor(a).shape, tensor(a).dtype);
  }
  // x + b, b's shape equal to the trailing dims of x's.
  constexpr TensorId bias(TensorId x, TensorId b) {
    const TensorShape& xs = tensor(x).shape;
    const TensorShape& bs = tensor(b).shape;
    bool ok = bs.rank() <= xs.rank();
    for (std::size_t i = 0; ok && i < bs.rank(); ++i) {
      ok = bs.dims()[i].extent == xs.dims()[xs.rank() - bs.rank() + i].extent;
    }
    if (!ok) {
      detail::fail("carto: bias ", bs, " must match the trailing dims of ", xs);
    }
    Op op{.kind = OpKind::bias};
    op.inputs = {x, b};
    return add_op(op, xs, tensor(x).dtype);
  }
  constexpr TensorId softmax(TensorId x, std::size_t dim, Masking masking) {
    check_dim(x, dim, "softmax");
    Op op{.kind = OpKind::softmax, .dim = dim, .masking = masking};
    op.inputs = {x};
    return add_op(op, tensor(x).shape, tensor(x).dtype);
  }
  // Normalizes along `dim`; gamma and beta have that dim's extent.
  constexpr TensorId layernorm(TensorId x, TensorId gamma, TensorId beta, std::size_t dim) {
    check_dim(x, dim, "layernorm");
    const std::int64_t e = tensor(x).shape.dims()[dim].extent;
    for (TensorId p : {gamma, beta}) {
      if (tensor(p).shape.rank() != 1 || tensor(p).shape.dims()[0].extent != e) {
        detail::fail("carto: layernorm over a dim of extent ", e,
                     " needs gamma and beta of shape (", e, "); got ", tensor(p).shape);
      }
    }
    Op op{.kind = OpKind::layernorm, .dim = dim};
    op.inputs = {x, gamma, beta};
    return add_op(op, tensor(x).shape, tensor(x).dtype);
  }
  // out[ids..., h] = table[ids[...], h]; table (V, H), ids of TensorKind::index.
  constexpr TensorId gather(TensorId table, TensorId ids) {
    if (tensor(table).shape.rank() != 2 || tensor(ids).kind != TensorKind::index) {
      detail::fail("carto: gather takes a rank-2 table (V, H) and index ids; got ",
                   tensor(table).shape, " and a tensor of kind ",
                   tensor(ids).kind == TensorKind::index ? "index" : "non-index");
    }
    TensorShape out = tensor(ids).shape;
    out.push_back(tensor(table).shape.dims()[1]);
    Op op{.kind = OpKind::gather};
    op.inputs = {table, ids};
    return add_op(op, out, tensor(table).dtype);
  }
  // Mean over tokens of -log softmax(logits)[target]; logits (..., V), targets (...) index ids.
  // The loss is an fp32 scalar.
  constexpr TensorId softmax_cross_entropy(TensorId logits, TensorId targets) {
    const TensorShape& ls = tensor(logits).shape;
    const TensorShape& ts = tensor(targets).shape;
    bool ok = tensor(targets).kind == TensorKind::index && ts.rank() + 1 == ls.rank();
    for (std::size_t i = 0; ok && i < ts.rank(); ++i)
      ok = ts.dims()[i].extent == ls.dims()[i].extent;
    if (!ok) {
      detail::fail(
          "carto: softmax_cross_entropy takes logits (..., V) and index targets (...); got ", ls,
          " and ", ts);
    }
    Op op{.kind = OpKind::softmax_cross_entropy};
    op.inputs = {logits, targets};
    return add_op(op, TensorShape{}, DType::fp32);
  }
  // softmax(q kᵀ · factor, masked) · v with dropout, flash-style; q, k, v (B, heads, S, d), or
  // grouped-query: q (B, n, g, S, d) with k, v (B, n, S, d) (every query head of group n reads
  // key/value head n). The output has q's shape.
  constexpr TensorId fused_attention(TensorId q, TensorId k, TensorId v, double factor,
                                     Masking masking, double probability) {
    check_probability(probability);
    const TensorShape& qs = tensor(q).shape;
    const TensorShape& ks = tensor(k).shape;
    bool ok = ks == tensor(v).shape && ks.rank() == 4 && (qs.rank() == 4 || qs.rank() == 5);
    if (ok && qs.rank() == 4) ok = qs == ks;
    if (ok && qs.rank() == 5) {
      ok = qs.dims()[0].extent == ks.dims()[0].extent &&
           qs.dims()[1].extent == ks.dims()[1].extent &&
           qs.dims()[3].extent == ks.dims()[2].extent && qs.dims()[4].extent == ks.dims()[3].extent;
    }
    if (!ok) {
      detail::fail(
          "carto: fused_attention takes q, k, v of one shape (B, heads, S, d), or q (B, n, "
          "g, S, d) with k, v (B, n, S, d); got ",
          qs, ", ", ks, ", ", tensor(v).shape);
    }
    Op op{.kind = OpKind::fused_attention,
          .probability = probability,
          .factor = factor,
          .masking = masking};
    op.inputs = {q, k, v};
    return add_op(op, qs, tensor(q).dtype);
  }
  // x·rstd·γ along `dim`, rstd = 1/sqrt(mean(x²) + eps); gamma has that dim's extent.
  constexpr TensorId rmsnorm(TensorId x, TensorId gamma, std::size_t dim) {
    check_dim(x, dim, "rmsnorm");
    const std::int64_t e = tensor(x).shape.dims()[dim].extent;
    if (tensor(gamma).shape.rank() != 1 || tensor(gamma).shape.dims()[0].extent != e) {
      detail::fail("carto: rmsnorm over a dim of extent ", e, " needs gamma of shape (", e,
                   "); got ", tensor(gamma).shape);
    }
    Op op{.kind = OpKind::rmsnorm, .dim = dim};
    op.inputs = {x, gamma};
    return add_op(op, tensor(x).shape, tensor(x).dtype);
  }
  // silu(gate)·up elementwise (SwiGLU's product), gate and up of one shape.
  constexpr TensorId silu_mul(TensorId gate, TensorId up) {
    if (!(tensor(gate).shape == tensor(up).shape)) {
      detail::fail("carto: silu_mul needs gate and up of one shape; got ", tensor(gate).shape,
                   " and ", tensor(up).shape);
    }
    Op op{.kind = OpKind::silu_mul};
    op.inputs = {gate, up};
    return add_op(op, tensor(gate).shape, tensor(gate).dtype);
  }
  // Rotary position embedding of x (..., S, d), d even: pairs (2i, 2i+1) of the last dim rotated
  // by the angle s·θ^(-2i/d) of their position s (the second-to-last dim).
  constexpr TensorId rotary(TensorId x, double theta) {
    const TensorShape& s = tensor(x).shape;
    if (s.rank() < 2 || s.dims()[s.rank() - 1].extent % 2 != 0 || !(theta > 1.0)) {
      detail::fail("carto: rotary takes x (..., S, d) with d even and theta > 1; got ", s,
                   " and theta ", theta);
    }
    Op op{.kind = OpKind::rotary, .factor = theta};
    op.inputs = {x};
    return add_op(op, s, tensor(x).dtype);
  }

  // Views: (B, S, parts·H) -> part `part` as (B, heads, S, H/heads). The fused dim is ordered
  // per head, as Megatron-LM lays out its fused QKV projection: column (head, part, j) is
  // head·parts·d + part·d + j, so a contiguous split of the fused dim into t pieces (t dividing
  // heads) gives each piece whole heads with all their parts, and the split is a heads split.
  constexpr TensorId split_heads(TensorId x, std::int64_t parts, std::int64_t part,
                                 std::int64_t heads) {
    const TensorShape& s = tensor(x).shape;
    if (s.rank() != 3 || parts < 1 || part < 0 || part >= parts || heads < 1 ||
        s.dims()[2].extent % (parts * heads) != 0) {
      detail::fail("carto: split_heads of ", s, " into ", parts, " parts of ", heads,
                   " heads: needs (B, S, F) with F divisible by parts*heads and 0 <= part < parts");
    }
    const std::int64_t d = s.dims()[2].extent / (parts * heads);
    const TensorId out = view_op(x, ViewKind::split_heads,
                                 {s.dims()[0], {"heads", heads}, s.dims()[1], {"head_dim", d}});
    ops_.back().dim = static_cast<std::size_t>(part);
    return out;
  }
  // Grouped-query view: (B, S, n·c·d) -> (B, n, g, S, d), n = kv_heads key/value heads with g =
  // group query heads each, c = slots ≥ g head-sized slots per group of which the view takes the
  // first g. The fused dim is ordered (n, c, j): column (group, slot, j) is group·c·d + slot·d + j,
  // so a contiguous split of it into t pieces (t dividing n) gives each piece whole groups, a split
  // of the key/value heads. slots = g (the default) is a q projection of its own; slots = g + 2 is
  // the fused QKV projection in per-group order (Megatron-LM's GQA layout: each group's g query
  // heads, then its key head, then its value head), whose key and value are
  // split_heads(x, g + 2, g, n) and split_heads(x, g + 2, g + 1, n). The slot count is implied by
  // the shapes (c = F / (n·d)), so the stride of n in the fused dim is F / n.
  constexpr TensorId split_groups(TensorId x, std::int64_t kv_heads, std::int64_t group,
                                  std::int64_t slots = 0) {
    const TensorShape& s = tensor(x).shape;
    if (slots == 0) slots = group;
    if (s.rank() != 3 || kv_heads < 1 || group < 1 || slots < group ||
        s.dims()[2].extent % (kv_heads * slots) != 0) {
      detail::fail("carto: split_groups of ", s, " into ", kv_heads, " groups of ", group,
                   " heads in ", slots,
                   " slots each: needs (B, S, F) with F divisible by kv_heads*slots and "
                   "slots >= group");
    }
    const std::int64_t d = s.dims()[2].extent / (kv_heads * slots);
    return view_op(
        x, ViewKind::split_groups,
        {s.dims()[0], {"kv_heads", kv_heads}, {"group", group}, s.dims()[1], {"head_dim", d}});
  }
  // (B, heads, S, d) -> (B, S, heads·d) named `name`; or (B, n, g, S, d) -> (B, S, n·g·d).
  constexpr TensorId merge_heads(TensorId x, DimName name) {
    const TensorShape& s = tensor(x).shape;
    if (s.rank() == 5) {
      return view_op(x, ViewKind::merge_heads,
                     {s.dims()[0],
                      s.dims()[3],
                      {name, s.dims()[1].extent * s.dims()[2].extent * s.dims()[4].extent}});
    }
    if (s.rank() != 4) {
      detail::fail("carto: merge_heads takes (B, heads, S, d) or (B, n, g, S, d); got ", s);
    }
    return view_op(x, ViewKind::merge_heads,
                   {s.dims()[0], s.dims()[2], {name, s.dims()[1].extent * s.dims()[3].extent}});
  }
  // Swaps the last two dims.
  constexpr TensorId transpose(TensorId x) {
    TensorShape s = tensor(x).shape;
    if (s.rank() < 2) detail::fail("carto: transpose needs rank >= 2; got ", s);
    TensorShape out;
    for (std::size_t i = 0; i + 2 < s.rank(); ++i) out.push_back(s.dims()[i]);
    out.push_back(s.dims()[s.rank() - 1]);
    out.push_back(s.dims()[s.rank() - 2]);
    return view_op(x, ViewKind::transpose, out);
  }

  // ---- groups ----
  constexpr void begin_group(const LayerName& name, GroupKind kind) {
    if (open_group_ >= 0) {
      detail::fail("carto: group '", groups_[static_cast<std::size_t>(open_group_)].name,
                   "' is still open; end_group() before beginning '", name, "'");
    }
    groups_.push_back(OpGroup{.name = name,
                              .kind = kind,
                              .first_op = static_cast<std::int32_t>(ops_.size()),
                              .end_op = static_cast<std::int32_t>(ops_.size())});
    open_group_ = static_cast<std::int32_t>(groups_.size() - 1);
  }
  constexpr void end_group() {
    if (open_group_ < 0) detail::fail("carto: end_group() without begin_group()");
    groups_[static_cast<std::size_t>(open_group_)].end_op = static_cast<std::int32_t>(ops_.size());
    open_group_ = -1;
  }

  // ---- access ----
  [[nodiscard]] constexpr const TensorInfo& tensor(TensorId t) const {
    if (!t.valid() || t.index() >= tensors_.size()) {
      detail::fail("carto: tensor id ", t.value, " is not in this graph (", tensors_.size(),
                   " tensors)");
    }
    return tensors_[t.index()];
  }
  [[nodiscard]] constexpr const Op& op(OpId o) const {
    if (!o.valid() || o.index() >= ops_.size()) {
      detail::fail("carto: op id ", o.value, " is not in this graph (", ops_.size(), " ops)");
    }
    return ops_[o.index()];
  }
  [[nodiscard]] constexpr const std::vector<TensorInfo>& tensors() const { return tensors_; }
  [[nodiscard]] constexpr const std::vector<Op>& ops() const { return ops_; }
  [[nodiscard]] constexpr const std::vector<OpGroup>& groups() const { return groups_; }
  [[nodiscard]] constexpr std::size_t num_ops() const { return ops_.size(); }

  // The tensor whose gradient seeds backward (the loss); by default the last op's output.
  constexpr void set_result(TensorId t) { (void)tensor(t), result_ = t; }
  [[nodiscard]] constexpr TensorId result() const {
    if (result_.valid()) return result_;
    if (ops_.empty()) detail::fail("carto: the graph has no ops, so no result");
    return ops_.back().output;
  }

  // Total elements over parameter tensors.
  [[nodiscard]] constexpr std::int64_t num_params() const {
    std::int64_t n = 0;
    for (const TensorInfo& t : tensors_) {
      if (t.kind == TensorKind::parameter) n += t.shape.numel();
    }
    return n;
  }

  // The extent of an einsum letter (all operand dims carrying it agree).
  [[nodiscard]] constexpr std::int64_t letter_extent(const Op& op, char c,
                                                     std::string_view text = "") const {
    std::int64_t extent = -1;
    for (std::size_t i = 0; i < op.einsum.inputs.size(); ++i) {
      const IndexLetters& ls = op.einsum.inputs[i];
      for (std::size_t d = 0; d < ls.size(); ++d) {
        if (ls[d] != c) continue;
        const std::int64_t e = tensor(op.inputs[i]).shape.dims()[d].extent;
        if (extent >= 0 && e != extent) {
          detail::fail("carto: einsum '", text, "': letter '", c, "' has extents ", extent, " and ",
                       e, " in different operands; the dims that share a letter must be equal");
        }
        extent = e;
      }
    }
    return extent;
  }

 private:
  [[nodiscard]] constexpr DimExtent letter_dim(const Op& op, char c) const {
    for (std::size_t i = 0; i < op.einsum.inputs.size(); ++i) {
      const IndexLetters& ls = op.einsum.inputs[i];
      for (std::size_t d = 0; d < ls.size(); ++d) {
        if (ls[d] == c) return tensor(op.inputs[i]).shape.dims()[d];
      }
    }
    detail::fail("carto: einsum letter '", c, "' is in no input");
  }
  constexpr void check_dim(TensorId x, std::size_t dim, std::string_view what) const {
    if (dim >= tensor(x).shape.rank()) {
      detail::fail("carto: ", what, " along dim ", dim, " of a rank-", tensor(x).shape.rank(),
                   " tensor ", tensor(x).shape, "; pick a dim below ", tensor(x).shape.rank());
    }
  }
  static constexpr void check_probability(double p) {
    if (!(p >= 0.0 && p < 1.0)) {
      detail::fail("carto: a dropout probability must be in [0, 1); got ", p);
    }
  }
  constexpr TensorId unary(OpKind kind, TensorId x) {
    Op op{.kind = kind};
    op.inputs = {x};
    return add_op(op, tensor(x).shape, tensor(x).dtype);
  }
  constexpr TensorId view_op(TensorId x, ViewKind kind, const TensorShape& shape) {
    Op op{.kind = OpKind::view, .view = kind};
    op.inputs = {x};
    const TensorId out = add_op(op, shape, tensor(x).dtype);
    tensors_[out.index()].storage = tensor(x).storage;
    return out;
  }
  constexpr TensorId add_tensor(const TensorShape& shape, DType dtype, TensorKind kind,
                                OpId producer) {
    const TensorId id{static_cast<std::int32_t>(tensors_.size())};
    tensors_.push_back(TensorInfo{
        .shape = shape, .dtype = dtype, .kind = kind, .producer = producer, .storage = id});
    return id;
  }
  constexpr TensorId add_op(Op op, const TensorShape& out_shape, DType dtype) {
    for (TensorId t : op.inputs) (void)tensor(t);
    const OpId id{static_cast<std::int32_t>(ops_.size())};
    op.output = add_tensor(out_shape, dtype, TensorKind::activation, id);
    op.group = open_group_;
    ops_.push_back(op);
    return op.output;
  }

  std::vector<TensorInfo> tensors_{};
  std::vector<Op> ops_{};
  std::vector<OpGroup> groups_{};
  std::int32_t open_group_ = -1;
  TensorId result_{};
};

}  // namespace carto
