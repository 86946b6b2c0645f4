// The cases the Llama executor tests share (thread ranks in test_llama_executor, MPI processes in
// test_llama_executor_mpi): a small Llama (RMSNorm, SwiGLU, rotary grouped-query attention with
// 8 query heads over 4 key/value heads, untied head, no biases) with the vocabulary and sequence
// of executor_cases.hpp's tiny GPT, so its token batches and train_rank serve it unchanged, and a
// Megatron-style plan for it. No test framework here: errors throw.
#pragma once

#include <carto/layers/llama.hpp>
#include <carto/search/strategy.hpp>
#include <cstdint>
#include <vector>

#include "runtime/executor_cases.hpp"

namespace carto::testing {

constexpr LlamaConfig kTinyLlama{.name = "tiny-llama",
                                 .layers = 2,
                                 .hidden = 32,
                                 .heads = 8,
                                 .kv_heads = 4,
                                 .ffn_hidden = 48,
                                 .vocab = kTiny.vocab,
                                 .seq = kTiny.seq,
                                 .rope_theta = 10000.0};

inline Graph tiny_llama(std::int64_t batch, AttentionKind attention = AttentionKind::fused,
                        std::int64_t layers = kTinyLlama.layers) {
  LlamaConfig c = kTinyLlama;
  c.layers = layers;
  return build_llama(c, {.batch = batch, .precision = Precision::fp32, .attention = attention});
}

// Megatron-LM's tensor-parallel plan carried over to the Llama block: data parallel over `dp` when
// the mesh has it; the Q, K, V, gate and up projections column-parallel (weight split on its
// output over tp), the attention split by key/value heads (each rank keeps whole groups), the
// output and down projections row-parallel; every other op takes its input as produced, without
// Partial axes (the all-reduce after a row-parallel linear); embedding and LM head unsplit.
inline std::vector<std::size_t> llama_megatron_indices(const Graph& g, const DeviceMesh& mesh) {
  const AxisList batch = mesh.find(AxisName("dp")) ? AxisList{AxisName("dp")} : AxisList{};
  const AxisList tp{AxisName("tp")};
  auto spec = [](std::initializer_list<AxisList> dims) {
    ShardingSpec s;
    for (const AxisList& d : dims) s.add_dim(d);
    return s;
  };
  std::vector<ShardingSpec> stored(g.tensors().size());
  std::vector<std::size_t> plan;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const OpId id{static_cast<std::int32_t>(k)};
    const Op& op = g.op(id);
    std::vector<ShardingSpec> want;
    if (op.kind == OpKind::einsum) {
      const bool weight = g.tensor(op.inputs[1]).kind == TensorKind::parameter;
      const TensorShape& out = g.tensor(op.output).shape;
      const DimName name = out.dims()[out.rank() - 1].name;
      if (!weight) {  // attention einsums (B, n, g, S, ·) x (B, n, S, d): kv heads over tp
        want = {spec({batch, tp, {}, {}, {}}), spec({batch, tp, {}, {}})};
      } else if (name == DimName("vocab")) {
        want = {spec({batch, {}, {}}), spec({{}, {}})};
      } else if (name == DimName("q") || name == DimName("kv") || name == DimName("ffn")) {
        want = {spec({batch, {}, {}}), spec({{}, tp})};
      } else {
        want = {spec({batch, {}, tp}), spec({tp, {}})};
      }
    } else if (op.kind == OpKind::gather) {
      want = {spec({{}, {}}), spec({batch, {}})};
    } else if (op.kind == OpKind::view) {
      want = {stored[op.inputs[0].index()]};
    } else {
      for (const TensorId t : op.inputs) {
        if (g.tensor(t).kind != TensorKind::parameter && g.tensor(t).kind != TensorKind::index)
          want.push_back(without_partial(stored[t.index()]));
      }
    }
    const std::vector<Strategy> all =
        enumerate_strategies(g, id, mesh, {.precision = Precision::fp32});
    std::size_t chosen = all.size();
    for (std::size_t i = 0; i < all.size() && chosen == all.size(); ++i) {
      bool match = all[i].sharding.variant == OpVariant::plain;
      for (std::size_t j = 0, a = 0; match && j < op.inputs.size() && a < want.size(); ++j) {
        const TensorKind kind = g.tensor(op.inputs[j]).kind;
        const bool listed = op.kind == OpKind::einsum || op.kind == OpKind::gather ||
                            op.kind == OpKind::view ||
                            (kind != TensorKind::parameter && kind != TensorKind::index);
        if (listed) match = all[i].sharding.inputs[j] == want[a++];
      }
      if (match) chosen = i;
    }
    if (chosen == all.size()) {
      throw Error(detail::concat("op ", k, " (", to_string_view(op.kind), ") wants ", want.at(0),
                                 ", which no plain strategy reads"));
    }
    plan.push_back(chosen);
    stored[op.output.index()] = all[chosen].sharding.output;
  }
  return plan;
}

}  // namespace carto::testing
