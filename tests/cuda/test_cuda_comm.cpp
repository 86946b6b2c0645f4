// LoopbackComm: every rank of a mesh on one GPU. Every collective, in place and out of place, on
// every group of meshes of 1, 2, 4 and 8 ranks (tests/runtime/comm_cases.hpp's closed forms, run
// on device buffers through DeviceMirror); sums bit-identical to ThreadComm's on random fp32 and
// bf16 values (both reduce in fp32 in rank order 0..n-1 and round bf16 once); a rank that throws
// makes the others fail in bounded time; the stream protocol holds when the ranks' streams still
// have work queued before a collective.
#include <atomic>
#include <carto/runtime/bf16.hpp>
#include <carto/runtime/rng.hpp>
#include <carto/runtime/thread_comm.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <cuda/loopback_comm.hpp>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda/device_mirror.hpp"
#include "runtime/comm_cases.hpp"

using namespace carto;
using carto::testing::CaseResult;
using carto::testing::DeviceMirror;
using carto::testing::DeviceStream;

namespace {

void check_results(const std::vector<std::vector<CaseResult>>& per_rank, const std::string& what) {
  std::int64_t checked = 0, wrong_cases = 0;
  std::string report;
  for (const auto& results : per_rank) {
    for (const CaseResult& r : results) {
      checked += r.checked;
      if (r.wrong == 0) continue;
      if (wrong_cases++ < 8) {
        report += "  world rank " + std::to_string(r.world_rank) + ": " + r.name + ": " +
                  std::to_string(r.wrong) + " of " + std::to_string(r.checked) + " wrong; first " +
                  r.first_wrong + "\n";
      }
    }
  }
  INFO(what << ": " << wrong_cases << " cases with wrong elements\n" << report);
  CHECK(wrong_cases == 0);
  CHECK(checked > 0);
}

// Random fp32 values (not integers: their sums round, so the order of the additions shows).
std::vector<float> random_values(int rank, std::size_t count) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) {
    v[i] = rng::normal({.seed = 404, .id = static_cast<std::uint64_t>(rank) + 1},
                       static_cast<std::int64_t>(i));
  }
  return v;
}

}  // namespace

TEST_CASE("loopback ranks on one GPU: every collective on every group of every mesh",
          "[cuda][comm]") {
  for (const int n : {1, 2, 4, 8}) {
    for (const DeviceMesh& mesh : carto::testing::meshes_for(n)) {
      std::vector<std::vector<CaseResult>> per_rank(static_cast<std::size_t>(n));
      cuda::run_loopback(n, 0, [&](cuda::LoopbackWorld& world, int rank) {
        const DeviceStream stream;
        DeviceMirror mirror(world.communicator(rank, stream.get()));
        per_rank[static_cast<std::size_t>(rank)] =
            carto::testing::run_mesh_cases(mirror, mesh, 9000 + static_cast<std::uint64_t>(n));
      });
      check_results(per_rank, to_string(mesh));
    }
  }
}

namespace {

// Every rank's all_reduce and reduce_scatter sums of random values of element type T (float or
// Bf16) on `comm`, as (all, scatter).
template <class T>
std::pair<std::vector<T>, std::vector<T>> sums_of(Communicator& comm, std::size_t count) {
  const auto n = static_cast<std::size_t>(comm.size());
  const std::vector<float> values = random_values(comm.world_rank(), count * n);
  std::vector<T> send(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    if constexpr (std::is_same_v<T, Bf16>) {
      send[i] = to_bf16(values[i]);
    } else {
      send[i] = values[i];
    }
  }
  std::vector<T> all(count * n), scatter(count);
  comm.all_reduce(std::span<const T>(send), std::span<T>(all), ReduceOp::sum).wait();
  comm.reduce_scatter(std::span<const T>(send), std::span<T>(scatter), ReduceOp::sum).wait();
  return {std::move(all), std::move(scatter)};
}

template <class T>
void check_bitwise_against_threads(int n) {
  constexpr std::size_t kCount = 3001;  // not a multiple of the chunking of either
  const auto nu = static_cast<std::size_t>(n);
  std::vector<std::pair<std::vector<T>, std::vector<T>>> want(nu), got(nu);
  run_threads(n, [&](Communicator& world) {
    want[static_cast<std::size_t>(world.rank())] = sums_of<T>(world, kCount);
  });
  cuda::run_loopback(n, 0, [&](cuda::LoopbackWorld& world, int rank) {
    const DeviceStream stream;
    DeviceMirror mirror(world.communicator(rank, stream.get()));
    got[static_cast<std::size_t>(rank)] = sums_of<T>(mirror, kCount);
  });
  for (std::size_t r = 0; r < nu; ++r) {
    std::int64_t differ = 0;
    auto count = [&](const std::vector<T>& a, const std::vector<T>& b) {
      for (std::size_t i = 0; i < b.size(); ++i)
        differ += std::memcmp(&a[i], &b[i], sizeof(T)) != 0 ? 1 : 0;
    };
    count(got[r].first, want[r].first);
    count(got[r].second, want[r].second);
    INFO(n << " ranks, rank " << r << ", " << sizeof(T) * 8 << "-bit elements: " << differ
           << " elements differ in their bits");
    CHECK(differ == 0);
  }
}

}  // namespace

TEST_CASE("loopback sums equal ThreadComm's bit for bit, fp32 and bf16", "[cuda][comm]") {
  // Both reduce each element in fp32 in rank order 0..n-1; bf16 is rounded once, on the store.
  for (const int n : {2, 3, 8}) {
    check_bitwise_against_threads<float>(n);
    check_bitwise_against_threads<Bf16>(n);
  }
}

TEST_CASE("loopback collectives are ordered after the work queued on each rank's stream",
          "[cuda][comm]") {
  // Each rank queues a long chain of device copies that produce its send buffer, then issues the
  // all-reduce at once, without synchronizing: the collective must wait for the copies (the
  // `ready` events), not read a half-written buffer.
  constexpr int kRanks = 4;
  constexpr std::size_t kCount = 1 << 20;
  std::vector<std::int64_t> wrong(kRanks, -1);
  cuda::run_loopback(kRanks, 0, [&](cuda::LoopbackWorld& world, int rank) {
    const DeviceStream stream;
    auto comm = world.communicator(rank, stream.get());
    std::vector<float> host(kCount, static_cast<float>(rank + 1));
    carto::testing::DeviceBytes a(kCount * 4), b(kCount * 4);
    CARTO_CUDA_CHECK(cudaMemcpy(a.data(), host.data(), kCount * 4, cudaMemcpyHostToDevice));
    for (int hop = 0; hop < 64; ++hop) {  // a -> b -> a ..., ending in b
      CARTO_CUDA_CHECK(cudaMemcpyAsync(hop % 2 == 0 ? b.data() : a.data(),
                                       hop % 2 == 0 ? a.data() : b.data(), kCount * 4,
                                       cudaMemcpyDeviceToDevice, stream.get()));
    }
    CARTO_CUDA_CHECK(
        cudaMemcpyAsync(b.data(), a.data(), kCount * 4, cudaMemcpyDeviceToDevice, stream.get()));
    auto* f = reinterpret_cast<float*>(b.data());
    comm->all_reduce(std::span<float>(f, kCount), ReduceOp::sum).wait();
    CARTO_CUDA_CHECK(cudaMemcpy(host.data(), b.data(), kCount * 4, cudaMemcpyDeviceToHost));
    const float want = kRanks * (kRanks + 1) / 2.0f;
    std::int64_t bad = 0;
    for (const float x : host) bad += x != want ? 1 : 0;
    wrong[static_cast<std::size_t>(rank)] = bad;
  });
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r);
    CHECK(wrong[static_cast<std::size_t>(r)] == 0);
  }
}

TEST_CASE("a loopback rank that throws makes the others fail, in bounded time", "[cuda][comm]") {
  const auto start = std::chrono::steady_clock::now();
  std::atomic<int> failed_in_collective{0};
  try {
    cuda::run_loopback(4, 0, [&](cuda::LoopbackWorld& world, int rank) {
      const DeviceStream stream;
      auto comm = world.communicator(rank, stream.get());
      if (rank == 2) throw Error("rank 2 gives up");
      carto::testing::DeviceBytes buf(64 * 4);
      try {
        comm->all_reduce(std::span<float>(reinterpret_cast<float*>(buf.data()), 64), ReduceOp::sum)
            .wait();
      } catch (const Error&) {
        ++failed_in_collective;
        throw;
      }
    });
    FAIL("run_loopback returned although rank 2 threw");
  } catch (const Error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("world rank 2") != std::string::npos);
    CHECK(what.find("rank 2 gives up") != std::string::npos);
  }
  CHECK(failed_in_collective == 3);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}
