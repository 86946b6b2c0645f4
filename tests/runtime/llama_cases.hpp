// The Llama cases of the executor's parity tests (thread ranks in test_executor_llama, MPI
// processes in test_executor_llama_mpi): a 2-layer Llama with small dims (grouped-query attention,
// rotary q and k, SwiGLU, RMSNorm, untied head), its Megatron-style plan, on top of
// executor_cases.hpp's batches, plans and training runs. No test framework here: errors throw.
#pragma once

#include <carto/error.hpp>
#include <carto/graph/graph.hpp>
#include <carto/layers/llama.hpp>
#include <carto/search/strategy.hpp>
#include <carto/spec/mesh.hpp>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "runtime/executor_cases.hpp"
#include "support/megatron_plan.hpp"

namespace carto::testing {

// 8 heads in 4 key/value groups of 2 (head size 4): tp=4 splits whole groups, a 2x2 mesh can split
// the groups and the heads within a group. Vocabulary and sequence are kTiny's, so
// executor_cases.hpp's random_batch and train_rank serve both models.
constexpr LlamaConfig kTinyLlama{.name = "tiny-llama",
                                 .layers = 2,
                                 .hidden = 32,
                                 .heads = 8,
                                 .kv_heads = 4,
                                 .ffn_hidden = 48,
                                 .vocab = kTiny.vocab,
                                 .seq = kTiny.seq};

inline Graph tiny_llama_graph(std::int64_t batch,
                              AttentionKind attention = AttentionKind::materialized,
                              Precision precision = Precision::fp32) {
  return build_llama(kTinyLlama, {.batch = batch, .precision = precision, .attention = attention});
}

// Megatron's plan carried over to a Llama graph, op k's strategy at index k (enumerate_strategies
// order, fp32 options). Batch dims over `dp` when the mesh has it. Inside a block: the fused QKV
// and gate/up projections column-parallel (weight split on its output over tp), the o and down
// projections row-parallel (weight split on its input); the LM head and the embedding unsplit;
// every other op (views, rotary, the attention einsums, softmax, fused attention, silu_mul, the
// norms, the adds, the loss) reads each input as its producer stored it, Partial axes reduced (the
// all-reduce after a row-parallel projection), so the head split of QKV's columns carries through
// the attention and the ffn split of gate/up through silu_mul. Graph inputs and parameters of
// those ops take the first strategy that matches.
inline std::vector<std::size_t> llama_megatron_strategy_indices(const Graph& g,
                                                                const DeviceMesh& mesh) {
  const AxisList batch = mesh.find(AxisName("dp")) ? axes({"dp"}) : AxisList{};
  const AxisList tp = axes({"tp"});
  std::vector<ShardingSpec> stored(g.tensors().size());
  std::vector<bool> produced(g.tensors().size(), false);
  auto spec = [](std::initializer_list<AxisList> dims) {
    ShardingSpec s;
    for (const AxisList& d : dims) s.add_dim(d);
    return s;
  };
  std::vector<std::size_t> plan;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const OpId id{static_cast<std::int32_t>(k)};
    const Op& op = g.op(id);
    std::vector<std::optional<ShardingSpec>> want(op.inputs.size());
    const bool weight = op.kind == OpKind::einsum && op.inputs.size() == 2 &&
                        g.tensor(op.inputs[1]).kind == TensorKind::parameter;
    if (weight) {
      const DimName out = g.tensor(op.output).shape.dims()[2].name;
      if (out == DimName("vocab")) {
        want = {spec({batch, {}, {}}), spec({{}, {}})};
      } else if (out == DimName("qkv") || out == DimName("gate_up")) {
        want = {spec({batch, {}, {}}), spec({{}, tp})};  // column-parallel
      } else {
        want = {spec({batch, {}, tp}), spec({tp, {}})};  // row-parallel
      }
    } else if (op.kind == OpKind::gather) {
      want = {spec({{}, {}}), spec({batch, {}})};
    } else {
      for (std::size_t j = 0; j < op.inputs.size(); ++j) {
        const std::size_t t = op.inputs[j].index();
        if (!produced[t]) continue;
        want[j] = op.kind == OpKind::view ? stored[t] : without_partial(stored[t]);
      }
    }
    const std::vector<Strategy> all =
        enumerate_strategies(g, id, mesh, {.precision = Precision::fp32});
    std::size_t chosen = all.size();
    for (std::size_t i = 0; i < all.size() && chosen == all.size(); ++i) {
      bool match = all[i].sharding.variant == OpVariant::plain;
      for (std::size_t j = 0; match && j < want.size(); ++j)
        match = !want[j] || all[i].sharding.inputs[j] == *want[j];
      if (match) chosen = i;
    }
    if (chosen == all.size()) {
      throw Error(detail::concat("op ", k, " (", to_string_view(op.kind), ") has no plain ",
                                 "strategy reading its inputs as the Megatron-style plan wants"));
    }
    plan.push_back(chosen);
    stored[op.output.index()] = all[chosen].sharding.output;
    produced[op.output.index()] = true;
  }
  return plan;
}

}  // namespace carto::testing
