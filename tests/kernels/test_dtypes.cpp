// Storage dtypes on the backend under test: forward kernels write every element of their outputs
// (poisoned with NaN first); the bit-exact parts of bf16 (conversion, fills, dropout masks); calls
// that mix fp32 and bf16 views against the all-fp32 call on the same values; and the dtypes a
// backend refuses, by name.
#include <bit>
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/kernel_support.hpp"

using namespace carto;
using namespace carto::test;

namespace {

// A tensor of `dtype` filled with NaN: any element a kernel leaves unwritten (or reads before it
// writes, as a forward must not) stays NaN.
DeviceTensor poisoned(Backend& backend, const TensorShape& shape, DType dtype = DType::fp32) {
  DeviceTensor t(backend, shape, dtype);
  backend.fill(t, std::numeric_limits<float>::quiet_NaN());
  return t;
}

std::int64_t count_nan(const DeviceTensor& t) {
  std::int64_t n = 0;
  for (const float v : t.download()) n += std::isnan(v) ? 1 : 0;
  return n;
}

#define CARTO_CHECK_WRITTEN(what, tensor) \
  do {                                    \
    INFO(what << ": elements left NaN");  \
    CHECK(count_nan(tensor) == 0);        \
  } while (false)

}  // namespace

TEST_CASE("forward kernels overwrite every element of their outputs", "[kernels][poison]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  constexpr std::int64_t B = 2, A = 2, S = 5, D = 4, C = 12, V = 10;
  const TensorShape xs{{"b", B}, {"s", S}, {"h", C}}, cs{{"h", C}}, rows{{"b", B}, {"s", S}};
  const std::vector<float> x = random_input(xs.numel(), 700, dtype);
  DeviceTensor tx(backend, xs, x, dtype), tg(backend, cs, random_input(C, 701, dtype), dtype),
      tb(backend, cs, random_input(C, 702, dtype), dtype);

  {
    const TensorShape ws{{"h", C}, {"o", 7}}, ys{{"b", B}, {"s", S}, {"o", 7}};
    DeviceTensor w(backend, ws, random_input(ws.numel(), 703, dtype), dtype);
    DeviceTensor y = poisoned(backend, ys, dtype);
    backend.gemm(reshaped(tx.view(), matrix_shape(xs)), w, reshaped(y.view(), matrix_shape(ys)),
                 {.beta = 0.0f});
    CARTO_CHECK_WRITTEN("gemm c (beta 0)", y);
  }
  {
    DeviceTensor y = poisoned(backend, xs, dtype), mean = poisoned(backend, rows),
                 rstd = poisoned(backend, rows);
    backend.layernorm_forward(tx, tg, tb, y, mean, rstd, {});
    CARTO_CHECK_WRITTEN("layernorm y", y);
    CARTO_CHECK_WRITTEN("layernorm mean", mean);
    CARTO_CHECK_WRITTEN("layernorm rstd", rstd);
    DeviceTensor sums = poisoned(backend, {{"b", B}, {"s", S}, {"sums", 2}});
    backend.layernorm_partial_sums(tx, sums);
    CARTO_CHECK_WRITTEN("layernorm partial sums", sums);
    DeviceTensor y2 = poisoned(backend, xs, dtype), mean2 = poisoned(backend, rows),
                 rstd2 = poisoned(backend, rows);
    backend.layernorm_apply(tx, sums, C, tg, tb, y2, mean2, rstd2, {});
    CARTO_CHECK_WRITTEN("layernorm_apply y", y2);
    CARTO_CHECK_WRITTEN("layernorm_apply mean", mean2);
    CARTO_CHECK_WRITTEN("layernorm_apply rstd", rstd2);
  }
  {
    const TensorShape ps{{"b", B}, {"heads", A}, {"q", S}, {"k", S}};
    DeviceTensor in(backend, ps, random_input(ps.numel(), 704, dtype), dtype);
    DeviceTensor y = poisoned(backend, ps, dtype);
    backend.softmax_forward(in, y, {.scale = 0.5f, .masking = Masking::causal});
    CARTO_CHECK_WRITTEN("causal softmax y (masked keys included)", y);
  }
  {
    const TensorShape qs{{"b", B}, {"heads", A}, {"s", S}, {"d", D}};
    DeviceTensor q(backend, qs, random_input(qs.numel(), 705, dtype), dtype);
    DeviceTensor out = poisoned(backend, qs, dtype), lse = poisoned(backend, {{"r", B * A * S}});
    backend.attention_forward(q, q, q, out, lse,
                              {.scale = 0.5f,
                               .dropout = 0.3f,
                               .rng = {.seed = 3, .id = stream_id(RngPurpose::dropout, 1, 0)}});
    CARTO_CHECK_WRITTEN("attention out", out);
    CARTO_CHECK_WRITTEN("attention logsumexp", lse);
  }
  {
    DeviceTensor y = poisoned(backend, xs, dtype);
    backend.gelu_forward(tx, y);
    CARTO_CHECK_WRITTEN("gelu y", y);
    backend.fill(y, NAN);
    backend.dropout_forward(
        tx, y,
        {.probability = 0.4f, .rng = {.seed = 5, .id = stream_id(RngPurpose::dropout, 2, 0)}});
    CARTO_CHECK_WRITTEN("dropout y", y);
    backend.fill(y, NAN);
    backend.add(tx, tx, y);
    CARTO_CHECK_WRITTEN("add y", y);
    backend.fill(y, NAN);
    backend.scale(tx, 0.5f, y);
    CARTO_CHECK_WRITTEN("scale y", y);
    backend.fill(y, NAN);
    backend.bias_forward(tx, tb, y);
    CARTO_CHECK_WRITTEN("bias y", y);
  }
  {
    const TensorShape ts{{"vocab", V / 2}, {"hidden", C}};
    DeviceTensor table(backend, ts, random_input(ts.numel(), 706, dtype), dtype);
    const std::vector<std::int32_t> ids{1, 7, 3, 9, 5, 0, 6, 2, 8, 4};  // half outside the shard
    DeviceIds tids(backend, rows, ids);
    DeviceTensor out = poisoned(backend, xs, dtype);
    backend.embedding_forward(table, tids, out, {.vocab_offset = 5});
    CARTO_CHECK_WRITTEN("embedding out (tokens outside the shard included)", out);

    const TensorShape ls{{"b", B}, {"s", S}, {"vocab", V}};
    DeviceTensor logits(backend, ls, random_input(ls.numel(), 707, dtype), dtype);
    DeviceTensor loss = poisoned(backend, {}), lse = poisoned(backend, rows);
    backend.cross_entropy_forward(logits, tids, loss, lse, {});
    CARTO_CHECK_WRITTEN("cross-entropy loss", loss);
    CARTO_CHECK_WRITTEN("cross-entropy logsumexp", lse);
    const TensorShape half{{"b", B}, {"s", S}, {"vocab", V / 2}};
    DeviceTensor shard(backend, half, random_input(half.numel(), 708, dtype), dtype);
    DeviceTensor row_max = poisoned(backend, rows), sum_exp = poisoned(backend, rows),
                 target = poisoned(backend, rows);
    backend.cross_entropy_row_max(shard, row_max);
    backend.cross_entropy_sum_exp(shard, row_max, sum_exp);
    backend.cross_entropy_target_logit(shard, tids, target, {.vocab_offset = 5});
    CARTO_CHECK_WRITTEN("row_max", row_max);
    CARTO_CHECK_WRITTEN("sum_exp", sum_exp);
    CARTO_CHECK_WRITTEN("target_logit (targets outside the shard included)", target);
    DeviceTensor loss2 = poisoned(backend, {}), lse2 = poisoned(backend, rows);
    backend.cross_entropy_loss(row_max, sum_exp, target, loss2, lse2, {});
    CARTO_CHECK_WRITTEN("cross_entropy_loss loss", loss2);
    CARTO_CHECK_WRITTEN("cross_entropy_loss logsumexp", lse2);
  }
  {
    DeviceTensor y = poisoned(backend, xs, dtype);
    backend.fill_normal(y, 0.02f, {.seed = 1, .id = stream_id(RngPurpose::parameter_init, 1, 0)},
                        {});
    CARTO_CHECK_WRITTEN("fill_normal", y);
    for (const DType to : {DType::fp32, DType::bf16}) {
      DeviceTensor z = poisoned(backend, xs, to);
      backend.convert(tx, z);
      CARTO_CHECK_WRITTEN("convert to " << to, z);
    }
  }
}

TEST_CASE("convert fp32 -> bf16 -> fp32 rounds to nearest even, bit for bit",
          "[kernels][convert]") {
  Backend& backend = test_backend();
  INFO(test_backend_name());
  const auto from_bits = [](std::uint32_t b) { return std::bit_cast<float>(b); };
  std::vector<float> v = random_normal(1000, 720, 10.0f);
  // Ties (the dropped half exactly 0x8000) with an even and an odd kept bit, just below and above
  // them, the subnormals, the largest finite values, one that rounds to infinity, infinities, NaNs.
  for (const std::uint32_t b :
       {0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x3F808001u, 0xBF808000u, 0xBF818000u,
        0x00008000u, 0x00018000u, 0x00000001u, 0x807FFFFFu, 0x7F7F7FFFu, 0x7F7F8000u,
        0x7F7FFFFFu, 0xFF7F8000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u,
        0x7F800001u, 0x00000000u, 0x80000000u}) {
    v.push_back(from_bits(b));
  }
  const TensorShape s{{"n", static_cast<std::int64_t>(v.size())}};
  DeviceTensor f(backend, s, v), h(backend, s, DType::bf16), back(backend, s);
  backend.convert(f, h);
  backend.convert(h, back);
  const std::vector<float> got = back.download();
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float want = round_to_bf16(v[i]);
    if (std::isnan(want)) {
      // NaN stays a NaN with its sign (payload bits are the backend's).
      wrong += !std::isnan(got[i]) || std::signbit(got[i]) != std::signbit(want);
    } else {
      wrong += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want);
    }
  }
  CHECK(wrong == 0);
  CHECK(got[1000] == from_bits(0x3F800000u));  // tie, even kept bit: down
  CHECK(got[1001] == from_bits(0x3F820000u));  // tie, odd kept bit: up
  CHECK(std::isinf(got[1011]));                // 0x7F7F8000 rounds past the largest bf16

  // Accumulating conversions add in fp32 and round once: bf16 dst += fp32 src.
  const std::vector<float> a = rounded(DType::bf16, random_normal(257, 721));
  const std::vector<float> b = random_normal(257, 722);
  const TensorShape n{{"n", 257}};
  DeviceTensor dst(backend, n, a, DType::bf16), src(backend, n, b);
  backend.copy_box(src, {.offset = {0}, .extent = {257}}, dst, {0}, CopyMode::accumulate);
  const std::vector<float> sum = dst.download();
  wrong = 0;
  for (std::size_t i = 0; i < a.size(); ++i) wrong += sum[i] != round_to_bf16(a[i] + b[i]);
  CHECK(wrong == 0);
}

TEST_CASE("bf16 fills are the fp32 fills rounded once", "[kernels][convert]") {
  Backend& backend = test_backend();
  INFO(test_backend_name());
  const TensorShape global{{"in", 12}, {"out", 10}};
  const RngStream rng{.seed = 11, .id = stream_id(RngPurpose::parameter_init, 3, 0)};
  const ShardPlacement shard{.global_extents = {24, 10}, .offset = {12, 0}};
  DeviceTensor f(backend, global), h(backend, global, DType::bf16);
  backend.fill_normal(f, 0.02f, rng, shard);
  backend.fill_normal(h, 0.02f, rng, shard);
  CHECK(h.download() == rounded(DType::bf16, f.download()));
  backend.fill(h, 0.1f);
  CHECK(h.download() == std::vector<float>(120, round_to_bf16(0.1f)));
}

TEST_CASE("bf16 dropout drops exactly the elements fp32 dropout drops", "[kernels][dropout]") {
  Backend& backend = test_backend();
  INFO(test_backend_name());
  const TensorShape s{{"r", 7}, {"c", 300}};
  const std::vector<float> x = rounded(DType::bf16, random_normal(s.numel(), 730));
  const DropoutArgs args{.probability = 0.3f,
                         .rng = {.seed = 21, .id = stream_id(RngPurpose::dropout, 6, 2)},
                         .placement = {.global_extents = {9, 301}, .offset = {2, 1}}};
  DeviceTensor x32(backend, s, x), x16(backend, s, x, DType::bf16), y32(backend, s),
      y16(backend, s, DType::bf16);
  backend.dropout_forward(x32, y32, args);
  backend.dropout_forward(x16, y16, args);
  const std::vector<float> a = y32.download(), b = y16.download();
  std::int64_t wrong = 0, dropped = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    dropped += a[i] == 0.0f;
    wrong += (a[i] == 0.0f) != (b[i] == 0.0f) || b[i] != round_to_bf16(a[i]);
  }
  CHECK(wrong == 0);
  CHECK(dropped > 0);
}

TEST_CASE("calls mixing bf16 and fp32 views equal the fp32 call on the same values",
          "[kernels][mixed]") {
  Backend& backend = test_backend();
  INFO(test_backend_name());
  constexpr std::int64_t C = 24;
  const TensorShape xs{{"r", 6}, {"h", C}}, cs{{"h", C}}, rows{{"r", 6}};
  const DType h16 = DType::bf16;
  const std::vector<float> x = random_input(xs.numel(), 740, h16, 2.0f),
                           g = random_input(C, 741, h16), b = random_input(C, 742, h16),
                           dy = random_input(xs.numel(), 743, h16);
  // bf16 inputs, fp32 outputs: both calls compute in fp32 on the same values, so they agree to
  // within the difference of two fp32 evaluations of the same chain.
  const auto twice = [](std::int64_t chain, const std::vector<float>& ref) {
    return fp32_chain(2 * chain, max_abs(to_double(ref)));
  };
  DeviceTensor x32(backend, xs, x), g32(backend, cs, g), b32(backend, cs, b), dy32(backend, xs, dy);
  DeviceTensor x16(backend, xs, x, h16), g16(backend, cs, g, h16), b16(backend, cs, b, h16),
      dy16(backend, xs, dy, h16);
  DeviceTensor y_a(backend, xs), y_b(backend, xs), mean(backend, rows), rstd(backend, rows);
  backend.layernorm_forward(x32, g32, b32, y_a, mean, rstd, {});
  backend.layernorm_forward(x16, g16, b16, y_b, mean, rstd, {});
  const std::vector<float> ya = y_a.download();
  CARTO_CHECK_CLOSE("layernorm y", y_b.download(), to_double(ya), twice(C + 6, ya));

  DeviceTensor dx_a = zeros(backend, xs), dg_a = zeros(backend, cs), db_a = zeros(backend, cs);
  DeviceTensor dx_b = zeros(backend, xs), dg_b = zeros(backend, cs), db_b = zeros(backend, cs);
  backend.layernorm_backward(dy32, x32, g32, mean, rstd, dx_a, dg_a, db_a, kAccumulateAll);
  backend.layernorm_backward(dy16, x16, g16, mean, rstd, dx_b, dg_b, db_b, kAccumulateAll);
  const std::vector<float> dxa = dx_a.download(), dga = dg_a.download();
  CARTO_CHECK_CLOSE("layernorm dx", dx_b.download(), to_double(dxa), twice(2 * C + 8, dxa));
  CARTO_CHECK_CLOSE("layernorm dgamma", dg_b.download(), to_double(dga), twice(C + 14, dga));

  DeviceTensor gelu_a(backend, xs), gelu_b(backend, xs);
  backend.gelu_forward(x32, gelu_a);
  backend.gelu_forward(x16, gelu_b);
  const std::vector<float> ga = gelu_a.download();
  CARTO_CHECK_CLOSE("gelu y", gelu_b.download(), to_double(ga), twice(8, ga));

  // An fp32 gradient accumulating a bf16 contribution, and a bf16 gradient accumulating an fp32
  // one: the addition is fp32, rounded once to the gradient's dtype.
  DeviceTensor acc32(backend, xs, x);
  backend.add_scaled(dy16, 0.5f, acc32);
  DeviceTensor acc16(backend, xs, x, h16), dyf(backend, xs, dy);
  backend.add_scaled(dyf, 0.5f, acc16);
  const std::vector<float> s32 = acc32.download(), s16 = acc16.download();
  std::vector<double> ref(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) ref[i] = double{x[i]} + 0.5 * dy[i];
  CARTO_CHECK_CLOSE("fp32 += bf16", s32, ref, fp32_chain(2, max_abs(ref)));
  CARTO_CHECK_CLOSE("bf16 += fp32", s16, ref, bf16_chain(2, max_abs(ref)));

  // Embedding: a bf16 table into an fp32 output is an exact widening.
  DeviceTensor table(backend, {{"vocab", 6}, {"hidden", C}}, x, h16), out(backend, xs);
  DeviceIds ids(backend, rows, {5, 0, 3, 3, 1, 2});
  backend.embedding_forward(table, ids, out, {});
  const std::vector<float> o = out.download();
  std::int64_t wrong = 0;
  const std::int32_t order[] = {5, 0, 3, 3, 1, 2};
  for (std::int64_t n = 0; n < 6; ++n)
    for (std::int64_t j = 0; j < C; ++j)
      wrong +=
          o[static_cast<std::size_t>(n * C + j)] != x[static_cast<std::size_t>(order[n] * C + j)];
  CHECK(wrong == 0);

  // Attention on bf16 q, k, v into an fp32 out.
  const TensorShape qs{{"b", 1}, {"heads", 2}, {"s", 6}, {"d", 4}};
  const std::vector<float> q = random_input(qs.numel(), 744, h16);
  DeviceTensor q32(backend, qs, q), q16(backend, qs, q, h16), o_a(backend, qs), o_b(backend, qs),
      lse(backend, {{"r", 12}});
  backend.attention_forward(q32, q32, q32, o_a, lse, {.scale = 0.5f});
  backend.attention_forward(q16, q16, q16, o_b, lse, {.scale = 0.5f});
  const std::vector<float> oa = o_a.download();
  CARTO_CHECK_CLOSE("attention out", o_b.download(), to_double(oa), twice(4 + 2 * 6 + 8, oa));
}

TEST_CASE("kernels refuse dtypes other than fp32 and bf16, and bf16 statistics, by name",
          "[kernels][dtype]") {
  Backend& backend = test_backend();
  INFO(test_backend_name());
  const TensorShape s{{"r", 4}, {"h", 8}}, rows{{"r", 4}}, cs{{"h", 8}};
  DeviceTensor x(backend, s, random_normal(s.numel(), 750)), y(backend, s);
  DeviceTensor g(backend, cs, random_normal(8, 751)), b(backend, cs, random_normal(8, 752));
  // fp16 and fp8 buffers (their bytes are never read: the call is refused first).
  const Buffer half = backend.allocate(s, DType::fp16, MemoryCategory::temporaries);
  const Buffer eight = backend.allocate(s, DType::fp8_e4m3, MemoryCategory::temporaries);
  const TensorView x16 = half.view(s, DType::fp16), x8 = eight.view(s, DType::fp8_e4m3);
  CHECK_THROWS_WITH(backend.gelu_forward(x16, y),
                    Catch::Contains("gelu_forward") && Catch::Contains("fp16"));
  CHECK_THROWS_WITH(backend.add(x, x, x8), Catch::Contains("add") && Catch::Contains("fp8_e4m3"));
  CHECK_THROWS_WITH(backend.convert(x, x16),
                    Catch::Contains("copy_strided") && Catch::Contains("fp16"));
  CHECK_THROWS_WITH(backend.fill(x8, 1.0f), Catch::Contains("fill") && Catch::Contains("fp8"));
  DeviceTensor c(backend, {{"r", 4}, {"c", 4}});
  CHECK_THROWS_WITH(backend.gemm(x16, x, c, {.b = Transpose::yes}),
                    Catch::Contains("gemm") && Catch::Contains("fp16"));
  DeviceTensor mean16(backend, rows, DType::bf16), rstd(backend, rows);
  CHECK_THROWS_WITH(backend.layernorm_forward(x, g, b, y, mean16, rstd, {}),
                    Catch::Contains("layernorm_forward") && Catch::Contains("mean is bf16"));
}
