// Embedding lookup and scatter-add, softmax cross-entropy (whole and vocab-parallel over 2 and 4
// simulated shards, with the reductions done here as the communicator would), and AdamW against a
// hand-computed two-step example; on the backend under test in fp32 and bf16 (AdamW: a bf16 grad
// with the fp32 master weights and moments).
#include "kernels/kernel_support.hpp"

using namespace carto;
using namespace carto::test;

namespace {

constexpr std::int64_t N = 6, V = 12, H = 5;  // tokens, vocab, hidden
const std::vector<std::int32_t> kIds = {3, 0, 11, 3, 7, 5};

std::vector<double> cross_entropy_ref_rows(const std::vector<double>& logits, double* loss) {
  std::vector<double> lse(N);
  double total = 0;
  for (std::int64_t i = 0; i < N; ++i) {
    double max = -INFINITY, sum = 0;
    for (std::int64_t j = 0; j < V; ++j)
      max = std::max(max, logits[static_cast<std::size_t>(i * V + j)]);
    for (std::int64_t j = 0; j < V; ++j)
      sum += std::exp(logits[static_cast<std::size_t>(i * V + j)] - max);
    lse[static_cast<std::size_t>(i)] = max + std::log(sum);
    total += lse[static_cast<std::size_t>(i)] -
             logits[static_cast<std::size_t>(i * V + kIds[static_cast<std::size_t>(i)])];
  }
  *loss = total / N;
  return lse;
}

}  // namespace

TEST_CASE("embedding lookup and scatter-add, whole and over 2 and 4 vocab shards",
          "[kernels][embedding]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  const TensorShape table_shape{{"vocab", V}, {"hidden", H}}, ids_shape{{"b", 2}, {"s", 3}},
      out_shape{{"b", 2}, {"s", 3}, {"hidden", H}};
  const std::vector<float> table = random_input(table_shape.numel(), 90, dtype),
                           w = random_input(out_shape.numel(), 91, dtype);
  DeviceIds ids(backend, ids_shape, kIds);
  DeviceTensor t(backend, table_shape, table, dtype), out(backend, out_shape, dtype);
  backend.embedding_forward(t, ids, out, {});
  std::vector<float> expected(static_cast<std::size_t>(out_shape.numel()));
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t h = 0; h < H; ++h)
      expected[static_cast<std::size_t>(n * H + h)] =
          table[static_cast<std::size_t>(kIds[static_cast<std::size_t>(n)] * H + h)];
  CHECK(out.download() == expected);  // a copy: exact

  DeviceTensor dout(backend, out_shape, w, dtype);
  DeviceTensor dtable = zeros(backend, table_shape, dtype);
  backend.embedding_backward(dout, ids, dtable, {}, CopyMode::accumulate);
  std::vector<double> rt(table.size(), 0.0);  // token 3 appears twice: its row sums two
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t h = 0; h < H; ++h)
      rt[static_cast<std::size_t>(kIds[static_cast<std::size_t>(n)] * H + h)] +=
          w[static_cast<std::size_t>(n * H + h)];
  CARTO_CHECK_CLOSE("embedding dtable", dtable.download(), rt, tolerance(dtype, 2, max_abs(rt)));

  for (std::int64_t shards : {2, 4}) {
    INFO(shards << " vocab shards");
    const std::int64_t rows = V / shards;
    const TensorShape local{{"vocab", rows}, {"hidden", H}};
    DeviceTensor sum = zeros(backend, out_shape, dtype);
    std::vector<float> gathered_grad;
    for (std::int64_t r = 0; r < shards; ++r) {
      DeviceTensor part(backend, local, dtype), part_out(backend, out_shape, dtype);
      backend.copy_box(t, {.offset = {r * rows, 0}, .extent = {rows, H}}, part, {0, 0},
                       CopyMode::assign);
      backend.embedding_forward(part, ids, part_out, {.vocab_offset = r * rows});
      backend.add_scaled(part_out, 1.0f, sum);  // the all-reduce of the Partial output
      DeviceTensor part_grad = zeros(backend, local, dtype);
      backend.embedding_backward(dout, ids, part_grad, {.vocab_offset = r * rows},
                                 CopyMode::accumulate);
      const std::vector<float> g = part_grad.download();
      gathered_grad.insert(gathered_grad.end(), g.begin(), g.end());
    }
    CHECK(sum.download() == expected);          // one nonzero summand per element: exact
    CHECK(gathered_grad == dtable.download());  // the same additions in the same order
  }
}

TEST_CASE("softmax cross-entropy: forward, backward, and vocab-parallel over 2 and 4 shards",
          "[kernels][cross_entropy]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  const TensorShape logits_shape{{"b", 2}, {"s", 3}, {"vocab", V}}, rows{{"b", 2}, {"s", 3}};
  const TensorShape scalar{};
  const std::vector<float> logits = random_input(logits_shape.numel(), 100, dtype, 3.0f);
  DeviceIds targets(backend, rows, kIds);
  DeviceTensor tl(backend, logits_shape, logits, dtype), loss(backend, scalar), lse(backend, rows),
      dloss(backend, scalar, {1.0f});
  backend.cross_entropy_forward(tl, targets, loss, lse, {});
  double ref_loss = 0;
  const std::vector<double> ref_lse = cross_entropy_ref_rows(to_double(logits), &ref_loss);
  // A row: V exps summed (V + 4 roundings) then a log; the mean over N rows is summed in double.
  CARTO_CHECK_CLOSE("cross-entropy logsumexp", lse.download(), ref_lse,
                    fp32_chain(V + 6, max_abs(ref_lse)));
  CARTO_CHECK_CLOSE("cross-entropy loss", loss.download(), std::vector<double>{ref_loss},
                    fp32_chain(V + 8, max_abs(ref_lse)));

  DeviceTensor dlogits = zeros(backend, logits_shape, dtype);
  backend.cross_entropy_backward(tl, targets, lse, dloss, dlogits, {}, CopyMode::accumulate);
  const std::vector<double> rd =
      central_difference(to_double(logits), [](const std::vector<double>& x) {
        double l = 0;
        (void)cross_entropy_ref_rows(x, &l);
        return l;
      });
  CARTO_CHECK_CLOSE("cross-entropy dlogits", dlogits.download(), rd,
                    tolerance(dtype, V + 8, max_abs(rd)));
  CHECK_THROWS_AS(backend.cross_entropy_forward(tl, targets, loss, lse, {.vocab_offset = 4}),
                  Error);

  const std::vector<float> whole_loss = loss.download(), whole_grad = dlogits.download();
  for (std::int64_t shards : {2, 4}) {
    INFO(shards << " vocab shards");
    const std::int64_t cols = V / shards;
    const TensorShape local{{"b", 2}, {"s", 3}, {"vocab", cols}};
    std::vector<DeviceTensor> parts;
    for (std::int64_t r = 0; r < shards; ++r) {
      parts.emplace_back(backend, local, dtype);
      backend.copy_box(tl, {.offset = {0, 0, r * cols}, .extent = {2, 3, cols}}, parts.back(),
                       {0, 0, 0}, CopyMode::assign);
    }
    // all-reduce max of the local row maxima.
    DeviceTensor row_max(backend, rows), part_max(backend, rows);
    std::vector<float> global_max(N, -INFINITY);
    for (std::int64_t r = 0; r < shards; ++r) {
      backend.cross_entropy_row_max(parts[static_cast<std::size_t>(r)], part_max);
      const std::vector<float> m = part_max.download();
      for (std::int64_t i = 0; i < N; ++i)
        global_max[static_cast<std::size_t>(i)] =
            std::max(global_max[static_cast<std::size_t>(i)], m[static_cast<std::size_t>(i)]);
    }
    row_max.upload(global_max);
    // all-reduce sum of the local Σ exp and of the target logits.
    DeviceTensor sum_exp = zeros(backend, rows), target = zeros(backend, rows),
                 part_sum(backend, rows), part_target(backend, rows);
    for (std::int64_t r = 0; r < shards; ++r) {
      const CrossEntropyArgs args{.vocab_offset = r * cols};
      backend.cross_entropy_sum_exp(parts[static_cast<std::size_t>(r)], row_max, part_sum);
      backend.cross_entropy_target_logit(parts[static_cast<std::size_t>(r)], targets, part_target,
                                         args);
      backend.add_scaled(part_sum, 1.0f, sum_exp);
      backend.add_scaled(part_target, 1.0f, target);
    }
    std::vector<float> grads;
    for (std::int64_t r = 0; r < shards; ++r) {
      const CrossEntropyArgs args{.vocab_offset = r * cols};
      DeviceTensor part_loss(backend, scalar), part_lse(backend, rows),
          part_grad = zeros(backend, local, dtype);
      backend.cross_entropy_loss(row_max, sum_exp, target, part_loss, part_lse, args);
      // Every shard holds the same loss; the sums were split, so compare within the sum's rounding.
      CARTO_CHECK_CLOSE("vocab-parallel loss", part_loss.download(), to_double(whole_loss),
                        fp32_chain(2 * V + 8, max_abs(ref_lse)));
      backend.cross_entropy_backward(parts[static_cast<std::size_t>(r)], targets, part_lse, dloss,
                                     part_grad, args, CopyMode::accumulate);
      // Gather the vocab columns back into (rows, V) order.
      const std::vector<float> g = part_grad.download();
      grads.resize(static_cast<std::size_t>(N * V));
      for (std::int64_t i = 0; i < N; ++i)
        for (std::int64_t j = 0; j < cols; ++j)
          grads[static_cast<std::size_t>(i * V + r * cols + j)] =
              g[static_cast<std::size_t>(i * cols + j)];
    }
    // Both gradients within tolerance(dtype, V + 8) of the exact one (in bf16 each rounded once).
    const Tolerance one = tolerance(dtype, V + 8, max_abs(rd));
    CARTO_CHECK_CLOSE("vocab-parallel dlogits", grads, to_double(whole_grad),
                      (Tolerance{.atol = 2 * one.atol, .rtol = 2 * one.rtol}));
  }
}

TEST_CASE("the loss over a batch shard is a summand of the global mean",
          "[kernels][cross_entropy]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  const TensorShape logits_shape{{"rows", N}, {"vocab", V}}, half{{"rows", N / 2}, {"vocab", V}};
  const std::vector<float> logits = random_input(logits_shape.numel(), 110, dtype);
  DeviceIds all(backend, {{"rows", N}}, kIds);
  DeviceTensor tl(backend, logits_shape, logits, dtype), loss(backend, {}),
      lse(backend, {{"rows", N}});
  backend.cross_entropy_forward(tl, all, loss, lse, {});
  double total = 0;
  for (std::int64_t r = 0; r < 2; ++r) {
    DeviceTensor part(backend, half, dtype), part_loss(backend, {}),
        part_lse(backend, {{"rows", N / 2}});
    backend.copy_box(tl, {.offset = {r * N / 2, 0}, .extent = {N / 2, V}}, part, {0, 0},
                     CopyMode::assign);
    DeviceIds ids(
        backend, {{"rows", N / 2}},
        std::vector<std::int32_t>(kIds.begin() + r * N / 2, kIds.begin() + (r + 1) * N / 2));
    backend.cross_entropy_forward(part, ids, part_loss, part_lse, {.token_count = N});
    total += part_loss.download()[0];
  }
  const double whole = loss.download()[0];
  CHECK(std::fabs(total - whole) <= fp32_chain(V + 8, std::fabs(whole)).atol);
}

TEST_CASE("AdamW: two steps by hand", "[kernels][adamw]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  // One parameter p0 = 1, lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.1; grads 0.5, -0.25.
  // Step 1: m = 0.05, v = 0.00025, m̂ = 0.5, v̂ = 0.25, update = 0.5 / (0.5 + 1e-8)
  //         p = 1 - 0.1·0.1·1 - 0.1·0.99999998 = 0.890000002
  // Step 2: m = 0.9·0.05 - 0.025 = 0.02, v = 0.999·0.00025 + 0.001·0.0625 = 0.00031225,
  //         m̂ = 0.02 / 0.19 = 0.105263158, v̂ = 0.00031225 / 0.001999 = 0.156203102,
  //         sqrt(v̂) = 0.395225381, p = 0.99·0.890000002 - 0.1·0.105263158 / 0.395225381
  //         = 0.881100002 - 0.026633704 = 0.854466298
  struct Hyper {
    double lr, b1, b2, eps, wd;
  };
  struct State {
    double p, m, v;
  };
  // The update in double, for given hyperparameters.
  const auto step = [](State st, double g, const Hyper& h, int t) {
    st.m = h.b1 * st.m + (1 - h.b1) * g;
    st.v = h.b2 * st.v + (1 - h.b2) * g * g;
    const double mhat = st.m / (1 - std::pow(h.b1, t)), vhat = st.v / (1 - std::pow(h.b2, t));
    st.p = st.p - h.lr * h.wd * st.p - h.lr * mhat / (std::sqrt(vhat) + h.eps);
    return st;
  };
  const Hyper decimal{.lr = 0.1, .b1 = 0.9, .b2 = 0.999, .eps = 1e-8, .wd = 0.1};
  const State s1 = step({.p = 1.0, .m = 0.0, .v = 0.0}, 0.5, decimal, 1);
  const State s2 = step(s1, -0.25, decimal, 2);
  CHECK(std::fabs(s1.p - 0.890000002) < 1e-9);
  CHECK(std::fabs(s2.m - 0.02) < 1e-15);
  CHECK(std::fabs(s2.v - 0.00031225) < 1e-15);
  CHECK(std::fabs(s2.p - 0.854466298) < 1e-9);
  // The kernel's hyperparameters are fp32 (1 - 0.999f differs from 0.001 by 1.3e-5 relative), so
  // it is held to the same formula with the fp32 constants.
  const Hyper f32{.lr = double{0.1f},
                  .b1 = double{0.9f},
                  .b2 = double{0.999f},
                  .eps = double{1e-8f},
                  .wd = double{0.1f}};
  const State r1 = step({.p = 1.0, .m = 0.0, .v = 0.0}, 0.5, f32, 1);
  const State r2 = step(r1, -0.25, f32, 2);
  const double p1 = r1.p, p2 = r2.p, m2 = r2.m, v2 = r2.v;

  // Three copies of the parameter, the second and third with other signs, to see the elementwise
  // update; p, m, v in fp32 for two steps: about 20 roundings, each relative to values of order 1.
  const TensorShape s{{"n", 3}};
  DeviceTensor p(backend, s, {1.0f, -1.0f, 1.0f}), m = zeros(backend, s), v = zeros(backend, s);
  const AdamWArgs args{.learning_rate = 0.1f,
                       .beta1 = 0.9f,
                       .beta2 = 0.999f,
                       .epsilon = 1e-8f,
                       .weight_decay = 0.1f};
  // The gradients are exact in bf16: a bf16 grad gives the fp32 one's update.
  DeviceTensor g1(backend, s, {0.5f, -0.5f, 0.5f}, dtype),
      g2(backend, s, {-0.25f, 0.25f, -0.25f}, dtype);
  backend.adamw_update(p, g1, m, v, args);  // step 1
  CARTO_CHECK_CLOSE("p after step 1", p.download(), (std::vector<double>{p1, -p1, p1}),
                    fp32_chain(10, 1.0));
  AdamWArgs second = args;
  second.step = 2;
  backend.adamw_update(p, g2, m, v, second);
  CARTO_CHECK_CLOSE("p after step 2", p.download(), (std::vector<double>{p2, -p2, p2}),
                    fp32_chain(20, 1.0));
  CARTO_CHECK_CLOSE("m after step 2", m.download(), (std::vector<double>{m2, -m2, m2}),
                    fp32_chain(6, 0.05));
  CARTO_CHECK_CLOSE("v after step 2", v.download(), (std::vector<double>{v2, v2, v2}),
                    fp32_chain(6, 3e-4));
  CHECK_THROWS_AS(backend.adamw_update(p, g2, m, v, {.step = 0}), Error);
  // The master weights and moments are fp32 (backend.hpp); a bf16 one is refused, naming it.
  DeviceTensor p16(backend, s, {1.0f, -1.0f, 1.0f}, DType::bf16);
  CHECK_THROWS_WITH(backend.adamw_update(p16, g2, m, v, second),
                    Catch::Contains("adamw_update") && Catch::Contains("param is bf16"));
}
