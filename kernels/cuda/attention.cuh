// cuda/attention.cuh — fused (flash-style) attention on the CUDA backend.
//
// Design note: one host function per Backend method, with exactly Backend's parameters after the
// Launch (launch.cuh); semantics as backend.hpp states them and as kernels/cpu/attention.cpp
// computes them: softmax(scale · q kᵀ, causally masked at the global positions of
// args.placement) with dropout on the probabilities (rng::keep at the probability's global
// index), times v; grouped-query attention with q of rank 5, query head (n, j) attending with
// key/value head n. No (Sq × Sk) matrix is ever stored; head dims 1..128 (tiling::kMaxHeadDim),
// larger ones throw. The kernels are described in attention.cu.
#pragma once

#include "cuda/launch.cuh"

namespace carto::cuda {

// q, out (B, a, Sq, d); k, v (B, a, Sk, d): fp32 or bf16; logsumexp (B, a, Sq) fp32. Grouped:
// q, out (B, n, g, Sq, d); k, v (B, n, Sk, d); logsumexp (B, n, g, Sq).
void attention_forward(const Launch& launch, ConstTensorView q, ConstTensorView k,
                       ConstTensorView v, TensorView out, TensorView logsumexp,
                       const AttentionArgs& args);
// Recomputes the probabilities (and the dropout mask) from q, k and logsumexp; dq, dk, dv += ...
// (dk, dv summed over the g query heads of a group).
void attention_backward(const Launch& launch, ConstTensorView q, ConstTensorView k,
                        ConstTensorView v, ConstTensorView out, ConstTensorView logsumexp,
                        ConstTensorView dout, TensorView dq, TensorView dk, TensorView dv,
                        const AttentionArgs& args);

}  // namespace carto::cuda
