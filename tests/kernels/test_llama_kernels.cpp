// The Llama kernels: RMSNorm (whole rows and with the normalized dim split), SwiGLU's
// silu(gate)·up, rotary embeddings (whole and on a sequence shard) and grouped-query fused
// attention. Forward against double references written here, backward against central differences
// of those references, both CopyModes, on the backend under test in fp32 and bf16 (inputs rounded
// to the dtype before the references see them).
#include <cmath>

#include "kernels/kernel_support.hpp"

using namespace carto;
using namespace carto::test;

namespace {

// ---- double references --------------------------------------------------------------------------

// y = x·rstd·γ, rstd = 1/sqrt(mean(x²) + eps), over rows of c (Zhang & Sennrich 2019, Eq. 4).
std::vector<double> rmsnorm_ref(const std::vector<double>& x, const std::vector<double>& g,
                                std::size_t c, double eps, std::vector<double>* rstd = nullptr) {
  std::vector<double> y(x.size());
  if (rstd != nullptr) rstd->assign(x.size() / c, 0.0);
  for (std::size_t r = 0; r < x.size() / c; ++r) {
    double squares = 0;
    for (std::size_t j = 0; j < c; ++j) squares += x[r * c + j] * x[r * c + j];
    const double s = 1 / std::sqrt(squares / static_cast<double>(c) + eps);
    for (std::size_t j = 0; j < c; ++j) y[r * c + j] = x[r * c + j] * s * g[j];
    if (rstd != nullptr) (*rstd)[r] = s;
  }
  return y;
}

double silu(double z) { return z / (1 + std::exp(-z)); }

// Pairs (2i, 2i+1) of rows of d rotated by p·θ^(-2i/d), p = offset + (row mod seq) (Su et al.
// 2021, Eq. 34).
std::vector<double> rotary_ref(const std::vector<double>& x, std::size_t seq, std::size_t d,
                               double theta, std::size_t offset) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / d; ++r) {
    const double p = static_cast<double>(offset + r % seq);
    for (std::size_t i = 0; i < d / 2; ++i) {
      const double a = p * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
      const double x0 = x[r * d + 2 * i], x1 = x[r * d + 2 * i + 1];
      y[r * d + 2 * i] = x0 * std::cos(a) - x1 * std::sin(a);
      y[r * d + 2 * i + 1] = x0 * std::sin(a) + x1 * std::cos(a);
    }
  }
  return y;
}

// Grouped-query causal attention: q (B, n, g, S, d), k, v (B, n, S, d); query head (n, j) reads
// key/value head n. Dropout at the probability's index in (B, n, g, S, S).
constexpr std::int64_t B = 2, N = 2, G = 3, S = 5, D = 4;
const TensorShape kQ{{"b", B}, {"kv_heads", N}, {"group", G}, {"s", S}, {"d", D}};
const TensorShape kKv{{"b", B}, {"kv_heads", N}, {"s", S}, {"d", D}};
const TensorShape kLse{{"b", B}, {"kv_heads", N}, {"group", G}, {"s", S}};

std::vector<double> gqa_ref(const std::vector<double>& q, const std::vector<double>& k,
                            const std::vector<double>& v, const AttentionArgs& args) {
  std::vector<double> out(q.size(), 0.0);
  auto at = [](std::int64_t head, std::int64_t i, std::int64_t e) {
    return static_cast<std::size_t>((head * S + i) * D + e);
  };
  for (std::int64_t h = 0; h < B * N * G; ++h) {  // h = (b·N + n)·G + j
    const std::int64_t kv = h / G;
    for (std::int64_t i = 0; i < S; ++i) {
      std::vector<double> s(static_cast<std::size_t>(S));
      double max = -INFINITY, sum = 0;
      for (std::int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (std::int64_t e = 0; e < D; ++e) dot += q[at(h, i, e)] * k[at(kv, j, e)];
        s[static_cast<std::size_t>(j)] = args.scale * dot;
        max = std::max(max, s[static_cast<std::size_t>(j)]);
      }
      for (std::int64_t j = 0; j <= i; ++j) sum += std::exp(s[static_cast<std::size_t>(j)] - max);
      for (std::int64_t j = 0; j <= i; ++j) {
        double p = std::exp(s[static_cast<std::size_t>(j)] - max) / sum;
        if (args.dropout > 0)
          p = rng::keep(args.rng, (h * S + i) * S + j, args.dropout) ? p / (1 - args.dropout) : 0;
        for (std::int64_t e = 0; e < D; ++e) out[at(h, i, e)] += p * v[at(kv, j, e)];
      }
    }
  }
  return out;
}

// A gradient buffer for `mode`: garbage (assign must overwrite it) or values to add onto.
struct Grad {
  DeviceTensor t;
  std::vector<float> start;
};
Grad grad_buffer(Backend& backend, const TensorShape& shape, DType dtype, CopyMode mode,
                 std::uint32_t seed) {
  std::vector<float> start = random_input(shape.numel(), seed, dtype);
  if (mode == CopyMode::assign) {
    for (float& v : start) v = 1e6f;  // must not survive
  }
  return {DeviceTensor(backend, shape, start, dtype), start};
}
// The gradient's own contribution: the buffer minus its start (accumulate), or the buffer.
std::vector<float> contribution(const Grad& g, CopyMode mode) {
  std::vector<float> out = g.t.download();
  if (mode == CopyMode::accumulate) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] -= g.start[i];
  }
  return out;
}
// A bf16 accumulation rounds start + contribution once: that rounding is u of |start| + |ref|.
Tolerance with_start(Tolerance t, DType dtype, CopyMode mode, const std::vector<float>& start) {
  if (mode != CopyMode::accumulate) return t;
  double m = 0;
  for (const float v : start) m = std::max(m, std::fabs(double{v}));
  const double u = dtype == DType::bf16 ? kBf16Unit : kUnit;
  return {.atol = t.atol + 2 * u * m, .rtol = t.rtol + u};
}

const CopyMode kModes[] = {CopyMode::assign, CopyMode::accumulate};

}  // namespace

TEST_CASE("RMSNorm forward and backward", "[kernels][rmsnorm]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  constexpr std::size_t C = 32, R = 12;
  const TensorShape xs{{"b", 3}, {"s", 4}, {"h", C}}, ps{{"h", C}}, rows{{"b", 3}, {"s", 4}};
  const std::vector<float> x = random_input(xs.numel(), 1, dtype, 2.0f),
                           g = random_input(C, 2, dtype), w = random_input(xs.numel(), 3, dtype);
  const float eps = 1e-5f;
  DeviceTensor tx(backend, xs, x, dtype), tg(backend, ps, g, dtype), y(backend, xs, dtype),
      rstd(backend, rows);
  backend.rmsnorm_forward(tx, tg, y, rstd, {.epsilon = eps});
  std::vector<double> ref_rstd;
  const std::vector<double> ref = rmsnorm_ref(to_double(x), to_double(g), C, eps, &ref_rstd);
  // A C-term sum of squares, then a few roundings (sqrt, divide, two products).
  CARTO_CHECK_CLOSE("rmsnorm y", y.download(), ref, tolerance(dtype, C + 6, max_abs(ref)));
  CARTO_CHECK_CLOSE("rmsnorm rstd", rstd.download(), ref_rstd,
                    fp32_chain(C + 4, max_abs(ref_rstd)));

  const auto rx = central_difference(to_double(x), [&](const std::vector<double>& v) {
    return weighted_sum(rmsnorm_ref(v, to_double(g), C, eps), w);
  });
  const auto rg = central_difference(to_double(g), [&](const std::vector<double>& v) {
    return weighted_sum(rmsnorm_ref(to_double(x), v, C, eps), w);
  });
  DeviceTensor dy(backend, xs, w, dtype);
  for (const CopyMode mode : kModes) {
    INFO("mode " << (mode == CopyMode::assign ? "assign" : "accumulate"));
    Grad gx = grad_buffer(backend, xs, dtype, mode, 4),
         gg = grad_buffer(backend, ps, dtype, mode, 5);
    backend.rmsnorm_backward(dy, tx, tg, rstd, gx.t, gg.t, {.dx = mode, .dgamma = mode});
    CARTO_CHECK_CLOSE("rmsnorm dx", contribution(gx, mode), rx,
                      with_start(tolerance(dtype, 2 * C + 8, max_abs(rx)), dtype, mode, gx.start));
    CARTO_CHECK_CLOSE("rmsnorm dgamma", contribution(gg, mode), rg,
                      with_start(tolerance(dtype, C + R + 8, max_abs(rg)), dtype, mode, gg.start));
  }
}

TEST_CASE("RMSNorm with the normalized dim split into 2 and 4 pieces equals the whole row",
          "[kernels][rmsnorm]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  constexpr std::size_t C = 32, R = 12;
  const TensorShape rows{{"b", 3}, {"s", 4}};
  const std::vector<float> x = random_input(R * C, 10, dtype, 1.5f), g = random_input(C, 11, dtype),
                           w = random_input(R * C, 12, dtype);
  const float eps = 1e-5f;
  std::vector<double> rstd_ref;
  const std::vector<double> ref = rmsnorm_ref(to_double(x), to_double(g), C, eps, &rstd_ref);
  const auto rx = central_difference(to_double(x), [&](const std::vector<double>& v) {
    return weighted_sum(rmsnorm_ref(v, to_double(g), C, eps), w);
  });
  const auto rg = central_difference(to_double(g), [&](const std::vector<double>& v) {
    return weighted_sum(rmsnorm_ref(to_double(x), v, C, eps), w);
  });
  for (const std::size_t parts : {std::size_t{2}, std::size_t{4}}) {
    INFO(parts << " pieces");
    const std::size_t c = C / parts;
    const TensorShape ls{{"b", 3}, {"s", 4}, {"h", static_cast<std::int64_t>(c)}},
        lg{{"h", static_cast<std::int64_t>(c)}};
    auto piece = [&](const std::vector<float>& v, std::size_t p, std::size_t width) {
      std::vector<float> out;
      for (std::size_t r = 0; r < v.size() / width; ++r)
        out.insert(out.end(), v.begin() + static_cast<std::ptrdiff_t>(r * width + p * c),
                   v.begin() + static_cast<std::ptrdiff_t>(r * width + p * c + c));
      return out;
    };
    // The all-reduce, on the host: the sum of every piece's partial sums.
    std::vector<float> sums(R, 0.0f), back_sums(R, 0.0f);
    for (std::size_t p = 0; p < parts; ++p) {
      DeviceTensor tx(backend, ls, piece(x, p, C), dtype), s(backend, rows);
      backend.rmsnorm_partial_sums(tx, s);
      const std::vector<float> got = s.download();
      for (std::size_t r = 0; r < R; ++r) sums[r] += got[r];
    }
    DeviceTensor total(backend, rows, sums);
    std::vector<float> y(R * C), dx(R * C), dg(C), rstd;
    for (std::size_t p = 0; p < parts; ++p) {
      DeviceTensor tx(backend, ls, piece(x, p, C), dtype), tg(backend, lg, piece(g, p, C), dtype),
          ty(backend, ls, dtype), tr(backend, rows);
      backend.rmsnorm_apply(tx, total, C, tg, ty, tr, {.epsilon = eps});
      const std::vector<float> got = ty.download();
      for (std::size_t r = 0; r < R; ++r)
        for (std::size_t j = 0; j < c; ++j) y[r * C + p * c + j] = got[r * c + j];
      rstd = tr.download();
      DeviceTensor tdy(backend, ls, piece(w, p, C), dtype), s(backend, rows);
      backend.rmsnorm_backward_partial_sums(tdy, tx, tg, tr, s);
      const std::vector<float> part = s.download();
      for (std::size_t r = 0; r < R; ++r) back_sums[r] += part[r];
    }
    CARTO_CHECK_CLOSE("split rmsnorm y", y, ref, tolerance(dtype, C + 6, max_abs(ref)));
    CARTO_CHECK_CLOSE("split rmsnorm rstd", rstd, rstd_ref, fp32_chain(C + 4, max_abs(rstd_ref)));
    DeviceTensor back_total(backend, rows, back_sums);
    for (std::size_t p = 0; p < parts; ++p) {
      DeviceTensor tx(backend, ls, piece(x, p, C), dtype), tg(backend, lg, piece(g, p, C), dtype),
          tr(backend, rows, rstd), tdy(backend, ls, piece(w, p, C), dtype), tdx(backend, ls, dtype),
          tdg(backend, lg, dtype);
      backend.rmsnorm_backward_apply(tdy, tx, tg, tr, back_total, C, tdx, tdg,
                                     {.dx = CopyMode::assign, .dgamma = CopyMode::assign});
      const std::vector<float> gx = tdx.download(), gg = tdg.download();
      for (std::size_t r = 0; r < R; ++r)
        for (std::size_t j = 0; j < c; ++j) dx[r * C + p * c + j] = gx[r * c + j];
      for (std::size_t j = 0; j < c; ++j) dg[p * c + j] = gg[j];
    }
    CARTO_CHECK_CLOSE("split rmsnorm dx", dx, rx, tolerance(dtype, 2 * C + 8, max_abs(rx)));
    CARTO_CHECK_CLOSE("split rmsnorm dgamma", dg, rg, tolerance(dtype, C + R + 8, max_abs(rg)));
  }
}

TEST_CASE("silu(gate)·up forward and backward", "[kernels][swiglu]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  // 5000 elements: more than one staging block of 4096 in bf16. gate ~ N(0, 3²) reaches the
  // saturated tails of σ.
  const TensorShape xs{{"rows", 50}, {"ffn", 100}};
  const std::vector<float> g = random_input(xs.numel(), 20, dtype, 3.0f),
                           u = random_input(xs.numel(), 21, dtype),
                           w = random_input(xs.numel(), 22, dtype);
  DeviceTensor tg(backend, xs, g, dtype), tu(backend, xs, u, dtype), y(backend, xs, dtype);
  backend.silu_mul_forward(tg, tu, y);
  std::vector<double> ref(g.size()), rg(g.size()), ru(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    ref[i] = silu(g[i]) * u[i];
    // Per element, so one-element central differences of the product give the gradients.
    const double h = 1e-5;
    rg[i] = w[i] * u[i] * (silu(g[i] + h) - silu(g[i] - h)) / (2 * h);
    ru[i] = w[i] * silu(g[i]);
  }
  // exp (2 ulp), a divide, two products.
  CARTO_CHECK_CLOSE("silu_mul y", y.download(), ref, tolerance(dtype, 8, max_abs(ref)));
  DeviceTensor dy(backend, xs, w, dtype);
  for (const CopyMode mode : kModes) {
    INFO("mode " << (mode == CopyMode::assign ? "assign" : "accumulate"));
    Grad dg = grad_buffer(backend, xs, dtype, mode, 23),
         du = grad_buffer(backend, xs, dtype, mode, 24);
    backend.silu_mul_backward(tg, tu, dy, dg.t, du.t, mode);
    CARTO_CHECK_CLOSE("silu_mul dgate", contribution(dg, mode), rg,
                      with_start(tolerance(dtype, 12, max_abs(rg)), dtype, mode, dg.start));
    CARTO_CHECK_CLOSE("silu_mul dup", contribution(du, mode), ru,
                      with_start(tolerance(dtype, 8, max_abs(ru)), dtype, mode, du.start));
  }
}

TEST_CASE("rotary embedding forward, backward and on a sequence shard", "[kernels][rotary]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  constexpr std::size_t Sq = 12, Dh = 16;
  const double theta = 10000.0;
  const TensorShape xs{{"b", 2}, {"heads", 3}, {"s", Sq}, {"d", Dh}};
  const std::vector<float> x = random_input(xs.numel(), 30, dtype),
                           w = random_input(xs.numel(), 31, dtype);
  // Angles up to 11 radians: cos and sin of them in double, then rounded once to fp32 (u), and
  // two products and a sum per output.
  const auto ref = rotary_ref(to_double(x), Sq, Dh, theta, 0);
  DeviceTensor tx(backend, xs, x, dtype), y(backend, xs, dtype);
  backend.rotary_forward(tx, y, {.theta = theta});
  CARTO_CHECK_CLOSE("rotary y", y.download(), ref, tolerance(dtype, 6, max_abs(ref)));
  // In place (y == x), as backend.hpp allows for elementwise kernels.
  DeviceTensor inplace(backend, xs, x, dtype);
  backend.rotary_forward(inplace, inplace, {.theta = theta});
  CHECK(inplace.download() == y.download());

  const auto rx = central_difference(to_double(x), [&](const std::vector<double>& v) {
    return weighted_sum(rotary_ref(v, Sq, Dh, theta, 0), w);
  });
  DeviceTensor dy(backend, xs, w, dtype);
  for (const CopyMode mode : kModes) {
    INFO("mode " << (mode == CopyMode::assign ? "assign" : "accumulate"));
    Grad dx = grad_buffer(backend, xs, dtype, mode, 32);
    backend.rotary_backward(dy, dx.t, {.theta = theta}, mode);
    CARTO_CHECK_CLOSE("rotary dx", contribution(dx, mode), rx,
                      with_start(tolerance(dtype, 6, max_abs(rx)), dtype, mode, dx.start));
  }

  // The second half of the sequence on its own, placed at position 6: those rows of the whole.
  const TensorShape half{{"b", 2}, {"heads", 3}, {"s", Sq / 2}, {"d", Dh}};
  std::vector<float> xh;
  std::vector<double> ref_half;
  for (std::size_t r = 0; r < x.size() / Dh; ++r) {
    if (r % Sq < Sq / 2) continue;
    xh.insert(xh.end(), x.begin() + static_cast<std::ptrdiff_t>(r * Dh),
              x.begin() + static_cast<std::ptrdiff_t>((r + 1) * Dh));
    ref_half.insert(ref_half.end(), ref.begin() + static_cast<std::ptrdiff_t>(r * Dh),
                    ref.begin() + static_cast<std::ptrdiff_t>((r + 1) * Dh));
  }
  DeviceTensor txh(backend, half, xh, dtype), yh(backend, half, dtype);
  backend.rotary_forward(txh, yh, {.theta = theta, .position_offset = Sq / 2});
  CARTO_CHECK_CLOSE("rotary y on a shard", yh.download(), ref_half,
                    tolerance(dtype, 6, max_abs(ref_half)));
}

TEST_CASE("grouped-query fused attention forward and backward", "[kernels][attention][gqa]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  const std::vector<float> q = random_input(kQ.numel(), 40, dtype),
                           k = random_input(kKv.numel(), 41, dtype),
                           v = random_input(kKv.numel(), 42, dtype),
                           w = random_input(kQ.numel(), 43, dtype);
  for (const float dropout : {0.0f, 0.25f}) {
    INFO("dropout " << dropout);
    const AttentionArgs args{.scale = 0.5f,
                             .masking = Masking::causal,
                             .dropout = dropout,
                             .rng = {.seed = 5, .id = stream_id(RngPurpose::dropout, 9, 1)}};
    DeviceTensor tq(backend, kQ, q, dtype), tk(backend, kKv, k, dtype), tv(backend, kKv, v, dtype),
        out(backend, kQ, dtype), lse(backend, kLse);
    backend.attention_forward(tq, tk, tv, out, lse, args);
    const auto qd = to_double(q), kd = to_double(k), vd = to_double(v);
    const std::vector<double> ref = gqa_ref(qd, kd, vd, args);
    const std::int64_t mid_f = dtype == DType::bf16 ? 1 : 0, mid_b = dtype == DType::bf16 ? 3 : 0;
    CARTO_CHECK_CLOSE("gqa out", out.download(), ref,
                      tolerance(dtype, D + 2 * S + 8, max_abs(ref), mid_f));

    const auto rq = central_difference(qd, [&](const std::vector<double>& x) {
      return weighted_sum(gqa_ref(x, kd, vd, args), w);
    });
    const auto rk = central_difference(kd, [&](const std::vector<double>& x) {
      return weighted_sum(gqa_ref(qd, x, vd, args), w);
    });
    const auto rv = central_difference(vd, [&](const std::vector<double>& x) {
      return weighted_sum(gqa_ref(qd, kd, x, args), w);
    });
    DeviceTensor dout(backend, kQ, w, dtype);
    for (const CopyMode mode : kModes) {
      INFO("mode " << (mode == CopyMode::assign ? "assign" : "accumulate"));
      Grad gq = grad_buffer(backend, kQ, dtype, mode, 44),
           gk = grad_buffer(backend, kKv, dtype, mode, 45),
           gv = grad_buffer(backend, kKv, dtype, mode, 46);
      backend.attention_backward(tq, tk, tv, out, lse, dout, gq.t, gk.t, gv.t, args, mode);
      // dk and dv sum the G query heads of a group: G·S terms.
      const std::int64_t chain = 2 * D + 2 * G * S + 12;
      CARTO_CHECK_CLOSE(
          "gqa dq", contribution(gq, mode), rq,
          with_start(tolerance(dtype, chain, max_abs(rq), mid_b), dtype, mode, gq.start));
      CARTO_CHECK_CLOSE(
          "gqa dk", contribution(gk, mode), rk,
          with_start(tolerance(dtype, chain, max_abs(rk), mid_b), dtype, mode, gk.start));
      CARTO_CHECK_CLOSE(
          "gqa dv", contribution(gv, mode), rv,
          with_start(tolerance(dtype, chain, max_abs(rv), mid_b), dtype, mode, gv.start));
    }
  }
}

TEST_CASE("grouped-query attention on a query-head shard of each group equals those heads",
          "[kernels][attention][gqa]") {
  // Query heads within a group split in 3: shard j holds head j of every group with the whole
  // K, V, placed at group offset j (dropout indices and results those of the whole).
  Backend& backend = test_backend();
  const DType dtype = DType::fp32;
  const std::vector<float> q = random_input(kQ.numel(), 50, dtype),
                           k = random_input(kKv.numel(), 51, dtype),
                           v = random_input(kKv.numel(), 52, dtype);
  AttentionArgs args{.scale = 0.5f,
                     .masking = Masking::causal,
                     .dropout = 0.25f,
                     .rng = {.seed = 6, .id = stream_id(RngPurpose::dropout, 10, 1)}};
  const std::vector<double> ref = gqa_ref(to_double(q), to_double(k), to_double(v), args);
  const TensorShape qs{{"b", B}, {"kv_heads", N}, {"group", 1}, {"s", S}, {"d", D}};
  const TensorShape ls{{"b", B}, {"kv_heads", N}, {"group", 1}, {"s", S}};
  DeviceTensor tk(backend, kKv, k, dtype), tv(backend, kKv, v, dtype);
  for (std::int64_t j = 0; j < G; ++j) {
    INFO("query head " << j << " of each group");
    std::vector<float> qj;
    std::vector<double> rj;
    for (std::int64_t bn = 0; bn < B * N; ++bn) {
      const auto first = static_cast<std::ptrdiff_t>((bn * G + j) * S * D);
      qj.insert(qj.end(), q.begin() + first, q.begin() + first + S * D);
      rj.insert(rj.end(), ref.begin() + first, ref.begin() + first + S * D);
    }
    args.placement = {.global_extents = {B, N, G, S, S}, .offset = {0, 0, j, 0, 0}};
    DeviceTensor tq(backend, qs, qj, dtype), out(backend, qs, dtype), lse(backend, ls);
    backend.attention_forward(tq, tk, tv, out, lse, args);
    CARTO_CHECK_CLOSE("gqa shard out", out.download(), rj,
                      tolerance(dtype, D + 2 * S + 8, max_abs(rj)));
  }
}
