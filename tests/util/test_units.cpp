#include <carto/util/units.hpp>
#include <catch2/catch.hpp>

using carto::parse_bytes;

TEST_CASE("memory sizes in binary and decimal units", "[util][units]") {
  REQUIRE(parse_bytes("80GiB") == 80LL * 1024 * 1024 * 1024);
  REQUIRE(parse_bytes("80 GiB") == 85899345920LL);
  REQUIRE(parse_bytes("40GB") == 40000000000LL);
  REQUIRE(parse_bytes("512MiB") == 512LL * 1024 * 1024);
  REQUIRE(parse_bytes("1.5GiB") == 3LL * 512 * 1024 * 1024);
  REQUIRE(parse_bytes("12345") == 12345);
  REQUIRE(parse_bytes("7B") == 7);
  REQUIRE(parse_bytes("2TB") == 2000000000000LL);
  REQUIRE(carto::format_bytes(85899345920LL) == "80.00 GiB");
  REQUIRE(carto::format_bytes(512) == "512 B");
}

TEST_CASE("bad memory sizes name the text and the accepted forms", "[util][units]") {
  REQUIRE_THROWS_WITH(parse_bytes("80GiBs"), Catch::Contains("'80GiBs': unknown unit 'GiBs'"));
  REQUIRE_THROWS_WITH(parse_bytes("GiB"), Catch::Contains("does not start with a number"));
  REQUIRE_THROWS_WITH(parse_bytes(""), Catch::Contains("does not start with a number"));
  REQUIRE_THROWS_WITH(parse_bytes("1.5"), Catch::Contains("a byte count is a whole number"));
  REQUIRE_THROWS_WITH(parse_bytes("99999999999TiB"), Catch::Contains("too large"));
  REQUIRE_THROWS_WITH(parse_bytes("999999999999999999999"), Catch::Contains("too large"));
  REQUIRE_THROWS_WITH(parse_bytes("80 gib"), Catch::Contains("e.g. 80GiB"));
}
