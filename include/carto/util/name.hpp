// carto/util/name.hpp — short names as constexpr values and as template arguments.
//
// Design note: mesh axes and tensor dims are named ("dp", "tp", "hidden"). A Name is a value of at
// most kMaxNameLength characters that lives in constexpr variables; FixedString carries a string
// literal as a template argument (Axis<"dp", 2>). The tag keeps axis names and dim names apart so
// that one cannot be passed where the other is expected.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

#include "carto/error.hpp"

namespace carto {

inline constexpr std::size_t kMaxNameLength = 23;

template <class Tag>
class BasicName {
 public:
  constexpr BasicName() = default;
  constexpr BasicName(
      std::string_view text) {  // NOLINT(google-explicit-constructor): names read as strings
    if (text.size() > kMaxNameLength) {
      detail::fail("carto: name '", text, "' is ", text.size(), " characters long; at most ",
                   kMaxNameLength, " are allowed");
    }
    std::copy(text.begin(), text.end(), chars_.begin());
    size_ = static_cast<std::uint8_t>(text.size());
  }
  constexpr BasicName(const char* text) : BasicName(std::string_view(text)) {}  // NOLINT

  [[nodiscard]] constexpr std::string_view view() const { return {chars_.data(), size_}; }
  [[nodiscard]] constexpr bool empty() const { return size_ == 0; }

  friend constexpr bool operator==(const BasicName& a, const BasicName& b) {
    return a.view() == b.view();
  }
  friend constexpr bool operator<(const BasicName& a, const BasicName& b) {
    return a.view() < b.view();
  }
  friend std::ostream& operator<<(std::ostream& out, const BasicName& name) {
    return out << name.view();
  }

 private:
  std::array<char, kMaxNameLength + 1> chars_{};
  std::uint8_t size_ = 0;
};

using AxisName = BasicName<struct AxisNameTag>;
using DimName = BasicName<struct DimNameTag>;

// A string literal as a template argument: Dim<"hidden", 768>, Axis<"tp", 8>.
template <std::size_t N>
struct FixedString {
  char chars[N]{};
  constexpr FixedString(const char (&text)[N]) {  // NOLINT(google-explicit-constructor)
    std::copy(text, text + N, chars);
  }
  [[nodiscard]] constexpr std::string_view view() const { return {chars, N - 1}; }
};

// True when a character may appear in a name: letters, digits and '_'.
constexpr bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

constexpr bool is_valid_name(std::string_view text) {
  if (text.empty() || text.size() > kMaxNameLength) return false;
  if (text[0] >= '0' && text[0] <= '9') return false;
  return std::all_of(text.begin(), text.end(), is_name_char);
}

}  // namespace carto
