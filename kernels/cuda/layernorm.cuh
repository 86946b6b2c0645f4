// cuda/layernorm.cuh — layernorm over the last dim on the CUDA backend, whole rows and with the
// normalized dim split across devices.
//
// Design note: one host function per Backend method, with exactly Backend's parameters after the
// Launch (launch.cuh); semantics as backend.hpp states them and as kernels/cpu/normalization.cpp
// computes them. The kernels and their parallel decomposition are described in layernorm.cu.
#pragma once

#include <cstdint>

#include "cuda/launch.cuh"

namespace carto::cuda {

// x, y (rows..., C) fp32 or bf16; gamma, beta (C) fp32 or bf16; mean, rstd (rows...) fp32.
void layernorm_forward(const Launch& launch, ConstTensorView x, ConstTensorView gamma,
                       ConstTensorView beta, TensorView y, TensorView mean, TensorView rstd,
                       const LayerNormArgs& args);
// dx, dgamma, dbeta += the gradients.
void layernorm_backward(const Launch& launch, ConstTensorView dy, ConstTensorView x,
                        ConstTensorView gamma, ConstTensorView mean, ConstTensorView rstd,
                        TensorView dx, TensorView dgamma, TensorView dbeta);
// sums (rows..., 2) fp32 = (Σ x, Σ x²) over the local columns, accumulated in double.
void layernorm_partial_sums(const Launch& launch, ConstTensorView x, TensorView sums);
void layernorm_apply(const Launch& launch, ConstTensorView x, ConstTensorView sums,
                     std::int64_t global_columns, ConstTensorView gamma, ConstTensorView beta,
                     TensorView y, TensorView mean, TensorView rstd, const LayerNormArgs& args);
// sums (rows..., 2) fp32 = (Σ dy·γ, Σ dy·γ·x̂) over the local columns, accumulated in double.
void layernorm_backward_partial_sums(const Launch& launch, ConstTensorView dy, ConstTensorView x,
                                     ConstTensorView gamma, ConstTensorView mean,
                                     ConstTensorView rstd, TensorView sums);
void layernorm_backward_apply(const Launch& launch, ConstTensorView dy, ConstTensorView x,
                              ConstTensorView gamma, ConstTensorView mean, ConstTensorView rstd,
                              ConstTensorView sums, std::int64_t global_columns, TensorView dx,
                              TensorView dgamma, TensorView dbeta);

}  // namespace carto::cuda
