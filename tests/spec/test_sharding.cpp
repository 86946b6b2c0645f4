#include <carto/spec.hpp>
#include <catch2/catch.hpp>

using namespace carto;

TEST_CASE("compile-time specs convert to run-time values", "[spec][sharding]") {
  constexpr ShardingSpec s = Spec<Shard<"dp">, Replicate, Shard<"tp">>::value();
  STATIC_REQUIRE(s.rank() == 3);
  STATIC_REQUIRE(s.axes(TensorDim{0}).size() == 1);
  STATIC_REQUIRE(s.axes(TensorDim{0})[0] == AxisName("dp"));
  STATIC_REQUIRE(s.axes(TensorDim{1}).empty());
  STATIC_REQUIRE(!s.is_partial());

  constexpr ShardingSpec p = Spec<Shard<"dp", "tp">, Replicate, Partial<"pp">>::value();
  STATIC_REQUIRE(Spec<Shard<"dp", "tp">, Replicate, Partial<"pp">>::rank == 2);
  STATIC_REQUIRE(p.rank() == 2);
  STATIC_REQUIRE(p.axes(TensorDim{0}).size() == 2);
  STATIC_REQUIRE(p.axes(TensorDim{0})[1] == AxisName("tp"));
  STATIC_REQUIRE(p.is_partial());
  STATIC_REQUIRE(p.uses("pp"));
  STATIC_REQUIRE(!p.uses("zz"));
  REQUIRE(p == parse_spec("S(dp,tp),R|P(pp)"));
}

TEST_CASE("spec equality: ordered per dim, partial as a set", "[spec][sharding]") {
  REQUIRE(parse_spec("R,R|P(dp,tp)") == parse_spec("R,R|P(tp,dp)"));
  REQUIRE_FALSE(parse_spec("S(dp,tp),R") == parse_spec("S(tp,dp),R"));
  REQUIRE_FALSE(parse_spec("S(dp),R") == parse_spec("R,S(dp)"));
  REQUIRE_FALSE(parse_spec("R,R|P(dp)") == parse_spec("R,R|P(dp,tp)"));
  REQUIRE(ShardingSpec::replicated(3) == parse_spec("R,R,R"));
  REQUIRE(ShardingSpec::replicated(3).is_replicated());
  REQUIRE_FALSE(parse_spec("R|P(dp)").is_replicated());
}

TEST_CASE("validation reports each problem with the tensor, dim, sizes and spec",
          "[spec][sharding]") {
  const DeviceMesh mesh = parse_mesh("dp=2,tp=4");
  const TensorShape x = parse_shape("batch=8,seq=30,hidden=64");

  SECTION("valid") {
    REQUIRE(validate(x, parse_spec("S(dp),R,S(tp)"), mesh).ok());
    REQUIRE_NOTHROW(check_spec(x, parse_spec("S(dp,tp),R,R"), mesh));
    REQUIRE_NOTHROW(check_spec(x, parse_spec("R,R,S(tp)|P(dp)"), mesh));
  }
  SECTION("rank mismatch") {
    const SpecCheck c = validate(x, parse_spec("S(dp),R"), mesh);
    REQUIRE(c.problem == SpecProblem::rank_mismatch);
    REQUIRE_THROWS_WITH(
        check_spec(x, parse_spec("S(dp),R"), mesh, "activation"),
        Catch::Contains("spec 'S(dp),R' of activation (batch=8, seq=30, hidden=64)") &&
            Catch::Contains("the spec has 2 dims but the tensor has rank 3"));
  }
  SECTION("unknown axis") {
    const SpecCheck c = validate(x, parse_spec("S(dp),R,S(mp)"), mesh);
    REQUIRE(c.problem == SpecProblem::unknown_axis);
    REQUIRE(c.dim == 2);
    REQUIRE(c.axis == AxisName("mp"));
    REQUIRE_THROWS_WITH(check_spec(x, parse_spec("R,R,R|P(mp)"), mesh, "w"),
                        Catch::Contains("axis 'mp' is not an axis of the mesh (in P(...))") &&
                            Catch::Contains("{dp:2, tp:4}"));
  }
  SECTION("axis used twice") {
    const SpecCheck c = validate(x, parse_spec("S(dp),R,S(tp,dp)"), mesh);
    REQUIRE(c.problem == SpecProblem::axis_used_twice);
    REQUIRE(c.dim == 2);
    REQUIRE(c.axis == AxisName("dp"));
    REQUIRE_THROWS_WITH(check_spec(x, parse_spec("S(tp),R,R|P(tp)"), mesh),
                        Catch::Contains("mesh axis 'tp' is used more than once (again in P(...))"));
  }
  SECTION("uneven split") {
    const SpecCheck c = validate(x, parse_spec("R,S(tp),R"), mesh);
    REQUIRE(c.problem == SpecProblem::uneven_split);
    REQUIRE(c.dim == 1);
    REQUIRE(c.extent == 30);
    REQUIRE(c.divisor == 4);
    REQUIRE_THROWS_WITH(check_spec(x, parse_spec("R,S(tp),R"), mesh, "x"),
                        Catch::Contains("dim 1 ('seq', extent 30) does not divide evenly into 4 "
                                        "shards (axis tp)"));
    REQUIRE_THROWS_WITH(local_shape(x, parse_spec("R,S(dp,tp),R"), mesh),
                        Catch::Contains("into 8 shards (axes dp,tp)"));
  }
}
