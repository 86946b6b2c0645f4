// The CPU backend's RMSNorm over the last dim (Zhang & Sennrich 2019), whole rows and with the
// normalized dim split across devices.
//
// y = x·rstd·γ with rstd = 1/sqrt(mean(x²) + eps). With x̂ = x·rstd and g = dy·γ the gradient is
// dx = rstd·(g − x̂·mean(g·x̂)) and dγ = Σ_rows dy·x̂ (no mean and no β, unlike layernorm). Each row
// is one lane sum (vector_math.hpp) and one vectorized element loop; the split form sums x² (and
// in backward g·x̂) over the local columns in double, rounds the row's sum to fp32 once for the
// all-reduce, and applies the global sum. bf16 views are staged a block of rows at a time
// (elements.hpp); gamma and dgamma once per call; rstd and the sums are fp32.
#include <algorithm>
#include <cmath>
#include <string_view>

#include "cpu_backend.hpp"
#include "elements.hpp"
#include "kernel_checks.hpp"
#include "vector_math.hpp"

namespace carto::cpu {

using detail::fp32_of;
using detail::last_extent;
using detail::Load;
using detail::require_numel;
using detail::rows_per_block;
using detail::Staging;
using detail::store;
using detail::sum_lanes;

namespace {

struct RmsRows {
  std::int64_t rows = 0, columns = 0;
};

// Checks x (rows..., C) against the per-element views (dy, y, dx), gamma (and dgamma) of C, and
// the per-row views (rstd, sums) and returns the rows.
RmsRows check_rms(std::string_view call, const TensorShape& x,
                  std::initializer_list<std::pair<std::string_view, std::int64_t>> elements,
                  std::initializer_list<std::pair<std::string_view, std::int64_t>> columns,
                  std::initializer_list<std::pair<std::string_view, std::int64_t>> rows) {
  const std::int64_t c = last_extent(call, x);
  CARTO_CHECK(c > 0, call, ": the normalized dim of ", x, " is empty");
  const RmsRows n{.rows = x.numel() / c, .columns = c};
  for (const auto& [what, numel] : elements) require_numel(call, what, numel, x.numel());
  for (const auto& [what, numel] : columns) require_numel(call, what, numel, c);
  for (const auto& [what, numel] : rows) require_numel(call, what, numel, n.rows);
  return n;
}

void require_global(std::string_view call, std::int64_t global_columns, const RmsRows& n) {
  CARTO_CHECK(global_columns >= n.columns, call, ": ", global_columns,
              " global columns cannot hold the ", n.columns, " local ones");
}

CARTO_VECTOR_INLINE void scale_row(const float* xr, const float* gamma, float s, float* yr,
                                   std::int64_t c) {
#pragma omp simd
  for (std::int64_t j = 0; j < c; ++j) yr[j] = xr[j] * s * gamma[j];
}

// dx (=, +=) s·(dy·γ − x̂·gx_mean); dgamma += dy·x̂, with x̂ = x·s.
template <bool AccumulateDx>
CARTO_VECTOR_INLINE void rms_backward_row(const float* dyr, const float* xr, const float* gamma,
                                          float s, float gx_mean, float* dxr, float* dgamma,
                                          std::int64_t c) {
#pragma omp simd
  for (std::int64_t j = 0; j < c; ++j) {
    const float xhat = xr[j] * s;
    store<AccumulateDx>(dxr[j], s * (dyr[j] * gamma[j] - xhat * gx_mean));
    dgamma[j] += dyr[j] * xhat;
  }
}

CARTO_VECTOR_CLONES void rms_rows(const float* px, const float* pg, float* py, float* prstd,
                                  std::int64_t rows, std::int64_t c, float epsilon) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * c;
    const float squares = sum_lanes<float>(c, [&](std::int64_t j) { return xr[j] * xr[j]; });
    const float s = 1.0f / std::sqrt(squares / static_cast<float>(c) + epsilon);
    scale_row(xr, pg, s, py + r * c, c);
    prstd[r] = s;
  }
}

CARTO_VECTOR_CLONES void rms_backward_rows(const float* pdy, const float* px, const float* pg,
                                           const float* prstd, float* pdx, float* pdg,
                                           std::int64_t rows, std::int64_t c, bool accumulate_dx) {
  const float inv_c = 1.0f / static_cast<float>(c);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * c;
    const float* dyr = pdy + r * c;
    const float s = prstd[r];
    const float gx =
        sum_lanes<float>(c, [&](std::int64_t j) { return dyr[j] * pg[j] * xr[j] * s; });
    if (accumulate_dx) {
      rms_backward_row<true>(dyr, xr, pg, s, gx * inv_c, pdx + r * c, pdg, c);
    } else {
      rms_backward_row<false>(dyr, xr, pg, s, gx * inv_c, pdx + r * c, pdg, c);
    }
  }
}

CARTO_VECTOR_CLONES void rms_partial_rows(const float* px, float* ps, std::int64_t rows,
                                          std::int64_t c) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * c;
    ps[r] = static_cast<float>(sum_lanes<double>(c, [&](std::int64_t j) {
      const double v = xr[j];
      return v * v;  // exact in double
    }));
  }
}

CARTO_VECTOR_CLONES void rms_apply_rows(const float* px, const float* ps, double global_columns,
                                        const float* pg, float* py, float* prstd, std::int64_t rows,
                                        std::int64_t c, double epsilon) {
  for (std::int64_t r = 0; r < rows; ++r) {
    prstd[r] =
        static_cast<float>(1.0 / std::sqrt(static_cast<double>(ps[r]) / global_columns + epsilon));
    scale_row(px + r * c, pg, prstd[r], py + r * c, c);
  }
}

CARTO_VECTOR_CLONES void rms_backward_partial_rows(const float* pdy, const float* px,
                                                   const float* pg, const float* prstd, float* ps,
                                                   std::int64_t rows, std::int64_t c) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * c;
    const float* dyr = pdy + r * c;
    const float s = prstd[r];
    ps[r] = static_cast<float>(sum_lanes<double>(
        c, [&](std::int64_t j) { return static_cast<double>(dyr[j] * pg[j] * (xr[j] * s)); }));
  }
}

CARTO_VECTOR_CLONES void rms_backward_apply_rows(const float* pdy, const float* px, const float* pg,
                                                 const float* prstd, const float* ps,
                                                 float global_columns, float* pdx, float* pdg,
                                                 std::int64_t rows, std::int64_t c,
                                                 bool accumulate_dx) {
  const float inv_c = 1.0f / global_columns;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (accumulate_dx) {
      rms_backward_row<true>(pdy + r * c, px + r * c, pg, prstd[r], ps[r] * inv_c, pdx + r * c, pdg,
                             c);
    } else {
      rms_backward_row<false>(pdy + r * c, px + r * c, pg, prstd[r], ps[r] * inv_c, pdx + r * c,
                              pdg, c);
    }
  }
}

// The fp32 accumulator of dgamma, which every row adds into: slot k (or the view when fp32),
// starting from its values (accumulate) or from 0 (assign).
float* gamma_sums(const Staging& st, std::size_t k, const TensorView& dgamma, std::int64_t c,
                  CopyMode mode) {
  float* p = st.write(k, dgamma, 0, c, mode == CopyMode::accumulate ? Load::yes : Load::no);
  if (mode == CopyMode::assign) std::fill(p, p + c, 0.0f);
  return p;
}

}  // namespace

void CpuBackend::rmsnorm_forward(ConstTensorView x, ConstTensorView gamma, TensorView y,
                                 TensorView rstd, const RmsNormArgs& args) {
  constexpr std::string_view call = "rmsnorm_forward";
  const auto [rows, c] = check_rms(call, x.shape(), {{"y", y.numel()}}, {{"gamma", gamma.numel()}},
                                   {{"rstd", rstd.numel()}});
  float* prstd = fp32_of(call, "rstd", rstd);
  const std::int64_t step = rows_per_block(c, rows);
  const Staging st(
      *this, call,
      {{"gamma", gamma.dtype(), c}, {"x", x.dtype(), step * c}, {"y", y.dtype, step * c}});
  const float* pg = st.read(0, gamma, 0, c);
  st.for_blocks(rows, step, [&](std::int64_t r0, std::int64_t nr) {
    rms_rows(st.read(1, x, r0 * c, nr * c), pg, st.write(2, y, r0 * c, nr * c, Load::no),
             prstd + r0, nr, c, args.epsilon);
    st.commit(2, y, r0 * c, nr * c);
  });
}

void CpuBackend::rmsnorm_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                  ConstTensorView rstd, TensorView dx, TensorView dgamma,
                                  const NormGradModes& modes) {
  constexpr std::string_view call = "rmsnorm_backward";
  const auto [rows, c] =
      check_rms(call, x.shape(), {{"dy", dy.numel()}, {"dx", dx.numel()}},
                {{"gamma", gamma.numel()}, {"dgamma", dgamma.numel()}}, {{"rstd", rstd.numel()}});
  const float* prstd = fp32_of(call, "rstd", rstd);
  const std::int64_t step = rows_per_block(c, rows);
  const Staging st(*this, call,
                   {{"gamma", gamma.dtype(), c},
                    {"dgamma", dgamma.dtype, c},
                    {"dy", dy.dtype(), step * c},
                    {"x", x.dtype(), step * c},
                    {"dx", dx.dtype, step * c}});
  const float* pg = st.read(0, gamma, 0, c);
  float* pdg = gamma_sums(st, 1, dgamma, c, modes.dgamma);
  const bool acc = modes.dx == CopyMode::accumulate;
  st.for_blocks(rows, step, [&](std::int64_t r0, std::int64_t nr) {
    const std::int64_t at = r0 * c, n = nr * c;
    rms_backward_rows(st.read(2, dy, at, n), st.read(3, x, at, n), pg, prstd + r0,
                      st.write(4, dx, at, n, acc ? Load::yes : Load::no), pdg, nr, c, acc);
    st.commit(4, dx, at, n);
  });
  st.commit(1, dgamma, 0, c);
}

void CpuBackend::rmsnorm_partial_sums(ConstTensorView x, TensorView sums) {
  constexpr std::string_view call = "rmsnorm_partial_sums";
  const auto [rows, c] = check_rms(call, x.shape(), {}, {}, {{"sums (rows...)", sums.numel()}});
  float* ps = fp32_of(call, "sums", sums);
  const std::int64_t step = rows_per_block(c, rows);
  const Staging st(*this, call, {{"x", x.dtype(), step * c}});
  st.for_blocks(rows, step, [&](std::int64_t r0, std::int64_t nr) {
    rms_partial_rows(st.read(0, x, r0 * c, nr * c), ps + r0, nr, c);
  });
}

void CpuBackend::rmsnorm_apply(ConstTensorView x, ConstTensorView sums, std::int64_t global_columns,
                               ConstTensorView gamma, TensorView y, TensorView rstd,
                               const RmsNormArgs& args) {
  constexpr std::string_view call = "rmsnorm_apply";
  const RmsRows n = check_rms(call, x.shape(), {{"y", y.numel()}}, {{"gamma", gamma.numel()}},
                              {{"rstd", rstd.numel()}, {"sums (rows...)", sums.numel()}});
  require_global(call, global_columns, n);
  const float* ps = fp32_of(call, "sums", sums);
  float* prstd = fp32_of(call, "rstd", rstd);
  const std::int64_t c = n.columns, step = rows_per_block(c, n.rows);
  const Staging st(
      *this, call,
      {{"gamma", gamma.dtype(), c}, {"x", x.dtype(), step * c}, {"y", y.dtype, step * c}});
  const float* pg = st.read(0, gamma, 0, c);
  st.for_blocks(n.rows, step, [&](std::int64_t r0, std::int64_t nr) {
    const std::int64_t at = r0 * c, count = nr * c;
    rms_apply_rows(st.read(1, x, at, count), ps + r0, static_cast<double>(global_columns), pg,
                   st.write(2, y, at, count, Load::no), prstd + r0, nr, c,
                   static_cast<double>(args.epsilon));
    st.commit(2, y, at, count);
  });
}

void CpuBackend::rmsnorm_backward_partial_sums(ConstTensorView dy, ConstTensorView x,
                                               ConstTensorView gamma, ConstTensorView rstd,
                                               TensorView sums) {
  constexpr std::string_view call = "rmsnorm_backward_partial_sums";
  const auto [rows, c] =
      check_rms(call, x.shape(), {{"dy", dy.numel()}}, {{"gamma", gamma.numel()}},
                {{"rstd", rstd.numel()}, {"sums (rows...)", sums.numel()}});
  const float* prstd = fp32_of(call, "rstd", rstd);
  float* ps = fp32_of(call, "sums", sums);
  const std::int64_t step = rows_per_block(c, rows);
  const Staging st(
      *this, call,
      {{"gamma", gamma.dtype(), c}, {"dy", dy.dtype(), step * c}, {"x", x.dtype(), step * c}});
  const float* pg = st.read(0, gamma, 0, c);
  st.for_blocks(rows, step, [&](std::int64_t r0, std::int64_t nr) {
    const std::int64_t at = r0 * c, count = nr * c;
    rms_backward_partial_rows(st.read(1, dy, at, count), st.read(2, x, at, count), pg, prstd + r0,
                              ps + r0, nr, c);
  });
}

void CpuBackend::rmsnorm_backward_apply(ConstTensorView dy, ConstTensorView x,
                                        ConstTensorView gamma, ConstTensorView rstd,
                                        ConstTensorView sums, std::int64_t global_columns,
                                        TensorView dx, TensorView dgamma,
                                        const NormGradModes& modes) {
  constexpr std::string_view call = "rmsnorm_backward_apply";
  const RmsRows n = check_rms(call, x.shape(), {{"dy", dy.numel()}, {"dx", dx.numel()}},
                              {{"gamma", gamma.numel()}, {"dgamma", dgamma.numel()}},
                              {{"rstd", rstd.numel()}, {"sums (rows...)", sums.numel()}});
  require_global(call, global_columns, n);
  const float* prstd = fp32_of(call, "rstd", rstd);
  const float* ps = fp32_of(call, "sums", sums);
  const std::int64_t c = n.columns, step = rows_per_block(c, n.rows);
  const Staging st(*this, call,
                   {{"gamma", gamma.dtype(), c},
                    {"dgamma", dgamma.dtype, c},
                    {"dy", dy.dtype(), step * c},
                    {"x", x.dtype(), step * c},
                    {"dx", dx.dtype, step * c}});
  const float* pg = st.read(0, gamma, 0, c);
  float* pdg = gamma_sums(st, 1, dgamma, c, modes.dgamma);
  const bool acc = modes.dx == CopyMode::accumulate;
  st.for_blocks(n.rows, step, [&](std::int64_t r0, std::int64_t nr) {
    const std::int64_t at = r0 * c, count = nr * c;
    rms_backward_apply_rows(st.read(2, dy, at, count), st.read(3, x, at, count), pg, prstd + r0,
                            ps + r0, static_cast<float>(global_columns),
                            st.write(4, dx, at, count, acc ? Load::yes : Load::no), pdg, nr, c,
                            acc);
    st.commit(4, dx, at, count);
  });
  st.commit(1, dgamma, 0, c);
}

}  // namespace carto::cpu
