// carto/search/strategy.hpp — every sharding strategy of one op, with its costs, collectives and
// memory. The Strategy type, make_strategy and the time of a strategy are in strategy_core.hpp;
// this header adds the enumeration and StrategyCache.
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
//    rule without Partial, as silu is nonlinear). rotary: every spec with the last (head) dim
//    unsplit, Partial included (the rotation is linear), output alike.
//  - grouped-query fused attention (q (B, n, g, S, d)): q's specs as above, k and v split like q
//    without the group dim; a split of g leaves k, v replicated over its axes and makes their
//    gradients Partial over them.
//  - views: every input spec (Partial included) with the output spec the view implies; input specs
//    the view cannot carry without moving data are skipped. split_heads maps a split of the fused
//    (parts·H) dim to a heads split (it needs the heads divisible by the split: the projection's
//    columns are ordered per head group, as Megatron-LM lays out its fused QKV weight); merge_heads
//    maps a heads split to the hidden dim (head_dim must be unsplit; of a grouped (B, n, g, S, d)
//    tensor the group dim too); split_groups maps a split of (n·c·d) — c slots per group, g of them
//    its queries — to the key/value heads n (n divisible by the split); transpose swaps the last
//    two.
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

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "carto/search/strategy_core.hpp"
#include "carto/spec/enumerate.hpp"

namespace carto {

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
    case ViewKind::split_groups: {  // (B, S, n·c·d) -> (B, n, g, S, d)
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
    case OpKind::rotary:  // linear: a Partial input gives a Partial output
      for (const ShardingSpec& x :
           enumerate_specs(shape(0), mesh, {.partial = PartialSpecs::include})) {
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

}  // namespace carto
