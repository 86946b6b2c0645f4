// carto/cost/hardware.hpp — hardware profiles (carto/cost/hardware_profile.hpp) as JSON files, and
// the calibrated CPU profile bench_calibrate writes.
//
// JSON load/save round-trips every field; a malformed file or a missing or invalid field is a
// carto::Error naming the field and the file.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "carto/cost/hardware_profile.hpp"
#include "carto/error.hpp"
#include "carto/util/files.hpp"
#include "carto/util/json.hpp"

namespace carto {

// ---- JSON
// ----------------------------------------------------------------------------------------

inline constexpr std::string_view kHardwareProfileFormat = "carto-hardware-profile/1";

inline Json to_json(const HardwareProfile& hw) {
  Json j;
  j["format"] = kHardwareProfileFormat;
  j["name"] = hw.name;
  j["description"] = hw.description;
  Json peak;
  peak["fp32"] = hw.peak_flops.fp32;
  peak["bf16"] = hw.peak_flops.bf16;
  peak["fp16"] = hw.peak_flops.fp16;
  peak["fp8"] = hw.peak_flops.fp8;
  j["peak_flops"] = peak;
  j["matmul_efficiency"] = hw.matmul_efficiency;
  j["memory_efficiency"] = hw.memory_efficiency;
  j["memory_bandwidth"] = hw.memory_bandwidth;
  j["memory_capacity"] = hw.memory_capacity;
  Json links = Json::array();
  for (const LinkLevel& l : hw.links) {
    Json lj;
    lj["name"] = l.name;
    lj["devices"] = l.devices;
    lj["bandwidth"] = l.bandwidth;
    lj["latency"] = l.latency;
    links.push_back(lj);
  }
  j["links"] = links;
  if (!hw.matmul_rates.empty()) {
    Json rates = Json::array();
    for (const MatmulRate& r : hw.matmul_rates) {
      Json rj;
      rj["flops"] = r.flops;
      rj["rate"] = r.rate;
      rates.push_back(rj);
    }
    j["matmul_rates"] = rates;
  }
  if (hw.op_overhead != 0) j["op_overhead"] = hw.op_overhead;
  if (hw.loop_rate != 0) j["loop_rate"] = hw.loop_rate;
  return j;
}

// `source` names the file (or other origin) in error messages.
inline HardwareProfile hardware_profile_from_json(const Json& j, std::string_view source) {
  auto member = [&](const Json& obj, std::string_view key, std::string_view field) -> const Json& {
    if (!obj.is_object()) detail::bad_profile(source, field, "is not a JSON object");
    const Json* v = obj.find(key);
    if (v == nullptr) detail::bad_profile(source, field, "is missing");
    return *v;
  };
  auto number = [&](const Json& obj, std::string_view key, std::string_view field) {
    const Json& v = member(obj, key, field);
    if (!v.is_number()) detail::bad_profile(source, field, "must be a number");
    return v.as_double();
  };
  auto integer = [&](const Json& obj, std::string_view key, std::string_view field) {
    const Json& v = member(obj, key, field);
    if (!v.is_int()) detail::bad_profile(source, field, "must be an integer");
    return v.as_int();
  };
  auto text = [&](const Json& obj, std::string_view key, std::string_view field) {
    const Json& v = member(obj, key, field);
    if (!v.is_string()) detail::bad_profile(source, field, "must be a string");
    return v.as_string();
  };
  if (!j.is_object()) detail::bad_profile(source, "(top level)", "must be a JSON object");
  if (const std::string f = text(j, "format", "format"); f != kHardwareProfileFormat)
    detail::bad_profile(source, "format",
                        detail::concat("is '", f, "', expected '", kHardwareProfileFormat, "'"));
  HardwareProfile hw;
  hw.name = text(j, "name", "name");
  hw.description = text(j, "description", "description");
  const Json& peak = member(j, "peak_flops", "peak_flops");
  hw.peak_flops.fp32 = number(peak, "fp32", "peak_flops.fp32");
  hw.peak_flops.bf16 = number(peak, "bf16", "peak_flops.bf16");
  hw.peak_flops.fp16 = number(peak, "fp16", "peak_flops.fp16");
  hw.peak_flops.fp8 = number(peak, "fp8", "peak_flops.fp8");
  hw.matmul_efficiency = number(j, "matmul_efficiency", "matmul_efficiency");
  hw.memory_efficiency = number(j, "memory_efficiency", "memory_efficiency");
  hw.memory_bandwidth = number(j, "memory_bandwidth", "memory_bandwidth");
  hw.memory_capacity = integer(j, "memory_capacity", "memory_capacity");
  const Json& links = member(j, "links", "links");
  if (!links.is_array()) detail::bad_profile(source, "links", "must be an array");
  for (std::size_t k = 0; k < links.as_array().size(); ++k) {
    const Json& l = links.as_array()[k];
    const std::string f = detail::concat("links[", k, "]");
    hw.links.push_back({.name = text(l, "name", f + ".name"),
                        .devices = integer(l, "devices", f + ".devices"),
                        .bandwidth = number(l, "bandwidth", f + ".bandwidth"),
                        .latency = number(l, "latency", f + ".latency")});
  }
  if (const Json* rates = j.find("matmul_rates"); rates != nullptr) {  // optional
    if (!rates->is_array()) detail::bad_profile(source, "matmul_rates", "must be an array");
    for (std::size_t k = 0; k < rates->as_array().size(); ++k) {
      const Json& r = rates->as_array()[k];
      const std::string f = detail::concat("matmul_rates[", k, "]");
      hw.matmul_rates.push_back(
          {.flops = number(r, "flops", f + ".flops"), .rate = number(r, "rate", f + ".rate")});
    }
  }
  if (j.find("op_overhead") != nullptr)  // optional
    hw.op_overhead = number(j, "op_overhead", "op_overhead");
  if (j.find("loop_rate") != nullptr)  // optional
    hw.loop_rate = number(j, "loop_rate", "loop_rate");
  check_hardware_profile(hw, source);
  return hw;
}

inline HardwareProfile load_hardware_profile(const std::string& path) {
  const std::string text = read_file_bounded(path, kMaxHardwareFileBytes, "hardware profile");
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Error& e) {
    detail::fail("carto: hardware profile ", path, ": ", e.what());
  }
  return hardware_profile_from_json(j, path);
}

inline void save_hardware_profile(const HardwareProfile& hw, const std::string& path) {
  check_hardware_profile(hw, hw.name);
  atomic_write(path, to_json(hw).dump(2) + "\n", "hardware profile");
}

// ---- the calibrated CPU profile
// ----------------------------------------------------------------------------------------
//
// bench/bench_calibrate measures this machine and writes its `cpu` profile to cpu_profile_path():
// $CARTO_CPU_PROFILE when set, else $XDG_CONFIG_HOME/carto/cpu-profile.json, else
// $HOME/.config/carto/cpu-profile.json. The file is a hardware profile (load_hardware_profile
// reads it) whose figures are those of one thread per rank, plus a "threads" array with the
// figures at more threads per rank: {"threads": t, "peak_flops_fp32": F, "memory_bandwidth": B,
// "matmul_rates": [...]}. cpu_profile(ranks) picks the entry for the threads each rank gets.

inline std::string cpu_profile_path() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string();
  };
  if (std::string p = env("CARTO_CPU_PROFILE"); !p.empty()) return p;
  if (std::string x = env("XDG_CONFIG_HOME"); !x.empty()) return x + "/carto/cpu-profile.json";
  if (std::string h = env("HOME"); !h.empty()) return h + "/.config/carto/cpu-profile.json";
  return {};
}

// The threads a CPU rank's kernels use when `ranks` ranks share a process on `cores` cores:
// $CARTO_CPU_THREADS when set (a positive integer), else max(1, cores / ranks).
inline int cpu_threads_per_rank(std::int64_t ranks, unsigned cores) {
  if (const char* v = std::getenv("CARTO_CPU_THREADS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 1 || n > 4096)
      detail::fail("carto: CARTO_CPU_THREADS is '", v, "'; it must be a positive integer");
    return static_cast<int>(n);
  }
  const std::int64_t r = ranks < 1 ? 1 : ranks;
  const std::int64_t per = static_cast<std::int64_t>(cores) / r;
  return per < 1 ? 1 : static_cast<int>(per);
}

struct CpuProfileChoice {
  HardwareProfile profile{};
  bool calibrated = false;  // read from `path`; false: the built-in hardware::cpu()
  std::string path{};       // the file read, or the one looked for
  int threads = 1;          // threads per rank the figures are for (calibrated only)
  std::string note{};       // one line saying which profile this is and where it came from
};

// The profile to plan `ranks` CPU ranks of one process on `cores` cores: the calibrated file's
// figures at the threads each rank gets when the file exists, else the built-in hardware::cpu().
// A file that exists but is not a valid profile is an error naming it and the field.
inline CpuProfileChoice cpu_profile(std::int64_t ranks, unsigned cores) {
  CpuProfileChoice c;
  c.path = cpu_profile_path();
  const int want = cpu_threads_per_rank(ranks, cores);
  std::error_code ec;
  if (c.path.empty() || !std::filesystem::exists(c.path, ec)) {
    c.profile = hardware::cpu();
    c.note = detail::concat(
        "hardware profile 'cpu' is the built-in one (no calibrated profile at ",
        c.path.empty() ? std::string("$CARTO_CPU_PROFILE or ~/.config/carto/cpu-profile.json")
                       : c.path,
        "; run bench_calibrate to write one for this machine)");
    return c;
  }
  const std::string text = read_file_bounded(c.path, kMaxHardwareFileBytes, "hardware profile");
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Error& e) {
    detail::fail("carto: hardware profile ", c.path, ": ", e.what());
  }
  c.profile = hardware_profile_from_json(j, c.path);
  c.calibrated = true;
  if (const Json* threads = j.find("threads"); threads != nullptr && threads->is_array()) {
    for (std::size_t k = 0; k < threads->as_array().size(); ++k) {
      const Json& t = threads->as_array()[k];
      const Json* n = t.find("threads");
      const Json* f = t.find("peak_flops_fp32");
      const Json* b = t.find("memory_bandwidth");
      if (n == nullptr || !n->is_int() || f == nullptr || !f->is_number() || b == nullptr ||
          !b->is_number()) {
        detail::bad_profile(c.path, detail::concat("threads[", k, "]"),
                            "needs integer 'threads' and numbers 'peak_flops_fp32' and "
                            "'memory_bandwidth'");
      }
      if (n->as_int() > want || n->as_int() < c.threads) continue;
      HardwareProfile hw = c.profile;
      const double flops = f->as_double();
      hw.peak_flops = {.fp32 = flops, .bf16 = flops, .fp16 = flops};
      hw.memory_bandwidth = b->as_double();
      if (const Json* l = t.find("loop_rate"); l != nullptr) {  // optional, else the 1-thread one
        if (!l->is_number())
          detail::bad_profile(c.path, detail::concat("threads[", k, "].loop_rate"),
                              "must be a number");
        hw.loop_rate = l->as_double();
      }
      hw.matmul_rates.clear();
      if (const Json* r = t.find("matmul_rates"); r != nullptr) {
        Json holder = j;
        holder["matmul_rates"] = *r;
        hw.matmul_rates = hardware_profile_from_json(holder, c.path).matmul_rates;
      }
      check_hardware_profile(hw, c.path);
      c.profile = hw;
      c.threads = static_cast<int>(n->as_int());
    }
  }
  c.note =
      detail::concat("hardware profile '", c.profile.name, "' calibrated on this machine (", c.path,
                     ") at ", c.threads, " thread", c.threads == 1 ? "" : "s", " per rank");
  return c;
}

}  // namespace carto
