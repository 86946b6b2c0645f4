// carto/spec/enumerate.hpp — every valid sharding spec of a tensor on a mesh.
//
// Design note: a spec is determined by where each mesh axis goes — nowhere (replicated), to one
// tensor dim, or (optionally) to the Partial set — and by the order of the axes that share a dim.
// enumerate_specs walks those choices in a fixed order: an odometer over the mesh axes (axis 0 is
// the most significant digit; the choices of one axis in order R, dim 0, ..., dim r-1, P), and for
// each assignment every order of the axes within each dim (permutations in lexicographic order of
// mesh index, dim 0 varying slowest). Specs whose splits are uneven for the shape are skipped. The
// search walks this list, so the order is part of the contract: same inputs, same list.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "carto/spec/mesh.hpp"
#include "carto/spec/shape.hpp"
#include "carto/spec/sharding.hpp"

namespace carto {

enum class PartialSpecs : std::uint8_t { exclude, include };

struct EnumerateOptions {
  PartialSpecs partial = PartialSpecs::exclude;
};

constexpr std::vector<ShardingSpec> enumerate_specs(const TensorShape& shape,
                                                    const DeviceMesh& mesh,
                                                    EnumerateOptions options = {}) {
  const std::size_t m = mesh.num_axes();
  const std::size_t r = shape.rank();
  const bool with_partial = options.partial == PartialSpecs::include;
  // choice c of an axis: 0 = replicated, 1..r = dim c-1, r+1 = partial.
  const std::size_t choices = r + 1 + (with_partial ? 1 : 0);

  std::vector<ShardingSpec> out;
  std::array<std::size_t, kMaxMeshAxes> choice{};
  for (;;) {
    // Per dim, the mesh axis indices assigned to it (ascending), and whether the splits divide.
    std::array<StaticVector<std::size_t, kMaxMeshAxes>, kMaxRank> per_dim{};
    StaticVector<std::size_t, kMaxMeshAxes> partial;
    for (std::size_t a = 0; a < m; ++a) {
      if (choice[a] >= 1 && choice[a] <= r) per_dim[choice[a] - 1].push_back(a);
      if (choice[a] == r + 1) partial.push_back(a);
    }
    bool even = true;
    for (std::size_t d = 0; d < r && even; ++d) {
      std::int64_t f = 1;
      for (std::size_t a : per_dim[d]) f *= mesh.axis(a).size;
      even = shape.dims()[d].extent % f == 0;
    }
    if (even) {
      // Every combination of per-dim orders: an odometer of permutations, dim 0 slowest.
      for (;;) {
        ShardingSpec spec;
        for (std::size_t d = 0; d < r; ++d) {
          AxisList axes;
          for (std::size_t a : per_dim[d]) axes.push_back(mesh.axis(a).name);
          spec.add_dim(axes);
        }
        for (std::size_t a : partial) spec.add_partial(mesh.axis(a).name);
        out.push_back(spec);
        std::size_t d = r;
        bool advanced = false;
        while (d-- > 0) {
          if (std::next_permutation(per_dim[d].begin(), per_dim[d].end())) {
            advanced = true;
            break;
          }  // next_permutation wrapped dim d back to ascending order: carry to the dim before it
        }
        if (!advanced) break;
      }
    }
    // Next assignment: the last axis is the least significant digit.
    std::size_t a = m;
    bool advanced = false;
    while (a-- > 0) {
      if (++choice[a] < choices) {
        advanced = true;
        break;
      }
      choice[a] = 0;
    }
    if (!advanced) break;
  }
  return out;
}

}  // namespace carto
