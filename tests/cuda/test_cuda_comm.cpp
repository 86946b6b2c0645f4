// LoopbackComm: every rank of a mesh on one GPU. Every collective, in place and out of place, on
// every group of meshes of 1, 2, 4 and 8 ranks (tests/runtime/comm_cases.hpp's closed forms, run
// on device buffers through DeviceMirror); sums bit-identical to ThreadComm's on random fp32
// values (both reduce in rank order 0..n-1); a rank that throws makes the others fail in bounded
// time; the stream protocol holds when the ranks' streams still have work queued before a
// collective.
#include <atomic>
#include <bit>
#include <carto/runtime/rng.hpp>
#include <carto/runtime/thread_comm.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cuda/loopback_comm.hpp>
#include <mutex>
#include <string>
#include <thread>
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

TEST_CASE("loopback sums equal ThreadComm's bit for bit", "[cuda][comm]") {
  constexpr std::size_t kCount = 3001;  // not a multiple of the chunking of either
  for (const int n : {2, 3, 8}) {
    const auto nu = static_cast<std::size_t>(n);
    std::vector<std::vector<float>> want_all(nu), want_scatter(nu), got_all(nu), got_scatter(nu);
    run_threads(n, [&](Communicator& world) {
      const auto r = static_cast<std::size_t>(world.rank());
      const std::vector<float> send = random_values(world.rank(), kCount * nu);
      want_all[r].assign(kCount * nu, 0.0f);
      world.all_reduce(std::span<const float>(send), std::span<float>(want_all[r]), ReduceOp::sum)
          .wait();
      want_scatter[r].assign(kCount, 0.0f);
      world
          .reduce_scatter(std::span<const float>(send), std::span<float>(want_scatter[r]),
                          ReduceOp::sum)
          .wait();
    });
    cuda::run_loopback(n, 0, [&](cuda::LoopbackWorld& world, int rank) {
      const auto r = static_cast<std::size_t>(rank);
      const DeviceStream stream;
      DeviceMirror mirror(world.communicator(rank, stream.get()));
      const std::vector<float> send = random_values(rank, kCount * nu);
      got_all[r].assign(kCount * nu, 0.0f);
      mirror.all_reduce(std::span<const float>(send), std::span<float>(got_all[r]), ReduceOp::sum)
          .wait();
      got_scatter[r].assign(kCount, 0.0f);
      mirror
          .reduce_scatter(std::span<const float>(send), std::span<float>(got_scatter[r]),
                          ReduceOp::sum)
          .wait();
    });
    for (std::size_t r = 0; r < nu; ++r) {
      std::int64_t differ = 0;
      for (std::size_t i = 0; i < want_all[r].size(); ++i)
        differ += std::bit_cast<std::uint32_t>(got_all[r][i]) !=
                  std::bit_cast<std::uint32_t>(want_all[r][i]);
      for (std::size_t i = 0; i < want_scatter[r].size(); ++i)
        differ += std::bit_cast<std::uint32_t>(got_scatter[r][i]) !=
                  std::bit_cast<std::uint32_t>(want_scatter[r][i]);
      INFO(n << " ranks, rank " << r << ": " << differ << " elements differ in their bits");
      CHECK(differ == 0);
    }
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
