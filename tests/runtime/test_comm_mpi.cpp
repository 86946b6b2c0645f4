// MpiComm: the collective cases of comm_cases.hpp (the same bodies the thread-rank tests run) on
// every mesh of the job's size, under mpirun -np 4 and -np 8 (CTest label mpi). Each rank prints
// its failing cases; the job's exit code is 1 when any rank saw a wrong element.
#include <cstdio>
#include <mpi/mpi_comm.hpp>
#include <string>

#include "runtime/comm_cases.hpp"

int main(int argc, char** argv) {
  using namespace carto;
  int exit_code = 0;
  const int rc = mpi::run(argc, argv, [&](Communicator& world) {
    float wrong_cases = 0;
    float cases = 0;
    double checked = 0;
    int meshes = 0;
    for (const DeviceMesh& mesh : testing::meshes_for(world.size())) {
      ++meshes;
      for (const testing::CaseResult& r : testing::run_mesh_cases(world, mesh, 9000)) {
        ++cases;
        checked += static_cast<double>(r.checked);
        if (r.wrong == 0) continue;
        if (wrong_cases++ < 8) {
          std::printf("FAILED world rank %d: %s: %lld of %lld wrong; first %s\n", r.world_rank,
                      r.name.c_str(), static_cast<long long>(r.wrong),
                      static_cast<long long>(r.checked), r.first_wrong.c_str());
        }
      }
    }
    // Totals over the job (exact: case counts are small integers).
    std::vector<float> totals{wrong_cases, cases};
    world.all_reduce(std::span<float>(totals), ReduceOp::sum).wait();
    if (world.rank() == 0) {
      std::printf(
          "carto mpi collectives: %d ranks, %d meshes, %.0f cases, %.0f elements checked on "
          "rank 0, %.0f cases with wrong elements\n",
          world.size(), meshes, totals[1], checked, totals[0]);
    }
    exit_code = totals[0] == 0 ? 0 : 1;
  });
  return rc != 0 ? rc : exit_code;
}
