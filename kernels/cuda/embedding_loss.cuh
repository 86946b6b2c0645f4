// cuda/embedding_loss.cuh — the (vocab-parallel) embedding lookup and softmax cross-entropy on
// the CUDA backend.
//
// Design note: one host function per Backend method, with exactly Backend's parameters after the
// Launch (launch.cuh); semantics as backend.hpp states them and as
// kernels/cpu/embedding_cross_entropy.cpp computes them. The kernels are described in
// embedding_loss.cu. Token ids live in device memory, so they are not range-checked on the host as
// the CPU backend does: an id outside the shard's rows looks up 0 and adds nothing, and a target
// outside the vocab contributes a target logit of 0 (see embedding_loss.cu).
#pragma once

#include "cuda/launch.cuh"

namespace carto::cuda {

// table (V_local, H), ids (...), out (..., H); table and out fp32 or bf16.
void embedding_forward(const Launch& launch, ConstTensorView table, IndexView ids, TensorView out,
                       const EmbeddingShard& shard);
// dtable[id - vocab_offset] += dout, deterministically (tokens of one row in position order).
void embedding_backward(const Launch& launch, ConstTensorView dout, IndexView ids,
                        TensorView dtable, const EmbeddingShard& shard);

// logits (rows..., V) fp32 or bf16; targets (rows...); loss (1), logsumexp (rows...) fp32.
void cross_entropy_forward(const Launch& launch, ConstTensorView logits, IndexView targets,
                           TensorView loss, TensorView logsumexp, const CrossEntropyArgs& args);
void cross_entropy_row_max(const Launch& launch, ConstTensorView logits, TensorView row_max);
void cross_entropy_sum_exp(const Launch& launch, ConstTensorView logits, ConstTensorView row_max,
                           TensorView sum_exp);
void cross_entropy_target_logit(const Launch& launch, ConstTensorView logits, IndexView targets,
                                TensorView target_logit, const CrossEntropyArgs& args);
void cross_entropy_loss(const Launch& launch, ConstTensorView row_max, ConstTensorView sum_exp,
                        ConstTensorView target_logit, TensorView loss, TensorView logsumexp,
                        const CrossEntropyArgs& args);
// dlogits += dloss / count · (exp(logit - logsumexp) - [vocab row == target]); dloss (1) is read
// on the device.
void cross_entropy_backward(const Launch& launch, ConstTensorView logits, IndexView targets,
                            ConstTensorView logsumexp, ConstTensorView dloss, TensorView dlogits,
                            const CrossEntropyArgs& args);

}  // namespace carto::cuda
