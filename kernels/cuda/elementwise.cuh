// cuda/elementwise.cuh — fills, strided copies, GELU, dropout, sums and bias of the CUDA backend.
//
// Design note: one host function per Backend method (launch.cuh's convention), each checking
// element counts and dtypes like the CPU backend and launching one grid-stride kernel (two for
// bias_backward) on launch.stream. Every view may be fp32 or bf16 independently; kernels load to
// fp32, compute in fp32 and round to nearest even on a bf16 store; accumulating outputs (backward,
// add_scaled, CopyMode::accumulate) add in fp32 and round once.
// Randomness equals the CPU backend's bit for bit: fill_normal stores stddev · rng::normal and
// dropout keeps rng::keep of each element's global index, a thread taking one Philox block along a
// row (geometry.hpp's block_group), the words rng.hpp assigns to those indices. elementwise.cu is
// compiled with --fmad=false so that rng::normal's double arithmetic is not contracted into fused
// multiply-adds, which the host (compiled without contraction) does not do; the other kernels are
// memory-bound and lose nothing by it.
// bias_backward sums over rows in a fixed order (two passes, geometry.hpp's column_sum_tiles)
// with an fp32 partial per (row chunk, column) in workspace: no atomics, so the result is the same
// every run.
#pragma once

#include <cstdint>

#include "cuda/launch.cuh"

namespace carto::cuda {

// x = value.
void fill(const Launch& launch, TensorView x, float value);
// x = stddev · rng::normal(rng, global index), the CPU backend's values bit for bit.
void fill_normal(const Launch& launch, TensorView x, float stddev, RngStream rng,
                 const ShardPlacement& placement);
// dst[to + i·to.strides] (=, +=) src[from + i·from.strides] for i in the box `extents`.
void copy_strided(const Launch& launch, ConstTensorView src, const StridedBox& from, TensorView dst,
                  const StridedBox& to, const Index& extents, CopyMode mode);

void gelu_forward(const Launch& launch, ConstTensorView x, TensorView y);
void gelu_backward(const Launch& launch, ConstTensorView x, ConstTensorView dy,
                   TensorView dx);  // dx +=
void dropout_forward(const Launch& launch, ConstTensorView x, TensorView y,
                     const DropoutArgs& args);
void dropout_backward(const Launch& launch, ConstTensorView dy, TensorView dx,
                      const DropoutArgs& args);  // dx +=
void add(const Launch& launch, ConstTensorView a, ConstTensorView b, TensorView y);
void scale(const Launch& launch, ConstTensorView x, float factor, TensorView y);
void add_scaled(const Launch& launch, ConstTensorView x, float factor, TensorView y);  // y +=
// x (rows..., b's dims), b broadcast over the leading dims.
void bias_forward(const Launch& launch, ConstTensorView x, ConstTensorView b, TensorView y);
void bias_backward(const Launch& launch, ConstTensorView dy, TensorView db);  // db +=

// For the other families: dst[i] = src[i] (converted) for i < count, on launch.stream.
void convert_elements(const Launch& launch, Elements src, Elements dst, std::int64_t count);

}  // namespace carto::cuda
