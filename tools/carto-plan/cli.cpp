#include "cli.hpp"

#include <carto/util/numbers.hpp>
#include <carto/util/units.hpp>
#include <cmath>
#include <cstdio>

namespace carto::cli {

Flags::Flags(std::string command, std::vector<FlagSpec> specs, const std::vector<std::string>& args)
    : command_(std::move(command)), specs_(std::move(specs)) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0) {
      throw UsageError(command_ + ": unexpected argument '" + arg + "'; flags start with --");
    }
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name.resize(eq);
    }
    const FlagSpec& s = spec(name);
    if (values_.count(name) != 0 && !s.repeatable)
      throw UsageError(command_ + ": --" + name + " is given twice");
    if (!s.takes_value) {
      if (inline_value) throw UsageError(command_ + ": --" + name + " takes no value");
      values_[name] = "";
      continue;
    }
    if (inline_value) {
      values_[name] = *inline_value;
    } else if (i + 1 < args.size()) {
      values_[name] = args[++i];
    } else {
      throw UsageError(command_ + ": --" + name + " needs a value");
    }
    repeated_[name].push_back(values_[name]);
  }
}

const FlagSpec& Flags::spec(std::string_view name) const {
  for (const FlagSpec& s : specs_) {
    if (s.name == name) return s;
  }
  throw UsageError(command_ + ": unknown flag --" + std::string(name) + " (see " + command_ +
                   " --help)");
}

bool Flags::has(std::string_view name) const { return values_.find(name) != values_.end(); }

std::vector<std::string> Flags::all(std::string_view name) const {
  (void)spec(name);
  const auto it = repeated_.find(name);
  return it == repeated_.end() ? std::vector<std::string>{} : it->second;
}

std::optional<std::string> Flags::text(std::string_view name) const {
  (void)spec(name);
  const auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::int64_t> Flags::positive(std::string_view name) const {
  const auto t = text(name);
  if (!t) return std::nullopt;
  const std::optional<std::int64_t> v = parse_int64(*t);
  if (!v || *v < 1) {
    throw UsageError(command_ + ": --" + std::string(name) + " needs a positive integer, got '" +
                     *t + "'");
  }
  return v;
}

std::optional<std::int64_t> Flags::positive_at_most(std::string_view name, std::int64_t limit,
                                                    std::string_view why) const {
  const std::optional<std::int64_t> v = positive(name);
  if (v && *v > limit) {
    throw UsageError(command_ + ": --" + std::string(name) + " is " + std::to_string(*v) +
                     "; at most " + std::to_string(limit) + " is supported (" + std::string(why) +
                     ")");
  }
  return v;
}

std::optional<double> Flags::positive_real(std::string_view name) const {
  const auto t = text(name);
  if (!t) return std::nullopt;
  const std::optional<double> v = parse_real(*t);
  if (!v || !(*v > 0)) {
    throw UsageError(command_ + ": --" + std::string(name) + " needs a positive number, got '" +
                     *t + "'");
  }
  return v;
}

std::optional<double> Flags::probability(std::string_view name) const {
  const auto t = text(name);
  if (!t) return std::nullopt;
  const std::optional<double> v = parse_real(*t);
  if (!v || !(*v >= 0.0 && *v < 1.0)) {
    throw UsageError(command_ + ": --" + std::string(name) +
                     " needs a probability in [0, 1), got '" + *t + "'");
  }
  return v;
}

std::optional<std::string> Flags::choice(std::string_view name,
                                         const std::vector<std::string>& choices) const {
  const auto t = text(name);
  if (!t) return std::nullopt;
  for (const std::string& c : choices) {
    if (c == *t) return c;
  }
  std::string list;
  for (const std::string& c : choices) list += (list.empty() ? "" : "|") + c;
  throw UsageError(command_ + ": --" + std::string(name) + " is one of " + list + ", got '" + *t +
                   "'");
}

std::string Flags::help() const {
  std::string out;
  for (const FlagSpec& s : specs_) {
    std::string left = "  --" + s.name + (s.takes_value ? " VALUE" : "");
    if (left.size() < 26) left.resize(26, ' ');
    out += left + " " + s.help + "\n";
  }
  return out;
}

std::string grouped(std::int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

namespace {
std::string scaled(double value, const char* const* units, int count, double base) {
  int u = 0;
  while (std::fabs(value) >= base && u + 1 < count) {
    value /= base;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", value, units[u]);
  return buf;
}
}  // namespace

std::string bytes(std::int64_t value) { return format_bytes(value); }

std::string flops(std::int64_t value) {
  static const char* const units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", "EFLOP"};
  return scaled(static_cast<double>(value), units, 7, 1000.0);
}

std::string seconds(double s) {
  char buf[32];
  if (s == 0) return "0";
  if (s < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.2f us", s * 1e6);
  } else if (s < 1) {
    std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.3f s", s);
  }
  return buf;
}

}  // namespace carto::cli
