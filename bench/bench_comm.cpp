// ThreadComm collective bandwidth: all-reduce, all-gather, reduce-scatter and all-to-all on 2 and 4
// thread ranks for buffers of 1 KiB to 64 MiB, out of place, fp32.
//
// S is nccl-tests' buffer size (doc/PERFORMANCE.md): the all-reduce buffer, the all-gather output,
// the reduce-scatter input, one rank's all-to-all send buffer. Counters: algbw = S / t and busbw =
// algbw · bus factor (all-reduce 2(n-1)/n, the others (n-1)/n), in GB/s; predicted_us is the cost
// model's time on hardware::cpu()'s thread link (carto/cost/collectives.hpp) and measured/predicted
// the ratio of the measured time per collective to it. Rank 0 runs the timing loop on the calling
// thread; the other ranks run the same fixed number of iterations, so every iteration is one
// complete collective.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <carto/cost.hpp>
#include <carto/runtime/thread_comm.hpp>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace {

using namespace carto;

constexpr std::int64_t kKiB = 1024;
constexpr std::int64_t kMiB = 1024 * kKiB;

void issue(Communicator& comm, Collective kind, std::span<float> send, std::span<float> recv) {
  switch (kind) {
    case Collective::all_reduce:
      comm.all_reduce(std::span<const float>(send), recv, ReduceOp::sum).wait();
      break;
    case Collective::all_gather: comm.all_gather(std::span<const float>(send), recv).wait(); break;
    case Collective::reduce_scatter:
      comm.reduce_scatter(std::span<const float>(send), recv, ReduceOp::sum).wait();
      break;
    case Collective::all_to_all: comm.all_to_all(std::span<const float>(send), recv).wait(); break;
    case Collective::broadcast: comm.broadcast(std::span<const float>(send), recv, 0).wait(); break;
  }
}

void BM_ThreadCollective(benchmark::State& state, Collective kind, int ranks, std::int64_t bytes,
                         std::int64_t iterations) {
  const auto n = static_cast<std::size_t>(ranks);
  const auto elems = static_cast<std::size_t>(bytes) / sizeof(float);  // S in elements
  // Buffer sizes per rank in elements, by nccl-tests' definition of S.
  std::size_t send_elems = elems;
  std::size_t recv_elems = elems;
  if (kind == Collective::all_gather) send_elems = elems / n;
  if (kind == Collective::reduce_scatter) recv_elems = elems / n;

  double seconds = 0;  // rank 0's loop
  run_threads(ranks, [&](Communicator& comm) {
    std::vector<float> send(send_elems);
    std::vector<float> recv(recv_elems);
    for (std::size_t i = 0; i < send.size(); ++i) {
      send[i] = static_cast<float>((i + static_cast<std::size_t>(comm.rank())) % 17);
    }
    issue(comm, kind, send, recv);  // warm-up: pages touched, threads running
    if (comm.rank() == 0) {
      const auto start = std::chrono::steady_clock::now();
      for (auto _ : state) {
        issue(comm, kind, send, recv);
        benchmark::DoNotOptimize(recv.data());
      }
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } else {
      for (std::int64_t i = 0; i < iterations; ++i) issue(comm, kind, send, recv);
    }
  });

  const double factor = bus_factor(kind, ranks);
  const LinkCost link = link_cost(hardware::cpu().links.at(0));
  const double predicted = collective_time(kind, ranks, bytes, link);
  const double t = seconds / static_cast<double>(state.iterations());  // one collective
  const double algbw = static_cast<double>(bytes) / t;
  state.counters["algbw_GBps"] = algbw / 1e9;
  state.counters["busbw_GBps"] = algbw * factor / 1e9;
  state.counters["predicted_us"] = predicted * 1e6;
  state.counters["measured/predicted"] = t / predicted;
  state.SetLabel(std::string(to_string_view(kind)) + " n=" + std::to_string(ranks) +
                 " S=" + std::to_string(bytes / kKiB) + "KiB");
}

}  // namespace

int main(int argc, char** argv) {
  for (const Collective kind : {Collective::all_reduce, Collective::all_gather,
                                Collective::reduce_scatter, Collective::all_to_all}) {
    for (const int ranks : {2, 4}) {
      for (std::int64_t bytes = kKiB; bytes <= 64 * kMiB; bytes *= 4) {
        // About 256 MiB of S per benchmark: enough to time, short on a 2-core machine.
        const std::int64_t iterations = std::clamp<std::int64_t>(256 * kMiB / bytes, 4, 2000);
        const std::string name = "BM_ThreadCollective/" + std::string(to_string_view(kind)) +
                                 "/ranks:" + std::to_string(ranks) +
                                 "/bytes:" + std::to_string(bytes);
        benchmark::RegisterBenchmark(name.c_str(), BM_ThreadCollective, kind, ranks, bytes,
                                     iterations)
            ->Iterations(iterations)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
