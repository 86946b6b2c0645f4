// carto/runtime/thread_comm.hpp — ranks as threads of one process (tests and the default demo).
//
// Design note. A ThreadWorld is the shared state of N thread ranks; each rank takes its own world
// communicator from it, and split() makes sub-groups that share the world's failure state. A
// collective works on shared memory in phases separated by group barriers: every rank publishes
// its buffer pointers in its slot, the ranks check that they issued the same collective, each
// computes its part reading the others' buffers, and a last barrier keeps every buffer alive until
// nobody reads it. Reductions run in rank order 0..size-1 on one rank per chunk and the others
// copy the result, so every rank holds bit-identical sums; bf16 elements are reduced in fp32 and
// rounded once (detail::reduce_in_rank_order). Invariants:
//   - a rank writes only its own recv buffer (and its own slot); in-place all_to_all stages the
//     send buffer first, since there the recv chunks are read by other ranks;
//   - a waiting rank wakes within kThreadCommPoll when the world fails, so a rank that throws (or
//     returns while others wait for it) makes every pending and later collective of the others
//     throw a carto::Error naming that rank and its message, never hang.
// run_threads(n, body) runs body(world) on n ranks (rank 0 on the calling thread), joins them and
// rethrows the first failure as a carto::Error naming the rank.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "carto/error.hpp"
#include "carto/runtime/communicator.hpp"

namespace carto {

// How often a waiting thread rank re-checks whether the world failed (it is also woken at once).
inline constexpr std::chrono::milliseconds kThreadCommPoll{20};
// How many times a waiting thread rank yields before it sleeps on the condition variable.
inline constexpr int kThreadCommSpins = 64;

namespace detail {

struct ThreadGroupState;

// What every rank of one collective publishes.
struct ThreadSlot {
  CollectiveKind kind = CollectiveKind::barrier;
  DType dtype = DType::fp32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  std::size_t bytes = 0;
  const std::byte* src = nullptr;
  std::byte* dst = nullptr;
  int color = 0;
  int key = 0;
  std::shared_ptr<ThreadGroupState> created{};  // split: the new group, set by its first member
};

class ThreadWorldState {
 public:
  explicit ThreadWorldState(int size) : size_(size), finished_(static_cast<std::size_t>(size)) {
    for (auto& f : finished_) f.store(false);
  }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] bool failed() const { return failed_.load(std::memory_order_acquire); }
  [[nodiscard]] bool finished(int rank) const {
    return finished_[static_cast<std::size_t>(rank)].load(std::memory_order_acquire);
  }
  // The first failure is kept; later ones are consequences of it.
  void fail(int rank, std::string message) {
    {
      std::lock_guard lock(mutex_);
      if (!failed_.load(std::memory_order_relaxed)) {
        failed_rank_ = rank;
        message_ = std::move(message);
        failed_.store(true, std::memory_order_release);
      }
    }
    finish(rank);
  }
  void finish(int rank) {
    finished_[static_cast<std::size_t>(rank)].store(true, std::memory_order_release);
    wake_all();
  }
  [[nodiscard]] int failed_rank() const {
    std::lock_guard lock(mutex_);
    return failed_rank_;
  }
  [[nodiscard]] std::string failure() const {
    std::lock_guard lock(mutex_);
    return concat("world rank ", failed_rank_, " of ", size_, " thread ranks failed: ", message_);
  }
  void add_group(const std::shared_ptr<ThreadGroupState>& group) {
    std::lock_guard lock(mutex_);
    groups_.push_back(group);
  }
  inline void wake_all();

 private:
  int size_;
  std::vector<std::atomic<bool>> finished_;
  std::atomic<bool> failed_{false};
  mutable std::mutex mutex_;
  int failed_rank_ = -1;
  std::string message_;
  std::vector<std::weak_ptr<ThreadGroupState>> groups_;
};

struct ThreadGroupState {
  ThreadGroupState(std::shared_ptr<ThreadWorldState> w, CommGroup g)
      : world(std::move(w)),
        group(std::move(g)),
        entered(group.world_ranks.size(), 0),
        slots(group.world_ranks.size()) {}

  [[nodiscard]] int size() const { return static_cast<int>(group.world_ranks.size()); }

  // Blocks until every member arrived, the world failed, or a member that has not arrived
  // finished (it never will): the last two throw.
  void arrive_and_wait(int member, CollectiveKind kind) {
    std::unique_lock lock(mutex);
    check_world(member, kind);
    const std::uint64_t gen = generation.load(std::memory_order_relaxed);
    ++entered[static_cast<std::size_t>(member)];
    if (++arrived == size()) {
      arrived = 0;
      generation.store(gen + 1, std::memory_order_release);
      cv.notify_all();
      return;
    }
    // Spin briefly (yielding the core) before sleeping: most barriers of a collective complete
    // within microseconds, and a futex wake-up costs tens of them on a loaded machine.
    lock.unlock();
    for (int spin = 0; spin < kThreadCommSpins; ++spin) {
      if (generation.load(std::memory_order_acquire) != gen) return;
      std::this_thread::yield();
    }
    lock.lock();
    while (generation.load(std::memory_order_relaxed) == gen) {
      check_world(member, kind);
      for (std::size_t i = 0; i < entered.size(); ++i) {
        if (entered[i] <= gen && world->finished(group.world_ranks[i])) {
          fail(member, kind,
               concat("world rank ", group.world_ranks[i], " (rank ", i,
                      " of this group) returned without joining it"));
        }
      }
      cv.wait_for(lock, kThreadCommPoll);
    }
  }

  void check_world(int member, CollectiveKind kind) const {
    if (world->failed()) fail(member, kind, world->failure());
  }

  [[noreturn]] void fail(int member, CollectiveKind kind, const std::string& why) const {
    detail::fail("carto: ", to_string_view(kind), " on rank ", member, " of ", size(),
                 " in group '", group.name, "' (world rank ",
                 group.world_ranks[static_cast<std::size_t>(member)], ") cannot complete: ", why);
  }

  void wake() {
    std::lock_guard lock(mutex);
    cv.notify_all();
  }

  std::shared_ptr<ThreadWorldState> world;
  CommGroup group;
  std::mutex mutex;
  std::condition_variable cv;
  std::atomic<std::uint64_t> generation{0};  // written under `mutex`; read by spinning waiters
  int arrived = 0;
  std::vector<std::uint64_t> entered;  // barriers each member has entered
  std::vector<ThreadSlot> slots;       // written by its member only, read after a barrier
};

inline void ThreadWorldState::wake_all() {
  std::vector<std::shared_ptr<ThreadGroupState>> live;
  {
    std::lock_guard lock(mutex_);
    for (const auto& g : groups_) {
      if (auto p = g.lock()) live.push_back(std::move(p));
    }
  }
  for (const auto& g : live) g->wake();
}

inline void copy_bytes(std::byte* dst, const std::byte* src, std::size_t bytes) {
  if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
}

}  // namespace detail

class ThreadComm final : public Communicator {
 public:
  ThreadComm(std::shared_ptr<detail::ThreadGroupState> state, int rank)
      : Communicator(state->group, rank), state_(std::move(state)) {}

 protected:
  Work do_all_reduce(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                     ReduceOp op, CommStream) override {
    publish({.kind = CollectiveKind::all_reduce,
             .dtype = dtype,
             .op = op,
             .bytes = recv.size(),
             .src = send.data(),
             .dst = recv.data()});
    const std::size_t n = static_cast<std::size_t>(size());
    const auto width = static_cast<std::size_t>(size_bytes(dtype));
    const std::size_t elems = recv.size() / width;
    auto lo = [&](std::size_t r) { return elems * r / n; };
    // Reduce chunk rank() of every source into this rank's recv, then gather the others' chunks.
    const auto sources = sources_of();
    const std::size_t me = static_cast<std::size_t>(rank());
    detail::reduce_in_rank_order(recv.data() + lo(me) * width, sources, lo(me), lo(me + 1) - lo(me),
                                 dtype, op);
    arrive(CollectiveKind::all_reduce);
    for (std::size_t j = 0; j < n; ++j) {
      if (j == me) continue;
      const std::size_t at = lo(j) * width;
      detail::copy_bytes(recv.data() + at, slot(j).dst + at, (lo(j + 1) - lo(j)) * width);
    }
    arrive(CollectiveKind::all_reduce);
    return {};
  }

  Work do_all_gather(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                     CommStream) override {
    publish({.kind = CollectiveKind::all_gather,
             .dtype = dtype,
             .bytes = send.size(),
             .src = send.data(),
             .dst = recv.data()});
    for (std::size_t j = 0; j < static_cast<std::size_t>(size()); ++j) {
      detail::copy_bytes(recv.data() + j * send.size(), slot(j).src, send.size());
    }
    arrive(CollectiveKind::all_gather);
    return {};
  }

  Work do_reduce_scatter(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                         ReduceOp op, CommStream) override {
    publish({.kind = CollectiveKind::reduce_scatter,
             .dtype = dtype,
             .op = op,
             .bytes = recv.size(),
             .src = send.data(),
             .dst = recv.data()});
    const std::size_t elems = recv.size() / static_cast<std::size_t>(size_bytes(dtype));
    const auto sources = sources_of();
    detail::reduce_in_rank_order(recv.data(), sources, static_cast<std::size_t>(rank()) * elems,
                                 elems, dtype, op);
    arrive(CollectiveKind::reduce_scatter);
    return {};
  }

  Work do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                     CommStream) override {
    const std::byte* src = send.data();
    if (!send.empty() && send.data() == recv.data()) {
      // In place: other ranks read this buffer's chunks while this rank overwrites it.
      staging_.assign(send.begin(), send.end());
      src = staging_.data();
    }
    publish({.kind = CollectiveKind::all_to_all,
             .dtype = dtype,
             .bytes = recv.size(),
             .src = src,
             .dst = recv.data()});
    const std::size_t n = static_cast<std::size_t>(size());
    const std::size_t chunk = recv.size() / n;
    const std::size_t me = static_cast<std::size_t>(rank());
    for (std::size_t i = 0; i < n; ++i) {
      detail::copy_bytes(recv.data() + i * chunk, slot(i).src + me * chunk, chunk);
    }
    arrive(CollectiveKind::all_to_all);
    return {};
  }

  Work do_broadcast(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                    int root, CommStream) override {
    publish({.kind = CollectiveKind::broadcast,
             .dtype = dtype,
             .root = root,
             .bytes = recv.size(),
             .src = send.data(),
             .dst = recv.data()});
    detail::copy_bytes(recv.data(), slot(static_cast<std::size_t>(root)).src, recv.size());
    arrive(CollectiveKind::broadcast);
    return {};
  }

  Work do_barrier(CommStream) override {
    publish({.kind = CollectiveKind::barrier});
    arrive(CollectiveKind::barrier);  // nobody reads a slot once its owner may rewrite it
    return {};
  }

  std::unique_ptr<Communicator> do_split(int color, int key, std::string name) override {
    publish({.kind = CollectiveKind::split, .color = color, .key = key});
    const std::size_t n = static_cast<std::size_t>(size());
    std::vector<int> colors(n);
    std::vector<int> keys(n);
    for (std::size_t r = 0; r < n; ++r) {
      colors[r] = slot(r).color;
      keys[r] = slot(r).key;
    }
    const std::vector<int> members = detail::split_members(colors, keys, rank());
    const int my_index =
        static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
    if (my_index == 0) {
      CommGroup g{.name = std::move(name), .world_ranks = {}};
      for (int m : members)
        g.world_ranks.push_back(group().world_ranks[static_cast<std::size_t>(m)]);
      auto created = std::make_shared<detail::ThreadGroupState>(state_->world, std::move(g));
      state_->world->add_group(created);
      state_->slots[static_cast<std::size_t>(rank())].created = std::move(created);
    }
    arrive(CollectiveKind::split);
    auto created = slot(static_cast<std::size_t>(members.front())).created;
    arrive(CollectiveKind::split);  // everyone holds its group; slots may be reused
    state_->slots[static_cast<std::size_t>(rank())].created.reset();
    return std::make_unique<ThreadComm>(std::move(created), my_index);
  }

 private:
  [[nodiscard]] const detail::ThreadSlot& slot(std::size_t r) const { return state_->slots[r]; }

  void arrive(CollectiveKind kind) { state_->arrive_and_wait(rank(), kind); }

  // Writes this rank's slot, waits for every rank, and checks that they issued the same call.
  void publish(detail::ThreadSlot mine) {
    const CollectiveKind kind = mine.kind;
    state_->slots[static_cast<std::size_t>(rank())] = std::move(mine);
    arrive(kind);
    const detail::ThreadSlot& me = slot(static_cast<std::size_t>(rank()));
    for (std::size_t r = 0; r < static_cast<std::size_t>(size()); ++r) {
      const detail::ThreadSlot& other = slot(r);
      if (other.kind != me.kind || other.dtype != me.dtype || other.op != me.op ||
          other.root != me.root || other.bytes != me.bytes) {
        detail::fail("carto: ranks of group '", name(), "' issued different collectives: rank ",
                     rank(), " ", describe_call(me), ", rank ", r, " ", describe_call(other));
      }
    }
  }

  static std::string describe_call(const detail::ThreadSlot& s) {
    return detail::concat(to_string_view(s.kind), "(", s.bytes, " bytes of ", s.dtype, ", op ",
                          to_string_view(s.op), ", root ", s.root, ")");
  }

  [[nodiscard]] std::vector<const std::byte*> sources_of() const {
    std::vector<const std::byte*> s;
    for (const detail::ThreadSlot& x : state_->slots) s.push_back(x.src);
    return s;
  }

  std::shared_ptr<detail::ThreadGroupState> state_;
  std::vector<std::byte> staging_;
};

// The shared state of `size` thread ranks. Each rank takes its world communicator once, on its own
// thread, and reports how its work ended (fail or finish) so the others never wait for it forever.
class ThreadWorld {
 public:
  explicit ThreadWorld(int size) {
    if (size < 1) detail::fail("carto: a thread world needs at least 1 rank, got ", size);
    world_ = std::make_shared<detail::ThreadWorldState>(size);
    CommGroup g{.name = "world", .world_ranks = {}};
    for (int r = 0; r < size; ++r) g.world_ranks.push_back(r);
    group_ = std::make_shared<detail::ThreadGroupState>(world_, std::move(g));
    world_->add_group(group_);
  }
  [[nodiscard]] int size() const { return world_->size(); }
  [[nodiscard]] std::unique_ptr<ThreadComm> communicator(int rank) const {
    if (rank < 0 || rank >= size()) {
      detail::fail("carto: thread rank ", rank, " is not in a world of ", size(), " ranks");
    }
    return std::make_unique<ThreadComm>(group_, rank);
  }
  // `rank` failed: every pending and later collective of the others throws.
  void fail(int rank, std::string message) { world_->fail(rank, std::move(message)); }
  // `rank` issues no more collectives: one that others wait for in vain throws.
  void finish(int rank) { world_->finish(rank); }
  [[nodiscard]] bool failed() const { return world_->failed(); }
  // After failed(): the first rank that failed, and "world rank R of N thread ranks failed: ...".
  [[nodiscard]] int failed_rank() const { return world_->failed_rank(); }
  [[nodiscard]] std::string failure() const { return world_->failure(); }

 private:
  std::shared_ptr<detail::ThreadWorldState> world_;
  std::shared_ptr<detail::ThreadGroupState> group_;
};

namespace detail {
// Runs rank(r) for every r in [0, size) on its own thread, rank 0 on the calling thread. A rank
// that throws marks `world` failed with its message (so the others' collectives fail instead of
// waiting) and its exception is kept; one that returns is marked finished. Returns each rank's
// exception (null where it finished). Shared by run_threads and the CUDA loopback ranks.
template <class World, class Rank>
std::vector<std::exception_ptr> run_rank_threads(World& world, int size, Rank&& rank) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  auto run_rank = [&](int r) {
    try {
      rank(r);
      world.finish(r);
    } catch (const std::exception& e) {
      errors[static_cast<std::size_t>(r)] = std::current_exception();
      world.fail(r, e.what());
    } catch (...) {
      errors[static_cast<std::size_t>(r)] = std::current_exception();
      world.fail(r, "a non-standard exception");
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(size - 1));
  for (int r = 1; r < size; ++r) threads.emplace_back(run_rank, r);
  run_rank(0);
  for (auto& t : threads) t.join();
  return errors;
}
}  // namespace detail

// Runs body(world) on `size` thread ranks, rank 0 on the calling thread. When a rank throws, the
// others' collectives fail (see the design note) and this rethrows the first failure as a
// carto::Error naming its rank.
inline void run_threads(int size, const std::function<void(Communicator& world)>& body) {
  ThreadWorld world(size);
  const std::vector<std::exception_ptr> errors =
      detail::run_rank_threads(world, size, [&](int rank) {
        auto comm = world.communicator(rank);
        body(*comm);
      });
  if (!world.failed()) return;
  // The rank the world recorded first is the cause; the others' errors are its consequences.
  const std::exception_ptr& cause = errors[static_cast<std::size_t>(world.failed_rank())];
  try {
    std::rethrow_exception(cause);
  } catch (const std::exception&) {
    detail::fail("carto: ", world.failure());
  }
}

}  // namespace carto
