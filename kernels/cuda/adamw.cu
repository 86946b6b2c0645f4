// cuda/adamw.cu — AdamW (adamw.cuh). Compiled with --fmad=false (see there).
#include <cuda_runtime.h>

#include <cmath>
#include <string_view>

#include "cuda/adamw.cuh"

namespace carto::cuda {

namespace {

struct AdamWStep {
  float beta1, beta2, learning_rate, epsilon, weight_decay;
  float correction1, correction2;  // 1 - β1^t, 1 - β2^t
};

__global__ void adamw_kernel(float* param, Elements grad, float* m, float* v, AdamWStep s,
                             std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float g = load(grad, i);
    const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * g;
    const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / s.correction1;
    const float v_hat = vi / s.correction2;
    const float p = param[i];
    param[i] = p - s.learning_rate * (m_hat / (sqrtf(v_hat) + s.epsilon) + s.weight_decay * p);
  }
}

void require_fp32(std::string_view what, DType dtype) {
  CARTO_CHECK(dtype == DType::fp32, "adamw_update: ", what,
              " must be fp32 (master weights and moments are fp32); got ", to_string_view(dtype));
}

bool same_extents(const TensorShape& a, const TensorShape& b) {
  if (a.rank() != b.rank()) return false;
  for (std::size_t d = 0; d < a.rank(); ++d) {
    if (a.dims()[d].extent != b.dims()[d].extent) return false;
  }
  return true;
}

void require_same_shape(const TensorShape& a, const TensorShape& b) {
  CARTO_CHECK(same_extents(a, b), "adamw_update: shapes ", a, " and ", b, " differ");
}

}  // namespace

void adamw_update(const Launch& launch, TensorView param, ConstTensorView grad, TensorView m,
                  TensorView v, const AdamWArgs& args) {
  require_same_shape(param.shape, grad.shape());
  require_same_shape(param.shape, m.shape);
  require_same_shape(param.shape, v.shape);
  require_fp32("param", param.dtype);
  require_fp32("m", m.dtype);
  require_fp32("v", v.dtype);
  CARTO_CHECK(args.step >= 1, "adamw_update: the step t counts from 1; got ", args.step);
  const double t = static_cast<double>(args.step);
  const AdamWStep step{
      .beta1 = args.beta1,
      .beta2 = args.beta2,
      .learning_rate = args.learning_rate,
      .epsilon = args.epsilon,
      .weight_decay = args.weight_decay,
      .correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta1), t)),
      .correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(args.beta2), t))};
  const std::int64_t n = param.numel();
  if (n == 0) return;
  const Grid1d grid = grid_1d(n);
  adamw_kernel<<<grid.blocks, grid.threads, 0, launch.stream>>>(param.f32(), elements_of(grad),
                                                                m.f32(), v.f32(), step, n);
  CARTO_CUDA_CHECK_LAUNCH();
}

}  // namespace carto::cuda
