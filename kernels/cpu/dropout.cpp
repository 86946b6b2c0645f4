// The CPU backend's dropout, and the Philox blocks behind every dropout mask (dropout_mask.hpp).
#include <algorithm>

#include "cpu_backend.hpp"
#include "dropout_mask.hpp"
#include "elements.hpp"
#include "kernel_checks.hpp"
#include "vector_math.hpp"

namespace carto::cpu {

namespace detail {

namespace {

// Philox blocks computed together; 16 blocks are 64 words, a vector loop of 4, 8 or 16 lanes.
constexpr std::int64_t kPhiloxBatch = 16;
constexpr int kPhiloxRounds = 10;

// The blocks first, first + 1, ... of stream `rng` (rng::block), word w of block k at 4·k + w.
// The same rounds as carto::philox4x32<10>, with the blocks in the vectorized (inner) loop.
CARTO_VECTOR_INLINE void philox_batch(RngStream rng, std::uint64_t first, std::uint32_t* words) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  std::uint32_t key0[kPhiloxRounds], key1[kPhiloxRounds];
  key0[0] = static_cast<std::uint32_t>(rng.seed);
  key1[0] = static_cast<std::uint32_t>(rng.seed >> 32);
  for (int round = 1; round < kPhiloxRounds; ++round) {
    key0[round] = key0[round - 1] + kWeyl0;
    key1[round] = key1[round - 1] + kWeyl1;
  }
  const auto stream0 = static_cast<std::uint32_t>(rng.id);
  const auto stream1 = static_cast<std::uint32_t>(rng.id >> 32);
  std::uint32_t out[4][kPhiloxBatch];
  for (std::int64_t k = 0; k < kPhiloxBatch; ++k) {
    const std::uint64_t block = first + static_cast<std::uint64_t>(k);
    std::uint32_t c0 = static_cast<std::uint32_t>(block),
                  c1 = static_cast<std::uint32_t>(block >> 32);
    std::uint32_t c2 = stream0, c3 = stream1;
    for (int round = 0; round < kPhiloxRounds; ++round) {
      const std::uint64_t p0 = std::uint64_t{kMul0} * c0;
      const std::uint64_t p1 = std::uint64_t{kMul1} * c2;
      const std::uint32_t next0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ key0[round];
      const std::uint32_t next2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ key1[round];
      c1 = static_cast<std::uint32_t>(p1);
      c3 = static_cast<std::uint32_t>(p0);
      c0 = next0;
      c2 = next2;
    }
    out[0][k] = c0;
    out[1][k] = c1;
    out[2][k] = c2;
    out[3][k] = c3;
  }
  for (std::int64_t k = 0; k < kPhiloxBatch; ++k) {
    for (std::int64_t w = 0; w < 4; ++w) words[4 * k + w] = out[w][k];
  }
}

}  // namespace

CARTO_VECTOR_CLONES void dropout_keep(RngStream rng, std::int64_t first, std::int64_t count,
                                      float probability, std::uint32_t* keep) {
  if (probability <= 0.0f) {  // every uniform in [0, 1) is >= 0: nothing to draw
    std::fill(keep, keep + count, 1u);
    return;
  }
  std::uint32_t words[4 * kPhiloxBatch];
  for (std::int64_t m = 0; m < count;) {
    const auto index = static_cast<std::uint64_t>(first + m);
    philox_batch(rng, index / 4, words);
    const auto skip = static_cast<std::int64_t>(index % 4);
    const std::int64_t take = std::min(4 * kPhiloxBatch - skip, count - m);
    for (std::int64_t t = 0; t < take; ++t) {
      keep[m + t] = rng::word_to_uniform(words[skip + t]) >= probability ? 1u : 0u;
    }
    m += take;
  }
}

}  // namespace detail

namespace {

using detail::Load;

// Masks are drawn for chunks of a row at a time, in a buffer on the stack.
constexpr std::int64_t kMaskChunk = 256;

// dst[i] = op(kept_i, src[i], dst[i], 1 / (1 - p)) for every element, kept_i its mask bit; the
// masks are drawn row by row, kMaskChunk at a time. The mask depends on the global index alone,
// so bf16 views (staged a chunk at a time, elements.hpp) drop exactly the elements fp32 ones do.
template <class Op>
void apply_dropout(Backend& backend, std::string_view call, ConstTensorView src, TensorView dst,
                   const DropoutArgs& args, Load load, Op&& op) {
  detail::require_numel(call, "the output", dst.numel(), src.numel());
  CARTO_CHECK(args.probability >= 0.0f && args.probability < 1.0f, call,
              ": dropout probability must be in [0, 1); got ", args.probability);
  const detail::Staging st(
      backend, call,
      {{"the input", src.dtype(), kMaskChunk}, {"the output", dst.dtype, kMaskChunk}});
  const float kept = 1.0f / (1.0f - args.probability);
  std::uint32_t keep[kMaskChunk];
  detail::for_each_global_row(args.placement, detail::extents_of(src.shape()),
                              [&](std::int64_t local, std::int64_t global, std::int64_t count) {
                                for (std::int64_t c = 0; c < count; c += kMaskChunk) {
                                  const std::int64_t n = std::min(kMaskChunk, count - c);
                                  detail::dropout_keep(args.rng, global + c, n, args.probability,
                                                       keep);
                                  const float* s = st.read(0, src, local + c, n);
                                  float* d = st.write(1, dst, local + c, n, load);
#pragma omp simd
                                  for (std::int64_t m = 0; m < n; ++m)
                                    d[m] = op(keep[m] != 0, s[m], d[m], kept);
                                  st.commit(1, dst, local + c, n);
                                }
                              });
}

}  // namespace

// y may be x: each element is read before it is written.
void CpuBackend::dropout_forward(ConstTensorView x, TensorView y, const DropoutArgs& args) {
  apply_dropout(
      *this, "dropout_forward", x, y, args, Load::no,
      [](bool keep, float xi, float /*yi*/, float kept) { return keep ? xi * kept : 0.0f; });
}

void CpuBackend::dropout_backward(ConstTensorView dy, TensorView dx, const DropoutArgs& args,
                                  CopyMode mode) {
  if (mode == CopyMode::assign) {
    apply_dropout(
        *this, "dropout_backward", dy, dx, args, Load::no,
        [](bool keep, float dyi, float /*dxi*/, float kept) { return keep ? dyi * kept : 0.0f; });
    return;
  }
  apply_dropout(
      *this, "dropout_backward", dy, dx, args, Load::yes,
      [](bool keep, float dyi, float dxi, float kept) { return keep ? dxi + dyi * kept : dxi; });
}

}  // namespace carto::cpu
