// Defining equations of the layout algebra, over whole domains (every valid spec of every tensor
// of tests/support/spec_domains.hpp on every mesh there):
//   - the devices' slices cover every global index, each index held by exactly
//     num_devices / (number of distinct slices) devices;
//   - devices in one replica group hold the same slice; devices in different groups disjoint ones;
//   - local shapes multiply back to the global shape;
//   - the reverse map (locate) names exactly the devices whose slice contains the index, and the
//     local index inside that slice.
#include <carto/spec.hpp>
#include <catch2/catch.hpp>
#include <map>
#include <vector>

#include "support/spec_domains.hpp"

using namespace carto;

namespace {

// Calls f(index) for every index of the shape, in row-major order.
template <class F>
void for_each_index(const TensorShape& shape, F&& f) {
  Index i;
  for (std::size_t d = 0; d < shape.rank(); ++d) i.push_back(0);
  for (;;) {
    f(i);
    std::size_t d = shape.rank();
    bool advanced = false;
    while (d-- > 0) {
      if (++i[d] < shape.dims()[d].extent) {
        advanced = true;
        break;
      }
      i[d] = 0;
    }
    if (!advanced) return;
  }
}

}  // namespace

TEST_CASE("every spec's slices cover each global index exactly", "[spec][layout]") {
  std::size_t specs_checked = 0;
  for (const DeviceMesh& mesh : testing::small_meshes()) {
    for (const TensorShape& shape : testing::small_shapes()) {
      for (const ShardingSpec& spec :
           enumerate_specs(shape, mesh, {.partial = PartialSpecs::include})) {
        INFO("mesh " << mesh << " shape " << shape << " spec " << spec);
        ++specs_checked;
        const TensorShape local = local_shape(shape, spec, mesh);
        // Local extents times shard counts give the global extents back.
        for (std::size_t d = 0; d < shape.rank(); ++d) {
          REQUIRE(local.dims()[d].extent * num_shards(spec, mesh, TensorDim{d}) ==
                  shape.dims()[d].extent);
          REQUIRE(local.dims()[d].name == shape.dims()[d].name);
        }
        std::vector<Slice> slices;
        for (std::int64_t dev = 0; dev < mesh.num_devices(); ++dev) {
          slices.push_back(device_slice(shape, spec, mesh, dev));
          std::int64_t n = 1;
          for (std::int64_t e : slices.back().extent) n *= e;
          REQUIRE(n == local.numel());
        }
        const std::int64_t copies = replication_factor(spec, mesh);
        REQUIRE(copies * num_distinct_slices(spec, mesh) == mesh.num_devices());

        // Replica groups: same slice inside a group; size = copies.
        std::map<std::vector<std::int64_t>, std::vector<std::int64_t>> by_slice;
        for (std::int64_t dev = 0; dev < mesh.num_devices(); ++dev) {
          const auto group = replica_group(spec, mesh, dev);
          REQUIRE(static_cast<std::int64_t>(group.size()) == copies);
          for (std::int64_t other : group) REQUIRE(slices[other] == slices[dev]);
          by_slice[std::vector<std::int64_t>(slices[dev].offset.begin(), slices[dev].offset.end())]
              .push_back(dev);
        }
        REQUIRE(static_cast<std::int64_t>(by_slice.size()) == num_distinct_slices(spec, mesh));

        // Every index: held by exactly `copies` devices, the ones locate() names.
        std::int64_t wrong = 0;
        for_each_index(shape, [&](const Index& g) {
          std::vector<std::int64_t> holders;
          for (std::int64_t dev = 0; dev < mesh.num_devices(); ++dev) {
            if (slices[dev].contains(g)) holders.push_back(dev);
          }
          const ElementLocation loc = locate(shape, spec, mesh, g);
          bool ok = static_cast<std::int64_t>(holders.size()) == copies && holders == loc.devices;
          for (std::size_t d = 0; d < shape.rank() && ok; ++d) {
            ok = slices[holders[0]].offset[d] + loc.local[d] == g[d];
          }
          wrong += ok ? 0 : 1;
        });
        REQUIRE(wrong == 0);
      }
    }
  }
  // Sanity: the sweep is not trivially small.
  REQUIRE(specs_checked > 1500);
}

TEST_CASE("outer axis first: S(dp,tp) and S(tp,dp) place shards differently", "[spec][layout]") {
  const DeviceMesh mesh = parse_mesh("dp=2,tp=4");
  const TensorShape x = parse_shape("n=16");
  // Device 1 has coordinate (dp=0, tp=1). Over (dp,tp) its shard is 0*4+1 = 1; over (tp,dp) it is
  // 1*2+0 = 2. Each shard holds 16/8 = 2 elements.
  REQUIRE(device_slice(x, parse_spec("S(dp,tp)"), mesh, 1).offset[0] == 2);
  REQUIRE(device_slice(x, parse_spec("S(tp,dp)"), mesh, 1).offset[0] == 4);
  // Device 4 = (dp=1, tp=0): shard 4 over (dp,tp), shard 1 over (tp,dp).
  REQUIRE(device_slice(x, parse_spec("S(dp,tp)"), mesh, 4).offset[0] == 8);
  REQUIRE(device_slice(x, parse_spec("S(tp,dp)"), mesh, 4).offset[0] == 2);
}

TEST_CASE("layout functions reject invalid specs and indices", "[spec][layout]") {
  const DeviceMesh mesh = parse_mesh("dp=2,tp=4");
  const TensorShape x = parse_shape("b=6,h=8");
  REQUIRE_THROWS_WITH(device_slice(x, parse_spec("S(tp),R"), mesh, 0),
                      Catch::Contains("does not divide evenly"));
  REQUIRE_THROWS_WITH(locate(x, parse_spec("R,S(tp)"), mesh, Index{6, 0}),
                      Catch::Contains("index 6 is out of range for dim 0 ('b', extent 6)"));
  REQUIRE_THROWS_WITH(locate(x, parse_spec("R,S(tp)"), mesh, Index{1}),
                      Catch::Contains("index of rank 1 for a rank-2 tensor"));
  REQUIRE_THROWS_WITH(replica_group(parse_spec("R,S(zz)"), mesh, 0),
                      Catch::Contains("'zz' is not an axis of the mesh"));
}

TEST_CASE("layout is usable in constant expressions", "[spec][layout]") {
  constexpr DeviceMesh mesh = Mesh<Axis<"dp", 2>, Axis<"tp", 4>>::value();
  constexpr TensorShape x = Shape<Dim<"b", 8>, Dim<"h", 64>>::static_value();
  constexpr ShardingSpec spec = Spec<Shard<"dp">, Shard<"tp">>::value();
  STATIC_REQUIRE(local_shape(x, spec, mesh).numel() == 8 * 64 / 8);
  STATIC_REQUIRE(device_slice(x, spec, mesh, 7).offset[0] == 4);
  STATIC_REQUIRE(device_slice(x, spec, mesh, 7).offset[1] == 48);
  STATIC_REQUIRE(replication_factor(Spec<Shard<"tp">, Replicate>::value(), mesh) == 2);
}
