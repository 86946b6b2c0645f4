// cuda/nccl_comm.cu — NcclComm: the collectives, Works that poll NCCL's asynchronous errors, the
// two bootstraps and NcclGroup (design note in nccl_comm.hpp).
//
// Invariants: every call first checks that the communicator was not aborted and makes its device
// current; zero-byte collectives enqueue nothing (every rank has the same sizes, so every rank
// skips alike); a Work's event is recorded right after its collective is enqueued, or, inside an
// open group, right after the outermost ncclGroupEnd (before it NCCL has enqueued nothing).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>

#include "cuda/cuda_check.hpp"
#include "cuda/nccl_check.hpp"
#include "cuda/nccl_comm.hpp"

namespace carto::cuda {

namespace nccl_detail {

struct State {
  ncclComm_t comm = nullptr;
  int device = 0;
  bool aborted = false;
  std::string why;

  State(ncclComm_t c, int d) : comm(c), device(d) {}
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State() {
    if (comm != nullptr && !aborted) ncclCommDestroy(comm);
  }
  void abort(std::string reason) {
    if (aborted) return;
    ncclCommAbort(comm);
    aborted = true;
    why = std::move(reason);
  }
};

}  // namespace nccl_detail

namespace {

using nccl_detail::State;

class NcclWork final : public WorkState {
 public:
  NcclWork(std::shared_ptr<State> state, std::string what, std::chrono::milliseconds timeout)
      : state_(std::move(state)), what_(std::move(what)), timeout_(timeout) {
    CARTO_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;
  ~NcclWork() override { cudaEventDestroy(event_); }

  void record(int device, cudaStream_t stream) {
    cudaSetDevice(device);
    const cudaError_t status = cudaEventRecord(event_, stream);
    if (status != cudaSuccess) {
      error_ = detail::concat("recording the completion event failed: ", describe_cuda(status));
    }
    recorded_ = true;
  }
  void set_error(std::string why) {
    error_ = std::move(why);
    recorded_ = true;
  }

  void wait() override {
    if (!recorded_) {
      detail::fail("carto: waited on ", what_,
                   " inside an open NcclGroup; NCCL runs the group's collectives only when it "
                   "ends, so end the group (NcclGroup::end) before waiting");
    }
    if (!error_.empty()) detail::fail("carto: ", what_, " failed: ", error_);
    const auto start = std::chrono::steady_clock::now();
    for (int polls = 0;; ++polls) {
      const cudaError_t status = cudaEventQuery(event_);
      if (status == cudaSuccess) return;
      if (status != cudaErrorNotReady) {
        detail::fail("carto: ", what_, " failed on the device: ", describe_cuda(status));
      }
      if (state_->aborted) {
        detail::fail("carto: ", what_, " cannot complete: the communicator was aborted (",
                     state_->why, ")");
      }
      ncclResult_t async = ncclSuccess;
      const ncclResult_t got = ncclCommGetAsyncError(state_->comm, &async);
      if (got != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
        const std::string why = describe_nccl(got != ncclSuccess ? got : async);
        state_->abort(detail::concat("asynchronous NCCL error during ", what_, ": ", why));
        detail::fail("carto: ", what_, " failed: NCCL reports '", why,
                     "'; the communicator was aborted");
      }
      if (std::chrono::steady_clock::now() - start > timeout_) {
        state_->abort(detail::concat(what_, " timed out"));
        detail::fail("carto: ", what_, " did not complete within ", timeout_.count(),
                     " ms (a rank that died or issued another collective?); the communicator "
                     "was aborted");
      }
      if (polls < 1000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  [[nodiscard]] bool completed() const override {
    return recorded_ && (!error_.empty() || cudaEventQuery(event_) != cudaErrorNotReady);
  }

 private:
  std::shared_ptr<State> state_;
  std::string what_;
  std::chrono::milliseconds timeout_;
  cudaEvent_t event_ = nullptr;
  bool recorded_ = false;
  std::string error_;
};

// This thread's open NcclGroups and the Works issued inside them.
struct PendingWork {
  std::shared_ptr<NcclWork> work;
  int device = 0;
  cudaStream_t stream = nullptr;
};
thread_local int t_group_depth = 0;
thread_local std::vector<PendingWork> t_pending;

ncclDataType_t reduction_type(DType dtype, const Communicator& comm, CollectiveKind kind) {
  switch (dtype) {
    case DType::fp32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    default: break;
  }
  detail::fail("carto: ", to_string_view(kind), " on ", comm.describe(),
               " over NCCL reduces fp32 or bf16, not ", dtype);
}

ncclRedOp_t reduction_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclMax; }

std::size_t elements(std::size_t bytes, DType dtype) {
  return bytes / static_cast<std::size_t>(size_bytes(dtype));
}

}  // namespace

// ---- construction
// --------------------------------------------------------------------------------

NcclComm::NcclComm(CommGroup group, int rank, std::shared_ptr<nccl_detail::State> state, int device,
                   cudaStream_t stream, const NcclOptions& options)
    : Communicator(std::move(group), rank),
      state_(std::move(state)),
      device_(device),
      stream_(stream),
      options_(options) {
  CARTO_CUDA_CHECK(cudaSetDevice(device_));
  CARTO_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&one_), sizeof(float)));
  CARTO_CUDA_CHECK(cudaMemset(one_, 0, sizeof(float)));
}

NcclComm::~NcclComm() {
  cudaSetDevice(device_);
  cudaFree(one_);
}

ncclComm_t NcclComm::native() const { return state_->comm; }

std::unique_ptr<NcclComm> NcclComm::bootstrap(Communicator& host, int device, cudaStream_t stream,
                                              const NcclOptions& options) {
  ncclUniqueId id{};
  if (host.rank() == 0) CARTO_NCCL_CHECK(ncclGetUniqueId(&id));
  // The id is opaque bytes: a one-byte dtype makes the broadcast move them as they are.
  const auto bytes = std::as_writable_bytes(std::span<ncclUniqueId>(&id, 1));
  host.broadcast(std::span<const std::byte>(bytes), bytes, DType::fp8_e4m3, 0).wait();
  CARTO_CUDA_CHECK(cudaSetDevice(device));
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  CARTO_NCCL_CHECK(ncclCommInitRankConfig(&comm, host.size(), id, host.rank(), &config));
  auto state = std::make_shared<nccl_detail::State>(comm, device);
  return std::unique_ptr<NcclComm>(
      new NcclComm(host.group(), host.rank(), std::move(state), device, stream, options));
}

std::vector<std::unique_ptr<NcclComm>> NcclComm::init_all(std::span<const int> devices,
                                                          std::span<const cudaStream_t> streams,
                                                          const NcclOptions& options) {
  if (devices.empty() || devices.size() != streams.size()) {
    detail::fail(
        "carto: NcclComm::init_all needs one stream per device and at least one device; "
        "got ",
        devices.size(), " devices and ", streams.size(), " streams");
  }
  const int n = static_cast<int>(devices.size());
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  CARTO_NCCL_CHECK(ncclCommInitAll(comms.data(), n, devices.data()));
  CommGroup group{.name = "world", .world_ranks = {}};
  for (int r = 0; r < n; ++r) group.world_ranks.push_back(r);
  std::vector<std::unique_ptr<NcclComm>> out;
  for (int r = 0; r < n; ++r) {
    const auto i = static_cast<std::size_t>(r);
    auto state = std::make_shared<nccl_detail::State>(comms[i], devices[i]);
    out.push_back(std::unique_ptr<NcclComm>(
        new NcclComm(group, r, std::move(state), devices[i], streams[i], options)));
  }
  return out;
}

// ---- plumbing
// ------------------------------------------------------------------------------------

cudaStream_t NcclComm::pick(CommStream stream) const {
  return stream.native != nullptr ? static_cast<cudaStream_t>(stream.native) : stream_;
}

void NcclComm::enter(CollectiveKind kind) const {
  if (state_->aborted) {
    detail::fail("carto: ", to_string_view(kind), " on ", describe(),
                 ": the NCCL communicator was aborted (", state_->why, ")");
  }
  CARTO_CUDA_CHECK(cudaSetDevice(device_));
}

Work NcclComm::finish(CollectiveKind kind, std::size_t bytes, cudaStream_t stream) {
  auto work = std::make_shared<NcclWork>(
      state_, detail::concat(to_string_view(kind), " of ", bytes, " bytes on ", describe()),
      options_.timeout);
  if (t_group_depth > 0) {
    t_pending.push_back({work, device_, stream});
  } else {
    work->record(device_, stream);
  }
  return Work(std::move(work));
}

// ---- collectives
// ---------------------------------------------------------------------------------

Work NcclComm::do_all_reduce(std::span<const std::byte> send, std::span<std::byte> recv,
                             DType dtype, ReduceOp op, CommStream stream) {
  enter(CollectiveKind::all_reduce);
  const ncclDataType_t type = reduction_type(dtype, *this, CollectiveKind::all_reduce);
  if (recv.empty()) return {};
  const cudaStream_t s = pick(stream);
  CARTO_NCCL_CHECK(ncclAllReduce(send.data(), recv.data(), elements(recv.size(), dtype), type,
                                 reduction_op(op), state_->comm, s));
  return finish(CollectiveKind::all_reduce, recv.size(), s);
}

Work NcclComm::do_all_gather(std::span<const std::byte> send, std::span<std::byte> recv, DType,
                             CommStream stream) {
  enter(CollectiveKind::all_gather);
  if (send.empty()) return {};
  const cudaStream_t s = pick(stream);
  CARTO_NCCL_CHECK(
      ncclAllGather(send.data(), recv.data(), send.size(), ncclUint8, state_->comm, s));
  return finish(CollectiveKind::all_gather, recv.size(), s);
}

Work NcclComm::do_reduce_scatter(std::span<const std::byte> send, std::span<std::byte> recv,
                                 DType dtype, ReduceOp op, CommStream stream) {
  enter(CollectiveKind::reduce_scatter);
  const ncclDataType_t type = reduction_type(dtype, *this, CollectiveKind::reduce_scatter);
  if (recv.empty()) return {};
  const cudaStream_t s = pick(stream);
  CARTO_NCCL_CHECK(ncclReduceScatter(send.data(), recv.data(), elements(recv.size(), dtype), type,
                                     reduction_op(op), state_->comm, s));
  return finish(CollectiveKind::reduce_scatter, send.size(), s);
}

Work NcclComm::do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv, DType,
                             CommStream stream) {
  enter(CollectiveKind::all_to_all);
  if (recv.empty()) return {};
  const cudaStream_t s = pick(stream);
  const bool in_place = send.data() == recv.data();
  if (in_place && t_group_depth > 0) {
    detail::fail("carto: all_to_all in place on ", describe(),
                 " inside an open NcclGroup: its staging copy would run before the group's "
                 "sends; pass distinct send and recv buffers or issue it outside the group");
  }
  const std::size_t chunk = recv.size() / static_cast<std::size_t>(size());
  const std::byte* src = send.data();
  void* staged = nullptr;
  if (in_place) {
    CARTO_CUDA_CHECK(cudaMallocAsync(&staged, send.size(), s));
    CARTO_CUDA_CHECK(
        cudaMemcpyAsync(staged, send.data(), send.size(), cudaMemcpyDeviceToDevice, s));
    src = static_cast<const std::byte*>(staged);
  }
  const auto me = static_cast<std::size_t>(rank());
  CARTO_CUDA_CHECK(cudaMemcpyAsync(recv.data() + me * chunk, src + me * chunk, chunk,
                                   cudaMemcpyDeviceToDevice, s));
  CARTO_NCCL_CHECK(ncclGroupStart());
  ncclResult_t status = ncclSuccess;
  for (int p = 0; p < size() && status == ncclSuccess; ++p) {
    if (p == rank()) continue;
    const auto at = static_cast<std::size_t>(p) * chunk;
    status = ncclSend(src + at, chunk, ncclUint8, p, state_->comm, s);
    if (status == ncclSuccess)
      status = ncclRecv(recv.data() + at, chunk, ncclUint8, p, state_->comm, s);
  }
  const ncclResult_t ended = ncclGroupEnd();
  if (staged != nullptr) cudaFreeAsync(staged, s);
  CARTO_NCCL_CHECK(status);
  CARTO_NCCL_CHECK(ended);
  return finish(CollectiveKind::all_to_all, recv.size(), s);
}

Work NcclComm::do_broadcast(std::span<const std::byte> send, std::span<std::byte> recv, DType,
                            int root, CommStream stream) {
  enter(CollectiveKind::broadcast);
  if (recv.empty()) return {};
  const cudaStream_t s = pick(stream);
  // NCCL reads sendbuff on the root only.
  const void* from = rank() == root ? static_cast<const void*>(send.data()) : recv.data();
  CARTO_NCCL_CHECK(ncclBroadcast(from, recv.data(), recv.size(), ncclUint8, root, state_->comm, s));
  return finish(CollectiveKind::broadcast, recv.size(), s);
}

Work NcclComm::do_barrier(CommStream stream) {
  enter(CollectiveKind::barrier);
  const cudaStream_t s = pick(stream);
  // An all-reduce completes on no rank before every rank has entered it.
  CARTO_NCCL_CHECK(ncclAllReduce(one_, one_, 1, ncclFloat32, ncclSum, state_->comm, s));
  return finish(CollectiveKind::barrier, sizeof(float), s);
}

std::unique_ptr<Communicator> NcclComm::do_split(int color, int key, std::string name) {
  enter(CollectiveKind::split);
  if (t_group_depth > 0) {
    detail::fail("carto: split of ", describe(),
                 " inside an open NcclGroup; ncclCommSplit cannot be grouped");
  }
  // Every rank's (color, key), to name the new group's members as ThreadComm and MpiComm do.
  const auto n = static_cast<std::size_t>(size());
  std::vector<std::int32_t> pairs(2 * n, 0);
  pairs[2 * static_cast<std::size_t>(rank())] = color;
  pairs[2 * static_cast<std::size_t>(rank()) + 1] = key;
  std::int32_t* device_pairs = nullptr;
  CARTO_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_pairs), pairs.size() * 4));
  try {
    std::int32_t* mine = device_pairs + 2 * static_cast<std::size_t>(rank());
    CARTO_CUDA_CHECK(cudaMemcpyAsync(mine, pairs.data() + 2 * static_cast<std::size_t>(rank()), 8,
                                     cudaMemcpyHostToDevice, stream_));
    CARTO_NCCL_CHECK(ncclAllGather(mine, device_pairs, 2, ncclInt32, state_->comm, stream_));
    CARTO_CUDA_CHECK(cudaMemcpyAsync(pairs.data(), device_pairs, pairs.size() * 4,
                                     cudaMemcpyDeviceToHost, stream_));
    finish(CollectiveKind::split, pairs.size() * 4, stream_).wait();
  } catch (...) {
    cudaFree(device_pairs);
    throw;
  }
  cudaFree(device_pairs);
  std::vector<int> colors(n), keys(n);
  for (std::size_t r = 0; r < n; ++r) {
    colors[r] = pairs[2 * r];
    keys[r] = pairs[2 * r + 1];
  }
  const std::vector<int> members = detail::split_members(colors, keys, rank());
  const auto index =
      static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
  CommGroup created{.name = std::move(name), .world_ranks = {}};
  for (int m : members)
    created.world_ranks.push_back(group().world_ranks[static_cast<std::size_t>(m)]);

  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  CARTO_NCCL_CHECK(ncclCommSplit(state_->comm, color, key, &comm, &config));
  auto state = std::make_shared<nccl_detail::State>(comm, device_);
  int nccl_rank = -1, nccl_size = 0;
  CARTO_NCCL_CHECK(ncclCommUserRank(comm, &nccl_rank));
  CARTO_NCCL_CHECK(ncclCommCount(comm, &nccl_size));
  if (nccl_rank != index || nccl_size != static_cast<int>(members.size())) {
    detail::fail("carto: ncclCommSplit of ", describe(), " (color ", color, ", key ", key,
                 ") made rank ", nccl_rank, " of ", nccl_size,
                 "; the split's order (key, then "
                 "parent rank) gives rank ",
                 index, " of ", members.size());
  }
  return std::unique_ptr<NcclComm>(
      new NcclComm(std::move(created), index, std::move(state), device_, stream_, options_));
}

// ---- NcclGroup
// -----------------------------------------------------------------------------------

NcclGroup::NcclGroup() {
  CARTO_NCCL_CHECK(ncclGroupStart());
  ++t_group_depth;
}

NcclGroup::~NcclGroup() {
  if (!open_) return;
  try {
    end();
  } catch (...) {  // the group's Works carry the failure
  }
}

void NcclGroup::end() {
  if (!open_) return;
  open_ = false;
  --t_group_depth;
  const ncclResult_t status = ncclGroupEnd();
  if (t_group_depth == 0) {
    for (PendingWork& p : t_pending) {
      if (status == ncclSuccess) {
        p.work->record(p.device, p.stream);
      } else {
        p.work->set_error(detail::concat("ncclGroupEnd failed: ", describe_nccl(status)));
      }
    }
    t_pending.clear();
  }
  CARTO_NCCL_CHECK(status);
}

}  // namespace carto::cuda
