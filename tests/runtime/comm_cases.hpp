// The collective test bodies shared by the thread-rank tests (Catch2) and the MPI test program.
//
// Every rank's element i is value(seed, world rank, i): an integer in [-64, 64] from a
// counter-based hash, so sums over at most 8 ranks are exact in fp32 and every expected result is
// known in closed form from (seed, member world ranks, index). The members of each group are
// computed here from the mesh alone (not asked of the communicator), so a group with the wrong
// ranks or the wrong order fails. Each case counts wrong elements (and changes to an out-of-place
// send buffer) instead of stopping at the first.
//
// bf16 reductions get values of their own (value_bf16): bf16 numbers ±m·2^(e-7) with an 8-bit
// significand m and e in [-3, 3], so they are multiples of 2^-10 below 32 in magnitude and a sum
// over at most 8 ranks needs at most 18 significant bits: exact in fp32 and in double. The
// expected sum is that exact sum (computed in double) rounded to bf16 once; a communicator that
// rounded after each addition, or summed in bf16, differs on some elements.
#pragma once

#include <algorithm>
#include <carto/runtime/bf16.hpp>
#include <carto/runtime/communicator.hpp>
#include <carto/spec.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace carto::testing {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// An integer in [-64, 64] as a float.
inline float value(std::uint64_t seed, int world_rank, std::int64_t index) {
  const std::uint64_t h = splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(world_rank) + 1) ^
                                     (static_cast<std::uint64_t>(index) * 0xD1B54A32D192ED03ull));
  return static_cast<float>(static_cast<std::int64_t>(h % 129) - 64);
}

// A bf16 value ±m·2^(e-7), m in [128, 255], e in [-3, 3] (see the design note).
inline Bf16 value_bf16(std::uint64_t seed, int world_rank, std::int64_t index) {
  const std::uint64_t h =
      splitmix64(seed ^ 0xBF16ull ^ splitmix64(static_cast<std::uint64_t>(world_rank) + 1) ^
                 (static_cast<std::uint64_t>(index) * 0xD1B54A32D192ED03ull));
  const auto m = static_cast<double>(128 + h % 128);
  const int e = static_cast<int>((h >> 8) % 7) - 3;
  const double v = ((h >> 16) & 1u) != 0 ? -m : m;
  const Bf16 b = to_bf16(static_cast<float>(std::ldexp(v, e - 7)));
  CARTO_CHECK(static_cast<double>(to_float(b)) == std::ldexp(v, e - 7), "value_bf16 is not exact");
  return b;
}

// Written where a result must land, never a possible value.
inline constexpr float kSentinel = -1000.5f;

// Every ordered list of distinct axes of a mesh with `k` axes.
inline std::vector<std::vector<std::size_t>> ordered_axis_lists(std::size_t k) {
  std::vector<std::vector<std::size_t>> lists;
  std::vector<std::size_t> current;
  std::function<void()> extend = [&] {
    for (std::size_t a = 0; a < k; ++a) {
      if (std::find(current.begin(), current.end(), a) != current.end()) continue;
      current.push_back(a);
      lists.push_back(current);
      extend();
      current.pop_back();
    }
  };
  extend();
  return lists;
}

// The world ranks of the group of `axes` that holds device `device`, in group order (row-major
// over the listed axes, the first listed slowest).
inline std::vector<int> group_members(const DeviceMesh& mesh, const std::vector<std::size_t>& axes,
                                      std::int64_t device) {
  const MeshCoord mine = mesh.coord(device);
  std::vector<std::pair<std::int64_t, int>> keyed;
  for (std::int64_t d = 0; d < mesh.num_devices(); ++d) {
    const MeshCoord c = mesh.coord(d);
    bool same = true;
    for (std::size_t a = 0; a < mesh.num_axes(); ++a) {
      if (std::find(axes.begin(), axes.end(), a) == axes.end() && c[a] != mine[a]) same = false;
    }
    if (!same) continue;
    std::int64_t key = 0;
    for (std::size_t a : axes) key = key * mesh.axis(a).size + c[a];
    keyed.emplace_back(key, static_cast<int>(d));
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<int> members;
  for (const auto& [key, d] : keyed) members.push_back(d);
  return members;
}

inline std::string axes_name(const DeviceMesh& mesh, const std::vector<std::size_t>& axes) {
  std::string name;
  for (std::size_t a : axes) {
    if (!name.empty()) name += ',';
    name += mesh.axis(a).name.view();
  }
  return name;
}

struct CaseResult {
  std::string name;  // "all_reduce sum in place, 37 elements, group 'tp' of {dp:2, tp:2}"
  int world_rank = 0;
  std::int64_t checked = 0;   // elements compared
  std::int64_t wrong = 0;     // elements that differ from the closed form
  std::string first_wrong{};  // "recv[3] = 5, expected 7"
};

class Checker {
 public:
  explicit Checker(CaseResult& r) : r_(r) {}
  void expect(std::string_view what, std::size_t i, float got, float want) {
    ++r_.checked;
    if (got == want) return;  // exact: small integers
    if (r_.wrong++ == 0) {
      std::ostringstream s;
      s << what << "[" << i << "] = " << got << ", expected " << want;
      r_.first_wrong = s.str();
    }
  }

 private:
  CaseResult& r_;
};

enum class Placement : std::uint8_t { out_of_place, in_place };

// Runs every collective, in place and out of place, on group `comm` whose members are `members`
// (world ranks in group order, from the mesh). Appends one result per case.
inline void run_group_cases(Communicator& comm, const std::vector<int>& members,
                            const std::string& where, std::uint64_t seed,
                            std::vector<CaseResult>& results) {
  const int n = static_cast<int>(members.size());
  const std::size_t nu = members.size();
  const int w = members[static_cast<std::size_t>(comm.rank())];
  const std::size_t r = static_cast<std::size_t>(comm.rank());
  auto start = [&](std::string name) -> CaseResult& {
    results.push_back({.name = name + ", group " + where, .world_rank = w});
    ++seed;
    return results.back();
  };
  auto val = [&](int rank, std::size_t i) {
    return value(seed, rank, static_cast<std::int64_t>(i));
  };
  auto reduce = [&](ReduceOp op, std::size_t i) {
    float acc = val(members[0], i);
    for (std::size_t m = 1; m < nu; ++m) {
      const float v = val(members[m], i);
      acc = op == ReduceOp::sum ? acc + v : std::max(acc, v);
    }
    return acc;
  };
  CARTO_CHECK(comm.size() == n, "group ", where, " has ", comm.size(), " ranks; the mesh says ", n);
  CARTO_CHECK(comm.world_rank() == w, "group ", where, " rank ", comm.rank(), " is world rank ",
              comm.world_rank(), "; the mesh says ", w);

  for (const std::size_t count : {std::size_t{1}, std::size_t{37}, std::size_t{2051}}) {
    const std::string sz = ", " + std::to_string(count) + " elements";
    for (const Placement place : {Placement::out_of_place, Placement::in_place}) {
      const bool in = place == Placement::in_place;
      const std::string pl = in ? " in place" : " out of place";

      for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
        // all_reduce: recv[i] = op over members m of value(m, i).
        CaseResult& res =
            start(std::string("all_reduce ") + std::string(to_string_view(op)) + pl + sz);
        Checker c(res);
        std::vector<float> send(count);
        std::vector<float> recv(count, kSentinel);
        for (std::size_t i = 0; i < count; ++i) send[i] = val(w, i);
        if (in) {
          comm.all_reduce(std::span<float>(send), op).wait();
          for (std::size_t i = 0; i < count; ++i) c.expect("buffer", i, send[i], reduce(op, i));
        } else {
          comm.all_reduce(std::span<const float>(send), std::span<float>(recv), op).wait();
          for (std::size_t i = 0; i < count; ++i) {
            c.expect("recv", i, recv[i], reduce(op, i));
            c.expect("send", i, send[i], val(w, i));
          }
        }
      }
      {
        // all_gather: recv[j·N + i] = value(member j, i).
        CaseResult& res = start("all_gather" + pl + sz);
        Checker c(res);
        std::vector<float> recv(count * nu, kSentinel);
        std::vector<float> send(count);
        for (std::size_t i = 0; i < count; ++i) send[i] = val(w, i);
        if (in) {
          std::copy(send.begin(), send.end(),
                    recv.begin() + static_cast<std::ptrdiff_t>(r * count));
          comm.all_gather_in_place(std::span<float>(recv)).wait();
        } else {
          comm.all_gather(std::span<const float>(send), std::span<float>(recv)).wait();
          for (std::size_t i = 0; i < count; ++i) c.expect("send", i, send[i], val(w, i));
        }
        for (std::size_t j = 0; j < nu; ++j) {
          for (std::size_t i = 0; i < count; ++i) {
            c.expect("recv", j * count + i, recv[j * count + i], val(members[j], i));
          }
        }
      }
      for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
        // reduce_scatter: recv[i] = op over members m of value(m, rank·N + i).
        CaseResult& res =
            start(std::string("reduce_scatter ") + std::string(to_string_view(op)) + pl + sz);
        Checker c(res);
        std::vector<float> send(count * nu);
        std::vector<float> recv(count, kSentinel);
        for (std::size_t k = 0; k < send.size(); ++k) send[k] = val(w, k);
        if (in) {
          comm.reduce_scatter_in_place(std::span<float>(send), op).wait();
          for (std::size_t i = 0; i < count; ++i) {
            c.expect("buffer", r * count + i, send[r * count + i], reduce(op, r * count + i));
          }
        } else {
          comm.reduce_scatter(std::span<const float>(send), std::span<float>(recv), op).wait();
          for (std::size_t i = 0; i < count; ++i)
            c.expect("recv", i, recv[i], reduce(op, r * count + i));
          for (std::size_t k = 0; k < send.size(); ++k) c.expect("send", k, send[k], val(w, k));
        }
      }
      {
        // all_to_all: recv[j·N + i] = value(member j, rank·N + i).
        CaseResult& res = start("all_to_all" + pl + sz);
        Checker c(res);
        std::vector<float> send(count * nu);
        std::vector<float> recv(count * nu, kSentinel);
        for (std::size_t k = 0; k < send.size(); ++k) send[k] = val(w, k);
        std::span<float> out(recv);
        if (in) {
          comm.all_to_all(std::span<float>(send)).wait();
          out = std::span<float>(send);
        } else {
          comm.all_to_all(std::span<const float>(send), std::span<float>(recv)).wait();
          for (std::size_t k = 0; k < send.size(); ++k) c.expect("send", k, send[k], val(w, k));
        }
        for (std::size_t j = 0; j < nu; ++j) {
          for (std::size_t i = 0; i < count; ++i) {
            c.expect("recv", j * count + i, out[j * count + i], val(members[j], r * count + i));
          }
        }
      }
      for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
        // bf16 all_reduce and reduce_scatter: element i is op over members of value_bf16(m, i),
        // in double (exact here), rounded to bf16 once.
        auto val16 = [&](int rank, std::size_t i) {
          return value_bf16(seed, rank, static_cast<std::int64_t>(i));
        };
        auto reduce16 = [&](std::size_t i) {
          double acc = to_float(val16(members[0], i));
          for (std::size_t m = 1; m < nu; ++m) {
            const double v = to_float(val16(members[m], i));
            acc = op == ReduceOp::sum ? acc + v : std::max(acc, v);
          }
          return round_to_bf16(static_cast<float>(acc));  // exact in fp32: one rounding
        };
        const std::string kind = std::string(to_string_view(op)) + " bf16" + pl + sz;
        {
          CaseResult& res = start("all_reduce " + kind);
          Checker c(res);
          std::vector<Bf16> send(count);
          std::vector<Bf16> recv(count, to_bf16(kSentinel));
          for (std::size_t i = 0; i < count; ++i) send[i] = val16(w, i);
          if (in) {
            comm.all_reduce(std::span<Bf16>(send), op).wait();
            for (std::size_t i = 0; i < count; ++i)
              c.expect("buffer", i, to_float(send[i]), reduce16(i));
          } else {
            comm.all_reduce(std::span<const Bf16>(send), std::span<Bf16>(recv), op).wait();
            for (std::size_t i = 0; i < count; ++i) {
              c.expect("recv", i, to_float(recv[i]), reduce16(i));
              c.expect("send", i, to_float(send[i]), to_float(val16(w, i)));
            }
          }
        }
        {
          CaseResult& res = start("reduce_scatter " + kind);
          Checker c(res);
          std::vector<Bf16> send(count * nu);
          std::vector<Bf16> recv(count, to_bf16(kSentinel));
          for (std::size_t k = 0; k < send.size(); ++k) send[k] = val16(w, k);
          if (in) {
            comm.reduce_scatter_in_place(std::span<Bf16>(send), op).wait();
            for (std::size_t i = 0; i < count; ++i) {
              c.expect("buffer", r * count + i, to_float(send[r * count + i]),
                       reduce16(r * count + i));
            }
          } else {
            comm.reduce_scatter(std::span<const Bf16>(send), std::span<Bf16>(recv), op).wait();
            for (std::size_t i = 0; i < count; ++i)
              c.expect("recv", i, to_float(recv[i]), reduce16(r * count + i));
            for (std::size_t k = 0; k < send.size(); ++k)
              c.expect("send", k, to_float(send[k]), to_float(val16(w, k)));
          }
        }
      }
      for (const int root : {0, n - 1}) {
        // broadcast: recv[i] = value(member root, i); off the root the send buffer is empty.
        CaseResult& res = start("broadcast from " + std::to_string(root) + pl + sz);
        Checker c(res);
        std::vector<float> send;
        std::vector<float> buf(count, kSentinel);
        if (comm.rank() == root) {
          for (std::size_t i = 0; i < count; ++i) send.push_back(val(w, i));
        }
        if (in) {
          if (comm.rank() == root) buf = send;
          comm.broadcast(std::span<float>(buf), root).wait();
        } else {
          comm.broadcast(std::span<const float>(send), std::span<float>(buf), root).wait();
        }
        for (std::size_t i = 0; i < count; ++i) {
          c.expect("recv", i, buf[i], val(members[static_cast<std::size_t>(root)], i));
        }
      }
    }
  }
  {
    // A bf16 sum that only one rounding gets right: rank 0 holds 1, every other rank 2^-9. Rounded
    // after each addition the sum stays 1 (2^-9 is below half of bf16's ulp at 1, 2^-8); rounded
    // once, (n - 1)·2^-9 >= half an ulp for n >= 4 lifts it above 1.
    CaseResult& res = start("all_reduce sum bf16 rounds once");
    Checker c(res);
    std::vector<Bf16> buf(3, to_bf16(comm.rank() == 0 ? 1.0f : 0x1.0p-9f));
    comm.all_reduce(std::span<Bf16>(buf), ReduceOp::sum).wait();
    const float want = round_to_bf16(static_cast<float>(1.0 + (n - 1) * 0x1.0p-9));
    for (std::size_t i = 0; i < buf.size(); ++i) c.expect("buffer", i, to_float(buf[i]), want);
    if (n >= 4)
      c.expect("the case itself (rounded once, not 1)", 0, want == 1.0f ? 0.0f : 1.0f, 1.0f);
  }
  comm.barrier().wait();
}

// Every case on the world and on every ordered list of axes of `mesh`.
inline std::vector<CaseResult> run_mesh_cases(Communicator& world, const DeviceMesh& mesh,
                                              std::uint64_t seed) {
  std::vector<CaseResult> results;
  MeshComms comms(world, mesh);
  std::vector<int> all;
  for (int d = 0; d < world.size(); ++d) all.push_back(d);
  const std::string m = to_string(mesh);
  run_group_cases(world, all, "'world' of " + m, seed, results);
  for (const auto& axes : ordered_axis_lists(mesh.num_axes())) {
    const std::string name = axes_name(mesh, axes);
    Communicator& comm = axes.size() == 1 ? comms.axis(axes[0]) : [&]() -> Communicator& {
      if (axes.size() == 2) {
        return comms.axes({mesh.axis(axes[0]).name.view(), mesh.axis(axes[1]).name.view()});
      }
      return comms.axes({mesh.axis(axes[0]).name.view(), mesh.axis(axes[1]).name.view(),
                         mesh.axis(axes[2]).name.view()});
    }();
    CARTO_CHECK(comm.name() == name, "group named '", comm.name(), "', expected '", name, "'");
    run_group_cases(comm, group_members(mesh, axes, world.rank()), "'" + name + "' of " + m,
                    seed + 1000 * results.size(), results);
  }
  return results;
}

// The meshes the tests run on a world of `n` ranks: 1-D, and every 2-D and 3-D factorisation
// into factors of at least 2.
inline std::vector<DeviceMesh> meshes_for(int n) {
  std::vector<DeviceMesh> meshes{DeviceMesh{MeshAxis{.name = "x", .size = n}}};
  for (int a = 2; a < n; ++a) {
    if (n % a != 0) continue;
    meshes.push_back(
        DeviceMesh{MeshAxis{.name = "dp", .size = a}, MeshAxis{.name = "tp", .size = n / a}});
    for (int b = 2; b < n / a; ++b) {
      if ((n / a) % b != 0) continue;
      meshes.push_back(DeviceMesh{MeshAxis{.name = "pp", .size = a},
                                  MeshAxis{.name = "dp", .size = b},
                                  MeshAxis{.name = "tp", .size = n / a / b}});
    }
  }
  return meshes;
}

}  // namespace carto::testing
