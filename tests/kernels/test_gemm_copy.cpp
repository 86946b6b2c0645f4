// GEMM (batched, transposed, broadcast, accumulating), strided copies for resharding and head
// split/merge, fills, and the allocation contract, on the backend under test in fp32 and bf16.
#include <tuple>
#include <utility>

#include "kernels/kernel_support.hpp"
#include "kernels/test_allocators.hpp"

using namespace carto;
using namespace carto::test;

namespace {

// Reference: C = alpha op(A) op(B) + beta C0 in double, batch entries broadcast when of size 1.
struct GemmCase {
  std::int64_t batch_a, batch_b, batch_c, m, n, k;
  GemmArgs args;
};

TensorShape matrix(std::int64_t batch, std::int64_t rows, std::int64_t cols) {
  return {{"batch", batch}, {"rows", rows}, {"cols", cols}};
}

// a and b in `in`, c in `out` (bf16 in, fp32 accumulate, either c).
void run_gemm_case(Backend& backend, const GemmCase& c, std::uint32_t seed, DType in, DType out) {
  const bool ta = c.args.a == Transpose::yes, tb = c.args.b == Transpose::yes;
  const TensorShape as = ta ? matrix(c.batch_a, c.k, c.m) : matrix(c.batch_a, c.m, c.k);
  const TensorShape bs = tb ? matrix(c.batch_b, c.n, c.k) : matrix(c.batch_b, c.k, c.n);
  const TensorShape cs = matrix(c.batch_c, c.m, c.n);
  const std::vector<float> a = random_input(as.numel(), seed, in);
  const std::vector<float> b = random_input(bs.numel(), seed + 1, in);
  const std::vector<float> c0 = random_input(cs.numel(), seed + 2, out);
  DeviceTensor da(backend, as, a, in), db(backend, bs, b, in), dc(backend, cs, c0, out);
  backend.gemm(da, db, dc, c.args);

  std::vector<double> ref(c0.size());
  double magnitude = 0;  // max over outputs of Σ|terms|, the scale of the rounding error
  for (std::int64_t p = 0; p < c.batch_c; ++p) {
    const std::int64_t pa = c.batch_a == 1 ? 0 : p, pb = c.batch_b == 1 ? 0 : p;
    for (std::int64_t i = 0; i < c.m; ++i) {
      for (std::int64_t j = 0; j < c.n; ++j) {
        double s = 0, abs = 0;
        for (std::int64_t l = 0; l < c.k; ++l) {
          const double x =
              a[static_cast<std::size_t>(pa * c.m * c.k + (ta ? l * c.m + i : i * c.k + l))];
          const double y =
              b[static_cast<std::size_t>(pb * c.k * c.n + (tb ? j * c.k + l : l * c.n + j))];
          s += x * y;
          abs += std::fabs(x * y);
        }
        const auto o = static_cast<std::size_t>((p * c.m + i) * c.n + j);
        ref[o] = c.args.alpha * s + c.args.beta * c0[o];
        magnitude =
            std::max(magnitude, std::fabs(c.args.alpha) * abs + std::fabs(c.args.beta * c0[o]));
      }
    }
  }
  // A k-term dot product, scaled and added to beta·C: k + 2 roundings over Σ|terms|, in fp32
  // (bf16 operands are read exactly), then c's store.
  CARTO_CHECK_CLOSE("gemm", dc.download(), ref, tolerance(out, c.k + 2, magnitude));
}

}  // namespace

TEST_CASE("gemm equals a double reference for every transpose, batch and broadcast",
          "[kernels][gemm]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  std::uint32_t seed = 10;
  for (Transpose ta : {Transpose::no, Transpose::yes}) {
    for (Transpose tb : {Transpose::no, Transpose::yes}) {
      for (auto [ba, bb, bc] :
           {std::tuple{1, 1, 1}, std::tuple{3, 3, 3}, std::tuple{3, 1, 3}, std::tuple{1, 3, 3}}) {
        for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 1.0f}}) {
          const GemmCase c{.batch_a = ba,
                           .batch_b = bb,
                           .batch_c = bc,
                           .m = 5,
                           .n = 7,
                           .k = 33,
                           .args = {.a = ta, .b = tb, .alpha = alpha, .beta = beta}};
          INFO("ta=" << (ta == Transpose::yes) << " tb=" << (tb == Transpose::yes) << " batches "
                     << ba << "," << bb << "," << bc << " alpha=" << alpha << " beta=" << beta);
          run_gemm_case(backend, c, seed += 3, dtype, dtype);
        }
      }
    }
  }
  // The demo's shape, folded into one call: (2, 128, 256) · (256, 1024).
  run_gemm_case(backend,
                {.batch_a = 2, .batch_b = 1, .batch_c = 2, .m = 128, .n = 96, .k = 256, .args = {}},
                100, dtype, dtype);
}

TEST_CASE("gemm on bf16 operands into an fp32 c, and fp32 operands into a bf16 c",
          "[kernels][gemm][mixed]") {
  Backend& backend = test_backend();
  for (auto [in, out] :
       {std::pair{DType::bf16, DType::fp32}, std::pair{DType::fp32, DType::bf16}}) {
    INFO(test_backend_name() << ": a, b " << in << ", c " << out);
    for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 1.0f}}) {
      run_gemm_case(backend,
                    {.batch_a = 3,
                     .batch_b = 1,
                     .batch_c = 3,
                     .m = 17,
                     .n = 9,
                     .k = 40,
                     .args = {.b = Transpose::yes, .alpha = alpha, .beta = beta}},
                    120, in, out);
    }
  }
}

TEST_CASE("gemm rejects shapes that do not multiply", "[kernels][gemm]") {
  Backend& backend = test_backend();
  DeviceTensor a(backend, matrix(1, 4, 5)), b(backend, matrix(1, 6, 3)),
      c(backend, matrix(1, 4, 3));
  CHECK_THROWS_AS(backend.gemm(a, b, c, {}), Error);
  DeviceTensor b2(backend, matrix(2, 5, 3)), c3(backend, matrix(3, 4, 3));
  CHECK_THROWS_AS(backend.gemm(a, b2, c3, {}), Error);  // batch 2 is neither 3 nor 1
}

TEST_CASE("copy_box slices and places boxes exactly, accumulate adds", "[kernels][copy]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  const TensorShape big{{"a", 4}, {"b", 5}, {"c", 6}};
  const std::vector<float> x = random_input(big.numel(), 300, dtype);
  DeviceTensor src(backend, big, x, dtype);
  const TensorShape small{{"a", 2}, {"b", 3}, {"c", 4}};
  DeviceTensor dst(backend, small, dtype);
  backend.copy_box(src, {.offset = {1, 2, 1}, .extent = {2, 3, 4}}, dst, {0, 0, 0},
                   CopyMode::assign);
  std::vector<float> got = dst.download();
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t j = 0; j < 3; ++j)
      for (std::int64_t k = 0; k < 4; ++k)
        wrong += got[static_cast<std::size_t>((i * 3 + j) * 4 + k)] !=
                 x[static_cast<std::size_t>(((1 + i) * 5 + 2 + j) * 6 + 1 + k)];
  CHECK(wrong == 0);

  // Gathering every 2x5x3 shard of a (4, 5, 6) tensor back into a fresh one reproduces it.
  DeviceTensor whole(backend, big, dtype);
  backend.fill(whole, -1.0f);
  for (std::int64_t i = 0; i < 2; ++i) {
    for (std::int64_t k = 0; k < 2; ++k) {
      DeviceTensor shard(backend, {{"a", 2}, {"b", 5}, {"c", 3}}, dtype);
      backend.copy_box(src, {.offset = {2 * i, 0, 3 * k}, .extent = {2, 5, 3}}, shard, {0, 0, 0},
                       CopyMode::assign);
      backend.copy_box(shard, {.offset = {0, 0, 0}, .extent = {2, 5, 3}}, whole, {2 * i, 0, 3 * k},
                       CopyMode::assign);
    }
  }
  CHECK(whole.download() == x);

  backend.copy_box(src, {.offset = {0, 0, 0}, .extent = {4, 5, 6}}, whole, {0, 0, 0},
                   CopyMode::accumulate);
  got = whole.download();
  wrong = 0;
  for (std::size_t i = 0; i < x.size(); ++i) wrong += got[i] != 2 * x[i];  // exact in bf16 too
  CHECK(wrong == 0);

  CHECK_THROWS_AS(backend.copy_box(src, {.offset = {3, 0, 0}, .extent = {2, 5, 6}}, whole,
                                   {0, 0, 0}, CopyMode::assign),
                  Error);
}

TEST_CASE("heads_box splits the fused QKV into heads and merges them back", "[kernels][copy]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  constexpr std::int64_t B = 2, S = 3, H = 8, heads = 2, d = H / heads;
  const TensorShape fused{{"batch", B}, {"seq", S}, {"qkv", 3 * H}};
  const TensorShape split{{"batch", B}, {"heads", heads}, {"seq", S}, {"head_dim", d}};
  const Index extents{B, heads, S, d};
  const std::vector<float> x = random_input(fused.numel(), 400, dtype);
  DeviceTensor qkv(backend, fused, x, dtype), back(backend, fused, dtype);
  const StridedBox contiguous = box_of(split, {.offset = {0, 0, 0, 0}, .extent = extents});
  for (std::int64_t part = 0; part < 3; ++part) {
    DeviceTensor t(backend, split, dtype);
    backend.copy_strided(qkv, heads_box(fused, 3, part, heads), t, contiguous, extents,
                         CopyMode::assign);
    const std::vector<float> got = t.download();
    std::int64_t wrong = 0;  // t[b, n, s, e] = qkv[b, s, n·3·d + part·d + e] (per-head order)
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t n = 0; n < heads; ++n)
        for (std::int64_t s = 0; s < S; ++s)
          for (std::int64_t e = 0; e < d; ++e)
            wrong += got[static_cast<std::size_t>(((b * heads + n) * S + s) * d + e)] !=
                     x[static_cast<std::size_t>((b * S + s) * 3 * H + n * 3 * d + part * d + e)];
    CHECK(wrong == 0);
    backend.copy_strided(t, contiguous, back, heads_box(fused, 3, part, heads), extents,
                         CopyMode::assign);
  }
  CHECK(back.download() == x);  // merge ∘ split = identity
}

TEST_CASE("fill_normal on any shard equals the same box of the whole tensor", "[kernels][copy]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  const RngStream s{.seed = 7, .id = stream_id(RngPurpose::parameter_init, 5, 0)};
  const TensorShape global{{"in", 6}, {"out", 8}};
  DeviceTensor whole(backend, global, dtype);
  backend.fill_normal(whole, 0.02f, s, {});
  const std::vector<float> w = whole.download();
  for (std::int64_t i = 0; i < 2; ++i) {
    for (std::int64_t j = 0; j < 4; ++j) {
      DeviceTensor shard(backend, {{"in", 3}, {"out", 2}}, dtype);
      backend.fill_normal(shard, 0.02f, s, {.global_extents = {6, 8}, .offset = {3 * i, 2 * j}});
      const std::vector<float> got = shard.download();
      std::int64_t wrong = 0;
      for (std::int64_t a = 0; a < 3; ++a)
        for (std::int64_t b = 0; b < 2; ++b)
          wrong += got[static_cast<std::size_t>(a * 2 + b)] !=
                   w[static_cast<std::size_t>((3 * i + a) * 8 + 2 * j + b)];
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("Buffers and kernel workspace go through the installed allocator", "[kernels][memory]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  CountingAllocator counting(backend.device_allocator());
  const AllocatorGuard guard(backend, counting);
  {
    const TensorShape s{{"b", 1}, {"h", 2}, {"s", 16}, {"d", 4}};
    DeviceTensor q(backend, s, random_input(s.numel(), 500, dtype), dtype);
    CHECK(counting.live == s.numel() * size_bytes(dtype));
    CHECK(reinterpret_cast<std::uintptr_t>(q.view().data) % 64 == 0);
    DeviceTensor out(backend, s, dtype), lse(backend, {{"rows", 32}});
    const std::int64_t tensors = counting.live;
    backend.attention_forward(q, q, q, out, lse, {.scale = 0.5f});
    backend.synchronize();
    CHECK(counting.live == tensors);  // workspace, if any, is returned by the end of the call
    CHECK(counting.peak >= tensors);
  }
  CHECK(counting.live == 0);
}
