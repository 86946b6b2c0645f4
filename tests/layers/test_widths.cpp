// Widths a layer multiplies out of its input's hidden size (attention's fused QKV 3H, the MLP's
// ffn_ratio·H) are checked: around the largest hidden size whose width fits in int64, a layer
// refuses exactly the sizes whose product, multiplied out with an overflow check here, passes
// 2^63-1, naming the width; below it the width is the product, never a wrapped value.
#include <carto/layers.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

using namespace carto;

namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

// Builds `layer` on (1, 1, hidden) for each hidden within `reach` of the largest whose width
// factor·hidden fits: it must fail naming `width_name` exactly when the product overflows, and
// otherwise make a width dim of the product (when it gets that far). Returns the refusals.
template <class Layer>
int refusals_around_edge(std::int64_t factor, std::int64_t reach, std::string_view width_name,
                         Layer&& layer) {
  int refused = 0;
  for (std::int64_t hidden = kMax / factor - reach; hidden <= kMax / factor + reach; ++hidden) {
    std::int64_t width = 0;
    const bool wraps = __builtin_mul_overflow(factor, hidden, &width);
    INFO("factor " << factor << ", hidden " << hidden);
    Graph g{};
    const TensorId x = g.input({{"batch", 1}, {"seq", 1}, {"hidden", hidden}}, DType::bf16);
    std::string error;
    try {
      layer(g, x);
    } catch (const Error& e) {
      error = e.what();
    }
    if (wraps) {
      ++refused;
      REQUIRE_THAT(error, Catch::Contains(std::string(width_name)) && Catch::Contains("overflows"));
      continue;
    }
    REQUIRE(error.find(width_name) == std::string::npos);
    // The first tensor whose last dim is not "hidden" is the wide one the layer made.
    for (const TensorInfo& t : g.tensors()) {
      const DimExtent last = t.shape.dims()[t.shape.rank() - 1];
      if (last.name == DimName("hidden")) continue;
      REQUIRE(last.extent == width);
      break;
    }
  }
  return refused;
}

}  // namespace

TEST_CASE("attention's fused QKV width 3H is checked, not wrapped", "[layers][overflow]") {
  REQUIRE(refusals_around_edge(3, 3, "the fused QKV width 3 * hidden of attention",
                               [](Graph& g, TensorId x) {
                                 return multi_head_attention(g, x, {.heads = 1, .dropout = 0.0});
                               }) == 3);
}

TEST_CASE("the MLP's width ffn_ratio * H is checked, not wrapped", "[layers][overflow]") {
  for (const std::int64_t ratio : {std::int64_t{4}, std::int64_t{7}, std::int64_t{1} << 20}) {
    REQUIRE(refusals_around_edge(ratio, 2, "the MLP width ffn_ratio * hidden",
                                 [ratio](Graph& g, TensorId x) {
                                   return mlp(g, x, {.ffn_ratio = ratio, .dropout = 0.0});
                                 }) == 2);
  }
}

TEST_CASE("grouped-query attention's fused QKV width is checked, not wrapped",
          "[layers][overflow][llama]") {
  // One head and one key/value head: the fused QKV is (1 + 2) * head_dim = 3 * hidden wide.
  REQUIRE(refusals_around_edge(3, 3, "the fused QKV width (heads + 2 kv_heads) * head_dim",
                               [](Graph& g, TensorId x) {
                                 return grouped_query_attention(
                                     g, x,
                                     {.heads = 1, .kv_heads = 1, .kind = AttentionKind::fused});
                               }) == 3);
}

TEST_CASE("SwiGLU's fused gate/up width 2 * ffn_hidden is checked, not wrapped",
          "[layers][overflow][llama]") {
  for (const std::int64_t ffn : {kMax / 2 - 1, kMax / 2, kMax / 2 + 1, kMax}) {
    INFO("ffn_hidden " << ffn);
    Graph g{};
    const TensorId x = g.input({{"batch", 1}, {"seq", 1}, {"hidden", 1}}, DType::bf16);
    std::string error;
    try {
      (void)swiglu(g, x, {.ffn_hidden = ffn});
    } catch (const Error& e) {
      error = e.what();
    }
    std::int64_t width = 0;
    if (__builtin_mul_overflow(std::int64_t{2}, ffn, &width)) {
      REQUIRE_THAT(error, Catch::Contains("the fused gate/up width 2 * ffn_hidden") &&
                              Catch::Contains("overflows"));
    } else {
      REQUIRE(error.find("gate/up width") == std::string::npos);
      REQUIRE(g.tensors()[1].shape.dims()[1].extent == width);  // the (hidden, 2f) weight
    }
  }
}
