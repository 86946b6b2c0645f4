// The CPU backend's fused attention: softmax(scale · q kᵀ, masked) with dropout, times v.
//
// Both directions walk each (batch, head) in blocks of kQueryBlock query rows, and do the products
// as OpenBLAS GEMMs on one thread: a block's scores against the keys its last row may see
// (causal rows see a prefix, so that is the widest row) live in a workspace of kQueryBlock × Sk
// floats, never the S×S matrix. Forward: scores = scale · q kᵀ (GEMM), each row's softmax with the
// masked tail zeroed, the row's logsumexp saved, dropout on the probabilities, out = P v (GEMM).
// Backward recomputes the probabilities from q, k and the saved logsumexp, regenerates the dropout
// mask from the RNG, and uses D_i = dout_i · out_i in place of Σ_j P_ij dP_ij (Dao et al. 2022,
// FlashAttention, Alg. 4), which holds with dropout too: dP = dout vᵀ, dS = scale · P ∘ (mask ∘ dP
// - D) and dv += (P ∘ mask)ᵀ dout, dq += dS k, dk += dSᵀ q, five GEMMs in all. Every (batch, head)
// is computed alone, so a head shard computes the bits the whole tensor does.
//
// q, out and dq may hold fewer query rows than k, v hold keys: a shard of the query sequence
// against all-gathered K and V (OpVariant::gathered_kv), placed by args.placement in the global
// (B, a, S, S) probabilities, which gives the causal mask and the dropout indices.
//
// Grouped-query attention (Ainslie et al. 2023): q, out (B, n, g, S, d) against k, v (B, n, S, d).
// Query head (n, j) is walked as head n·g + j of the rank-4 form and reads key/value head n; its
// probabilities are placed in the global (B, n, g, Sq, Sk) ones. dk and dv sum the g query heads
// of a group (each adds its products into the same key/value head).
//
// bf16 q, k, v, out, dout and gradients are staged one (batch, head) at a time (elements.hpp):
// that head's rows widened into fp32 slots, the GEMMs and row loops above on the slots (so the
// products accumulate in fp32 and the probabilities stay fp32), the outputs rounded once per head.
// logsumexp is fp32.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "cpu_backend.hpp"
#include "dropout_mask.hpp"
#include "elements.hpp"
#include "kernel_checks.hpp"
#include "vector_math.hpp"

namespace carto::cpu {

using detail::extents_of;
using detail::require_same_shape;

namespace {

struct AttentionGeometry {
  std::int64_t batch = 0, heads = 0, queries = 0, keys = 0, dim = 0;
  std::int64_t group = 1;  // query heads per key/value head (1: multi-head attention)
  Index probs{};           // local probability extents (B, a, Sq, Sk) or (B, n, g, Sq, Sk)
  // The key/value head of query head h (of b·heads + h's batch entry).
  [[nodiscard]] std::int64_t kv_of(std::int64_t b, std::int64_t h) const {
    return b * (heads / group) + h / group;
  }
};

AttentionGeometry attention_geometry(std::string_view call, const TensorShape& q,
                                     const TensorShape& k, const TensorShape& v) {
  require_same_shape(call, k, v);
  const bool grouped = q.rank() == 5;
  const std::size_t qs = grouped ? 3 : 2;  // q's sequence dim
  CARTO_CHECK(
      (q.rank() == 4 || grouped) && k.rank() == 4 && q.dims()[0].extent == k.dims()[0].extent &&
          q.dims()[1].extent == k.dims()[1].extent && q.dims()[qs + 1].extent == k.dims()[3].extent,
      call,
      ": q (B, heads, Sq, d) or grouped (B, n, g, Sq, d) and k, v (B, heads or n, Sk, d) do not "
      "match: q ",
      q, ", k ", k);
  AttentionGeometry g{.batch = q.dims()[0].extent,
                      .heads = q.dims()[1].extent * (grouped ? q.dims()[2].extent : 1),
                      .queries = q.dims()[qs].extent,
                      .keys = k.dims()[2].extent,
                      .dim = q.dims()[qs + 1].extent,
                      .group = grouped ? q.dims()[2].extent : 1};
  if (grouped) {
    g.probs = {g.batch, q.dims()[1].extent, g.group, g.queries, g.keys};
  } else {
    g.probs = {g.batch, g.heads, g.queries, g.keys};
  }
  return g;
}

// Query rows per block: GEMMs large enough for OpenBLAS, a workspace that stays in L2.
constexpr std::int64_t kQueryBlock = 64;

int blas_size(std::int64_t v) {
  CARTO_CHECK(v <= INT_MAX, "attention: extent ", v, " exceeds the BLAS integer range");
  return static_cast<int>(v);
}

// C (m, n) = alpha · op(A) · op(B) + beta · C, row-major, leading dims the operands' widths.
void sgemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
           float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
           float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, blas_size(m), blas_size(n), blas_size(k),
              alpha, a, blas_size(lda), b, blas_size(ldb), beta, c, blas_size(ldc));
}

// The number of keys query row i may see, and the global index of its probability (i, 0).
struct RowView {
  std::int64_t visible = 0;
  std::int64_t base = 0;
};
RowView row_view(const GlobalIndexer& where, const AttentionArgs& args, const AttentionGeometry& g,
                 std::int64_t b, std::int64_t h, std::int64_t i) {
  const bool grouped = g.probs.size() == 5;
  RowView r{.visible = g.keys,
            .base = grouped ? where.global_index({b, h / g.group, h % g.group, i, 0})
                            : where.global_index({b, h, i, 0})};
  if (args.masking == Masking::causal) {
    const std::size_t sq = g.probs.size() - 2;
    r.visible =
        std::clamp<std::int64_t>(where.offset[sq] + i - where.offset[sq + 1] + 1, 0, g.keys);
  }
  return r;
}

// A block of query rows [first, first + rows) of one (batch, head), and the keys its widest row
// sees (causal rows see a prefix that grows with the row).
struct QueryBlock {
  std::int64_t first = 0, rows = 0, keys = 0;
};
QueryBlock query_block(const GlobalIndexer& where, const AttentionArgs& args,
                       const AttentionGeometry& g, std::int64_t first) {
  QueryBlock q{.first = first, .rows = std::min(kQueryBlock, g.queries - first)};
  q.keys = std::max(row_view(where, args, g, 0, 0, first).visible,
                    row_view(where, args, g, 0, 0, first + q.rows - 1).visible);
  return q;
}

// One query row of the forward: its scores sr[0, keys) become the (dropped-out) probabilities
// over the n visible keys and 0 after them; returns the row's logsumexp. factor: the dropout
// factors of the n keys, or nullptr without dropout.
CARTO_VECTOR_CLONES float probabilities_row(float* sr, std::int64_t n, std::int64_t keys,
                                            const float* factor) {
  const float max = detail::max_lanes(n, [&](std::int64_t j) { return sr[j]; });
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j) sr[j] = detail::exp_approx(sr[j] - max);
  const float sum = detail::sum_lanes<float>(n, [&](std::int64_t j) { return sr[j]; });
  const float inv = 1.0f / sum;
  if (factor != nullptr) {
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) sr[j] = sr[j] * inv * factor[j];
  } else {
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) sr[j] *= inv;
  }
  std::fill(sr + n, sr + keys, 0.0f);
  return max + std::log(sum);
}

// One query row of the backward, from its recomputed scores pr = scale · q kᵀ and dpr = dout vᵀ
// over [0, keys): pr becomes the dropped-out probabilities P ∘ mask (for dv) and dpr the score
// gradients dS = scale · P ∘ (mask ∘ dP - D) with D = dout · out (for dq, dk); both 0 after the n
// visible keys. factor: the n dropout factors (all 1 without dropout).
CARTO_VECTOR_CLONES void gradient_row(float* pr, float* dpr, std::int64_t n, std::int64_t keys,
                                      float lse, const float* dout_row, const float* out_row,
                                      std::int64_t d, float scale, const float* factor) {
  const float big_d =
      detail::sum_lanes<float>(d, [&](std::int64_t e) { return dout_row[e] * out_row[e]; });
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j) {
    const float prob = detail::exp_approx(pr[j] - lse);
    const float ds = scale * prob * (factor[j] * dpr[j] - big_d);  // d loss / d (q_i · k_j)
    pr[j] = prob * factor[j];
    dpr[j] = ds;
  }
  std::fill(pr + n, pr + keys, 0.0f);
  std::fill(dpr + n, dpr + keys, 0.0f);
}

// The workspace of one call, from the backend's allocator (category temporaries): `blocks` score
// blocks of min(kQueryBlock, Sq) × Sk floats, a row's dropout factors (Sk floats) and, with
// dropout, its mask words (Sk).
class AttentionWorkspace {
 public:
  AttentionWorkspace(Backend& backend, const AttentionGeometry& g, const AttentionArgs& args,
                     std::int64_t blocks)
      : block_(std::min(kQueryBlock, g.queries) * g.keys),
        dropout_(args.dropout > 0.0f),
        buffer_(backend.allocate({{"work", blocks * block_ + (dropout_ ? 2 : 1) * g.keys}},
                                 DType::fp32, MemoryCategory::temporaries)),
        factor_(static_cast<float*>(buffer_.data()) + blocks * block_),
        keep_(reinterpret_cast<std::uint32_t*>(factor_ + g.keys)) {}

  [[nodiscard]] float* scores(std::int64_t block) const {
    return static_cast<float*>(buffer_.data()) + block * block_;
  }
  // The factor of each of a row's n visible probabilities: 1 / (1 - p) kept, 0 dropped; all 1
  // without dropout.
  [[nodiscard]] const float* dropout_factors(const AttentionArgs& args, std::int64_t base,
                                             std::int64_t n) const {
    if (!dropout_) {
      std::fill(factor_, factor_ + n, 1.0f);
      return factor_;
    }
    const float kept = 1.0f / (1.0f - args.dropout);
    detail::dropout_keep(args.rng, base, n, args.dropout, keep_);
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) factor_[j] = keep_[j] != 0 ? kept : 0.0f;
    return factor_;
  }

 private:
  std::int64_t block_;
  bool dropout_;
  Buffer buffer_;
  float* factor_;
  std::uint32_t* keep_;
};

}  // namespace

void CpuBackend::attention_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                   TensorView out, TensorView logsumexp,
                                   const AttentionArgs& args) {
  const AttentionGeometry g =
      attention_geometry("attention_forward", q.shape(), k.shape(), v.shape());
  require_same_shape("attention_forward", q.shape(), out.shape);
  detail::require_numel("attention_forward", "logsumexp", logsumexp.numel(),
                        g.batch * g.heads * g.queries);
  CARTO_CHECK(args.dropout >= 0.0f && args.dropout < 1.0f,
              "attention_forward: dropout must be in [0, 1); got ", args.dropout);
  const GlobalIndexer where(args.placement, g.probs);
  const AttentionWorkspace work(*this, g, args, 1);
  float* s = work.scores(0);
  float* plse = detail::fp32_of("attention_forward", "logsumexp", logsumexp);
  const std::int64_t d = g.dim, qn = g.queries * d, kn = g.keys * d;  // one head's elements
  const detail::Staging st(
      *this, "attention_forward",
      {{"q", q.dtype(), qn}, {"k", k.dtype(), kn}, {"v", v.dtype(), kn}, {"out", out.dtype, qn}});
  for (std::int64_t b = 0; b < g.batch; ++b) {
    for (std::int64_t h = 0; h < g.heads; ++h) {
      const std::int64_t bh = b * g.heads + h;
      const std::int64_t head = bh * g.queries;  // first query row of this (b, h)
      const float* qh = st.read(0, q, bh * qn, qn);
      const std::int64_t kv = g.kv_of(b, h);  // its key/value head
      const float* kh = st.read(1, k, kv * kn, kn);
      const float* vh = st.read(2, v, kv * kn, kn);
      float* oh = st.write(3, out, bh * qn, qn, detail::Load::no);
      for (std::int64_t first = 0; first < g.queries; first += kQueryBlock) {
        const QueryBlock blk = query_block(where, args, g, first);
        CARTO_CHECK(blk.keys > 0, "attention_forward: query row ", first, " sees no key");
        const float* qb = qh + first * d;
        sgemm(false, true, blk.rows, blk.keys, d, args.scale, qb, d, kh, d, 0.0f, s, blk.keys);
        for (std::int64_t r = 0; r < blk.rows; ++r) {
          const RowView row = row_view(where, args, g, b, h, first + r);
          CARTO_CHECK(row.visible > 0, "attention_forward: query row ", first + r, " sees no key");
          const float* factor =
              args.dropout > 0.0f ? work.dropout_factors(args, row.base, row.visible) : nullptr;
          plse[head + first + r] =
              probabilities_row(s + r * blk.keys, row.visible, blk.keys, factor);
        }
        sgemm(false, false, blk.rows, d, blk.keys, 1.0f, s, blk.keys, vh, d, 0.0f, oh + first * d,
              d);
      }
      st.commit(3, out, bh * qn, qn);
    }
  }
}

void CpuBackend::attention_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                    ConstTensorView out, ConstTensorView logsumexp,
                                    ConstTensorView dout, TensorView dq, TensorView dk,
                                    TensorView dv, const AttentionArgs& args, CopyMode mode) {
  const AttentionGeometry g =
      attention_geometry("attention_backward", q.shape(), k.shape(), v.shape());
  for (const TensorShape* s :
       std::initializer_list<const TensorShape*>{&out.shape(), &dout.shape(), &dq.shape}) {
    require_same_shape("attention_backward", q.shape(), *s);
  }
  require_same_shape("attention_backward", k.shape(), dk.shape);
  require_same_shape("attention_backward", k.shape(), dv.shape);
  detail::require_numel("attention_backward", "logsumexp", logsumexp.numel(),
                        g.batch * g.heads * g.queries);
  CARTO_CHECK(args.dropout >= 0.0f && args.dropout < 1.0f,
              "attention_backward: dropout must be in [0, 1); got ", args.dropout);
  const GlobalIndexer where(args.placement, g.probs);
  const AttentionWorkspace work(*this, g, args, 2);
  float* p = work.scores(0);
  float* dp = work.scores(1);
  const float* plse = detail::fp32_of("attention_backward", "logsumexp", logsumexp);
  const std::int64_t d = g.dim, qn = g.queries * d, kn = g.keys * d;  // one head's elements
  const detail::Staging st(*this, "attention_backward",
                           {{"q", q.dtype(), qn},
                            {"k", k.dtype(), kn},
                            {"v", v.dtype(), kn},
                            {"out", out.dtype(), qn},
                            {"dout", dout.dtype(), qn},
                            {"dq", dq.dtype, qn},
                            {"dk", dk.dtype, kn},
                            {"dv", dv.dtype, kn}});
  const float scale = args.scale;
  // Assign: each head's dq and each key/value head's dk, dv start from 0 in the slot (or in
  // place), a head at a time while it is in cache, and the GEMMs add into them as for accumulate.
  const bool acc = mode == CopyMode::accumulate;
  const detail::Load load = acc ? detail::Load::yes : detail::Load::no;
  auto start = [acc](float* p, std::int64_t n) {
    if (!acc) std::fill(p, p + n, 0.0f);
    return p;
  };
  float* pdk = nullptr;
  float* pdv = nullptr;
  for (std::int64_t b = 0; b < g.batch; ++b) {
    for (std::int64_t h = 0; h < g.heads; ++h) {
      const std::int64_t bh = b * g.heads + h;
      const std::int64_t head = bh * g.queries;
      const float* pq = st.read(0, q, bh * qn, qn);
      const std::int64_t kv = g.kv_of(b, h);  // its key/value head
      const float* kh = st.read(1, k, kv * kn, kn);
      const float* vh = st.read(2, v, kv * kn, kn);
      const float* po = st.read(3, out, bh * qn, qn);
      const float* pdo = st.read(4, dout, bh * qn, qn);
      float* pdq = start(st.write(5, dq, bh * qn, qn, load), qn);
      // A group's query heads add into one key/value head: staged once per group, rounded once.
      if (h % g.group == 0) {
        pdk = start(st.write(6, dk, kv * kn, kn, load), kn);
        pdv = start(st.write(7, dv, kv * kn, kn, load), kn);
      }
      for (std::int64_t first = 0; first < g.queries; first += kQueryBlock) {
        const QueryBlock blk = query_block(where, args, g, first);
        if (blk.keys == 0) continue;
        const std::int64_t at = first * d;  // the block's first row of q, dq, out, dout
        sgemm(false, true, blk.rows, blk.keys, d, scale, pq + at, d, kh, d, 0.0f, p, blk.keys);
        sgemm(false, true, blk.rows, blk.keys, d, 1.0f, pdo + at, d, vh, d, 0.0f, dp, blk.keys);
        for (std::int64_t r = 0; r < blk.rows; ++r) {
          const RowView row = row_view(where, args, g, b, h, first + r);
          const float* factor = work.dropout_factors(args, row.base, row.visible);
          gradient_row(p + r * blk.keys, dp + r * blk.keys, row.visible, blk.keys,
                       plse[head + first + r], pdo + at + r * d, po + at + r * d, d, scale, factor);
        }
        sgemm(true, false, blk.keys, d, blk.rows, 1.0f, p, blk.keys, pdo + at, d, 1.0f, pdv, d);
        sgemm(false, false, blk.rows, d, blk.keys, 1.0f, dp, blk.keys, kh, d, 1.0f, pdq + at, d);
        sgemm(true, false, blk.keys, d, blk.rows, 1.0f, dp, blk.keys, pq + at, d, 1.0f, pdk, d);
      }
      st.commit(5, dq, bh * qn, qn);
      if (h % g.group == g.group - 1) {
        st.commit(6, dk, kv * kn, kn);
        st.commit(7, dv, kv * kn, kn);
      }
    }
  }
}

}  // namespace carto::cpu
