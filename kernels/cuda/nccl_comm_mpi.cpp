// cuda/nccl_comm_mpi.cpp — mpi_local_device and nccl_world_over_mpi (design note in the header).
#include "cuda/nccl_comm_mpi.hpp"

#include <mpi.h>

#include <string>

#include "cuda/cuda_check.hpp"

namespace carto::cuda {

namespace {

std::string describe_mpi(int status) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(status, text, &length) != MPI_SUCCESS) return "unknown MPI error";
  return {text, static_cast<std::size_t>(length)};
}

}  // namespace

int mpi_local_device() {
  int initialized = 0;
  CARTO_CHECK_STATUS(MPI_Initialized(&initialized), MPI_SUCCESS, describe_mpi);
  CARTO_CHECK(initialized != 0,
              "mpi_local_device needs MPI initialised (carto::mpi::run or "
              "carto::mpi::Environment first)");
  MPI_Comm node = MPI_COMM_NULL;
  CARTO_CHECK_STATUS(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
      MPI_SUCCESS, describe_mpi);
  int local = 0;
  const int status = MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  CARTO_CHECK_STATUS(status, MPI_SUCCESS, describe_mpi);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (devices < 1) {
    detail::fail("carto: MPI rank ", local,
                 " of its node sees no CUDA device; NCCL needs one GPU "
                 "per process");
  }
  return local % devices;
}

std::unique_ptr<NcclComm> nccl_world_over_mpi(Communicator& mpi_world, int device,
                                              cudaStream_t stream, const NcclOptions& options) {
  int size = 0;
  CARTO_CHECK_STATUS(MPI_Comm_size(MPI_COMM_WORLD, &size), MPI_SUCCESS, describe_mpi);
  if (mpi_world.size() != size) {
    detail::fail("carto: nccl_world_over_mpi takes the MPI world (", size, " processes); got ",
                 mpi_world.describe());
  }
  return NcclComm::bootstrap(mpi_world, device, stream, options);
}

}  // namespace carto::cuda
