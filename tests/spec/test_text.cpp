// Text forms: print/parse round trips over every enumerated spec, errors that name the position and
// what was expected, and a fuzz run in which nothing but carto::Error may come out of the parsers.
#include <carto/spec.hpp>
#include <catch2/catch.hpp>
#include <random>
#include <string>

#include "support/spec_domains.hpp"

using namespace carto;

TEST_CASE("print then parse gives the same spec, for every enumerated spec", "[spec][text]") {
  std::size_t n = 0;
  for (const DeviceMesh& mesh : testing::small_meshes()) {
    for (const TensorShape& shape : testing::small_shapes()) {
      for (const ShardingSpec& s :
           enumerate_specs(shape, mesh, {.partial = PartialSpecs::include})) {
        const std::string text = to_string(s);
        INFO(text);
        REQUIRE(parse_spec(text) == s);
        REQUIRE(to_string(parse_spec(text)) == text);
        ++n;
      }
    }
  }
  REQUIRE(n > 1500);
}

TEST_CASE("the documented text forms", "[spec][text]") {
  REQUIRE(to_string(Spec<Shard<"dp">, Replicate, Shard<"tp">>::value()) == "S(dp),R,S(tp)");
  REQUIRE(to_string(Spec<Shard<"dp", "tp">, Replicate>::value()) == "S(dp,tp),R");
  REQUIRE(to_string(Spec<Replicate, Replicate, Partial<"tp">>::value()) == "R,R|P(tp)");
  REQUIRE(parse_spec(" S( dp , tp ) , R | P ( pp ) ") == parse_spec("S(dp,tp),R|P(pp)"));
  // Rank 0: the empty spec, possibly partial (a scalar loss summed over dp).
  REQUIRE(parse_spec("").rank() == 0);
  REQUIRE(parse_spec("|P(dp)").is_partial());
  REQUIRE(to_string(parse_spec("|P(dp)")) == "|P(dp)");
}

TEST_CASE("malformed specs name the position and what was expected", "[spec][text]") {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"S(dp,,tp)", "at position 5: expected a mesh axis name, found ','"},
      {"S(dp),Q", "at position 6: expected 'R' or 'S(...)', found 'Q'"},
      {"R,R|P(", "at position 6: expected a mesh axis name, found the end"},
      {"S(dp)x", "at position 5: expected ',' or '|P(...)' or the end, found 'x'"},
      {"S dp", "at position 2: expected '(' after S or P, found 'd'"},
      {"S(dp", "at position 4: expected ',' or ')' in an axis list, found the end"},
      {"R,", "at position 2: expected 'R' or 'S(...)', found the end"},
      {"R|S(dp)", "at position 2: expected 'P' after '|', found 'S'"},
      {"R|P(dp)|P(tp)", "at position 7: expected the end, found '|'"},
      {"S(a,b,c,d)", "at position 8: expected ')': at most 3 axes in one list"},
      {"S(1x)", "at position 2: expected a mesh axis name, found '1'"},
      {"R,R,R,R,R,R,R,R,R", "a spec has at most 8 dims"},
      {"S(abcdefghijabcdefghijabcd)", "expected a name of at most 23 characters"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    REQUIRE_THROWS_AS(parse_spec(c.text), Error);
    REQUIRE_THROWS_WITH(
        parse_spec(c.text),
        Catch::StartsWith(std::string("carto: cannot parse sharding spec '") + c.text + "': ") &&
            Catch::Contains(c.message));
  }
}

TEST_CASE("meshes and shapes print and parse", "[spec][text]") {
  for (const DeviceMesh& mesh : testing::small_meshes()) {
    REQUIRE(parse_mesh(to_string(mesh)) == mesh);
  }
  for (const TensorShape& shape : testing::small_shapes()) {
    REQUIRE(parse_shape(to_string(shape)) == shape);
  }
  REQUIRE(parse_mesh("dp=2, tp=4") == DeviceMesh{{"dp", 2}, {"tp", 4}});
  REQUIRE(parse_mesh("8x8") == DeviceMesh{{"x", 8}, {"y", 8}});
  REQUIRE(parse_mesh("16") == DeviceMesh{{"x", 16}});
  REQUIRE(parse_mesh("2x2x4") == DeviceMesh{{"x", 2}, {"y", 2}, {"z", 4}});
  REQUIRE_THROWS_WITH(parse_mesh("2x2x2x2"), Catch::Contains("at most 3 axes"));
  REQUIRE_THROWS_WITH(parse_mesh("2x0"), Catch::Contains("an axis size of at least 1"));
  REQUIRE_THROWS_WITH(parse_mesh("2y3"), Catch::Contains("at position 1: expected 'x' or the end"));
  REQUIRE(parse_shape("8,2048,12288") == TensorShape{{"d0", 8}, {"d1", 2048}, {"d2", 12288}});
  REQUIRE_THROWS_WITH(parse_mesh("dp=0"), Catch::Contains("expected an axis size of at least 1"));
  REQUIRE_THROWS_WITH(parse_mesh("dp=2,dp=2"), Catch::Contains("both named 'dp'"));
  REQUIRE_THROWS_WITH(parse_mesh("dp"), Catch::Contains("at position 2: expected ':' or '='"));
  REQUIRE_THROWS_WITH(parse_mesh("a=1,b=1,c=1,d=1"), Catch::Contains("at most 3 axes"));
  REQUIRE_THROWS_WITH(parse_mesh("dp=99999999999999999999"),
                      Catch::Contains("an integer that fits in 64 bits"));
  REQUIRE_THROWS_WITH(parse_shape("8,,2"),
                      Catch::Contains("at position 2: expected a dim extent or name"));
  REQUIRE_THROWS_WITH(parse_shape("8,0"), Catch::Contains("a dim extent of at least 1"));
}

TEST_CASE("fuzz: random strings give a value or a carto::Error, never a crash", "[spec][text]") {
  std::mt19937 rng(7);
  const std::string alphabet = "SRP(),|dptx01 _:={}";
  std::size_t parsed = 0;
  std::size_t rejected = 0;
  for (int trial = 0; trial < 6000; ++trial) {
    std::string text;
    const int length = std::uniform_int_distribution<int>(0, 24)(rng);
    const bool bytes = trial % 3 == 0;  // a third are arbitrary bytes, NUL included
    for (int i = 0; i < length; ++i) {
      text +=
          bytes ? static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng))
                : alphabet[std::uniform_int_distribution<std::size_t>(0, alphabet.size() - 1)(rng)];
    }
    auto attempt = [&](auto&& parse) {
      try {
        parse(text);
        ++parsed;
      } catch (const Error&) {
        ++rejected;
      }
    };
    attempt([](const std::string& t) {
      const ShardingSpec s = parse_spec(t);
      // A string that parses prints to a canonical form that parses to the same spec.
      if (!(parse_spec(to_string(s)) == s)) throw std::logic_error("round trip failed: " + t);
    });
    attempt([](const std::string& t) {
      const DeviceMesh m = parse_mesh(t);
      if (!(parse_mesh(to_string(m)) == m)) throw std::logic_error("mesh round trip failed: " + t);
    });
    attempt([](const std::string& t) { (void)parse_shape(t); });
  }
  // Both outcomes occur, so the fuzz exercises the success and the error paths.
  REQUIRE(parsed > 100);
  REQUIRE(rejected > 1000);
}
