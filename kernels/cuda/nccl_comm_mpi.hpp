// cuda/nccl_comm_mpi.hpp — NCCL over MPI: one process per GPU under mpirun, the ncclUniqueId
// broadcast through carto's MpiComm (target carto::nccl, built when both NCCL and MPI are found).
//
// Design note: NcclComm::bootstrap already takes any host communicator; what MPI adds is which GPU
// a rank drives. mpi_local_device() gives this process's rank among the processes of its node
// (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED) modulo the node's devices, so ranks 0..k-1 of a
// node with k GPUs take devices 0..k-1. A typical main:
//     return carto::mpi::run(argc, argv, [](carto::Communicator& world) {
//       const int device = carto::cuda::mpi_local_device();
//       carto::cuda::CudaBackend backend(device);
//       auto nccl = carto::cuda::nccl_world_over_mpi(world, device, backend.stream());
//       ...
//     });
// This header does not include <mpi.h>.
#pragma once

#include <cuda_runtime_api.h>

#include <carto/runtime/communicator.hpp>
#include <memory>

#include "cuda/nccl_comm.hpp"

namespace carto::cuda {

// This MPI process's GPU (MPI initialised); throws carto::Error when the node has no CUDA device.
int mpi_local_device();

// Collective over the MPI world `mpi_world` (an MpiComm of every process): the NCCL world of the
// same ranks, this rank on `device` issuing on `stream`.
std::unique_ptr<NcclComm> nccl_world_over_mpi(Communicator& mpi_world, int device,
                                              cudaStream_t stream, const NcclOptions& options = {});

}  // namespace carto::cuda
