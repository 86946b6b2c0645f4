// Per-op costs, unsharded and per sharding strategy. The defining equation (DESIGN.md §3, STYLE.md
// 11): per-device numbers are the global ones divided by the split factors, exactly, so the
// per-device FLOPs times the number of distinct shards equal the unsharded FLOPs.
#include <carto/profile.hpp>
#include <carto/spec.hpp>
#include <catch2/catch.hpp>

using namespace carto;

namespace {

struct Matmul {
  Graph g;
  OpId op{0};
  // Y[b,s,o] = X[b,s,i] W[i,o] with X (4, 6, 8) and W (8, 10), bf16.
  Matmul() {
    const TensorId x = g.input({{"b", 4}, {"s", 6}, {"i", 8}}, DType::bf16);
    const TensorId w = g.parameter({{"i", 8}, {"o", 10}}, DType::bf16);
    (void)g.einsum("bsi,io->bso", x, w);
  }
};

}  // namespace

TEST_CASE("unsharded einsum: 2 FLOPs per multiply-add, each gradient the same again",
          "[profile][op]") {
  Matmul m;
  const OpCost c = op_cost(m.g, m.op);
  const std::int64_t macs = 4 * 6 * 8 * 10;
  REQUIRE(c.flops_forward == 2 * macs);
  REQUIRE(c.flops_backward_input == 2 * macs);   // dX = dY·Wᵀ
  REQUIRE(c.flops_backward_weight == 2 * macs);  // dW = Xᵀ·dY
  REQUIRE(c.matmul);
  REQUIRE(c.bytes_read == (4 * 6 * 8 + 8 * 10) * 2);
  REQUIRE(c.output_bytes == 4 * 6 * 10 * 2);
  REQUIRE(c.bytes_written == c.output_bytes);
  REQUIRE(c.saved_bytes == 4 * 6 * 8 * 2);  // X; the weight is live anyway
  REQUIRE(c.params == 80);
}

TEST_CASE("sharded einsum: FLOPs and bytes divide exactly for every valid strategy on a 2x2 mesh",
          "[profile][op][sharding]") {
  Matmul m;
  const DeviceMesh mesh{{"dp", 2}, {"tp", 2}};
  const OpCost global = op_cost(m.g, m.op);
  const TensorShape xs = m.g.tensor(TensorId{0}).shape;
  const TensorShape ws = m.g.tensor(TensorId{1}).shape;
  int valid = 0;
  int invalid = 0;
  int partial = 0;
  for (const ShardingSpec& sx : enumerate_specs(xs, mesh)) {
    for (const ShardingSpec& sw : enumerate_specs(ws, mesh)) {
      ShardingSpec out;
      try {
        out = einsum_output_spec(m.g, m.op, {sx, sw}, mesh);
      } catch (const Error&) {
        ++invalid;  // a letter split two ways, or one axis on two letters
        continue;
      }
      ++valid;
      const OpCost c = op_cost(m.g, m.op, OpSharding{.inputs = {sx, sw}, .output = out}, mesh);
      // Distinct shards of the computation: the product of the axes that split some letter
      // (b, s from X; i from X and W; o from W).
      std::int64_t shards = 1;
      for (const AxisList& axes : sx.dims()) shards *= split_factor(axes, mesh);
      shards *= split_factor(sw.dims()[1], mesh);
      INFO("X " << sx << "  W " << sw << "  Y " << out);
      REQUIRE(c.flops_forward * shards == global.flops_forward);
      REQUIRE(c.flops_backward_input * shards == global.flops_backward_input);
      REQUIRE(c.flops_backward_weight * shards == global.flops_backward_weight);
      if (shards == mesh.num_devices())
        REQUIRE(c.flops_forward * mesh.num_devices() == global.flops_forward);
      REQUIRE(c.bytes_read == (xs.numel() / num_distinct_slices(sx, mesh) +
                               ws.numel() / num_distinct_slices(sw, mesh)) *
                                  2);
      REQUIRE(c.output_bytes * num_distinct_slices(out, mesh) == global.output_bytes);
      // A split contracted letter makes the output Partial over its axes.
      REQUIRE(out.partial().size() == sw.dims()[0].size());
      if (out.is_partial()) ++partial;
    }
  }
  REQUIRE(valid > 20);
  REQUIRE(invalid > 0);
  REQUIRE(partial > 0);
}

TEST_CASE("Megatron layouts: column-parallel then row-parallel gives Partial(tp)",
          "[profile][op][sharding]") {
  Matmul m;
  const DeviceMesh mesh{{"dp", 2}, {"tp", 2}};
  const ShardingSpec column =
      einsum_output_spec(m.g, m.op, {parse_spec("S(dp),R,R"), parse_spec("R,S(tp)")}, mesh);
  REQUIRE(column == parse_spec("S(dp),R,S(tp)"));
  const ShardingSpec row =
      einsum_output_spec(m.g, m.op, {parse_spec("S(dp),R,S(tp)"), parse_spec("S(tp),R")}, mesh);
  REQUIRE(row == parse_spec("S(dp),R,R|P(tp)"));
  const OpCost c = op_cost(
      m.g, m.op, {.inputs = {parse_spec("S(dp),R,S(tp)"), parse_spec("S(tp),R")}, .output = row},
      mesh);
  REQUIRE(c.flops_forward * 4 == op_cost(m.g, m.op).flops_forward);

  REQUIRE_THROWS_WITH(
      einsum_output_spec(m.g, m.op, {parse_spec("R,R,S(tp)"), parse_spec("R,R")}, mesh),
      Catch::Contains("letter 'i' is split over (tp) in one operand and () in another"));
  REQUIRE_THROWS_WITH(op_cost(m.g, m.op,
                              {.inputs = {parse_spec("S(dp),R,S(tp)"), parse_spec("S(tp),R")},
                               .output = parse_spec("S(dp),R,R")},
                              mesh),
                      Catch::Contains("these inputs give the output spec 'S(dp),R,R|P(tp)'"));
}

TEST_CASE("non-einsum ops: rules per kind and exact division", "[profile][op][sharding]") {
  Graph g;
  const TensorId x = g.input({{"b", 4}, {"s", 6}, {"h", 8}}, DType::bf16);
  const TensorId gamma = g.parameter({{"h", 8}}, DType::bf16);
  const TensorId beta = g.parameter({{"h", 8}}, DType::bf16);
  (void)g.layernorm(x, gamma, beta, 2);  // op 0
  (void)g.dropout(x, 0.1);               // op 1
  (void)g.gelu(x);                       // op 2
  const DeviceMesh mesh{{"dp", 2}, {"tp", 2}};
  const ShardingSpec s = parse_spec("S(dp),S(tp),R");
  const ShardingSpec r = ShardingSpec::replicated(1);

  // Layernorm: 8 FLOPs per element forward; mean and rstd in fp32 (2 per row) saved with the input.
  const OpCost ln = op_cost(g, OpId{0}, {.inputs = {s, r, r}, .output = s}, mesh);
  REQUIRE(ln.flops_forward * 4 == 8 * 4 * 6 * 8);
  REQUIRE(ln.saved_bytes == (4 * 6 * 8 / 4) * 2 + 2 * (4 * 6 / 4) * 4);
  REQUIRE(op_cost(g, OpId{0}, LayerNormStats::ignored).saved_bytes == 4 * 6 * 8 * 2);
  REQUIRE_THROWS_WITH(
      op_cost(g, OpId{0},
              {.inputs = {parse_spec("R,R,S(tp)"), parse_spec("S(tp)"), parse_spec("S(tp)")},
               .output = parse_spec("R,R,S(tp)")},
              mesh),
      Catch::Contains("the reduced dim is split"));
  // Dropout keeps a 1-byte mask per element.
  REQUIRE(op_cost(g, OpId{1}, {.inputs = {s}, .output = s}, mesh).saved_bytes == 4 * 6 * 8 / 4);
  // GELU is nonlinear: a Partial input is refused.
  REQUIRE_THROWS_WITH(
      op_cost(g, OpId{2},
              {.inputs = {parse_spec("S(dp),R,R|P(tp)")}, .output = parse_spec("S(dp),R,R|P(tp)")},
              mesh),
      Catch::Contains("needs a non-Partial input"));
}
