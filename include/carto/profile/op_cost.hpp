// carto/profile/op_cost.hpp — FLOPs and bytes of one op, unsharded or under a sharding strategy.
//
// Design note (DESIGN.md §3): every number is a function of the op's local shapes, so the
// per-device cost of a sharded op is the same formula on the shapes each device holds (global
// extents divided by the split factors, exactly: splits are even). An einsum letter is split over
// the axes of the operand dims that carry it; they must agree, and a contracted letter that carries
// axes makes the output Partial over them. Rules per op (violations call detail::fail naming the
// op, the specs and what would be valid): einsum inputs are not Partial; gelu, dropout, bias,
// softmax, layernorm, gather ids and fused attention need non-Partial inputs (they are nonlinear or
// broadcast); add and scale are linear and pass Partial through; softmax keeps its reduced dim
// unsplit; gather over a vocab-split table yields a Partial output (vocab-parallel embedding). Two
// ops have a second, communicating variant, named by OpSharding::variant so that a split is never
// accepted by accident:
//  - layernorm: OpVariant::plain keeps the normalized dim unsplit (gamma, beta replicated);
//    OpVariant::distributed_statistics splits it over axes A with gamma and beta split over A
//    alike, and all-reduces over A the two fp32 partial sums per row (Σx, Σx²) in forward and the
//    two row sums (Σ dy·γ, Σ dy·γ·x̂) in backward; the FLOPs are the local formula on the local
//    shape;
//  - fused attention: OpVariant::plain keeps sequence and head_dim unsplit (batch and heads split);
//    OpVariant::gathered_kv also splits the query sequence over axes A (q, k, v and the output
//    alike): K and V are all-gathered over A inside the op (forward, and again in backward) and dK,
//    dV are reduce-scattered back; FLOPs count local queries against all S keys, and the backward
//    workspace holds the gathered K, V and the full-length dK, dV.
// Llama-family ops: rmsnorm follows layernorm's rules with one parameter (gamma) and its
// distributed_statistics variant all-reduces one fp32 partial sum per row (Σx²) in forward and one
// (Σ dy·γ·x̂) in backward; silu_mul (silu(gate)·up) needs non-Partial inputs (it is nonlinear) of
// one spec, the output's; rotary takes any spec with the last (head) dim unsplit, so that no
// rotation pair is cut, output alike (Partial included: the rotation is linear). Grouped-query
// fused attention (q rank 5: (B, n, g, S, d)) takes k and v split like q without its group dim. The
// collectives themselves are described beside the cost model (carto/search/strategy.hpp).
//
// FLOPs: einsum 2·Π(letters) forward, and the same again for the gradient of each operand (input
// grads for activations, weight grads for parameters): the papers' 2 FLOPs per multiply-add.
// Fused attention: forward 4·B·a·S²·d (QKᵀ and P·V at full causal cost, as Korthikanti et al. 2022
// count), backward 10·B·a·S²·d (recomputed QKᵀ, then dV, dP, dQ, dK). Only these two kinds are
// `matmul` (what Narayanan et al. 2021 Eq. 3 counts). Non-matmul FLOPs are conventions for a
// roofline, per output element: add 1 (backward 0), bias 1 (weight grad 1), scale 1 (1), dropout 2
// (2), gelu 8 (16), softmax 5 (4), layernorm 8 (input grad 12, weight grads 3), softmax
// cross-entropy 5 per logit (2), gather 0 (scatter-add 1 per output element), views 0, rmsnorm 4
// (input grad 8, gamma grad 2), silu_mul 5 (10: silu and its derivative recomputed), rotary 3 (3).
// Fused attention's S and d are q's last-but-one and last dims (rank 4 or 5).
//
// Memory: saved_bytes is what the op keeps for backward: the activation tensors it saves (never
// parameters, which are live anyway) plus private state that is no graph tensor: dropout masks (1
// byte per element), layernorm mean and rstd (fp32, 2 per row; LayerNormStats::ignored drops them),
// rmsnorm rstd (fp32, 1 per row, dropped alike; its backward workspace is 1 fp32 per row), silu_mul
// saves gate and up, rotary saves nothing (its backward is the inverse rotation of dY),
// fused attention's logsumexp (fp32, one per row), and cross-entropy's fp32 softmax of the logits
// (Megatron computes the loss on logits.float()). temp_bytes is workspace inside backward (fp32 row
// sums of softmax: 1 per row, of layernorm: 2 per row).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/profile/options.hpp"
#include "carto/spec/layout.hpp"
#include "carto/spec/mesh.hpp"
#include "carto/spec/sharding.hpp"
#include "carto/util/checked.hpp"

namespace carto {

struct OpCost {
  std::int64_t flops_forward = 0;
  std::int64_t flops_backward_input = 0;   // gradients of activation inputs
  std::int64_t flops_backward_weight = 0;  // gradients of parameters
  bool matmul = false;                     // counted by the papers' matmul-only formulas
  std::int64_t bytes_read = 0;             // forward: every input, parameters included
  std::int64_t bytes_written = 0;          // forward: the output and private saved state
  std::int64_t saved_bytes = 0;            // kept for backward: saved activations + private state
  std::int64_t private_saved_bytes = 0;    // of which no graph tensor (masks, statistics)
  std::int64_t temp_bytes = 0;             // workspace inside the op's backward
  std::int64_t output_bytes = 0;
  std::int64_t params = 0;  // elements of parameter inputs
  [[nodiscard]] constexpr std::int64_t flops_backward() const {
    return checked_add(flops_backward_input, flops_backward_weight, "the backward FLOPs of an op");
  }
  friend constexpr bool operator==(const OpCost&, const OpCost&) = default;
};

// The activations an op saves for backward (graph tensors; parameters are never listed).
constexpr StaticVector<TensorId, 4> saved_tensors(const Graph& g, const Op& op) {
  StaticVector<TensorId, 4> out{};
  auto save = [&](TensorId t) {
    if (g.tensor(t).kind != TensorKind::parameter) out.push_back(t);
  };
  switch (op.kind) {
    case OpKind::einsum: save(op.inputs[0]), save(op.inputs[1]); break;
    case OpKind::gelu: save(op.inputs[0]); break;
    case OpKind::softmax: save(op.output); break;
    case OpKind::layernorm: save(op.inputs[0]); break;
    case OpKind::rmsnorm: save(op.inputs[0]); break;
    case OpKind::silu_mul: save(op.inputs[0]), save(op.inputs[1]); break;
    case OpKind::gather: save(op.inputs[1]); break;
    case OpKind::softmax_cross_entropy: save(op.inputs[1]); break;
    case OpKind::fused_attention:
      save(op.inputs[0]), save(op.inputs[1]), save(op.inputs[2]), save(op.output);
      break;
    case OpKind::dropout:
    case OpKind::scale:
    case OpKind::add:
    case OpKind::bias:
    case OpKind::rotary:
    case OpKind::view: break;
  }
  return out;
}

// Shapes of one op as one device sees them (global shapes when unsharded).
struct OpShapes {
  StaticVector<TensorShape, 3> inputs{};
  TensorShape output{};
  std::int64_t kv_seq = 0;  // fused attention: keys per query row when K, V are gathered (0: local)
};

namespace detail {

constexpr std::int64_t rows_of(const TensorShape& s, std::size_t dim) {
  return s.numel() / s.dims()[dim].extent;
}

constexpr OpCost op_cost_on(const Graph& g, const Op& op, const OpShapes& shapes,
                            LayerNormStats stats, DropoutMasks masks = DropoutMasks::stored) {
  OpCost c{};
  // Every product and sum below is checked: a huge model is an error naming the count, never a
  // wrapped-around negative.
  auto mul = [](std::int64_t x, std::int64_t y) {
    return checked_mul(x, y, "the FLOP or byte count of one op");
  };
  auto add_to = [](std::int64_t& total, std::int64_t x) {
    total = checked_add(total, x, "the FLOP or byte count of one op");
  };
  auto bytes = [&](TensorId t, const TensorShape& s) {
    return mul(s.numel(), element_bytes(g.tensor(t)));
  };
  const std::int64_t n = shapes.output.numel();
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    add_to(c.bytes_read, bytes(op.inputs[i], shapes.inputs[i]));
    if (g.tensor(op.inputs[i]).kind == TensorKind::parameter)
      add_to(c.params, shapes.inputs[i].numel());
  }
  c.output_bytes = bytes(op.output, shapes.output);
  auto is_param = [&](std::size_t i) {
    return g.tensor(op.inputs[i]).kind == TensorKind::parameter;
  };
  auto grad_flops = [&](std::size_t i, std::int64_t f) {
    add_to(is_param(i) ? c.flops_backward_weight : c.flops_backward_input, f);
  };
  switch (op.kind) {
    case OpKind::einsum: {
      std::int64_t f = 2;
      for (char letter : op.einsum.letters()) {
        for (std::size_t i = 0; i < op.einsum.inputs.size(); ++i) {
          const IndexLetters& ls = op.einsum.inputs[i];
          const auto* it = std::find(ls.begin(), ls.end(), letter);
          if (it != ls.end()) {
            f = mul(f, shapes.inputs[i].dims()[static_cast<std::size_t>(it - ls.begin())].extent);
            break;
          }
        }
      }
      c.flops_forward = f;
      grad_flops(0, f);
      grad_flops(1, f);
      c.matmul = true;
      break;
    }
    case OpKind::fused_attention: {
      const TensorShape& q = shapes.inputs[0];  // (B, heads, S, d) or (B, n, g, S, d)
      const TensorShape& k = shapes.inputs[1];  // (B, heads or n, S, d)
      const std::size_t r = q.rank();
      const std::int64_t s = shapes.kv_seq > 0 ? shapes.kv_seq : q.dims()[r - 2].extent;
      const std::int64_t unit = mul(q.numel(), s);  // B·a·S_q·S_kv·d
      c.flops_forward = mul(4, unit);
      c.flops_backward_input = mul(10, unit);
      c.matmul = true;
      c.private_saved_bytes = mul(rows_of(q, r - 1), 4);  // logsumexp, fp32
      if (shapes.kv_seq > 0) {
        // Gathered K and V, then full-length dK and dV before their reduce-scatter.
        const std::int64_t gathered =
            mul(mul(k.numel() / k.dims()[2].extent, s), element_bytes(g.tensor(op.inputs[1])));
        c.temp_bytes = mul(4, gathered);
      }
      break;
    }
    case OpKind::gelu: c.flops_forward = mul(8, n), c.flops_backward_input = mul(16, n); break;
    case OpKind::dropout:
      c.flops_forward = mul(2, n), c.flops_backward_input = mul(2, n);
      if (op.probability > 0 && masks == DropoutMasks::stored)
        c.private_saved_bytes = n;  // 1-byte mask
      break;
    case OpKind::scale: c.flops_forward = n, c.flops_backward_input = n; break;
    case OpKind::add: c.flops_forward = n; break;
    case OpKind::bias:
      c.flops_forward = n;
      grad_flops(1, n);
      break;
    case OpKind::softmax:
      c.flops_forward = mul(5, n), c.flops_backward_input = mul(4, n);
      c.temp_bytes = mul(rows_of(shapes.output, op.dim), 4);
      break;
    case OpKind::layernorm:
      c.flops_forward = mul(8, n), c.flops_backward_input = mul(12, n);
      grad_flops(1, mul(2, n));
      grad_flops(2, n);
      if (stats == LayerNormStats::counted)
        c.private_saved_bytes = mul(2, mul(rows_of(shapes.output, op.dim), 4));
      c.temp_bytes = mul(2, mul(rows_of(shapes.output, op.dim), 4));
      break;
    case OpKind::rmsnorm:
      c.flops_forward = mul(4, n), c.flops_backward_input = mul(8, n);
      grad_flops(1, mul(2, n));
      if (stats == LayerNormStats::counted)
        c.private_saved_bytes = mul(rows_of(shapes.output, op.dim), 4);
      c.temp_bytes = mul(rows_of(shapes.output, op.dim), 4);
      break;
    case OpKind::silu_mul: c.flops_forward = mul(5, n), c.flops_backward_input = mul(10, n); break;
    case OpKind::rotary: c.flops_forward = mul(3, n), c.flops_backward_input = mul(3, n); break;
    case OpKind::gather: grad_flops(0, n); break;
    case OpKind::softmax_cross_entropy: {
      const std::int64_t logits = shapes.inputs[0].numel();
      c.flops_forward = mul(5, logits), c.flops_backward_input = mul(2, logits);
      c.private_saved_bytes = mul(logits, 4);  // fp32 softmax
      break;
    }
    case OpKind::view: c.bytes_read = 0; break;
  }
  c.bytes_written = op.kind == OpKind::view ? 0 : c.output_bytes + c.private_saved_bytes;
  c.saved_bytes = c.private_saved_bytes;
  for (TensorId t : saved_tensors(g, op)) {
    if (t == op.output) {
      c.saved_bytes += c.output_bytes;
      continue;
    }
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      if (op.inputs[i] == t) {
        // q, k and v of fused attention may share one storage; the schedule dedupes storages,
        // the per-op figure counts each saved operand.
        c.saved_bytes += bytes(t, shapes.inputs[i]);
        break;
      }
    }
  }
  return c;
}

}  // namespace detail

// Global (unsharded) cost of op `o`.
constexpr OpCost op_cost(const Graph& g, OpId o, LayerNormStats stats = LayerNormStats::counted) {
  const Op& op = g.op(o);
  OpShapes shapes{};
  for (TensorId t : op.inputs) shapes.inputs.push_back(g.tensor(t).shape);
  shapes.output = g.tensor(op.output).shape;
  return detail::op_cost_on(g, op, shapes, stats);
}

// ---- sharded ------------------------------------------------------------------------------------

// The communicating variants of layernorm and fused attention (see the design note).
enum class OpVariant : std::uint8_t { plain, distributed_statistics, gathered_kv };

constexpr std::string_view to_string_view(OpVariant v) {
  switch (v) {
    case OpVariant::plain: return "plain";
    case OpVariant::distributed_statistics: return "distributed_statistics";
    case OpVariant::gathered_kv: return "gathered_kv";
  }
  return "?";
}

struct OpSharding {
  StaticVector<ShardingSpec, 3> inputs{};  // one per op input, in order
  ShardingSpec output{};
  OpVariant variant = OpVariant::plain;
};

namespace detail {

struct LetterAxes {
  char letter = 0;
  AxisList axes{};
};

[[noreturn]] inline void bad_strategy(const Graph& g, const Op& op, const OpSharding& s,
                                      const DeviceMesh& mesh, std::string_view why) {
  std::string ins{};
  for (std::size_t i = 0; i < s.inputs.size(); ++i) {
    ins += concat(i > 0 ? "; " : "", s.inputs[i], " for ", g.tensor(op.inputs[i]).shape);
  }
  fail("carto: ", to_string_view(op.kind), " with input specs [", ins, "] and output spec '",
       s.output, "' on mesh ", mesh, ": ", why);
}

constexpr bool same_axis_set(const AxisList& a, const AxisList& b) {
  if (a.size() != b.size()) return false;
  return std::all_of(a.begin(), a.end(), [&](const AxisName& x) {
    return std::find(b.begin(), b.end(), x) != b.end();
  });
}

// Letter -> axes of an einsum given its input specs; fails when two operands disagree.
constexpr StaticVector<LetterAxes, kMaxRank * 3> einsum_letter_axes(const Graph& g, const Op& op,
                                                                    const OpSharding& s,
                                                                    const DeviceMesh& mesh) {
  StaticVector<LetterAxes, kMaxRank * 3> out{};
  for (std::size_t i = 0; i < op.einsum.inputs.size(); ++i) {
    if (s.inputs[i].is_partial()) {
      bad_strategy(g, op, s, mesh,
                   concat("input ", i,
                          " is Partial; an einsum needs its inputs "
                          "reduced first (all-reduce or reduce-scatter)"));
    }
    const IndexLetters& ls = op.einsum.inputs[i];
    for (std::size_t d = 0; d < ls.size(); ++d) {
      const AxisList& axes = s.inputs[i].dims()[d];
      auto* it = std::find_if(out.begin(), out.end(),
                              [&](const LetterAxes& la) { return la.letter == ls[d]; });
      if (it == out.end()) {
        out.push_back(LetterAxes{ls[d], axes});
      } else if (!(it->axes == axes)) {
        bad_strategy(g, op, s, mesh,
                     concat("letter '", ls[d], "' is split over (", AxisListPrinter{it->axes},
                            ") in one operand and (", AxisListPrinter{axes},
                            ") in another; the dims sharing a letter need the same split"));
      }
    }
  }
  StaticVector<AxisName, kMaxMeshAxes * 4> seen{};
  for (const LetterAxes& la : out) {
    for (const AxisName& a : la.axes) {
      if (std::find(seen.begin(), seen.end(), a) != seen.end()) {
        bad_strategy(g, op, s, mesh,
                     concat("mesh axis '", a,
                            "' splits two different letters; "
                            "each mesh axis may split one letter"));
      }
      seen.push_back(a);
    }
  }
  return out;
}

constexpr ShardingSpec einsum_output_spec_of(const Graph& g, const Op& op, const OpSharding& s,
                                             const DeviceMesh& mesh) {
  const auto letters = einsum_letter_axes(g, op, s, mesh);
  ShardingSpec out{};
  for (char c : op.einsum.output) {
    for (const LetterAxes& la : letters) {
      if (la.letter == c) out.add_dim(la.axes);
    }
  }
  for (const LetterAxes& la : letters) {
    if (op.einsum.contracted(la.letter)) {
      for (const AxisName& a : la.axes) out.add_partial(a);
    }
  }
  return out;
}

// The spec of fused attention's k and v for q's (and the output's) spec: the same for rank 4;
// without the group dim (dim 2) for grouped-query q (B, n, g, S, d).
constexpr ShardingSpec attention_kv_spec(const ShardingSpec& q) {
  if (q.rank() != 5) return q;
  ShardingSpec kv;
  for (std::size_t d = 0; d < 5; ++d) {
    if (d != 2) kv.add_dim(q.dims()[d]);
  }
  for (const AxisName& a : q.partial()) kv.add_partial(a);
  return kv;
}

// Checks the op's rules for this strategy (see the design note).
constexpr void check_strategy(const Graph& g, const Op& op, const OpSharding& s,
                              const DeviceMesh& mesh) {
  auto fail_if = [&](bool bad, std::string_view why) {
    if (bad) bad_strategy(g, op, s, mesh, why);
  };
  const ShardingSpec& out = s.output;
  auto in = [&](std::size_t i) -> const ShardingSpec& { return s.inputs[i]; };
  fail_if(s.variant != OpVariant::plain && op.kind != OpKind::layernorm &&
              op.kind != OpKind::rmsnorm && op.kind != OpKind::fused_attention,
          "variants other than plain apply to rmsnorm, layernorm and fused attention only");
  switch (op.kind) {
    case OpKind::einsum: {
      const ShardingSpec expected = einsum_output_spec_of(g, op, s, mesh);
      if (!(expected == out)) {
        bad_strategy(g, op, s, mesh, concat("these inputs give the output spec '", expected, "'"));
      }
      break;
    }
    case OpKind::gelu:
    case OpKind::dropout:
      fail_if(in(0).is_partial(), "a nonlinear op needs a non-Partial input; reduce it first");
      fail_if(!(in(0) == out), "the output spec must equal the input spec");
      break;
    case OpKind::silu_mul:
      fail_if(in(0).is_partial() || in(1).is_partial(),
              "silu_mul is nonlinear in gate; it needs non-Partial inputs, reduce them first");
      fail_if(!(in(0) == out) || !(in(1) == out), "gate, up and the output need one spec");
      break;
    case OpKind::rotary:
      fail_if(!(in(0) == out), "the output spec must equal the input spec");
      fail_if(!out.dims()[out.rank() - 1].empty(),
              "rotary keeps the head dim unsplit (a split could cut a rotation pair)");
      break;
    case OpKind::scale:
      fail_if(!(in(0) == out), "the output spec must equal the input spec");
      break;
    case OpKind::add:
      fail_if(!(in(0) == out) || !(in(1) == out), "both inputs and the output need one spec");
      break;
    case OpKind::bias: {
      fail_if(in(0).is_partial() || in(1).is_partial(),
              "adding a bias to a Partial tensor adds it once per summand; reduce first");
      fail_if(!(in(0) == out), "the output spec must equal the input spec");
      const std::size_t lead = out.rank() - in(1).rank();
      for (std::size_t d = 0; d < in(1).rank(); ++d) {
        fail_if(!(in(1).dims()[d] == out.dims()[lead + d]),
                "the bias must be split like the trailing dims of the input");
      }
      break;
    }
    case OpKind::softmax:
    case OpKind::rmsnorm:
    case OpKind::layernorm: {
      fail_if(in(0).is_partial(), "a reduction needs a non-Partial input; reduce it first");
      fail_if(!(in(0) == out), "the output spec must equal the input spec");
      const bool distributed = s.variant == OpVariant::distributed_statistics;
      fail_if(s.variant == OpVariant::gathered_kv || (distributed && op.kind == OpKind::softmax),
              "this variant does not apply to the op (softmax: plain; layernorm and rmsnorm: "
              "plain or distributed_statistics)");
      if (!distributed) {
        fail_if(!in(0).dims()[op.dim].empty(),
                op.kind != OpKind::softmax
                    ? "the reduced dim is split; keep it unsplit (R) on that dim, or use "
                      "OpVariant::distributed_statistics (statistics all-reduce)"
                    : "the reduced dim is split; keep it unsplit (R) on that dim");
      }
      if (op.kind != OpKind::softmax) {
        const AxisList& split = in(0).dims()[op.dim];
        fail_if(distributed && split.empty(),
                "distributed_statistics needs the normalized dim split; use OpVariant::plain");
        for (std::size_t p = 1; p < op.inputs.size(); ++p) {
          fail_if(in(p).is_partial() || !(in(p).dims()[0] == split),
                  distributed
                      ? "gamma and beta must be split over the axes of the normalized dim"
                      : "gamma and beta of a layernorm over an unsplit dim are replicated (R)");
        }
      }
      break;
    }
    case OpKind::gather: {
      const ShardingSpec& table = in(0);
      const ShardingSpec& ids = in(1);
      fail_if(ids.is_partial() || table.is_partial(), "gather needs non-Partial table and ids");
      bool ok = out.rank() == ids.rank() + 1 && out.dims()[out.rank() - 1] == table.dims()[1] &&
                same_axis_set(out.partial(), table.dims()[0]);
      for (std::size_t d = 0; ok && d < ids.rank(); ++d) ok = out.dims()[d] == ids.dims()[d];
      fail_if(!ok,
              "the output takes the ids' splits, the table's hidden split, and is Partial "
              "over the axes that split the vocabulary");
      break;
    }
    case OpKind::softmax_cross_entropy: {
      const ShardingSpec& logits = in(0);
      fail_if(logits.is_partial() || in(1).is_partial(), "cross-entropy needs non-Partial inputs");
      AxisList token_axes;
      bool ok = true;
      for (std::size_t d = 0; d < in(1).rank(); ++d) {
        ok = ok && logits.dims()[d] == in(1).dims()[d];
        for (const AxisName& a : in(1).dims()[d]) token_axes.push_back(a);
      }
      fail_if(!ok, "the targets must be split like the logits' token dims");
      fail_if(!same_axis_set(out.partial(), token_axes),
              "the scalar loss is Partial over exactly the axes that split the tokens");
      break;
    }
    case OpKind::fused_attention: {
      const std::size_t r = out.rank();
      fail_if(in(0).is_partial() || !(in(0) == out), "q and the output need one non-Partial spec");
      const ShardingSpec kv = attention_kv_spec(out);
      for (std::size_t i = 1; i < 3; ++i) {
        fail_if(in(i).is_partial() || !(in(i) == kv),
                r == 5 ? "k and v need q's spec without its group dim"
                       : "q, k, v and the output need one non-Partial spec");
      }
      fail_if(s.variant == OpVariant::distributed_statistics,
              "variant distributed_statistics does not apply to fused attention");
      fail_if(!out.dims()[r - 1].empty(), "fused attention keeps head_dim unsplit");
      if (s.variant == OpVariant::plain) {
        fail_if(!out.dims()[r - 2].empty(),
                "fused attention keeps the sequence unsplit; split batch or heads, or use "
                "OpVariant::gathered_kv (K and V all-gathered over the sequence axes)");
      } else {
        fail_if(out.dims()[r - 2].empty(),
                "gathered_kv needs the sequence split; use OpVariant::plain");
      }
      break;
    }
    case OpKind::view: {
      const std::int64_t fi = num_distinct_slices(in(0), mesh);
      const std::int64_t fo = num_distinct_slices(out, mesh);
      fail_if(fi != fo || !same_axis_set(in(0).partial(), out.partial()),
              "a view moves no data: the output must be split over as many devices as the input");
      break;
    }
  }
}

}  // namespace detail

// The output spec an einsum op gets from its input specs (Partial over contracted split letters).
constexpr ShardingSpec einsum_output_spec(const Graph& g, OpId o,
                                          const StaticVector<ShardingSpec, 3>& inputs,
                                          const DeviceMesh& mesh) {
  const Op& op = g.op(o);
  if (op.kind != OpKind::einsum) {
    detail::fail("carto: einsum_output_spec of a ", to_string_view(op.kind),
                 " op; it needs an einsum");
  }
  return detail::einsum_output_spec_of(g, op, OpSharding{.inputs = inputs, .output = {}}, mesh);
}

// Per-device cost of op `o` under a strategy: the specs are checked against the shapes and the mesh
// and against the op's rules, then the formulas run on the local shapes.
constexpr OpCost op_cost(const Graph& g, OpId o, const OpSharding& sharding, const DeviceMesh& mesh,
                         LayerNormStats stats = LayerNormStats::counted,
                         DropoutMasks masks = DropoutMasks::stored) {
  const Op& op = g.op(o);
  if (sharding.inputs.size() != op.inputs.size()) {
    detail::fail("carto: ", to_string_view(op.kind), " has ", op.inputs.size(), " inputs but ",
                 sharding.inputs.size(), " input specs were given; give one per input");
  }
  OpShapes shapes{};
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    const TensorShape& s = g.tensor(op.inputs[i]).shape;
    if (!validate(s, sharding.inputs[i], mesh).ok())
      check_spec(s, sharding.inputs[i], mesh, "op input");
    shapes.inputs.push_back(local_shape(s, sharding.inputs[i], mesh));
  }
  const TensorShape& os = g.tensor(op.output).shape;
  if (!validate(os, sharding.output, mesh).ok()) check_spec(os, sharding.output, mesh, "op output");
  shapes.output = local_shape(os, sharding.output, mesh);
  detail::check_strategy(g, op, sharding, mesh);
  if (op.kind == OpKind::fused_attention && sharding.variant == OpVariant::gathered_kv) {
    shapes.kv_seq = g.tensor(op.inputs[1]).shape.dims()[2].extent;  // k (B, heads, S, d)
  }
  return detail::op_cost_on(g, op, shapes, stats, masks);
}

}  // namespace carto
