// Typed layers and Sequential: the chain builds the same graph as the builder functions, and the
// typed GPT agrees with the run-time one.
#include <carto/layers.hpp>
#include <catch2/catch.hpp>

using namespace carto;

namespace {
using B = Dim<"batch", 2>;
using S = Dim<"seq", 32>;
using H = Dim<"hidden", 64>;
using X = Tensor<DType::bf16, Shape<B, S, H>>;
using F = Tensor<DType::bf16, Shape<B, S, Dim<"ffn", 256>>>;

using Block = Sequential<LayerNorm<X>, MultiHeadAttention<X, 4>, LayerNorm<X>,
                         Linear<X, Dim<"ffn", 256>>, Gelu<F>, Linear<F, H>, Dropout<X>>;

struct Tiny {
  static constexpr std::int64_t layers = 2, hidden = 64, heads = 4, vocab = 100, seq = 32;
};
constexpr GptConfig kTiny{
    .name = "tiny", .layers = 2, .hidden = 64, .heads = 4, .vocab = 100, .seq = 32};
}  // namespace

TEST_CASE("Sequential checks and chains typed layers", "[layers][sequential]") {
  STATIC_REQUIRE(std::is_same_v<Block::input_type, X>);
  STATIC_REQUIRE(std::is_same_v<Block::output_type, X>);
  STATIC_REQUIRE(std::is_same_v<Linear<X, Dim<"ffn", 256>>::output_type, F>);
  // Parameters: 2 layernorms (2·64 each), QKV 64·192 + 192, projection 64·64 + 64, MLP 64·256 +
  // 256 + 256·64 + 64.
  constexpr std::int64_t expected =
      4 * 64 + 64 * 192 + 192 + 64 * 64 + 64 + 64 * 256 + 256 + 256 * 64 + 64;
  STATIC_REQUIRE(Block{}.graph().num_params() == expected);

  // Options reach the layers through designated initializers.
  const Sequential<Linear<X, H, Bias::none>, Dropout<X>> no_drop{Linear<X, H, Bias::none>{},
                                                                 Dropout<X>{.probability = 0.0}};
  REQUIRE(no_drop.graph().num_ops() == 1);
  REQUIRE(no_drop.graph().num_params() == 64 * 64);
}

TEST_CASE("the typed transformer block equals the builder, Gpt<Config> equals profile_gpt",
          "[layers][gpt]") {
  Graph g;
  const TensorId x = g.input(X::shape_type::static_value(), DType::bf16);
  (void)transformer_block(g, x, {.heads = 4});
  const Sequential<TransformerBlock<X, 4>> typed{};
  REQUIRE(typed.graph().num_ops() == g.num_ops());
  REQUIRE(typed.graph().num_params() == g.num_params());

  STATIC_REQUIRE(Gpt<Tiny>::profile().params == GptOf<kTiny>::profile().params);
  REQUIRE(Gpt<Tiny>::profile({.batch = 2}).flops.matmul_step ==
          profile_gpt(kTiny, {.batch = 2}).flops.matmul_step);
  // 12lh² + 13lh + (V + s)h + 2h.
  STATIC_REQUIRE(GptOf<kTiny>::profile().params ==
                 12 * 2 * 64 * 64 + 13 * 2 * 64 + (100 + 32) * 64 + 2 * 64);
}
