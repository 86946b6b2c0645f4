// Fused attention: forward against a double reference, backward against central differences, the
// fused kernel against the materialized pieces (GEMM + softmax + dropout) forward and backward, and
// a head shard against the same heads of the whole.
#include <cpu/cpu_backend.hpp>

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

const AttentionArgs kArgs{.scale = 0.5f,
                          .masking = Masking::causal,
                          .dropout = 0.2f,
                          .rng = {.seed = 77, .id = stream_id(RngPurpose::dropout, 4, 1)}};

}  // namespace

TEST_CASE("fused attention forward and backward against double references",
          "[kernels][attention]") {
  cpu::CpuBackend cpu;
  Backend& backend = cpu;
  const std::vector<float> q = random_normal(kQkv.numel(), 60), k = random_normal(kQkv.numel(), 61),
                           v = random_normal(kQkv.numel(), 62), w = random_normal(kQkv.numel(), 63);
  for (float dropout : {0.0f, 0.2f}) {
    INFO("dropout " << dropout);
    AttentionArgs args = kArgs;
    args.dropout = dropout;
    DeviceTensor dq_(backend, kQkv, q), dk_(backend, kQkv, k), dv_(backend, kQkv, v),
        out(backend, kQkv), lse(backend, kRows);
    backend.attention_forward(dq_, dk_, dv_, out, lse, args);
    const AttentionRef ref = attention_ref(to_double(q), to_double(k), to_double(v), args);
    // Scores are D-term dots, a row sums S exps, the output sums S products: D + 2S + 8 roundings.
    CARTO_CHECK_CLOSE("attention out", out.download(), ref.out,
                      fp32_chain(D + 2 * S + 8, max_abs(ref.out)));
    CARTO_CHECK_CLOSE("attention logsumexp", lse.download(), ref.lse,
                      fp32_chain(D + S + 6, max_abs(ref.lse)));

    DeviceTensor dout(backend, kQkv, w);
    DeviceTensor gq = zeros(backend, kQkv), gk = zeros(backend, kQkv), gv = zeros(backend, kQkv);
    backend.attention_backward(dq_, dk_, dv_, out, lse, dout, gq, gk, gv, args);
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
    CARTO_CHECK_CLOSE("attention dq", gq.download(), rq, fp32_chain(chain, max_abs(rq)));
    CARTO_CHECK_CLOSE("attention dk", gk.download(), rk, fp32_chain(chain, max_abs(rk)));
    CARTO_CHECK_CLOSE("attention dv", gv.download(), rv, fp32_chain(chain, max_abs(rv)));
  }
}

namespace {

// The fused kernels against the materialized pieces on (b, heads, s, d) inputs from `seed`.
void check_fused_equals_materialized(std::int64_t b, std::int64_t heads, std::int64_t s,
                                     std::int64_t d, std::uint32_t seed) {
  cpu::CpuBackend cpu;
  Backend& backend = cpu;
  const TensorShape qkv{{"b", b}, {"heads", heads}, {"s", s}, {"d", d}};
  const TensorShape probs_shape{{"b", b}, {"heads", heads}, {"q", s}, {"k", s}};
  const TensorShape rows{{"b", b}, {"heads", heads}, {"s", s}};
  const std::vector<float> q = random_normal(qkv.numel(), seed),
                           k = random_normal(qkv.numel(), seed + 1),
                           v = random_normal(qkv.numel(), seed + 2),
                           w = random_normal(qkv.numel(), seed + 3);
  DeviceTensor tq(backend, qkv, q), tk(backend, qkv, k), tv(backend, qkv, v), dout(backend, qkv, w);

  // Fused.
  DeviceTensor fo(backend, qkv), lse(backend, rows);
  backend.attention_forward(tq, tk, tv, fo, lse, kArgs);
  DeviceTensor fq = zeros(backend, qkv), fk = zeros(backend, qkv), fv = zeros(backend, qkv);
  backend.attention_backward(tq, tk, tv, fo, lse, dout, fq, fk, fv, kArgs);

  // Materialized, as the graph's materialized attention runs it (the scale folded into softmax).
  const SoftmaxArgs soft{.scale = kArgs.scale, .masking = Masking::causal};
  const DropoutArgs drop{.probability = kArgs.dropout, .rng = kArgs.rng};
  DeviceTensor scores(backend, probs_shape), probs(backend, probs_shape),
      dropped(backend, probs_shape), mo(backend, qkv);
  backend.gemm(tq, tk, scores, {.b = Transpose::yes});  // (B, a, S, S)
  backend.softmax_forward(scores, probs, soft);
  backend.dropout_forward(probs, dropped, drop);
  backend.gemm(dropped, tv, mo, {});  // (B, a, S, d)
  DeviceTensor d_dropped(backend, probs_shape), d_probs = zeros(backend, probs_shape),
                                                d_scores = zeros(backend, probs_shape);
  DeviceTensor mq(backend, qkv), mk(backend, qkv), mv(backend, qkv);
  backend.gemm(dout, tv, d_dropped, {.b = Transpose::yes});  // dP' = dO vᵀ
  backend.gemm(dropped, dout, mv, {.a = Transpose::yes});    // dv = P'ᵀ dO
  backend.dropout_backward(d_dropped, d_probs, drop);
  backend.softmax_backward(probs, d_probs, d_scores, soft);
  backend.gemm(d_scores, tk, mq, {});                     // dq = dS k
  backend.gemm(d_scores, tq, mk, {.a = Transpose::yes});  // dk = dSᵀ q

  // Two fp32 evaluations of one function: each within fp32_chain of the exact value, so within
  // twice that of each other.
  const std::int64_t chain = 2 * (2 * d + 2 * s + 12);
  const auto as_ref = [](const DeviceTensor& t) { return to_double(t.download()); };
  CARTO_CHECK_CLOSE("out", fo.download(), as_ref(mo), fp32_chain(chain, max_abs(as_ref(mo))));
  CARTO_CHECK_CLOSE("dq", fq.download(), as_ref(mq), fp32_chain(chain, max_abs(as_ref(mq))));
  CARTO_CHECK_CLOSE("dk", fk.download(), as_ref(mk), fp32_chain(chain, max_abs(as_ref(mk))));
  CARTO_CHECK_CLOSE("dv", fv.download(), as_ref(mv), fp32_chain(chain, max_abs(as_ref(mv))));
}

}  // namespace

TEST_CASE("fused attention equals the materialized GEMM + softmax + dropout pieces",
          "[kernels][attention]") {
  check_fused_equals_materialized(B, A, S, D, 70);
}

// 150 query rows: the fused kernels' blocks of 64 rows, the last one partial, causal rows that see
// fewer keys than their block's widest row.
TEST_CASE("fused attention over several query blocks equals the materialized pieces",
          "[kernels][attention]") {
  check_fused_equals_materialized(1, 2, 150, 8, 90);
}

TEST_CASE("fused attention on a head shard equals those heads of the whole",
          "[kernels][attention]") {
  cpu::CpuBackend backend;
  const std::vector<float> q = random_normal(kQkv.numel(), 80), k = random_normal(kQkv.numel(), 81),
                           v = random_normal(kQkv.numel(), 82);
  DeviceTensor tq(backend, kQkv, q), tk(backend, kQkv, k), tv(backend, kQkv, v), out(backend, kQkv),
      lse(backend, kRows);
  backend.attention_forward(tq, tk, tv, out, lse, kArgs);
  const std::vector<float> whole = out.download();
  const TensorShape one{{"b", B}, {"heads", 1}, {"s", S}, {"d", D}};
  for (std::int64_t h = 0; h < A; ++h) {
    DeviceTensor sq(backend, one), sk(backend, one), sv(backend, one), so(backend, one),
        sl(backend, {{"b", B}, {"heads", 1}, {"s", S}});
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
  cpu::CpuBackend backend;
  constexpr std::int64_t kS = 150, kD = 8, kA = 2;
  const TensorShape qkv{{"b", 1}, {"heads", kA}, {"s", kS}, {"d", kD}};
  const std::vector<float> q = random_normal(qkv.numel(), 100), k = random_normal(qkv.numel(), 101),
                           v = random_normal(qkv.numel(), 102), w = random_normal(qkv.numel(), 103);
  DeviceTensor tq(backend, qkv, q), tk(backend, qkv, k), tv(backend, qkv, v), dout(backend, qkv, w),
      out(backend, qkv), lse(backend, {{"b", 1}, {"heads", kA}, {"s", kS}});
  backend.attention_forward(tq, tk, tv, out, lse, kArgs);
  DeviceTensor gq = zeros(backend, qkv), gk = zeros(backend, qkv), gv = zeros(backend, qkv);
  backend.attention_backward(tq, tk, tv, out, lse, dout, gq, gk, gv, kArgs);
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
    DeviceTensor sq(backend, ls), sdo(backend, ls), so(backend, ls),
        sl(backend, {{"b", 1}, {"heads", kA}, {"s", rows}});
    backend.copy_box(tq, box, sq, {0, 0, 0, 0}, CopyMode::assign);
    backend.copy_box(dout, box, sdo, {0, 0, 0, 0}, CopyMode::assign);
    AttentionArgs args = kArgs;
    args.placement = {.global_extents = {1, kA, kS, kS}, .offset = {0, 0, first, 0}};
    backend.attention_forward(sq, tk, tv, so, sl, args);
    DeviceTensor sdq = zeros(backend, ls), sdk = zeros(backend, qkv), sdv = zeros(backend, qkv);
    backend.attention_backward(sq, tk, tv, so, sl, sdo, sdq, sdk, sdv, args);
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
  // within the fused-vs-materialized tolerance (two fp32 evaluations, each within its chain); dk
  // and dv add three shards' sums (2 roundings more).
  const std::int64_t chain = 2 * (2 * kD + 2 * kS + 12);
  const auto ref = [](const std::vector<float>& v) { return to_double(v); };
  CARTO_CHECK_CLOSE("shard out", shard_out, ref(whole_out),
                    fp32_chain(chain, max_abs(ref(whole_out))));
  CARTO_CHECK_CLOSE("shard logsumexp", shard_lse, ref(whole_lse),
                    fp32_chain(chain, max_abs(ref(whole_lse))));
  CARTO_CHECK_CLOSE("shard dq", shard_dq, ref(whole_dq), fp32_chain(chain, max_abs(ref(whole_dq))));
  CARTO_CHECK_CLOSE("shards' dk", sum_dk, ref(gk.download()),
                    fp32_chain(chain + 2, max_abs(ref(gk.download()))));
  CARTO_CHECK_CLOSE("shards' dv", sum_dv, ref(gv.download()),
                    fp32_chain(chain + 2, max_abs(ref(gv.download()))));
}
