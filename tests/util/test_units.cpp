#include <carto/util/units.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

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

namespace {

// The units format_bytes may print and their sizes, written out here apart from units.hpp.
struct PrintedUnit {
  std::string_view name;
  long double bytes;
};
constexpr PrintedUnit kPrinted[] = {{"B", 1.0L},
                                    {"KiB", 1024.0L},
                                    {"MiB", 1048576.0L},
                                    {"GiB", 1073741824.0L},
                                    {"TiB", 1099511627776.0L},
                                    {"PiB", 1125899906842624.0L}};

// The sizes of a round trip: every power of two and its neighbours, powers of ten, 2^63-1, and a
// fixed pseudo-random spread over every magnitude.
std::vector<std::int64_t> round_trip_sizes() {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::vector<std::int64_t> sizes = {0, 1, 999, 1000, 1023, kMax, kMax - 1, kMax / 2};
  for (int p = 1; p < 63; ++p) {
    const std::int64_t two = std::int64_t{1} << p;
    sizes.insert(sizes.end(), {two - 1, two, two + 1, two + two / 2, two + two / 3});
  }
  for (std::int64_t ten = 10; ten <= kMax / 10; ten *= 10) sizes.push_back(ten);
  std::uint64_t state = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 2000; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const int bits = 1 + static_cast<int>((state >> 33) % 63);  // 1..63 bits
    sizes.push_back(static_cast<std::int64_t>((state >> 1) >> (63 - bits)));
  }
  return sizes;
}

}  // namespace

TEST_CASE("format_bytes prints what parse_bytes reads back to the printed precision",
          "[util][units]") {
  constexpr long double kTwo63 = 9223372036854775808.0L;
  int at_pib = 0;
  for (const std::int64_t n : round_trip_sizes()) {
    const std::string text = carto::format_bytes(n);
    INFO(n << " printed as '" << text << "'");
    const std::size_t space = text.find(' ');
    REQUIRE(space != std::string::npos);
    const std::string_view unit = std::string_view(text).substr(space + 1);
    const PrintedUnit* u = nullptr;
    for (const PrintedUnit& p : kPrinted)
      if (p.name == unit) u = &p;
    REQUIRE(u != nullptr);
    at_pib += unit == "PiB" ? 1 : 0;
    std::int64_t back = -1;
    REQUIRE_NOTHROW(back = parse_bytes(text));
    // Exact in bytes; else half of the last printed digit (0.01 units), or a whole one where the
    // nearest two-digit value times the unit would reach 2^63 (format_bytes rounds down there),
    // plus the byte parse_bytes drops rounding down to whole bytes.
    const long double value = static_cast<long double>(n) / u->bytes;
    const bool rounds_down = std::round(value * 100) / 100 * u->bytes >= kTwo63;
    const long double slack =
        u->bytes == 1 ? 0 : (rounds_down ? 0.01L : 0.005L) * u->bytes * (1 + 1e-9L) + 1;
    REQUIRE(std::fabs(static_cast<long double>(back) - static_cast<long double>(n)) <= slack);
  }
  REQUIRE(at_pib > 100);
  REQUIRE(carto::format_bytes(std::numeric_limits<std::int64_t>::max()) == "8191.99 PiB");
  REQUIRE(carto::format_bytes(std::int64_t{1} << 50) == "1.00 PiB");
}

TEST_CASE("parse_bytes reads every unit format_bytes prints, and the decimal PB", "[util][units]") {
  for (const PrintedUnit& u : kPrinted) {
    INFO(u.name);
    REQUIRE(parse_bytes("3 " + std::string(u.name)) == static_cast<std::int64_t>(3 * u.bytes));
    REQUIRE(parse_bytes("1.5" + std::string(u.name == "B" ? "KiB" : u.name)) ==
            static_cast<std::int64_t>(1.5L * (u.name == "B" ? 1024.0L : u.bytes)));
  }
  REQUIRE(parse_bytes("2PB") == 2'000'000'000'000'000LL);
  // 2^63-1 bytes as a plain number is exact; 8192 PiB (2^63) is one byte too many.
  REQUIRE(parse_bytes("9223372036854775807") == std::numeric_limits<std::int64_t>::max());
  REQUIRE_THROWS_WITH(parse_bytes("8192 PiB"), Catch::Contains("at most 2^63-1 bytes"));
  REQUIRE_THROWS_WITH(parse_bytes("9223372036854775808"), Catch::Contains("too large"));
}
