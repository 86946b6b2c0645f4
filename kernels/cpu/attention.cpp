// The CPU backend's fused attention: softmax(scale · q kᵀ, masked) with dropout, times v.
//
// Forward walks one query row at a time: its scores against the visible keys live in a workspace
// row of Sk floats (never the S×S matrix), the row's logsumexp is saved, and the output row is the
// dropped-out probabilities times v. Backward recomputes each row's probabilities from q, k and the
// saved logsumexp, regenerates the dropout mask from the RNG, and uses D_i = dout_i · out_i in
// place of Σ_j P_ij dP_ij (Dao et al. 2022, FlashAttention, Alg. 4), which holds with dropout too.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>

#include "cpu_backend.hpp"
#include "kernel_checks.hpp"

namespace carto::cpu {

using detail::extents_of;
using detail::require_same_shape;

namespace {

struct AttentionGeometry {
  std::int64_t batch = 0, heads = 0, seq = 0, dim = 0;
  Index probs{};  // local probability extents (B, a, Sq, Sk)
};

AttentionGeometry attention_geometry(std::string_view call, const TensorShape& q,
                                     const TensorShape& k, const TensorShape& v) {
  CARTO_CHECK(q.rank() == 4, call, ": q, k, v are (B, heads, S, d); got q ", q);
  require_same_shape(call, q, k);
  require_same_shape(call, q, v);
  AttentionGeometry g{.batch = q.dims()[0].extent,
                      .heads = q.dims()[1].extent,
                      .seq = q.dims()[2].extent,
                      .dim = q.dims()[3].extent};
  g.probs = {g.batch, g.heads, g.seq, g.seq};
  return g;
}

float dot(const float* a, const float* b, std::int64_t n) {
  float s = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The number of keys query row i may see, and the global index of its probability (i, 0).
struct RowView {
  std::int64_t visible = 0;
  std::int64_t base = 0;
};
RowView row_view(const GlobalIndexer& where, const AttentionArgs& args, std::int64_t seq,
                 std::int64_t b, std::int64_t h, std::int64_t i) {
  RowView r{.visible = seq, .base = where.global_index({b, h, i, 0})};
  if (args.masking == Masking::causal) {
    r.visible = std::clamp<std::int64_t>(where.offset[2] + i - where.offset[3] + 1, 0, seq);
  }
  return r;
}

}  // namespace

void CpuBackend::attention_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                   TensorView out, TensorView logsumexp,
                                   const AttentionArgs& args) {
  const AttentionGeometry g =
      attention_geometry("attention_forward", q.shape(), k.shape(), v.shape());
  require_same_shape("attention_forward", q.shape(), out.shape);
  detail::require_numel("attention_forward", "logsumexp", logsumexp.numel(),
                        g.batch * g.heads * g.seq);
  CARTO_CHECK(args.dropout >= 0.0f && args.dropout < 1.0f,
              "attention_forward: dropout must be in [0, 1); got ", args.dropout);
  const GlobalIndexer where(args.placement, g.probs);
  const Buffer work = allocate({{"keys", g.seq}}, DType::fp32, MemoryCategory::temporaries);
  float* p = work.view({{"keys", g.seq}}).f32();
  const float kept = 1.0f / (1.0f - args.dropout);
  const float* pq = q.f32();
  const float* pk = k.f32();
  const float* pv = v.f32();
  float* po = out.f32();
  float* plse = logsumexp.f32();
  const std::int64_t d = g.dim;
  for (std::int64_t b = 0; b < g.batch; ++b) {
    for (std::int64_t h = 0; h < g.heads; ++h) {
      const std::int64_t head = (b * g.heads + h) * g.seq;  // first row of this (b, h)
      for (std::int64_t i = 0; i < g.seq; ++i) {
        const RowView row = row_view(where, args, g.seq, b, h, i);
        CARTO_CHECK(row.visible > 0, "attention_forward: query row ", i, " sees no key");
        const float* qi = pq + (head + i) * d;
        float max = -std::numeric_limits<float>::infinity();
        for (std::int64_t j = 0; j < row.visible; ++j) {
          p[j] = args.scale * dot(qi, pk + (head + j) * d, d);
          max = std::max(max, p[j]);
        }
        float sum = 0.0f;
        for (std::int64_t j = 0; j < row.visible; ++j) {
          p[j] = std::exp(p[j] - max);
          sum += p[j];
        }
        const float inv = 1.0f / sum;
        float* oi = po + (head + i) * d;
        std::fill(oi, oi + d, 0.0f);
        for (std::int64_t j = 0; j < row.visible; ++j) {
          float w = p[j] * inv;
          if (args.dropout > 0.0f)
            w = rng::keep(args.rng, row.base + j, args.dropout) ? w * kept : 0.0f;
          const float* vj = pv + (head + j) * d;
          for (std::int64_t e = 0; e < d; ++e) oi[e] += w * vj[e];
        }
        plse[head + i] = max + std::log(sum);
      }
    }
  }
}

void CpuBackend::attention_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                    ConstTensorView out, ConstTensorView logsumexp,
                                    ConstTensorView dout, TensorView dq, TensorView dk,
                                    TensorView dv, const AttentionArgs& args) {
  const AttentionGeometry g =
      attention_geometry("attention_backward", q.shape(), k.shape(), v.shape());
  for (const TensorShape* s : std::initializer_list<const TensorShape*>{
           &out.shape(), &dout.shape(), &dq.shape, &dk.shape, &dv.shape}) {
    require_same_shape("attention_backward", q.shape(), *s);
  }
  detail::require_numel("attention_backward", "logsumexp", logsumexp.numel(),
                        g.batch * g.heads * g.seq);
  const GlobalIndexer where(args.placement, g.probs);
  const float kept = 1.0f / (1.0f - args.dropout);
  const float* pq = q.f32();
  const float* pk = k.f32();
  const float* pv = v.f32();
  const float* po = out.f32();
  const float* plse = logsumexp.f32();
  const float* pdo = dout.f32();
  float* pdq = dq.f32();
  float* pdk = dk.f32();
  float* pdv = dv.f32();
  const std::int64_t d = g.dim;
  for (std::int64_t b = 0; b < g.batch; ++b) {
    for (std::int64_t h = 0; h < g.heads; ++h) {
      const std::int64_t head = (b * g.heads + h) * g.seq;
      for (std::int64_t i = 0; i < g.seq; ++i) {
        const RowView row = row_view(where, args, g.seq, b, h, i);
        const float* qi = pq + (head + i) * d;
        const float* doi = pdo + (head + i) * d;
        float* dqi = pdq + (head + i) * d;
        const float lse = plse[head + i];
        const float big_d = dot(doi, po + (head + i) * d, d);  // Σ_j P_ij dP_ij
        for (std::int64_t j = 0; j < row.visible; ++j) {
          const float* kj = pk + (head + j) * d;
          const float* vj = pv + (head + j) * d;
          const float p = std::exp(args.scale * dot(qi, kj, d) - lse);
          float mask = 1.0f;
          if (args.dropout > 0.0f)
            mask = rng::keep(args.rng, row.base + j, args.dropout) ? kept : 0.0f;
          const float dp = mask * dot(doi, vj, d);         // d loss / d P_ij
          const float ds = args.scale * p * (dp - big_d);  // d loss / d (q_i · k_j)
          float* dkj = pdk + (head + j) * d;
          float* dvj = pdv + (head + j) * d;
          for (std::int64_t e = 0; e < d; ++e) {
            dqi[e] += ds * kj[e];
            dkj[e] += ds * qi[e];
            dvj[e] += p * mask * doi[e];
          }
        }
      }
    }
  }
}

}  // namespace carto::cpu
