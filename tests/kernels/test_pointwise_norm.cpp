// Layernorm, softmax (scaled, causal, sharded rows), GELU, dropout, add, scale and bias: forward
// against double references, backward against central differences of those references.
#include <cpu/cpu_backend.hpp>

#include "kernels/kernel_support.hpp"

using namespace carto;
using namespace carto::test;

namespace {

// ---- double references --------------------------------------------------------------------------

std::vector<double> layernorm_ref(const std::vector<double>& x, const std::vector<double>& g,
                                  const std::vector<double>& b, std::size_t c, double eps) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / c; ++r) {
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < c; ++j) mean += x[r * c + j];
    mean /= static_cast<double>(c);
    for (std::size_t j = 0; j < c; ++j) var += (x[r * c + j] - mean) * (x[r * c + j] - mean);
    const double rstd = 1 / std::sqrt(var / static_cast<double>(c) + eps);
    for (std::size_t j = 0; j < c; ++j) y[r * c + j] = (x[r * c + j] - mean) * rstd * g[j] + b[j];
  }
  return y;
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
  cpu::CpuBackend cpu;
  Backend& backend = cpu;
  constexpr std::size_t C = 32;
  const TensorShape xs{{"b", 3}, {"s", 4}, {"h", C}}, ps{{"h", C}}, rows{{"b", 3}, {"s", 4}};
  const std::vector<float> x = random_normal(xs.numel(), 1, 2.0f), g = random_normal(C, 2),
                           b = random_normal(C, 3), w = random_normal(xs.numel(), 4);
  const float eps = 1e-5f;
  DeviceTensor dx_(backend, xs, x), dg(backend, ps, g), db(backend, ps, b), y(backend, xs),
      mean(backend, rows), rstd(backend, rows);
  backend.layernorm_forward(dx_, dg, db, y, mean, rstd, {.epsilon = eps});
  const std::vector<double> ref = layernorm_ref(to_double(x), to_double(g), to_double(b), C, eps);
  // Mean and variance are C-term sums; the output adds a few roundings after them.
  CARTO_CHECK_CLOSE("layernorm y", y.download(), ref, fp32_chain(C + 6, max_abs(ref)));

  DeviceTensor dy(backend, xs, w);
  DeviceTensor gx = zeros(backend, xs), gg = zeros(backend, ps), gb = zeros(backend, ps);
  backend.layernorm_backward(dy, dx_, dg, mean, rstd, gx, gg, gb);
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
  CARTO_CHECK_CLOSE("layernorm dx", gx.download(), rx, fp32_chain(2 * C + 8, max_abs(rx)));
  // dgamma and dbeta sum over the 12 rows, each term from C-term statistics.
  CARTO_CHECK_CLOSE("layernorm dgamma", gg.download(), rg, fp32_chain(C + 12 + 8, max_abs(rg)));
  CARTO_CHECK_CLOSE("layernorm dbeta", gb.download(), rb, fp32_chain(12 + 2, max_abs(rb)));
}

TEST_CASE("softmax forward and backward, scaled, with and without the causal mask",
          "[kernels][softmax]") {
  cpu::CpuBackend cpu;
  Backend& backend = cpu;
  constexpr std::size_t S = 7;
  const TensorShape s{{"b", 2}, {"heads", 3}, {"q", S}, {"k", S}};
  const std::vector<float> x = random_normal(s.numel(), 10, 2.0f), w = random_normal(s.numel(), 11);
  for (Masking masking : {Masking::none, Masking::causal}) {
    const bool causal = masking == Masking::causal;
    INFO("causal " << causal);
    const SoftmaxArgs args{.scale = 0.35f, .masking = masking};
    DeviceTensor in(backend, s, x), y(backend, s);
    backend.softmax_forward(in, y, args);
    const std::vector<double> ref = softmax_ref(to_double(x), S, S, 0.35, causal);
    // A row: S exps and an S-term sum, then a division.
    CARTO_CHECK_CLOSE("softmax y", y.download(), ref, fp32_chain(S + 6, max_abs(ref)));
    if (causal) {
      const std::vector<float> got = y.download();
      std::int64_t nonzero_masked = 0;
      for (std::size_t r = 0; r < got.size() / S; ++r)
        for (std::size_t j = r % S + 1; j < S; ++j) nonzero_masked += got[r * S + j] != 0.0f;
      CHECK(nonzero_masked == 0);  // masked probabilities are exactly zero
    }

    DeviceTensor dy(backend, s, w);
    DeviceTensor dx = zeros(backend, s);
    backend.softmax_backward(y, dy, dx, args);
    const std::vector<double> rx =
        central_difference(to_double(x), [&](const std::vector<double>& v) {
          return weighted_sum(softmax_ref(v, S, S, 0.35, causal), w);
        });
    CARTO_CHECK_CLOSE("softmax dx", dx.download(), rx, fp32_chain(2 * S + 8, max_abs(rx)));
  }
}

TEST_CASE("softmax on a shard of query rows masks by global positions", "[kernels][softmax]") {
  cpu::CpuBackend backend;
  constexpr std::int64_t S = 8;
  const TensorShape whole{{"heads", 2}, {"q", S}, {"k", S}};
  const std::vector<float> x = random_normal(whole.numel(), 20);
  DeviceTensor in(backend, whole, x), y(backend, whole);
  const SoftmaxArgs full{.scale = 0.5f, .masking = Masking::causal};
  backend.softmax_forward(in, y, full);
  const std::vector<float> all = y.download();
  // The query rows [4, 8) of each head alone, placed in the global (2, 8, 8).
  const TensorShape half{{"heads", 2}, {"q", S / 2}, {"k", S}};
  DeviceTensor part(backend, half), part_y(backend, half);
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
  cpu::CpuBackend cpu;
  Backend& backend = cpu;
  const TensorShape s{{"n", 257}};
  const std::vector<float> x = random_normal(s.numel(), 30, 3.0f), w = random_normal(s.numel(), 31);
  DeviceTensor in(backend, s, x), y(backend, s);
  backend.gelu_forward(in, y);
  std::vector<double> ref(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) ref[i] = gelu_ref(x[i]);
  // About 8 roundings (the cubic, tanh, the products); 1 + tanh cancels for x << 0, where atol
  // holds.
  CARTO_CHECK_CLOSE("gelu y", y.download(), ref, fp32_chain(8, max_abs(ref)));
  DeviceTensor dy(backend, s, w);
  DeviceTensor dx = zeros(backend, s);
  backend.gelu_backward(in, dy, dx);
  const std::vector<double> rx =
      central_difference(to_double(x), [&](const std::vector<double>& v) {
        double total = 0;
        for (std::size_t i = 0; i < v.size(); ++i) total += w[i] * gelu_ref(v[i]);
        return total;
      });
  CARTO_CHECK_CLOSE("gelu dx", dx.download(), rx, fp32_chain(12, max_abs(rx)));
}

TEST_CASE("dropout: the mask is the RNG's at global indices, on any shard", "[kernels][dropout]") {
  cpu::CpuBackend cpu;
  Backend& backend = cpu;
  const TensorShape s{{"b", 4}, {"s", 6}, {"h", 10}};
  const std::vector<float> x = random_normal(s.numel(), 40), w = random_normal(s.numel(), 41);
  const DropoutArgs args{.probability = 0.25f,
                         .rng = {.seed = 9, .id = stream_id(RngPurpose::dropout, 1, 3)}};
  DeviceTensor in(backend, s, x), y(backend, s);
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
  CARTO_CHECK_CLOSE("dropout y", got, ref, fp32_chain(2, max_abs(ref)));  // 1/(1-p), then x·that

  // Backward adds mask·dy/(1-p) into what dx holds.
  DeviceTensor dy(backend, s, w), dx(backend, s, x);
  backend.dropout_backward(dy, dx, args);
  std::vector<double> rdx(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    rdx[i] = x[i] + (rng::keep(args.rng, static_cast<std::int64_t>(i), 0.25f) ? w[i] / 0.75 : 0.0);
  }
  CARTO_CHECK_CLOSE("dropout dx", dx.download(), rdx, fp32_chain(3, max_abs(rdx)));

  // A (2, 6, 5) shard at (2, 0, 5) draws the mask of those global elements: bitwise equal outputs.
  const TensorShape ls{{"b", 2}, {"s", 6}, {"h", 5}};
  DeviceTensor part(backend, ls), part_y(backend, ls);
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
}

TEST_CASE("add, scale, add_scaled, bias and bias backward", "[kernels][elementwise]") {
  cpu::CpuBackend cpu;
  Backend& backend = cpu;
  const TensorShape s{{"b", 3}, {"s", 5}, {"h", 8}}, ps{{"s", 5}, {"h", 8}};
  const std::vector<float> a = random_normal(s.numel(), 50), b = random_normal(s.numel(), 51),
                           p = random_normal(ps.numel(), 52);
  DeviceTensor da(backend, s, a), db(backend, s, b), dp(backend, ps, p), y(backend, s);
  std::vector<double> ref(a.size());

  backend.add(da, db, y);
  for (std::size_t i = 0; i < a.size(); ++i) ref[i] = double{a[i]} + b[i];
  CARTO_CHECK_CLOSE("add", y.download(), ref, fp32_chain(1, max_abs(ref)));

  backend.scale(da, 0.3f, y);
  for (std::size_t i = 0; i < a.size(); ++i) ref[i] = 0.3 * a[i];
  CARTO_CHECK_CLOSE("scale", y.download(), ref, fp32_chain(2, max_abs(ref)));  // 0.3f itself rounds

  backend.add_scaled(db, -2.0f, y);  // y = 0.3 a - 2 b
  for (std::size_t i = 0; i < a.size(); ++i) ref[i] = 0.3 * a[i] - 2.0 * b[i];
  CARTO_CHECK_CLOSE("add_scaled", y.download(), ref, fp32_chain(4, max_abs(ref)));

  // The position table (S, H) broadcast over the batch, as GPT-2's embedding adds it.
  backend.bias_forward(da, dp, y);
  for (std::size_t i = 0; i < a.size(); ++i) ref[i] = double{a[i]} + p[i % p.size()];
  CARTO_CHECK_CLOSE("bias", y.download(), ref, fp32_chain(1, max_abs(ref)));

  DeviceTensor gp(backend, ps, p);  // accumulates onto p
  backend.bias_backward(db, gp);
  std::vector<double> rp(p.begin(), p.end());
  for (std::size_t i = 0; i < b.size(); ++i) rp[i % p.size()] += b[i];
  CARTO_CHECK_CLOSE("bias backward", gp.download(), rp, fp32_chain(4, max_abs(rp)));

  DeviceTensor wrong(backend, {{"h", 5}});
  CHECK_THROWS_AS(backend.bias_forward(da, wrong, y), Error);
}
