// The CPU backend's reductions along the last dim: layernorm and (scaled, masked) softmax.
//
// Each row is a few passes over data in L1: lane sums for the statistics (vector_math.hpp), then
// one vectorized element loop that applies them. bf16 views are staged a block of rows at a time
// (elements.hpp); gamma, beta and their gradients once per call; the statistics (mean, rstd, the
// partial sums) are fp32.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string_view>

#include "cpu_backend.hpp"
#include "elements.hpp"
#include "kernel_checks.hpp"
#include "vector_math.hpp"

namespace carto::cpu {

using detail::exp_approx;
using detail::extents_of;
using detail::fp32_of;
using detail::last_extent;
using detail::Load;
using detail::max_lanes;
using detail::require_numel;
using detail::rows_per_block;
using detail::Staging;
using detail::store;
using detail::sum_lanes;

// ---- layernorm
// -----------------------------------------------------------------------------------

namespace {

// Rows of a layernorm over the last dim: `columns` local columns per row.
struct NormRows {
  std::int64_t rows = 0, columns = 0;
};

// The element counts of a layernorm call's other views, by what they hold one value of.
struct NormViews {
  struct Counted {
    std::string_view what;
    std::int64_t numel = 0;
  };
  std::initializer_list<Counted> elements{};  // one per element of x (dy, y, dx)
  std::initializer_list<Counted> columns{};   // one per local column (gamma, beta and gradients)
  std::initializer_list<Counted> rows{};      // one per row (mean, rstd)
  std::int64_t sums = -1;                     // numel of (rows..., 2) sums; -1: no sums
};

// Checks every view of a layernorm call against x (rows..., C) and returns its rows.
NormRows check_norm(std::string_view call, const TensorShape& x, const NormViews& views) {
  const std::int64_t c = last_extent(call, x);
  CARTO_CHECK(c > 0, call, ": the normalized dim of ", x, " is empty");
  const NormRows n{.rows = x.numel() / c, .columns = c};
  for (const NormViews::Counted& v : views.elements)
    require_numel(call, v.what, v.numel, x.numel());
  for (const NormViews::Counted& v : views.columns) require_numel(call, v.what, v.numel, c);
  for (const NormViews::Counted& v : views.rows) require_numel(call, v.what, v.numel, n.rows);
  if (views.sums >= 0) require_numel(call, "sums (rows..., 2)", views.sums, 2 * n.rows);
  return n;
}

// The global column count of the split layernorm.
void require_global_columns(std::string_view call, std::int64_t global_columns, const NormRows& n) {
  CARTO_CHECK(global_columns >= n.columns, call, ": ", global_columns,
              " global columns cannot hold the ", n.columns, " local ones");
}

// y = (x - mu)·s·gamma + beta over one row.
CARTO_VECTOR_INLINE void normalize_row(const float* xr, const float* gamma, const float* beta,
                                       float mu, float s, float* yr, std::int64_t c) {
#pragma omp simd
  for (std::int64_t j = 0; j < c; ++j) yr[j] = (xr[j] - mu) * s * gamma[j] + beta[j];
}

// One row of the backward from the row's g_mean = mean(dy·γ) and gx_mean = mean(dy·γ·x̂):
// dx (=, +=) s·(dy·γ − g_mean − x̂·gx_mean); dgamma += dy·x̂; dbeta += dy.
template <bool AccumulateDx>
CARTO_VECTOR_INLINE void backward_row(const float* dyr, const float* xr, const float* gamma,
                                      float mu, float s, float g_mean, float gx_mean, float* dxr,
                                      float* dgamma, float* dbeta, std::int64_t c) {
#pragma omp simd
  for (std::int64_t j = 0; j < c; ++j) {
    const float xhat = (xr[j] - mu) * s;
    store<AccumulateDx>(dxr[j], s * (dyr[j] * gamma[j] - g_mean - xhat * gx_mean));
    dgamma[j] += dyr[j] * xhat;
    dbeta[j] += dyr[j];
  }
}

// The rows of layernorm_forward: x, y (rows, c), gamma, beta (c), mean, rstd (rows).
CARTO_VECTOR_CLONES void layernorm_rows(const float* px, const float* pg, const float* pb,
                                        float* py, float* pmean, float* prstd, std::int64_t rows,
                                        std::int64_t c, float epsilon) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * c;
    const float mu =
        sum_lanes<float>(c, [&](std::int64_t j) { return xr[j]; }) / static_cast<float>(c);
    // Two passes: no cancellation between E[x²] and E[x]².
    const float squares = sum_lanes<float>(c, [&](std::int64_t j) {
      const float d = xr[j] - mu;
      return d * d;
    });
    const float s = 1.0f / std::sqrt(squares / static_cast<float>(c) + epsilon);
    normalize_row(xr, pg, pb, mu, s, py + r * c, c);
    pmean[r] = mu;
    prstd[r] = s;
  }
}

// The rows of layernorm_backward, shapes as in layernorm_rows.
CARTO_VECTOR_CLONES void layernorm_backward_rows(const float* pdy, const float* px, const float* pg,
                                                 const float* pmean, const float* prstd, float* pdx,
                                                 float* pdg, float* pdb, std::int64_t rows,
                                                 std::int64_t c, bool accumulate_dx) {
  const float inv_c = 1.0f / static_cast<float>(c);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * c;
    const float* dyr = pdy + r * c;
    const float mu = pmean[r], s = prstd[r];
    // dx = s · (g - mean(g) - x̂ · mean(g · x̂)) with g = dy · gamma and x̂ = (x - mu) · s.
    const float g_mean = sum_lanes<float>(c, [&](std::int64_t j) { return dyr[j] * pg[j]; });
    const float gx_mean =
        sum_lanes<float>(c, [&](std::int64_t j) { return dyr[j] * pg[j] * (xr[j] - mu) * s; });
    if (accumulate_dx) {
      backward_row<true>(dyr, xr, pg, mu, s, g_mean * inv_c, gx_mean * inv_c, pdx + r * c, pdg, pdb,
                         c);
    } else {
      backward_row<false>(dyr, xr, pg, mu, s, g_mean * inv_c, gx_mean * inv_c, pdx + r * c, pdg,
                          pdb, c);
    }
  }
}

// The fp32 accumulator of a per-column gradient (dgamma, dbeta) that every row adds into: slot k
// (or the view itself when fp32), starting from its values (accumulate) or from 0 (assign).
float* column_sums(const Staging& st, std::size_t k, const TensorView& out, std::int64_t c,
                   CopyMode mode) {
  float* p = st.write(k, out, 0, c, mode == CopyMode::accumulate ? Load::yes : Load::no);
  if (mode == CopyMode::assign) std::fill(p, p + c, 0.0f);
  return p;
}

}  // namespace

void CpuBackend::layernorm_forward(ConstTensorView x, ConstTensorView gamma, ConstTensorView beta,
                                   TensorView y, TensorView mean, TensorView rstd,
                                   const LayerNormArgs& args) {
  const auto [rows, c] = check_norm("layernorm_forward", x.shape(),
                                    {.elements = {{"y", y.numel()}},
                                     .columns = {{"gamma", gamma.numel()}, {"beta", beta.numel()}},
                                     .rows = {{"mean", mean.numel()}, {"rstd", rstd.numel()}}});
  constexpr std::string_view call = "layernorm_forward";
  float* pmean = fp32_of(call, "mean", mean);
  float* prstd = fp32_of(call, "rstd", rstd);
  const std::int64_t step = rows_per_block(c, rows);
  const Staging st(*this, call,
                   {{"gamma", gamma.dtype(), c},
                    {"beta", beta.dtype(), c},
                    {"x", x.dtype(), step * c},
                    {"y", y.dtype, step * c}});
  const float* pg = st.read(0, gamma, 0, c);
  const float* pb = st.read(1, beta, 0, c);
  st.for_blocks_parallel(rows, step, detail::row_grain(c), [&](std::int64_t r0, std::int64_t nr) {
    layernorm_rows(st.read(2, x, r0 * c, nr * c), pg, pb, st.write(3, y, r0 * c, nr * c, Load::no),
                   pmean + r0, prstd + r0, nr, c, args.epsilon);
    st.commit(3, y, r0 * c, nr * c);
  });
}

void CpuBackend::layernorm_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                    ConstTensorView mean, ConstTensorView rstd, TensorView dx,
                                    TensorView dgamma, TensorView dbeta,
                                    const NormGradModes& modes) {
  const auto [rows, c] = check_norm(
      "layernorm_backward", x.shape(),
      {.elements = {{"dy", dy.numel()}, {"dx", dx.numel()}},
       .columns = {{"gamma", gamma.numel()}, {"dgamma", dgamma.numel()}, {"dbeta", dbeta.numel()}},
       .rows = {{"mean", mean.numel()}, {"rstd", rstd.numel()}}});
  constexpr std::string_view call = "layernorm_backward";
  const float* pmean = fp32_of(call, "mean", mean);
  const float* prstd = fp32_of(call, "rstd", rstd);
  const std::int64_t step = rows_per_block(c, rows);
  const Staging st(*this, call,
                   {{"gamma", gamma.dtype(), c},
                    {"dgamma", dgamma.dtype, c},
                    {"dbeta", dbeta.dtype, c},
                    {"dy", dy.dtype(), step * c},
                    {"x", x.dtype(), step * c},
                    {"dx", dx.dtype, step * c}});
  const float* pg = st.read(0, gamma, 0, c);
  float* pdg = column_sums(st, 1, dgamma, c, modes.dgamma);
  float* pdb = column_sums(st, 2, dbeta, c, modes.dbeta);
  const bool acc_dx = modes.dx == CopyMode::accumulate;
  const Load load_dx = acc_dx ? Load::yes : Load::no;
  st.for_blocks(rows, step, [&](std::int64_t r0, std::int64_t nr) {
    const std::int64_t at = r0 * c, n = nr * c;
    layernorm_backward_rows(st.read(3, dy, at, n), st.read(4, x, at, n), pg, pmean + r0, prstd + r0,
                            st.write(5, dx, at, n, load_dx), pdg, pdb, nr, c, acc_dx);
    st.commit(5, dx, at, n);
  });
  st.commit(1, dgamma, 0, c);
  st.commit(2, dbeta, 0, c);
}

// ---- layernorm with the normalized dim split across devices
// ---------------------------------------

namespace {

// The loops of the four calls below over `rows` rows of `c` local columns.
CARTO_VECTOR_CLONES void partial_sums_rows(const float* px, float* ps, std::int64_t rows,
                                           std::int64_t c) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * c;
    // fp32 squares are exact in double.
    ps[2 * r] =
        static_cast<float>(sum_lanes<double>(c, [&](std::int64_t j) { return double{xr[j]}; }));
    ps[2 * r + 1] = static_cast<float>(sum_lanes<double>(c, [&](std::int64_t j) {
      const double v = xr[j];
      return v * v;
    }));
  }
}

CARTO_VECTOR_CLONES void apply_rows(const float* px, const float* ps, double global_columns,
                                    const float* pg, const float* pb, float* py, float* pmean,
                                    float* prstd, std::int64_t rows, std::int64_t c,
                                    double epsilon) {
  for (std::int64_t r = 0; r < rows; ++r) {
    // The per-row scalars in double: E[x²] − mean² loses no more than the fp32 sums carry.
    const double mu = static_cast<double>(ps[2 * r]) / global_columns;
    const double var = std::max(static_cast<double>(ps[2 * r + 1]) / global_columns - mu * mu, 0.0);
    pmean[r] = static_cast<float>(mu);
    prstd[r] = static_cast<float>(1.0 / std::sqrt(var + epsilon));
    normalize_row(px + r * c, pg, pb, pmean[r], prstd[r], py + r * c, c);
  }
}

CARTO_VECTOR_CLONES void backward_partial_sums_rows(const float* pdy, const float* px,
                                                    const float* pg, const float* pmean,
                                                    const float* prstd, float* ps,
                                                    std::int64_t rows, std::int64_t c) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * c;
    const float* dyr = pdy + r * c;
    const float mu = pmean[r], s = prstd[r];
    ps[2 * r] = static_cast<float>(
        sum_lanes<double>(c, [&](std::int64_t j) { return static_cast<double>(dyr[j] * pg[j]); }));
    ps[2 * r + 1] = static_cast<float>(sum_lanes<double>(c, [&](std::int64_t j) {
      return static_cast<double>(dyr[j] * pg[j] * ((xr[j] - mu) * s));
    }));
  }
}

CARTO_VECTOR_CLONES void backward_apply_rows(const float* pdy, const float* px, const float* pg,
                                             const float* pmean, const float* prstd,
                                             const float* ps, float global_columns, float* pdx,
                                             float* pdg, float* pdb, std::int64_t rows,
                                             std::int64_t c, bool accumulate_dx) {
  const float inv_c = 1.0f / global_columns;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float g_mean = ps[2 * r] * inv_c, gx_mean = ps[2 * r + 1] * inv_c;
    if (accumulate_dx) {
      backward_row<true>(pdy + r * c, px + r * c, pg, pmean[r], prstd[r], g_mean, gx_mean,
                         pdx + r * c, pdg, pdb, c);
    } else {
      backward_row<false>(pdy + r * c, px + r * c, pg, pmean[r], prstd[r], g_mean, gx_mean,
                          pdx + r * c, pdg, pdb, c);
    }
  }
}

}  // namespace

void CpuBackend::layernorm_partial_sums(ConstTensorView x, TensorView sums) {
  const NormRows n = check_norm("layernorm_partial_sums", x.shape(), {.sums = sums.numel()});
  float* ps = fp32_of("layernorm_partial_sums", "sums", sums);
  const std::int64_t c = n.columns, step = rows_per_block(c, n.rows);
  const Staging st(*this, "layernorm_partial_sums", {{"x", x.dtype(), step * c}});
  st.for_blocks_parallel(n.rows, step, detail::row_grain(c), [&](std::int64_t r0, std::int64_t nr) {
    partial_sums_rows(st.read(0, x, r0 * c, nr * c), ps + 2 * r0, nr, c);
  });
}

void CpuBackend::layernorm_apply(ConstTensorView x, ConstTensorView sums,
                                 std::int64_t global_columns, ConstTensorView gamma,
                                 ConstTensorView beta, TensorView y, TensorView mean,
                                 TensorView rstd, const LayerNormArgs& args) {
  const NormRows n = check_norm("layernorm_apply", x.shape(),
                                {.elements = {{"y", y.numel()}},
                                 .columns = {{"gamma", gamma.numel()}, {"beta", beta.numel()}},
                                 .rows = {{"mean", mean.numel()}, {"rstd", rstd.numel()}},
                                 .sums = sums.numel()});
  require_global_columns("layernorm_apply", global_columns, n);
  constexpr std::string_view call = "layernorm_apply";
  const float* ps = fp32_of(call, "sums", sums);
  float* pmean = fp32_of(call, "mean", mean);
  float* prstd = fp32_of(call, "rstd", rstd);
  const std::int64_t c = n.columns, step = rows_per_block(c, n.rows);
  const Staging st(*this, call,
                   {{"gamma", gamma.dtype(), c},
                    {"beta", beta.dtype(), c},
                    {"x", x.dtype(), step * c},
                    {"y", y.dtype, step * c}});
  const float* pg = st.read(0, gamma, 0, c);
  const float* pb = st.read(1, beta, 0, c);
  st.for_blocks_parallel(n.rows, step, detail::row_grain(c), [&](std::int64_t r0, std::int64_t nr) {
    const std::int64_t at = r0 * c, count = nr * c;
    apply_rows(st.read(2, x, at, count), ps + 2 * r0, static_cast<double>(global_columns), pg, pb,
               st.write(3, y, at, count, Load::no), pmean + r0, prstd + r0, nr, c,
               static_cast<double>(args.epsilon));
    st.commit(3, y, at, count);
  });
}

void CpuBackend::layernorm_backward_partial_sums(ConstTensorView dy, ConstTensorView x,
                                                 ConstTensorView gamma, ConstTensorView mean,
                                                 ConstTensorView rstd, TensorView sums) {
  const NormRows n = check_norm("layernorm_backward_partial_sums", x.shape(),
                                {.elements = {{"dy", dy.numel()}},
                                 .columns = {{"gamma", gamma.numel()}},
                                 .rows = {{"mean", mean.numel()}, {"rstd", rstd.numel()}},
                                 .sums = sums.numel()});
  constexpr std::string_view call = "layernorm_backward_partial_sums";
  const float* pmean = fp32_of(call, "mean", mean);
  const float* prstd = fp32_of(call, "rstd", rstd);
  float* ps = fp32_of(call, "sums", sums);
  const std::int64_t c = n.columns, step = rows_per_block(c, n.rows);
  const Staging st(
      *this, call,
      {{"gamma", gamma.dtype(), c}, {"dy", dy.dtype(), step * c}, {"x", x.dtype(), step * c}});
  const float* pg = st.read(0, gamma, 0, c);
  st.for_blocks_parallel(n.rows, step, detail::row_grain(c), [&](std::int64_t r0, std::int64_t nr) {
    const std::int64_t at = r0 * c, count = nr * c;
    backward_partial_sums_rows(st.read(1, dy, at, count), st.read(2, x, at, count), pg, pmean + r0,
                               prstd + r0, ps + 2 * r0, nr, c);
  });
}

void CpuBackend::layernorm_backward_apply(ConstTensorView dy, ConstTensorView x,
                                          ConstTensorView gamma, ConstTensorView mean,
                                          ConstTensorView rstd, ConstTensorView sums,
                                          std::int64_t global_columns, TensorView dx,
                                          TensorView dgamma, TensorView dbeta,
                                          const NormGradModes& modes) {
  const NormRows n = check_norm(
      "layernorm_backward_apply", x.shape(),
      {.elements = {{"dy", dy.numel()}, {"dx", dx.numel()}},
       .columns = {{"gamma", gamma.numel()}, {"dgamma", dgamma.numel()}, {"dbeta", dbeta.numel()}},
       .rows = {{"mean", mean.numel()}, {"rstd", rstd.numel()}},
       .sums = sums.numel()});
  require_global_columns("layernorm_backward_apply", global_columns, n);
  constexpr std::string_view call = "layernorm_backward_apply";
  const float* pmean = fp32_of(call, "mean", mean);
  const float* prstd = fp32_of(call, "rstd", rstd);
  const float* ps = fp32_of(call, "sums", sums);
  const std::int64_t c = n.columns, step = rows_per_block(c, n.rows);
  const Staging st(*this, call,
                   {{"gamma", gamma.dtype(), c},
                    {"dgamma", dgamma.dtype, c},
                    {"dbeta", dbeta.dtype, c},
                    {"dy", dy.dtype(), step * c},
                    {"x", x.dtype(), step * c},
                    {"dx", dx.dtype, step * c}});
  const float* pg = st.read(0, gamma, 0, c);
  float* pdg = column_sums(st, 1, dgamma, c, modes.dgamma);
  float* pdb = column_sums(st, 2, dbeta, c, modes.dbeta);
  const bool acc_dx = modes.dx == CopyMode::accumulate;
  const Load load_dx = acc_dx ? Load::yes : Load::no;
  st.for_blocks(n.rows, step, [&](std::int64_t r0, std::int64_t nr) {
    const std::int64_t at = r0 * c, count = nr * c;
    backward_apply_rows(st.read(3, dy, at, count), st.read(4, x, at, count), pg, pmean + r0,
                        prstd + r0, ps + 2 * r0, static_cast<float>(global_columns),
                        st.write(5, dx, at, count, load_dx), pdg, pdb, nr, c, acc_dx);
    st.commit(5, dx, at, count);
  });
  st.commit(1, dgamma, 0, c);
  st.commit(2, dbeta, 0, c);
}

// ---- softmax
// -------------------------------------------------------------------------------------

namespace {
// Row geometry of a softmax over the last dim: rows, the keys per row, and for the causal mask the
// global query index of each row and the global key index of local key 0.
struct SoftmaxRows {
  std::int64_t rows = 0, keys = 0, queries = 1, query_offset = 0, key_offset = 0;
  bool causal = false;
  // The number of leading keys of local row r that are not masked.
  [[nodiscard]] std::int64_t visible(std::int64_t r) const {
    if (!causal) return keys;
    const std::int64_t q = query_offset + r % queries;
    return std::clamp<std::int64_t>(q - key_offset + 1, 0, keys);
  }
};
SoftmaxRows softmax_rows(std::string_view call, const TensorShape& s, const SoftmaxArgs& args) {
  SoftmaxRows out;
  out.keys = last_extent(call, s);
  out.rows = s.numel() / out.keys;
  out.causal = args.masking == Masking::causal;
  if (out.causal) {
    CARTO_CHECK(s.rank() >= 2, call, ": a causal mask needs (..., queries, keys); got ", s);
    const Index local = extents_of(s);
    const GlobalIndexer where(args.placement, local);
    out.queries = local[s.rank() - 2];
    out.query_offset = where.offset[s.rank() - 2];
    out.key_offset = where.offset[s.rank() - 1];
  }
  return out;
}

// Rows [first, first + rows) of softmax_forward, px and py pointing at row `first` (y may be x).
CARTO_VECTOR_CLONES void softmax_forward_rows(const float* px, float* py, const SoftmaxRows& geo,
                                              std::int64_t first, std::int64_t rows, float scale) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * geo.keys;
    float* yr = py + r * geo.keys;
    const std::int64_t n = geo.visible(first + r);
    const float max = max_lanes(n, [&](std::int64_t j) { return scale * xr[j]; });
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) yr[j] = exp_approx(scale * xr[j] - max);
    const float inv = 1.0f / sum_lanes<float>(n, [&](std::int64_t j) { return yr[j]; });
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) yr[j] *= inv;
    std::fill(yr + n, yr + geo.keys, 0.0f);
  }
}

// Rows [first, first + rows) of softmax_backward, the pointers at row `first`.
CARTO_VECTOR_CLONES void softmax_backward_rows(const float* py, const float* pdy, float* pdx,
                                               const SoftmaxRows& geo, std::int64_t first,
                                               std::int64_t rows, float scale, bool accumulate) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* yr = py + r * geo.keys;
    const float* dyr = pdy + r * geo.keys;
    float* dxr = pdx + r * geo.keys;
    const std::int64_t n = geo.visible(first + r);  // masked entries have y = 0 and gradient 0
    const float dot = sum_lanes<float>(n, [&](std::int64_t j) { return dyr[j] * yr[j]; });
    if (accumulate) {
#pragma omp simd
      for (std::int64_t j = 0; j < n; ++j) dxr[j] += scale * yr[j] * (dyr[j] - dot);
    } else {
#pragma omp simd
      for (std::int64_t j = 0; j < n; ++j) dxr[j] = scale * yr[j] * (dyr[j] - dot);
      std::fill(dxr + n, dxr + geo.keys, 0.0f);  // the masked entries' gradient
    }
  }
}

}  // namespace

void CpuBackend::softmax_forward(ConstTensorView x, TensorView y, const SoftmaxArgs& args) {
  const SoftmaxRows geo = softmax_rows("softmax_forward", x.shape(), args);
  require_numel("softmax_forward", "y", y.numel(), x.numel());
  // visible(r) depends on r % queries only.
  for (std::int64_t r = 0; r < std::min(geo.rows, geo.queries); ++r) {
    CARTO_CHECK(geo.visible(r) > 0, "softmax_forward: row ", r, " has every key masked");
  }
  const std::int64_t k = geo.keys, step = rows_per_block(k, geo.rows);
  const Staging st(*this, "softmax_forward",
                   {{"x", x.dtype(), step * k}, {"y", y.dtype, step * k}});
  st.for_blocks_parallel(
      geo.rows, step, detail::row_grain(k), [&](std::int64_t r0, std::int64_t nr) {
        softmax_forward_rows(st.read(0, x, r0 * k, nr * k),
                             st.write(1, y, r0 * k, nr * k, Load::no), geo, r0, nr, args.scale);
        st.commit(1, y, r0 * k, nr * k);
      });
}

void CpuBackend::softmax_backward(ConstTensorView y, ConstTensorView dy, TensorView dx,
                                  const SoftmaxArgs& args, CopyMode mode) {
  const SoftmaxRows geo = softmax_rows("softmax_backward", y.shape(), args);
  require_numel("softmax_backward", "dy", dy.numel(), y.numel());
  require_numel("softmax_backward", "dx", dx.numel(), y.numel());
  const std::int64_t k = geo.keys, step = rows_per_block(k, geo.rows);
  const Staging st(
      *this, "softmax_backward",
      {{"y", y.dtype(), step * k}, {"dy", dy.dtype(), step * k}, {"dx", dx.dtype, step * k}});
  const bool acc = mode == CopyMode::accumulate;
  st.for_blocks_parallel(geo.rows, step, detail::row_grain(k),
                         [&](std::int64_t r0, std::int64_t nr) {
                           const std::int64_t at = r0 * k, n = nr * k;
                           softmax_backward_rows(st.read(0, y, at, n), st.read(1, dy, at, n),
                                                 st.write(2, dx, at, n, acc ? Load::yes : Load::no),
                                                 geo, r0, nr, args.scale, acc);
                           st.commit(2, dx, at, n);
                         });
}

}  // namespace carto::cpu
