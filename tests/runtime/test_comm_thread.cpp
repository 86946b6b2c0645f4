// ThreadComm: every collective, in place and out of place, on every group of meshes of 1, 2, 4 and
// 8 thread ranks (comm_cases.hpp holds the closed forms); failure propagation with bounded time;
// argument checks.
#include <atomic>
#include <carto/runtime/thread_comm.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm_cases.hpp"

using namespace carto;
using carto::testing::CaseResult;

namespace {

// Checks every rank's results; prints up to 8 failing cases.
void check_results(const std::vector<std::vector<CaseResult>>& per_rank, const std::string& what) {
  std::int64_t checked = 0;
  std::int64_t wrong_cases = 0;
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

// How long a failure may take to reach the other ranks: the poll period plus generous slack for a
// loaded 2-core machine. Bounded, never a hang.
constexpr auto kFailureBound = std::chrono::seconds(5);

}  // namespace

TEST_CASE("thread ranks: every collective on every group of every mesh", "[comm][thread]") {
  for (const int n : {1, 2, 4, 8}) {
    for (const DeviceMesh& mesh : carto::testing::meshes_for(n)) {
      std::vector<std::vector<CaseResult>> per_rank(static_cast<std::size_t>(n));
      run_threads(n, [&](Communicator& world) {
        per_rank[static_cast<std::size_t>(world.rank())] =
            carto::testing::run_mesh_cases(world, mesh, 7000 + static_cast<std::uint64_t>(n));
      });
      check_results(per_rank, to_string(mesh));
    }
  }
}

TEST_CASE("thread ranks: the issue's meshes are among those tested", "[comm][thread]") {
  auto has = [](int n, const std::string& text) {
    for (const DeviceMesh& m : carto::testing::meshes_for(n)) {
      if (to_string(m) == text) return true;
    }
    return false;
  };
  CHECK(has(4, "{x:4}"));
  CHECK(has(4, "{dp:2, tp:2}"));
  CHECK(has(8, "{pp:2, dp:2, tp:2}"));
}

TEST_CASE("thread ranks: mesh groups carry names, sizes and world ranks", "[comm][thread]") {
  const DeviceMesh mesh = parse_mesh("pp=2,dp=2,tp=2");
  std::vector<std::vector<std::vector<int>>> seen(8);
  run_threads(8, [&](Communicator& world) {
    MeshComms comms(world, mesh);
    auto& mine = seen[static_cast<std::size_t>(world.rank())];
    mine.push_back(comms.axis("pp").group().world_ranks);
    mine.push_back(comms.axis("tp").group().world_ranks);
    mine.push_back(comms.axes({"tp", "pp"}).group().world_ranks);
    CARTO_CHECK(comms.axes({"dp", "tp"}).name() == "dp,tp", "name");
    CARTO_CHECK(&comms.world() == &world, "world");
  });
  // Device 5 = (pp 1, dp 0, tp 1).
  CHECK(seen[5][0] == std::vector<int>{1, 5});
  CHECK(seen[5][1] == std::vector<int>{4, 5});
  // Device = 4·pp + 2·dp + tp. Group (tp, pp) at dp 0, tp slowest: (tp0,pp0)=0, (tp0,pp1)=4,
  // (tp1,pp0)=1, (tp1,pp1)=5.
  CHECK(seen[5][2] == std::vector<int>{0, 4, 1, 5});
}

TEST_CASE("thread ranks: a rank that throws fails the others' pending collective, naming it",
          "[comm][thread][failure]") {
  std::vector<std::string> messages(4);
  std::vector<double> seconds(4, 0.0);
  std::string cause;
  try {
    run_threads(4, [&](Communicator& world) {
      if (world.rank() == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        detail::fail("deliberate failure on rank 2");
      }
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<float> buf(16, 1.0f);
      try {
        world.all_reduce(std::span<float>(buf), ReduceOp::sum).wait();
      } catch (const Error& e) {
        messages[static_cast<std::size_t>(world.rank())] = e.what();
      }
      seconds[static_cast<std::size_t>(world.rank())] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  } catch (const Error& e) {
    cause = e.what();
  }
  INFO("launcher: " << cause);
  CHECK(cause.find("world rank 2 of 4") != std::string::npos);
  CHECK(cause.find("deliberate failure on rank 2") != std::string::npos);
  for (const int r : {0, 1, 3}) {
    INFO("rank " << r << ": " << messages[static_cast<std::size_t>(r)]);
    CHECK(messages[static_cast<std::size_t>(r)].find("all_reduce on rank") != std::string::npos);
    CHECK(messages[static_cast<std::size_t>(r)].find("world rank 2 of 4 thread ranks failed: "
                                                     "deliberate failure on rank 2") !=
          std::string::npos);
    CHECK(seconds[static_cast<std::size_t>(r)] <
          std::chrono::duration<double>(kFailureBound).count());
  }
}

TEST_CASE("thread ranks: after a failure the next collective fails on every group",
          "[comm][thread][failure]") {
  // 2x2 mesh: rank 1 fails; ranks 0 and 2 then use their dp group {0, 2}, which rank 1 is not in.
  // The world is driven by hand so that the failure is recorded before they issue the collective.
  const DeviceMesh mesh = parse_mesh("dp=2,tp=2");
  ThreadWorld world(4);
  std::atomic<int> first_done{0};
  std::atomic<bool> rank1_failed{false};
  std::atomic<int> failed_next{0};
  auto rank_body = [&](int rank) {
    try {
      auto comm = world.communicator(rank);
      MeshComms comms(*comm, mesh);
      std::vector<float> buf(8, 2.0f);
      comms.axis("dp").all_reduce(std::span<float>(buf), ReduceOp::sum).wait();
      ++first_done;
      if (rank == 1) {
        while (first_done < 4) std::this_thread::yield();  // fail between the two collectives
        world.fail(1, "rank 1 gives up");
        rank1_failed = true;
        return;
      }
      if (rank == 3) {
        world.finish(3);
        return;
      }
      while (!rank1_failed) std::this_thread::yield();
      try {
        comms.axis("dp").all_reduce(std::span<float>(buf), ReduceOp::max).wait();
      } catch (const Error& e) {
        if (std::string(e.what()).find("world rank 1 of 4 thread ranks failed: rank 1 gives up") !=
            std::string::npos) {
          ++failed_next;
        }
      }
      world.finish(rank);
    } catch (const std::exception& e) {
      world.fail(rank, e.what());
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) threads.emplace_back(rank_body, r);
  for (auto& t : threads) t.join();
  CHECK(world.failed_rank() == 1);
  CHECK(failed_next == 2);
}

TEST_CASE("thread ranks: a rank that returns while others wait for it makes them fail",
          "[comm][thread][failure]") {
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      run_threads(3,
                  [](Communicator& world) {
                    if (world.rank() == 2) return;
                    world.barrier().wait();
                  }),
      Catch::Contains("world rank 2 (rank 2 of this group) returned without joining"));
  CHECK(std::chrono::steady_clock::now() - t0 < kFailureBound);
}

TEST_CASE("thread ranks: mismatched collectives fail on every rank", "[comm][thread][failure]") {
  CHECK_THROWS_WITH(
      run_threads(2,
                  [](Communicator& world) {
                    std::vector<float> a(4, 1.0f);
                    std::vector<float> b(8, 0.0f);
                    if (world.rank() == 0) {
                      world.all_reduce(std::span<float>(a), ReduceOp::sum).wait();
                    } else {
                      world.all_gather(std::span<const float>(a), std::span<float>(b)).wait();
                    }
                  }),
      Catch::Contains("issued different collectives"));
}

TEST_CASE("communicator: argument checks name the call and the rule", "[comm][thread]") {
  ThreadWorld world(2);
  auto comm = world.communicator(1);
  std::vector<float> a(6, 1.0f);
  std::vector<float> b(5, 0.0f);
  CHECK_THROWS_WITH(
      comm->all_reduce(std::span<const float>(a), std::span<float>(b), ReduceOp::sum),
      Catch::Contains("all_reduce") && Catch::Contains("send and recv have the same size"));
  CHECK_THROWS_WITH(comm->all_gather(std::span<const float>(a), std::span<float>(b)),
                    Catch::Contains("recv holds size() times send"));
  CHECK_THROWS_WITH(
      comm->reduce_scatter(std::span<const float>(a), std::span<float>(b), ReduceOp::sum),
      Catch::Contains("send holds size() times recv"));
  CHECK_THROWS_WITH(comm->all_to_all(std::span<const float>(b), std::span<float>(b)),
                    Catch::Contains("size() chunks"));
  CHECK_THROWS_WITH(comm->broadcast(std::span<float>(a), 2), Catch::Contains("roots are 0..1"));
  // Overlap that is not NCCL's in-place form: all_gather with send at chunk 0 on rank 1.
  std::vector<float> g(8, 0.0f);
  CHECK_THROWS_WITH(comm->all_gather(std::span<const float>(g.data(), 4), std::span<float>(g)),
                    Catch::Contains("overlap without being in place"));
  std::vector<std::byte> fp16(8);
  CHECK_THROWS_WITH(
      comm->all_reduce(fp16, fp16, DType::fp16, ReduceOp::sum),
      Catch::Contains("all_reduce") && Catch::Contains("reduces fp32 and bf16; got fp16"));
  CHECK_THROWS_WITH(comm->reduce_scatter(std::span<const std::byte>(fp16.data(), 8),
                                         std::span<std::byte>(fp16.data() + 2, 4), DType::fp8_e5m2,
                                         ReduceOp::max),
                    Catch::Contains("reduce_scatter") && Catch::Contains("got fp8_e5m2"));
  CHECK_THROWS_WITH(comm->split(-1, 0, "bad"), Catch::Contains("color >= 0"));
  CHECK(comm->describe() == "rank 1 of 2 in group 'world' (world rank 1)");
  world.finish(0);
  world.finish(1);
}

TEST_CASE("communicator: a mesh must have as many devices as the world has ranks",
          "[comm][thread]") {
  CHECK_THROWS_WITH(run_threads(2,
                                [](Communicator& world) {
                                  [[maybe_unused]] MeshComms comms(world, parse_mesh("dp=2,tp=2"));
                                }),
                    Catch::Contains("has 4 devices but the world 'world' has 2 ranks"));
}

TEST_CASE("communicator: split orders by key, then rank, and names the group", "[comm][thread]") {
  std::vector<std::vector<int>> members(6);
  std::vector<int> ranks(6);
  run_threads(6, [&](Communicator& world) {
    // Two colors by parity; keys reverse the order within each.
    auto sub = world.split(world.rank() % 2, -world.rank(), "parity");
    members[static_cast<std::size_t>(world.rank())] = sub->group().world_ranks;
    ranks[static_cast<std::size_t>(world.rank())] = sub->rank();
    CARTO_CHECK(sub->name() == "parity", "name");
    // The sub-group works: sum of world ranks of its members.
    std::vector<float> v{static_cast<float>(world.rank())};
    sub->all_reduce(std::span<float>(v), ReduceOp::sum).wait();
    CARTO_CHECK(v[0] == (world.rank() % 2 == 0 ? 6.0f : 9.0f), "sum ", v[0]);
  });
  CHECK(members[0] == std::vector<int>{4, 2, 0});
  CHECK(members[3] == std::vector<int>{5, 3, 1});
  CHECK(ranks == std::vector<int>{2, 2, 1, 1, 0, 0});
}

TEST_CASE("communicator: CPU work is complete when the call returns", "[comm][thread]") {
  Work none;
  CHECK(none.completed());
  run_threads(2, [](Communicator& world) {
    std::vector<float> v{1.0f, 2.0f};
    Work w = world.all_reduce(std::span<float>(v), ReduceOp::sum);
    CARTO_CHECK(w.completed(), "ThreadComm completes synchronously");
    w.wait();
    CARTO_CHECK(v[0] == 2.0f && v[1] == 4.0f, "sum");
  });
}
