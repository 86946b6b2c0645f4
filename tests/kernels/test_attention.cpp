// Fused attention: forward against a double reference, backward against central differences, the
// fused kernel against the materialized pieces (GEMM + softmax + dropout) forward and backward, and
// a head shard against the same heads of the whole; on the backend under test in fp32 and bf16.
#include "kernels/kernel_support.hpp"

using namespace carto;
using namespace carto::test;

namespace {

constexpr std::int64_t B = 2, A = 2, S = 6, D = 4;
const TensorShape kQkv{{"b", B}, {"heads", A}, {"s", S}, {"d", D}};
const TensorShape kProbs{{"b", B}, {"heads", A}, {"q", S}, {"k", S}};
const TensorShape kRows{{"b", B}, {"heads", A}, {"s", S}};

struct AttentionRef {
  std::vector<double> out, lse;
};

// softmax(scale q kᵀ, causal) with dropout at the probability's global index, times v.
AttentionRef attention_ref(const std::vector<double>& q, const std::vector<double>& k,
                           const std::vector<double>& v, const AttentionArgs& args) {
  AttentionRef r{.out = std::vector<double>(q.size(), 0.0),
                 .lse = std::vector<double>(static_cast<std::size_t>(B * A * S))};
  for (std::int64_t bh = 0; bh < B * A; ++bh) {
    for (std::int64_t i = 0; i < S; ++i) {
      std::vector<double> s(S, -INFINITY);
      double max = -INFINITY;
      for (std::int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (std::int64_t e = 0; e < D; ++e)
          dot += q[static_cast<std::size_t>((bh * S + i) * D + e)] *
                 k[static_cast<std::size_t>((bh * S + j) * D + e)];
        s[static_cast<std::size_t>(j)] = args.scale * dot;
        max = std::max(max, s[static_cast<std::size_t>(j)]);
      }
      double sum = 0;
      for (std::int64_t j = 0; j <= i; ++j) sum += std::exp(s[static_cast<std::size_t>(j)] - max);
      r.lse[static_cast<std::size_t>(bh * S + i)] = max + std::log(sum);
      for (std::int64_t j = 0; j <= i; ++j) {
        double p = std::exp(s[static_cast<std::size_t>(j)] - max) / sum;
        if (args.dropout > 0) {
          p = rng::keep(args.rng, (bh * S + i) * S + j, args.dropout) ? p / (1.0 - args.dropout)
                                                                      : 0.0;
        }
        for (std::int64_t e = 0; e < D; ++e)
          r.out[static_cast<std::size_t>((bh * S + i) * D + e)] +=
              p * v[static_cast<std::size_t>((bh * S + j) * D + e)];
      }
    }
  }
  return r;
}

// bf16-rounded intermediates a bf16 attention may have. Forward: the probabilities, which a
// kernel on bf16 tensor cores rounds to bf16 for the P·v GEMM. Backward: those probabilities, the
// score gradients (rounded for the dq and dk GEMMs) and the output as stored, which the backward
// reads (D = dout · out). The CPU keeps P and dS in fp32; the allowance serves every backend.
enum class Direction : std::uint8_t { forward, backward };
std::int64_t attention_intermediates(DType dtype, Direction direction) {
  if (dtype != DType::bf16) return 0;
  return direction == Direction::forward ? 1 : 3;
}

// The difference of two results each within tolerance(dtype, chain, scale, intermediates) of the
// exact value.
Tolerance twice(DType dtype, std::int64_t chain, double scale, std::int64_t intermediates = 0) {
  const Tolerance t = tolerance(dtype, chain, scale, intermediates);
  return {.atol = 2 * t.atol, .rtol = 2 * t.rtol};
}

const AttentionArgs kArgs{.scale = 0.5f,
                          .masking = Masking::causal,
                          .dropout = 0.2f,
                          .rng = {.seed = 77, .id = stream_id(RngPurpose::dropout, 4, 1)}};

}  // namespace

TEST_CASE("fused attention forward and backward against double references",
          "[kernels][attention]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  const std::vector<float> q = random_input(kQkv.numel(), 60, dtype),
                           k = random_input(kQkv.numel(), 61, dtype),
                           v = random_input(kQkv.numel(), 62, dtype),
                           w = random_input(kQkv.numel(), 63, dtype);
  for (float dropout : {0.0f, 0.2f}) {
    INFO("dropout " << dropout);
    AttentionArgs args = kArgs;
    args.dropout = dropout;
    DeviceTensor dq_(backend, kQkv, q, dtype), dk_(backend, kQkv, k, dtype),
        dv_(backend, kQkv, v, dtype), out(backend, kQkv, dtype), lse(backend, kRows);
    backend.attention_forward(dq_, dk_, dv_, out, lse, args);
    const AttentionRef ref = attention_ref(to_double(q), to_double(k), to_double(v), args);
    // Scores are D-term dots, a row sums S exps, the output sums S products: D + 2S + 8 roundings.
    CARTO_CHECK_CLOSE("attention out", out.download(), ref.out,
                      tolerance(dtype, D + 2 * S + 8, max_abs(ref.out),
                                attention_intermediates(dtype, Direction::forward)));
    CARTO_CHECK_CLOSE("attention logsumexp", lse.download(), ref.lse,
                      fp32_chain(D + S + 6, max_abs(ref.lse)));

    DeviceTensor dout(backend, kQkv, w, dtype);
    DeviceTensor gq = zeros(backend, kQkv, dtype), gk = zeros(backend, kQkv, dtype),
                 gv = zeros(backend, kQkv, dtype);
    backend.attention_backward(dq_, dk_, dv_, out, lse, dout, gq, gk, gv, args,
                               CopyMode::accumulate);
    const auto qd = to_double(q), kd = to_double(k), vd = to_double(v);
    const auto rq = central_difference(qd, [&](const std::vector<double>& x) {
      return weighted_sum(attention_ref(x, kd, vd, args).out, w);
    });
    const auto rk = central_difference(kd, [&](const std::vector<double>& x) {
      return weighted_sum(attention_ref(qd, x, vd, args).out, w);
    });
    const auto rv = central_difference(vd, [&](const std::vector<double>& x) {
      return weighted_sum(attention_ref(qd, kd, x, args).out, w);
    });
    // Each gradient element sums S terms, each from D-term dots and the recomputed probability.
    const std::int64_t chain = 2 * D + 2 * S + 12;
    const std::int64_t mid = attention_intermediates(dtype, Direction::backward);
    CARTO_CHECK_CLOSE("attention dq", gq.download(), rq, tolerance(dtype, chain, max_abs(rq), mid));
    CARTO_CHECK_CLOSE("attention dk", gk.download(), rk, tolerance(dtype, chain, max_abs(rk), mid));
    CARTO_CHECK_CLOSE("attention dv", gv.download(), rv, tolerance(dtype, chain, max_abs(rv), mid));
  }
}

namespace {

// The fused kernels against the materialized pieces on (b, heads, s, d) inputs from `seed`.
// In bf16 the inputs and the four results are bf16 and the materialized intermediates (scores,
// probabilities and their gradients) fp32: both paths are then one fp32 computation and a store.
void check_fused_equals_materialized(std::int64_t b, std::int64_t heads, std::int64_t s,
                                     std::int64_t d, std::uint32_t seed, DType dtype) {
  Backend& backend = test_backend();
  INFO(test_backend_name() << ", " << dtype);
  const TensorShape qkv{{"b", b}, {"heads", heads}, {"s", s}, {"d", d}};
  const TensorShape probs_shape{{"b", b}, {"heads", heads}, {"q", s}, {"k", s}};
  const TensorShape rows{{"b", b}, {"heads", heads}, {"s", s}};
  const std::vector<float> q = random_input(qkv.numel(), seed, dtype),
                           k = random_input(qkv.numel(), seed + 1, dtype),
                           v = random_input(qkv.numel(), seed + 2, dtype),
                           w = random_input(qkv.numel(), seed + 3, dtype);
  DeviceTensor tq(backend, qkv, q, dtype), tk(backend, qkv, k, dtype), tv(backend, qkv, v, dtype),
      dout(backend, qkv, w, dtype);

  // Fused.
  DeviceTensor fo(backend, qkv, dtype), lse(backend, rows);
  backend.attention_forward(tq, tk, tv, fo, lse, kArgs);
  DeviceTensor fq = zeros(backend, qkv, dtype), fk = zeros(backend, qkv, dtype),
               fv = zeros(backend, qkv, dtype);
  backend.attention_backward(tq, tk, tv, fo, lse, dout, fq, fk, fv, kArgs, CopyMode::accumulate);

  // Materialized, as the graph's materialized attention runs it (the scale folded into softmax).
  const SoftmaxArgs soft{.scale = kArgs.scale, .masking = Masking::causal};
  const DropoutArgs drop{.probability = kArgs.dropout, .rng = kArgs.rng};
  DeviceTensor scores(backend, probs_shape), probs(backend, probs_shape),
      dropped(backend, probs_shape), mo(backend, qkv, dtype);
  backend.gemm(tq, tk, scores, {.b = Transpose::yes});  // (B, a, S, S)
  backend.softmax_forward(scores, probs, soft);
  backend.dropout_forward(probs, dropped, drop);
  backend.gemm(dropped, tv, mo, {});  // (B, a, S, d)
  DeviceTensor d_dropped(backend, probs_shape), d_probs = zeros(backend, probs_shape),
                                                d_scores = zeros(backend, probs_shape);
  DeviceTensor mq = zeros(backend, qkv, dtype), mk = zeros(backend, qkv, dtype),
               mv = zeros(backend, qkv, dtype);
  backend.gemm(dout, tv, d_dropped, {.b = Transpose::yes});  // dP' = dO vᵀ
  backend.gemm(dropped, dout, mv, {.a = Transpose::yes});    // dv = P'ᵀ dO
  backend.dropout_backward(d_dropped, d_probs, drop, CopyMode::accumulate);
  backend.softmax_backward(probs, d_probs, d_scores, soft, CopyMode::accumulate);
  backend.gemm(d_scores, tk, mq, {});                     // dq = dS k
  backend.gemm(d_scores, tq, mk, {.a = Transpose::yes});  // dk = dSᵀ q

  // Two evaluations of one function: each within its tolerance of the exact value, so within
  // twice that of each other.
  const std::int64_t chain = 2 * d + 2 * s + 12;
  const std::int64_t mid = attention_intermediates(dtype, Direction::backward);
  const std::int64_t mid_forward = attention_intermediates(dtype, Direction::forward);
  const auto as_ref = [](const DeviceTensor& t) { return to_double(t.download()); };
  CARTO_CHECK_CLOSE("out", fo.download(), as_ref(mo),
                    twice(dtype, chain, max_abs(as_ref(mo)), mid_forward));
  CARTO_CHECK_CLOSE("dq", fq.download(), as_ref(mq), twice(dtype, chain, max_abs(as_ref(mq)), mid));
  CARTO_CHECK_CLOSE("dk", fk.download(), as_ref(mk), twice(dtype, chain, max_abs(as_ref(mk)), mid));
  CARTO_CHECK_CLOSE("dv", fv.download(), as_ref(mv), twice(dtype, chain, max_abs(as_ref(mv)), mid));
}

}  // namespace

TEST_CASE("fused attention equals the materialized GEMM + softmax + dropout pieces",
          "[kernels][attention]") {
  check_fused_equals_materialized(B, A, S, D, 70, CARTO_TEST_DTYPES());
}

// 150 query rows: the fused kernels' blocks of 64 rows, the last one partial, causal rows that see
// fewer keys than their block's widest row.
TEST_CASE("fused attention over several query blocks equals the materialized pieces",
          "[kernels][attention]") {
  check_fused_equals_materialized(1, 2, 150, 8, 90, CARTO_TEST_DTYPES());
}

TEST_CASE("fused attention on a head shard equals those heads of the whole",
          "[kernels][attention]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  const std::vector<float> q = random_input(kQkv.numel(), 80, dtype),
                           k = random_input(kQkv.numel(), 81, dtype),
                           v = random_input(kQkv.numel(), 82, dtype);
  DeviceTensor tq(backend, kQkv, q, dtype), tk(backend, kQkv, k, dtype),
      tv(backend, kQkv, v, dtype), out(backend, kQkv, dtype), lse(backend, kRows);
  backend.attention_forward(tq, tk, tv, out, lse, kArgs);
  const std::vector<float> whole = out.download();
  const TensorShape one{{"b", B}, {"heads", 1}, {"s", S}, {"d", D}};
  for (std::int64_t h = 0; h < A; ++h) {
    DeviceTensor sq(backend, one, dtype), sk(backend, one, dtype), sv(backend, one, dtype),
        so(backend, one, dtype), sl(backend, {{"b", B}, {"heads", 1}, {"s", S}});
    const Slice box{.offset = {0, h, 0, 0}, .extent = {B, 1, S, D}};
    backend.copy_box(tq, box, sq, {0, 0, 0, 0}, CopyMode::assign);
    backend.copy_box(tk, box, sk, {0, 0, 0, 0}, CopyMode::assign);
    backend.copy_box(tv, box, sv, {0, 0, 0, 0}, CopyMode::assign);
    AttentionArgs args = kArgs;
    args.placement = {.global_extents = {B, A, S, S}, .offset = {0, h, 0, 0}};
    backend.attention_forward(sq, sk, sv, so, sl, args);
    const std::vector<float> got = so.download();
    std::int64_t wrong = 0;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < S * D; ++i)
        wrong += got[static_cast<std::size_t>(b * S * D + i)] !=
                 whole[static_cast<std::size_t>((b * A + h) * S * D + i)];
    CHECK(wrong == 0);  // the same dropout mask and arithmetic: bitwise equal
  }
}

// Sequence parallelism (OpVariant::gathered_kv): each rank holds a run of query rows and the
// all-gathered K and V. Its out, logsumexp and dq are those rows of the whole; its dk, dv are the
// contributions of its rows, which add up over the ranks to the whole's.
TEST_CASE("fused attention on query shards against gathered K, V equals the whole",
          "[kernels][attention]") {
  Backend& backend = test_backend();
  const DType dtype = CARTO_TEST_DTYPES();
  INFO(test_backend_name() << ", " << dtype);
  constexpr std::int64_t kS = 150, kD = 8, kA = 2;
  const TensorShape qkv{{"b", 1}, {"heads", kA}, {"s", kS}, {"d", kD}};
  const std::vector<float> q = random_input(qkv.numel(), 100, dtype),
                           k = random_input(qkv.numel(), 101, dtype),
                           v = random_input(qkv.numel(), 102, dtype),
                           w = random_input(qkv.numel(), 103, dtype);
  DeviceTensor tq(backend, qkv, q, dtype), tk(backend, qkv, k, dtype), tv(backend, qkv, v, dtype),
      dout(backend, qkv, w, dtype), out(backend, qkv, dtype),
      lse(backend, {{"b", 1}, {"heads", kA}, {"s", kS}});
  backend.attention_forward(tq, tk, tv, out, lse, kArgs);
  DeviceTensor gq = zeros(backend, qkv, dtype), gk = zeros(backend, qkv, dtype),
               gv = zeros(backend, qkv, dtype);
  backend.attention_backward(tq, tk, tv, out, lse, dout, gq, gk, gv, kArgs, CopyMode::accumulate);
  const std::vector<float> whole_out = out.download(), whole_lse = lse.download(),
                           whole_dq = gq.download();

  // The shards' rows placed in the whole, and their dk, dv added in fp32 (what the reduce-scatter
  // of dK, dV does).
  std::vector<float> shard_out(whole_out.size()), shard_lse(whole_lse.size()),
      shard_dq(whole_dq.size()), sum_dk(whole_dq.size(), 0.0f), sum_dv(whole_dq.size(), 0.0f);
  const std::int64_t cuts[] = {0, 50, 130, kS};  // shards of 50, 80 and 20 rows
  for (std::size_t c = 0; c + 1 < std::size(cuts); ++c) {
    const std::int64_t first = cuts[c], rows = cuts[c + 1] - cuts[c];
    const TensorShape ls{{"b", 1}, {"heads", kA}, {"s", rows}, {"d", kD}};
    const Slice box{.offset = {0, 0, first, 0}, .extent = {1, kA, rows, kD}};
    DeviceTensor sq(backend, ls, dtype), sdo(backend, ls, dtype), so(backend, ls, dtype),
        sl(backend, {{"b", 1}, {"heads", kA}, {"s", rows}});
    backend.copy_box(tq, box, sq, {0, 0, 0, 0}, CopyMode::assign);
    backend.copy_box(dout, box, sdo, {0, 0, 0, 0}, CopyMode::assign);
    AttentionArgs args = kArgs;
    args.placement = {.global_extents = {1, kA, kS, kS}, .offset = {0, 0, first, 0}};
    backend.attention_forward(sq, tk, tv, so, sl, args);
    DeviceTensor sdq = zeros(backend, ls, dtype), sdk = zeros(backend, qkv, dtype),
                 sdv = zeros(backend, qkv, dtype);
    backend.attention_backward(sq, tk, tv, so, sl, sdo, sdq, sdk, sdv, args, CopyMode::accumulate);
    const std::vector<float> o = so.download(), l = sl.download(), dq = sdq.download(),
                             dk = sdk.download(), dv = sdv.download();
    for (std::int64_t h = 0; h < kA; ++h) {
      for (std::int64_t i = 0; i < rows; ++i) {
        const auto local = static_cast<std::size_t>(h * rows + i);
        const auto global = static_cast<std::size_t>(h * kS + first + i);
        shard_lse[global] = l[local];
        for (std::int64_t e = 0; e < kD; ++e) {
          shard_out[global * kD + static_cast<std::size_t>(e)] =
              o[local * kD + static_cast<std::size_t>(e)];
          shard_dq[global * kD + static_cast<std::size_t>(e)] =
              dq[local * kD + static_cast<std::size_t>(e)];
        }
      }
    }
    for (std::size_t i = 0; i < dk.size(); ++i) {
      sum_dk[i] += dk[i];
      sum_dv[i] += dv[i];
    }
  }
  // The same rows through GEMMs over other row blocks: equal up to the order OpenBLAS sums in, so
  // within the fused-vs-materialized tolerance (two evaluations, each within its chain and, in
  // bf16, its store); dk and dv add three shards' sums (2 roundings more), each shard's rounded to
  // bf16 first (one intermediate).
  const std::int64_t chain = 2 * kD + 2 * kS + 12;
  const std::int64_t mid = attention_intermediates(dtype, Direction::backward);
  const std::int64_t mid_forward = attention_intermediates(dtype, Direction::forward);
  const auto ref = [](const std::vector<float>& v) { return to_double(v); };
  CARTO_CHECK_CLOSE("shard out", shard_out, ref(whole_out),
                    twice(dtype, chain, max_abs(ref(whole_out)), mid_forward));
  CARTO_CHECK_CLOSE("shard logsumexp", shard_lse, ref(whole_lse),
                    fp32_chain(2 * chain, max_abs(ref(whole_lse))));
  CARTO_CHECK_CLOSE("shard dq", shard_dq, ref(whole_dq),
                    twice(dtype, chain, max_abs(ref(whole_dq)), mid));
  CARTO_CHECK_CLOSE("shards' dk", sum_dk, ref(gk.download()),
                    twice(dtype, chain + 2, max_abs(ref(gk.download())), mid + 1));
  CARTO_CHECK_CLOSE("shards' dv", sum_dv, ref(gv.download()),
                    twice(dtype, chain + 2, max_abs(ref(gv.download())), mid + 1));
}
