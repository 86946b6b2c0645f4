// carto/runtime/communicator.hpp — the collective interface of one group of ranks, and the
// communicators of every mesh axis.
//
// Design note. A Communicator is one group of ranks (rank 0..size-1) with its name and the world
// ranks of its members; no global state holds world size or rank. Collectives follow the
// nccl-tests definitions, with `count` the elements of the *receive* buffer on every rank unless
// said otherwise:
//   all_reduce      recv = op over ranks of send                       (send, recv: N elements)
//   all_gather      recv = concat over ranks r of send_r               (send N, recv size·N)
//   reduce_scatter  recv_r = chunk r of op over ranks of send          (send size·N, recv N)
//   all_to_all      recv_j[chunk i] = send_i[chunk j]                  (send, recv: size·N)
//   broadcast       recv = send of `root`                              (N; send ignored off root)
// In place follows NCCL's aliasing rules: all_reduce, all_to_all and broadcast with send == recv;
// all_gather with send == recv + rank·N; reduce_scatter with recv == send + rank·N. Any other
// overlap of send and recv is an error. Buffers are byte spans plus a DType. Reductions take fp32
// and bf16 (the others move bytes and take any dtype). A bf16 reduction reduces each element in
// fp32 in rank order 0..size-1 and rounds the result to bf16 once (to nearest even, bf16.hpp), so
// it is as exact as the fp32 reduction of the same values followed by one store, and every rank
// holds the same bits (reduce_in_rank_order below; each communicator says where it runs it).
//
// Every collective is issued on a Stream and returns a Work handle; wait() blocks until the result
// is in recv and rethrows the collective's failure. The CPU communicators complete before the call
// returns; the CUDA/NCCL one will enqueue on the stream. Every rank of the group must issue the
// same collectives in the same order, with the same kind, dtype, op, root and sizes.
//
// Failure: a rank that fails makes the collectives of the others fail with a carto::Error naming
// that rank and its message (thread ranks), or ends the job (MPI ranks); nothing waits forever.
//
// MeshComms (below) splits a world of N ranks, one per device of an N-device mesh (world rank =
// device number, row-major), into the group of every axis and every ordered list of distinct axes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "carto/error.hpp"
#include "carto/runtime/bf16.hpp"
#include "carto/spec/dtype.hpp"
#include "carto/spec/mesh.hpp"
#include "carto/spec/sharding.hpp"

namespace carto {

enum class ReduceOp : std::uint8_t { sum, max };

constexpr std::string_view to_string_view(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
  }
  return "?";
}

enum class CollectiveKind : std::uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  all_to_all,
  broadcast,
  barrier,
  split
};

constexpr std::string_view to_string_view(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_to_all: return "all_to_all";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::barrier: return "barrier";
    case CollectiveKind::split: return "split";
  }
  return "?";
}

// The queue a collective is issued on. CPU communicators ignore it (their collectives complete
// before the call returns); the CUDA/NCCL communicator will carry a cudaStream_t in `native`.
struct CommStream {
  void* native = nullptr;
};

// The state behind an asynchronous collective (implemented by asynchronous communicators).
class WorkState {
 public:
  virtual ~WorkState() = default;
  virtual void wait() = 0;  // blocks until complete; throws carto::Error when it failed
  [[nodiscard]] virtual bool completed() const = 0;
};

// Handle of one issued collective. A default-constructed Work is already complete.
class [[nodiscard]] Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<WorkState> state) : state_(std::move(state)) {}
  void wait() {
    if (state_) state_->wait();
  }
  [[nodiscard]] bool completed() const { return !state_ || state_->completed(); }

 private:
  std::shared_ptr<WorkState> state_;
};

// The element type of a typed buffer: float -> fp32, Bf16 -> bf16.
template <class T>
struct comm_dtype;
template <>
struct comm_dtype<float> {
  static constexpr DType value = DType::fp32;
};
template <>
struct comm_dtype<Bf16> {
  static constexpr DType value = DType::bf16;
};
template <class T>
concept CommElement = requires {
  comm_dtype<T>::value;
};

// What a group is: a name ("world", "tp", "dp,tp") and the world rank of each member, in group
// rank order.
struct CommGroup {
  std::string name;
  std::vector<int> world_ranks;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return static_cast<int>(group_.world_ranks.size()); }
  [[nodiscard]] const CommGroup& group() const { return group_; }
  [[nodiscard]] const std::string& name() const { return group_.name; }
  [[nodiscard]] int world_rank() const {
    return group_.world_ranks[static_cast<std::size_t>(rank_)];
  }
  // "rank 1 of 4 in group 'tp' (world rank 5)", for messages.
  [[nodiscard]] std::string describe() const {
    return detail::concat("rank ", rank_, " of ", size(), " in group '", group_.name,
                          "' (world rank ", world_rank(), ")");
  }

  // ---- byte-level collectives (see the design note for sizes and aliasing) ----
  Work all_reduce(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                  ReduceOp op, CommStream stream = {}) {
    check_reducible(CollectiveKind::all_reduce, dtype);
    check_sizes(CollectiveKind::all_reduce, send.size() == recv.size(), dtype, recv.size(),
                "send and recv have the same size");
    check_elements(CollectiveKind::all_reduce, dtype, recv.size());
    check_alias(CollectiveKind::all_reduce, send, recv, recv.data());
    return do_all_reduce(send, recv, dtype, op, stream);
  }
  Work all_gather(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                  CommStream stream = {}) {
    check_sizes(CollectiveKind::all_gather, recv.size() == send.size() * size_u(), dtype,
                recv.size(), "recv holds size() times send");
    check_elements(CollectiveKind::all_gather, dtype, send.size());
    check_alias(CollectiveKind::all_gather, send, recv, recv.data() + rank_u() * send.size());
    return do_all_gather(send, recv, dtype, stream);
  }
  Work reduce_scatter(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                      ReduceOp op, CommStream stream = {}) {
    check_reducible(CollectiveKind::reduce_scatter, dtype);
    check_sizes(CollectiveKind::reduce_scatter, send.size() == recv.size() * size_u(), dtype,
                send.size(), "send holds size() times recv");
    check_elements(CollectiveKind::reduce_scatter, dtype, recv.size());
    check_alias(CollectiveKind::reduce_scatter, send, recv, send.data() + rank_u() * recv.size());
    return do_reduce_scatter(send, recv, dtype, op, stream);
  }
  Work all_to_all(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                  CommStream stream = {}) {
    check_sizes(CollectiveKind::all_to_all,
                send.size() == recv.size() && recv.size() % (size_u() * elem(dtype)) == 0, dtype,
                recv.size(), "send and recv have the same size, size() chunks of whole elements");
    check_alias(CollectiveKind::all_to_all, send, recv, recv.data());
    return do_all_to_all(send, recv, dtype, stream);
  }
  // Off the root `send` is ignored (it may be empty).
  Work broadcast(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype, int root,
                 CommStream stream = {}) {
    if (root < 0 || root >= size()) {
      detail::fail("carto: broadcast from root ", root, " on ", describe(), "; roots are 0..",
                   size() - 1);
    }
    if (root == rank_) {
      check_sizes(CollectiveKind::broadcast, send.size() == recv.size(), dtype, recv.size(),
                  "the root's send and recv have the same size");
      check_alias(CollectiveKind::broadcast, send, recv, recv.data());
    }
    check_elements(CollectiveKind::broadcast, dtype, recv.size());
    return do_broadcast(send, recv, dtype, root, stream);
  }
  Work barrier(CommStream stream = {}) { return do_barrier(stream); }

  // Collective over this group, MPI_Comm_split style: ranks passing the same color form one new
  // group, ordered by (key, rank in this group). Colors are >= 0.
  [[nodiscard]] std::unique_ptr<Communicator> split(int color, int key, std::string name) {
    if (color < 0) detail::fail("carto: split on ", describe(), " needs a color >= 0, got ", color);
    return do_split(color, key, std::move(name));
  }

  // ---- typed forms ----
  template <CommElement T>
  Work all_reduce(std::span<const T> send, std::span<T> recv, ReduceOp op, CommStream s = {}) {
    return all_reduce(std::as_bytes(send), std::as_writable_bytes(recv), comm_dtype<T>::value, op,
                      s);
  }
  template <CommElement T>
  Work all_reduce(std::span<T> buffer, ReduceOp op, CommStream s = {}) {
    return all_reduce(std::span<const T>(buffer), buffer, op, s);
  }
  template <CommElement T>
  Work all_gather(std::span<const T> send, std::span<T> recv, CommStream s = {}) {
    return all_gather(std::as_bytes(send), std::as_writable_bytes(recv), comm_dtype<T>::value, s);
  }
  // In place: `buffer` holds size() chunks; this rank's chunk is already at chunk rank().
  template <CommElement T>
  Work all_gather_in_place(std::span<T> buffer, CommStream s = {}) {
    const std::size_t n = chunk_of(CollectiveKind::all_gather, buffer.size());
    return all_gather(std::span<const T>(buffer.subspan(rank_u() * n, n)), buffer, s);
  }
  template <CommElement T>
  Work reduce_scatter(std::span<const T> send, std::span<T> recv, ReduceOp op, CommStream s = {}) {
    return reduce_scatter(std::as_bytes(send), std::as_writable_bytes(recv), comm_dtype<T>::value,
                          op, s);
  }
  // In place: `buffer` holds size() chunks; the result lands in chunk rank() (the others keep
  // unspecified values).
  template <CommElement T>
  Work reduce_scatter_in_place(std::span<T> buffer, ReduceOp op, CommStream s = {}) {
    const std::size_t n = chunk_of(CollectiveKind::reduce_scatter, buffer.size());
    return reduce_scatter(std::span<const T>(buffer), buffer.subspan(rank_u() * n, n), op, s);
  }
  template <CommElement T>
  Work all_to_all(std::span<const T> send, std::span<T> recv, CommStream s = {}) {
    return all_to_all(std::as_bytes(send), std::as_writable_bytes(recv), comm_dtype<T>::value, s);
  }
  template <CommElement T>
  Work all_to_all(std::span<T> buffer, CommStream s = {}) {
    return all_to_all(std::span<const T>(buffer), buffer, s);
  }
  template <CommElement T>
  Work broadcast(std::span<const T> send, std::span<T> recv, int root, CommStream s = {}) {
    return broadcast(std::as_bytes(send), std::as_writable_bytes(recv), comm_dtype<T>::value, root,
                     s);
  }
  template <CommElement T>
  Work broadcast(std::span<T> buffer, int root, CommStream s = {}) {
    return broadcast(std::span<const T>(buffer), buffer, root, s);
  }

 protected:
  Communicator(CommGroup group, int rank) : group_(std::move(group)), rank_(rank) {
    if (group_.world_ranks.empty() || rank_ < 0 || rank_ >= size()) {
      detail::fail("carto: communicator '", group_.name, "' of ", group_.world_ranks.size(),
                   " ranks cannot have rank ", rank_);
    }
  }

  virtual Work do_all_reduce(std::span<const std::byte> send, std::span<std::byte> recv,
                             DType dtype, ReduceOp op, CommStream stream) = 0;
  virtual Work do_all_gather(std::span<const std::byte> send, std::span<std::byte> recv,
                             DType dtype, CommStream stream) = 0;
  virtual Work do_reduce_scatter(std::span<const std::byte> send, std::span<std::byte> recv,
                                 DType dtype, ReduceOp op, CommStream stream) = 0;
  virtual Work do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv,
                             DType dtype, CommStream stream) = 0;
  virtual Work do_broadcast(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                            int root, CommStream stream) = 0;
  virtual Work do_barrier(CommStream stream) = 0;
  virtual std::unique_ptr<Communicator> do_split(int color, int key, std::string name) = 0;

 private:
  [[nodiscard]] std::size_t size_u() const { return static_cast<std::size_t>(size()); }
  [[nodiscard]] std::size_t rank_u() const { return static_cast<std::size_t>(rank_); }
  static std::size_t elem(DType dtype) { return static_cast<std::size_t>(size_bytes(dtype)); }

  void check_reducible(CollectiveKind kind, DType dtype) const {
    if (dtype != DType::fp32 && dtype != DType::bf16) {
      detail::fail("carto: ", to_string_view(kind), " on ", describe(),
                   " reduces fp32 and bf16; got ", dtype);
    }
  }
  void check_sizes(CollectiveKind kind, bool ok, DType dtype, std::size_t bytes,
                   std::string_view rule) const {
    if (!ok) {
      detail::fail("carto: ", to_string_view(kind), " of ", bytes, " bytes of ", dtype, " on ",
                   describe(), ": sizes do not match (", rule, ")");
    }
  }
  void check_elements(CollectiveKind kind, DType dtype, std::size_t bytes) const {
    if (bytes % elem(dtype) != 0) {
      detail::fail("carto: ", to_string_view(kind), " on ", describe(), ": ", bytes,
                   " bytes is not a whole number of ", dtype, " elements");
    }
  }
  // `in_place_send` is where send must start for the operation to count as in place.
  void check_alias(CollectiveKind kind, std::span<const std::byte> send,
                   std::span<const std::byte> recv, const std::byte* in_place_send) const {
    if (send.empty() || recv.empty()) return;
    const auto* s0 = send.data();
    const auto* s1 = s0 + send.size();
    const auto* r0 = recv.data();
    const auto* r1 = r0 + recv.size();
    const bool overlap = std::less<>{}(s0, r1) && std::less<>{}(r0, s1);
    if (!overlap) return;
    const bool in_place = kind == CollectiveKind::reduce_scatter ? recv.data() == in_place_send
                                                                 : send.data() == in_place_send;
    if (!in_place) {
      detail::fail("carto: ", to_string_view(kind), " on ", describe(),
                   ": send and recv overlap without being in place (see NCCL's in-place rules in "
                   "carto/runtime/communicator.hpp)");
    }
  }
  [[nodiscard]] std::size_t chunk_of(CollectiveKind kind, std::size_t elements) const {
    if (elements % size_u() != 0) {
      detail::fail("carto: in-place ", to_string_view(kind), " on ", describe(), ": ", elements,
                   " elements do not split into ", size(), " equal chunks");
    }
    return elements / size_u();
  }

  CommGroup group_;
  int rank_ = 0;
};

namespace detail {

// One element of a reduction's source, widened to fp32 (memcpy: the bytes need no alignment).
inline float comm_load(const float*, const std::byte* p) {
  float v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline float comm_load(const Bf16*, const std::byte* p) {
  Bf16 v;
  std::memcpy(&v, p, sizeof v);
  return to_float(v);
}
inline void comm_store(const float*, std::byte* p, float v) { std::memcpy(p, &v, sizeof v); }
inline void comm_store(const Bf16*, std::byte* p, float v) {
  const Bf16 b = to_bf16(v);
  std::memcpy(p, &b, sizeof b);
}

template <class T>
void reduce_typed(std::byte* out, std::span<const std::byte* const> sources, std::size_t offset,
                  std::size_t count, ReduceOp op) {
  constexpr std::size_t kBlock = 1024;
  constexpr const T* tag = nullptr;
  float acc[kBlock];
  for (std::size_t b = 0; b < count; b += kBlock) {
    const std::size_t n = std::min(kBlock, count - b);
    const std::size_t at = (offset + b) * sizeof(T);
    for (std::size_t i = 0; i < n; ++i) acc[i] = comm_load(tag, sources[0] + at + i * sizeof(T));
    for (std::size_t k = 1; k < sources.size(); ++k) {
      const std::byte* in = sources[k] + at;
      if (op == ReduceOp::sum) {
        for (std::size_t i = 0; i < n; ++i) acc[i] += comm_load(tag, in + i * sizeof(T));
      } else {
        for (std::size_t i = 0; i < n; ++i) {
          const float v = comm_load(tag, in + i * sizeof(T));
          acc[i] = acc[i] < v ? v : acc[i];
        }
      }
    }
    for (std::size_t i = 0; i < n; ++i) comm_store(tag, out + (b + i) * sizeof(T), acc[i]);
  }
}

// out[0, count) = op over `sources` in the order given (rank order) of elements [offset, offset +
// count) of each source, of `dtype` (fp32 or bf16). Each element is reduced in fp32 (bf16 widened
// exactly) and stored once, rounded to nearest even for bf16. `out` may alias a source range: each
// block is read from every source before it is written.
inline void reduce_in_rank_order(std::byte* out, std::span<const std::byte* const> sources,
                                 std::size_t offset, std::size_t count, DType dtype, ReduceOp op) {
  if (dtype == DType::bf16) {
    reduce_typed<Bf16>(out, sources, offset, count, op);
  } else {
    CARTO_CHECK(dtype == DType::fp32, "reduce_in_rank_order: reductions take fp32 and bf16; got ",
                dtype);
    reduce_typed<float>(out, sources, offset, count, op);
  }
}

// The members of this rank's new group in a split: the parent ranks with this rank's color,
// ordered by (key, parent rank). `colors` and `keys` are indexed by parent rank.
inline std::vector<int> split_members(std::span<const int> colors, std::span<const int> keys,
                                      int parent_rank) {
  const int color = colors[static_cast<std::size_t>(parent_rank)];
  std::vector<int> members;
  for (std::size_t r = 0; r < colors.size(); ++r) {
    if (colors[r] == color) members.push_back(static_cast<int>(r));
  }
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return keys[static_cast<std::size_t>(a)] < keys[static_cast<std::size_t>(b)];
  });
  return members;
}

}  // namespace detail

// The communicators of a device mesh. Constructing it is collective over `world`: every rank
// constructs one with the same mesh. World rank r is mesh device r. The group of an ordered list
// of distinct axes holds the ranks whose coordinates differ only on those axes, ordered
// row-major over them in the listed order (the first listed varies slowest): the group of
// {"tp"} is ordered by the tp coordinate, the group of {"dp","tp"} by (dp, tp), that of
// {"tp","dp"} by (tp, dp), matching a dim split S(dp,tp) or S(tp,dp).
class MeshComms {
 public:
  MeshComms(Communicator& world, const DeviceMesh& mesh) : world_(&world), mesh_(mesh) {
    if (mesh.num_devices() != world.size()) {
      detail::fail("carto: mesh ", mesh, " has ", mesh.num_devices(), " devices but the world '",
                   world.name(), "' has ", world.size(), " ranks; they must be equal");
    }
    coord_ = mesh.coord(world.rank());
    const std::size_t k = mesh.num_axes();
    // Every ordered list of distinct axes, in one order every rank enumerates alike.
    std::vector<std::vector<std::size_t>> lists;
    std::vector<std::size_t> current;
    auto extend = [&](auto& self) -> void {
      for (std::size_t a = 0; a < k; ++a) {
        if (std::find(current.begin(), current.end(), a) != current.end()) continue;
        current.push_back(a);
        lists.push_back(current);
        self(self);
        current.pop_back();
      }
    };
    extend(extend);
    std::stable_sort(lists.begin(), lists.end(),
                     [](const auto& a, const auto& b) { return a.size() < b.size(); });
    for (const auto& axes : lists) {
      MeshCoord base = coord_;
      std::int64_t key = 0;
      std::string name;
      for (std::size_t a : axes) {
        base[a] = 0;
        key = key * mesh.axis(a).size + coord_[a];
        if (!name.empty()) name += ',';
        name += mesh.axis(a).name.view();
      }
      auto comm = world.split(static_cast<int>(mesh.device(base)), static_cast<int>(key), name);
      if (comm->rank() != key) {
        detail::fail("carto: the '", name, "' group of mesh ", mesh, " gave world rank ",
                     world.rank(), " group rank ", comm->rank(), "; expected ", key);
      }
      groups_.push_back({axes, std::move(comm)});
    }
  }

  [[nodiscard]] const DeviceMesh& mesh() const { return mesh_; }
  [[nodiscard]] Communicator& world() const { return *world_; }
  // This rank's device coordinate.
  [[nodiscard]] const MeshCoord& coord() const { return coord_; }
  [[nodiscard]] Communicator& axis(std::size_t index) const { return find({index}); }
  [[nodiscard]] Communicator& axis(std::string_view name) const {
    return find({mesh_.index_of(AxisName(name))});
  }
  // The group of several axes in the listed order, e.g. axes({"dp", "tp"}).
  [[nodiscard]] Communicator& axes(std::initializer_list<std::string_view> names) const {
    std::vector<std::size_t> list;
    for (std::string_view n : names) list.push_back(mesh_.index_of(AxisName(n)));
    return find(list);
  }
  // The same for a list of axis names as a sharding spec holds them (a dim's axes, its Partial
  // axes); the list must not be empty.
  [[nodiscard]] Communicator& axes(const AxisList& names) const {
    std::vector<std::size_t> list;
    for (const AxisName& n : names) list.push_back(mesh_.index_of(n));
    return find(list);
  }

 private:
  struct Entry {
    std::vector<std::size_t> axes;
    std::unique_ptr<Communicator> comm;
  };
  [[nodiscard]] Communicator& find(const std::vector<std::size_t>& axes) const {
    for (const Entry& e : groups_) {
      if (e.axes == axes) return *e.comm;
    }
    detail::fail("carto: mesh ", mesh_,
                 " has no group for that list of axes (each axis at most "
                 "once, at least one)");
  }

  Communicator* world_;
  DeviceMesh mesh_;
  MeshCoord coord_;
  std::vector<Entry> groups_;
};

}  // namespace carto
