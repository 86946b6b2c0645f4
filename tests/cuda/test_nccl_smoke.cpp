// NcclComm in one process, one thread per GPU present (one GPU is enough; main skips with none):
//  - ncclCommInitAll: an in-place all-reduce of 2^20 floats whose values are integers from
//    comm_cases.hpp's closed form, so the sum over ranks is exact and every element is checked;
//  - NcclGroup: three all-reduces of different sizes fused into one group, their Works complete
//    after the group ends, and waiting inside the open group is an error that says so;
//  - bootstrap over thread ranks (the unique id travels through a ThreadComm) and every collective
//    on every group of the meshes of that many ranks (comm_cases.hpp through DeviceMirror), which
//    also exercises ncclCommSplit.
#include <carto/runtime/thread_comm.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cuda/cuda_backend.hpp>
#include <cuda/nccl_comm.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cuda/device_mirror.hpp"
#include "runtime/comm_cases.hpp"

using namespace carto;
using carto::testing::CaseResult;
using carto::testing::DeviceBytes;
using carto::testing::DeviceMirror;
using carto::testing::DeviceStream;

namespace {

// The exact sum over ranks 0..n-1 of value(seed, rank, i).
float expected_sum(std::uint64_t seed, int n, std::int64_t i) {
  float acc = 0.0f;
  for (int r = 0; r < n; ++r) acc += testing::value(seed, r, i);
  return acc;
}

// One rank's buffer of `count` closed-form values on the current device.
struct RankBuffer {
  RankBuffer(std::uint64_t seed, int rank, std::size_t count) : bytes(count * 4), n(count) {
    std::vector<float> host(count);
    for (std::size_t i = 0; i < count; ++i)
      host[i] = testing::value(seed, rank, static_cast<std::int64_t>(i));
    CARTO_CUDA_CHECK(cudaMemcpy(bytes.data(), host.data(), count * 4, cudaMemcpyHostToDevice));
  }
  [[nodiscard]] std::span<float> span() const {
    return {reinterpret_cast<float*>(bytes.data()), n};
  }
  // Elements that differ from the sum over `ranks` ranks.
  [[nodiscard]] std::int64_t wrong_sums(std::uint64_t seed, int ranks) const {
    std::vector<float> host(n);
    CARTO_CUDA_CHECK(cudaMemcpy(host.data(), bytes.data(), n * 4, cudaMemcpyDeviceToHost));
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i)
      wrong += host[i] != expected_sum(seed, ranks, static_cast<std::int64_t>(i)) ? 1 : 0;
    return wrong;
  }
  DeviceBytes bytes;
  std::size_t n;
};

}  // namespace

TEST_CASE("NCCL: all-reduce over every GPU of this process (ncclCommInitAll)", "[cuda][nccl]") {
  const int n = cuda::device_count();
  REQUIRE(n >= 1);
  std::vector<int> devices;
  std::vector<std::unique_ptr<DeviceStream>> streams;
  std::vector<cudaStream_t> raw;
  for (int d = 0; d < n; ++d) {
    devices.push_back(d);
    CARTO_CUDA_CHECK(cudaSetDevice(d));
    streams.push_back(std::make_unique<DeviceStream>());
    raw.push_back(streams.back()->get());
  }
  auto comms = cuda::NcclComm::init_all(devices, raw);
  REQUIRE(comms.size() == devices.size());
  std::vector<std::int64_t> wrong(devices.size(), -1), grouped(devices.size(), -1);
  std::vector<std::string> errors(devices.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      try {
        CARTO_CUDA_CHECK(cudaSetDevice(r));
        cuda::NcclComm& comm = *comms[i];
        const RankBuffer big(11, r, std::size_t{1} << 20);
        comm.all_reduce(big.span(), ReduceOp::sum).wait();
        wrong[i] = big.wrong_sums(11, n);

        const RankBuffer a(12, r, 1), b(13, r, 4097), c(14, r, 100000);
        std::vector<Work> works;
        bool refused = false;
        {
          cuda::NcclGroup group;
          works.push_back(comm.all_reduce(a.span(), ReduceOp::sum));
          works.push_back(comm.all_reduce(b.span(), ReduceOp::sum));
          works.push_back(comm.all_reduce(c.span(), ReduceOp::sum));
          try {
            works.front().wait();
          } catch (const Error& e) {
            refused = std::string(e.what()).find("open NcclGroup") != std::string::npos;
          }
          group.end();
        }
        for (Work& w : works) w.wait();
        grouped[i] = a.wrong_sums(12, n) + b.wrong_sums(13, n) + c.wrong_sums(14, n) +
                     (refused ? 0 : 1000000);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (std::size_t r = 0; r < devices.size(); ++r) {
    INFO("rank " << r << " of " << n << (errors[r].empty() ? "" : ": " + errors[r]));
    CHECK(errors[r].empty());
    CHECK(wrong[r] == 0);
    CHECK(grouped[r] == 0);  // 10^6 would mean the wait inside the open group was not refused
  }
}

TEST_CASE("NCCL: bootstrap over thread ranks, every collective on every group", "[cuda][nccl]") {
  const int n = cuda::device_count();
  REQUIRE(n >= 1);
  for (const DeviceMesh& mesh : testing::meshes_for(n)) {
    std::vector<std::vector<CaseResult>> per_rank(static_cast<std::size_t>(n));
    run_threads(n, [&](Communicator& host) {
      CARTO_CUDA_CHECK(cudaSetDevice(host.rank()));
      const DeviceStream stream;
      DeviceMirror world(cuda::NcclComm::bootstrap(host, host.rank(), stream.get()));
      per_rank[static_cast<std::size_t>(host.rank())] =
          testing::run_mesh_cases(world, mesh, 5000 + static_cast<std::uint64_t>(n));
    });
    std::int64_t checked = 0, wrong_cases = 0;
    std::string first;
    for (const auto& results : per_rank) {
      for (const CaseResult& r : results) {
        checked += r.checked;
        if (r.wrong > 0 && wrong_cases++ == 0) first = r.name + ": " + r.first_wrong;
      }
    }
    INFO(to_string(mesh) << ": " << wrong_cases << " cases wrong; first " << first);
    CHECK(wrong_cases == 0);
    CHECK(checked > 0);
  }
}
