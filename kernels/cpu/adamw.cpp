// The CPU backend's AdamW: one shard per call, or every shard of a rank in one fused pass.
//
// Both run the same element loop (adamw_elements), so a fused step computes the bits the calls
// one by one do. The fused call (adamw_update_all) checks every shard first, computes the bias
// corrections once, and splits the elements of all shards together over the rank's threads
// (parallel.hpp), so the optimizer is one memory-bound pass over param, grad, m and v instead of
// one call and one thread per tensor. A bf16 gradient (mixed precision) is staged through fp32
// scratch a block at a time, as every bf16 view is (elements.hpp): those shards run one by one.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_backend.hpp"
#include "elements.hpp"
#include "kernel_checks.hpp"
#include "vector_math.hpp"

namespace carto::cpu {

using detail::require_same_shape;
using detail::Staging;

namespace {

struct AdamWConstants {
  float b1, b2, lr, eps, wd, correction1, correction2;
};

AdamWConstants adamw_constants(const AdamWArgs& args) {
  CARTO_CHECK(args.step >= 1, "adamw_update: the step t counts from 1; got ", args.step);
  const double t = static_cast<double>(args.step);
  return {.b1 = args.beta1,
          .b2 = args.beta2,
          .lr = args.learning_rate,
          .eps = args.epsilon,
          .wd = args.weight_decay,
          .correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta1), t)),
          .correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta2), t))};
}

// n elements of one shard: the moments, then the decoupled weight decay and the step.
CARTO_VECTOR_CLONES void adamw_elements(float* pa, const float* g, float* ma, float* va,
                                        std::int64_t n, const AdamWConstants& c) {
  const float b1 = c.b1, b2 = c.b2, lr = c.lr, eps = c.eps, wd = c.wd;
  const float correction1 = c.correction1, correction2 = c.correction2;
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    ma[i] = b1 * ma[i] + (1.0f - b1) * g[i];
    va[i] = b2 * va[i] + (1.0f - b2) * g[i] * g[i];
    const float m_hat = ma[i] / correction1;
    const float v_hat = va[i] / correction2;
    pa[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + wd * pa[i]);
  }
}

struct Checked {
  float* p;
  float* m;
  float* v;
};
Checked check_shard(TensorView param, ConstTensorView grad, TensorView m, TensorView v) {
  require_same_shape("adamw_update", param.shape, grad.shape());
  require_same_shape("adamw_update", param.shape, m.shape);
  require_same_shape("adamw_update", param.shape, v.shape);
  detail::require_storable("adamw_update", "grad", grad.dtype());
  return {.p = detail::fp32_of("adamw_update", "param", param),
          .m = detail::fp32_of("adamw_update", "m", m),
          .v = detail::fp32_of("adamw_update", "v", v)};
}

}  // namespace

void CpuBackend::adamw_update(TensorView param, ConstTensorView grad, TensorView m, TensorView v,
                              const AdamWArgs& args) {
  const Checked c = check_shard(param, grad, m, v);
  const AdamWConstants k = adamw_constants(args);
  const std::int64_t block = detail::stage_block(param.numel());
  const Staging st(*this, "adamw_update", {{"grad", grad.dtype(), block}});
  st.for_blocks_parallel(
      param.numel(), block, detail::kParallelGrain, [&](std::int64_t at, std::int64_t n) {
        adamw_elements(c.p + at, st.read(0, grad, at, n), c.m + at, c.v + at, n, k);
      });
}

void CpuBackend::adamw_update_all(std::span<const AdamWShard> shards, const AdamWArgs& args) {
  const AdamWConstants k = adamw_constants(args);
  struct Piece {
    Checked c;
    const float* g;
    std::int64_t first;  // its first element in the concatenation of the fp32 shards
  };
  std::vector<Piece> fused;
  std::int64_t total = 0;
  for (const AdamWShard& s : shards) {
    const Checked c = check_shard(s.param, s.grad, s.m, s.v);
    if (s.grad.dtype() != DType::fp32) {
      adamw_update(s.param, s.grad, s.m, s.v, args);
      continue;
    }
    if (s.param.numel() == 0) continue;
    fused.push_back({.c = c, .g = static_cast<const float*>(s.grad.data()), .first = total});
    total += s.param.numel();
  }
  detail::parallel_ranges(
      threads(), total, detail::kParallelGrain, [&](std::int64_t b, std::int64_t e) {
        // The piece holding element b, then each piece's part of [b, e).
        auto it = std::upper_bound(fused.begin(), fused.end(), b,
                                   [](std::int64_t x, const Piece& p) { return x < p.first; });
        for (std::size_t i = static_cast<std::size_t>(it - fused.begin()) - 1; i < fused.size();
             ++i) {
          const Piece& p = fused[i];
          const std::int64_t end = i + 1 < fused.size() ? fused[i + 1].first : total;
          const std::int64_t lo = std::max(b, p.first), hi = std::min(e, end);
          if (lo >= hi) break;
          const std::int64_t at = lo - p.first;
          adamw_elements(p.c.p + at, p.g + at, p.c.m + at, p.c.v + at, hi - lo, k);
        }
      });
}

}  // namespace carto::cpu
