// mpi/mpi_comm.hpp — ranks as processes under MPI (OpenMPI's mpirun), target carto::mpi.
//
// Design note. MpiComm is a carto::Communicator over one MPI communicator: the world is a duplicate
// of MPI_COMM_WORLD, and split() is MPI_Comm_split, so MeshComms gives every mesh axis its own MPI
// communicator. Collectives map one to one onto MPI's (MPI_Allreduce, MPI_Allgather,
// MPI_Reduce_scatter_block, MPI_Alltoall, MPI_Bcast, MPI_Barrier), in place through MPI_IN_PLACE;
// they complete before the call returns. Every MPI call is checked with CARTO_CHECK_STATUS (the
// communicators return errors instead of aborting, MPI_ERRORS_RETURN), so a failed call throws a
// carto::Error naming the call and MPI's description. This header does not include <mpi.h>.
//
// bf16 reductions: MPI has no bf16 type, and a user-defined MPI_Op on a 2-byte type would round
// to bf16 after every pairwise step of MPI's reduction tree. So MpiComm reduces bf16 itself, as
// the Communicator contract asks (fp32 in rank order, one rounding): reduce_scatter exchanges the
// chunks with MPI_Alltoall and each rank reduces the size() pieces of its own chunk in rank order;
// all_reduce does the same on size() near-equal chunks (MPI_Alltoallv) and then all-gathers the
// reduced chunks (MPI_Allgatherv), the traffic of a ring all-reduce. The staging buffers are host
// vectors of size() chunks. fp32 reductions stay MPI's (MPI_FLOAT with MPI_SUM / MPI_MAX).
//
// Failure: an MPI rank cannot tell the others that it failed, so mpi::run() ends the whole job with
// MPI_Abort when the body of any rank throws, after printing the rank and the message: the other
// ranks end within a bounded time, never hang in a collective.
//
// Message sizes: MPI counts are int; a collective of more than INT_MAX elements (or bytes, for the
// collectives that move bytes) is an error that says so.
#pragma once

#include <carto/runtime/communicator.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace carto::mpi {

// Initialises MPI for its lifetime and finalises it (one per process, in main).
class Environment {
 public:
  Environment(int& argc, char**& argv);
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
};

class MpiComm final : public Communicator {
 public:
  // A communicator over a duplicate of MPI_COMM_WORLD; MPI must be initialised.
  [[nodiscard]] static std::unique_ptr<MpiComm> world();
  ~MpiComm() override;

 protected:
  Work do_all_reduce(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                     ReduceOp op, CommStream stream) override;
  Work do_all_gather(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                     CommStream stream) override;
  Work do_reduce_scatter(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                         ReduceOp op, CommStream stream) override;
  Work do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                     CommStream stream) override;
  Work do_broadcast(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                    int root, CommStream stream) override;
  Work do_barrier(CommStream stream) override;
  std::unique_ptr<Communicator> do_split(int color, int key, std::string name) override;

 private:
  Work bf16_all_reduce(std::span<const std::byte> send, std::span<std::byte> recv, ReduceOp op);
  Work bf16_reduce_scatter(std::span<const std::byte> send, std::span<std::byte> recv, ReduceOp op);
  struct Handle;  // the MPI_Comm, defined where <mpi.h> is included
  MpiComm(CommGroup group, int rank, std::unique_ptr<Handle> handle);
  std::unique_ptr<Handle> handle_;
};

// Prints "carto: world rank R of N failed: <message>; aborting the MPI job" to stderr and ends
// every rank of the job with MPI_Abort (exit code 1).
[[noreturn]] void abort_job(const Communicator& world, std::string_view message);

// Initialises MPI, runs body(world) on this rank, finalises MPI and returns 0. When the body
// throws, abort_job ends the whole job (see the design note).
int run(int& argc, char**& argv, const std::function<void(Communicator& world)>& body);

}  // namespace carto::mpi
