// The CPU backend's memory, copies, GEMM, elementwise kernels and AdamW.
#include "cpu_backend.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <mutex>
#include <new>

#include "kernel_checks.hpp"
#include "vector_math.hpp"

namespace carto::cpu {

using detail::extents_of;
using detail::require_numel;
using detail::require_same_shape;

// ---- memory and queue
// ----------------------------------------------------------------------------

namespace {
constexpr std::align_val_t kAlignment{64};
}

void* HostAllocator::allocate(std::size_t bytes, MemoryCategory /*category*/) {
  if (bytes == 0) return nullptr;
  void* p = ::operator new(bytes, kAlignment, std::nothrow);
  if (p == nullptr)
    carto::detail::fail("carto::cpu: out of host memory allocating ", bytes, " bytes");
  return p;
}

void HostAllocator::deallocate(void* pointer, std::size_t /*bytes*/,
                               MemoryCategory /*category*/) noexcept {
  ::operator delete(pointer, kAlignment);
}

CpuBackend::CpuBackend() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

int blas_threads() { return openblas_get_num_threads(); }

void CpuBackend::copy_from_host(const void* host, TensorView dst) {
  std::memcpy(dst.data, host, static_cast<std::size_t>(dst.bytes()));
}

void CpuBackend::copy_to_host(ConstTensorView src, void* host) {
  std::memcpy(host, src.data(), static_cast<std::size_t>(src.bytes()));
}

// ---- fills and copies
// ----------------------------------------------------------------------------

void CpuBackend::fill(TensorView x, float value) {
  float* p = x.f32();
  std::fill(p, p + x.numel(), value);
}

void CpuBackend::fill_normal(TensorView x, float stddev, RngStream rng,
                             const ShardPlacement& placement) {
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

void CpuBackend::copy_strided(ConstTensorView src, const StridedBox& from, TensorView dst,
                              const StridedBox& to, const Index& extents, CopyMode mode) {
  const std::int64_t src_last = last_offset(from, extents, "source");
  const std::int64_t dst_last = last_offset(to, extents, "destination");
  if (src_last < 0) return;  // an empty box
  CARTO_CHECK(from.offset >= 0 && src_last < src.numel(), "copy_strided: the source box reaches ",
              "element ", src_last, " of a tensor ", src.shape());
  CARTO_CHECK(to.offset >= 0 && dst_last < dst.numel(), "copy_strided: the destination box ",
              "reaches element ", dst_last, " of a tensor ", dst.shape);
  const float* s = src.f32();
  float* t = dst.f32();
  const std::size_t rank = extents.size();
  if (rank == 0) {
    t[to.offset] = mode == CopyMode::assign ? s[from.offset] : t[to.offset] + s[from.offset];
    return;
  }
  const std::int64_t inner = extents[rank - 1];
  const std::int64_t si = from.strides[rank - 1], ti = to.strides[rank - 1];
  Index coord = extents;
  for (std::int64_t& c : coord) c = 0;
  while (true) {
    std::int64_t so = from.offset, to_ = to.offset;
    for (std::size_t d = 0; d + 1 < rank; ++d) {
      so += coord[d] * from.strides[d];
      to_ += coord[d] * to.strides[d];
    }
    if (mode == CopyMode::assign) {
      if (si == 1 && ti == 1) {
        std::memcpy(t + to_, s + so, static_cast<std::size_t>(inner) * sizeof(float));
      } else {
        for (std::int64_t j = 0; j < inner; ++j) t[to_ + j * ti] = s[so + j * si];
      }
    } else if (si == 1 && ti == 1) {
      float* dst_row = t + to_;
      const float* src_row = s + so;
#pragma omp simd
      for (std::int64_t j = 0; j < inner; ++j) dst_row[j] += src_row[j];
    } else {
      for (std::int64_t j = 0; j < inner; ++j) t[to_ + j * ti] += s[so + j * si];
    }
    std::size_t d = rank - 1;
    while (d-- > 0) {  // odometer over the outer dims
      if (++coord[d] < extents[d]) break;
      coord[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) return;
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
  const float* pa = a.f32();
  const float* pb = b.f32();
  float* pc = c.f32();
  const CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  const int lda = blas_int(ad.cols), ldb = blas_int(bd.cols), ldc = blas_int(n);
  if (cd.batch > 1 && ad.batch == cd.batch && bd.batch == 1 && !ta) {
    // (batch·m, k) rows of a are contiguous, as are c's: one GEMM for the whole batch.
    cblas_sgemm(CblasRowMajor, opa, opb, blas_int(cd.batch * m), blas_int(n), blas_int(k),
                args.alpha, pa, lda, pb, ldb, args.beta, pc, ldc);
    return;
  }
  const std::int64_t a_step = ad.batch == 1 ? 0 : ad.rows * ad.cols;
  const std::int64_t b_step = bd.batch == 1 ? 0 : bd.rows * bd.cols;
  for (std::int64_t i = 0; i < cd.batch; ++i) {
    cblas_sgemm(CblasRowMajor, opa, opb, blas_int(m), blas_int(n), blas_int(k), args.alpha,
                pa + i * a_step, lda, pb + i * b_step, ldb, args.beta, pc + i * m * n, ldc);
  }
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

// dx += dy · d/dx x·σ(2u) = dy · (σ + 2x·σ·(1 - σ)·du/dx), with 1 - σ = e·σ (exact for σ near 1)
// and 0.5·(1 - tanh²u) = 2σ(1 - σ).
CARTO_VECTOR_CLONES void gelu_backward_loop(const float* px, const float* pdy, float* pdx,
                                            std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = px[i];
    const GeluTerms t = gelu_terms(v);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    pdx[i] += pdy[i] * (t.sigma + 2.0f * v * t.sigma * (t.e * t.sigma) * du);
  }
}

}  // namespace

void CpuBackend::gelu_forward(ConstTensorView x, TensorView y) {
  require_numel("gelu_forward", "y", y.numel(), x.numel());
  gelu_forward_loop(x.f32(), y.f32(), x.numel());
}

void CpuBackend::gelu_backward(ConstTensorView x, ConstTensorView dy, TensorView dx) {
  require_numel("gelu_backward", "dy", dy.numel(), x.numel());
  require_numel("gelu_backward", "dx", dx.numel(), x.numel());
  gelu_backward_loop(x.f32(), dy.f32(), dx.f32(), x.numel());
}

void CpuBackend::add(ConstTensorView a, ConstTensorView b, TensorView y) {
  require_numel("add", "b", b.numel(), a.numel());
  require_numel("add", "y", y.numel(), a.numel());
  const float* pa = a.f32();
  const float* pb = b.f32();
  float* py = y.f32();
  const std::int64_t n = a.numel();
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i] + pb[i];
}

void CpuBackend::scale(ConstTensorView x, float factor, TensorView y) {
  require_numel("scale", "y", y.numel(), x.numel());
  const float* px = x.f32();
  float* py = y.f32();
  const std::int64_t n = x.numel();
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) py[i] = factor * px[i];
}

void CpuBackend::add_scaled(ConstTensorView x, float factor, TensorView y) {
  require_numel("add_scaled", "y", y.numel(), x.numel());
  const float* px = x.f32();
  float* py = y.f32();
  const std::int64_t n = x.numel();
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) py[i] += factor * px[i];
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
  const float* px = x.f32();
  const float* pb = b.f32();
  float* py = y.f32();
  for (std::int64_t r = 0; r < x.numel() / w; ++r) {
    const float* xr = px + r * w;
    float* yr = py + r * w;
#pragma omp simd
    for (std::int64_t j = 0; j < w; ++j) yr[j] = xr[j] + pb[j];
  }
}

void CpuBackend::bias_backward(ConstTensorView dy, TensorView db) {
  const std::int64_t w = bias_width("bias_backward", dy.shape(), db.shape);
  const float* pdy = dy.f32();
  float* pdb = db.f32();
  for (std::int64_t r = 0; r < dy.numel() / w; ++r) {
    const float* dyr = pdy + r * w;
#pragma omp simd
    for (std::int64_t j = 0; j < w; ++j) pdb[j] += dyr[j];
  }
}

// ---- AdamW
// ---------------------------------------------------------------------------------------

void CpuBackend::adamw_update(TensorView param, ConstTensorView grad, TensorView m, TensorView v,
                              const AdamWArgs& args) {
  require_same_shape("adamw_update", param.shape, grad.shape());
  require_same_shape("adamw_update", param.shape, m.shape);
  require_same_shape("adamw_update", param.shape, v.shape);
  CARTO_CHECK(args.step >= 1, "adamw_update: the step t counts from 1; got ", args.step);
  const double t = static_cast<double>(args.step);
  const auto correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta1), t));
  const auto correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta2), t));
  float* p = param.f32();
  const float* g = grad.f32();
  float* pm = m.f32();
  float* pv = v.f32();
  const float b1 = args.beta1, b2 = args.beta2, lr = args.learning_rate, eps = args.epsilon,
              wd = args.weight_decay;
  const std::int64_t n = param.numel();
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    pm[i] = b1 * pm[i] + (1.0f - b1) * g[i];
    pv[i] = b2 * pv[i] + (1.0f - b2) * g[i] * g[i];
    const float m_hat = pm[i] / correction1;
    const float v_hat = pv[i] / correction2;
    p[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + wd * p[i]);
  }
}

}  // namespace carto::cpu
