// cpu/dropout_mask.hpp — dropout masks for runs of consecutive global indices (internal).
//
// Design note: rng::keep(s, i, p) reads word i % 4 of Philox block i / 4 (rng.hpp). Called per
// element it computes a whole block (ten rounds) for one word. dropout_keep walks a run of indices
// block by block instead, computing kPhiloxBatch blocks at once in a loop the compiler vectorizes
// (the rounds are 32×32→64-bit products, xors and adds on independent blocks), and uses all four
// words of each. The words, and so the masks, are exactly rng::keep's.
#pragma once

#include <carto/runtime/rng.hpp>
#include <cstddef>
#include <cstdint>

namespace carto::cpu::detail {

// keep[m] = rng::keep(rng, first + m, probability) (1 kept, 0 dropped) for m < count.
void dropout_keep(RngStream rng, std::int64_t first, std::int64_t count, float probability,
                  std::uint32_t* keep);

// Calls f(local_start, global_start, count) for every row (run along the last dim) of a local box
// of extents `local` placed by `where`: local elements [local_start, local_start + count) have the
// consecutive global indices [global_start, global_start + count).
template <class F>
void for_each_global_row(const ShardPlacement& where, const Index& local, F&& f) {
  const GlobalIndexer indexer(where, local);
  std::int64_t numel = 1;
  for (const std::int64_t e : local) numel *= e;
  if (numel == 0) return;
  if (local.empty()) {
    f(0, 0, 1);
    return;
  }
  const std::size_t rank = local.size();
  const std::int64_t inner = local[rank - 1];
  Index coord = local;
  for (std::int64_t& c : coord) c = 0;
  for (std::int64_t row_start = 0; row_start < numel; row_start += inner) {
    f(row_start, indexer.global_index(coord), inner);
    for (std::size_t d = rank - 1; d-- > 0;) {  // odometer over the outer dims
      if (++coord[d] < local[d]) break;
      coord[d] = 0;
    }
  }
}

}  // namespace carto::cpu::detail
