// cuda/loopback_comm.hpp — every rank of a mesh on ONE GPU: host threads, each with its own
// stream, whose collectives move device memory. Sharded parity becomes testable on one GPU.
//
// Design note. A LoopbackWorld is ThreadWorld (carto/runtime/thread_comm.hpp) for device buffers:
// the same failure semantics (a rank that fails or returns makes the others' collectives throw,
// never hang), the same groups and split(), the same results; only the data moves on the GPU. All
// ranks share one device's address space, so a rank reads its peers' buffers directly. A
// collective runs in two phases around host barriers:
//   publish  each rank records a `ready` event on its stream (its send buffer is written) and
//            publishes its buffers and events; the ranks check that they issued the same call;
//   phase 1  each rank's stream waits for every rank's `ready` (and for every rank's `done` of the
//            group's previous collective, which may still read the staging area), then computes
//            its part: rank r reduces chunk r of every send into the group's device staging area
//            (all_reduce) or into its recv (reduce_scatter), or copies its peers' chunks into its
//            recv (all_gather, all_to_all, broadcast); then it records `phase1`;
//   phase 2  after a barrier, each rank's stream waits for every rank's `phase1` (nobody reads its
//            send any more) and copies its result out of the staging area (all_reduce, in-place
//            all_to_all); then it records `done`.
// A rank writes only its recv buffer and its own part of the staging area. Reductions run in one
// small kernel in fp32, in the fixed rank order 0..size-1 (acc = x0; acc = acc op x1; ...), with
// bf16 rounded once on the store, so every rank holds bit-identical results and they equal
// ThreadComm's bit for bit on fp32. The host blocks only in the barriers; the returned Work's
// wait() waits for this rank's stream to pass the collective (cudaEventSynchronize).
//
// Streams: a call runs on CommStream::native when set, else on the rank's stream (normally its
// CudaBackend's). Memory: the staging area (cudaMalloc, grown by member 0 when a call needs more,
// after a device synchronization) and the events are the communicator's own, outside the backend's
// allocator and the memory tracker, as NCCL's buffers are.
#pragma once

#include <cuda_runtime_api.h>

#include <carto/runtime/communicator.hpp>
#include <carto/runtime/thread_comm.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>

namespace carto::cuda {

// The most ranks one loopback group takes (the reduction kernel gets its sources by value).
inline constexpr int kMaxLoopbackRanks = 64;

namespace loopback_detail {
struct Group;
}  // namespace loopback_detail

class LoopbackComm final : public Communicator {
 public:
  LoopbackComm(std::shared_ptr<loopback_detail::Group> group, int rank, cudaStream_t stream);
  ~LoopbackComm() override;
  [[nodiscard]] cudaStream_t stream() const { return stream_; }

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
  struct Phases;
  Work run(const detail::ThreadSlot& call, std::size_t staging_bytes, CommStream stream,
           const Phases& phases);

  std::shared_ptr<loopback_detail::Group> group_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  cudaEvent_t phase1_ = nullptr;
  cudaEvent_t done_ = nullptr;
};

// The shared state of `size` ranks on GPU `device`. Each rank takes its world communicator once,
// on its own thread, and reports how its work ended (fail or finish), as with ThreadWorld.
class LoopbackWorld {
 public:
  explicit LoopbackWorld(int size, int device = 0);
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] int device() const { return device_; }
  // Rank `rank`'s world communicator; its collectives run on `stream`, a stream of device().
  [[nodiscard]] std::unique_ptr<LoopbackComm> communicator(int rank, cudaStream_t stream) const;
  void fail(int rank, std::string message);
  void finish(int rank);
  [[nodiscard]] bool failed() const;
  [[nodiscard]] int failed_rank() const;
  [[nodiscard]] std::string failure() const;

 private:
  int size_;
  int device_;
  std::shared_ptr<detail::ThreadWorldState> world_;
  std::shared_ptr<loopback_detail::Group> group_;
};

// Runs body(world, rank) on `size` host threads, rank 0 on the calling thread, each with GPU
// `device` current; the body makes its backend and takes world.communicator(rank, its stream).
// When a rank throws, the others' collectives fail and this rethrows the first failure as a
// carto::Error naming its rank (run_threads' contract).
void run_loopback(int size, int device,
                  const std::function<void(LoopbackWorld& world, int rank)>& body);

}  // namespace carto::cuda
