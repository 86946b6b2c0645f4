// cuda/softmax.cuh — the (scaled, causally masked) softmax over the last dim on the CUDA backend.
//
// Design note: one host function per Backend method, with exactly Backend's parameters after the
// Launch (launch.cuh); semantics as backend.hpp states them and as kernels/cpu/normalization.cpp
// computes them. The kernels are described in softmax.cu.
#pragma once

#include "cuda/launch.cuh"

namespace carto::cuda {

// x, y (..., Sq, Sk) fp32 or bf16; y may be x. Masked keys (causal, global positions from
// args.placement) get probability 0; a row with every key masked throws.
void softmax_forward(const Launch& launch, ConstTensorView x, TensorView y,
                     const SoftmaxArgs& args);
// dx += scale · y ∘ (dy - Σ_k dy ∘ y) over each row's visible keys.
void softmax_backward(const Launch& launch, ConstTensorView y, ConstTensorView dy, TensorView dx,
                      const SoftmaxArgs& args);

}  // namespace carto::cuda
