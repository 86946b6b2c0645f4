// MpiComm failure: world rank 1 throws while the others wait in a collective; mpi::run must end the
// whole job (MPI_Abort) with a non-zero exit code and a line naming the rank and its message.
// Run by run_mpi_abort.cmake, which bounds the time and checks the exit code and the output.
#include <mpi/mpi_comm.hpp>
#include <span>
#include <vector>

int main(int argc, char** argv) {
  using namespace carto;
  return mpi::run(argc, argv, [](Communicator& world) {
    std::vector<float> v{1.0f, 2.0f};
    world.all_reduce(std::span<float>(v), ReduceOp::sum).wait();
    if (world.rank() == 1) detail::fail("deliberate failure on rank 1");
    // The others wait here for rank 1, which never comes: only the abort ends them.
    world.barrier().wait();
  });
}
