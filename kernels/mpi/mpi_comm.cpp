// mpi/mpi_comm.cpp — MpiComm on MPI collectives (see mpi_comm.hpp).
#include "mpi/mpi_comm.hpp"

#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

namespace carto::mpi {

namespace {

std::string describe_mpi(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "unknown MPI error";
  return std::string(text, static_cast<std::size_t>(length));
}

#define CARTO_MPI_CHECK(call) CARTO_CHECK_STATUS(call, MPI_SUCCESS, describe_mpi)

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::sum ? MPI_SUM : MPI_MAX; }

// fp32 reductions are MPI's own (MPI_FLOAT); bf16 ones are done here (see mpi_comm.hpp).
MPI_Datatype reduce_type(DType dtype) {
  CARTO_CHECK(dtype == DType::fp32, "MPI reductions of MPI_FLOAT take fp32, got ", dtype);
  return MPI_FLOAT;
}

// Element r·n/size of n: where rank r's chunk of an all_reduce starts.
std::size_t chunk_start(std::size_t n, int r, int size) {
  return n * static_cast<std::size_t>(r) / static_cast<std::size_t>(size);
}

int mpi_count(std::size_t n, std::string_view what, const Communicator& comm) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    detail::fail("carto: ", what, " of ", n, " on ", comm.describe(), " exceeds MPI's int count (",
                 INT_MAX, "); split it into smaller collectives");
  }
  return static_cast<int>(n);
}

bool finalized() {
  int done = 0;
  MPI_Finalized(&done);
  return done != 0;
}

}  // namespace

struct MpiComm::Handle {
  MPI_Comm comm = MPI_COMM_NULL;
};

Environment::Environment(int& argc, char**& argv) {
  int initialized = 0;
  CARTO_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized != 0)
    detail::fail("carto: MPI is already initialised; make one mpi::Environment");
  CARTO_MPI_CHECK(MPI_Init(&argc, &argv));
}

Environment::~Environment() {
  if (!finalized()) MPI_Finalize();
}

MpiComm::MpiComm(CommGroup group, int rank, std::unique_ptr<Handle> handle)
    : Communicator(std::move(group), rank), handle_(std::move(handle)) {}

MpiComm::~MpiComm() {
  if (handle_ && handle_->comm != MPI_COMM_NULL && !finalized()) MPI_Comm_free(&handle_->comm);
}

std::unique_ptr<MpiComm> MpiComm::world() {
  auto handle = std::make_unique<Handle>();
  CARTO_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &handle->comm));
  CARTO_MPI_CHECK(MPI_Comm_set_errhandler(handle->comm, MPI_ERRORS_RETURN));
  int rank = 0;
  int size = 0;
  CARTO_MPI_CHECK(MPI_Comm_rank(handle->comm, &rank));
  CARTO_MPI_CHECK(MPI_Comm_size(handle->comm, &size));
  CommGroup group{.name = "world", .world_ranks = {}};
  for (int r = 0; r < size; ++r) group.world_ranks.push_back(r);
  return std::unique_ptr<MpiComm>(new MpiComm(std::move(group), rank, std::move(handle)));
}

// bf16: every rank sends chunk j of its buffer to rank j (MPI_Alltoallv), rank j reduces what it
// received in rank order in fp32 and rounds once, and the reduced chunks are all-gathered
// (MPI_Allgatherv, in place). Each element is reduced by one rank, so every rank holds its bits.
Work MpiComm::bf16_all_reduce(std::span<const std::byte> send, std::span<std::byte> recv,
                              ReduceOp op) {
  const int n = size(), me = rank();
  const std::size_t elems = recv.size() / sizeof(Bf16);
  const auto bytes_of = [](std::size_t e) { return e * sizeof(Bf16); };
  std::vector<int> counts(static_cast<std::size_t>(n)), displs(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    const std::size_t lo = chunk_start(elems, r, n), hi = chunk_start(elems, r + 1, n);
    counts[static_cast<std::size_t>(r)] = mpi_count(bytes_of(hi - lo), "all_reduce bytes", *this);
    displs[static_cast<std::size_t>(r)] = mpi_count(bytes_of(lo), "all_reduce bytes", *this);
  }
  const int mine = counts[static_cast<std::size_t>(me)];
  const std::size_t mine_u = static_cast<std::size_t>(mine);
  std::vector<std::byte> gathered(mine_u * static_cast<std::size_t>(n));
  std::vector<int> recv_counts(static_cast<std::size_t>(n), mine), recv_displs;
  std::vector<const std::byte*> sources;
  for (int r = 0; r < n; ++r) {
    recv_displs.push_back(mpi_count(mine_u * static_cast<std::size_t>(r), "all_reduce", *this));
    sources.push_back(gathered.data() + mine_u * static_cast<std::size_t>(r));
  }
  CARTO_MPI_CHECK(MPI_Alltoallv(send.data(), counts.data(), displs.data(), MPI_BYTE,
                                gathered.data(), recv_counts.data(), recv_displs.data(), MPI_BYTE,
                                handle_->comm));
  detail::reduce_in_rank_order(recv.data() + displs[static_cast<std::size_t>(me)], sources, 0,
                               mine_u / sizeof(Bf16), DType::bf16, op);
  CARTO_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv.data(), counts.data(),
                                 displs.data(), MPI_BYTE, handle_->comm));
  return {};
}

// bf16: chunk j of every rank's send goes to rank j (MPI_Alltoall), which reduces them in rank
// order in fp32 and rounds once into recv.
Work MpiComm::bf16_reduce_scatter(std::span<const std::byte> send, std::span<std::byte> recv,
                                  ReduceOp op) {
  const std::size_t chunk = recv.size();
  const int bytes = mpi_count(chunk, "reduce_scatter bytes", *this);
  mpi_count(send.size(), "reduce_scatter bytes", *this);
  std::vector<std::byte> gathered(send.size());
  CARTO_MPI_CHECK(
      MPI_Alltoall(send.data(), bytes, MPI_BYTE, gathered.data(), bytes, MPI_BYTE, handle_->comm));
  std::vector<const std::byte*> sources;
  for (int r = 0; r < size(); ++r)
    sources.push_back(gathered.data() + chunk * static_cast<std::size_t>(r));
  detail::reduce_in_rank_order(recv.data(), sources, 0, chunk / sizeof(Bf16), DType::bf16, op);
  return {};
}

Work MpiComm::do_all_reduce(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                            ReduceOp op, CommStream) {
  if (dtype == DType::bf16) return bf16_all_reduce(send, recv, op);
  const int count = mpi_count(recv.size() / sizeof(float), "all_reduce", *this);
  const void* src = send.data() == recv.data() ? MPI_IN_PLACE : send.data();
  CARTO_MPI_CHECK(
      MPI_Allreduce(src, recv.data(), count, reduce_type(dtype), mpi_op(op), handle_->comm));
  return {};
}

Work MpiComm::do_all_gather(std::span<const std::byte> send, std::span<std::byte> recv, DType,
                            CommStream) {
  const int bytes = mpi_count(send.size(), "all_gather bytes", *this);
  mpi_count(recv.size(), "all_gather bytes", *this);
  const bool in_place =
      send.data() == recv.data() + static_cast<std::size_t>(rank()) * send.size() && !send.empty();
  if (in_place) {
    CARTO_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv.data(), bytes, MPI_BYTE,
                                  handle_->comm));
  } else {
    CARTO_MPI_CHECK(
        MPI_Allgather(send.data(), bytes, MPI_BYTE, recv.data(), bytes, MPI_BYTE, handle_->comm));
  }
  return {};
}

Work MpiComm::do_reduce_scatter(std::span<const std::byte> send, std::span<std::byte> recv,
                                DType dtype, ReduceOp op, CommStream) {
  if (dtype == DType::bf16) return bf16_reduce_scatter(send, recv, op);
  const int count = mpi_count(recv.size() / sizeof(float), "reduce_scatter", *this);
  mpi_count(send.size() / sizeof(float), "reduce_scatter", *this);
  const bool in_place =
      recv.data() == send.data() + static_cast<std::size_t>(rank()) * recv.size() && !recv.empty();
  if (in_place) {
    // MPI_IN_PLACE takes the input from the whole buffer and leaves the result at its start; move
    // it to chunk rank() (NCCL's in-place layout). send aliases the writable recv buffer.
    auto* whole = const_cast<std::byte*>(send.data());
    CARTO_MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, whole, count, reduce_type(dtype),
                                             mpi_op(op), handle_->comm));
    if (rank() != 0) std::memmove(recv.data(), whole, recv.size());
  } else {
    CARTO_MPI_CHECK(MPI_Reduce_scatter_block(send.data(), recv.data(), count, reduce_type(dtype),
                                             mpi_op(op), handle_->comm));
  }
  return {};
}

Work MpiComm::do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv, DType,
                            CommStream) {
  const int chunk =
      mpi_count(recv.size() / static_cast<std::size_t>(size()), "all_to_all bytes", *this);
  mpi_count(recv.size(), "all_to_all bytes", *this);
  if (send.data() == recv.data() && !recv.empty()) {
    CARTO_MPI_CHECK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv.data(), chunk, MPI_BYTE,
                                 handle_->comm));
  } else {
    CARTO_MPI_CHECK(
        MPI_Alltoall(send.data(), chunk, MPI_BYTE, recv.data(), chunk, MPI_BYTE, handle_->comm));
  }
  return {};
}

Work MpiComm::do_broadcast(std::span<const std::byte> send, std::span<std::byte> recv, DType,
                           int root, CommStream) {
  const int bytes = mpi_count(recv.size(), "broadcast bytes", *this);
  if (rank() == root && send.data() != recv.data() && !recv.empty()) {
    std::memcpy(recv.data(), send.data(), recv.size());
  }
  CARTO_MPI_CHECK(MPI_Bcast(recv.data(), bytes, MPI_BYTE, root, handle_->comm));
  return {};
}

Work MpiComm::do_barrier(CommStream) {
  CARTO_MPI_CHECK(MPI_Barrier(handle_->comm));
  return {};
}

std::unique_ptr<Communicator> MpiComm::do_split(int color, int key, std::string name) {
  auto handle = std::make_unique<Handle>();
  CARTO_MPI_CHECK(MPI_Comm_split(handle_->comm, color, key, &handle->comm));
  CARTO_MPI_CHECK(MPI_Comm_set_errhandler(handle->comm, MPI_ERRORS_RETURN));
  int rank = 0;
  int size = 0;
  CARTO_MPI_CHECK(MPI_Comm_rank(handle->comm, &rank));
  CARTO_MPI_CHECK(MPI_Comm_size(handle->comm, &size));
  CommGroup group{.name = std::move(name),
                  .world_ranks = std::vector<int>(static_cast<std::size_t>(size))};
  int mine = world_rank();
  CARTO_MPI_CHECK(
      MPI_Allgather(&mine, 1, MPI_INT, group.world_ranks.data(), 1, MPI_INT, handle->comm));
  return std::unique_ptr<MpiComm>(new MpiComm(std::move(group), rank, std::move(handle)));
}

void abort_job(const Communicator& world, std::string_view message) {
  std::fprintf(stderr, "carto: world rank %d of %d failed: %.*s; aborting the MPI job\n",
               world.world_rank(), world.size(), static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest if it did
}

int run(int& argc, char**& argv, const std::function<void(Communicator& world)>& body) {
  Environment environment(argc, argv);
  std::unique_ptr<MpiComm> world = MpiComm::world();
  try {
    body(*world);
  } catch (const std::exception& e) {
    abort_job(*world, e.what());
  } catch (...) {
    abort_job(*world, "a non-standard exception");
  }
  world.reset();
  return 0;
}

}  // namespace carto::mpi
