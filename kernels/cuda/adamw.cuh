// cuda/adamw.cuh — the AdamW step of the CUDA backend (Backend::adamw_update).
//
// Design note: param, m and v are fp32 (the master weights and the moments), grad fp32 or bf16
// (the contract in backend.hpp). The update is the CPU backend's expression, operation for
// operation: the bias corrections 1 - β^t computed in double on the host and rounded to float,
// then per element m = β1·m + (1-β1)·g, v = β2·v + (1-β2)·g·g, p -= lr·(m̂/(√v̂ + ε) + wd·p)
// with IEEE division and square root (nvcc's defaults) and adamw.cu compiled with --fmad=false,
// so that no multiply-add is fused: the same steps on the same inputs give the CPU's bits.
#pragma once

#include "cuda/launch.cuh"

namespace carto::cuda {

void adamw_update(const Launch& launch, TensorView param, ConstTensorView grad, TensorView m,
                  TensorView v, const AdamWArgs& args);

}  // namespace carto::cuda
