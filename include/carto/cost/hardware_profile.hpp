// carto/cost/hardware_profile.hpp — hardware profiles as data, the built-in profiles, how mesh axes
// map onto their links, and the roofline price of a unit of compute. Profile files (JSON) and the
// calibrated CPU profile are in carto/cost/hardware.hpp, which includes this.
//
// Design note: a HardwareProfile is plain data: peak FLOP/s per dtype, efficiency factors, device
// memory bandwidth and capacity, and a hierarchy of links, innermost (fastest) first. Every level
// of the hierarchy is a *domain size* in devices: devices d and e share a level-k domain when d /
// devices_k == e / devices_k (integer division), i.e. domains are runs of consecutive device ids
// (an 8-GPU NVLink node holds devices 8i..8i+7). Domain sizes grow outward and each divides the
// next; the outermost level may be unbounded (devices == 0: the CPU backend runs any number of
// thread ranks). A level's bandwidth is the large-message *bus* bandwidth per device as nccl-tests
// defines it (doc/PERFORMANCE.md: busbw = algbw · bus factor), in bytes/s; its latency is the time
// of one step (one hop of a ring) in seconds.
//
// Mapping rule (DESIGN.md §2): devices are numbered row-major over the mesh, the last axis
// innermost. The communication groups of mesh axis i are the sets of devices that differ only in
// coordinate i. An axis's link is the innermost level whose domains contain every one of its groups
// whole; equivalently, the slowest level any of its groups crosses. A group confined to one node
// uses NVLink; one spanning nodes uses the network. The groups of one axis run their collectives at
// the same time; each device has its own share of every level (one NIC per GPU, rail-optimised), so
// concurrent groups do not divide a level's bandwidth. An axis of size 1 never communicates.
//
// Units: seconds, bytes and bytes/s; FLOP/s only in peak_flops. Published figures carry their
// source beside them (see REFERENCES.md).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "carto/error.hpp"
#include "carto/spec/dtype.hpp"
#include "carto/spec/mesh.hpp"

namespace carto {

// Dense peak FLOP/s per dtype; 0 means the device has no such arithmetic. fp8 covers both OCP
// formats (E4M3 and E5M2 run at the same rate on the devices profiled here).
struct PeakFlops {
  double fp32 = 0;
  double bf16 = 0;
  double fp16 = 0;
  double fp8 = 0;
  [[nodiscard]] constexpr double of(DType type) const {
    switch (type) {
      case DType::fp32: return fp32;
      case DType::bf16: return bf16;
      case DType::fp16: return fp16;
      case DType::fp8_e4m3:
      case DType::fp8_e5m2: return fp8;
    }
    return 0;
  }
  friend constexpr bool operator==(const PeakFlops&, const PeakFlops&) = default;
};

// One level of the interconnect hierarchy.
struct LinkLevel {
  std::string name{};        // "nvlink", "infiniband", "pcie", "threads"
  std::int64_t devices = 0;  // domain size in devices; 0 = unbounded (outermost level only)
  double bandwidth = 0;      // bus bandwidth per device, bytes/s
  double latency = 0;        // seconds per step (one ring hop)
  friend bool operator==(const LinkLevel&, const LinkLevel&) = default;
};

// One point of a measured GEMM rate curve: a GEMM call of `flops` FLOPs runs at `rate` FLOP/s.
// Small GEMMs run far below a large one's rate (packing, loop and call overheads), which a CPU
// feels at the sizes a small model's ops have.
struct MatmulRate {
  double flops = 0;
  double rate = 0;
  friend bool operator==(const MatmulRate&, const MatmulRate&) = default;
};

struct HardwareProfile {
  std::string name{};
  std::string description{};
  PeakFlops peak_flops{};
  double matmul_efficiency = 1;      // achievable / peak FLOP/s of a large GEMM
  double memory_efficiency = 1;      // achievable / peak memory bandwidth of a large copy
  double memory_bandwidth = 0;       // bytes/s (HBM, or DRAM for the CPU backend)
  std::int64_t memory_capacity = 0;  // bytes per device
  std::vector<LinkLevel> links{};    // innermost first
  // Measured fp32 GEMM rates by size (bench_calibrate), ascending in flops; empty: peak_flops ·
  // matmul_efficiency for every size. Other dtypes scale by peak_flops.of(dtype) / fp32.
  std::vector<MatmulRate> matmul_rates{};
  // Fixed seconds per pass of one op's kernels (its forward, its backward, or its recompute),
  // whatever their size: the runtime's host work per op and the calls' own overhead, which decide
  // a small model's step on a CPU (bench_calibrate measures it); 0 on the built-in profiles.
  double op_overhead = 0;
  // FLOP/s (fp32; other dtypes scale as the GEMM curve does) of the loop kernels: every op that is
  // not an einsum (layer norms, softmax, GELU, attention's fused kernel, ...) at the FLOPs the
  // profiler counts for it. Where their data sits in cache the exponentials, tanh and row
  // reductions decide their time, not the bandwidth (bench_calibrate measures it); 0: the GEMM
  // rate, as on the built-in profiles.
  double loop_rate = 0;
  friend bool operator==(const HardwareProfile&, const HardwareProfile&) = default;

  // Devices the profile holds: the outermost domain size (0 = unbounded).
  [[nodiscard]] std::int64_t devices() const { return links.empty() ? 0 : links.back().devices; }
};

namespace detail {
[[noreturn]] inline void bad_profile(std::string_view source, std::string_view field,
                                     std::string_view problem) {
  fail("carto: hardware profile ", source, ": field '", field, "' ", problem);
}
}  // namespace detail

// Checks the invariants above; throws naming the field. `source` names the file or the profile.
inline void check_hardware_profile(const HardwareProfile& hw, std::string_view source) {
  auto positive = [&](double v, std::string_view field) {
    if (!(v > 0)) detail::bad_profile(source, field, detail::concat("must be positive, got ", v));
  };
  auto fraction = [&](double v, std::string_view field) {
    if (!(v > 0 && v <= 1))
      detail::bad_profile(source, field, detail::concat("must be in (0, 1], got ", v));
  };
  if (hw.name.empty()) detail::bad_profile(source, "name", "must not be empty");
  for (const double v :
       {hw.peak_flops.fp32, hw.peak_flops.bf16, hw.peak_flops.fp16, hw.peak_flops.fp8}) {
    if (!(v >= 0)) detail::bad_profile(source, "peak_flops", "must be non-negative numbers");
  }
  positive(hw.peak_flops.fp32, "peak_flops.fp32");
  fraction(hw.matmul_efficiency, "matmul_efficiency");
  fraction(hw.memory_efficiency, "memory_efficiency");
  positive(hw.memory_bandwidth, "memory_bandwidth");
  if (!(hw.op_overhead >= 0 && hw.op_overhead < 1))
    detail::bad_profile(source, "op_overhead",
                        detail::concat("must be seconds in [0, 1), got ", hw.op_overhead));
  if (!(hw.loop_rate >= 0 && hw.loop_rate < std::numeric_limits<double>::infinity()))
    detail::bad_profile(source, "loop_rate",
                        detail::concat("must be FLOP/s, 0 or positive, got ", hw.loop_rate));
  if (hw.memory_capacity <= 0)
    detail::bad_profile(source, "memory_capacity",
                        detail::concat("must be positive, got ", hw.memory_capacity));
  if (hw.links.empty()) detail::bad_profile(source, "links", "needs at least one level");
  std::int64_t inner = 1;
  for (std::size_t k = 0; k < hw.links.size(); ++k) {
    const LinkLevel& l = hw.links[k];
    const std::string field = detail::concat("links[", k, "]");
    if (l.name.empty()) detail::bad_profile(source, field + ".name", "must not be empty");
    positive(l.bandwidth, field + ".bandwidth");
    if (!(l.latency >= 0))
      detail::bad_profile(source, field + ".latency",
                          detail::concat("must be non-negative, got ", l.latency));
    const bool outermost = k + 1 == hw.links.size();
    if (l.devices == 0 && outermost) continue;
    const bool fits = k == 0 ? l.devices >= 1 : l.devices > inner && l.devices % inner == 0;
    if (!fits) {
      detail::bad_profile(
          source, field + ".devices",
          detail::concat("must be a multiple of the inner level's ", inner,
                         " and larger than it (0 = unbounded, outermost only); got ", l.devices));
    }
    inner = l.devices;
  }
  for (std::size_t k = 0; k < hw.matmul_rates.size(); ++k) {
    const MatmulRate& r = hw.matmul_rates[k];
    const std::string field = detail::concat("matmul_rates[", k, "]");
    positive(r.flops, field + ".flops");
    positive(r.rate, field + ".rate");
    if (k > 0 && !(r.flops > hw.matmul_rates[k - 1].flops))
      detail::bad_profile(source, field + ".flops",
                          detail::concat("must exceed the previous point's ",
                                         hw.matmul_rates[k - 1].flops, "; got ", r.flops));
  }
}

// ---- built-in profiles
// ---------------------------------------------------------------------------
//
// Efficiency factors: matmul = what cuBLAS achieves on the largest GEMMs over the datasheet peak
// (ml-engineering "MAMF" table: A100 271/312 = 0.87, H100 795/989 = 0.80); memory = a device copy
// over the datasheet bandwidth (measured on one H200: ~4.3 of 4.8 TB/s = 0.9), applied to every
// GPU. Link latencies per ring hop: NCCL's Simple-protocol model (nccl src/graph/tuning.cc): NVLink
// 3.4 µs, network 14 µs per hop (the 8.4 µs base latency per call is left out).

namespace hardware {

inline constexpr double kGB = 1e9;
inline constexpr double kTFLOPS = 1e12;
inline constexpr std::int64_t kGiB = std::int64_t{1} << 30;

// NDR 400 Gb/s InfiniBand, one NIC per GPU: 46-48 GB/s bus bandwidth per NIC (nccl-tests issue
// #290, NVIDIA); the low end is taken.
inline LinkLevel infiniband_ndr400(std::int64_t devices) {
  return {.name = "infiniband", .devices = devices, .bandwidth = 46 * kGB, .latency = 14e-6};
}

// 8x H100 SXM 80GB with NVSwitch.
inline HardwareProfile h100() {
  return {
      .name = "h100",
      .description = "8x H100 SXM 80GB, NVLink 4 + NVSwitch",
      // H100 SXM datasheet, dense: FP32 67, BF16/FP16 989, FP8 1979 TFLOP/s.
      .peak_flops = {.fp32 = 67 * kTFLOPS,
                     .bf16 = 989 * kTFLOPS,
                     .fp16 = 989 * kTFLOPS,
                     .fp8 = 1979 * kTFLOPS},
      .matmul_efficiency = 0.80,  // cuBLAS ~795 of 989 TFLOP/s (ml-engineering MAMF table)
      .memory_efficiency = 0.90,
      .memory_bandwidth = 3350 * kGB,                    // HBM3 3.35 TB/s (datasheet)
      .memory_capacity = 80 * std::int64_t{1000000000},  // 80 GB (datasheet)
      // Ring collectives ~370 GB/s bus bandwidth (nccl-tests issue #212, NVIDIA).
      .links = {{.name = "nvlink", .devices = 8, .bandwidth = 370 * kGB, .latency = 3.4e-6}},
  };
}

// 8x H200 141GB with NVSwitch.
inline HardwareProfile h200() {
  return {
      .name = "h200",
      .description = "8x H200 SXM 141GB, NVLink 4 + NVSwitch",
      // Same compute as H100 SXM (datasheet): FP32 67, BF16/FP16 989, FP8 1979 TFLOP/s dense.
      .peak_flops = {.fp32 = 67 * kTFLOPS,
                     .bf16 = 989 * kTFLOPS,
                     .fp16 = 989 * kTFLOPS,
                     .fp8 = 1979 * kTFLOPS},
      .matmul_efficiency = 0.80,       // as H100 (ml-engineering MAMF table)
      .memory_efficiency = 0.90,       // device copy ~4.3 of 4.8 TB/s, measured on one H200
      .memory_bandwidth = 4800 * kGB,  // HBM3e 4.8 TB/s (datasheet)
      .memory_capacity = 141 * std::int64_t{1000000000},  // 141 GB (datasheet)
      // Ring all-reduce 367, all-gather 361, reduce-scatter 363 GB/s bus bandwidth
      // (stas00/ml-engineering network/README.md); the ring all-reduce figure is taken.
      .links = {{.name = "nvlink", .devices = 8, .bandwidth = 367 * kGB, .latency = 3.4e-6}},
  };
}

// 8x A100 SXM 80GB with NVSwitch.
inline HardwareProfile a100() {
  return {
      .name = "a100",
      .description = "8x A100 SXM 80GB, NVLink 3 + NVSwitch",
      // A100 datasheet: FP32 19.5 (non-tensor-core), BF16/FP16 312 TFLOP/s dense; no FP8.
      .peak_flops = {.fp32 = 19.5 * kTFLOPS, .bf16 = 312 * kTFLOPS, .fp16 = 312 * kTFLOPS},
      .matmul_efficiency = 0.87,  // cuBLAS ~271 of 312 TFLOP/s (ml-engineering MAMF table)
      .memory_efficiency = 0.90,
      .memory_bandwidth = 2039 * kGB,  // HBM2e 2.039 TB/s (A100 80GB SXM datasheet)
      .memory_capacity = 80 * std::int64_t{1000000000},  // 80 GB (datasheet)
      // All-reduce ~230 GB/s bus bandwidth (nccl-tests issue #149, NVIDIA).
      .links = {{.name = "nvlink", .devices = 8, .bandwidth = 230 * kGB, .latency = 3.4e-6}},
  };
}

// 8x A100 PCIe 80GB in one box, no NVLink bridges: every collective crosses PCIe 4.0 x16.
inline HardwareProfile pcie() {
  return {
      .name = "pcie",
      .description = "8x A100 PCIe 80GB, PCIe 4.0 x16 host bridges, no NVLink",
      // A100 PCIe datasheet: FP32 19.5, BF16/FP16 312 TFLOP/s dense.
      .peak_flops = {.fp32 = 19.5 * kTFLOPS, .bf16 = 312 * kTFLOPS, .fp16 = 312 * kTFLOPS},
      .matmul_efficiency = 0.87,  // as A100 SXM (ml-engineering MAMF table)
      .memory_efficiency = 0.90,
      .memory_bandwidth = 1935 * kGB,  // HBM2e 1.935 TB/s (A100 80GB PCIe datasheet)
      .memory_capacity = 80 * std::int64_t{1000000000},
      // PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 = 31.5 GB/s per direction (PCI-SIG); 0.8 of it
      // (25 GB/s) is assumed reachable as bus bandwidth. Network-like per-hop latency (tuning.cc
      // models PCIe paths with the network's 14 µs Simple hop).
      .links = {{.name = "pcie", .devices = 8, .bandwidth = 25 * kGB, .latency = 14e-6}},
  };
}

// The CPU backend: threads of one process as ranks. Built-in figures are bench/bench_calibrate's
// on the development machine (a 2-core VM, rounded down): sgemm on one thread ~25 GFLOP/s, copy
// ~17 GB/s (read + write), thread exchange ~3 GB/s bus bandwidth and ~2 µs per step. Run the
// benchmark on the target machine and load the profile file it writes for real planning.
inline HardwareProfile cpu() {
  return {
      .name = "cpu",
      .description = "CPU backend: threads of one process as ranks, OpenBLAS GEMM",
      // The backend computes 16-bit types in fp32: one rate for every dtype it supports.
      .peak_flops = {.fp32 = 25e9, .bf16 = 25e9, .fp16 = 25e9},
      .matmul_efficiency = 1.0,  // the measured GEMM rate is the peak
      .memory_efficiency = 1.0,  // the measured copy rate is the peak
      .memory_bandwidth = 17 * kGB,
      .memory_capacity = 16 * kGiB,  // thread ranks share the machine's memory
      .links = {{.name = "threads", .devices = 0, .bandwidth = 3 * kGB, .latency = 2e-6}},
  };
}

// `nodes` copies of a one-level node profile joined by `network` (default: NDR 400 Gb/s
// InfiniBand, one NIC per GPU). The result's name is "<node>x<nodes>".
struct ClusterOptions {
  std::int64_t nodes = 1;
  double network_bandwidth = 46 * kGB;  // nccl-tests issue #290 (see infiniband_ndr400)
  double network_latency = 14e-6;       // nccl src/graph/tuning.cc, network Simple hop
};

inline HardwareProfile cluster(const HardwareProfile& node, ClusterOptions options) {
  check_hardware_profile(node, node.name);
  if (options.nodes < 1)
    detail::fail("carto: a cluster needs at least 1 node, got ", options.nodes);
  if (node.devices() == 0)
    detail::fail("carto: hardware profile '", node.name,
                 "' is unbounded (its outermost level has no device count); it cannot be a node");
  HardwareProfile out = node;
  out.name = detail::concat(node.name, "x", options.nodes);
  out.description = detail::concat(options.nodes, " nodes of ", node.description,
                                   "; nodes joined by InfiniBand, one NIC per device");
  out.links.push_back({.name = "infiniband",
                       .devices = node.devices() * options.nodes,
                       .bandwidth = options.network_bandwidth,
                       .latency = options.network_latency});
  return out;
}

}  // namespace hardware

inline std::vector<std::string> hardware_profile_names() {
  return {"h100", "h200", "a100", "pcie", "cpu"};
}

// A built-in profile by name: "h100", "h200", "a100", "pcie", "cpu", or "<node>x<N>" for N such
// nodes joined by InfiniBand ("h100x16": 128 GPUs). Unknown names throw, listing the known ones.
inline HardwareProfile find_hardware_profile(std::string_view name) {
  if (name == "h100") return hardware::h100();
  if (name == "h200") return hardware::h200();
  if (name == "a100") return hardware::a100();
  if (name == "pcie") return hardware::pcie();
  if (name == "cpu") return hardware::cpu();
  if (const std::size_t x = name.rfind('x'); x != std::string_view::npos && x > 0) {
    const std::string_view count = name.substr(x + 1);
    std::int64_t nodes = 0;
    bool digits = !count.empty() && count.size() <= 6;
    for (const char c : count) {
      digits = digits && c >= '0' && c <= '9';
      if (digits) nodes = nodes * 10 + (c - '0');
    }
    const std::string_view node = name.substr(0, x);
    if (digits && nodes >= 1 &&
        (node == "h100" || node == "h200" || node == "a100" || node == "pcie")) {
      return hardware::cluster(find_hardware_profile(node), {.nodes = nodes});
    }
  }
  std::string known;
  for (const std::string& n : hardware_profile_names()) known += (known.empty() ? "" : ", ") + n;
  detail::fail("carto: unknown hardware profile '", name, "'; known: ", known,
               ", or <node>x<nodes> for GPU nodes joined by InfiniBand (e.g. h100x16)");
}

// The profile to plan `devices` devices on: the profile itself when it holds them (or is
// unbounded), else the fewest nodes of it joined by InfiniBand (a one-level node profile only).
inline HardwareProfile hardware_for_devices(const HardwareProfile& hw, std::int64_t devices) {
  if (hw.devices() == 0 || devices <= hw.devices()) return hw;
  if (hw.links.size() != 1) {
    detail::fail("carto: hardware profile '", hw.name, "' holds ", hw.devices(),
                 " devices; a mesh of ", devices, " does not fit");
  }
  return hardware::cluster(hw, {.nodes = (devices + hw.devices() - 1) / hw.devices()});
}

// ---- mapping mesh axes onto the hierarchy
// --------------------------------------------------------

// The index (into hw.links) of the link mesh axis `axis` communicates over: the innermost level
// whose domains hold each of the axis's groups whole. Throws when the mesh has more devices than
// the profile holds.
inline std::size_t axis_link_level(const DeviceMesh& mesh, std::size_t axis,
                                   const HardwareProfile& hw) {
  if (axis >= mesh.num_axes())
    detail::fail("carto: mesh ", mesh, " has no axis ", axis, " (it has ", mesh.num_axes(), ")");
  if (hw.links.empty()) detail::fail("carto: hardware profile '", hw.name, "' has no links");
  if (hw.devices() != 0 && mesh.num_devices() > hw.devices()) {
    detail::fail("carto: mesh ", mesh, " has ", mesh.num_devices(), " devices but hardware '",
                 hw.name, "' holds ", hw.devices(),
                 hw.links.size() == 1
                     ? detail::concat("; use a cluster profile (e.g. '", hw.name, "x",
                                      (mesh.num_devices() + hw.devices() - 1) / hw.devices(), "')")
                     : std::string("; use a profile with more nodes"));
  }
  const std::int64_t n = mesh.axis(axis).size;
  if (n == 1) return 0;
  std::int64_t stride = 1;
  for (std::size_t j = axis + 1; j < mesh.num_axes(); ++j) stride *= mesh.axis(j).size;
  std::size_t level = 0;
  // Group members are first, first + stride, ..., first + (n-1)·stride: ids increase, so the group
  // lies in one domain of size D iff its first and last members do.
  for (std::int64_t first = 0; first < mesh.num_devices(); ++first) {
    if ((first / stride) % n != 0) continue;  // not the first member of its group
    const std::int64_t last = first + (n - 1) * stride;
    while (level + 1 < hw.links.size() && hw.links[level].devices != 0 &&
           first / hw.links[level].devices != last / hw.links[level].devices) {
      ++level;
    }
  }
  return level;
}

inline const LinkLevel& axis_link(const DeviceMesh& mesh, std::size_t axis,
                                  const HardwareProfile& hw) {
  return hw.links[axis_link_level(mesh, axis, hw)];
}
inline const LinkLevel& axis_link(const DeviceMesh& mesh, const AxisName& axis,
                                  const HardwareProfile& hw) {
  return axis_link(mesh, mesh.index_of(axis), hw);
}

// ---- compute roofline
// ----------------------------------------------------------------------------

// The work one device does for one op: FLOPs and bytes moved to and from device memory.
struct ComputeWork {
  std::int64_t flops = 0;
  std::int64_t bytes = 0;
  DType dtype = DType::bf16;
  // GEMMs the FLOPs are split into (a batched einsum runs one per element of its batch letters);
  // 0: not a matrix product but loop kernels (priced at HardwareProfile::loop_rate when set).
  std::int64_t gemm_calls = 1;
};

// The FLOP rate of `work`: peak(dtype) · matmul_efficiency, or with measured matmul_rates the
// rate of one GEMM of work.flops / work.gemm_calls FLOPs (the curve is measured per call),
// interpolated linearly in log(flops) between the points and clamped to the first and last
// (scaled to the dtype by its peak over fp32's). Loop kernels (gemm_calls 0) run at the profile's
// loop_rate when it has one.
inline double matmul_rate(const HardwareProfile& hw, const ComputeWork& work) {
  const double peak = hw.peak_flops.of(work.dtype);
  if (work.gemm_calls == 0 && hw.loop_rate > 0 && hw.peak_flops.fp32 > 0)
    return hw.loop_rate * peak / hw.peak_flops.fp32;
  const std::vector<MatmulRate>& r = hw.matmul_rates;
  if (r.empty() || !(hw.peak_flops.fp32 > 0)) return peak * hw.matmul_efficiency;
  const double f = static_cast<double>(work.flops) /
                   static_cast<double>(std::max<std::int64_t>(1, work.gemm_calls));
  double rate = r.front().rate;
  if (f >= r.back().flops) {
    rate = r.back().rate;
  } else if (f > r.front().flops) {
    std::size_t k = 1;
    while (r[k].flops < f) ++k;
    const double w = std::log(f / r[k - 1].flops) / std::log(r[k].flops / r[k - 1].flops);
    rate = r[k - 1].rate + w * (r[k].rate - r[k - 1].rate);
  }
  return rate * peak / hw.peak_flops.fp32;
}

// Roofline: max(flops / matmul_rate, bytes / (memory_bandwidth · memory_efficiency)), in seconds.
// Non-matmul ops use the GEMM rate unless the profile has a loop_rate: on the built-in profiles
// they are memory-bound, so their FLOP term rarely decides.
inline double compute_time(const ComputeWork& work, const HardwareProfile& hw) {
  if (work.flops < 0 || work.bytes < 0)
    detail::fail("carto: compute_time: negative work (", work.flops, " FLOPs, ", work.bytes,
                 " bytes)");
  const double peak = hw.peak_flops.of(work.dtype);
  if (work.flops > 0 && !(peak > 0)) {
    detail::fail("carto: hardware '", hw.name, "' has no ", work.dtype,
                 " arithmetic (its peak FLOP/s for ", work.dtype, " is 0)");
  }
  const double t_flops =
      work.flops == 0 ? 0.0 : static_cast<double>(work.flops) / matmul_rate(hw, work);
  const double t_bytes =
      static_cast<double>(work.bytes) / (hw.memory_bandwidth * hw.memory_efficiency);
  return t_flops > t_bytes ? t_flops : t_bytes;
}

}  // namespace carto
