// Flag parsing and number formatting shared by carto-plan's subcommands.
//
// Design note: a subcommand declares its flags (name, whether it takes a value, help text); parsing
// rejects unknown flags, missing values and repeated flags with one line that names the flag. Typed
// accessors parse values strictly with carto's one number parser (util/numbers.hpp: no spaces on
// either side, no trailing text; a whole positive integer, a probability in [0, 1), one of a
// listed set of words) and name the flag and the accepted form on error. Every such error is a
// UsageError, which main() prints as one line and turns into exit code 2.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace carto::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct FlagSpec {
  std::string name;  // without the leading "--"
  bool takes_value = true;
  std::string help;
  bool repeatable = false;  // may be given several times (see Flags::all)
};

class Flags {
 public:
  Flags(std::string command, std::vector<FlagSpec> specs, const std::vector<std::string>& args);

  [[nodiscard]] bool has(std::string_view name) const;
  // Every value of a repeatable flag, in order.
  [[nodiscard]] std::vector<std::string> all(std::string_view name) const;
  [[nodiscard]] std::optional<std::string> text(std::string_view name) const;
  // A whole number >= 1.
  [[nodiscard]] std::optional<std::int64_t> positive(std::string_view name) const;
  // A whole number in [1, limit]; `why` says where the limit comes from.
  [[nodiscard]] std::optional<std::int64_t> positive_at_most(std::string_view name,
                                                             std::int64_t limit,
                                                             std::string_view why) const;
  // A finite number > 0 (seconds, ratios).
  [[nodiscard]] std::optional<double> positive_real(std::string_view name) const;
  // A number in [0, 1).
  [[nodiscard]] std::optional<double> probability(std::string_view name) const;
  // One of `choices`.
  [[nodiscard]] std::optional<std::string> choice(std::string_view name,
                                                  const std::vector<std::string>& choices) const;

  [[nodiscard]] std::string help() const;

 private:
  [[nodiscard]] const FlagSpec& spec(std::string_view name) const;
  std::string command_;
  std::vector<FlagSpec> specs_;
  std::map<std::string, std::string, std::less<>> values_;
  std::map<std::string, std::vector<std::string>, std::less<>> repeated_;
};

// 1234567 -> "1,234,567"
std::string grouped(std::int64_t value);
// Bytes in binary units: "1.50 GiB".
std::string bytes(std::int64_t value);
// FLOPs in decimal units: "3.15 TFLOP".
std::string flops(std::int64_t value);
// A duration: "12.50 us", "3.125 ms", "1.500 s".
std::string seconds(double s);

}  // namespace carto::cli
