#include <carto/error.hpp>
#include <catch2/catch.hpp>
#include <string>

namespace {
int positive_or_throw(int x) {
  CARTO_CHECK(x > 0, "x must be positive, got ", x);
  return x;
}
enum FakeStatus { kFakeOk = 0, kFakeOutOfMemory = 2 };
const char* describe(FakeStatus s) { return s == kFakeOutOfMemory ? "out of memory" : "ok"; }
FakeStatus fake_call(FakeStatus s) { return s; }
}  // namespace

TEST_CASE("CARTO_CHECK names the condition, the message and the location", "[util][error]") {
  REQUIRE(positive_or_throw(3) == 3);
  REQUIRE_THROWS_AS(positive_or_throw(-1), carto::Error);
  REQUIRE_THROWS_WITH(positive_or_throw(-1),
                      Catch::StartsWith("check 'x > 0' failed: x must be positive, got -1 (") &&
                          Catch::Contains("test_error.cpp:"));
}

TEST_CASE("CARTO_CHECK_STATUS names the call, the location and the status", "[util][error]") {
  REQUIRE_NOTHROW(CARTO_CHECK_STATUS(fake_call(kFakeOk), kFakeOk, describe));
  REQUIRE_THROWS_WITH(CARTO_CHECK_STATUS(fake_call(kFakeOutOfMemory), kFakeOk, describe),
                      Catch::StartsWith("fake_call(kFakeOutOfMemory) failed at ") &&
                          Catch::EndsWith(": out of memory (status 2)"));
}
