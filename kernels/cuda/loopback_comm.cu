// cuda/loopback_comm.cu — LoopbackComm's phases, the rank-order reduction kernel, split and the
// thread runner (design note in loopback_comm.hpp).
//
// Invariants the event protocol relies on: cudaStreamWaitEvent waits for the record that precedes
// the call, so each rank enqueues its waits on a peer's event before it arrives at the barrier
// after which that peer may record the event again. Concretely: `ready` and `done` are recorded
// before the publish barrier and waited on before the phase-1 barrier; `phase1` is recorded before
// the phase-1 barrier and waited on before the next publish barrier. Peer event handles and
// buffer pointers are read only between the publish and the phase-1 barrier, while no peer can
// rewrite its slot.
#include <cuda_bf16.h>

#include <algorithm>
#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include "cuda/cuda_check.hpp"
#include "cuda/launch.cuh"
#include "cuda/loopback_comm.hpp"

namespace carto::cuda {

namespace loopback_detail {

// What a rank publishes besides ThreadSlot's call description.
struct Events {
  cudaEvent_t ready = nullptr;
  cudaEvent_t phase1 = nullptr;
  cudaEvent_t done = nullptr;
  std::shared_ptr<Group> created{};  // split: the new group, set by its first member
};

struct Group {
  Group(std::shared_ptr<detail::ThreadWorldState> world, CommGroup g, int d)
      : host(std::make_shared<detail::ThreadGroupState>(world, std::move(g))),
        device(d),
        events(host->group.world_ranks.size()) {
    world->add_group(host);
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  ~Group() {
    if (staging != nullptr) {
      cudaSetDevice(device);
      cudaFree(staging);
    }
  }
  [[nodiscard]] int size() const { return host->size(); }

  std::shared_ptr<detail::ThreadGroupState> host;  // barriers, failure, the call descriptions
  int device;
  std::vector<Events> events;    // written by its member only, read after a barrier
  std::byte* staging = nullptr;  // grown by member 0 between two barriers
  std::size_t staging_bytes = 0;
};

}  // namespace loopback_detail

namespace {

using loopback_detail::Group;

struct Sources {
  const void* data[kMaxLoopbackRanks];
  int count;
};

// out[i] = op over k = 0..count-1 (in that order) of sources[k][offset + i], in fp32; bf16 is
// widened exactly on load and rounded once on the store.
__global__ void reduce_in_rank_order(Sources sources, bool bf16, std::int64_t offset,
                                     std::int64_t count, void* out, bool take_max) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    float acc = load(Elements{const_cast<void*>(sources.data[0]), bf16}, offset + i);
    for (int k = 1; k < sources.count; ++k) {
      const float x = load(Elements{const_cast<void*>(sources.data[k]), bf16}, offset + i);
      acc = take_max ? (acc < x ? x : acc) : __fadd_rn(acc, x);
    }
    store(Elements{out, bf16}, i, acc);
  }
}

class LoopbackWork final : public WorkState {
 public:
  explicit LoopbackWork(cudaStream_t stream) {
    CARTO_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    CARTO_CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  LoopbackWork(const LoopbackWork&) = delete;
  LoopbackWork& operator=(const LoopbackWork&) = delete;
  ~LoopbackWork() override { cudaEventDestroy(event_); }
  // Every event this rank's stream waits for was recorded before a host barrier, so this ends.
  void wait() override { CARTO_CUDA_CHECK(cudaEventSynchronize(event_)); }
  [[nodiscard]] bool completed() const override {
    return cudaEventQuery(event_) != cudaErrorNotReady;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

void copy_device(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  if (bytes == 0 || dst == src) return;
  CARTO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
}

std::string describe_call(const detail::ThreadSlot& s) {
  return detail::concat(to_string_view(s.kind), "(", s.bytes, " bytes of ", s.dtype, ", op ",
                        to_string_view(s.op), ", root ", s.root, ")");
}

}  // namespace

// What a collective enqueues in each phase, given every rank's published call (indexed by group
// rank) and the staging area.
struct LoopbackComm::Phases {
  std::function<void(cudaStream_t, std::span<const detail::ThreadSlot>, std::byte* staging)> one;
  std::function<void(cudaStream_t, std::byte* staging)> two;
};

LoopbackComm::LoopbackComm(std::shared_ptr<loopback_detail::Group> group, int rank,
                           cudaStream_t stream)
    : Communicator(group->host->group, rank), group_(std::move(group)), stream_(stream) {
  if (size() > kMaxLoopbackRanks) {
    detail::fail("carto: a loopback group of ", size(), " ranks; at most ", kMaxLoopbackRanks);
  }
  CARTO_CUDA_CHECK(cudaSetDevice(group_->device));
  CARTO_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  CARTO_CUDA_CHECK(cudaEventCreateWithFlags(&phase1_, cudaEventDisableTiming));
  CARTO_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
}

LoopbackComm::~LoopbackComm() {
  // A peer may still have waits on these events enqueued: destroying a recorded event is legal,
  // the waits complete with the work already recorded.
  cudaEventDestroy(ready_);
  cudaEventDestroy(phase1_);
  cudaEventDestroy(done_);
}

Work LoopbackComm::run(const detail::ThreadSlot& call, std::size_t staging_bytes, CommStream stream,
                       const Phases& phases) {
  Group& g = *group_;
  const auto me = static_cast<std::size_t>(rank());
  const auto n = static_cast<std::size_t>(size());
  const cudaStream_t s =
      stream.native != nullptr ? static_cast<cudaStream_t>(stream.native) : stream_;
  CARTO_CUDA_CHECK(cudaSetDevice(g.device));
  CARTO_CUDA_CHECK(cudaEventRecord(ready_, s));

  // publish: this rank's call and events, then the check that every rank issued the same call.
  g.host->slots[me] = call;
  g.events[me].ready = ready_;
  g.events[me].phase1 = phase1_;
  g.events[me].done = done_;
  g.host->arrive_and_wait(rank(), call.kind);
  const std::vector<detail::ThreadSlot> slots = g.host->slots;
  const std::vector<loopback_detail::Events> events = g.events;
  for (std::size_t r = 0; r < n; ++r) {
    const detail::ThreadSlot& other = slots[r];
    if (other.kind != call.kind || other.dtype != call.dtype || other.op != call.op ||
        other.root != call.root || other.bytes != call.bytes) {
      detail::fail("carto: ranks of loopback group '", name(),
                   "' issued different collectives: rank ", rank(), " ", describe_call(call),
                   ", rank ", r, " ", describe_call(other));
    }
  }
  if (staging_bytes > g.staging_bytes) {
    g.host->arrive_and_wait(rank(), call.kind);  // everyone read the old size
    if (rank() == 0) {
      // Earlier collectives of this group may still read the old area on some rank's stream.
      CARTO_CUDA_CHECK(cudaDeviceSynchronize());
      if (g.staging != nullptr) CARTO_CUDA_CHECK(cudaFree(g.staging));
      g.staging = nullptr;
      g.staging_bytes = 0;
      const std::size_t grown = std::max(staging_bytes, std::size_t{1} << 20);
      CARTO_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&g.staging), grown));
      g.staging_bytes = grown;
    }
    g.host->arrive_and_wait(rank(), call.kind);
  }

  // phase 1: after every rank's send is ready and the group's previous collective is done.
  for (const loopback_detail::Events& e : events) {
    CARTO_CUDA_CHECK(cudaStreamWaitEvent(s, e.ready, 0));
    CARTO_CUDA_CHECK(cudaStreamWaitEvent(s, e.done, 0));
  }
  if (phases.one) phases.one(s, slots, g.staging);
  CARTO_CUDA_CHECK(cudaEventRecord(phase1_, s));
  g.host->arrive_and_wait(rank(), call.kind);

  // phase 2: after every rank's phase 1 (nobody reads this rank's send any more).
  for (const loopback_detail::Events& e : events) {
    CARTO_CUDA_CHECK(cudaStreamWaitEvent(s, e.phase1, 0));
  }
  if (phases.two) phases.two(s, g.staging);
  CARTO_CUDA_CHECK(cudaEventRecord(done_, s));
  return Work(std::make_shared<LoopbackWork>(s));
}

// ---- the collectives
// -----------------------------------------------------------------------------

namespace {

void reduce(cudaStream_t s, std::span<const detail::ThreadSlot> slots, DType dtype,
            std::int64_t offset, std::int64_t count, void* out, ReduceOp op) {
  if (count <= 0) return;
  Sources sources{};
  sources.count = static_cast<int>(slots.size());
  for (std::size_t r = 0; r < slots.size(); ++r) sources.data[r] = slots[r].src;
  const Grid1d grid = grid_1d(count);
  reduce_in_rank_order<<<grid.blocks, grid.threads, 0, s>>>(sources, dtype == DType::bf16, offset,
                                                            count, out, op == ReduceOp::max);
  CARTO_CUDA_CHECK_LAUNCH();
}

void check_loopback_reducible(const Communicator& c, CollectiveKind kind, DType dtype) {
  if (dtype != DType::fp32 && dtype != DType::bf16) {
    detail::fail("carto: ", to_string_view(kind), " on loopback ", c.describe(),
                 " reduces fp32 or bf16, not ", dtype);
  }
}

}  // namespace

Work LoopbackComm::do_all_reduce(std::span<const std::byte> send, std::span<std::byte> recv,
                                 DType dtype, ReduceOp op, CommStream stream) {
  check_loopback_reducible(*this, CollectiveKind::all_reduce, dtype);
  const auto elems = static_cast<std::int64_t>(recv.size()) / size_bytes(dtype);
  const std::int64_t n = size(), me = rank();
  auto lo = [&](std::int64_t r) { return elems * r / n; };
  Phases phases;
  phases.one = [&](cudaStream_t s, std::span<const detail::ThreadSlot> slots, std::byte* staging) {
    // Chunk `me` of the sum into the same chunk of the staging area.
    reduce(s, slots, dtype, lo(me), lo(me + 1) - lo(me), staging + lo(me) * size_bytes(dtype), op);
  };
  phases.two = [&](cudaStream_t s, std::byte* staging) {
    copy_device(recv.data(), staging, recv.size(), s);
  };
  return run({.kind = CollectiveKind::all_reduce,
              .dtype = dtype,
              .op = op,
              .bytes = recv.size(),
              .src = send.data(),
              .dst = recv.data()},
             recv.size(), stream, phases);
}

Work LoopbackComm::do_reduce_scatter(std::span<const std::byte> send, std::span<std::byte> recv,
                                     DType dtype, ReduceOp op, CommStream stream) {
  check_loopback_reducible(*this, CollectiveKind::reduce_scatter, dtype);
  const auto elems = static_cast<std::int64_t>(recv.size()) / size_bytes(dtype);
  Phases phases;
  // Chunk rank() of every send, straight into recv: in place, recv is this rank's own chunk of
  // its send, which only this rank reads, element by element before it writes it.
  phases.one = [&](cudaStream_t s, std::span<const detail::ThreadSlot> slots, std::byte*) {
    reduce(s, slots, dtype, rank() * elems, elems, recv.data(), op);
  };
  return run({.kind = CollectiveKind::reduce_scatter,
              .dtype = dtype,
              .op = op,
              .bytes = recv.size(),
              .src = send.data(),
              .dst = recv.data()},
             0, stream, phases);
}

Work LoopbackComm::do_all_gather(std::span<const std::byte> send, std::span<std::byte> recv,
                                 DType dtype, CommStream stream) {
  Phases phases;
  // In place, chunk rank() of recv is this rank's send already; the others read only that chunk.
  phases.one = [&](cudaStream_t s, std::span<const detail::ThreadSlot> slots, std::byte*) {
    for (std::size_t j = 0; j < slots.size(); ++j) {
      copy_device(recv.data() + j * send.size(), slots[j].src, send.size(), s);
    }
  };
  return run({.kind = CollectiveKind::all_gather,
              .dtype = dtype,
              .bytes = send.size(),
              .src = send.data(),
              .dst = recv.data()},
             0, stream, phases);
}

Work LoopbackComm::do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv,
                                 DType dtype, CommStream stream) {
  const auto n = static_cast<std::size_t>(size());
  const auto me = static_cast<std::size_t>(rank());
  const std::size_t chunk = recv.size() / n;
  // In place, peers read this buffer's chunks while this rank would overwrite them: the result
  // is assembled in this rank's region of the staging area and copied out in phase 2.
  const bool in_place = !send.empty() && send.data() == recv.data();
  Phases phases;
  phases.one = [&](cudaStream_t s, std::span<const detail::ThreadSlot> slots, std::byte* staging) {
    std::byte* out = in_place ? staging + me * recv.size() : recv.data();
    for (std::size_t i = 0; i < n; ++i) {
      copy_device(out + i * chunk, slots[i].src + me * chunk, chunk, s);
    }
  };
  if (in_place) {
    phases.two = [&](cudaStream_t s, std::byte* staging) {
      copy_device(recv.data(), staging + me * recv.size(), recv.size(), s);
    };
  }
  return run({.kind = CollectiveKind::all_to_all,
              .dtype = dtype,
              .bytes = recv.size(),
              .src = send.data(),
              .dst = recv.data()},
             in_place ? n * recv.size() : 0, stream, phases);
}

Work LoopbackComm::do_broadcast(std::span<const std::byte> send, std::span<std::byte> recv,
                                DType dtype, int root, CommStream stream) {
  Phases phases;
  phases.one = [&](cudaStream_t s, std::span<const detail::ThreadSlot> slots, std::byte*) {
    copy_device(recv.data(), slots[static_cast<std::size_t>(root)].src, recv.size(), s);
  };
  return run({.kind = CollectiveKind::broadcast,
              .dtype = dtype,
              .root = root,
              .bytes = recv.size(),
              .src = send.data(),
              .dst = recv.data()},
             0, stream, phases);
}

Work LoopbackComm::do_barrier(CommStream stream) {
  // Every rank's stream waits for every rank's `ready`: a barrier on the streams as well.
  return run({.kind = CollectiveKind::barrier}, 0, stream, Phases{});
}

std::unique_ptr<Communicator> LoopbackComm::do_split(int color, int key, std::string name) {
  Group& g = *group_;
  const auto me = static_cast<std::size_t>(rank());
  const auto n = static_cast<std::size_t>(size());
  g.host->slots[me] = {.kind = CollectiveKind::split, .color = color, .key = key};
  g.host->arrive_and_wait(rank(), CollectiveKind::split);
  std::vector<int> colors(n), keys(n);
  for (std::size_t r = 0; r < n; ++r) {
    if (g.host->slots[r].kind != CollectiveKind::split) {
      detail::fail("carto: ranks of loopback group '", this->name(),
                   "' issued different collectives: rank ", rank(), " split, rank ", r, " ",
                   describe_call(g.host->slots[r]));
    }
    colors[r] = g.host->slots[r].color;
    keys[r] = g.host->slots[r].key;
  }
  const std::vector<int> members = detail::split_members(colors, keys, rank());
  const auto index =
      static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
  if (index == 0) {
    CommGroup created{.name = std::move(name), .world_ranks = {}};
    for (int m : members)
      created.world_ranks.push_back(group().world_ranks[static_cast<std::size_t>(m)]);
    g.events[me].created = std::make_shared<Group>(g.host->world, std::move(created), g.device);
  }
  g.host->arrive_and_wait(rank(), CollectiveKind::split);
  std::shared_ptr<Group> mine = g.events[static_cast<std::size_t>(members.front())].created;
  g.host->arrive_and_wait(rank(), CollectiveKind::split);  // everyone holds its group
  g.events[me].created.reset();
  return std::make_unique<LoopbackComm>(std::move(mine), index, stream_);
}

// ---- the world and the runner
// --------------------------------------------------------------------

LoopbackWorld::LoopbackWorld(int size, int device) : size_(size), device_(device) {
  if (size < 1) detail::fail("carto: a loopback world needs at least 1 rank, got ", size);
  world_ = std::make_shared<detail::ThreadWorldState>(size);
  CommGroup g{.name = "world", .world_ranks = {}};
  for (int r = 0; r < size; ++r) g.world_ranks.push_back(r);
  group_ = std::make_shared<Group>(world_, std::move(g), device);
}

std::unique_ptr<LoopbackComm> LoopbackWorld::communicator(int rank, cudaStream_t stream) const {
  if (rank < 0 || rank >= size_) {
    detail::fail("carto: loopback rank ", rank, " is not in a world of ", size_, " ranks");
  }
  return std::make_unique<LoopbackComm>(group_, rank, stream);
}

void LoopbackWorld::fail(int rank, std::string message) { world_->fail(rank, std::move(message)); }
void LoopbackWorld::finish(int rank) { world_->finish(rank); }
bool LoopbackWorld::failed() const { return world_->failed(); }
int LoopbackWorld::failed_rank() const { return world_->failed_rank(); }
std::string LoopbackWorld::failure() const { return world_->failure(); }

void run_loopback(int size, int device,
                  const std::function<void(LoopbackWorld& world, int rank)>& body) {
  LoopbackWorld world(size, device);
  ::carto::detail::run_rank_threads(world, size, [&](int rank) {
    CARTO_CUDA_CHECK(cudaSetDevice(device));
    body(world, rank);
  });
  if (!world.failed()) return;
  detail::fail("carto: ", world.failure());
}

}  // namespace carto::cuda
