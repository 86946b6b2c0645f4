// mpi/mpi_watch.cpp — the failure watch behind MpiComm's collectives (see mpi_watch.hpp).
#include "mpi/mpi_watch.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <system_error>
#include <thread>

namespace carto::mpi::detail {

namespace {

constexpr int kLeftTag = 1;
constexpr int kFailedTag = 2;
constexpr long kMaxTimeoutS = 365L * 24 * 3600;  // a year
// Polls of a waiting collective: spin, then yield, then sleep between polls.
constexpr int kSpins = 64;
constexpr auto kYieldFor = std::chrono::milliseconds(1);
constexpr auto kShortSleepFor = std::chrono::milliseconds(20);
constexpr auto kShortSleep = std::chrono::microseconds(20);
constexpr auto kSleep = std::chrono::microseconds(200);

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void pause(int polls, Clock::time_point start) {
  if (polls < kSpins) return;
  const auto waited = Clock::now() - start;
  if (waited < kYieldFor) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(waited < kShortSleepFor ? kShortSleep : kSleep);
  }
}

// "key count\n" per group: keys hold no spaces or newlines.
std::string write_counts(const std::map<std::string, std::uint64_t>& counts) {
  std::string out;
  for (const auto& [key, n] : counts) out += carto::detail::concat(key, " ", n, "\n");
  return out;
}

std::map<std::string, std::uint64_t> read_counts(const std::string& text) {
  std::map<std::string, std::uint64_t> counts;
  std::istringstream in(text);
  std::string key;
  std::uint64_t n = 0;
  while (in >> key >> n) counts[key] = n;
  return counts;
}

}  // namespace

std::string describe_mpi(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "unknown MPI error";
  return std::string(text, static_cast<std::size_t>(length));
}

std::string_view unprefixed(std::string_view message) {
  constexpr std::string_view prefix = "carto: ";
  return message.starts_with(prefix) ? message.substr(prefix.size()) : message;
}

bool finalized() {
  int done = 0;
  MPI_Finalized(&done);
  return done != 0;
}

std::optional<double> collective_timeout_from_env() {
  const char* value = std::getenv("CARTO_COLLECTIVE_TIMEOUT");
  if (value == nullptr || *value == '\0') return std::nullopt;
  const std::string_view text(value);
  double seconds = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(seconds) ||
      seconds <= 0 || seconds > static_cast<double>(kMaxTimeoutS)) {
    const std::string_view shown = text.substr(0, 40);
    carto::detail::fail("carto: CARTO_COLLECTIVE_TIMEOUT is '", shown,
                        text.size() > shown.size() ? "...'" : "'",
                        "; it takes a positive number of seconds up to ", kMaxTimeoutS,
                        " (e.g. 60 or 0.5), or leave it unset for no limit");
  }
  return seconds;
}

Watch::Watch(MPI_Comm world, std::optional<double> timeout_s) : timeout_s_(timeout_s) {
  CARTO_MPI_CHECK(MPI_Comm_dup(world, &control_));
  CARTO_MPI_CHECK(MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN));
  int size = 0;
  CARTO_MPI_CHECK(MPI_Comm_rank(control_, &rank_));
  CARTO_MPI_CHECK(MPI_Comm_size(control_, &size));
  peers_.resize(static_cast<std::size_t>(size));
}

Watch::~Watch() {
  if (control_ != MPI_COMM_NULL && !finalized()) MPI_Comm_free(&control_);
}

std::uint64_t Watch::issue(const std::string& key) { return ++issued_[key]; }

void Watch::drain() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    CARTO_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, control_, &flag, &status));
    if (flag == 0) return;
    int n = 0;
    CARTO_MPI_CHECK(MPI_Get_count(&status, MPI_CHAR, &n));
    std::string text(static_cast<std::size_t>(n), '\0');
    CARTO_MPI_CHECK(MPI_Recv(text.data(), n, MPI_CHAR, status.MPI_SOURCE, status.MPI_TAG, control_,
                             MPI_STATUS_IGNORE));
    Peer& peer = peers_[static_cast<std::size_t>(status.MPI_SOURCE)];
    if (status.MPI_TAG == kFailedTag) {
      peer.failed = true;
      peer.message = std::move(text);
      if (failed_rank_ < 0) failed_rank_ = status.MPI_SOURCE;
    } else {
      peer.left = true;
      peer.issued = read_counts(text);
    }
  }
}

bool Watch::timed_out(Clock::time_point start) const {
  return timeout_s_ && seconds_since(start) > *timeout_s_;
}

void Watch::check_peers(const Communicator& comm, const std::string& key, std::uint64_t number,
                        CollectiveKind kind) const {
  if (failed_rank_ >= 0) {
    carto::detail::fail("carto: ", to_string_view(kind), " #", number, " on ", comm.describe(),
                        " cannot complete: world rank ", failed_rank_, " failed: ",
                        unprefixed(peers_[static_cast<std::size_t>(failed_rank_)].message));
  }
  for (const int q : comm.group().world_ranks) {
    const Peer& peer = peers_[static_cast<std::size_t>(q)];
    if (q == rank_ || !peer.left) continue;
    const auto it = peer.issued.find(key);
    const std::uint64_t joined = it == peer.issued.end() ? 0 : it->second;
    if (joined < number) {
      saw_early_leave_ = true;
      carto::detail::fail("carto: ", to_string_view(kind), " #", number, " on ", comm.describe(),
                          " cannot complete: world rank ", q,
                          " returned from its body after issuing ", joined,
                          " collective(s) on group '", comm.name(), "', without joining this one");
    }
  }
}

void Watch::wait(MPI_Request& request, const Communicator& comm, const std::string& key,
                 std::uint64_t number, CollectiveKind kind) {
  const Clock::time_point start = Clock::now();
  for (int polls = 0;; ++polls) {
    int done = 0;
    CARTO_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done != 0) return;
    drain();
    check_peers(comm, key, number, kind);
    if (timed_out(start)) {
      carto::detail::fail("carto: ", to_string_view(kind), " #", number, " on ", comm.describe(),
                          " did not complete within ", *timeout_s_,
                          " s (CARTO_COLLECTIVE_TIMEOUT): a rank of the group is stopped, hung "
                          "or still working");
    }
    pause(polls, start);
  }
}

void Watch::leave() {
  payload_ = write_counts(issued_);
  const int size = static_cast<int>(peers_.size());
  for (int q = 0; q < size; ++q) {
    if (q == rank_) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    CARTO_MPI_CHECK(MPI_Isend(payload_.data(), static_cast<int>(payload_.size()), MPI_CHAR, q,
                              kLeftTag, control_, &request));
    sends_.push_back(request);
  }
  const Clock::time_point start = Clock::now();
  for (int polls = 0;; ++polls) {
    drain();
    if (failed_rank_ >= 0) {
      carto::detail::fail("carto: world rank ", failed_rank_, " failed while world rank ", rank_,
                          " waited for every rank to return: ",
                          unprefixed(peers_[static_cast<std::size_t>(failed_rank_)].message));
    }
    int sent = 0;
    CARTO_MPI_CHECK(
        MPI_Testall(static_cast<int>(sends_.size()), sends_.data(), &sent, MPI_STATUSES_IGNORE));
    std::vector<int> waiting;
    for (int q = 0; q < size; ++q) {
      if (q != rank_ && !peers_[static_cast<std::size_t>(q)].left) waiting.push_back(q);
    }
    if (waiting.empty() && sent != 0) break;
    if (timed_out(start)) {
      std::string list;
      for (const int q : waiting) list += carto::detail::concat(list.empty() ? "" : ", ", q);
      carto::detail::fail("carto: world rank ", rank_, " returned from its body and waited ",
                          *timeout_s_, " s (CARTO_COLLECTIVE_TIMEOUT) for world rank(s) ", list,
                          " to return: they are stopped, hung or still working");
    }
    pause(polls, start);
  }
  check_counts();
}

void Watch::check_counts() const {
  for (std::size_t q = 0; q < peers_.size(); ++q) {
    for (const auto& [key, theirs] : peers_[q].issued) {
      const auto mine = issued_.find(key);
      if (mine == issued_.end() || mine->second == theirs) continue;
      const auto name = names_.find(key);
      carto::detail::fail("carto: the ranks of group '", name == names_.end() ? key : name->second,
                          "' returned after different numbers of collectives on it: world rank ",
                          rank_, " issued ", mine->second, ", world rank ", q, " issued ", theirs,
                          " (every member must issue the same collectives in the same order)");
    }
  }
}

void Watch::announce_failure(std::string_view message) {
  payload_ = std::string(message);
  for (int q = 0; q < static_cast<int>(peers_.size()); ++q) {
    if (q == rank_) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(payload_.data(), static_cast<int>(payload_.size()), MPI_CHAR, q, kFailedTag,
                  control_, &request) == MPI_SUCCESS) {
      sends_.push_back(request);
    }
  }
}

void Watch::linger(double seconds) {
  const Clock::time_point start = Clock::now();
  while (seconds_since(start) < seconds) {
    int flag = 0;
    MPI_Testall(static_cast<int>(sends_.size()), sends_.data(), &flag, MPI_STATUSES_IGNORE);
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, control_, &flag, MPI_STATUS_IGNORE);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace carto::mpi::detail
