// MpiComm failure cases, one per argument, run by run_mpi_abort.cmake under mpiexec -np 4, which
// bounds the time and checks the exit code and the lines each case must print:
//   throw    world rank 1 throws while the others wait in a barrier;
//   return   world rank 1 returns from its body while the others wait in a barrier;
//   group    world rank 1 returns before an all_reduce of its pair group {0, 1} (the other pair
//            completes its own and waits for the end);
//   stop     world rank 1 stops itself (SIGSTOP) before the barrier; CARTO_COLLECTIVE_TIMEOUT
//            set by the script ends the others' wait;
//   timeout  no rank fails; CARTO_COLLECTIVE_TIMEOUT holds a bad value.
#include <csignal>
#include <cstdio>
#include <mpi/mpi_comm.hpp>
#include <span>
#include <string_view>
#include <vector>

int main(int argc, char** argv) {
  using namespace carto;
  const std::string_view which = argc > 1 ? argv[1] : "";
  return mpi::run(argc, argv, [&](Communicator& world) {
    std::vector<float> v{1.0f, 2.0f};
    world.all_reduce(std::span<float>(v), ReduceOp::sum).wait();
    if (which == "group") {
      auto pair = world.split(world.rank() / 2, world.rank(), "pair");
      if (world.rank() == 1) return;
      pair->all_reduce(std::span<float>(v), ReduceOp::sum).wait();
      return;
    }
    if (world.rank() == 1) {
      if (which == "throw") detail::fail("deliberate failure on rank 1");
      if (which == "return") return;
      if (which == "stop") std::raise(SIGSTOP);
    }
    // The others wait here for rank 1: only the failure handling ends them.
    world.barrier().wait();
    if (which != "timeout") std::printf("world rank %d passed the barrier\n", world.rank());
  });
}
