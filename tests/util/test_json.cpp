#include <carto/util/json.hpp>
#include <catch2/catch.hpp>
#include <random>

using carto::Error;
using carto::Json;

TEST_CASE("JSON values round-trip through text", "[util][json]") {
  Json j;
  j["name"] = "gpt3-175b";
  j["flops"]["step"] = 9007199254740993LL;  // 2^53 + 1: must stay exact
  j["ratio"] = 0.1;
  j["tiny"] = 5e-324;
  j["ok"] = true;
  j["none"] = nullptr;
  j["list"].push_back(1);
  j["list"].push_back("two\n\"quoted\"\t\x01");
  j["list"].push_back(Json::object());
  for (int indent : {-1, 0, 2}) {
    const Json back = Json::parse(j.dump(indent));
    REQUIRE(back == j);
    REQUIRE(back.at("flops").at("step").as_int() == 9007199254740993LL);
    REQUIRE(back.at("ratio").as_double() == 0.1);
    REQUIRE(back.at("tiny").as_double() == 5e-324);
  }
  // Member order is insertion order.
  REQUIRE(
      j.dump() ==
      R"({"name":"gpt3-175b","flops":{"step":9007199254740993},"ratio":0.10000000000000001,)"
      R"("tiny":4.9406564584124654e-324,"ok":true,"none":null,"list":[1,"two\n\"quoted\"\t\u0001",{}]})");
}

TEST_CASE("JSON parser: standard forms", "[util][json]") {
  REQUIRE(Json::parse(" [ ] ").as_array().empty());
  REQUIRE(Json::parse("-0.5e2").as_double() == -50.0);
  REQUIRE(Json::parse("123").is_int());
  REQUIRE(Json::parse("1.0").is_number());
  REQUIRE_FALSE(Json::parse("1.0").is_int());
  REQUIRE(Json::parse(R"("\u00e9\ud83d\ude00")").as_string() == "\xc3\xa9\xf0\x9f\x98\x80");
  REQUIRE(Json::parse("99999999999999999999").as_double() == 1e20);  // beyond int64: a double
}

TEST_CASE("JSON errors name the position and what was expected", "[util][json]") {
  REQUIRE_THROWS_WITH(Json::parse(R"({"a":})"),
                      "carto: invalid JSON at position 5: expected a value, found '}'");
  REQUIRE_THROWS_WITH(Json::parse("[1,2"), Catch::Contains("position 4: expected ',' or ']'"));
  REQUIRE_THROWS_WITH(Json::parse(R"({"a":1,"a":2})"), Catch::Contains("member 'a' appears twice"));
  REQUIRE_THROWS_WITH(Json::parse("01"), Catch::Contains("expected the end of the document"));
  REQUIRE_THROWS_WITH(Json::parse(std::string(300, '[')),
                      Catch::Contains("nesting of at most 256"));
  REQUIRE_THROWS_WITH(Json::parse(R"({"a":1})").at("b"), "carto: JSON object has no member 'b'");
  REQUIRE_THROWS_WITH(Json::parse("true").as_int(),
                      "carto: JSON value is a boolean, expected an integer");
}

TEST_CASE("JSON parser fuzz: only carto::Error escapes", "[util][json]") {
  std::mt19937 rng(11);
  const std::string alphabet = R"({}[]",:0123456789.eE+-tfnrulasx\ )";
  int parsed = 0;
  int rejected = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    std::string text;
    const int length = std::uniform_int_distribution<int>(0, 20)(rng);
    for (int i = 0; i < length; ++i) {
      text += alphabet[std::uniform_int_distribution<std::size_t>(0, alphabet.size() - 1)(rng)];
    }
    try {
      const Json j = Json::parse(text);
      REQUIRE(Json::parse(j.dump()) == j);
      ++parsed;
    } catch (const Error&) {
      ++rejected;
    }
  }
  REQUIRE(parsed > 50);
  REQUIRE(rejected > 1000);
}
