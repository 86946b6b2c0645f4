// carto/search/gradient_memory.hpp — the gradient buffers alive while an op's backward runs, as
// the executor keeps them (runtime/executor/backward.hpp).
//
// Design note (DESIGN.md §5). In backward, op k runs while these gradient buffers are allocated,
// on top of the activations still kept:
//  - the gradient of every activation live across k (produced before k, read by k or a later op:
//    a later reader's backward made it, its producer's has not consumed it yet), each buffer
//    once. The executor hands an identity gradient on: an add's inputs and a bias's input take dY's
//    own buffer when the op is their last reader (hands_gradient_on), so tensors share a buffer,
//    named by its root (gradient_roots): the residual stream's gradient is one buffer through a
//    block's backward, which the branch's readers add into in place;
//  - dY, its output's gradient, unless it is one of those buffers (handed on by a later add);
//  - the input gradients op k writes into new buffers: an input it reads last gets one (none when
//    handed on; a part view of a fused projection allocates the whole fused gradient); an input
//    read later too is added into in place, unless its gradient needs a move to the stored spec
//    or the op writes whole buffers (fused attention, silu_mul); a parameter's gradient is written
//    where it accumulates below ZeRO 2, and is a temporary at stages 2-3.
// The search (search/dp_core.hpp) and the plan pricer (search/price.hpp, through
// search/evaluate.hpp) both count op k's backward excursion with backward_gradient_bytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "carto/graph/graph.hpp"

namespace carto {

// Whether op's backward hands its output gradient on as input i's gradient (no copy) when it is
// the input's last reader: an identity gradient of the same shape and dtype.
inline bool hands_gradient_on(const Graph& g, const Op& op, std::size_t i) {
  if (op.kind != OpKind::add && !(op.kind == OpKind::bias && i == 0)) return false;
  const TensorInfo& in = g.tensor(op.inputs[i]);
  const TensorInfo& out = g.tensor(op.output);
  return in.kind == TensorKind::activation && in.producer.valid() && in.dtype == out.dtype &&
         in.shape.rank() == out.shape.rank() && in.shape.numel() == out.shape.numel();
}

struct GradientRoots {
  std::vector<std::int32_t> last_use;  // per tensor: its last reader (-1: none)
  std::vector<std::int32_t> root;      // per tensor: the tensor whose gradient buffer it uses
};

inline GradientRoots gradient_roots(const Graph& g) {
  const std::size_t n = g.tensors().size();
  GradientRoots r{.last_use = std::vector<std::int32_t>(n, -1),
                  .root = std::vector<std::int32_t>(n, 0)};
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    for (TensorId t : g.ops()[k].inputs) r.last_use[t.index()] = static_cast<std::int32_t>(k);
  }
  for (std::size_t t = 0; t < n; ++t) r.root[t] = static_cast<std::int32_t>(t);
  // Outputs of later ops first: a root comes from the last reader's output, produced later.
  for (std::size_t k = g.num_ops(); k-- > 0;) {
    const TensorId out = g.ops()[k].output;
    const std::int32_t c = r.last_use[out.index()];
    if (c < 0) continue;
    const Op& reader = g.ops()[static_cast<std::size_t>(c)];
    for (std::size_t i = 0; i < reader.inputs.size(); ++i) {
      if (reader.inputs[i] == out && hands_gradient_on(g, reader, i)) {
        r.root[out.index()] = r.root[reader.output.index()];
        break;
      }
    }
  }
  return r;
}

// Op k's gradient buffers as the graph fixes them (every plan has the same live tensors at k):
//  - across: the activations live across k that k does not read (produced before k, read after),
//    one per gradient buffer (root); their gradients are allocated in forward's place of k too,
//    in the model (a tensor live across k is held in forward as well, by then usually saved);
//  - read_later: k's inputs that a later op reads too (their gradient exists: k adds into it), one
//    per buffer, none of across's;
//  - counts_dy: dY is a buffer of its own, none of the above (not handed on to one of them);
//  - counts_block_gradient: while a checkpointed block recomputes, the gradient of its output is
//    held; counted unless it is one of across's buffers.
struct OpGradientLayout {
  std::vector<std::int32_t> across;
  std::vector<std::uint8_t> read_later;  // input indices
  bool counts_dy = true;
  bool counts_block_gradient = true;
};

inline std::vector<OpGradientLayout> gradient_layouts(const Graph& g, const GradientRoots& r) {
  std::vector<OpGradientLayout> out(g.num_ops());
  std::vector<std::int32_t> live;  // activations produced before op k and read at k or later
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const Op& op = g.ops()[k];
    const auto kk = static_cast<std::int32_t>(k);
    OpGradientLayout& l = out[k];
    auto reads = [&](std::int32_t t) {
      return std::any_of(op.inputs.begin(), op.inputs.end(),
                         [t](TensorId x) { return x.value == t; });
    };
    auto root = [&](std::int32_t t) { return r.root[static_cast<std::size_t>(t)]; };
    std::vector<std::int32_t> roots;
    for (const std::int32_t t : live) {
      if (reads(t) || r.last_use[static_cast<std::size_t>(t)] <= kk) continue;
      if (std::find(roots.begin(), roots.end(), root(t)) != roots.end()) continue;
      roots.push_back(root(t));
      l.across.push_back(t);
    }
    std::vector<std::int32_t> all_roots = roots;
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const TensorId t = op.inputs[i];
      const TensorInfo& info = g.tensor(t);
      if (info.kind != TensorKind::activation || !info.producer.valid() ||
          r.last_use[t.index()] <= kk)
        continue;
      if (std::find(all_roots.begin(), all_roots.end(), root(t.value)) != all_roots.end()) continue;
      all_roots.push_back(root(t.value));
      l.read_later.push_back(static_cast<std::uint8_t>(i));
    }
    l.counts_dy = std::find(all_roots.begin(), all_roots.end(), root(op.output.value)) ==
                  all_roots.end();
    if (op.group >= 0) {
      const OpGroup& grp = g.groups()[static_cast<std::size_t>(op.group)];
      const TensorId block_out = g.ops()[static_cast<std::size_t>(grp.end_op - 1)].output;
      l.counts_block_gradient =
          std::find(roots.begin(), roots.end(), root(block_out.value)) == roots.end();
    }
    std::erase_if(live, [&](std::int32_t t) { return r.last_use[static_cast<std::size_t>(t)] <= kk; });
    const TensorInfo& o = g.tensor(op.output);
    if (o.kind == TensorKind::activation && r.last_use[op.output.index()] > kk)
      live.push_back(op.output.value);
  }
  return out;
}

// Op k's input i as its backward writes the gradient: the bytes in the gradient spec, and whether
// that spec differs from the one the gradient is kept in (a move follows: no adding in place).
struct InputGradient {
  std::int64_t bytes = 0;
  bool moved = false;
};

// The input gradients op k's backward writes into buffers of their own (the design note).
inline std::int64_t written_gradient_bytes(const Graph& g, const GradientRoots& r, std::size_t k,
                                           std::span<const InputGradient> inputs,
                                           int zero_stage) {
  const Op& op = g.ops()[k];
  const auto kk = static_cast<std::int32_t>(k);
  const bool whole_writes = op.kind == OpKind::fused_attention || op.kind == OpKind::silu_mul;
  std::int64_t bytes = 0;
  for (std::size_t i = 0; i < op.inputs.size() && i < inputs.size(); ++i) {
    const TensorInfo& info = g.tensor(op.inputs[i]);
    if (info.kind == TensorKind::index) continue;
    if (info.kind == TensorKind::parameter) {
      if (zero_stage >= 2) bytes += inputs[i].bytes;
      continue;
    }
    if (!info.producer.valid()) {  // a graph input: written, then dropped
      bytes += inputs[i].bytes;
      continue;
    }
    if (r.last_use[op.inputs[i].index()] > kk) {  // added into its existing gradient
      if (inputs[i].moved || whole_writes) bytes += inputs[i].bytes;
      continue;
    }
    if (!hands_gradient_on(g, op, i)) bytes += inputs[i].bytes;
  }
  return bytes;
}

// U_k, op k's excursion above the activations kept (search/model.hpp's design note), from its
// parts: `across` the gradient bytes of layout.across, then the larger of its forward part
// (the buffers held and not saved, the block output's gradient in a recompute) and its backward
// part (workspace, gradients added into, dY, the gradients it writes), then what every phase
// holds (ZeRO-3's gathered parameters, its moves' copies).
struct ExcursionParts {
  std::int64_t across = 0;
  std::int64_t forward = 0;
  std::int64_t backward = 0;
  std::int64_t fixed = 0;
  [[nodiscard]] std::int64_t total() const { return across + std::max(forward, backward) + fixed; }
};

}  // namespace carto
