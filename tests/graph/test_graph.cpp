// The op IR: einsum letters, output shapes, views aliasing storage, errors that name the problem.
#include <carto/graph.hpp>
#include <catch2/catch.hpp>

using namespace carto;

namespace {
constexpr TensorShape kX{{"batch", 2}, {"seq", 6}, {"hidden", 10}};
}  // namespace

TEST_CASE("einsum text is parsed into operands and contracted letters", "[graph][einsum]") {
  constexpr Einsum e = Einsum::parse("bsi,io->bso");
  STATIC_REQUIRE(e.inputs.size() == 2);
  STATIC_REQUIRE(e.output.size() == 3);
  STATIC_REQUIRE(e.contracted('i'));
  STATIC_REQUIRE(!e.contracted('o'));
  STATIC_REQUIRE(e.letters().size() == 4);
  REQUIRE_THROWS_WITH(Einsum::parse("bsi,io"), Catch::Contains("has no '->'"));
  REQUIRE_THROWS_WITH(Einsum::parse("bii,io->bo"), Catch::Contains("letter 'i' repeats"));
  REQUIRE_THROWS_WITH(Einsum::parse("bsi,io->bsz"), Catch::Contains("output letter 'z'"));
  REQUIRE_THROWS_WITH(Einsum::parse("bs1,io->bs"), Catch::Contains("not an index letter"));
}

TEST_CASE("einsum output shapes come from the letters, extents must agree", "[graph][einsum]") {
  constexpr auto shape = [] {
    Graph g;
    const TensorId x = g.input(kX, DType::bf16);
    const TensorId w = g.parameter({{"hidden", 10}, {"ffn", 14}}, DType::bf16);
    return g.tensor(g.einsum("bsi,io->bso", x, w)).shape;
  }();
  STATIC_REQUIRE(shape == TensorShape{{"batch", 2}, {"seq", 6}, {"ffn", 14}});

  Graph g;
  const TensorId x = g.input(kX, DType::bf16);
  const TensorId w = g.parameter({{"hidden", 12}, {"ffn", 14}}, DType::bf16);
  REQUIRE_THROWS_WITH(g.einsum("bsi,io->bso", x, w),
                      Catch::Contains("letter 'i' has extents 10 and 12"));
  REQUIRE_THROWS_WITH(g.einsum("bs,io->bso", x, w),
                      Catch::Contains("operand 0 has rank 3 but 2 letters"));
}

TEST_CASE("a residual branch: a tensor feeds two ops, views alias their input", "[graph]") {
  Graph g;
  const TensorId x = g.input(kX, DType::bf16);
  const TensorId gamma = g.parameter({{"hidden", 10}}, DType::bf16);
  const TensorId beta = g.parameter({{"hidden", 10}}, DType::bf16);
  const TensorId n = g.layernorm(x, gamma, beta, 2);  // (B, S, H)
  const TensorId y = g.add(x, g.gelu(n));             // (B, S, H)
  REQUIRE(g.num_ops() == 3);
  REQUIRE(g.tensor(y).producer == OpId{2});
  REQUIRE(g.num_params() == 20);

  const TensorId qkv = g.input({{"batch", 2}, {"seq", 6}, {"qkv", 30}}, DType::bf16);
  const TensorId k = g.split_heads(qkv, 3, 1, 5);  // (B, 5, S, 2)
  REQUIRE(g.tensor(k).shape ==
          TensorShape{{"batch", 2}, {"heads", 5}, {"seq", 6}, {"head_dim", 2}});
  REQUIRE(g.tensor(k).storage == qkv);
  const TensorId kt = g.transpose(k);  // (B, 5, 2, S)
  REQUIRE(g.tensor(kt).storage == qkv);
  REQUIRE(g.tensor(g.merge_heads(k, "hidden")).shape ==
          TensorShape{{"batch", 2}, {"seq", 6}, {"hidden", 10}});

  REQUIRE_THROWS_WITH(g.add(x, qkv), Catch::Contains("add needs equal shapes"));
  REQUIRE_THROWS_WITH(g.softmax(x, 3, Masking::causal), Catch::Contains("pick a dim below 3"));
  REQUIRE_THROWS_WITH(g.dropout(x, 1.0), Catch::Contains("[0, 1)"));
  REQUIRE_THROWS_WITH(g.split_heads(qkv, 3, 0, 4), Catch::Contains("divisible by parts*heads"));
}

TEST_CASE("groups name op ranges and must nest properly", "[graph]") {
  Graph g;
  const TensorId x = g.input(kX, DType::fp32);
  g.begin_group(LayerName("block.").append(11), GroupKind::transformer_block);
  (void)g.gelu(g.scale(x, 0.5));
  REQUIRE_THROWS_WITH(g.begin_group("other", GroupKind::layer),
                      Catch::Contains("'block.11' is still open"));
  g.end_group();
  REQUIRE(g.groups().size() == 1);
  REQUIRE(g.groups()[0].first_op == 0);
  REQUIRE(g.groups()[0].end_op == 2);
  REQUIRE(g.ops()[1].group == 0);
}
