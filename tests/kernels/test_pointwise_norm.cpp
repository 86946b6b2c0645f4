// Layernorm, softmax (scaled, causal, sharded rows), GELU, dropout, add, scale and bias: forward
// against double references, backward against central differences of those references, on the
// backend under test in fp32 and bf16 (inputs rounded to the dtype before the references see them).
#include <numbers>

#include "kernels/kernel_support.hpp"

using namespace carto;
using namespace carto::test;

namespace {

// ---- double references --------------------------------------------------------------------------

// Layernorm over rows of c in double: the output and the saved statistics.
struct LayerNormRef {
  std::vector<double> y, mean, rstd;
};
LayerNormRef layernorm_full_ref(const std::vector<double>& x, const std::vector<double>& g,
                                const std::vector<double>& b, std::size_t c, double eps) {
  LayerNormRef out{.y = std::vector<double>(x.size()),
                   .mean = std::vector<double>(x.size() / c),
                   .rstd = std::vector<double>(x.size() / c)};
  for (std::size_t r = 0; r < x.size() / c; ++r) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < c; ++j) mean += x[r * c + j];
    mean /= static_cast<double>(c);
    for (std::size_t j = 0; j < c; ++j) var += (x[r * c + j] - mean) * (x[r * c + j] - mean);
    const double rstd = 1 / std::sqrt(var / static_cast<double>(c) + eps);
    for (std::size_t j = 0; j < c; ++j) {
      out.y[r * c + j] = (x[r * c + j] - mean) * rstd * g[j] + b[j];
    }
    out.mean[r] = mean;
    out.rstd[r] = rstd;
  }
  return out;
}

std::vector<double> layernorm_ref(const std::vector<double>& x, const std::vector<double>& g,
                                  const std::vector<double>& b, std::size_t c, double eps) {
  return layernorm_full_ref(x, g, b, c, eps).y;
}

// The layernorm's gradients in double, in closed form (the whole-row kernel, checked against
// central differences above, computes the same): x̂ = (x - mean)·rstd, g = dy·γ,
// dx = rstd·(g - mean(g) - x̂·mean(g·x̂)), dgamma = Σ_rows dy·x̂, dbeta = Σ_rows dy.
struct LayerNormGradRef {
  std::vector<double> dx, dgamma, dbeta;
};
LayerNormGradRef layernorm_backward_ref(const std::vector<double>& dy, const std::vector<double>& x,
                                        const std::vector<double>& g, const LayerNormRef& f,
                                        std::size_t c) {
  LayerNormGradRef out{.dx = std::vector<double>(x.size()),
                       .dgamma = std::vector<double>(c),
                       .dbeta = std::vector<double>(c)};
  for (std::size_t r = 0; r < x.size() / c; ++r) {
    double g_mean = 0, gx_mean = 0;
    for (std::size_t j = 0; j < c; ++j) {
      g_mean += dy[r * c + j] * g[j];
      gx_mean += dy[r * c + j] * g[j] * (x[r * c + j] - f.mean[r]) * f.rstd[r];
    }
    g_mean /= static_cast<double>(c);
    gx_mean /= static_cast<double>(c);
    for (std::size_t j = 0; j < c; ++j) {
      const double xhat = (x[r * c + j] - f.mean[r]) * f.rstd[r];
      out.dx[r * c + j] = f.rstd[r] * (dy[r * c + j] * g[j] - g_mean - xhat * gx_mean);
      out.dgamma[j] += dy[r * c + j] * xhat;
      out.dbeta[j] += dy[r * c + j];
    }
  }
  return out;
}

// Columns [begin, begin + count) of every row of a (rows, c) matrix, and the way back.
std::vector<float> columns_of(const std::vector<float>& v, std::size_t c, std::size_t begin,
                              std::size_t count) {
  std::vector<float> out;
  for (std::size_t r = 0; r < v.size() / c; ++r) {
    out.insert(out.end(), v.begin() + static_cast<std::ptrdiff_t>(r * c + begin),
               v.begin() + static_cast<std::ptrdiff_t>(r * c + begin + count));
  }
  return out;
}
void place_columns(const std::vector<float>& part, std::size_t c, std::size_t begin,
                   std::vector<float>& whole) {
  const std::size_t count = part.size() / (whole.size() / c);
  for (std::size_t r = 0; r < whole.size() / c; ++r) {
    for (std::size_t j = 0; j < count; ++j) whole[r * c + begin + j] = part[r * count + j];
  }
}

// Both results are within their own tolerance of the exact value, so within the sum of each other.
Tolerance combined(Tolerance a, Tolerance b) {
  return {.atol = a.atol + b.atol, .rtol = a.rtol + b.rtol};
}

// softmax(scale · x) over rows of `keys`, row r being query (q0 + r % queries) with keys from k0.
std::vector<double> softmax_ref(const std::vector<double>& x, std::size_t keys, std::size_t queries,
                                double scale, bool causal, std::size_t q0 = 0, std::size_t k0 = 0) {
  std::vector<double> y(x.size(), 0.0);
  for (std::size_t r = 0; r < x.size() / keys; ++r) {
    const std::size_t q = q0 + r % queries;
    auto visible = [&](std::size_t j) { return !causal || k0 + j <= q; };
    double max = -INFINITY, sum = 0;
    for (std::size_t j = 0; j < keys; ++j)
      if (visible(j)) max = std::max(max, scale * x[r * keys + j]);
    for (std::size_t j = 0; j < keys; ++j)
      if (visible(j)) sum += std::exp(scale * x[r * keys + j] - max);
    for (std::size_t j = 0; j < keys; ++j)
      if (visible(j)) y[r * keys + j] = std::exp(scale * x[r * keys + j] - max) / sum;
  }
  return y;
}

double gelu_ref(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

}  // namespace

TEST_CASE("layernorm forward and backward", "[kernels][layernorm]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  constexpr std::size_t C = 32;
  const TensorShape xs{{"b", 3}, {"s", 4}, {"h", C}}, ps{{"h", C}}, rows{{"b", 3}, {"s", 4}};
  const std::vector<float> x = random_input(xs.numel(), 1, dtype, 2.0f),
                           g = random_input(C, 2, dtype), b = random_input(C, 3, dtype),
                           w = random_input(xs.numel(), 4, dtype);
  const float eps = 1e-5f;
  DeviceTensor dx_(backend, xs, x, dtype), dg(backend, ps, g, dtype), db(backend, ps, b, dtype),
      y(backend, xs, dtype), mean(backend, rows), rstd(backend, rows);
  backend.layernorm_forward(dx_, dg, db, y, mean, rstd, {.epsilon = eps});
  const std::vector<double> ref = layernorm_ref(to_double(x), to_double(g), to_double(b), C, eps);
  // Mean and variance are C-term sums; the output adds a few roundings after them.
  CARTO_CHECK_CLOSE("layernorm y", y.download(), ref, tolerance(dtype, C + 6, max_abs(ref)));

  DeviceTensor dy(backend, xs, w, dtype);
  DeviceTensor gx = zeros(backend, xs, dtype), gg = zeros(backend, ps, dtype),
               gb = zeros(backend, ps, dtype);
  backend.layernorm_backward(dy, dx_, dg, mean, rstd, gx, gg, gb, kAccumulateAll);
  const auto objective_x = [&](const std::vector<double>& v) {
    return weighted_sum(layernorm_ref(v, to_double(g), to_double(b), C, eps), w);
  };
  const auto objective_g = [&](const std::vector<double>& v) {
    return weighted_sum(layernorm_ref(to_double(x), v, to_double(b), C, eps), w);
  };
  const auto objective_b = [&](const std::vector<double>& v) {
    return weighted_sum(layernorm_ref(to_double(x), to_double(g), v, C, eps), w);
  };
  const std::vector<double> rx = central_difference(to_double(x), objective_x);
  const std::vector<double> rg = central_difference(to_double(g), objective_g);
  const std::vector<double> rb = central_difference(to_double(b), objective_b);
  CARTO_CHECK_CLOSE("layernorm dx", gx.download(), rx, tolerance(dtype, 2 * C + 8, max_abs(rx)));
  // dgamma and dbeta sum over the 12 rows, each term from C-term statistics.
  CARTO_CHECK_CLOSE("layernorm dgamma", gg.download(), rg,
                    tolerance(dtype, C + 12 + 8, max_abs(rg)));
  CARTO_CHECK_CLOSE("layernorm dbeta", gb.download(), rb, tolerance(dtype, 12 + 2, max_abs(rb)));
}

TEST_CASE("layernorm with the normalized dim split into 2 and 4 pieces equals the whole-row one",
          "[kernels][layernorm]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  constexpr std::size_t C = 32, R = 12;
  const TensorShape xs{{"b", 3}, {"s", 4}, {"h", C}}, ps{{"h", C}}, rows{{"b", 3}, {"s", 4}};
  // x ~ N(1, 2²): a mean away from zero, so the one-pass variance's cancellation is exercised.
  std::vector<float> x = random_normal(xs.numel(), 60, 2.0f);
  for (float& v : x) v += 1.0f;
  x = rounded(dtype, x);
  const std::vector<float> g = random_input(C, 61, dtype), b = random_input(C, 62, dtype),
                           w = random_input(xs.numel(), 63, dtype);
  const float eps = 1e-5f;

  // The whole-row kernels, as the first test checks them.
  DeviceTensor whole_x(backend, xs, x, dtype), whole_g(backend, ps, g, dtype),
      whole_b(backend, ps, b, dtype), whole_y(backend, xs, dtype), whole_mean(backend, rows),
      whole_rstd(backend, rows), whole_dy(backend, xs, w, dtype);
  DeviceTensor whole_dx = zeros(backend, xs, dtype), whole_dg = zeros(backend, ps, dtype),
               whole_db = zeros(backend, ps, dtype);
  backend.layernorm_forward(whole_x, whole_g, whole_b, whole_y, whole_mean, whole_rstd,
                            {.epsilon = eps});
  backend.layernorm_backward(whole_dy, whole_x, whole_g, whole_mean, whole_rstd, whole_dx, whole_dg,
                             whole_db, kAccumulateAll);

  const LayerNormRef ref = layernorm_full_ref(to_double(x), to_double(g), to_double(b), C, eps);
  const LayerNormGradRef grad =
      layernorm_backward_ref(to_double(w), to_double(x), to_double(g), ref, C);
  // kappa bounds how much E[x²] − mean² amplifies the sums' relative error in the variance:
  // |δvar| <= δ·(E[x²] + 2|mean|·E|x|) for sums off by a relative δ of their Σ|terms|; 3.3 for
  // the worst of these rows (a row whose mean is large beside its spread).
  double kappa = 0, mean_abs = 0;
  for (std::size_t r = 0; r < R; ++r) {
    double abs = 0, squares = 0;
    for (std::size_t j = 0; j < C; ++j) {
      abs += std::fabs(double{x[r * C + j]});
      squares += double{x[r * C + j]} * x[r * C + j];
    }
    abs /= C;
    squares /= C;
    const double var = 1 / (ref.rstd[r] * ref.rstd[r]);
    kappa = std::max(kappa, (squares + 2 * std::fabs(ref.mean[r]) * abs) / var);
    mean_abs = std::max(mean_abs, abs);
  }
  INFO("kappa " << kappa);

  for (const std::size_t pieces : {std::size_t{2}, std::size_t{4}}) {
    INFO(pieces << " pieces");
    const std::size_t local = C / pieces;
    const auto extent = static_cast<std::int64_t>(local);
    const TensorShape ls{{"b", 3}, {"s", 4}, {"h", extent}}, lp{{"h", extent}},
        sums_shape{{"b", 3}, {"s", 4}, {"sums", 2}};
    std::vector<DeviceTensor> px, pg, pb, pdy;
    for (std::size_t p = 0; p < pieces; ++p) {
      px.emplace_back(backend, ls, columns_of(x, C, p * local, local), dtype);
      pg.emplace_back(backend, lp, columns_of(g, C, p * local, local), dtype);
      pb.emplace_back(backend, lp, columns_of(b, C, p * local, local), dtype);
      pdy.emplace_back(backend, ls, columns_of(w, C, p * local, local), dtype);
    }
    // What the all-reduce does: the pieces' sums added in fp32, in rank order.
    const auto all_reduce = [&](const auto& partial) {
      std::vector<float> total(2 * R, 0.0f);
      for (std::size_t p = 0; p < pieces; ++p) {
        DeviceTensor sums(backend, sums_shape);
        partial(p, sums);
        const std::vector<float> mine = sums.download();
        for (std::size_t i = 0; i < total.size(); ++i) total[i] += mine[i];
      }
      return DeviceTensor(backend, sums_shape, total);
    };

    const DeviceTensor forward_sums = all_reduce(
        [&](std::size_t p, DeviceTensor& sums) { backend.layernorm_partial_sums(px[p], sums); });
    std::vector<float> y(x.size()), dx(x.size()), dg(C), db(C), mean, rstd;
    std::vector<DeviceTensor> pmean, prstd;
    for (std::size_t p = 0; p < pieces; ++p) {
      DeviceTensor py(backend, ls, dtype);
      pmean.emplace_back(backend, rows);
      prstd.emplace_back(backend, rows);
      backend.layernorm_apply(px[p], forward_sums, C, pg[p], pb[p], py, pmean[p], prstd[p],
                              {.epsilon = eps});
      place_columns(py.download(), C, p * local, y);
      if (p == 0) {
        mean = pmean[p].download();
        rstd = prstd[p].download();
      }
      // Every piece derives the same statistics from the same sums.
      CHECK(pmean[p].download() == mean);
      CHECK(prstd[p].download() == rstd);
    }
    const DeviceTensor backward_sums = all_reduce([&](std::size_t p, DeviceTensor& sums) {
      backend.layernorm_backward_partial_sums(pdy[p], px[p], pg[p], pmean[p], prstd[p], sums);
    });
    for (std::size_t p = 0; p < pieces; ++p) {
      DeviceTensor pdx = zeros(backend, ls, dtype), pdg = zeros(backend, lp, dtype),
                   pdb = zeros(backend, lp, dtype);
      backend.layernorm_backward_apply(pdy[p], px[p], pg[p], pmean[p], prstd[p], backward_sums, C,
                                       pdx, pdg, pdb, kAccumulateAll);
      place_columns(pdx.download(), C, p * local, dx);
      place_columns(pdg.download(), C, p * local, dg);
      place_columns(pdb.download(), C, p * local, db);
    }

    // Tolerances. The sums are exact in double, then rounded once to fp32 and added over the
    // pieces: pieces + 1 roundings relative to Σ|terms| (mean: one more for the division). The
    // variance amplifies that by kappa; rstd adds the sqrt and the division (2 roundings).
    const auto sums_chain = static_cast<std::int64_t>(pieces) + 1;
    const auto rstd_chain = static_cast<std::int64_t>(std::ceil(kappa * double(sums_chain))) + 2;
    const Tolerance t_mean = fp32_chain(sums_chain + 1, mean_abs);
    const Tolerance t_rstd = fp32_chain(rstd_chain, max_abs(ref.rstd));
    // y: x - mean, two products and a sum after rstd.
    const Tolerance t_y = tolerance(dtype, rstd_chain + 4, max_abs(ref.y));
    // dx: x̂ carries rstd's error; the backward sums add their own chain and 6 roundings follow.
    const Tolerance t_dx = tolerance(dtype, 2 * rstd_chain + sums_chain + 8, max_abs(grad.dx));
    // dgamma: a sum over the R rows of dy·x̂; dbeta: the same R-term sum as the whole-row kernel.
    const Tolerance t_dg = tolerance(dtype, rstd_chain + R + 4, max_abs(grad.dgamma));
    const Tolerance t_db = tolerance(dtype, R + 2, max_abs(grad.dbeta));
    CARTO_CHECK_CLOSE("split mean", mean, ref.mean, t_mean);
    CARTO_CHECK_CLOSE("split rstd", rstd, ref.rstd, t_rstd);
    CARTO_CHECK_CLOSE("split y", y, ref.y, t_y);
    CARTO_CHECK_CLOSE("split dx", dx, grad.dx, t_dx);
    CARTO_CHECK_CLOSE("split dgamma", dg, grad.dgamma, t_dg);
    CARTO_CHECK_CLOSE("split dbeta", db, grad.dbeta, t_db);

    // Against the whole-row kernels, each within the first test's tolerances of the exact values
    // (C-term float sums: chains C + 6, 2C + 8, C + R + 8, R + 2).
    CARTO_CHECK_CLOSE("split vs whole y", y, to_double(whole_y.download()),
                      combined(t_y, tolerance(dtype, C + 6, max_abs(ref.y))));
    CARTO_CHECK_CLOSE("split vs whole mean", mean, to_double(whole_mean.download()),
                      combined(t_mean, fp32_chain(C + 1, mean_abs)));
    CARTO_CHECK_CLOSE("split vs whole rstd", rstd, to_double(whole_rstd.download()),
                      combined(t_rstd, fp32_chain(C + 4, max_abs(ref.rstd))));
    CARTO_CHECK_CLOSE("split vs whole dx", dx, to_double(whole_dx.download()),
                      combined(t_dx, tolerance(dtype, 2 * C + 8, max_abs(grad.dx))));
    CARTO_CHECK_CLOSE("split vs whole dgamma", dg, to_double(whole_dg.download()),
                      combined(t_dg, tolerance(dtype, C + R + 8, max_abs(grad.dgamma))));
    CARTO_CHECK_CLOSE("split vs whole dbeta", db, to_double(whole_db.download()),
                      combined(t_db, tolerance(dtype, R + 2, max_abs(grad.dbeta))));
  }

  DeviceTensor bad_sums(backend, {{"b", 3}, {"s", 4}, {"sums", 3}});
  CHECK_THROWS_AS(backend.layernorm_partial_sums(whole_x, bad_sums), Error);
  DeviceTensor sums(backend, {{"b", 3}, {"s", 4}, {"sums", 2}});
  CHECK_THROWS_AS(backend.layernorm_apply(whole_x, sums, C - 1, whole_g, whole_b, whole_y,
                                          whole_mean, whole_rstd, {}),
                  Error);
}

TEST_CASE("softmax forward and backward, scaled, with and without the causal mask",
          "[kernels][softmax]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  constexpr std::size_t S = 7;
  const TensorShape s{{"b", 2}, {"heads", 3}, {"q", S}, {"k", S}};
  const std::vector<float> x = random_input(s.numel(), 10, dtype, 2.0f),
                           w = random_input(s.numel(), 11, dtype);
  for (Masking masking : {Masking::none, Masking::causal}) {
    const bool causal = masking == Masking::causal;
    INFO("causal " << causal);
    const SoftmaxArgs args{.scale = 0.35f, .masking = masking};
    DeviceTensor in(backend, s, x, dtype), y(backend, s, dtype);
    backend.softmax_forward(in, y, args);
    const std::vector<double> ref = softmax_ref(to_double(x), S, S, 0.35, causal);
    // A row: S exps and an S-term sum, then a division.
    CARTO_CHECK_CLOSE("softmax y", y.download(), ref, tolerance(dtype, S + 6, max_abs(ref)));
    if (causal) {
      const std::vector<float> got = y.download();
      std::int64_t nonzero_masked = 0;
      for (std::size_t r = 0; r < got.size() / S; ++r)
        for (std::size_t j = r % S + 1; j < S; ++j) nonzero_masked += got[r * S + j] != 0.0f;
      CHECK(nonzero_masked == 0);  // masked probabilities are exactly zero
    }

    DeviceTensor dy(backend, s, w, dtype);
    DeviceTensor dx = zeros(backend, s, dtype);
    backend.softmax_backward(y, dy, dx, args, CopyMode::accumulate);
    const std::vector<double> rx =
        central_difference(to_double(x), [&](const std::vector<double>& v) {
          return weighted_sum(softmax_ref(v, S, S, 0.35, causal), w);
        });
    // In bf16 the backward reads y as stored: one bf16-rounded intermediate.
    CARTO_CHECK_CLOSE("softmax dx", dx.download(), rx, tolerance(dtype, 2 * S + 8, max_abs(rx), 1));
  }
}

TEST_CASE("softmax on a shard of query rows masks by global positions", "[kernels][softmax]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  constexpr std::int64_t S = 8;
  const TensorShape whole{{"heads", 2}, {"q", S}, {"k", S}};
  const std::vector<float> x = random_input(whole.numel(), 20, dtype);
  DeviceTensor in(backend, whole, x, dtype), y(backend, whole, dtype);
  const SoftmaxArgs full{.scale = 0.5f, .masking = Masking::causal};
  backend.softmax_forward(in, y, full);
  const std::vector<float> all = y.download();
  // The query rows [4, 8) of each head alone, placed in the global (2, 8, 8).
  const TensorShape half{{"heads", 2}, {"q", S / 2}, {"k", S}};
  DeviceTensor part(backend, half, dtype), part_y(backend, half, dtype);
  backend.copy_box(in, {.offset = {0, S / 2, 0}, .extent = {2, S / 2, S}}, part, {0, 0, 0},
                   CopyMode::assign);
  backend.softmax_forward(part, part_y,
                          {.scale = 0.5f,
                           .masking = Masking::causal,
                           .placement = {.global_extents = {2, S, S}, .offset = {0, S / 2, 0}}});
  const std::vector<float> got = part_y.download();
  std::int64_t wrong = 0;
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::int64_t q = 0; q < S / 2; ++q)
      for (std::int64_t k = 0; k < S; ++k)
        wrong += got[static_cast<std::size_t>((h * (S / 2) + q) * S + k)] !=
                 all[static_cast<std::size_t>((h * S + S / 2 + q) * S + k)];
  CHECK(wrong == 0);  // the same row computes the same bits wherever it lives
}

TEST_CASE("GELU (tanh approximation) forward and backward", "[kernels][gelu]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  const TensorShape s{{"n", 257}};
  const std::vector<float> x = random_input(s.numel(), 30, dtype, 3.0f),
                           w = random_input(s.numel(), 31, dtype);
  DeviceTensor in(backend, s, x, dtype), y(backend, s, dtype);
  backend.gelu_forward(in, y);
  std::vector<double> ref(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) ref[i] = gelu_ref(x[i]);
  // About 8 roundings (the cubic, tanh, the products); 1 + tanh cancels for x << 0, where atol
  // holds.
  CARTO_CHECK_CLOSE("gelu y", y.download(), ref, tolerance(dtype, 8, max_abs(ref)));
  // dx starts nonzero: the backward adds into what it holds.
  const std::vector<float> dx0 = random_input(s.numel(), 32, dtype);
  DeviceTensor dy(backend, s, w, dtype), dx(backend, s, dx0, dtype);
  backend.gelu_backward(in, dy, dx, CopyMode::accumulate);
  std::vector<double> rx = central_difference(to_double(x), [&](const std::vector<double>& v) {
    double total = 0;
    for (std::size_t i = 0; i < v.size(); ++i) total += w[i] * gelu_ref(v[i]);
    return total;
  });
  for (std::size_t i = 0; i < rx.size(); ++i) rx[i] += dx0[i];
  CARTO_CHECK_CLOSE("gelu dx", dx.download(), rx, tolerance(dtype, 13, max_abs(rx)));
}

TEST_CASE("dropout: the mask is the RNG's at global indices, on any shard", "[kernels][dropout]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  const TensorShape s{{"b", 4}, {"s", 6}, {"h", 10}};
  const std::vector<float> x = random_input(s.numel(), 40, dtype),
                           w = random_input(s.numel(), 41, dtype);
  const DropoutArgs args{.probability = 0.25f,
                         .rng = {.seed = 9, .id = stream_id(RngPurpose::dropout, 1, 3)}};
  DeviceTensor in(backend, s, x, dtype), y(backend, s, dtype);
  backend.dropout_forward(in, y, args);
  const std::vector<float> got = y.download();
  std::vector<double> ref(x.size());
  std::int64_t dropped = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const bool keep = rng::keep(args.rng, static_cast<std::int64_t>(i), 0.25f);
    ref[i] = keep ? x[i] / 0.75 : 0.0;
    dropped += !keep;
    if (!keep) CHECK(got[i] == 0.0f);
  }
  CHECK(dropped > 0);
  CHECK(dropped < s.numel());
  // 1/(1-p), then x·that
  CARTO_CHECK_CLOSE("dropout y", got, ref, tolerance(dtype, 2, max_abs(ref)));

  // Backward adds mask·dy/(1-p) into what dx holds.
  DeviceTensor dy(backend, s, w, dtype), dx(backend, s, x, dtype);
  backend.dropout_backward(dy, dx, args, CopyMode::accumulate);
  std::vector<double> rdx(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    rdx[i] = x[i] + (rng::keep(args.rng, static_cast<std::int64_t>(i), 0.25f) ? w[i] / 0.75 : 0.0);
  }
  CARTO_CHECK_CLOSE("dropout dx", dx.download(), rdx, tolerance(dtype, 3, max_abs(rdx)));

  // A (2, 6, 5) shard at (2, 0, 5) draws the mask of those global elements: bitwise equal outputs.
  const TensorShape ls{{"b", 2}, {"s", 6}, {"h", 5}};
  DeviceTensor part(backend, ls, dtype), part_y(backend, ls, dtype);
  backend.copy_box(in, {.offset = {2, 0, 5}, .extent = {2, 6, 5}}, part, {0, 0, 0},
                   CopyMode::assign);
  DropoutArgs shard = args;
  shard.placement = {.global_extents = {4, 6, 10}, .offset = {2, 0, 5}};
  backend.dropout_forward(part, part_y, shard);
  const std::vector<float> pg = part_y.download();
  std::int64_t wrong = 0;
  for (std::int64_t a = 0; a < 2; ++a)
    for (std::int64_t b = 0; b < 6; ++b)
      for (std::int64_t c = 0; c < 5; ++c)
        wrong += pg[static_cast<std::size_t>((a * 6 + b) * 5 + c)] !=
                 got[static_cast<std::size_t>(((2 + a) * 6 + b) * 10 + 5 + c)];
  CHECK(wrong == 0);

  // Rows longer than the kernel's batches of Philox blocks (64 words), starting inside a block:
  // still rng::keep's mask at every global index, and y = x · fl(1 / (1 - p)) exactly (in fp32,
  // then rounded once to the dtype).
  const TensorShape long_rows{{"r", 3}, {"c", 1000}};
  const std::vector<float> lx = random_input(long_rows.numel(), 42, dtype);
  DeviceTensor long_x(backend, long_rows, lx, dtype), long_y(backend, long_rows, dtype);
  DropoutArgs placed = args;
  placed.placement = {.global_extents = {5, 1003}, .offset = {1, 3}};
  backend.dropout_forward(long_x, long_y, placed);
  const std::vector<float> ly = long_y.download();
  const float kept = 1.0f / (1.0f - 0.25f);
  std::int64_t wrong_mask = 0;
  for (std::int64_t r = 0; r < 3; ++r) {
    for (std::int64_t c = 0; c < 1000; ++c) {
      const auto i = static_cast<std::size_t>(r * 1000 + c);
      const bool keep = rng::keep(args.rng, (1 + r) * 1003 + 3 + c, 0.25f);
      wrong_mask += ly[i] != rounded(dtype, keep ? lx[i] * kept : 0.0f);
    }
  }
  CHECK(wrong_mask == 0);
}

TEST_CASE("add, scale, add_scaled, bias and bias backward", "[kernels][elementwise]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  const TensorShape s{{"b", 3}, {"s", 5}, {"h", 8}}, ps{{"s", 5}, {"h", 8}};
  const std::vector<float> a = random_input(s.numel(), 50, dtype),
                           b = random_input(s.numel(), 51, dtype),
                           p = random_input(ps.numel(), 52, dtype);
  DeviceTensor da(backend, s, a, dtype), db(backend, s, b, dtype), dp(backend, ps, p, dtype),
      y(backend, s, dtype);
  std::vector<double> ref(a.size());

  backend.add(da, db, y);
  for (std::size_t i = 0; i < a.size(); ++i) ref[i] = double{a[i]} + b[i];
  CARTO_CHECK_CLOSE("add", y.download(), ref, tolerance(dtype, 1, max_abs(ref)));

  backend.scale(da, 0.3f, y);
  for (std::size_t i = 0; i < a.size(); ++i) ref[i] = 0.3 * a[i];
  // 0.3f itself rounds
  CARTO_CHECK_CLOSE("scale", y.download(), ref, tolerance(dtype, 2, max_abs(ref)));

  backend.add_scaled(db, -2.0f, y);  // y = 0.3 a - 2 b
  for (std::size_t i = 0; i < a.size(); ++i) ref[i] = 0.3 * a[i] - 2.0 * b[i];
  // In bf16 y held 0.3·a rounded: one intermediate.
  CARTO_CHECK_CLOSE("add_scaled", y.download(), ref, tolerance(dtype, 4, max_abs(ref), 1));

  // The position table (S, H) broadcast over the batch, as GPT-2's embedding adds it.
  backend.bias_forward(da, dp, y);
  for (std::size_t i = 0; i < a.size(); ++i) ref[i] = double{a[i]} + p[i % p.size()];
  CARTO_CHECK_CLOSE("bias", y.download(), ref, tolerance(dtype, 1, max_abs(ref)));

  DeviceTensor gp(backend, ps, p, dtype);  // accumulates onto p
  backend.bias_backward(db, gp, CopyMode::accumulate);
  std::vector<double> rp(p.begin(), p.end());
  for (std::size_t i = 0; i < b.size(); ++i) rp[i % p.size()] += b[i];
  CARTO_CHECK_CLOSE("bias backward", gp.download(), rp, tolerance(dtype, 4, max_abs(rp)));

  DeviceTensor wrong(backend, {{"h", 5}}, dtype);
  CHECK_THROWS_AS(backend.bias_forward(da, wrong, y), Error);
}
