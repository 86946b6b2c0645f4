// carto/cost/collectives.hpp — α-β costs of collectives on one mesh axis.
//
// Design note: a collective over a group of n devices on a link of bus bandwidth B (bytes/s) and
// per-step latency α (s) moving a buffer of S bytes costs
//     time = steps(kind, n) · α + bus_factor(kind, n) · S / B.
// S is the *full* buffer in nccl-tests' convention (doc/PERFORMANCE.md): for all-reduce the buffer
// every rank holds; for all-gather the gathered output; for reduce-scatter the full input; for
// all-to-all one rank's whole send buffer; for broadcast the buffer. The bus factors are
// nccl-tests': all-reduce 2(n-1)/n, all-gather, reduce-scatter and all-to-all (n-1)/n, broadcast 1;
// since B is the *bus* bandwidth, factor · S / B is exactly the time nccl-tests would measure at
// that busbw. Steps are those of a ring: all-reduce 2(n-1) (reduce-scatter then all-gather), the
// others n-1 (a broadcast pipelines along a chain of n-1 hops). n = 1 costs exactly zero. Units:
// seconds and bytes; no FLOPs appear here.
//
// Invariant used by the resharding search: all_reduce(S) == reduce_scatter(S) + all_gather(S) in
// floating point, not only in exact arithmetic (the all-reduce terms are computed as twice the
// reduce-scatter terms, and doubling is exact), so ties between the two routes are real ties.
#pragma once

#include <cstdint>
#include <string_view>

#include "carto/cost/hardware.hpp"
#include "carto/error.hpp"
#include "carto/spec/mesh.hpp"

namespace carto {

enum class Collective : std::uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  all_to_all,
  broadcast
};

inline constexpr Collective kAllCollectives[] = {Collective::all_reduce, Collective::all_gather,
                                                 Collective::reduce_scatter, Collective::all_to_all,
                                                 Collective::broadcast};

constexpr std::string_view to_string_view(Collective kind) {
  switch (kind) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_to_all: return "all_to_all";
    case Collective::broadcast: return "broadcast";
  }
  return "?";
}

// nccl-tests' bus factor: busbw = algbw · bus_factor.
constexpr double bus_factor(Collective kind, std::int64_t n) {
  if (n < 1) detail::fail("carto: a collective group has at least 1 device, got ", n);
  const double ring = static_cast<double>(n - 1) / static_cast<double>(n);
  switch (kind) {
    case Collective::all_reduce: return 2 * ring;
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all: return ring;
    case Collective::broadcast: return n == 1 ? 0.0 : 1.0;
  }
  return 0;
}

// Latency steps of the ring algorithm.
constexpr std::int64_t latency_steps(Collective kind, std::int64_t n) {
  if (n < 1) detail::fail("carto: a collective group has at least 1 device, got ", n);
  return kind == Collective::all_reduce ? 2 * (n - 1) : n - 1;
}

// The link parameters a collective runs over.
struct LinkCost {
  double bandwidth = 0;  // bus bandwidth, bytes/s
  double latency = 0;    // seconds per step
};

// time = steps · α + bus_factor · S / B, in seconds; `bytes` is S (see the design note).
constexpr double collective_time(Collective kind, std::int64_t n, std::int64_t bytes,
                                 LinkCost link) {
  if (bytes < 0)
    detail::fail("carto: a collective moves a non-negative number of bytes, got ", bytes);
  if (n == 1) return 0.0;
  if (!(link.bandwidth > 0))
    detail::fail("carto: link bandwidth must be positive, got ", link.bandwidth);
  // All-reduce = reduce-scatter + all-gather, term by term (see the design note).
  const bool twice = kind == Collective::all_reduce;
  const Collective half = twice ? Collective::reduce_scatter : kind;
  const double one = static_cast<double>(latency_steps(half, n)) * link.latency +
                     bus_factor(half, n) * static_cast<double>(bytes) / link.bandwidth;
  return twice ? 2 * one : one;
}

inline LinkCost link_cost(const LinkLevel& level) {
  return {.bandwidth = level.bandwidth, .latency = level.latency};
}

// The collective over mesh axis `axis` (all its groups at once), on the link the axis maps onto.
inline double collective_time(Collective kind, const DeviceMesh& mesh, const AxisName& axis,
                              std::int64_t bytes, const HardwareProfile& hw) {
  const std::size_t i = mesh.index_of(axis);
  return collective_time(kind, mesh.axis(i).size, bytes, link_cost(axis_link(mesh, i, hw)));
}

}  // namespace carto
