// carto/search/strategy.hpp — every sharding strategy of one op, with its costs, collectives and
// memory.
//
// Design note (DESIGN.md §3-§5). A Strategy is one way to run one op on a mesh: the spec of each
// input, the spec of the output (OpSharding, with its OpVariant), and what follows from them alone:
// per-device FLOPs and bytes (op_cost on the local shapes), the collectives inside the op, the spec
// of the gradient each input receives, the parameter-gradient reductions, and per-device memory.
// Resharding between ops is not part of a strategy; carto/search/evaluate.hpp adds it.
//
// Enumeration, one rule per op kind, in a fixed order (same inputs, same list: the search indexes
// it):
//  - einsum: every assignment of mesh axes to index letters — each axis to one letter or to none,
//    several axes on one letter in every order — as an odometer over the mesh axes (axis 0 most
//    significant; choices: none, then the letters in Einsum::letters() order), then every order of
//    the axes within each letter (permutations in lexicographic mesh-index order, first letter
//    slowest). Operand specs follow from the letters; contracted letters that carry axes make the
//    output Partial over them. Assignments with an uneven split are skipped. With L letters and m
//    axes, all extents divisible, that is Σ_k C(m,k)·L(L+1)…(L+k−1) strategies. Data, column, row,
//    sequence, head and 2-D/3-D parallelism are all instances; none is special-cased.
//  - gelu, dropout: every non-Partial spec (enumerate_specs order); scale and add: every spec,
//    Partial included (they are linear); bias: every non-Partial spec of x, the bias split like x's
//    trailing dims.
//  - softmax: every non-Partial spec with the reduced dim unsplit. layernorm: the same (plain),
//  then
//    every non-Partial spec with the normalized dim split (OpVariant::distributed_statistics: gamma
//    and beta split alike; forward all-reduce of 2 fp32 per row — the partial sums Σx, Σx² — and
//    backward all-reduce of 2 fp32 per row — Σ dy·γ and Σ dy·γ·x̂ — over each splitting axis).
//  - fused attention: every non-Partial spec of q with head_dim unsplit and k, v, output alike;
//  with
//    the query sequence split (OpVariant::gathered_kv), K and V are all-gathered over its axes in
//    forward and in backward, and dK, dV reduce-scattered in backward.
//  - gather (embedding): every non-Partial spec of the ids times every non-Partial spec of the
//  table
//    that shares no axis with it (ids outer); the output takes the ids' splits and the table's
//    hidden split and is Partial over the axes that split the vocabulary (vocab-parallel
//    embedding).
//  - softmax cross-entropy: every non-Partial spec of the logits, targets split like the token
//  dims,
//    the scalar loss Partial over the token axes. A vocab split (vocab-parallel cross-entropy)
//    costs, per splitting axis, a MAX all-reduce of one fp32 per token and a SUM all-reduce of two
//    fp32 per token (the target logit and Σ exp), as Megatron-LM does
//    (megatron/core/tensor_parallel/cross_entropy.py; the two SUMs concatenated in
//    megatron/core/fusions/fused_cross_entropy.py).
//  - rmsnorm: as layernorm (plain with the normalized dim unsplit and gamma replicated, then
//    distributed_statistics with gamma split like the normalized dim), the statistics all-reduce
//    one fp32 per row (Σx² forward, Σ dy·γ·x̂ backward) over each splitting axis.
//  - silu_mul (SwiGLU's silu(gate)·up): every non-Partial spec, gate, up and output alike (add's
//    rule without Partial, as silu is nonlinear). rotary: every non-Partial spec with the last
//    (head) dim unsplit, output alike.
//  - grouped-query fused attention (q (B, n, g, S, d)): q's specs as above, k and v split like q
//    without the group dim; a split of g leaves k, v replicated over its axes and makes their
//    gradients Partial over them.
//  - views: every input spec (Partial included) with the output spec the view implies; input specs
//    the view cannot carry without moving data are skipped. split_heads maps a split of the fused
//    (parts·H) dim to a heads split (it needs the heads divisible by the split: the projection's
//    columns are ordered per head group, as Megatron-LM lays out its fused QKV weight); merge_heads
//    maps a heads split to the hidden dim (head_dim must be unsplit; of a grouped (B, n, g, S, d)
//    tensor the group dim too); split_groups maps a split of (n·g·d) to the key/value heads n (n
//    divisible by the split); transpose swaps the last two.
//
// Gradient specs (DESIGN.md §3: backward follows the einsum rule). The gradient an input receives
// is split like the input and Partial over the mesh axes that split letters the input does not
// carry: X of a column-parallel matmul (o split over tp) gets a Partial(tp) gradient (Megatron's
// backward all-reduce); W of a batch-split matmul (b over dp) gets Partial(dp) (the data-parallel
// gradient all-reduce). Bias and layernorm gamma/beta are Partial over the axes that split x's
// other dims; the table of a gather over the ids' axes. Elementwise ops, reductions, attention and
// views pass the input's spec without its Partial axes (the gradient of each summand is the whole
// gradient). An op needs its output's gradient in the output spec without Partial axes
// (output_gradient_spec). Parameter gradients are reduced to the parameter's spec by the strategy
// itself (gradient_sync: an all-reduce of the local gradient over each Partial axis).
//
// Collectives are listed one mesh axis per entry (a split over (a, b) runs as one collective per
// axis: all-gathers innermost axis first, reduce-scatters outermost first); `bytes` is the
// per-device S of nccl-tests' convention (cost/collectives.hpp): the all-reduce buffer, the
// gathered all-gather output, the full reduce-scatter input.
//
// Memory per device (DESIGN.md §5): parameters and gradients at the parameters' dtype, optimizer
// states optimizer_bytes_per_param(precision) per local parameter element (no ZeRO here), saved
// activations (OpCost::saved_bytes: the op's own figure, not deduplicated across ops), temporaries
// (the backward workspace, gathered K and V included, plus the input-gradient buffers the backward
// writes). A parameter used by two ops (a tied embedding) is counted by both strategies.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "carto/cost/collectives.hpp"
#include "carto/cost/hardware.hpp"
#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/profile/op_cost.hpp"
#include "carto/profile/options.hpp"
#include "carto/spec/enumerate.hpp"
#include "carto/spec/layout.hpp"
#include "carto/spec/mesh.hpp"
#include "carto/spec/sharding.hpp"

namespace carto {

enum class StrategyKind : std::uint8_t {
  einsum,
  elementwise,
  reduction,
  distributed_layernorm,
  attention,
  sequence_attention,
  gather,
  cross_entropy,
  view,
};

constexpr std::string_view to_string_view(StrategyKind k) {
  switch (k) {
    case StrategyKind::einsum: return "einsum";
    case StrategyKind::elementwise: return "elementwise";
    case StrategyKind::reduction: return "reduction";
    case StrategyKind::distributed_layernorm: return "distributed_layernorm";
    case StrategyKind::attention: return "attention";
    case StrategyKind::sequence_attention: return "sequence_attention";
    case StrategyKind::gather: return "gather";
    case StrategyKind::cross_entropy: return "cross_entropy";
    case StrategyKind::view: return "view";
  }
  return "?";
}

// One collective on one mesh axis; bytes = S per device in nccl-tests' convention.
struct CollectiveCall {
  Collective kind = Collective::all_reduce;
  AxisName axis{};
  std::int64_t bytes = 0;
  std::int32_t input = -1;  // gradient_sync: the op input whose gradient it reduces; else -1
  friend bool operator==(const CollectiveCall&, const CollectiveCall&) = default;
};

inline constexpr std::size_t kMaxOpCollectives = 12;
using CollectiveList = StaticVector<CollectiveCall, kMaxOpCollectives>;

struct StrategyMemory {
  std::int64_t parameters = 0;
  std::int64_t gradients = 0;
  std::int64_t optimizer = 0;
  std::int64_t activations = 0;  // saved for backward (this op's own figure)
  std::int64_t temporaries = 0;  // workspace inside the op
  [[nodiscard]] constexpr std::int64_t total() const {
    return parameters + gradients + optimizer + activations + temporaries;
  }
  friend constexpr bool operator==(const StrategyMemory&, const StrategyMemory&) = default;
};

struct Strategy {
  OpId op{};
  StrategyKind kind = StrategyKind::elementwise;
  OpSharding sharding{};                      // input specs, output spec, variant
  StaticVector<ShardingSpec, 3> gradients{};  // spec of the gradient each input receives
  OpCost cost{};                              // per device (op_cost under `sharding`)
  DType dtype = DType::bf16;                  // what it computes in (its first non-index input's)
  std::int64_t bytes_backward = 0;  // per device: dY + saved state read, input grads written
  CollectiveList forward{};         // inside the op
  CollectiveList backward{};        // inside the op
  CollectiveList gradient_sync{};   // parameter gradients: Partial -> the parameter's spec
  StrategyMemory memory{};

  [[nodiscard]] std::int64_t comm_bytes() const {
    std::int64_t n = 0;
    for (const CollectiveList* list : {&forward, &backward, &gradient_sync}) {
      for (const CollectiveCall& c : *list) n += c.bytes;
    }
    return n;
  }
};

struct StrategyOptions {
  Precision precision = Precision::mixed_bf16;  // optimizer-state bytes per parameter
  LayerNormStats layernorm_stats = LayerNormStats::counted;
  DropoutMasks dropout_masks = DropoutMasks::stored;
  // The dtype parameter gradients are all-reduced in (gradient_sync). nullopt: the compute dtype
  // (bf16 under mixed_bf16, as Megatron-LM and DeepSpeed do by default); fp32 under mixed_bf16
  // widens the bf16 gradients for the reduction and rounds the sum once (twice the bytes on the
  // wire). See gradient_reduction_dtype.
  std::optional<DType> gradient_reduction{};
};

// The dtype gradients are reduced in under `precision`: the compute dtype unless `requested`
// names fp32; bf16 under fp32 training, or any other dtype, is refused.
inline DType gradient_reduction_dtype(Precision precision, std::optional<DType> requested) {
  const DType compute = compute_dtype(precision);
  if (!requested) return compute;
  if (*requested == compute || *requested == DType::fp32) return *requested;
  detail::fail("carto: gradients of ", to_string_view(precision), " training are reduced in fp32",
               precision == Precision::fp32 ? "" : " or bf16", ", not ",
               to_string_view(*requested));
}

// "[S(dp),R,R; R,S(tp)] -> S(dp),R,S(tp)", with the variant when it is not plain.
inline std::string to_string(const Strategy& s) {
  std::string text = "[";
  for (std::size_t i = 0; i < s.sharding.inputs.size(); ++i) {
    text += detail::concat(i > 0 ? "; " : "", s.sharding.inputs[i]);
  }
  text += detail::concat("] -> ", s.sharding.output);
  if (s.sharding.variant != OpVariant::plain)
    text += detail::concat(" (", to_string_view(s.sharding.variant), ")");
  return text;
}

// Bytes of the op's parameters per device in the specs the op reads them: what ZeRO stage 3 gathers
// before the op runs (and again before its backward), live while it runs.
inline std::int64_t parameter_bytes(const Graph& g, const Strategy& s, const DeviceMesh& mesh) {
  const Op& op = g.op(s.op);
  std::int64_t bytes = 0;
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    const TensorInfo& t = g.tensor(op.inputs[i]);
    if (t.kind == TensorKind::parameter)
      bytes += local_shape(t.shape, s.sharding.inputs[i], mesh).numel() * element_bytes(t);
  }
  return bytes;
}

// Bytes live while the op runs that its ZeRO stage adds to its temporaries: stage 3 gathers its
// parameters (parameter_bytes); at stages 2-3 a parameter gradient is reduced during the op's
// backward, and when the reduction's dtype is wider than the gradient's (fp32 under mixed bf16)
// the gradient is widened into a temporary of the reduced bytes for it (one per reduced input).
inline std::int64_t zero_transient_bytes(const Graph& g, const Strategy& s, const DeviceMesh& mesh,
                                         int zero_stage, const StrategyOptions& options) {
  std::int64_t bytes = zero_stage == 3 ? parameter_bytes(g, s, mesh) : 0;
  if (zero_stage >= 2 && gradient_reduction_dtype(options.precision, options.gradient_reduction) !=
                             compute_dtype(options.precision)) {
    std::int32_t last = -1;
    for (const CollectiveCall& c : s.gradient_sync) {
      if (c.input != last) bytes += c.bytes;
      last = c.input;
    }
  }
  return bytes;
}

// The spec without its Partial axes.
inline ShardingSpec without_partial(const ShardingSpec& s) {
  ShardingSpec out = s;
  out.clear_partial();
  return out;
}

// The spec in which an op needs its output's gradient: the output spec without Partial axes (the
// gradient of every summand is the whole gradient).
inline ShardingSpec output_gradient_spec(const Strategy& s) {
  return without_partial(s.sharding.output);
}

namespace detail {

inline bool has_axis(const AxisList& list, const AxisName& a) {
  return std::find(list.begin(), list.end(), a) != list.end();
}

// Adds every axis of `axes` that splits some dim of `spec` to the Partial set of `grad`.
inline void add_partial_over(ShardingSpec& grad, const AxisList& axes) {
  for (const AxisName& a : axes) {
    if (!has_axis(grad.partial(), a)) grad.add_partial(a);
  }
}

inline AxisList axes_of_dims(const ShardingSpec& s, std::size_t first, std::size_t end) {
  AxisList out;
  for (std::size_t d = first; d < end; ++d) {
    for (const AxisName& a : s.dims()[d]) out.push_back(a);
  }
  return out;
}

// Gradient specs of the inputs (see the design note).
inline StaticVector<ShardingSpec, 3> gradient_specs(const Graph& g, const Op& op,
                                                    const OpSharding& s) {
  StaticVector<ShardingSpec, 3> grads;
  for (const ShardingSpec& in : s.inputs) grads.push_back(without_partial(in));
  switch (op.kind) {
    case OpKind::einsum:
      for (std::size_t i = 0; i < op.einsum.inputs.size(); ++i) {
        const IndexLetters& mine = op.einsum.inputs[i];
        for (std::size_t j = 0; j < op.einsum.inputs.size(); ++j) {
          const IndexLetters& other = op.einsum.inputs[j];
          for (std::size_t d = 0; d < other.size(); ++d) {
            if (!contains(mine, other[d])) add_partial_over(grads[i], s.inputs[j].dims()[d]);
          }
        }
      }
      break;
    case OpKind::bias: {
      const std::size_t lead = s.inputs[0].rank() - s.inputs[1].rank();
      add_partial_over(grads[1], axes_of_dims(s.inputs[0], 0, lead));
      break;
    }
    case OpKind::rmsnorm:
    case OpKind::layernorm: {
      AxisList rows;
      for (std::size_t d = 0; d < s.inputs[0].rank(); ++d) {
        if (d == op.dim) continue;
        for (const AxisName& a : s.inputs[0].dims()[d]) rows.push_back(a);
      }
      add_partial_over(grads[1], rows);
      if (op.kind == OpKind::layernorm) add_partial_over(grads[2], rows);
      break;
    }
    case OpKind::fused_attention:
      if (s.inputs[0].rank() == 5) {  // k, v serve every split of the group dim
        add_partial_over(grads[1], s.inputs[0].dims()[2]);
        add_partial_over(grads[2], s.inputs[0].dims()[2]);
      }
      break;
    case OpKind::gather:
      add_partial_over(grads[0], axes_of_dims(s.inputs[1], 0, s.inputs[1].rank()));
      break;
    default: break;
  }
  (void)g;
  return grads;
}

// Per-axis all-gathers of a buffer of `local` bytes split over `axes` (outer first): innermost
// first, each S the gathered size so far.
inline void push_gathers(CollectiveList& out, const AxisList& axes, std::int64_t local,
                         const DeviceMesh& mesh) {
  std::int64_t size = local;
  for (std::size_t k = axes.size(); k-- > 0;) {
    size *= mesh.size_of(axes[k]);
    out.push_back({.kind = Collective::all_gather, .axis = axes[k], .bytes = size});
  }
}
// The transpose: reduce-scatters outermost first, each S the full input of that stage.
inline void push_reduce_scatters(CollectiveList& out, const AxisList& axes, std::int64_t local,
                                 const DeviceMesh& mesh) {
  std::int64_t size = local * split_factor(axes, mesh);
  for (std::size_t k = 0; k < axes.size(); ++k) {
    out.push_back({.kind = Collective::reduce_scatter, .axis = axes[k], .bytes = size});
    size /= mesh.size_of(axes[k]);
  }
}

inline StrategyKind kind_of(const Op& op, OpVariant variant) {
  switch (op.kind) {
    case OpKind::einsum: return StrategyKind::einsum;
    case OpKind::gelu:
    case OpKind::dropout:
    case OpKind::scale:
    case OpKind::add:
    case OpKind::bias:
    case OpKind::silu_mul:
    case OpKind::rotary: return StrategyKind::elementwise;
    case OpKind::softmax: return StrategyKind::reduction;
    case OpKind::rmsnorm:
    case OpKind::layernorm:
      return variant == OpVariant::distributed_statistics ? StrategyKind::distributed_layernorm
                                                          : StrategyKind::reduction;
    case OpKind::fused_attention:
      return variant == OpVariant::gathered_kv ? StrategyKind::sequence_attention
                                               : StrategyKind::attention;
    case OpKind::gather: return StrategyKind::gather;
    case OpKind::softmax_cross_entropy: return StrategyKind::cross_entropy;
    case OpKind::view: return StrategyKind::view;
  }
  return StrategyKind::elementwise;
}

}  // namespace detail

// The strategy of op `o` under `sharding`: checks it (op_cost's rules; a violation throws naming
// the op and the specs) and derives everything a Strategy states.
inline Strategy make_strategy(const Graph& g, OpId o, const OpSharding& sharding,
                              const DeviceMesh& mesh, const StrategyOptions& options = {}) {
  const Op& op = g.op(o);
  Strategy st{.op = o, .kind = detail::kind_of(op, sharding.variant), .sharding = sharding};
  // The dtype it computes in: the first input's (the logits of cross-entropy, not its fp32 loss).
  st.dtype = g.tensor(op.inputs[0]).dtype;
  st.cost = op_cost(g, o, sharding, mesh, options.layernorm_stats, options.dropout_masks);
  st.gradients = detail::gradient_specs(g, op, sharding);

  auto local_bytes = [&](TensorId t, const ShardingSpec& spec) {
    return local_shape(g.tensor(t).shape, spec, mesh).numel() * element_bytes(g.tensor(t));
  };
  switch (op.kind) {
    case OpKind::rmsnorm:
    case OpKind::layernorm:
      if (sharding.variant == OpVariant::distributed_statistics) {
        const TensorShape local =
            local_shape(g.tensor(op.inputs[0]).shape, sharding.inputs[0], mesh);
        const std::int64_t per_row = op.kind == OpKind::layernorm ? 2 : 1;  // fp32 sums per row
        const std::int64_t stats = local.numel() / local.dims()[op.dim].extent * per_row * 4;
        for (const AxisName& a : sharding.inputs[0].dims()[op.dim]) {
          st.forward.push_back({.kind = Collective::all_reduce, .axis = a, .bytes = stats});
          st.backward.push_back({.kind = Collective::all_reduce, .axis = a, .bytes = stats});
        }
      }
      break;
    case OpKind::fused_attention:
      if (sharding.variant == OpVariant::gathered_kv) {
        const AxisList& axes = sharding.inputs[0].dims()[sharding.inputs[0].rank() - 2];
        for (std::size_t i = 1; i < 3; ++i) {
          const std::int64_t local = local_bytes(op.inputs[i], sharding.inputs[i]);
          detail::push_gathers(st.forward, axes, local, mesh);
          detail::push_gathers(st.backward, axes, local,
                               mesh);  // K, V again for the backward kernel
        }
        for (std::size_t i = 1; i < 3; ++i) {
          detail::push_reduce_scatters(st.backward, axes,
                                       local_bytes(op.inputs[i], sharding.inputs[i]), mesh);
        }
      }
      break;
    case OpKind::softmax_cross_entropy: {
      const ShardingSpec& logits = sharding.inputs[0];
      const TensorShape local = local_shape(g.tensor(op.inputs[0]).shape, logits, mesh);
      const std::int64_t tokens = local.numel() / local.dims()[local.rank() - 1].extent;
      for (const AxisName& a : logits.dims()[logits.rank() - 1]) {
        st.forward.push_back({.kind = Collective::all_reduce, .axis = a, .bytes = tokens * 4});
        st.forward.push_back({.kind = Collective::all_reduce, .axis = a, .bytes = tokens * 8});
      }
      break;
    }
    default: break;
  }

  // Parameter gradients to the parameter's spec; memory by category; backward bytes.
  st.bytes_backward = st.cost.output_bytes + st.cost.saved_bytes;
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    const TensorInfo& t = g.tensor(op.inputs[i]);
    if (t.kind == TensorKind::index) continue;
    const std::int64_t bytes = local_bytes(op.inputs[i], sharding.inputs[i]);
    st.bytes_backward += bytes;  // its gradient, written
    if (t.kind != TensorKind::parameter) continue;
    st.memory.parameters += bytes;
    st.memory.gradients += bytes;
    st.memory.optimizer += bytes / element_bytes(t) * optimizer_bytes_per_param(options.precision);
    const std::int64_t sync_bytes =
        bytes / element_bytes(t) *
        size_bytes(gradient_reduction_dtype(options.precision, options.gradient_reduction));
    for (const AxisName& a : st.gradients[i].partial()) {
      if (!detail::has_axis(sharding.inputs[i].partial(), a)) {
        st.gradient_sync.push_back({.kind = Collective::all_reduce,
                                    .axis = a,
                                    .bytes = sync_bytes,
                                    .input = static_cast<std::int32_t>(i)});
      }
    }
  }
  if (op.kind == OpKind::view) st.bytes_backward = 0;  // a view's backward renames the gradient
  st.memory.activations = st.cost.saved_bytes;
  // Excursion: in backward, the op's own workspace plus the gradient buffers its backward writes
  // (one per non-index input, in the input's gradient spec), live until the gradient is handed
  // on; in forward, a Partial output, which no op saves (a consumer reads it resolved), lives only
  // until that reshard. The schedule model takes the larger as the op's transient memory.
  std::int64_t backward_excursion = st.cost.temp_bytes;
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    const TensorInfo& in = g.tensor(op.inputs[i]);
    if (in.kind == TensorKind::index || op.kind == OpKind::view) continue;
    backward_excursion +=
        local_shape(in.shape, without_partial(st.gradients[i]), mesh).numel() * element_bytes(in);
  }
  const std::int64_t forward_excursion =
      sharding.output.is_partial() && op.kind != OpKind::view ? st.cost.output_bytes : 0;
  st.memory.temporaries = std::max(backward_excursion, forward_excursion);
  return st;
}

// ---- enumeration
// ---------------------------------------------------------------------------------

namespace detail {

// Every assignment of mesh axes to `letters` (see the design note), as per-letter axis lists.
// `extent(i)` is letter i's extent; uneven splits are skipped.
template <class Extent, class Visit>
void for_each_letter_assignment(std::size_t num_letters, const DeviceMesh& mesh, Extent&& extent,
                                Visit&& visit) {
  const std::size_t m = mesh.num_axes();
  std::array<std::size_t, kMaxMeshAxes> choice{};  // 0 = none, 1 + l = letter l
  for (;;) {
    std::vector<StaticVector<std::size_t, kMaxMeshAxes>> per_letter(num_letters);
    for (std::size_t a = 0; a < m; ++a) {
      if (choice[a] > 0) per_letter[choice[a] - 1].push_back(a);
    }
    bool even = true;
    for (std::size_t l = 0; l < num_letters && even; ++l) {
      std::int64_t f = 1;
      for (std::size_t a : per_letter[l]) f *= mesh.axis(a).size;
      even = extent(l) % f == 0;
    }
    if (even) {
      for (;;) {
        std::vector<AxisList> axes(num_letters);
        for (std::size_t l = 0; l < num_letters; ++l) {
          for (std::size_t a : per_letter[l]) axes[l].push_back(mesh.axis(a).name);
        }
        visit(axes);
        std::size_t l = num_letters;
        bool advanced = false;
        while (l-- > 0) {
          if (std::next_permutation(per_letter[l].begin(), per_letter[l].end())) {
            advanced = true;
            break;
          }
        }
        if (!advanced) break;
      }
    }
    std::size_t a = m;
    bool advanced = false;
    while (a-- > 0) {
      if (++choice[a] < num_letters + 1) {
        advanced = true;
        break;
      }
      choice[a] = 0;
    }
    if (!advanced) break;
  }
}

inline bool shares_axis(const ShardingSpec& a, const ShardingSpec& b) {
  for (const AxisList& d : a.dims()) {
    for (const AxisName& x : d) {
      if (b.uses(x)) return true;
    }
  }
  for (const AxisName& x : a.partial()) {
    if (b.uses(x)) return true;
  }
  return false;
}

// The output spec a view implies for an input spec, or nothing when the view would move data.
inline std::optional<ShardingSpec> view_output_spec(const Graph& g, const Op& op,
                                                    const ShardingSpec& in,
                                                    const DeviceMesh& mesh) {
  const TensorShape& out_shape = g.tensor(op.output).shape;
  ShardingSpec out;
  switch (op.view) {
    case ViewKind::split_heads: {  // (B, S, F) -> (B, heads, S, d)
      const std::int64_t heads = out_shape.dims()[1].extent;
      if (heads % split_factor(in.dims()[2], mesh) != 0) return std::nullopt;
      out.add_dim(in.dims()[0]).add_dim(in.dims()[2]).add_dim(in.dims()[1]).add_dim({});
      break;
    }
    case ViewKind::merge_heads:  // (B, heads, S, d) -> (B, S, heads·d); or from (B, n, g, S, d)
      if (in.rank() == 5) {
        if (!in.dims()[2].empty() || !in.dims()[4].empty()) return std::nullopt;
        out.add_dim(in.dims()[0]).add_dim(in.dims()[3]).add_dim(in.dims()[1]);
        break;
      }
      if (!in.dims()[3].empty()) return std::nullopt;
      out.add_dim(in.dims()[0]).add_dim(in.dims()[2]).add_dim(in.dims()[1]);
      break;
    case ViewKind::split_groups: {  // (B, S, n·g·d) -> (B, n, g, S, d)
      const std::int64_t n = out_shape.dims()[1].extent;
      if (n % split_factor(in.dims()[2], mesh) != 0) return std::nullopt;
      out.add_dim(in.dims()[0]).add_dim(in.dims()[2]).add_dim({}).add_dim(in.dims()[1]).add_dim({});
      break;
    }
    case ViewKind::transpose: {
      const std::size_t r = in.rank();
      for (std::size_t d = 0; d + 2 < r; ++d) out.add_dim(in.dims()[d]);
      out.add_dim(in.dims()[r - 1]).add_dim(in.dims()[r - 2]);
      break;
    }
  }
  for (const AxisName& a : in.partial()) out.add_partial(a);
  if (!validate(out_shape, out, mesh).ok()) return std::nullopt;
  return out;
}

}  // namespace detail

// Every strategy of op `o` on `mesh`, in the order of the design note.
inline std::vector<Strategy> enumerate_strategies(const Graph& g, OpId o, const DeviceMesh& mesh,
                                                  const StrategyOptions& options = {}) {
  const Op& op = g.op(o);
  std::vector<Strategy> out;
  auto add = [&](const OpSharding& s) { out.push_back(make_strategy(g, o, s, mesh, options)); };
  auto shape = [&](std::size_t i) -> const TensorShape& { return g.tensor(op.inputs[i]).shape; };
  const std::vector<ShardingSpec> plain =
      op.kind == OpKind::einsum ? std::vector<ShardingSpec>{} : enumerate_specs(shape(0), mesh);

  switch (op.kind) {
    case OpKind::einsum: {
      const LetterSet letters = op.einsum.letters();
      detail::for_each_letter_assignment(
          letters.size(), mesh, [&](std::size_t l) { return g.letter_extent(op, letters[l]); },
          [&](const std::vector<AxisList>& axes) {
            OpSharding s{};
            for (std::size_t i = 0; i < op.einsum.inputs.size(); ++i) {
              ShardingSpec spec;
              for (char c : op.einsum.inputs[i]) {
                const auto* it = std::find(letters.begin(), letters.end(), c);
                spec.add_dim(axes[static_cast<std::size_t>(it - letters.begin())]);
              }
              s.inputs.push_back(spec);
            }
            for (char c : op.einsum.output) {
              const auto* it = std::find(letters.begin(), letters.end(), c);
              s.output.add_dim(axes[static_cast<std::size_t>(it - letters.begin())]);
            }
            for (std::size_t l = 0; l < letters.size(); ++l) {
              if (!op.einsum.contracted(letters[l])) continue;
              for (const AxisName& a : axes[l]) s.output.add_partial(a);
            }
            add(s);
          });
      break;
    }
    case OpKind::gelu:
    case OpKind::dropout:
      for (const ShardingSpec& x : plain) add({.inputs = {x}, .output = x});
      break;
    case OpKind::silu_mul:
      for (const ShardingSpec& x : plain) add({.inputs = {x, x}, .output = x});
      break;
    case OpKind::rotary:
      for (const ShardingSpec& x : plain) {
        if (x.dims()[x.rank() - 1].empty()) add({.inputs = {x}, .output = x});
      }
      break;
    case OpKind::scale:
    case OpKind::add:
      for (const ShardingSpec& x :
           enumerate_specs(shape(0), mesh, {.partial = PartialSpecs::include})) {
        OpSharding s{.output = x};
        for (std::size_t i = 0; i < op.inputs.size(); ++i) s.inputs.push_back(x);
        add(s);
      }
      break;
    case OpKind::bias:
      for (const ShardingSpec& x : plain) {
        ShardingSpec b;
        for (std::size_t d = x.rank() - shape(1).rank(); d < x.rank(); ++d) b.add_dim(x.dims()[d]);
        add({.inputs = {x, b}, .output = x});
      }
      break;
    case OpKind::softmax:
    case OpKind::rmsnorm:
    case OpKind::layernorm: {
      for (const ShardingSpec& x : plain) {
        if (!x.dims()[op.dim].empty()) continue;
        OpSharding s{.inputs = {x}, .output = x};
        for (std::size_t i = 1; i < op.inputs.size(); ++i)
          s.inputs.push_back(ShardingSpec::replicated(1));
        add(s);
      }
      if (op.kind != OpKind::softmax) {
        for (const ShardingSpec& x : plain) {
          if (x.dims()[op.dim].empty()) continue;
          ShardingSpec p;
          p.add_dim(x.dims()[op.dim]);
          OpSharding s{.inputs = {x}, .output = x, .variant = OpVariant::distributed_statistics};
          for (std::size_t i = 1; i < op.inputs.size(); ++i) s.inputs.push_back(p);
          add(s);
        }
      }
      break;
    }
    case OpKind::fused_attention:
      for (const ShardingSpec& x : plain) {
        const std::size_t r = x.rank();
        if (!x.dims()[r - 1].empty()) continue;
        const ShardingSpec kv = detail::attention_kv_spec(x);
        add({.inputs = {x, kv, kv},
             .output = x,
             .variant = x.dims()[r - 2].empty() ? OpVariant::plain : OpVariant::gathered_kv});
      }
      break;
    case OpKind::gather:
      for (const ShardingSpec& ids : enumerate_specs(shape(1), mesh)) {
        for (const ShardingSpec& table : plain) {
          if (detail::shares_axis(ids, table)) continue;
          ShardingSpec y;
          for (const AxisList& d : ids.dims()) y.add_dim(d);
          y.add_dim(table.dims()[1]);
          for (const AxisName& a : table.dims()[0]) y.add_partial(a);
          add({.inputs = {table, ids}, .output = y});
        }
      }
      break;
    case OpKind::softmax_cross_entropy:
      for (const ShardingSpec& logits : plain) {
        ShardingSpec targets;
        ShardingSpec loss;
        for (std::size_t d = 0; d + 1 < logits.rank(); ++d) {
          targets.add_dim(logits.dims()[d]);
          for (const AxisName& a : logits.dims()[d]) loss.add_partial(a);
        }
        add({.inputs = {logits, targets}, .output = loss});
      }
      break;
    case OpKind::view:
      for (const ShardingSpec& x :
           enumerate_specs(shape(0), mesh, {.partial = PartialSpecs::include})) {
        if (auto y = detail::view_output_spec(g, op, x, mesh)) add({.inputs = {x}, .output = *y});
      }
      break;
  }
  return out;
}

namespace detail {
// Everything enumerate_strategies and make_strategy read of op `o`: its kind and attributes, its
// einsum, and for every operand and the output the shape, dtype, kind and (for inputs) which
// earlier input it repeats. Two ops with one signature have the same strategies (identical blocks).
inline std::string op_signature(const Graph& g, OpId o) {
  const Op& op = g.op(o);
  std::string key = concat(static_cast<int>(op.kind), '|', op.dim, '|',
                           std::bit_cast<std::uint64_t>(op.probability), '|',
                           std::bit_cast<std::uint64_t>(op.factor), '|',
                           static_cast<int>(op.masking), '|', static_cast<int>(op.view), '|');
  for (const IndexLetters& in : op.einsum.inputs) key += std::string(in.begin(), in.end()) + ',';
  key += std::string(op.einsum.output.begin(), op.einsum.output.end()) + '|';
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    const TensorInfo& t = g.tensor(op.inputs[i]);
    std::size_t first = i;
    for (std::size_t j = 0; j < i; ++j) {
      if (op.inputs[j] == op.inputs[i]) {
        first = j;
        break;
      }
    }
    key += concat(t.shape, ':', t.dtype, ':', static_cast<int>(t.kind), ':', first, '|');
  }
  const TensorInfo& out = g.tensor(op.output);
  key += concat(out.shape, ':', out.dtype);
  return key;
}
}  // namespace detail

// enumerate_strategies once per op signature (detail::op_signature): the strategies of the ops of
// identical blocks are enumerated once, for one mesh and one set of options.
class StrategyCache {
 public:
  StrategyCache(const DeviceMesh& mesh, const StrategyOptions& options)
      : mesh_(mesh), options_(options) {}
  // Op o's strategies; their Strategy::op names the first op of o's signature met.
  const std::vector<Strategy>& of(const Graph& g, OpId o) {
    auto [it, added] = cache_.try_emplace(detail::op_signature(g, o));
    if (added) it->second = enumerate_strategies(g, o, mesh_, options_);
    return it->second;
  }
  // Op o's strategy `index` (in enumerate_strategies order), for op o.
  Strategy at(const Graph& g, OpId o, std::size_t index) {
    const std::vector<Strategy>& all = of(g, o);
    if (index >= all.size()) {
      detail::fail("carto: strategy index ", index, " of op ", o.value, " is out of range (",
                   all.size(), " strategies)");
    }
    Strategy s = all[index];
    s.op = o;
    return s;
  }

 private:
  DeviceMesh mesh_;
  StrategyOptions options_;
  std::map<std::string, std::vector<Strategy>> cache_{};
};

// ---- time
// ----------------------------------------------------------------------------------------

struct StrategyTime {
  double compute_forward_s = 0;
  double compute_backward_s = 0;
  double comm_forward_s = 0;   // collectives inside the op
  double comm_backward_s = 0;  // collectives inside the op + parameter-gradient reductions
  [[nodiscard]] double forward_s() const { return compute_forward_s + comm_forward_s; }
  [[nodiscard]] double backward_s() const { return compute_backward_s + comm_backward_s; }
  [[nodiscard]] double total_s() const { return forward_s() + backward_s(); }
};

inline double collectives_time(const CollectiveList& calls, const DeviceMesh& mesh,
                               const HardwareProfile& hw) {
  double t = 0;
  for (const CollectiveCall& c : calls) t += collective_time(c.kind, mesh, c.axis, c.bytes, hw);
  return t;
}

// Roofline compute (cost/hardware.hpp) plus α-β collectives (cost/collectives.hpp), in seconds,
// forward and backward apart; no overlap of compute and communication is assumed.
inline StrategyTime strategy_time(const Strategy& s, const DeviceMesh& mesh,
                                  const HardwareProfile& hw) {
  const DType dt = s.dtype;
  StrategyTime t;
  t.compute_forward_s = compute_time({.flops = s.cost.flops_forward,
                                      .bytes = s.cost.bytes_read + s.cost.bytes_written,
                                      .dtype = dt},
                                     hw);
  t.compute_backward_s =
      compute_time({.flops = s.cost.flops_backward(), .bytes = s.bytes_backward, .dtype = dt}, hw);
  t.comm_forward_s = collectives_time(s.forward, mesh, hw);
  t.comm_backward_s =
      collectives_time(s.backward, mesh, hw) + collectives_time(s.gradient_sync, mesh, hw);
  return t;
}

}  // namespace carto
