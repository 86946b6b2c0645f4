// carto/search/strategy_core.hpp — what a Strategy is and how one is priced: the types, the
// gradient specs and collectives of one (op, sharding) choice (make_strategy), and its time.
//
// Design note: the rules are in strategy.hpp's note, which includes this header and adds the
// enumeration of every strategy of an op and the cache shared by identical ops; a file that only
// builds or prices given strategies can include this one alone.
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
  // Its parts, for the schedule model (search/gradient_memory.hpp counts the gradient buffers
  // from the graph around the op): the backward's own workspace, and the forward's transient
  // Partial output. Not part of total().
  std::int64_t workspace = 0;
  std::int64_t forward_transient = 0;
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
  // An einsum's GEMM calls per pass: the product of the local extents of its batch letters (those
  // of both operands and the output), one call each, as the CPU backend runs them; its backward's
  // two products have the same batch letters. 0: not an einsum (loop kernels).
  std::int64_t gemm_calls = 0;

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
  DropoutMasks dropout_masks = DropoutMasks::regenerated;  // as carto's runtime (options.hpp)
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
  if (op.kind == OpKind::einsum) {
    const TensorShape out = local_shape(g.tensor(op.output).shape, sharding.output, mesh);
    auto has = [](const IndexLetters& l, char c) {
      return std::find(l.begin(), l.end(), c) != l.end();
    };
    st.gemm_calls = 1;
    for (std::size_t d = 0; d < op.einsum.output.size(); ++d) {
      const char c = op.einsum.output[d];
      if (has(op.einsum.inputs[0], c) && has(op.einsum.inputs[1], c))
        st.gemm_calls *= out.dims()[d].extent;
    }
  }

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
  st.memory.workspace = st.cost.temp_bytes;
  st.memory.forward_transient = forward_excursion;
  return st;
}

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
// forward and backward apart; no overlap of compute and communication is assumed. A pass that does
// any work (FLOPs or bytes) also costs the profile's fixed op_overhead.
inline StrategyTime strategy_time(const Strategy& s, const DeviceMesh& mesh,
                                  const HardwareProfile& hw) {
  const DType dt = s.dtype;
  StrategyTime t;
  const ComputeWork forward{.flops = s.cost.flops_forward,
                            .bytes = s.cost.bytes_read + s.cost.bytes_written,
                            .dtype = dt,
                            .gemm_calls = s.gemm_calls};
  const ComputeWork backward{.flops = s.cost.flops_backward(),
                             .bytes = s.bytes_backward,
                             .dtype = dt,
                             .gemm_calls = s.gemm_calls};
  auto overhead = [&](const ComputeWork& w) {
    return w.flops > 0 || w.bytes > 0 ? hw.op_overhead : 0.0;
  };
  t.compute_forward_s = compute_time(forward, hw) + overhead(forward);
  t.compute_backward_s = compute_time(backward, hw) + overhead(backward);
  t.comm_forward_s = collectives_time(s.forward, mesh, hw);
  t.comm_backward_s =
      collectives_time(s.backward, mesh, hw) + collectives_time(s.gradient_sync, mesh, hw);
  return t;
}

}  // namespace carto
