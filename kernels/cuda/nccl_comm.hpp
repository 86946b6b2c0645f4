// cuda/nccl_comm.hpp — carto::Communicator over NCCL: one rank per GPU, collectives enqueued on a
// CUDA stream.
//
// Design note. An NcclComm is one rank of one NCCL communicator, bound to a device and a default
// stream (normally the rank's CudaBackend::stream()). Collectives map onto NCCL's:
//   all_reduce -> ncclAllReduce, all_gather -> ncclAllGather, reduce_scatter -> ncclReduceScatter,
//   broadcast -> ncclBroadcast, all_to_all -> ncclSend/ncclRecv to every peer in one group,
//   barrier -> an all-reduce of one float, split -> ncclCommSplit.
// NCCL's in-place rules are the Communicator's, so in-place calls pass through, except all_to_all
// in place, whose send chunks would be overwritten while peers read them: it copies send into a
// stream-ordered scratch buffer first (and is refused inside an open NcclGroup, where the copy
// would run before the group's sends). Reductions take fp32 (ncclFloat32) and bf16
// (ncclBfloat16, which NCCL accumulates in fp32 and rounds once); collectives that move bytes take
// any dtype (ncclUint8 over the bytes).
//
// Streams: a call runs on CommStream::native when set (a cudaStream_t), else on the default
// stream; it is ordered after the work already on that stream. The returned Work records an
// event after the collective; wait() blocks the host until it has run and throws carto::Error when
// NCCL reports an asynchronous error or when `timeout` passes first (the communicator is then
// aborted: nothing waits forever, and later calls on it throw).
//
// Grouping: NcclGroup (RAII) brackets many collectives of this thread with ncclGroupStart/End, so
// NCCL fuses them (one launch for many small gradient all-reduces). Their Works complete after the
// group ends; waiting on one inside the open group is an error that says so.
//
// Bootstrap: NcclComm::bootstrap makes a world over any host communicator: rank 0 creates the
// ncclUniqueId and broadcasts it through the host communicator (an MpiComm for one process per
// GPU, see nccl_comm_mpi.hpp; a ThreadComm for one thread per GPU in one process), then every rank
// joins with ncclCommInitRankConfig. NcclComm::init_all makes every rank of one process at once
// (ncclCommInitAll); each communicator is then used by the thread that drives its GPU.
//
// Memory: NCCL's buffers, the in-place all_to_all's copy (cudaMallocAsync on the call's stream)
// and the barrier's float are the communicator's own device memory, outside the backend's allocator
// and so outside the memory tracker, as NCCL's internal buffers are in the cost model.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <carto/runtime/communicator.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace carto::cuda {

struct NcclOptions {
  // A wait() longer than this aborts the communicator and throws (a peer that died or never
  // issued the matching collective).
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

namespace nccl_detail {
struct State;  // the ncclComm_t, its device and whether it was aborted
}  // namespace nccl_detail

class NcclComm final : public Communicator {
 public:
  // Collective over `host` (every rank of it calls this): an NCCL world of host.size() ranks with
  // host's group (name, world ranks) and rank; this rank's GPU is `device`, its default stream
  // `stream` (a stream of `device`).
  [[nodiscard]] static std::unique_ptr<NcclComm> bootstrap(Communicator& host, int device,
                                                           cudaStream_t stream,
                                                           const NcclOptions& options = {});
  // Every rank of a world driven by this process: rank i on devices[i] with default stream
  // streams[i] (ncclCommInitAll). Hand communicator i to the thread that drives devices[i].
  [[nodiscard]] static std::vector<std::unique_ptr<NcclComm>> init_all(
      std::span<const int> devices, std::span<const cudaStream_t> streams,
      const NcclOptions& options = {});
  ~NcclComm() override;

  [[nodiscard]] ncclComm_t native() const;
  [[nodiscard]] int device() const { return device_; }
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
  NcclComm(CommGroup group, int rank, std::shared_ptr<nccl_detail::State> state, int device,
           cudaStream_t stream, const NcclOptions& options);
  [[nodiscard]] cudaStream_t pick(CommStream stream) const;
  // Checks that the communicator was not aborted and makes `device_` current.
  void enter(CollectiveKind kind) const;
  // The Work of a collective just enqueued on `stream` (pending until an open group ends).
  Work finish(CollectiveKind kind, std::size_t bytes, cudaStream_t stream);

  std::shared_ptr<nccl_detail::State> state_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  NcclOptions options_;
  float* one_ = nullptr;  // the barrier's all-reduce
};

// Brackets this thread's collectives with ncclGroupStart/ncclGroupEnd; groups nest. end() (or the
// destructor) ends it; only the outermost end launches, and then the Works issued inside complete.
class NcclGroup {
 public:
  NcclGroup();
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  // Ends the group, throwing carto::Error when ncclGroupEnd fails (the destructor cannot throw:
  // it makes the Works of the group fail instead).
  void end();

 private:
  bool open_ = true;
};

}  // namespace carto::cuda
