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
// Failure (mpi/mpi_watch.hpp): every collective is issued non-blocking and waited on in a loop
// that also reads the world's control messages, so a rank notices a peer that left or failed:
//   - a rank whose body throws prints "carto: world rank R of N failed: <message>; aborting the MPI
//     job", tells every other rank, and ends the job with MPI_Abort (after up to 2 s, in which the
//     others say which collective they were waiting in);
//   - a rank whose body returns tells every other rank how many collectives it issued on each group
//     and waits for the same from all of them (finish(), which mpi::run calls); a rank waiting in a
//     collective that a member left without joining throws a carto::Error naming that rank, the
//     collective and the group, and mpi::run ends the job with it;
//   - CARTO_COLLECTIVE_TIMEOUT=<seconds> (unset: no limit) ends a collective, or the wait at the
//     end, that takes longer with a carto::Error naming it: what ends a job with a stopped
//     (SIGSTOP) or hung rank. A rank killed outright is Open MPI's to notice (it ends the job).
// A communicator whose collective threw is not usable again: end the job.
//
// Message sizes: MPI counts are int; a collective of more than INT_MAX elements (or bytes, for the
// collectives that move bytes) is an error that says so.
#pragma once

#include <carto/runtime/communicator.hpp>
#include <cstdint>
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

[[noreturn]] void abort_job(const Communicator& world, std::string_view message);  // below

class MpiComm final : public Communicator {
 public:
  // A communicator over a duplicate of MPI_COMM_WORLD; MPI must be initialised. Reads
  // CARTO_COLLECTIVE_TIMEOUT (a bad value is a carto::Error naming it).
  [[nodiscard]] static std::unique_ptr<MpiComm> world();
  ~MpiComm() override;
  // The end of this rank's work on the world (call it on the world communicator): tells every rank
  // and waits until every rank has called it; throws when another rank failed, when the ranks
  // issued different numbers of collectives on a group they share, or past the timeout. mpi::run
  // calls it after the body returns.
  void finish();

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
  // Counts one more collective on this group and returns its number.
  std::uint64_t issue();
  // Waits for collective `number`; `request` is an MPI_Request* (this header has no <mpi.h>).
  void wait(void* request, std::uint64_t number, CollectiveKind kind);
  struct Handle;  // the MPI_Comm and the failure watch, defined where <mpi.h> is included
  MpiComm(CommGroup group, int rank, std::unique_ptr<Handle> handle);
  std::unique_ptr<Handle> handle_;
  friend void abort_job(const Communicator& world, std::string_view message);
};

// Prints "carto: world rank R of N failed: <message>; aborting the MPI job" to stderr, tells the
// other ranks (unless this failure is a consequence of another rank's) and ends every rank of the
// job with MPI_Abort (exit code 1).
[[noreturn]] void abort_job(const Communicator& world, std::string_view message);

// Initialises MPI, runs body(world) on this rank, then world.finish(), finalises MPI and returns
// 0. When the body or finish() throws, abort_job ends the whole job (see the design note).
int run(int& argc, char**& argv, const std::function<void(Communicator& world)>& body);

}  // namespace carto::mpi
