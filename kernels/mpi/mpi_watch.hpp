// mpi/mpi_watch.hpp — how MpiComm notices a rank that left, failed or stopped (internal to
// carto::mpi: it includes <mpi.h> and is not installed).
//
// Design note. MPI has no way to tell a rank that a peer returned from its body or threw: the
// others wait in their next collective forever. So every MpiComm collective is issued non-blocking
// (MPI_Iallreduce, ...) and waited on here, in a loop that also reads the world's control messages
// (a duplicate of MPI_COMM_WORLD used for nothing else):
//   - "left": a rank whose body returned sends every other rank the number of collectives it issued
//     on each of its communicators (keys below), and waits for the same message from every rank
//     before MPI_Finalize. A rank waiting in collective #n of a group that a member left having
//     issued fewer than n collectives there knows the collective cannot complete: it throws a
//     carto::Error naming that rank, the collective and the group. When every rank has left, the
//     counts of the groups they share must agree (a broadcast whose root completed alone shows up
//     here).
//   - "failed": a rank whose body threw sends its message to every other rank before it aborts
//     the job; their pending and later collectives throw naming that rank and its message.
//   - CARTO_COLLECTIVE_TIMEOUT=<seconds> (optional; unset means no limit): a collective, or the
//     wait for the others at the end, that has not completed after that long throws, naming the
//     collective, the group and the limit. This is what ends a job with a stopped (SIGSTOP) or
//     hung rank, which can send nothing.
// Keys: "world" for the world; a split of parent P issued as P's collective #n with color c is
// "P/n:c", the same on every member of the new group and different from every other group.
// The wait polls MPI_Test, spinning briefly, then yielding, then sleeping up to kSleep between
// polls once a collective has waited for a while (ranks often share cores).
#pragma once

#include <mpi.h>

#include <carto/runtime/communicator.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace carto::mpi::detail {

// MPI's description of an error code; CARTO_MPI_CHECK throws a carto::Error naming the call.
std::string describe_mpi(int code);
#define CARTO_MPI_CHECK(call) \
  CARTO_CHECK_STATUS(call, MPI_SUCCESS, ::carto::mpi::detail::describe_mpi)

[[nodiscard]] bool finalized();

// CARTO_COLLECTIVE_TIMEOUT's value in seconds (nullopt: unset or empty); throws a carto::Error for
// anything but a positive finite number of seconds of at most a year.
std::optional<double> collective_timeout_from_env();

// `message` without a leading "carto: " (messages are nested into others that carry it).
std::string_view unprefixed(std::string_view message);

class Watch {
 public:
  // `world` is the world communicator's MPI_Comm; the watch duplicates it for control messages.
  Watch(MPI_Comm world, std::optional<double> timeout_s);
  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  // Counts one more collective on the group `key` and returns its number (1, 2, ...).
  std::uint64_t issue(const std::string& key);
  // Waits until `request` completes. Throws a carto::Error when a rank of the world failed, when
  // a member of `comm` left before issuing collective `number` on `key`, or past the timeout.
  void wait(MPI_Request& request, const Communicator& comm, const std::string& key,
            std::uint64_t number, CollectiveKind kind);
  // The end of this rank's body: tells every rank and waits for theirs (see the design note).
  void leave();
  // The body threw: tells every other rank (which then fail their collectives) and returns.
  void announce_failure(std::string_view message);
  // Whether this rank's failure follows from another rank's: one failed first, or one left
  // without joining a collective (its message then says all there is to say).
  [[nodiscard]] bool consequence() const { return failed_rank_ >= 0 || saw_early_leave_; }
  // Reads control messages for up to `seconds` (used between announce_failure and MPI_Abort).
  void linger(double seconds);
  // Records the group name of `key`, for messages.
  void name(const std::string& key, const std::string& group) { names_[key] = group; }

 private:
  struct Peer {
    bool left = false;
    bool failed = false;
    std::string message;                          // failed: its message
    std::map<std::string, std::uint64_t> issued;  // left: collectives per key
  };
  void drain();
  void check_peers(const Communicator& comm, const std::string& key, std::uint64_t number,
                   CollectiveKind kind) const;
  [[nodiscard]] bool timed_out(std::chrono::steady_clock::time_point start) const;
  void check_counts() const;

  MPI_Comm control_ = MPI_COMM_NULL;
  int rank_ = 0;
  std::optional<double> timeout_s_;
  std::map<std::string, std::uint64_t> issued_;
  std::map<std::string, std::string> names_;  // key -> the group's name, for messages
  std::vector<Peer> peers_;                   // by world rank
  int failed_rank_ = -1;                      // the first rank whose failure arrived
  mutable bool saw_early_leave_ = false;
  std::string payload_;  // what this rank sent (alive until MPI_Abort)
  std::vector<MPI_Request> sends_;
};

}  // namespace carto::mpi::detail
