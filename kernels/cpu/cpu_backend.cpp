// The CPU backend's memory, copies, GEMM, elementwise kernels and AdamW.
#include "cpu_backend.hpp"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "elements.hpp"
#include "kernel_checks.hpp"
#include "vector_math.hpp"

namespace carto::cpu {

using detail::extents_of;
using detail::Load;
using detail::require_numel;
using detail::require_same_shape;
using detail::Staging;

// ---- memory and queue
// ----------------------------------------------------------------------------

namespace detail {

CARTO_VECTOR_CLONES void widen(const Bf16* src, float* dst, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    dst[i] = std::bit_cast<float>(static_cast<std::uint32_t>(src[i].bits) << 16);
  }
}

// to_bf16 with its NaN branch as a select: (u & 0x7FFFFFFF) > 0x7F800000 is "exponent all ones
// and a nonzero fraction".
CARTO_VECTOR_CLONES void narrow(const float* src, Bf16* dst, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const auto u = std::bit_cast<std::uint32_t>(src[i]);
    const std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const std::uint32_t quiet = (u >> 16) | 0x0040u;
    dst[i].bits = static_cast<std::uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet : rounded);
  }
}

}  // namespace detail

void CpuBackend::copy_from_host(const void* host, TensorView dst) {
  std::memcpy(dst.data, host, static_cast<std::size_t>(dst.bytes()));
}

void CpuBackend::copy_to_host(ConstTensorView src, void* host) {
  std::memcpy(host, src.data(), static_cast<std::size_t>(src.bytes()));
}

// ---- fills and copies
// ----------------------------------------------------------------------------

void CpuBackend::fill(TensorView x, float value) {
  detail::require_storable("fill", "x", x.dtype);
  const int threads = this->threads();
  if (x.dtype == DType::bf16) {
    auto* p = static_cast<Bf16*>(x.data);
    const Bf16 v = to_bf16(value);
    detail::parallel_ranges(threads, x.numel(), detail::kParallelGrain,
                            [&](std::int64_t b, std::int64_t e) { std::fill(p + b, p + e, v); });
    return;
  }
  float* p = x.f32();
  detail::parallel_ranges(threads, x.numel(), detail::kParallelGrain,
                          [&](std::int64_t b, std::int64_t e) { std::fill(p + b, p + e, value); });
}

// bf16: each fp32 draw rounded once, so a bf16 shard holds round_to_bf16 of the fp32 values.
void CpuBackend::fill_normal(TensorView x, float stddev, RngStream rng,
                             const ShardPlacement& placement) {
  detail::require_storable("fill_normal", "x", x.dtype);
  if (x.dtype == DType::bf16) {
    auto* p = static_cast<Bf16*>(x.data);
    for_each_global_index(placement, extents_of(x.shape), [&](std::int64_t l, std::int64_t g) {
      p[l] = to_bf16(rng::init_normal(rng, g, stddev));
    });
    return;
  }
  float* p = x.f32();
  for_each_global_index(placement, extents_of(x.shape), [&](std::int64_t l, std::int64_t g) {
    p[l] = rng::init_normal(rng, g, stddev);
  });
}

namespace {
// The largest element offset a box touches; strides must be non-negative.
std::int64_t last_offset(const StridedBox& box, const Index& extents, std::string_view which) {
  CARTO_CHECK(box.strides.size() == extents.size(), "copy_strided: the ", which, " box has ",
              box.strides.size(), " strides for ", extents.size(), " extents");
  std::int64_t last = box.offset;
  for (std::size_t d = 0; d < extents.size(); ++d) {
    CARTO_CHECK(box.strides[d] >= 0 && extents[d] >= 0, "copy_strided: negative stride or extent");
    if (extents[d] == 0) return -1;
    last += (extents[d] - 1) * box.strides[d];
  }
  return last;
}
}  // namespace

namespace {

CARTO_VECTOR_INLINE float load_element(const float* p, std::int64_t i) { return p[i]; }
CARTO_VECTOR_INLINE float load_element(const Bf16* p, std::int64_t i) { return to_float(p[i]); }
CARTO_VECTOR_INLINE void store_element(float* p, std::int64_t i, float v) { p[i] = v; }
CARTO_VECTOR_INLINE void store_element(Bf16* p, std::int64_t i, float v) { p[i] = to_bf16(v); }

// One row of a strided copy: n elements, source stride si, destination stride ti. A copy between
// equal dtypes moves the bits (a bf16 copy is exact, NaN payloads included); a converting one
// loads to fp32 and stores in the destination's dtype; accumulate adds in fp32 and rounds once.
template <class S, class D>
void copy_row(const S* s, std::int64_t si, D* t, std::int64_t ti, std::int64_t n, CopyMode mode) {
  constexpr bool same = std::is_same_v<S, D>;
  if (mode == CopyMode::assign) {
    if constexpr (same) {
      if (si == 1 && ti == 1) {
        std::memcpy(t, s, static_cast<std::size_t>(n) * sizeof(S));
      } else {
        for (std::int64_t j = 0; j < n; ++j) t[j * ti] = s[j * si];
      }
    } else if (si == 1 && ti == 1) {
#pragma omp simd
      for (std::int64_t j = 0; j < n; ++j) store_element(t, j, load_element(s, j));
    } else {
      for (std::int64_t j = 0; j < n; ++j) store_element(t, j * ti, load_element(s, j * si));
    }
  } else if (si == 1 && ti == 1) {
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) {
      store_element(t, j, load_element(t, j) + load_element(s, j));
    }
  } else {
    for (std::int64_t j = 0; j < n; ++j) {
      store_element(t, j * ti, load_element(t, j * ti) + load_element(s, j * si));
    }
  }
}

// The box with its unit extents dropped and each dim merged into the next when both boxes step
// over it contiguously (stride = next extent · next stride): a copy of whole rows becomes one
// long run, which copy_row moves with memcpy when the runs are contiguous.
struct MergedBox {
  Index extents, from, to;
};
MergedBox merge_dims(const StridedBox& from, const StridedBox& to, const Index& extents) {
  MergedBox m;
  for (std::size_t d = 0; d < extents.size(); ++d) {
    if (extents[d] == 1) continue;
    if (!m.extents.empty()) {
      const std::size_t last = m.extents.size() - 1;
      if (m.from[last] == extents[d] * from.strides[d] &&
          m.to[last] == extents[d] * to.strides[d]) {
        m.extents[last] *= extents[d];
        m.from[last] = from.strides[d];
        m.to[last] = to.strides[d];
        continue;
      }
    }
    m.extents.push_back(extents[d]);
    m.from.push_back(from.strides[d]);
    m.to.push_back(to.strides[d]);
  }
  return m;
}

// The rows (runs of the innermost merged dim) of the box, split over `threads` (parallel.hpp):
// each range of rows starts from its own odometer position.
template <class S, class D>
void copy_box_typed(const S* s, const StridedBox& from, D* t, const StridedBox& to,
                    const Index& extents, CopyMode mode, int threads) {
  const MergedBox m = merge_dims(from, to, extents);
  const std::size_t rank = m.extents.size();
  if (rank == 0) {
    copy_row(s + from.offset, 1, t + to.offset, 1, 1, mode);
    return;
  }
  const std::int64_t inner = m.extents[rank - 1];
  const std::int64_t si = m.from[rank - 1], ti = m.to[rank - 1];
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < rank; ++d) rows *= m.extents[d];
  detail::parallel_ranges(
      threads, rows, detail::row_grain(inner), [&](std::int64_t first, std::int64_t end) {
        Index coord = m.extents;  // overwritten below
        for (std::int64_t r = first, d = static_cast<std::int64_t>(rank) - 1; d-- > 0;) {
          coord[static_cast<std::size_t>(d)] = r % m.extents[static_cast<std::size_t>(d)];
          r /= m.extents[static_cast<std::size_t>(d)];
        }
        for (std::int64_t r = first; r < end; ++r) {
          std::int64_t so = from.offset, to_ = to.offset;
          for (std::size_t d = 0; d + 1 < rank; ++d) {
            so += coord[d] * m.from[d];
            to_ += coord[d] * m.to[d];
          }
          copy_row(s + so, si, t + to_, ti, inner, mode);
          for (std::size_t d = rank - 1; d-- > 0;) {  // odometer
            if (++coord[d] < m.extents[d]) break;
            coord[d] = 0;
          }
        }
      });
}

}  // namespace

void CpuBackend::copy_strided(ConstTensorView src, const StridedBox& from, TensorView dst,
                              const StridedBox& to, const Index& extents, CopyMode mode) {
  detail::require_storable("copy_strided", "the source", src.dtype());
  detail::require_storable("copy_strided", "the destination", dst.dtype);
  const std::int64_t src_last = last_offset(from, extents, "source");
  const std::int64_t dst_last = last_offset(to, extents, "destination");
  if (src_last < 0) return;  // an empty box
  CARTO_CHECK(from.offset >= 0 && src_last < src.numel(), "copy_strided: the source box reaches ",
              "element ", src_last, " of a tensor ", src.shape());
  CARTO_CHECK(to.offset >= 0 && dst_last < dst.numel(), "copy_strided: the destination box ",
              "reaches element ", dst_last, " of a tensor ", dst.shape);
  const bool src_bf16 = src.dtype() == DType::bf16, dst_bf16 = dst.dtype == DType::bf16;
  const auto* s32 = static_cast<const float*>(src.data());
  const auto* s16 = static_cast<const Bf16*>(src.data());
  auto* t32 = static_cast<float*>(dst.data);
  auto* t16 = static_cast<Bf16*>(dst.data);
  if (!src_bf16 && !dst_bf16) {
    copy_box_typed(s32, from, t32, to, extents, mode, threads());
  } else if (!src_bf16) {
    copy_box_typed(s32, from, t16, to, extents, mode, threads());
  } else if (!dst_bf16) {
    copy_box_typed(s16, from, t32, to, extents, mode, threads());
  } else {
    copy_box_typed(s16, from, t16, to, extents, mode, threads());
  }
}

// ---- GEMM
// ----------------------------------------------------------------------------------------

namespace {
struct MatrixDims {
  std::int64_t rows = 0, cols = 0, batch = 0;
};
MatrixDims matrix_dims(const TensorShape& s, std::string_view which) {
  CARTO_CHECK(s.rank() >= 2, "gemm: operand ", which, " needs rank >= 2; got ", s);
  const std::int64_t rows = s.dims()[s.rank() - 2].extent, cols = s.dims()[s.rank() - 1].extent;
  return {.rows = rows, .cols = cols, .batch = s.numel() / (rows * cols)};
}
int blas_int(std::int64_t v) {
  CARTO_CHECK(v <= INT_MAX, "gemm: extent ", v, " exceeds the BLAS integer range");
  return static_cast<int>(v);
}
}  // namespace

void CpuBackend::gemm(ConstTensorView a, ConstTensorView b, TensorView c, const GemmArgs& args) {
  const MatrixDims ad = matrix_dims(a.shape(), "a"), bd = matrix_dims(b.shape(), "b"),
                   cd = matrix_dims(c.shape, "c");
  const bool ta = args.a == Transpose::yes, tb = args.b == Transpose::yes;
  const std::int64_t m = cd.rows, n = cd.cols;
  const std::int64_t am = ta ? ad.cols : ad.rows, k = ta ? ad.rows : ad.cols;
  const std::int64_t bk = tb ? bd.cols : bd.rows, bn = tb ? bd.rows : bd.cols;
  CARTO_CHECK(am == m && bk == k && bn == n, "gemm: ", a.shape(),
              args.a == Transpose::yes ? "ᵀ" : "", " · ", b.shape(),
              args.b == Transpose::yes ? "ᵀ" : "", " does not give ", c.shape);
  CARTO_CHECK((ad.batch == cd.batch || ad.batch == 1) && (bd.batch == cd.batch || bd.batch == 1),
              "gemm: batches of a (", ad.batch, ") and b (", bd.batch, ") must equal c's (",
              cd.batch, ") or be 1");
  // bf16 in, fp32 accumulate: bf16 operands are widened (exactly) into fp32 scratch and the
  // product is OpenBLAS's sgemm, accumulating in fp32; a bf16 c is computed in fp32 scratch
  // (holding c's values when beta != 0) and rounded once.
  const Staging st(
      *this, "gemm",
      {{"a", a.dtype(), a.numel()}, {"b", b.dtype(), b.numel()}, {"c", c.dtype, c.numel()}});
  const float* pa = st.read(0, a, 0, a.numel());
  const float* pb = st.read(1, b, 0, b.numel());
  float* pc = st.write(2, c, 0, c.numel(), args.beta != 0.0f ? Load::yes : Load::no);
  const CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  const int lda = blas_int(ad.cols), ldb = blas_int(bd.cols), ldc = blas_int(n);
  if (cd.batch > 1 && ad.batch == cd.batch && bd.batch == 1 && !ta) {
    // (batch·m, k) rows of a are contiguous, as are c's: one GEMM for the whole batch.
    cblas_sgemm(CblasRowMajor, opa, opb, blas_int(cd.batch * m), blas_int(n), blas_int(k),
                args.alpha, pa, lda, pb, ldb, args.beta, pc, ldc);
  } else {
    const std::int64_t a_step = ad.batch == 1 ? 0 : ad.rows * ad.cols;
    const std::int64_t b_step = bd.batch == 1 ? 0 : bd.rows * bd.cols;
    for (std::int64_t i = 0; i < cd.batch; ++i) {
      cblas_sgemm(CblasRowMajor, opa, opb, blas_int(m), blas_int(n), blas_int(k), args.alpha,
                  pa + i * a_step, lda, pb + i * b_step, ldb, args.beta, pc + i * m * n, ldc);
    }
  }
  st.commit(2, c, 0, c.numel());
}

// ---- elementwise
// ---------------------------------------------------------------------------------

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// 0.5·(1 + tanh(u)) = 1 / (1 + e^(-2u)): the same function with one exp and no cancellation of
// 1 + tanh(u) for x << 0. The exponent is capped at 80 (e^80 < FLT_MAX / 1e4), where the factor is
// below 2e-35 either way, so that 1 + e and the products below stay finite and normal.
struct GeluTerms {
  float e;      // e^(-2u)
  float sigma;  // 1 / (1 + e) = 0.5·(1 + tanh(u))
};
CARTO_VECTOR_INLINE GeluTerms gelu_terms(float v) {
  const float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
  const float e = detail::exp_approx(std::min(-2.0f * u, 80.0f));
  return {.e = e, .sigma = 1.0f / (1.0f + e)};
}

// y = x·σ(2u) over n elements (y may be x).
CARTO_VECTOR_CLONES void gelu_forward_loop(const float* px, float* py, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) py[i] = px[i] * gelu_terms(px[i]).sigma;
}

// dx (=, +=) dy · d/dx x·σ(2u) = dy · (σ + 2x·σ·(1 - σ)·du/dx), with 1 - σ = e·σ (exact for σ
// near 1) and 0.5·(1 - tanh²u) = 2σ(1 - σ).
template <bool Accumulate>
CARTO_VECTOR_INLINE void gelu_backward_body(const float* px, const float* pdy, float* pdx,
                                            std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = px[i];
    const GeluTerms t = gelu_terms(v);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    detail::store<Accumulate>(pdx[i],
                              pdy[i] * (t.sigma + 2.0f * v * t.sigma * (t.e * t.sigma) * du));
  }
}
CARTO_VECTOR_CLONES void gelu_backward_loop(const float* px, const float* pdy, float* pdx,
                                            std::int64_t n, bool accumulate) {
  if (accumulate) {
    gelu_backward_body<true>(px, pdy, pdx, n);
  } else {
    gelu_backward_body<false>(px, pdy, pdx, n);
  }
}

}  // namespace

void CpuBackend::gelu_forward(ConstTensorView x, TensorView y) {
  require_numel("gelu_forward", "y", y.numel(), x.numel());
  const std::int64_t block = detail::stage_block(x.numel());
  const Staging st(*this, "gelu_forward", {{"x", x.dtype(), block}, {"y", y.dtype, block}});
  st.for_blocks_parallel(
      x.numel(), block, detail::kParallelGrain, [&](std::int64_t at, std::int64_t n) {
        gelu_forward_loop(st.read(0, x, at, n), st.write(1, y, at, n, Load::no), n);
        st.commit(1, y, at, n);
      });
}

void CpuBackend::gelu_backward(ConstTensorView x, ConstTensorView dy, TensorView dx,
                               CopyMode mode) {
  require_numel("gelu_backward", "dy", dy.numel(), x.numel());
  require_numel("gelu_backward", "dx", dx.numel(), x.numel());
  const std::int64_t block = detail::stage_block(x.numel());
  const Staging st(*this, "gelu_backward",
                   {{"x", x.dtype(), block}, {"dy", dy.dtype(), block}, {"dx", dx.dtype, block}});
  const bool acc = mode == CopyMode::accumulate;
  st.for_blocks_parallel(
      x.numel(), block, detail::kParallelGrain, [&](std::int64_t at, std::int64_t n) {
        gelu_backward_loop(st.read(0, x, at, n), st.read(1, dy, at, n),
                           st.write(2, dx, at, n, acc ? Load::yes : Load::no), n, acc);
        st.commit(2, dx, at, n);
      });
}

void CpuBackend::add(ConstTensorView a, ConstTensorView b, TensorView y) {
  require_numel("add", "b", b.numel(), a.numel());
  require_numel("add", "y", y.numel(), a.numel());
  const std::int64_t block = detail::stage_block(a.numel());
  const Staging st(*this, "add",
                   {{"a", a.dtype(), block}, {"b", b.dtype(), block}, {"y", y.dtype, block}});
  st.for_blocks_parallel(a.numel(), block, detail::kParallelGrain,
                         [&](std::int64_t at, std::int64_t n) {
                           const float* pa = st.read(0, a, at, n);
                           const float* pb = st.read(1, b, at, n);
                           float* py = st.write(2, y, at, n, Load::no);
#pragma omp simd
                           for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i] + pb[i];
                           st.commit(2, y, at, n);
                         });
}

void CpuBackend::scale(ConstTensorView x, float factor, TensorView y) {
  require_numel("scale", "y", y.numel(), x.numel());
  const std::int64_t block = detail::stage_block(x.numel());
  const Staging st(*this, "scale", {{"x", x.dtype(), block}, {"y", y.dtype, block}});
  st.for_blocks_parallel(x.numel(), block, detail::kParallelGrain,
                         [&](std::int64_t at, std::int64_t n) {
                           const float* px = st.read(0, x, at, n);
                           float* py = st.write(1, y, at, n, Load::no);
#pragma omp simd
                           for (std::int64_t i = 0; i < n; ++i) py[i] = factor * px[i];
                           st.commit(1, y, at, n);
                         });
}

void CpuBackend::add_scaled(ConstTensorView x, float factor, TensorView y) {
  require_numel("add_scaled", "y", y.numel(), x.numel());
  const std::int64_t block = detail::stage_block(x.numel());
  const Staging st(*this, "add_scaled", {{"x", x.dtype(), block}, {"y", y.dtype, block}});
  st.for_blocks_parallel(x.numel(), block, detail::kParallelGrain,
                         [&](std::int64_t at, std::int64_t n) {
                           const float* px = st.read(0, x, at, n);
                           float* py = st.write(1, y, at, n, Load::yes);
#pragma omp simd
                           for (std::int64_t i = 0; i < n; ++i) py[i] += factor * px[i];
                           st.commit(1, y, at, n);
                         });
}

namespace {
// The element count of b after checking that b's dims are the trailing dims of x.
std::int64_t bias_width(std::string_view call, const TensorShape& x, const TensorShape& b) {
  bool ok = b.rank() <= x.rank();
  for (std::size_t i = 0; ok && i < b.rank(); ++i) {
    ok = b.dims()[i].extent == x.dims()[x.rank() - b.rank() + i].extent;
  }
  CARTO_CHECK(ok, call, ": bias ", b, " must match the trailing dims of ", x);
  return b.numel();
}
}  // namespace

void CpuBackend::bias_forward(ConstTensorView x, ConstTensorView b, TensorView y) {
  const std::int64_t w = bias_width("bias_forward", x.shape(), b.shape());
  require_numel("bias_forward", "y", y.numel(), x.numel());
  const std::int64_t rows = x.numel() / w, step = detail::rows_per_block(w, rows);
  const Staging st(*this, "bias_forward",
                   {{"b", b.dtype(), w}, {"x", x.dtype(), step * w}, {"y", y.dtype, step * w}});
  const float* pb = st.read(0, b, 0, w);
  st.for_blocks_parallel(rows, step, detail::row_grain(w), [&](std::int64_t r0, std::int64_t nr) {
    const float* px = st.read(1, x, r0 * w, nr * w);
    float* py = st.write(2, y, r0 * w, nr * w, Load::no);
    for (std::int64_t r = 0; r < nr; ++r) {
      const float* xr = px + r * w;
      float* yr = py + r * w;
#pragma omp simd
      for (std::int64_t j = 0; j < w; ++j) yr[j] = xr[j] + pb[j];
    }
    st.commit(2, y, r0 * w, nr * w);
  });
}

// db's fp32 values stay in one slot over all rows (from 0 when assigned) and are rounded once at
// the end.
void CpuBackend::bias_backward(ConstTensorView dy, TensorView db, CopyMode mode) {
  const std::int64_t w = bias_width("bias_backward", dy.shape(), db.shape);
  const std::int64_t rows = dy.numel() / w, step = detail::rows_per_block(w, rows);
  const Staging st(*this, "bias_backward", {{"db", db.dtype, w}, {"dy", dy.dtype(), step * w}});
  float* pdb = st.write(0, db, 0, w, mode == CopyMode::accumulate ? Load::yes : Load::no);
  if (mode == CopyMode::assign) std::fill(pdb, pdb + w, 0.0f);
  st.for_blocks(rows, step, [&](std::int64_t r0, std::int64_t nr) {
    const float* pdy = st.read(1, dy, r0 * w, nr * w);
    for (std::int64_t r = 0; r < nr; ++r) {
      const float* dyr = pdy + r * w;
#pragma omp simd
      for (std::int64_t j = 0; j < w; ++j) pdb[j] += dyr[j];
    }
  });
  st.commit(0, db, 0, w);
}

}  // namespace carto::cpu
