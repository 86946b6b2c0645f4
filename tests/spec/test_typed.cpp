// The compile-time form: Tensor / Mesh / Spec types checked by Sharded, agreeing with the run-time
// functions. (Misuses are compile errors: see tests/compile_fail/.)
#include <carto/spec.hpp>
#include <catch2/catch.hpp>

using namespace carto;

namespace {
using Batch = Dim<"batch">;
using Seq = Dim<"seq", 1024>;
using Hidden = Dim<"hidden", 768>;
using M = Mesh<Axis<"dp", 2>, Axis<"tp", 4>>;
using X = Tensor<DType::bf16, Shape<Dim<"batch", 8>, Seq, Hidden>>;
}  // namespace

TEST_CASE("static sharding is checked and computed at compile time", "[spec][typed]") {
  constexpr Sharded<X, M, Spec<Shard<"dp">, Replicate, Shard<"tp">>> x{};
  STATIC_REQUIRE(x.local_shape() == TensorShape{{"batch", 4}, {"seq", 1024}, {"hidden", 192}});
  STATIC_REQUIRE(x.local_bytes() == 4 * 1024 * 192 * 2);
  STATIC_REQUIRE(x.slice(7).offset[0] == 4);  // device 7 = (dp=1, tp=3)
  STATIC_REQUIRE(x.slice(7).offset[2] == 3 * 192);
  STATIC_REQUIRE(X{}.bytes() == 8 * 1024 * 768 * 2);
  // The typed path and the text path agree.
  REQUIRE(x.local_shape() == local_shape(parse_shape("batch=8,seq=1024,hidden=768"),
                                         parse_spec("S(dp),R,S(tp)"), parse_mesh("dp=2,tp=4")));

  // Partial over an axis, a dim split over two axes in inner-outer order.
  using P = Mesh<Axis<"dp", 2>, Axis<"tp", 4>, Axis<"pp", 2>>;
  constexpr Sharded<X, P, Spec<Replicate, Shard<"tp", "dp">, Replicate, Partial<"pp">>> y{};
  STATIC_REQUIRE(y.local_shape().extent(TensorDim{1}) == 128);
  STATIC_REQUIRE(y.spec().is_partial());
  STATIC_REQUIRE(y.slice(2).offset[1] == 2 * 128);  // device 2 = (dp=0, tp=1, pp=0): shard 1*2+0
}

TEST_CASE("dynamic extents are checked at run time", "[spec][typed]") {
  using Dyn = Tensor<DType::fp32, Shape<Batch, Hidden>>;
  using S = Sharded<Dyn, M, Spec<Shard<"dp", "tp">, Replicate>>;
  const S ok{Dyn{Shape<Batch, Hidden>{Batch{16}}}, "activation"};
  REQUIRE(ok.local_shape().extent(TensorDim{0}) == 2);
  REQUIRE_THROWS_WITH(
      (S{Dyn{Shape<Batch, Hidden>{Batch{6}}}, "activation"}),
      Catch::Contains("spec 'S(dp,tp),R' of activation (batch=6, hidden=768)") &&
          Catch::Contains("dim 0 ('batch', extent 6) does not divide evenly into 8"));
}
