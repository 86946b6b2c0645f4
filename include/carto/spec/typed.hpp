// carto/spec/typed.hpp — typed tensors and compile-time checked sharding.
//
// Design note: Tensor<DType, Shape<...>> describes a tensor's element type and shape as a type.
// Sharded<Tensor, Mesh, Spec> places it on a mesh; every misuse that the types can reveal is a
// static_assert with a message naming the problem: a rank mismatch, an axis the mesh does not have,
// an axis used twice, and a static dim that does not divide evenly (the failing dim index, extent
// and shard count appear in the instantiation of detail::UnevenSplit<dim, extent, shards>). Dynamic
// extents are checked at construction, at run time, by check_spec.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "carto/spec/dtype.hpp"
#include "carto/spec/layout.hpp"
#include "carto/spec/mesh.hpp"
#include "carto/spec/shape.hpp"
#include "carto/spec/sharding.hpp"

namespace carto {

template <class T>
struct is_shape : std::false_type {};
template <class... D>
struct is_shape<Shape<D...>> : std::true_type {};

template <DType Type, class ShapeT>
struct Tensor {
  static_assert(is_shape<ShapeT>::value, "carto: Tensor<DType, S> needs S = carto::Shape<Dim...>");
  static constexpr DType dtype = Type;
  static constexpr std::size_t rank = ShapeT::rank;
  using shape_type = ShapeT;

  ShapeT shape{};

  [[nodiscard]] constexpr TensorShape shape_value() const { return shape.value(); }
  [[nodiscard]] constexpr std::int64_t bytes() const {
    return checked_mul(shape.value().numel(), size_bytes(Type), "the byte size of a tensor");
  }
};

template <class T>
struct is_tensor : std::false_type {};
template <DType Type, class S>
struct is_tensor<Tensor<Type, S>> : std::true_type {};

template <class T>
struct is_mesh : std::false_type {};
template <class... A>
struct is_mesh<Mesh<A...>> : std::true_type {};

template <class T>
struct is_spec : std::false_type {};
template <class... P>
struct is_spec<Spec<P...>> : std::true_type {};

namespace detail {

// The checks the types allow: dynamic extents are skipped here and checked at run time.
template <class ShapeT, class MeshT, class SpecT>
consteval SpecCheck static_spec_check() {
  if (SpecT::rank != ShapeT::rank) return {SpecProblem::rank_mismatch};
  const ShardingSpec spec = SpecT::value();
  const DeviceMesh mesh = MeshT::value();
  if (SpecCheck c = validate(spec, mesh); !c.ok()) return c;
  for (std::size_t d = 0; d < ShapeT::rank; ++d) {
    const std::int64_t e = ShapeT::static_extents[d];
    const std::int64_t f = split_factor(spec.dims()[d], mesh);
    if (e != dynamic_extent && e % f != 0) return {SpecProblem::uneven_split, d, AxisName{}, e, f};
  }
  return {};
}

template <std::size_t SpecRank, std::size_t ShapeRank>
struct RankMismatch {
  static_assert(SpecRank == ShapeRank,
                "carto: the Spec's rank differs from the tensor's rank: give one placement "
                "(Shard<...> or Replicate) per tensor dim, plus an optional trailing Partial<...>");
};

template <bool Uneven, std::size_t Dim, std::int64_t Extent, std::int64_t Shards>
struct UnevenSplit {
  static_assert(!Uneven,
                "carto: a static tensor dim does not divide evenly into its shards; see "
                "UnevenSplit<uneven, dim index, extent, shard count> in this message");
};

}  // namespace detail

template <class TensorT, class MeshT, class SpecT>
class Sharded {
  static_assert(is_tensor<TensorT>::value, "carto: Sharded<T, M, S> needs T = carto::Tensor<...>");
  static_assert(is_mesh<MeshT>::value, "carto: Sharded<T, M, S> needs M = carto::Mesh<Axis...>");
  static_assert(is_spec<SpecT>::value, "carto: Sharded<T, M, S> needs S = carto::Spec<...>");
  using ShapeT = typename TensorT::shape_type;

  // sizeof forces the instantiation, whose own static_assert shows the ranks.
  static_assert(sizeof(detail::RankMismatch<SpecT::rank, ShapeT::rank>) > 0);
  static constexpr SpecCheck check = detail::static_spec_check<ShapeT, MeshT, SpecT>();
  static_assert(check.problem != SpecProblem::unknown_axis,
                "carto: the Spec names a mesh axis that the Mesh does not have");
  static_assert(check.problem != SpecProblem::axis_used_twice,
                "carto: a mesh axis is used more than once in the Spec; each axis may split one "
                "dim or be Partial, once");
  static_assert(sizeof(detail::UnevenSplit<check.problem == SpecProblem::uneven_split, check.dim,
                                           check.extent, check.divisor>) > 0);

 public:
  using tensor_type = TensorT;
  using mesh_type = MeshT;
  using spec_type = SpecT;

  // Static shapes need no arguments; dynamic extents are checked here (carto::Error).
  constexpr explicit Sharded(TensorT tensor = {}, std::string_view name = "tensor")
      : tensor_(tensor) {
    if constexpr (!ShapeT::is_static) check_spec(tensor_.shape_value(), spec(), mesh(), name);
  }

  static constexpr ShardingSpec spec() { return SpecT::value(); }
  static constexpr DeviceMesh mesh() { return MeshT::value(); }
  [[nodiscard]] constexpr TensorShape global_shape() const { return tensor_.shape_value(); }
  [[nodiscard]] constexpr TensorShape local_shape() const {
    return carto::local_shape(global_shape(), spec(), mesh());
  }
  [[nodiscard]] constexpr std::int64_t local_bytes() const {
    return checked_mul(local_shape().numel(), size_bytes(TensorT::dtype),
                       "the byte size of a tensor shard");
  }
  [[nodiscard]] constexpr Slice slice(std::int64_t device) const {
    return device_slice(global_shape(), spec(), mesh(), device);
  }

 private:
  TensorT tensor_;
};

}  // namespace carto
