// cuda/reduce.cuh — warp and block reductions shared by the row kernels (layernorm, softmax,
// cross-entropy) and attention.
//
// Design note: reductions are xor butterflies (__shfl_xor_sync) so that every lane ends with the
// same bits (a + b and b + a round alike, so each pair of partners agrees at every level), then,
// for a whole-block group, one value per warp through 32 slots of shared memory that every thread
// folds in warp order. The order of every sum is fixed by the launch geometry: the same call on
// the same shapes gives the same bits on every run. A running (max, Σ exp(x - max)) pair — the
// online softmax of Milakov & Gimelshein 2018 — merges like any other value.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>

namespace carto::cuda {

#ifdef __CUDACC__

inline constexpr unsigned kFullWarp = 0xffffffffu;

// The running maximum m of a set of values and Σ exp(x - m) over it; m = -inf for the empty set.
// No member initializers, so that it may live in __shared__ memory; start from empty_max_sum().
struct MaxSum {
  float max;
  float sum;
};
__device__ __forceinline__ MaxSum empty_max_sum() { return {-INFINITY, 0.0f}; }

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}
// Adds one value x (-inf adds nothing: exp(-inf - m) = 0).
__device__ __forceinline__ MaxSum push(MaxSum a, float x) {
  if (x == -INFINITY) return a;
  if (x > a.max) return {x, a.sum * expf(a.max - x) + 1.0f};
  return {a.max, a.sum + expf(x - a.max)};
}

struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct MergeOp {
  __device__ __forceinline__ MaxSum operator()(MaxSum a, MaxSum b) const { return merge(a, b); }
};

__device__ __forceinline__ float shuffle_xor(float v, int lane_mask, int width) {
  return __shfl_xor_sync(kFullWarp, v, lane_mask, width);
}
__device__ __forceinline__ double shuffle_xor(double v, int lane_mask, int width) {
  return __shfl_xor_sync(kFullWarp, v, lane_mask, width);
}
__device__ __forceinline__ MaxSum shuffle_xor(MaxSum v, int lane_mask, int width) {
  return {__shfl_xor_sync(kFullWarp, v.max, lane_mask, width),
          __shfl_xor_sync(kFullWarp, v.sum, lane_mask, width)};
}

// Reduces over aligned groups of `width` lanes (a power of two up to 32); every lane of the warp
// must call it.
template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op, int width = 32) {
  for (int offset = width / 2; offset > 0; offset /= 2) v = op(v, shuffle_xor(v, offset, width));
  return v;
}

// Reduces over the whole block (blockDim.x a multiple of 32); every thread must call it and gets
// the result. scratch: 32 slots of shared memory, free again when it returns.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T* scratch) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_reduce(v, op);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = scratch[0];
  for (unsigned w = 1; w < warps; ++w) r = op(r, scratch[w]);
  __syncthreads();
  return r;
}

// The reduction of a row's group: the whole block, or one warp (tiling::RowLaunch).
template <class T, class Op>
__device__ __forceinline__ T group_reduce(T v, Op op, T* scratch, bool whole_block) {
  return whole_block ? block_reduce(v, op, scratch) : warp_reduce(v, op);
}

#endif  // __CUDACC__

}  // namespace carto::cuda
