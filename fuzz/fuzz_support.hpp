// fuzz/fuzz_support.hpp — what every libFuzzer target of fuzz/ shares.
//
// Design note. A target feeds the bytes to one parser. A carto::Error is the parser refusing bad
// input, which is the right answer; anything else — a crash, a sanitizer report, another
// exception, a hang — is a finding. Where a parser has a printed form, the target also checks the
// round trip: the printed form of what was parsed parses back to an equal value (broken() stops
// the run with both texts, so libFuzzer keeps the input).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "carto/error.hpp"

namespace carto::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

template <class T>
std::string printed(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Reports a broken property and aborts (libFuzzer saves the input as a crash).
[[noreturn]] inline void broken(std::string_view what, std::string_view input,
                                std::string_view detail) {
  std::fprintf(stderr, "carto fuzz: %.*s\n  input:  '%.*s'\n  detail: %.*s\n",
               static_cast<int>(what.size()), what.data(), static_cast<int>(input.size()),
               input.data(), static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// Parses `text` with `parse`; nothing when it throws a carto::Error (a refusal).
template <class Parse>
auto parsed(Parse&& parse, std::string_view text) -> std::optional<decltype(parse(text))> {
  try {
    return parse(text);
  } catch (const Error&) {
    return std::nullopt;
  }
}

// Runs `work`, for which a carto::Error (a refusal, e.g. of a size that overflows) is an answer.
template <class Work>
void allowing_refusal(Work&& work) {
  try {
    work();
  } catch (const Error&) {
  }
}

// The round trip of a value that parsed: print it, parse the print, compare.
template <class T, class Parse>
void check_round_trip(const T& value, Parse&& parse, std::string_view input,
                      std::string_view kind) {
  const std::string text = printed(value);
  try {
    if (!(parse(std::string_view(text)) == value)) {
      broken(std::string(kind) + ": the printed form parses to another value", input, text);
    }
  } catch (const Error& e) {
    broken(std::string(kind) + ": the printed form does not parse", input,
           text + " -> " + e.what());
  }
}

// A whole target for a parser with a printed form: parse the bytes; a value that parses must
// round-trip, and `then(value)` runs on it allowing refusals.
template <class Parse, class Then>
int round_trip_target(const std::uint8_t* data, std::size_t size, Parse&& parse,
                      std::string_view kind, Then&& then) {
  const std::string_view text = as_text(data, size);
  if (const auto value = parsed(parse, text)) {
    check_round_trip(*value, parse, text, kind);
    allowing_refusal([&] { then(*value); });
  }
  return 0;
}

}  // namespace carto::fuzz
