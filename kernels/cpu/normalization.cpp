// The CPU backend's reductions along the last dim: layernorm and (scaled, masked) softmax.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_backend.hpp"
#include "kernel_checks.hpp"

namespace carto::cpu {

using detail::extents_of;
using detail::last_extent;
using detail::require_numel;

// ---- layernorm
// -----------------------------------------------------------------------------------

void CpuBackend::layernorm_forward(ConstTensorView x, ConstTensorView gamma, ConstTensorView beta,
                                   TensorView y, TensorView mean, TensorView rstd,
                                   const LayerNormArgs& args) {
  const std::int64_t c = last_extent("layernorm_forward", x.shape());
  const std::int64_t rows = x.numel() / c;
  require_numel("layernorm_forward", "gamma", gamma.numel(), c);
  require_numel("layernorm_forward", "beta", beta.numel(), c);
  require_numel("layernorm_forward", "y", y.numel(), x.numel());
  require_numel("layernorm_forward", "mean", mean.numel(), rows);
  require_numel("layernorm_forward", "rstd", rstd.numel(), rows);
  const float* px = x.f32();
  const float* pg = gamma.f32();
  const float* pb = beta.f32();
  float* py = y.f32();
  float* pmean = mean.f32();
  float* prstd = rstd.f32();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * c;
    float sum = 0.0f;
    for (std::int64_t j = 0; j < c; ++j) sum += xr[j];
    const float mu = sum / static_cast<float>(c);
    float squares = 0.0f;  // two passes: no cancellation between E[x²] and E[x]²
    for (std::int64_t j = 0; j < c; ++j) squares += (xr[j] - mu) * (xr[j] - mu);
    const float s = 1.0f / std::sqrt(squares / static_cast<float>(c) + args.epsilon);
    for (std::int64_t j = 0; j < c; ++j) py[r * c + j] = (xr[j] - mu) * s * pg[j] + pb[j];
    pmean[r] = mu;
    prstd[r] = s;
  }
}

void CpuBackend::layernorm_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                    ConstTensorView mean, ConstTensorView rstd, TensorView dx,
                                    TensorView dgamma, TensorView dbeta) {
  const std::int64_t c = last_extent("layernorm_backward", x.shape());
  const std::int64_t rows = x.numel() / c;
  require_numel("layernorm_backward", "dy", dy.numel(), x.numel());
  require_numel("layernorm_backward", "dx", dx.numel(), x.numel());
  require_numel("layernorm_backward", "gamma", gamma.numel(), c);
  require_numel("layernorm_backward", "dgamma", dgamma.numel(), c);
  require_numel("layernorm_backward", "dbeta", dbeta.numel(), c);
  require_numel("layernorm_backward", "mean", mean.numel(), rows);
  require_numel("layernorm_backward", "rstd", rstd.numel(), rows);
  const float* pdy = dy.f32();
  const float* px = x.f32();
  const float* pg = gamma.f32();
  const float* pmean = mean.f32();
  const float* prstd = rstd.f32();
  float* pdx = dx.f32();
  float* pdg = dgamma.f32();
  float* pdb = dbeta.f32();
  const float inv_c = 1.0f / static_cast<float>(c);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * c;
    const float* dyr = pdy + r * c;
    const float mu = pmean[r], s = prstd[r];
    // dx = s · (g - mean(g) - x̂ · mean(g · x̂)) with g = dy · gamma and x̂ = (x - mu) · s.
    float g_mean = 0.0f, gx_mean = 0.0f;
    for (std::int64_t j = 0; j < c; ++j) {
      const float g = dyr[j] * pg[j];
      g_mean += g;
      gx_mean += g * (xr[j] - mu) * s;
    }
    g_mean *= inv_c;
    gx_mean *= inv_c;
    for (std::int64_t j = 0; j < c; ++j) {
      const float xhat = (xr[j] - mu) * s;
      pdx[r * c + j] += s * (dyr[j] * pg[j] - g_mean - xhat * gx_mean);
      pdg[j] += dyr[j] * xhat;
      pdb[j] += dyr[j];
    }
  }
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
}  // namespace

void CpuBackend::softmax_forward(ConstTensorView x, TensorView y, const SoftmaxArgs& args) {
  const SoftmaxRows geo = softmax_rows("softmax_forward", x.shape(), args);
  require_numel("softmax_forward", "y", y.numel(), x.numel());
  const float* px = x.f32();
  float* py = y.f32();
  for (std::int64_t r = 0; r < geo.rows; ++r) {
    const float* xr = px + r * geo.keys;
    float* yr = py + r * geo.keys;
    const std::int64_t n = geo.visible(r);
    CARTO_CHECK(n > 0, "softmax_forward: row ", r, " has every key masked");
    float max = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < n; ++j) max = std::max(max, args.scale * xr[j]);
    float sum = 0.0f;
    for (std::int64_t j = 0; j < n; ++j) {
      yr[j] = std::exp(args.scale * xr[j] - max);
      sum += yr[j];
    }
    const float inv = 1.0f / sum;
    for (std::int64_t j = 0; j < n; ++j) yr[j] *= inv;
    for (std::int64_t j = n; j < geo.keys; ++j) yr[j] = 0.0f;
  }
}

void CpuBackend::softmax_backward(ConstTensorView y, ConstTensorView dy, TensorView dx,
                                  const SoftmaxArgs& args) {
  const SoftmaxRows geo = softmax_rows("softmax_backward", y.shape(), args);
  require_numel("softmax_backward", "dy", dy.numel(), y.numel());
  require_numel("softmax_backward", "dx", dx.numel(), y.numel());
  const float* py = y.f32();
  const float* pdy = dy.f32();
  float* pdx = dx.f32();
  for (std::int64_t r = 0; r < geo.rows; ++r) {
    const float* yr = py + r * geo.keys;
    const float* dyr = pdy + r * geo.keys;
    float* dxr = pdx + r * geo.keys;
    const std::int64_t n = geo.visible(r);  // masked entries have y = 0 and gradient 0
    float dot = 0.0f;
    for (std::int64_t j = 0; j < n; ++j) dot += dyr[j] * yr[j];
    for (std::int64_t j = 0; j < n; ++j) dxr[j] += args.scale * yr[j] * (dyr[j] - dot);
  }
}

}  // namespace carto::cpu
