// carto/spec/layout.hpp — what each device holds: local shapes, global slices and the reverse map.
//
// Design note: for a dim split over axes (a1, ..., ak), the device with mesh coordinate c holds
// shard number  s = ((c[a1] * n[a2] + c[a2]) * n[a3] + ...)  of that dim, i.e. a1 is the outermost
// split. Its slice along the dim is [s * e / f, (s + 1) * e / f) with f = n[a1] * ... * n[ak].
// Devices that differ only in coordinates on axes that shard no dim (replicated or Partial axes)
// hold the same slice: they form a replica group of size num_devices / (product of all split
// factors). All functions validate first and throw carto::Error on an invalid spec.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "carto/spec/mesh.hpp"
#include "carto/spec/shape.hpp"
#include "carto/spec/sharding.hpp"

namespace carto {

using Index = StaticVector<std::int64_t, kMaxRank>;

// The per-device part of a tensor: a box of the global index space.
struct Slice {
  Index offset;
  Index extent;
  friend constexpr bool operator==(const Slice&, const Slice&) = default;
  [[nodiscard]] constexpr bool contains(const Index& global) const {
    for (std::size_t d = 0; d < offset.size(); ++d) {
      if (global[d] < offset[d] || global[d] >= offset[d] + extent[d]) return false;
    }
    return true;
  }
};

namespace detail {
constexpr void require_valid(const TensorShape& shape, const ShardingSpec& spec,
                             const DeviceMesh& mesh) {
  if (SpecCheck c = validate(shape, spec, mesh); !c.ok())
    spec_problem("tensor", &shape, spec, mesh, c);
}
}  // namespace detail

// Number of shards of one dim (the product of its axes' sizes).
constexpr std::int64_t num_shards(const ShardingSpec& spec, const DeviceMesh& mesh, TensorDim d) {
  return split_factor(spec.axes(d), mesh);
}

// Product over all dims of their shard counts: how many distinct slices exist.
constexpr std::int64_t num_distinct_slices(const ShardingSpec& spec, const DeviceMesh& mesh) {
  std::int64_t n = 1;
  for (std::size_t d = 0; d < spec.rank(); ++d) n *= num_shards(spec, mesh, TensorDim{d});
  return n;
}

// Devices per replica group: num_devices / num_distinct_slices.
constexpr std::int64_t replication_factor(const ShardingSpec& spec, const DeviceMesh& mesh) {
  return mesh.num_devices() / num_distinct_slices(spec, mesh);
}

// The shard number along dim d of the device at coordinate c.
constexpr std::int64_t shard_index(const ShardingSpec& spec, const DeviceMesh& mesh, TensorDim d,
                                   const MeshCoord& c) {
  std::int64_t s = 0;
  for (const AxisName& a : spec.axes(d)) {
    const std::size_t i = mesh.index_of(a);
    s = s * mesh.axis(i).size + c[i];
  }
  return s;
}

// The shape every device holds (all devices hold the same local shape: splits are even).
constexpr TensorShape local_shape(const TensorShape& shape, const ShardingSpec& spec,
                                  const DeviceMesh& mesh) {
  detail::require_valid(shape, spec, mesh);
  TensorShape local;
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    const DimExtent& g = shape.dims()[d];
    local.push_back({g.name, g.extent / num_shards(spec, mesh, TensorDim{d})});
  }
  return local;
}

// The box of global indices held by one device.
constexpr Slice device_slice(const TensorShape& shape, const ShardingSpec& spec,
                             const DeviceMesh& mesh, std::int64_t device) {
  detail::require_valid(shape, spec, mesh);
  const MeshCoord c = mesh.coord(device);
  Slice s;
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    const std::int64_t f = num_shards(spec, mesh, TensorDim{d});
    const std::int64_t e = shape.dims()[d].extent / f;
    s.offset.push_back(shard_index(spec, mesh, TensorDim{d}, c) * e);
    s.extent.push_back(e);
  }
  return s;
}

// Reverse map: where a global element lives.
struct ElementLocation {
  Index shard;                        // shard number along each dim
  Index local;                        // index inside the local tensor (same on every holder)
  std::vector<std::int64_t> devices;  // every device holding it, ascending
};

constexpr ElementLocation locate(const TensorShape& shape, const ShardingSpec& spec,
                                 const DeviceMesh& mesh, const Index& global) {
  detail::require_valid(shape, spec, mesh);
  if (global.size() != shape.rank()) {
    detail::fail("carto: locate: index of rank ", global.size(), " for a rank-", shape.rank(),
                 " tensor ", shape);
  }
  ElementLocation loc;
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    const std::int64_t e = shape.dims()[d].extent;
    if (global[d] < 0 || global[d] >= e) {
      detail::fail("carto: locate: index ", global[d], " is out of range for dim ", d, " ('",
                   shape.dims()[d].name, "', extent ", e, ")");
    }
    const std::int64_t local_e = e / num_shards(spec, mesh, TensorDim{d});
    loc.shard.push_back(global[d] / local_e);
    loc.local.push_back(global[d] % local_e);
  }
  for (std::int64_t dev = 0; dev < mesh.num_devices(); ++dev) {
    const MeshCoord c = mesh.coord(dev);
    bool holds = true;
    for (std::size_t d = 0; d < shape.rank() && holds; ++d) {
      holds = shard_index(spec, mesh, TensorDim{d}, c) == loc.shard[d];
    }
    if (holds) loc.devices.push_back(dev);
  }
  return loc;
}

// The devices that hold the same slice as `device` (itself included), ascending: those whose
// coordinates differ only on axes that shard no dim.
constexpr std::vector<std::int64_t> replica_group(const ShardingSpec& spec, const DeviceMesh& mesh,
                                                  std::int64_t device) {
  if (SpecCheck c = validate(spec, mesh); !c.ok())
    detail::spec_problem("tensor", nullptr, spec, mesh, c);
  const MeshCoord mine = mesh.coord(device);
  std::vector<std::int64_t> group;
  for (std::int64_t dev = 0; dev < mesh.num_devices(); ++dev) {
    const MeshCoord c = mesh.coord(dev);
    bool same = true;
    for (std::size_t d = 0; d < spec.rank() && same; ++d) {
      for (const AxisName& a : spec.dims()[d]) {
        const std::size_t i = mesh.index_of(a);
        same = same && c[i] == mine[i];
      }
    }
    if (same) group.push_back(dev);
  }
  return group;
}

}  // namespace carto
