// The CPU backend's Llama elementwise kernels: SwiGLU's product silu(gate)·up (Shazeer 2020) and
// the rotary position embedding (Su et al. 2021).
//
// silu(z) = z·σ(z) with σ(z) = 1/(1 + exp(−z)) from exp_approx (vector_math.hpp), −z clamped at 80
// so that exp stays finite (σ is then 0 to fp32 anyway); silu'(z) = σ(z)·(1 + z·(1 − σ(z))).
// Rotary rotates the pairs (2i, 2i+1) of each row of the last dim by p·θ^(-2i/d), p the row's
// global position (RotaryArgs::position_offset plus its index along the second-to-last dim). A
// call first fills a table of cos and sin over its S local positions and d/2 frequencies (angles
// and their cos, sin in double, rounded once; S·d floats from the backend's allocator), then every
// row reads it: y_2i = x_2i·cos − x_2i+1·sin, y_2i+1 = x_2i·sin + x_2i+1·cos. The backward is the
// inverse rotation, dx_2i (=, +=) dy_2i·cos + dy_2i+1·sin, dx_2i+1 (=, +=) −dy_2i·sin +
// dy_2i+1·cos, so it needs nothing saved. Gradients are stored in the caller's CopyMode
// (backend.hpp). bf16 views are staged in blocks (whole rows for rotary; elements.hpp).
#include <algorithm>
#include <cmath>
#include <string_view>

#include "cpu_backend.hpp"
#include "elements.hpp"
#include "kernel_checks.hpp"
#include "vector_math.hpp"

namespace carto::cpu {

using detail::Load;
using detail::require_numel;
using detail::Staging;
using detail::store;

namespace {

CARTO_VECTOR_INLINE float sigmoid(float z) {
  return 1.0f / (1.0f + detail::exp_approx(std::min(-z, 80.0f)));
}

CARTO_VECTOR_CLONES void silu_mul_loop(const float* pg, const float* pu, float* py,
                                       std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) py[i] = pg[i] * sigmoid(pg[i]) * pu[i];
}

template <bool Accumulate>
CARTO_VECTOR_INLINE void silu_mul_gradients(const float* pg, const float* pu, const float* pdy,
                                            float* pdg, float* pdu, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float z = pg[i];
    const float s = sigmoid(z);
    store<Accumulate>(pdg[i], pdy[i] * pu[i] * (s * (1.0f + z * (1.0f - s))));
    store<Accumulate>(pdu[i], pdy[i] * (z * s));
  }
}

CARTO_VECTOR_CLONES void silu_mul_backward_loop(const float* pg, const float* pu, const float* pdy,
                                                float* pdg, float* pdu, std::int64_t n,
                                                bool accumulate) {
  if (accumulate) {
    silu_mul_gradients<true>(pg, pu, pdy, pdg, pdu, n);
  } else {
    silu_mul_gradients<false>(pg, pu, pdy, pdg, pdu, n);
  }
}

// Rows of rotary: `rows` rows of d elements, row r at table row (first + r) mod S.
// y (=, +=) R·x, or Rᵀ·x (the inverse rotation) when `sign` is -1.
template <bool Accumulate>
CARTO_VECTOR_INLINE void rotate_rows(const float* px, float* py, const float* table,
                                     std::int64_t first, std::int64_t rows, std::int64_t seq,
                                     std::int64_t d, float sign) {
  const std::int64_t half = d / 2;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* c = table + ((first + r) % seq) * d;  // cos[half], then sin[half]
    const float* s = c + half;
    const float* xr = px + r * d;
    float* yr = py + r * d;
#pragma omp simd
    for (std::int64_t i = 0; i < half; ++i) {
      const float a = xr[2 * i], b = xr[2 * i + 1], si = sign * s[i];
      store<Accumulate>(yr[2 * i], a * c[i] - b * si);
      store<Accumulate>(yr[2 * i + 1], a * si + b * c[i]);
    }
  }
}

CARTO_VECTOR_CLONES void rotary_rows(const float* px, float* py, const float* table,
                                     std::int64_t first, std::int64_t rows, std::int64_t seq,
                                     std::int64_t d, float sign, bool accumulate) {
  if (accumulate) {
    rotate_rows<true>(px, py, table, first, rows, seq, d, sign);
  } else {
    rotate_rows<false>(px, py, table, first, rows, seq, d, sign);
  }
}

// The cos and sin table of a rotary call over x (..., S, d).
struct RotaryTable {
  std::int64_t seq = 0, d = 0, rows = 0;
  Buffer buffer;
};

RotaryTable rotary_table(Backend& backend, std::string_view call, const TensorShape& x,
                         const RotaryArgs& args) {
  CARTO_CHECK(x.rank() >= 2, call, ": x must be (..., S, d); got ", x);
  const std::int64_t d = x.dims()[x.rank() - 1].extent;
  const std::int64_t seq = x.dims()[x.rank() - 2].extent;
  CARTO_CHECK(d > 0 && d % 2 == 0, call, ": the last dim of ", x,
              " must be even (rotary rotates pairs)");
  CARTO_CHECK(args.theta > 1.0 && args.position_offset >= 0, call, ": theta must be above 1 (got ",
              args.theta, ") and position_offset non-negative (got ", args.position_offset, ")");
  RotaryTable t{.seq = seq,
                .d = d,
                .rows = x.numel() / d,
                .buffer = backend.allocate({{"rotary_table", seq * d}}, DType::fp32,
                                           MemoryCategory::temporaries)};
  auto* table = static_cast<float*>(t.buffer.data());
  const std::int64_t half = d / 2;
  for (std::int64_t p = 0; p < seq; ++p) {
    const auto pos = static_cast<double>(args.position_offset + p);
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle =
          pos * std::pow(args.theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
      table[p * d + i] = static_cast<float>(std::cos(angle));
      table[p * d + half + i] = static_cast<float>(std::sin(angle));
    }
  }
  return t;
}

// y (=, +=) the rotation of x (forward), or its inverse (backward: x = dy, y = dx).
void rotary_apply(Backend& backend, std::string_view call, ConstTensorView x, const TensorView& y,
                  const RotaryArgs& args, bool inverse, CopyMode mode) {
  require_numel(call, inverse ? "dx" : "y", y.numel(), x.numel());
  const RotaryTable t = rotary_table(backend, call, x.shape(), args);
  const auto* table = static_cast<const float*>(t.buffer.data());
  const bool acc = mode == CopyMode::accumulate;
  const std::int64_t step = detail::rows_per_block(t.d, t.rows);
  const Staging st(
      backend, call,
      {{inverse ? "dy" : "x", x.dtype(), step * t.d}, {inverse ? "dx" : "y", y.dtype, step * t.d}});
  st.for_blocks(t.rows, step, [&](std::int64_t r0, std::int64_t nr) {
    const std::int64_t at = r0 * t.d, n = nr * t.d;
    rotary_rows(st.read(0, x, at, n), st.write(1, y, at, n, acc ? Load::yes : Load::no), table, r0,
                nr, t.seq, t.d, inverse ? -1.0f : 1.0f, acc);
    st.commit(1, y, at, n);
  });
}

}  // namespace

void CpuBackend::silu_mul_forward(ConstTensorView gate, ConstTensorView up, TensorView y) {
  require_numel("silu_mul_forward", "up", up.numel(), gate.numel());
  require_numel("silu_mul_forward", "y", y.numel(), gate.numel());
  const std::int64_t block = detail::stage_block(gate.numel());
  const Staging st(
      *this, "silu_mul_forward",
      {{"gate", gate.dtype(), block}, {"up", up.dtype(), block}, {"y", y.dtype, block}});
  st.for_blocks(gate.numel(), block, [&](std::int64_t at, std::int64_t n) {
    silu_mul_loop(st.read(0, gate, at, n), st.read(1, up, at, n), st.write(2, y, at, n, Load::no),
                  n);
    st.commit(2, y, at, n);
  });
}

void CpuBackend::silu_mul_backward(ConstTensorView gate, ConstTensorView up, ConstTensorView dy,
                                   TensorView dgate, TensorView dup, CopyMode mode) {
  constexpr std::string_view call = "silu_mul_backward";
  require_numel(call, "up", up.numel(), gate.numel());
  require_numel(call, "dy", dy.numel(), gate.numel());
  require_numel(call, "dgate", dgate.numel(), gate.numel());
  require_numel(call, "dup", dup.numel(), gate.numel());
  const bool acc = mode == CopyMode::accumulate;
  const Load load = acc ? Load::yes : Load::no;
  const std::int64_t block = detail::stage_block(gate.numel());
  const Staging st(*this, call,
                   {{"gate", gate.dtype(), block},
                    {"up", up.dtype(), block},
                    {"dy", dy.dtype(), block},
                    {"dgate", dgate.dtype, block},
                    {"dup", dup.dtype, block}});
  st.for_blocks(gate.numel(), block, [&](std::int64_t at, std::int64_t n) {
    silu_mul_backward_loop(st.read(0, gate, at, n), st.read(1, up, at, n), st.read(2, dy, at, n),
                           st.write(3, dgate, at, n, load), st.write(4, dup, at, n, load), n, acc);
    st.commit(3, dgate, at, n);
    st.commit(4, dup, at, n);
  });
}

void CpuBackend::rotary_forward(ConstTensorView x, TensorView y, const RotaryArgs& args) {
  rotary_apply(*this, "rotary_forward", x, y, args, false, CopyMode::assign);
}

void CpuBackend::rotary_backward(ConstTensorView dy, TensorView dx, const RotaryArgs& args,
                                 CopyMode mode) {
  rotary_apply(*this, "rotary_backward", dy, dx, args, true, mode);
}

}  // namespace carto::cpu
