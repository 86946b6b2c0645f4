#include <carto/spec.hpp>
#include <catch2/catch.hpp>
#include <set>

using namespace carto;

TEST_CASE("dtype sizes and names", "[spec][dtype]") {
  // Sizes from the formats' definitions: IEEE binary32, bfloat16, IEEE binary16, OCP FP8.
  STATIC_REQUIRE(size_bytes(DType::fp32) == 4);
  STATIC_REQUIRE(size_bytes(DType::bf16) == 2);
  STATIC_REQUIRE(size_bytes(DType::fp16) == 2);
  STATIC_REQUIRE(size_bytes(DType::fp8_e4m3) == 1);
  STATIC_REQUIRE(size_bytes(DType::fp8_e5m2) == 1);
  for (DType t : kAllDTypes) {
    REQUIRE(parse_dtype(to_string_view(t)) == t);
  }
  REQUIRE_FALSE(parse_dtype("fp64").has_value());
  REQUIRE_FALSE(parse_dtype("").has_value());
}

TEST_CASE("static and dynamic dims behind one API", "[spec][shape]") {
  using Batch = Dim<"batch">;
  using Hidden = Dim<"hidden", 768>;
  STATIC_REQUIRE(Hidden::is_static);
  STATIC_REQUIRE(Hidden::extent() == 768);
  STATIC_REQUIRE(!Batch::is_static);
  STATIC_REQUIRE(std::is_empty_v<Hidden>);

  using S = Shape<Batch, Dim<"seq", 1024>, Hidden>;
  STATIC_REQUIRE(S::rank == 3);
  STATIC_REQUIRE(!S::is_static);
  constexpr S s{Batch{8}};
  STATIC_REQUIRE(s.value().extent(TensorDim{0}) == 8);
  STATIC_REQUIRE(s.value().extent(TensorDim{2}) == 768);
  STATIC_REQUIRE(s.value().numel() == 8 * 1024 * 768);
  STATIC_REQUIRE(s.value() == TensorShape{{"batch", 8}, {"seq", 1024}, {"hidden", 768}});

  using Static = Shape<Dim<"r", 3>, Dim<"c", 5>>;
  STATIC_REQUIRE(Static::is_static);
  STATIC_REQUIRE(Static::static_value().numel() == 15);

  REQUIRE_THROWS_WITH(Batch{0}, Catch::Contains("dim 'batch' got extent 0"));
  REQUIRE_THROWS_WITH((TensorShape{{"h", -3}}), Catch::Contains("dim 'h' has extent -3"));
  REQUIRE_THROWS_WITH(TensorShape{}.extent(TensorDim{0}), Catch::Contains("out of range"));
  REQUIRE_THROWS_WITH(Degree{0}, Catch::Contains("must be positive"));
  REQUIRE(Degree{3}.get() == 3);
}

TEST_CASE("names", "[spec][name]") {
  REQUIRE(is_valid_name("tp"));
  REQUIRE(is_valid_name("axis_2"));
  REQUIRE_FALSE(is_valid_name(""));
  REQUIRE_FALSE(is_valid_name("2d"));
  REQUIRE_FALSE(is_valid_name("a-b"));
  REQUIRE_THROWS_WITH(AxisName(std::string_view("abcdefghijklmnopqrstuvwxyz")),
                      Catch::Contains("at most 23"));
  STATIC_REQUIRE(AxisName("dp") == AxisName("dp"));
  STATIC_REQUIRE(!(AxisName("dp") == AxisName("tp")));
}

TEST_CASE("mesh coordinates are row-major and invert", "[spec][mesh]") {
  using M = Mesh<Axis<"dp", 2>, Axis<"tp", 4>>;
  STATIC_REQUIRE(M::num_devices == 8);
  STATIC_REQUIRE(M::value().num_devices() == 8);
  STATIC_REQUIRE(M::value().coord(5)[0] == 1);  // 5 = 1*4 + 1
  STATIC_REQUIRE(M::value().coord(5)[1] == 1);
  STATIC_REQUIRE(M::value().coord(3)[1] == 3);

  for (const char* text : {"x=5", "a=2,b=3", "pp=2,dp=3,tp=4", "a=1,b=1,c=7"}) {
    const DeviceMesh mesh = parse_mesh(text);
    std::set<std::vector<std::int64_t>> seen;
    for (std::int64_t d = 0; d < mesh.num_devices(); ++d) {
      const MeshCoord c = mesh.coord(d);
      REQUIRE(mesh.device(c) == d);
      // Row-major by definition: device = sum_i c[i] * prod_{j>i} size[j].
      std::int64_t expect = 0;
      std::int64_t stride = 1;
      for (std::size_t i = mesh.num_axes(); i-- > 0;) {
        REQUIRE(c[i] >= 0);
        REQUIRE(c[i] < mesh.axis(i).size);
        expect += c[i] * stride;
        stride *= mesh.axis(i).size;
      }
      REQUIRE(expect == d);
      seen.insert(std::vector<std::int64_t>(c.begin(), c.end()));
    }
    REQUIRE(seen.size() == static_cast<std::size_t>(mesh.num_devices()));
  }
}

TEST_CASE("invalid meshes are errors that name the problem", "[spec][mesh]") {
  REQUIRE_THROWS_WITH((DeviceMesh{{"dp", 2}, {"dp", 4}}),
                      Catch::Contains("axes 0 and 1 are both named 'dp'"));
  REQUIRE_THROWS_WITH((DeviceMesh{{"dp", 0}}), Catch::Contains("'dp' has size 0"));
  REQUIRE_THROWS_WITH((DeviceMesh{{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}}),
                      Catch::Contains("1 to 3 axes"));
  REQUIRE_THROWS_WITH((DeviceMesh{{"", 2}}), Catch::Contains("has name ''"));
  REQUIRE_THROWS_WITH(parse_mesh("dp=2").index_of("tp"), Catch::Contains("has no axis named 'tp'"));
  REQUIRE_THROWS_WITH(parse_mesh("dp=2").coord(2),
                      Catch::Contains("device 2 is not in mesh {dp:2}"));
}
