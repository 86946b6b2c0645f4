// Megatron-LM's tensor-parallel plan for a GPT graph, as strategies of enumerate_strategies: the
// reference plan of the Megatron cost checks (tests/search/test_megatron.cpp) and of the runtime's
// pinned-plan parity tests (tests/runtime/test_executor*.cpp). Throws carto::Error when an op has
// no such strategy.
#pragma once

#include <carto/error.hpp>
#include <carto/graph/graph.hpp>
#include <carto/search/strategy.hpp>
#include <carto/spec/mesh.hpp>
#include <cstdint>
#include <initializer_list>
#include <vector>

namespace carto::testing {

enum class SequenceParallel : std::uint8_t { off, on };

inline AxisList axes(std::initializer_list<const char*> names) {
  AxisList out;
  for (const char* n : names) out.push_back(AxisName(n));
  return out;
}

// Megatron's plan for every op of a GPT graph, op k's strategy at index k. Batch dims go over `dp`
// when the mesh has it. Inside a block: QKV and the first MLP linear column-parallel (weight split
// on its output over tp), the attention einsums and softmax/dropout split by heads, the projection
// and the second MLP linear row-parallel (weight split on its input); every other op takes its
// input as produced, without Partial axes (the all-reduce after a row-parallel linear); with
// sequence parallelism those (B, S, H) tensors are split along the sequence over tp instead of
// replicated. Returns each op's index in enumerate_strategies order.
inline std::vector<std::size_t> megatron_strategy_indices(const Graph& g, const DeviceMesh& mesh,
                                                          std::int64_t hidden,
                                                          SequenceParallel sp) {
  const AxisList batch = mesh.find(AxisName("dp")) ? axes({"dp"}) : AxisList{};
  const AxisList tp = axes({"tp"});
  std::vector<ShardingSpec> stored(g.tensors().size());
  std::vector<std::size_t> plan;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const OpId id{static_cast<std::int32_t>(k)};
    const Op& op = g.op(id);
    std::vector<ShardingSpec> want;
    auto spec = [](std::initializer_list<AxisList> dims) {
      ShardingSpec s;
      for (const AxisList& d : dims) s.add_dim(d);
      return s;
    };
    if (op.kind == OpKind::einsum) {
      const bool weight = g.tensor(op.inputs[1]).kind == TensorKind::parameter;
      const TensorShape& out = g.tensor(op.output).shape;
      if (!weight) {  // attention: heads over tp
        want = {spec({batch, tp, {}, {}}), spec({batch, tp, {}, {}})};
      } else if (out.dims()[2].name == DimName("vocab")) {  // the LM head, unsplit
        want = {spec({batch, {}, {}}), spec({{}, {}})};
      } else if (out.dims()[2].name == DimName("qkv") || out.dims()[2].name == DimName("ffn")) {
        want = {spec({batch, {}, {}}), spec({{}, tp})};  // column-parallel
      } else {
        want = {spec({batch, {}, tp}), spec({tp, {}})};  // row-parallel
      }
    } else if (op.kind == OpKind::gather) {
      want = {spec({{}, {}}), spec({batch, {}})};
    } else if (op.kind == OpKind::view) {
      want = {stored[op.inputs[0].index()]};
    } else {
      ShardingSpec x = without_partial(stored[op.inputs[0].index()]);
      const TensorShape& xs = g.tensor(op.inputs[0]).shape;
      const bool hidden_tensor = xs.rank() == 3 && xs.dims()[2].extent == hidden;
      if (sp == SequenceParallel::on && hidden_tensor && x.dims()[1].empty() &&
          x.dims()[2].empty()) {
        x = spec({batch, tp, {}});
      }
      want = {x};
    }
    const std::vector<Strategy> all =
        enumerate_strategies(g, id, mesh, {.layernorm_stats = LayerNormStats::ignored});
    std::size_t chosen = all.size();
    for (std::size_t i = 0; i < all.size() && chosen == all.size(); ++i) {
      bool match = all[i].sharding.variant == OpVariant::plain;
      for (std::size_t j = 0; match && j < want.size(); ++j)
        match = all[i].sharding.inputs[j] == want[j];
      if (match) chosen = i;
    }
    if (chosen == all.size()) {
      throw Error(detail::concat("op ", k, " (", to_string_view(op.kind), ") wants ", want[0],
                                 ", which no plain strategy reads"));
    }
    plan.push_back(chosen);
    stored[op.output.index()] = all[chosen].sharding.output;
  }
  return plan;
}

// The strategies themselves, priced as Korthikanti et al. 2022 count (layernorm statistics
// ignored, 1-byte dropout masks stored), the accounting the Megatron cost checks compare with.
inline std::vector<Strategy> megatron_plan(const Graph& g, const DeviceMesh& mesh,
                                           std::int64_t hidden, SequenceParallel sp) {
  const std::vector<std::size_t> index = megatron_strategy_indices(g, mesh, hidden, sp);
  std::vector<Strategy> plan;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    plan.push_back(enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh,
                                        {.layernorm_stats = LayerNormStats::ignored,
                                         .dropout_masks = DropoutMasks::stored})
                       .at(index[k]));
  }
  return plan;
}

}  // namespace carto::testing
