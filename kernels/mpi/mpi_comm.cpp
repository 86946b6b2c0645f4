// mpi/mpi_comm.cpp — MpiComm on MPI collectives (see mpi_comm.hpp).
#include "mpi/mpi_comm.hpp"

#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include "mpi/mpi_watch.hpp"

namespace carto::mpi {

namespace {

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
    carto::detail::fail("carto: ", what, " of ", n, " on ", comm.describe(),
                        " exceeds MPI's int count (", INT_MAX,
                        "); split it into smaller collectives");
  }
  return static_cast<int>(n);
}

using detail::finalized;

// How long a rank whose body threw waits, after telling the others, before it aborts the job.
constexpr double kAbortGraceS = 2.0;

// The line of mpi_comm.hpp's abort_job.
void print_failure(int rank, int size, std::string_view text) {
  const std::string_view message = detail::unprefixed(text);
  std::fprintf(stderr, "carto: world rank %d of %d failed: %.*s; aborting the MPI job\n", rank,
               size, static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
}

[[noreturn]] void abort_mpi() {
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest if it did
}

}  // namespace

// The MPI_Comm, the world's failure watch (shared by every split) and this group's key in it.
struct MpiComm::Handle {
  MPI_Comm comm = MPI_COMM_NULL;
  std::shared_ptr<detail::Watch> watch;
  std::string key;
};

Environment::Environment(int& argc, char**& argv) {
  int initialized = 0;
  CARTO_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized != 0)
    carto::detail::fail("carto: MPI is already initialised; make one mpi::Environment");
  CARTO_MPI_CHECK(MPI_Init(&argc, &argv));
}

Environment::~Environment() {
  if (!finalized()) MPI_Finalize();
}

MpiComm::MpiComm(CommGroup group, int rank, std::unique_ptr<Handle> handle)
    : Communicator(std::move(group), rank), handle_(std::move(handle)) {
  handle_->watch->name(handle_->key, name());
}

MpiComm::~MpiComm() {
  if (handle_ && handle_->comm != MPI_COMM_NULL && !finalized()) MPI_Comm_free(&handle_->comm);
}

std::unique_ptr<MpiComm> MpiComm::world() {
  auto handle = std::make_unique<Handle>();
  const std::optional<double> timeout = detail::collective_timeout_from_env();
  CARTO_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &handle->comm));
  CARTO_MPI_CHECK(MPI_Comm_set_errhandler(handle->comm, MPI_ERRORS_RETURN));
  handle->watch = std::make_shared<detail::Watch>(handle->comm, timeout);
  handle->key = "world";
  int rank = 0;
  int size = 0;
  CARTO_MPI_CHECK(MPI_Comm_rank(handle->comm, &rank));
  CARTO_MPI_CHECK(MPI_Comm_size(handle->comm, &size));
  CommGroup group{.name = "world", .world_ranks = {}};
  for (int r = 0; r < size; ++r) group.world_ranks.push_back(r);
  return std::unique_ptr<MpiComm>(new MpiComm(std::move(group), rank, std::move(handle)));
}

void MpiComm::finish() { handle_->watch->leave(); }

std::uint64_t MpiComm::issue() { return handle_->watch->issue(handle_->key); }

void MpiComm::wait(void* request, std::uint64_t number, CollectiveKind kind) {
  handle_->watch->wait(*static_cast<MPI_Request*>(request), *this, handle_->key, number, kind);
}

// bf16: every rank sends chunk j of its buffer to rank j (MPI_Ialltoallv), rank j reduces what it
// received in rank order in fp32 and rounds once, and the reduced chunks are all-gathered
// (MPI_Iallgatherv, in place). Each element is reduced by one rank, so every rank holds its bits.
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
  const std::uint64_t number = issue();
  MPI_Request request = MPI_REQUEST_NULL;
  CARTO_MPI_CHECK(MPI_Ialltoallv(send.data(), counts.data(), displs.data(), MPI_BYTE,
                                 gathered.data(), recv_counts.data(), recv_displs.data(), MPI_BYTE,
                                 handle_->comm, &request));
  wait(&request, number, CollectiveKind::all_reduce);
  carto::detail::reduce_in_rank_order(recv.data() + displs[static_cast<std::size_t>(me)], sources,
                                      0, mine_u / sizeof(Bf16), DType::bf16, op);
  CARTO_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv.data(), counts.data(),
                                  displs.data(), MPI_BYTE, handle_->comm, &request));
  wait(&request, number, CollectiveKind::all_reduce);
  return {};
}

// bf16: chunk j of every rank's send goes to rank j (MPI_Ialltoall), which reduces them in rank
// order in fp32 and rounds once into recv.
Work MpiComm::bf16_reduce_scatter(std::span<const std::byte> send, std::span<std::byte> recv,
                                  ReduceOp op) {
  const std::size_t chunk = recv.size();
  const int bytes = mpi_count(chunk, "reduce_scatter bytes", *this);
  mpi_count(send.size(), "reduce_scatter bytes", *this);
  std::vector<std::byte> gathered(send.size());
  const std::uint64_t number = issue();
  MPI_Request request = MPI_REQUEST_NULL;
  CARTO_MPI_CHECK(MPI_Ialltoall(send.data(), bytes, MPI_BYTE, gathered.data(), bytes, MPI_BYTE,
                                handle_->comm, &request));
  wait(&request, number, CollectiveKind::reduce_scatter);
  std::vector<const std::byte*> sources;
  for (int r = 0; r < size(); ++r)
    sources.push_back(gathered.data() + chunk * static_cast<std::size_t>(r));
  carto::detail::reduce_in_rank_order(recv.data(), sources, 0, chunk / sizeof(Bf16), DType::bf16,
                                      op);
  return {};
}

Work MpiComm::do_all_reduce(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                            ReduceOp op, CommStream) {
  if (dtype == DType::bf16) return bf16_all_reduce(send, recv, op);
  const int count = mpi_count(recv.size() / sizeof(float), "all_reduce", *this);
  const void* src = send.data() == recv.data() ? MPI_IN_PLACE : send.data();
  const MPI_Datatype type = reduce_type(dtype);
  const std::uint64_t number = issue();
  MPI_Request request = MPI_REQUEST_NULL;
  CARTO_MPI_CHECK(
      MPI_Iallreduce(src, recv.data(), count, type, mpi_op(op), handle_->comm, &request));
  wait(&request, number, CollectiveKind::all_reduce);
  return {};
}

Work MpiComm::do_all_gather(std::span<const std::byte> send, std::span<std::byte> recv, DType,
                            CommStream) {
  const int bytes = mpi_count(send.size(), "all_gather bytes", *this);
  mpi_count(recv.size(), "all_gather bytes", *this);
  const bool in_place =
      send.data() == recv.data() + static_cast<std::size_t>(rank()) * send.size() && !send.empty();
  const std::uint64_t number = issue();
  MPI_Request request = MPI_REQUEST_NULL;
  if (in_place) {
    CARTO_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv.data(), bytes, MPI_BYTE,
                                   handle_->comm, &request));
  } else {
    CARTO_MPI_CHECK(MPI_Iallgather(send.data(), bytes, MPI_BYTE, recv.data(), bytes, MPI_BYTE,
                                   handle_->comm, &request));
  }
  wait(&request, number, CollectiveKind::all_gather);
  return {};
}

Work MpiComm::do_reduce_scatter(std::span<const std::byte> send, std::span<std::byte> recv,
                                DType dtype, ReduceOp op, CommStream) {
  if (dtype == DType::bf16) return bf16_reduce_scatter(send, recv, op);
  const int count = mpi_count(recv.size() / sizeof(float), "reduce_scatter", *this);
  mpi_count(send.size() / sizeof(float), "reduce_scatter", *this);
  const MPI_Datatype type = reduce_type(dtype);
  const bool in_place =
      recv.data() == send.data() + static_cast<std::size_t>(rank()) * recv.size() && !recv.empty();
  const std::uint64_t number = issue();
  MPI_Request request = MPI_REQUEST_NULL;
  if (in_place) {
    // MPI_IN_PLACE takes the input from the whole buffer and leaves the result at its start; move
    // it to chunk rank() (NCCL's in-place layout). send aliases the writable recv buffer.
    auto* whole = const_cast<std::byte*>(send.data());
    CARTO_MPI_CHECK(MPI_Ireduce_scatter_block(MPI_IN_PLACE, whole, count, type, mpi_op(op),
                                              handle_->comm, &request));
    wait(&request, number, CollectiveKind::reduce_scatter);
    if (rank() != 0) std::memmove(recv.data(), whole, recv.size());
  } else {
    CARTO_MPI_CHECK(MPI_Ireduce_scatter_block(send.data(), recv.data(), count, type, mpi_op(op),
                                              handle_->comm, &request));
    wait(&request, number, CollectiveKind::reduce_scatter);
  }
  return {};
}

Work MpiComm::do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv, DType,
                            CommStream) {
  const int chunk =
      mpi_count(recv.size() / static_cast<std::size_t>(size()), "all_to_all bytes", *this);
  mpi_count(recv.size(), "all_to_all bytes", *this);
  const std::uint64_t number = issue();
  MPI_Request request = MPI_REQUEST_NULL;
  if (send.data() == recv.data() && !recv.empty()) {
    CARTO_MPI_CHECK(MPI_Ialltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv.data(), chunk, MPI_BYTE,
                                  handle_->comm, &request));
  } else {
    CARTO_MPI_CHECK(MPI_Ialltoall(send.data(), chunk, MPI_BYTE, recv.data(), chunk, MPI_BYTE,
                                  handle_->comm, &request));
  }
  wait(&request, number, CollectiveKind::all_to_all);
  return {};
}

Work MpiComm::do_broadcast(std::span<const std::byte> send, std::span<std::byte> recv, DType,
                           int root, CommStream) {
  const int bytes = mpi_count(recv.size(), "broadcast bytes", *this);
  if (rank() == root && send.data() != recv.data() && !recv.empty()) {
    std::memcpy(recv.data(), send.data(), recv.size());
  }
  const std::uint64_t number = issue();
  MPI_Request request = MPI_REQUEST_NULL;
  CARTO_MPI_CHECK(MPI_Ibcast(recv.data(), bytes, MPI_BYTE, root, handle_->comm, &request));
  wait(&request, number, CollectiveKind::broadcast);
  return {};
}

Work MpiComm::do_barrier(CommStream) {
  const std::uint64_t number = issue();
  MPI_Request request = MPI_REQUEST_NULL;
  CARTO_MPI_CHECK(MPI_Ibarrier(handle_->comm, &request));
  wait(&request, number, CollectiveKind::barrier);
  return {};
}

// Every member first gathers every (color, key) through a watched collective, so a member that
// left or failed is noticed there; then all of them are in the split and MPI_Comm_split (which
// has no non-blocking form) completes. The new group's world ranks follow from the gathered pairs.
std::unique_ptr<Communicator> MpiComm::do_split(int color, int key, std::string name) {
  const int n = size();
  std::vector<int> pairs(2 * static_cast<std::size_t>(n));
  const int mine[2] = {color, key};
  const std::uint64_t number = issue();
  MPI_Request request = MPI_REQUEST_NULL;
  CARTO_MPI_CHECK(
      MPI_Iallgather(mine, 2, MPI_INT, pairs.data(), 2, MPI_INT, handle_->comm, &request));
  wait(&request, number, CollectiveKind::split);
  std::vector<int> colors, keys;
  for (int r = 0; r < n; ++r) {
    colors.push_back(pairs[2 * static_cast<std::size_t>(r)]);
    keys.push_back(pairs[2 * static_cast<std::size_t>(r) + 1]);
  }
  const std::vector<int> members = carto::detail::split_members(colors, keys, rank());

  auto handle = std::make_unique<Handle>();
  CARTO_MPI_CHECK(MPI_Comm_split(handle_->comm, color, key, &handle->comm));
  CARTO_MPI_CHECK(MPI_Comm_set_errhandler(handle->comm, MPI_ERRORS_RETURN));
  handle->watch = handle_->watch;
  handle->key = carto::detail::concat(handle_->key, "/", number, ":", color);
  int new_rank = 0;
  CARTO_MPI_CHECK(MPI_Comm_rank(handle->comm, &new_rank));
  CommGroup group{.name = std::move(name), .world_ranks = {}};
  int at = -1;
  for (const int parent_rank : members) {
    if (parent_rank == rank()) at = static_cast<int>(group.world_ranks.size());
    group.world_ranks.push_back(this->group().world_ranks[static_cast<std::size_t>(parent_rank)]);
  }
  CARTO_CHECK(at == new_rank, "carto: MPI_Comm_split on ", describe(), " gave rank ", new_rank,
              " where (color, key) order gives ", at);
  return std::unique_ptr<MpiComm>(new MpiComm(std::move(group), new_rank, std::move(handle)));
}

void abort_job(const Communicator& world, std::string_view message) {
  print_failure(world.world_rank(), world.size(), message);
  // Tell the others first, unless this failure is a consequence of another rank's: they then
  // fail their collectives naming this rank, and have a moment to say so before the abort.
  const auto* mpi = dynamic_cast<const MpiComm*>(&world);
  if (mpi != nullptr && mpi->handle_ && !mpi->handle_->watch->consequence()) {
    mpi->handle_->watch->announce_failure(message);
    mpi->handle_->watch->linger(kAbortGraceS);
  }
  abort_mpi();
}

int run(int& argc, char**& argv, const std::function<void(Communicator& world)>& body) {
  Environment environment(argc, argv);
  std::unique_ptr<MpiComm> world;
  try {
    world = MpiComm::world();
  } catch (const std::exception& e) {
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    print_failure(rank, size, e.what());
    abort_mpi();
  }
  try {
    body(*world);
    world->finish();
  } catch (const std::exception& e) {
    abort_job(*world, e.what());
  } catch (...) {
    abort_job(*world, "a non-standard exception");
  }
  world.reset();
  return 0;
}

}  // namespace carto::mpi
