// Helpers shared by the kernel tests: device tensors of fp32 or bf16 moved through the Backend
// interface (so one test body serves every backend and dtype), random inputs from the
// counter-based RNG rounded to the dtype under test, central finite differences in double, the
// tolerances of each dtype with their derivation, and the one closeness check with its report.
//
// The backend under test: every generic test body calls test_backend(). Each test executable
// links one provider that defines it (tests/kernels/cpu_provider.cpp: a CpuBackend; a CUDA test
// executable compiles the same generic sources with its own provider), so the test sources name
// no backend. Tests that need one backend's own type live apart (test_cpu_only.cpp).
#pragma once

#include <carto/runtime/backend.hpp>
#include <carto/runtime/bf16.hpp>
#include <carto/runtime/rng.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace carto::test {

// The backend every generic kernel test runs on, constructed once per executable (the provider).
Backend& test_backend();
// Its name for messages ("cpu", "cuda").
std::string_view test_backend_name();

// The storage dtypes every generic test runs for: `const DType dtype = CARTO_TEST_DTYPES();`
// makes Catch2 run the test case once per dtype.
#define CARTO_TEST_DTYPES() GENERATE(::carto::DType::fp32, ::carto::DType::bf16)

// Every gradient output of a layernorm backward added into (the tests start them from zeros or
// from values of their own).
inline constexpr NormGradModes kAccumulateAll{
    .dx = CopyMode::accumulate, .dgamma = CopyMode::accumulate, .dbeta = CopyMode::accumulate};

// fp32 unit roundoff: a correctly rounded fp32 operation has relative error at most 2^-24.
inline constexpr double kUnit = 0x1.0p-24;

// |x - ref| <= atol + rtol · |ref| element by element.
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
};

// The tolerance of an fp32 result computed through at most `chain` dependent roundings (a sum of k
// terms: k + 1, counting the product), over outputs whose largest magnitude is `scale`. Each
// rounding contributes at most u times the magnitude of the partial result (Higham, Accuracy and
// Stability of Numerical Algorithms, §3.1: |fl(Σ) - Σ| <= γ_k Σ|terms|); inputs are N(0, 1), so
// partial results are of the order of the largest output, which bounds Σ|terms| up to a small
// factor. The factor 4 covers that ratio and the elementary functions: libm's log (within 2 ulp on
// glibc) and the kernels' vectorized exp (within 2 ulp, tested below them). atol keeps elements
// that cancel to near zero from failing on a relative test they cannot meet.
inline Tolerance fp32_chain(std::int64_t chain, double scale) {
  const double e = 4.0 * static_cast<double>(chain) * kUnit;
  return {.atol = e * scale, .rtol = e};
}

// The tolerance of a result stored in bf16 after the same fp32 chain. Derivation: the kernel reads
// its bf16 inputs exactly (widening appends zero bits) and the tests round their inputs to bf16
// before the double reference sees them, so the reference computes on exactly what the kernel
// read and the kernel's fp32 arithmetic keeps the bound of fp32_chain: |y - ref| <= E with
// E = atol + rtol·|ref|. The store rounds y to nearest: |fl(y) - y| <= u·|y| <= u·(|ref| + E)
// with u = 2^-8 (kBf16Unit), so the stored result is within E·(1 + u) + u·|ref| of ref: rtol
// grows by u, and both terms by the factor 1 + u. A bf16-rounded intermediate — one the kernel
// stores in bf16 before computing on (a probability matrix fed to a bf16 GEMM), or a bf16 output
// of one kernel that the test feeds to the next (softmax's y into its backward) — is off by u of
// its own magnitude; carried through the rest of the computation it moves the result by at most u
// times the Σ|terms| it enters, which fp32_chain's factor 4 relates to the output scale. Each such
// intermediate therefore counts like one rounding of a chain with unit u instead of 2^-24:
// 4·u·scale on atol and 4·u on rtol.
inline Tolerance bf16_chain(std::int64_t chain, double scale, std::int64_t intermediates = 0) {
  const Tolerance t = fp32_chain(chain, scale);
  const double e = 4.0 * static_cast<double>(intermediates) * kBf16Unit;
  return {.atol = t.atol * (1.0 + kBf16Unit) + e * scale,
          .rtol = t.rtol * (1.0 + kBf16Unit) + kBf16Unit + e};
}

// The tolerance of an output stored in `dtype` (fp32_chain or bf16_chain). `intermediates` counts
// the bf16-rounded intermediates (none in fp32, where every rounding is within `chain`).
inline Tolerance tolerance(DType dtype, std::int64_t chain, double scale,
                           std::int64_t intermediates = 0) {
  return dtype == DType::bf16 ? bf16_chain(chain, scale, intermediates) : fp32_chain(chain, scale);
}

struct CloseReport {
  std::int64_t count = 0;
  std::int64_t failures = 0;
  double worst_ratio = 0.0;  // max |x - ref| / (atol + rtol·|ref|); <= 1 passes
  std::int64_t worst_index = -1;
};

inline CloseReport compare(const std::vector<float>& got, const std::vector<double>& ref,
                           Tolerance tol) {
  CloseReport r;
  r.count = static_cast<std::int64_t>(ref.size());
  if (got.size() != ref.size()) {
    r.failures = r.count;
    r.worst_ratio = INFINITY;
    return r;
  }
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double bound = tol.atol + tol.rtol * std::fabs(ref[i]);
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double ratio = bound > 0 ? err / bound : (err == 0 ? 0.0 : INFINITY);
    if (!(ratio <= 1.0)) ++r.failures;
    if (!(ratio <= r.worst_ratio)) {
      r.worst_ratio = ratio;
      r.worst_index = static_cast<std::int64_t>(i);
    }
  }
  return r;
}

inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// The one closeness check: prints the worst ratio and the failure count, fails on any failure.
#define CARTO_CHECK_CLOSE(what, got, ref, tol)                                                    \
  do {                                                                                            \
    const ::carto::test::CloseReport report_ = ::carto::test::compare((got), (ref), (tol));       \
    INFO(what << ": " << report_.failures << " of " << report_.count                              \
              << " outside |x - ref| <= " << (tol).atol << " + " << (tol).rtol                    \
              << "·|ref|; worst ratio " << report_.worst_ratio << " at " << report_.worst_index); \
    CHECK(report_.failures == 0);                                                                 \
  } while (false)

// ---- inputs -------------------------------------------------------------------------------------

// n values from N(0, stddev²), never all zero, from the counter-based RNG (stream `object`).
inline std::vector<float> random_normal(std::int64_t n, std::uint32_t object, float stddev = 1.0f) {
  const RngStream s{.seed = 1234, .id = stream_id(RngPurpose::test, object, 0)};
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = stddev * rng::normal(s, i);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// The values as a tensor of `dtype` holds them: fp32 unchanged, bf16 rounded to nearest even.
inline std::vector<float> rounded(DType dtype, std::vector<float> v) {
  if (dtype == DType::bf16) {
    for (float& x : v) x = round_to_bf16(x);
  }
  return v;
}
inline float rounded(DType dtype, float v) { return dtype == DType::bf16 ? round_to_bf16(v) : v; }

// random_normal rounded to `dtype`: the inputs of a test in that dtype, exactly what the kernel
// reads (never all zero: N(0, stddev²) draws are almost never below bf16's smallest normal).
inline std::vector<float> random_input(std::int64_t n, std::uint32_t object, DType dtype,
                                       float stddev = 1.0f) {
  std::vector<float> v = rounded(dtype, random_normal(n, object, stddev));
  bool nonzero = false;
  for (const float x : v) nonzero = nonzero || x != 0.0f;
  REQUIRE(nonzero);
  return v;
}

// ---- device tensors -----------------------------------------------------------------------------

// A tensor of fp32 or bf16 allocated by a backend, filled from and read back to host vectors of
// float (bf16 is converted on the host: upload rounds to nearest even, download widens exactly).
class DeviceTensor {
 public:
  DeviceTensor(Backend& backend, const TensorShape& shape, DType dtype = DType::fp32,
               MemoryCategory category = MemoryCategory::activations)
      : backend_(&backend),
        buffer_(backend.allocate(shape, dtype, category)),
        view_(buffer_.view(shape, dtype)) {}
  DeviceTensor(Backend& backend, const TensorShape& shape, const std::vector<float>& values,
               DType dtype = DType::fp32)
      : DeviceTensor(backend, shape, dtype) {
    upload(values);
  }
  void upload(const std::vector<float>& values) {
    REQUIRE(static_cast<std::int64_t>(values.size()) == view_.numel());
    if (view_.dtype == DType::bf16) {
      std::vector<Bf16> bits(values.size());
      for (std::size_t i = 0; i < values.size(); ++i) bits[i] = to_bf16(values[i]);
      backend_->copy_from_host(bits.data(), view_);
    } else {
      backend_->copy_from_host(values.data(), view_);
    }
  }
  [[nodiscard]] std::vector<float> download() const {
    std::vector<float> out(static_cast<std::size_t>(view_.numel()));
    backend_->synchronize();
    if (view_.dtype == DType::bf16) {
      std::vector<Bf16> bits(out.size());
      backend_->copy_to_host(view_, bits.data());
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = to_float(bits[i]);
    } else {
      backend_->copy_to_host(view_, out.data());
    }
    return out;
  }
  [[nodiscard]] const TensorView& view() const { return view_; }
  [[nodiscard]] DType dtype() const { return view_.dtype; }
  operator TensorView() const { return view_; }       // NOLINT(google-explicit-constructor)
  operator ConstTensorView() const { return view_; }  // NOLINT(google-explicit-constructor)

 private:
  Backend* backend_;
  Buffer buffer_;
  TensorView view_;
};

// A gradient buffer that starts at zero (backward kernels accumulate).
inline DeviceTensor zeros(Backend& backend, const TensorShape& shape, DType dtype = DType::fp32) {
  DeviceTensor t(backend, shape, dtype, MemoryCategory::temporaries);
  backend.fill(t, 0.0f);
  return t;
}

// Token ids in device memory.
class DeviceIds {
 public:
  DeviceIds(Backend& backend, const TensorShape& shape, const std::vector<std::int32_t>& ids)
      : buffer_(backend.allocator(), ids.size() * sizeof(std::int32_t),
                MemoryCategory::activations),
        view_{.data = static_cast<const std::int32_t*>(buffer_.data()), .shape = shape} {
    REQUIRE(static_cast<std::int64_t>(ids.size()) == shape.numel());
    // Raw bytes: the int32 ids travel as a one-dimensional fp32-sized tensor of the same bytes.
    backend.copy_from_host(
        ids.data(),
        {.data = buffer_.data(), .shape = {{"ids", shape.numel()}}, .dtype = DType::fp32});
  }
  [[nodiscard]] IndexView view() const { return view_; }
  operator IndexView() const { return view_; }  // NOLINT(google-explicit-constructor)

 private:
  Buffer buffer_;
  IndexView view_;
};

// ---- finite differences -------------------------------------------------------------------------

// d objective / d x by central differences in double. With h = 1e-5 the truncation error is
// h² f'''/6 ~ 1e-11 and the rounding error ~ 1e-16 |objective| / h ~ 1e-9 for the objectives here
// (|objective| < 1e2): both far below the fp32 tolerances the kernels are held to (> 1e-6).
template <class Objective>
std::vector<double> central_difference(std::vector<double> x, Objective&& objective,
                                       double h = 1e-5) {
  std::vector<double> grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = objective(x);
    x[i] = keep - h;
    const double down = objective(x);
    x[i] = keep;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

inline double weighted_sum(const std::vector<double>& y, const std::vector<float>& weights) {
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * weights[i];
  return s;
}

}  // namespace carto::test
