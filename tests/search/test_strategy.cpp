// Strategy enumeration per op kind, checked against independent references: the closed-form count
// of axis-to-letter assignments, brute force over every pair of operand specs, the defining
// equation of sharded cost (per-device FLOPs × split factors = global FLOPs, STYLE.md 11), and the
// α-β formulas written out by hand.
#include <carto/cost.hpp>
#include <carto/layers.hpp>
#include <carto/search.hpp>
#include <carto/spec.hpp>
#include <catch2/catch.hpp>
#include <set>
#include <string>

using namespace carto;

namespace {

// Σ_k C(m,k)·L(L+1)…(L+k−1): choose which k axes split letters, then place them on L letters with
// their order within a letter (k balls into L ordered lists: the rising factorial).
std::int64_t assignment_count(std::int64_t letters, std::int64_t axes) {
  std::int64_t total = 0;
  for (std::int64_t k = 0; k <= axes; ++k) {
    std::int64_t choose = 1;
    for (std::int64_t j = 0; j < k; ++j) choose = choose * (axes - j) / (j + 1);
    std::int64_t rising = 1;
    for (std::int64_t j = 0; j < k; ++j) rising *= letters + j;
    total += choose * rising;
  }
  return total;
}

struct Matmul {
  Graph g;
  OpId op{0};
  TensorId x, w;
  // Y[b,s,o] = X[b,s,i] W[i,o], bf16.
  Matmul(std::int64_t b, std::int64_t s, std::int64_t i, std::int64_t o) {
    x = g.input({{"b", b}, {"s", s}, {"i", i}}, DType::bf16);
    w = g.parameter({{"i", i}, {"o", o}}, DType::bf16);
    (void)g.einsum("bsi,io->bso", x, w);
  }
};

std::string key(const OpSharding& s) {
  std::string k;
  for (const ShardingSpec& in : s.inputs) k += to_string(in) + ";";
  return k + to_string(s.output);
}

const Strategy& find(const std::vector<Strategy>& all, const std::vector<std::string>& inputs) {
  for (const Strategy& s : all) {
    bool same = s.sharding.inputs.size() == inputs.size();
    for (std::size_t i = 0; same && i < inputs.size(); ++i)
      same = to_string(s.sharding.inputs[i]) == inputs[i];
    if (same) return s;
  }
  FAIL("no strategy with those input specs");
  return all.front();
}

}  // namespace

TEST_CASE("einsum strategies: the closed-form count on 1-D, 2-D and 3-D meshes",
          "[search][strategy]") {
  Matmul m(8, 8, 8, 8);  // every extent divisible by every product of axis sizes below
  const DeviceMesh meshes[] = {DeviceMesh{{"x", 2}}, DeviceMesh{{"dp", 2}, {"tp", 4}},
                               DeviceMesh{{"x", 2}, {"y", 2}, {"z", 2}}};
  for (const DeviceMesh& mesh : meshes) {
    INFO(mesh);
    const auto all = enumerate_strategies(m.g, m.op, mesh);
    REQUIRE(static_cast<std::int64_t>(all.size()) ==
            assignment_count(4, static_cast<std::int64_t>(mesh.num_axes())));
  }
  // L = 4 letters, m = 3 axes: 1 + 3·4 + 3·4·5 + 4·5·6 = 193.
  REQUIRE(assignment_count(4, 3) == 193);
  // Attention scores: five letters (b, n, q, d, k).
  Graph g;
  const TensorId q = g.input({{"b", 8}, {"n", 8}, {"q", 8}, {"d", 8}}, DType::bf16);
  (void)g.einsum("bnqd,bnkd->bnqk", q, q);
  const DeviceMesh mesh{{"x", 2}, {"y", 2}, {"z", 2}};
  REQUIRE(enumerate_strategies(g, OpId{0}, mesh).size() == 1 + 3 * 5 + 3 * 5 * 6 + 5 * 6 * 7);
}

TEST_CASE("einsum strategies equal brute force over every pair of operand specs",
          "[search][strategy]") {
  // Uneven extents on purpose (b = 2, o = 6 with a 4-way axis): splits that do not divide are
  // skipped.
  Matmul m(2, 4, 8, 6);
  for (const DeviceMesh& mesh :
       {DeviceMesh{{"dp", 2}, {"tp", 4}}, DeviceMesh{{"x", 2}, {"y", 2}, {"z", 2}}}) {
    INFO(mesh);
    std::set<std::string> brute;
    for (const ShardingSpec& sx : enumerate_specs(m.g.tensor(m.x).shape, mesh)) {
      for (const ShardingSpec& sw : enumerate_specs(m.g.tensor(m.w).shape, mesh)) {
        try {
          const ShardingSpec out = einsum_output_spec(m.g, m.op, {sx, sw}, mesh);
          brute.insert(key({.inputs = {sx, sw}, .output = out}));
        } catch (const Error&) {  // a letter split two ways or an axis on two letters
        }
      }
    }
    std::set<std::string> enumerated;
    for (const Strategy& s : enumerate_strategies(m.g, m.op, mesh)) {
      REQUIRE(enumerated.insert(key(s.sharding)).second);  // no duplicates
    }
    REQUIRE(enumerated == brute);
  }
}

TEST_CASE(
    "einsum strategies: exact division of FLOPs, gradient specs, the data-parallel all-reduce",
    "[search][strategy]") {
  Matmul m(4, 8, 16, 32);
  const DeviceMesh mesh{{"dp", 2}, {"tp", 4}};
  const OpCost global = op_cost(m.g, m.op);
  const auto all = enumerate_strategies(m.g, m.op, mesh);
  for (const Strategy& s : all) {
    INFO(to_string(s));
    // Every letter's split factor multiplies out: the product over letters is the product of the
    // used axes' sizes; per-device FLOPs times it is the global count.
    std::int64_t used = 1;
    for (const ShardingSpec& in : s.sharding.inputs) {
      for (const AxisList& d : in.dims()) used *= split_factor(d, mesh);
    }
    // b, s, i carried by X; o by W (i counted twice: divide it out once).
    used /= split_factor(s.sharding.inputs[1].dims()[0], mesh);
    REQUIRE(s.cost.flops_forward * used == global.flops_forward);
    REQUIRE(s.cost.flops_backward() * used == global.flops_backward());
  }
  // Data parallel: b over dp. The weight's gradient is Partial(dp): one all-reduce of the local
  // weight gradient (16·32 bf16) over dp, which is the data-parallel gradient all-reduce.
  const Strategy& dp = find(all, {"S(dp),R,R", "R,R"});
  REQUIRE(to_string(dp.sharding.output) == "S(dp),R,R");
  REQUIRE(to_string(dp.gradients[1]) == "R,R|P(dp)");
  REQUIRE(to_string(dp.gradients[0]) == "S(dp),R,R");
  REQUIRE(dp.gradient_sync.size() == 1);
  REQUIRE(dp.gradient_sync[0].kind == Collective::all_reduce);
  REQUIRE(dp.gradient_sync[0].axis == AxisName("dp"));
  REQUIRE(dp.gradient_sync[0].bytes == 16 * 32 * 2);
  // Column parallel (o over tp): the input gradient is Partial(tp), Megatron's backward all-reduce.
  const Strategy& col = find(all, {"S(dp),R,R", "R,S(tp)"});
  REQUIRE(to_string(col.gradients[0]) == "S(dp),R,R|P(tp)");
  REQUIRE(to_string(col.gradients[1]) == "R,S(tp)|P(dp)");
  // Row parallel (i over tp): the output is Partial(tp); the gradients are not.
  const Strategy& row = find(all, {"R,R,S(tp)", "S(tp),R"});
  REQUIRE(to_string(row.sharding.output) == "R,R,R|P(tp)");
  REQUIRE(to_string(row.gradients[0]) == "R,R,S(tp)");
  REQUIRE(row.gradient_sync.empty());
  // Memory: parameters, gradients and mixed-precision AdamW states (12 bytes per element, ZeRO
  // §3.1).
  REQUIRE(row.memory.parameters == 16 * 32 / 4 * 2);
  REQUIRE(row.memory.gradients == 16 * 32 / 4 * 2);
  REQUIRE(row.memory.optimizer == 16 * 32 / 4 * 12);
  REQUIRE(row.memory.activations == 4 * 8 * 16 / 4 * 2);  // X, split on i
  // Sequence split over both axes in either order: both orders are strategies.
  (void)find(all, {"R,S(dp,tp),R", "R,R"});
  (void)find(all, {"R,S(tp,dp),R", "R,R"});
}

TEST_CASE("elementwise, reduction and layernorm strategies", "[search][strategy]") {
  Graph g;
  const TensorId x = g.input({{"b", 4}, {"s", 8}, {"h", 16}}, DType::bf16);
  const TensorId gamma = g.parameter({{"h", 16}}, DType::bf16);
  const TensorId beta = g.parameter({{"h", 16}}, DType::bf16);
  (void)g.gelu(x);                       // op 0
  (void)g.add(x, x);                     // op 1
  (void)g.softmax(x, 2, Masking::none);  // op 2
  (void)g.layernorm(x, gamma, beta, 2);  // op 3
  (void)g.bias(x, gamma);                // op 4
  const DeviceMesh mesh{{"dp", 2}, {"tp", 2}};
  const TensorShape& xs = g.tensor(x).shape;
  const auto plain = enumerate_specs(xs, mesh);
  const auto with_partial = enumerate_specs(xs, mesh, {.partial = PartialSpecs::include});

  // GELU refuses Partial input; add passes it through.
  const auto gelu = enumerate_strategies(g, OpId{0}, mesh);
  REQUIRE(gelu.size() == plain.size());
  for (const Strategy& s : gelu) REQUIRE_FALSE(s.sharding.inputs[0].is_partial());
  REQUIRE(enumerate_strategies(g, OpId{1}, mesh).size() == with_partial.size());

  // Softmax: the reduced dim unsplit.
  std::size_t unsplit = 0;
  for (const ShardingSpec& s : plain) unsplit += s.dims()[2].empty() ? 1 : 0;
  REQUIRE(enumerate_strategies(g, OpId{2}, mesh).size() == unsplit);

  // Layernorm: the plain ones, then the distributed ones with the hidden dim split.
  const auto ln = enumerate_strategies(g, OpId{3}, mesh);
  REQUIRE(ln.size() == plain.size());
  std::size_t distributed = 0;
  for (const Strategy& s : ln) {
    INFO(to_string(s));
    const AxisList& split = s.sharding.inputs[0].dims()[2];
    if (s.kind != StrategyKind::distributed_layernorm) {
      REQUIRE(split.empty());
      REQUIRE(s.forward.empty());
      continue;
    }
    ++distributed;
    REQUIRE(s.sharding.variant == OpVariant::distributed_statistics);
    REQUIRE(s.sharding.inputs[1].dims()[0] == split);
    // Forward: Σx and Σx² per row; backward: Σ dy·γ and Σ dy·γ·x̂ per row; 2 fp32 each, per axis.
    const std::int64_t rows = 4 * 8 / num_shards(s.sharding.inputs[0], mesh, TensorDim{0}) /
                              num_shards(s.sharding.inputs[0], mesh, TensorDim{1});
    REQUIRE(s.forward.size() == split.size());
    REQUIRE(s.backward.size() == split.size());
    for (std::size_t k = 0; k < split.size(); ++k) {
      REQUIRE(s.forward[k].kind == Collective::all_reduce);
      REQUIRE(s.forward[k].axis == split[k]);
      REQUIRE(s.forward[k].bytes == rows * 2 * 4);
      REQUIRE(s.backward[k].bytes == rows * 2 * 4);
    }
  }
  REQUIRE(distributed == plain.size() - unsplit);
  // A batch split makes gamma's gradient Partial(dp): its all-reduce is the data-parallel one.
  const Strategy& dp = find(ln, {"S(dp),R,R", "R", "R"});
  REQUIRE(to_string(dp.gradients[1]) == "R|P(dp)");
  REQUIRE(dp.gradient_sync.size() == 2);
  REQUIRE(dp.gradient_sync[0].bytes == 16 * 2);

  // Bias: split like x's trailing dims; its gradient Partial over the leading dims' axes.
  const auto bias = enumerate_strategies(g, OpId{4}, mesh);
  REQUIRE(bias.size() == plain.size());
  const Strategy& b = find(bias, {"S(dp),R,S(tp)", "S(tp)"});
  REQUIRE(to_string(b.gradients[1]) == "S(tp)|P(dp)");
}

TEST_CASE("fused attention: batch, heads, and the query sequence with K and V gathered",
          "[search][strategy]") {
  Graph g;
  const std::int64_t B = 2, a = 4, S = 16, d = 8;
  const TensorId q = g.input({{"b", B}, {"heads", a}, {"s", S}, {"d", d}}, DType::bf16);
  (void)g.fused_attention(q, q, q, 0.5, Masking::causal, 0.1);
  const DeviceMesh mesh{{"x", 2}, {"y", 4}};
  const OpCost global = op_cost(g, OpId{0});
  const auto all = enumerate_strategies(g, OpId{0}, mesh);
  std::size_t head_dim_unsplit = 0;
  for (const ShardingSpec& s : enumerate_specs(g.tensor(q).shape, mesh))
    head_dim_unsplit += s.dims()[3].empty() ? 1 : 0;
  REQUIRE(all.size() == head_dim_unsplit);
  for (const Strategy& s : all) {
    INFO(to_string(s));
    const ShardingSpec& spec = s.sharding.inputs[0];
    // Every device computes its queries against all S keys: FLOPs divide by the split factors.
    REQUIRE(s.cost.flops_forward * num_distinct_slices(spec, mesh) == global.flops_forward);
    REQUIRE(s.cost.flops_backward() * num_distinct_slices(spec, mesh) == global.flops_backward());
    const AxisList& seq = spec.dims()[2];
    REQUIRE((s.kind == StrategyKind::sequence_attention) == !seq.empty());
    if (seq.empty()) {
      REQUIRE(s.forward.empty());
      continue;
    }
    // K and V: one all-gather each per axis (innermost first), S = the gathered size.
    const std::int64_t local = num_distinct_slices(spec, mesh);
    const std::int64_t kv_local = B * a * S * d * 2 / local;
    REQUIRE(s.forward.size() == 2 * seq.size());
    REQUIRE(s.forward[seq.size() - 1].bytes == kv_local * split_factor(seq, mesh));
    REQUIRE(s.forward[0].axis == seq.back());
    // Backward: gather K and V again, then reduce-scatter dK and dV.
    std::size_t rs = 0;
    for (const CollectiveCall& c : s.backward) rs += c.kind == Collective::reduce_scatter ? 1 : 0;
    REQUIRE(rs == 2 * seq.size());
  }
}

TEST_CASE("embedding and cross-entropy: vocab-parallel and token splits", "[search][strategy]") {
  Graph g;
  const std::int64_t B = 4, S = 8, V = 64, H = 16;
  const TensorId ids = g.input({{"batch", B}, {"seq", S}}, DType::fp32, TensorKind::index);
  const TensorId table = g.parameter({{"vocab", V}, {"hidden", H}}, DType::bf16);
  const TensorId e = g.gather(table, ids);                    // op 0
  const TensorId logits = g.einsum("bsh,vh->bsv", e, table);  // op 1
  (void)g.softmax_cross_entropy(logits, ids);                 // op 2
  const DeviceMesh mesh{{"dp", 2}, {"tp", 4}};

  const auto gather = enumerate_strategies(g, OpId{0}, mesh);
  const Strategy& vocab = find(gather, {"S(tp),R", "S(dp),R"});
  REQUIRE(to_string(vocab.sharding.output) == "S(dp),R,R|P(tp)");
  REQUIRE(to_string(vocab.gradients[0]) == "S(tp),R|P(dp)");
  for (const Strategy& s : gather)
    REQUIRE_FALSE(detail::shares_axis(s.sharding.inputs[0], s.sharding.inputs[1]));

  const auto ce = enumerate_strategies(g, OpId{2}, mesh);
  REQUIRE(ce.size() == enumerate_specs(g.tensor(logits).shape, mesh).size());
  const Strategy& vp = find(ce, {"S(dp),R,S(tp)", "S(dp),R"});
  REQUIRE(to_string(vp.sharding.output) == "|P(dp)");
  // Megatron-LM's vocab-parallel cross-entropy: a MAX all-reduce of one fp32 per token and a SUM
  // all-reduce of two (target logit, Σ exp) over tp; nothing in backward.
  const std::int64_t tokens = B * S / 2;
  REQUIRE(vp.forward.size() == 2);
  REQUIRE(vp.forward[0].bytes == tokens * 4);
  REQUIRE(vp.forward[1].bytes == tokens * 8);
  REQUIRE(vp.forward[1].axis == AxisName("tp"));
  REQUIRE(vp.backward.empty());
  REQUIRE(find(ce, {"S(dp),S(tp),R", "S(dp),S(tp)"}).forward.empty());
}

TEST_CASE("views keep or move a split, a hidden split becomes a heads split",
          "[search][strategy]") {
  Graph g;
  const TensorId x = g.input({{"b", 2}, {"s", 8}, {"f", 3 * 16}}, DType::bf16);
  const TensorId q = g.split_heads(x, 3, 0, 4);  // op 0: (2, 4, 8, 4)
  (void)g.merge_heads(q, "hidden");              // op 1: (2, 8, 16)
  const DeviceMesh mesh{{"dp", 2}, {"tp", 4}};
  const auto split = enumerate_strategies(g, OpId{0}, mesh);
  REQUIRE(to_string(find(split, {"S(dp),R,S(tp)"}).sharding.output) == "S(dp),S(tp),R,R");
  REQUIRE(to_string(find(split, {"R,S(tp),R|P(dp)"}).sharding.output) == "R,R,S(tp),R|P(dp)");
  const auto merge = enumerate_strategies(g, OpId{1}, mesh);
  REQUIRE(to_string(find(merge, {"R,S(tp),S(dp),R"}).sharding.output) == "R,S(dp),S(tp)");
  for (const Strategy& s : merge) REQUIRE(s.sharding.inputs[0].dims()[3].empty());
  // Views move no data: the output is split over as many devices as the input.
  for (const Strategy& s : split) {
    REQUIRE(num_distinct_slices(s.sharding.inputs[0], mesh) ==
            num_distinct_slices(s.sharding.output, mesh));
  }
}

TEST_CASE("strategy_time: roofline and α-β collectives written out", "[search][strategy][cost]") {
  Matmul m(8, 2048, 12288, 12288);
  const DeviceMesh mesh{{"dp", 2}, {"tp", 4}};
  const HardwareProfile hw = hardware::h100();
  const Strategy s = make_strategy(m.g, m.op,
                                   {.inputs = {parse_spec("S(dp),R,R"), parse_spec("R,S(tp)")},
                                    .output = parse_spec("S(dp),R,S(tp)")},
                                   mesh);
  const StrategyTime t = strategy_time(s, mesh, hw);
  // A large GEMM is compute-bound: FLOPs over the bf16 peak times cuBLAS's efficiency.
  const double flops = 2.0 * 4 * 2048 * 12288 * (12288 / 4);
  REQUIRE(t.compute_forward_s == Approx(flops / (989e12 * 0.80)).epsilon(1e-12));
  REQUIRE(t.compute_backward_s == Approx(2 * flops / (989e12 * 0.80)).epsilon(1e-12));
  REQUIRE(t.comm_forward_s == 0.0);
  // The weight gradient's all-reduce over dp (n = 2, NVLink 370 GB/s, 3.4 µs per hop):
  // 2(n-1)·α + 2(n-1)/n · S/B with S = 12288·3072 bf16.
  const double S = 12288.0 * 3072 * 2;
  REQUIRE(t.comm_backward_s == Approx(2 * 3.4e-6 + 1.0 * S / 370e9).epsilon(1e-12));
  REQUIRE(s.comm_bytes() == static_cast<std::int64_t>(S));
  // A profile's fixed cost per op pass adds once to the forward and once to the backward.
  HardwareProfile slow = hw;
  slow.op_overhead = 5e-6;
  const StrategyTime o = strategy_time(s, mesh, slow);
  REQUIRE(o.compute_forward_s == Approx(t.compute_forward_s + 5e-6).epsilon(1e-12));
  REQUIRE(o.compute_backward_s == Approx(t.compute_backward_s + 5e-6).epsilon(1e-12));
  REQUIRE(o.comm_backward_s == t.comm_backward_s);
}

TEST_CASE("evaluate_assignment on one device equals the unsharded profile, group by group",
          "[search][evaluate]") {
  // The schedule walk of profile/schedule.hpp is the reference: with every op replicated on a
  // one-device mesh, the saved bytes and FLOPs per group must be the profiler's, and nothing moves.
  // The profiler counts dropout masks as stored (1 byte per element, Korthikanti et al. 2022);
  // priced as regenerated (the runtime's and the search's default) a group saves exactly those
  // bytes less: one per element of each of its dropout ops.
  for (const AttentionKind kind : {AttentionKind::materialized, AttentionKind::fused}) {
    const ProfileOptions options{.batch = 2, .attention = kind};
    const Graph g = build_gpt(
        {.name = "small", .layers = 2, .hidden = 64, .heads = 4, .vocab = 96, .seq = 32}, options);
    const DeviceMesh mesh{{"x", 1}};
    std::vector<OpSharding> shardings;
    for (std::size_t k = 0; k < g.num_ops(); ++k) {
      const auto all = enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh);
      shardings.push_back(all.front().sharding);  // the first is the all-replicated one
      for (const ShardingSpec& in : all.front().sharding.inputs) REQUIRE(in.is_replicated());
    }
    const AssignmentCost cost =
        evaluate_assignment(g, mesh, hardware::h100(), shardings,
                            {.strategy = {.dropout_masks = DropoutMasks::stored}});
    const AssignmentCost regenerated = evaluate_assignment(g, mesh, hardware::h100(), shardings);
    const ModelProfile profile = profile_graph(g, options);
    REQUIRE(cost.groups.size() == profile.layers.size());
    REQUIRE(regenerated.groups.size() == profile.layers.size());
    std::int64_t all_masks = 0;
    for (std::size_t i = 0; i < profile.layers.size(); ++i) {
      INFO(profile.layers[i].name);
      REQUIRE(cost.groups[i].saved_bytes == profile.layers[i].saved_bytes);
      std::int64_t masks = 0;
      for (std::int32_t k = g.groups()[i].first_op; k < g.groups()[i].end_op; ++k) {
        const Op& op = g.op(OpId{k});
        if (op.kind == OpKind::dropout && op.probability > 0)
          masks += g.tensor(op.output).shape.numel();
      }
      all_masks += masks;
      REQUIRE(regenerated.groups[i].saved_bytes == profile.layers[i].saved_bytes - masks);
      REQUIRE(cost.groups[i].flops_forward == profile.layers[i].flops_forward);
      REQUIRE(cost.groups[i].flops_backward == profile.layers[i].flops_backward());
      REQUIRE(cost.groups[i].collectives.empty());
    }
    REQUIRE(cost.flops_forward == profile.flops.forward);
    REQUIRE(all_masks > 0);  // the graph has dropout (ProfileOptions' 0.1)
  }
}

TEST_CASE("op_cost: the communicating variants are named, never accepted by accident",
          "[search][op]") {
  Graph g;
  const TensorId x = g.input({{"b", 4}, {"s", 8}, {"h", 16}}, DType::bf16);
  const TensorId gamma = g.parameter({{"h", 16}}, DType::bf16);
  const TensorId beta = g.parameter({{"h", 16}}, DType::bf16);
  (void)g.layernorm(x, gamma, beta, 2);  // op 0
  const TensorId q = g.input({{"b", 2}, {"heads", 4}, {"s", 8}, {"d", 4}}, DType::bf16);
  (void)g.fused_attention(q, q, q, 0.5, Masking::causal, 0.0);  // op 1
  (void)g.gelu(x);                                              // op 2
  const DeviceMesh mesh{{"tp", 4}};
  const ShardingSpec hs = parse_spec("R,R,S(tp)");
  const ShardingSpec p = parse_spec("S(tp)");
  REQUIRE_THROWS_WITH(op_cost(g, OpId{0}, {.inputs = {hs, p, p}, .output = hs}, mesh),
                      Catch::Contains("OpVariant::distributed_statistics"));
  const OpCost ln = op_cost(
      g, OpId{0},
      {.inputs = {hs, p, p}, .output = hs, .variant = OpVariant::distributed_statistics}, mesh);
  REQUIRE(ln.flops_forward * 4 == op_cost(g, OpId{0}).flops_forward);
  REQUIRE_THROWS_WITH(op_cost(g, OpId{0},
                              {.inputs = {hs, ShardingSpec::replicated(1), p},
                               .output = hs,
                               .variant = OpVariant::distributed_statistics},
                              mesh),
                      Catch::Contains("gamma and beta must be split"));
  const ShardingSpec seq = parse_spec("R,R,S(tp),R");
  REQUIRE_THROWS_WITH(op_cost(g, OpId{1}, {.inputs = {seq, seq, seq}, .output = seq}, mesh),
                      Catch::Contains("OpVariant::gathered_kv"));
  const OpCost fa =
      op_cost(g, OpId{1},
              {.inputs = {seq, seq, seq}, .output = seq, .variant = OpVariant::gathered_kv}, mesh);
  REQUIRE(fa.flops_forward * 4 == op_cost(g, OpId{1}).flops_forward);
  REQUIRE(fa.temp_bytes == 4 * (2 * 4 * 8 * 4 * 2));  // gathered K, V and full dK, dV, bf16
  const ShardingSpec r = ShardingSpec::replicated(3);
  REQUIRE_THROWS_WITH(
      op_cost(g, OpId{2}, {.inputs = {r}, .output = r, .variant = OpVariant::gathered_kv}, mesh),
      Catch::Contains("layernorm and fused attention only"));
}
