// execute_reshard on thread ranks: for meshes (4), (2x2), (2x4) and (2x2x2) and tensors of rank
// 1-3, every ordered pair of specs (Partial included; a deterministic subsample where a tensor has
// more than kMaxPairs) moves the data exactly, each collective moves the step's bytes, and the peak
// memory beyond the source is the plan's extra_memory_bytes. Also: reshard A -> B -> A is the
// identity through reshard_tensor, and misuse throws carto::Error naming what was expected.
//
// Inputs are integers (1000 + 3·global index, and Partial summands that are integers too), so every
// sum is exact in fp32 whatever its order and the comparisons are exact.
#include <algorithm>
#include <array>
#include <carto/cost/hardware.hpp>
#include <carto/runtime/reshard_exec.hpp>
#include <carto/runtime/thread_comm.hpp>
#include <carto/spec/enumerate.hpp>
#include <catch2/catch.hpp>
#include <cpu/cpu_backend.hpp>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace carto;

namespace {

constexpr std::size_t kMaxPairs = 1500;  // per (mesh, tensor); beyond it, a deterministic subsample

// ---- inputs with closed-form values
// --------------------------------------------------------------

float global_value(std::int64_t flat) { return static_cast<float>(1000 + 3 * flat); }

// Summand p of g of the value at `flat`: distinct non-zero integers adding up to the value (the
// first g-1 are at most 7·7 + 2 = 51, so the last stays above 790).
float summand(std::int64_t flat, std::int64_t p, std::int64_t g) {
  auto small = [&](std::int64_t q) { return static_cast<float>((q + 1) * 7 + flat % 3); };
  if (p + 1 < g) return small(p);
  float rest = global_value(flat);
  for (std::int64_t q = 0; q + 1 < g; ++q) rest -= small(q);
  return rest;
}

// The global flat index of each local element of `device` under `spec`, in local row-major order.
std::vector<std::int64_t> global_indices(const TensorShape& global, const ShardingSpec& spec,
                                         const DeviceMesh& mesh, std::int64_t device) {
  const Slice s = device_slice(global, spec, mesh, device);
  const std::size_t r = global.rank();
  std::int64_t count = 1;
  for (std::int64_t e : s.extent) count *= e;
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    std::int64_t rest = i, flat = 0, stride = 1;
    for (std::size_t d = r; d-- > 0;) {
      flat += (s.offset[d] + rest % s.extent[d]) * stride;
      rest /= s.extent[d];
      stride *= global.dims()[d].extent;
    }
    out.push_back(flat);
  }
  return out;
}

// Position of `device` in the Partial group of `spec` (row-major over the Partial axes in their
// listed order) and the group's size.
std::pair<std::int64_t, std::int64_t> partial_position(const ShardingSpec& spec,
                                                       const DeviceMesh& mesh,
                                                       std::int64_t device) {
  const MeshCoord c = mesh.coord(device);
  std::int64_t p = 0, g = 1;
  for (const AxisName& a : spec.partial()) {
    const std::size_t i = mesh.index_of(a);
    p = p * mesh.axis(i).size + c[i];
    g *= mesh.axis(i).size;
  }
  return {p, g};
}

// What `device` holds under `spec`: its slice, or its summand of it when `spec` is Partial.
std::vector<float> local_values(const TensorShape& global, const ShardingSpec& spec,
                                const DeviceMesh& mesh, std::int64_t device) {
  const auto [p, g] = partial_position(spec, mesh, device);
  std::vector<float> out;
  for (std::int64_t flat : global_indices(global, spec, mesh, device)) {
    out.push_back(summand(flat, p, g));
  }
  return out;
}

// The devices whose values add up to `device`'s slice under `spec`: those differing from it only
// on the Partial axes (itself alone when nothing is Partial).
std::vector<std::int64_t> partial_group(const ShardingSpec& spec, const DeviceMesh& mesh,
                                        std::int64_t device) {
  const MeshCoord mine = mesh.coord(device);
  std::vector<std::int64_t> group;
  for (std::int64_t d = 0; d < mesh.num_devices(); ++d) {
    const MeshCoord c = mesh.coord(d);
    bool same = true;
    for (std::size_t a = 0; a < mesh.num_axes(); ++a) {
      bool partial = false;
      for (const AxisName& p : spec.partial()) partial = partial || p == mesh.axis(a).name;
      same = same && (partial || c[a] == mine[a]);
    }
    if (same) group.push_back(d);
  }
  return group;
}

Buffer upload(Backend& backend, const TensorShape& shape, const std::vector<float>& values) {
  Buffer b = backend.allocate(shape, DType::fp32, MemoryCategory::activations);
  backend.copy_from_host(values.data(), b.view(shape));
  return b;
}

std::vector<float> download(Backend& backend, const Buffer& b, const TensorShape& shape) {
  std::vector<float> out(static_cast<std::size_t>(shape.numel()));
  backend.copy_to_host(b.view(shape), out.data());
  return out;
}

// ---- observation: bytes per collective, memory
// ---------------------------------------------------

struct Moved {
  CollectiveKind kind;
  std::string group;
  std::int64_t bytes;  // S as nccl-tests counts it: the gathered output, the scattered input, or
                       // the buffer of an all-reduce or all-to-all
};

// Forwards every collective to `inner` and logs what it moves; its splits log to the same list.
class CountingComm final : public Communicator {
 public:
  CountingComm(Communicator& inner, std::vector<Moved>& log)
      : Communicator(inner.group(), inner.rank()), inner_(&inner), log_(&log) {}
  CountingComm(std::unique_ptr<Communicator> owned, std::vector<Moved>& log)
      : CountingComm(*owned, log) {
    owned_ = std::move(owned);
  }

 protected:
  Work do_all_reduce(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                     ReduceOp op, CommStream stream) override {
    record(CollectiveKind::all_reduce, recv.size());
    return inner_->all_reduce(send, recv, dtype, op, stream);
  }
  Work do_all_gather(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                     CommStream stream) override {
    record(CollectiveKind::all_gather, recv.size());
    return inner_->all_gather(send, recv, dtype, stream);
  }
  Work do_reduce_scatter(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                         ReduceOp op, CommStream stream) override {
    record(CollectiveKind::reduce_scatter, send.size());
    return inner_->reduce_scatter(send, recv, dtype, op, stream);
  }
  Work do_all_to_all(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                     CommStream stream) override {
    record(CollectiveKind::all_to_all, send.size());
    return inner_->all_to_all(send, recv, dtype, stream);
  }
  Work do_broadcast(std::span<const std::byte> send, std::span<std::byte> recv, DType dtype,
                    int root, CommStream stream) override {
    record(CollectiveKind::broadcast, recv.size());
    return inner_->broadcast(send, recv, dtype, root, stream);
  }
  Work do_barrier(CommStream stream) override { return inner_->barrier(stream); }
  std::unique_ptr<Communicator> do_split(int color, int key, std::string name) override {
    return std::make_unique<CountingComm>(inner_->split(color, key, std::move(name)), *log_);
  }

 private:
  void record(CollectiveKind kind, std::size_t bytes) {
    log_->push_back({kind, name(), static_cast<std::int64_t>(bytes)});
  }
  Communicator* inner_;
  std::vector<Moved>* log_;
  std::unique_ptr<Communicator> owned_;
};

// Live and peak bytes through the backend's allocator; reset_peak() starts a new window.
class PeakAllocator final : public Allocator {
 public:
  explicit PeakAllocator(Allocator& device) : device_(device) {}
  void* allocate(std::size_t bytes, MemoryCategory category) override {
    live_ += static_cast<std::int64_t>(bytes);
    peak_ = std::max(peak_, live_);
    return device_.allocate(bytes, category);
  }
  void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) noexcept override {
    live_ -= static_cast<std::int64_t>(bytes);
    device_.deallocate(pointer, bytes, category);
  }
  void reset_peak() { peak_ = live_; }
  [[nodiscard]] std::int64_t live() const { return live_; }
  [[nodiscard]] std::int64_t peak() const { return peak_; }

 private:
  Allocator& device_;
  std::int64_t live_ = 0;
  std::int64_t peak_ = 0;
};

CollectiveKind comm_kind(Collective c) {
  switch (c) {
    case Collective::all_reduce: return CollectiveKind::all_reduce;
    case Collective::all_gather: return CollectiveKind::all_gather;
    case Collective::reduce_scatter: return CollectiveKind::reduce_scatter;
    case Collective::all_to_all: return CollectiveKind::all_to_all;
    case Collective::broadcast: return CollectiveKind::broadcast;
  }
  return CollectiveKind::barrier;
}

// ---- the sweep
// -----------------------------------------------------------------------------------

struct Tally {
  std::int64_t pairs = 0;
  std::int64_t elements = 0;
  std::int64_t wrong = 0;            // elements that differ from the closed form
  std::int64_t collectives = 0;      // collectives compared with their step
  std::int64_t wrong_bytes = 0;      // plans whose collectives differ from their steps
  std::int64_t wrong_memory = 0;     // plans whose peak differs from extra_memory_bytes
  std::int64_t multi_axis_dims = 0;  // pairs with a dim split by two or more axes
  std::array<std::int64_t, 6> kinds{};
  std::vector<std::string> failures;  // the first few, described

  void fail(std::string what) {
    if (failures.size() < 6) failures.push_back(std::move(what));
  }
  void add(const Tally& o) {
    pairs += o.pairs;
    elements += o.elements;
    wrong += o.wrong;
    collectives += o.collectives;
    wrong_bytes += o.wrong_bytes;
    wrong_memory += o.wrong_memory;
    multi_axis_dims += o.multi_axis_dims;
    for (std::size_t k = 0; k < kinds.size(); ++k) kinds[k] += o.kinds[k];
    for (const std::string& f : o.failures) fail(f);
  }
};

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Every ordered pair of specs, or every `stride`-th by a fixed hash when there are too many.
std::vector<std::pair<std::size_t, std::size_t>> pairs_of(std::size_t specs) {
  const std::size_t total = specs * specs;
  const std::size_t stride = (total + kMaxPairs - 1) / kMaxPairs;
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t q = 0; q < total; ++q) {
    if (stride <= 1 || mix(q) % stride == 0) out.emplace_back(q / specs, q % specs);
  }
  return out;
}

bool has_multi_axis_dim(const ShardingSpec& s) {
  return std::any_of(s.dims().begin(), s.dims().end(),
                     [](const AxisList& a) { return a.size() >= 2; });
}

std::string describe(const ReshardPlan& plan) {
  std::ostringstream out;
  out << "'" << plan.from << "' -> '" << plan.to << "':";
  for (const ReshardStep& s : plan.steps) {
    out << " " << to_string_view(s.kind) << "(" << s.axis;
    if (s.dim != kNoDim) out << ", dim " << s.dim;
    if (s.to_dim != kNoDim) out << "->" << s.to_dim;
    out << ")";
  }
  return out.str();
}

// Compares what the logged collectives moved with the plan's steps.
void check_moves(const ReshardPlan& plan, const std::vector<Moved>& log, Tally& t) {
  std::size_t at = 0;
  bool ok = true;
  for (const ReshardStep& s : plan.steps) {
    const auto c = collective_of(s.kind);
    if (!c) continue;
    ++t.collectives;
    ok = ok && at < log.size() && log[at].kind == comm_kind(*c) && log[at].group == s.axis.view() &&
         log[at].bytes == s.bytes;
    ++at;
  }
  if (!ok || at != log.size()) {
    ++t.wrong_bytes;
    std::ostringstream m;
    m << "bytes moved differ from the plan " << describe(plan) << "; logged:";
    for (const Moved& x : log)
      m << " " << to_string_view(x.kind) << "(" << x.group << ", " << x.bytes << ")";
    t.fail(m.str());
  }
}

// Runs the chosen pairs of specs of `global` on `mesh`, one thread per device. Every rank checks
// its own result against the closed form (for a Partial target, the sum over its Partial group,
// read from the others' results between two barriers).
Tally sweep(const DeviceMesh& mesh, const TensorShape& global) {
  const HardwareProfile hw = hardware::cpu();
  const std::vector<ShardingSpec> specs =
      enumerate_specs(global, mesh, {.partial = PartialSpecs::include});
  const auto pairs = pairs_of(specs.size());
  const auto n = static_cast<std::size_t>(mesh.num_devices());
  std::vector<std::vector<float>> results(n);
  std::vector<Tally> tallies(n);
  run_threads(static_cast<int>(n), [&](Communicator& world) {
    const auto rank = static_cast<std::size_t>(world.rank());
    const auto device = static_cast<std::int64_t>(rank);
    Tally& t = tallies[rank];
    std::vector<Moved> log;
    CountingComm counted(world, log);
    MeshComms comms(counted, mesh);
    cpu::CpuBackend backend;
    PeakAllocator memory(backend.device_allocator());
    backend.use_allocator(&memory);
    ReshardCache cache;
    for (const auto& [i, j] : pairs) {
      const ShardingSpec& from = specs[i];
      const ShardingSpec& to = specs[j];
      const ReshardPlan plan =
          cache.plan(global, DType::fp32, from, to, mesh, hw, {.make_partial = MakePartial::allow});
      const TensorShape in_shape = local_shape(global, from, mesh);
      const TensorShape out_shape = local_shape(global, to, mesh);
      const Buffer source = upload(backend, in_shape, local_values(global, from, mesh, device));
      log.clear();
      memory.reset_peak();
      const std::int64_t base = memory.live();
      const Buffer out = execute_reshard(backend, comms, global, source.view(in_shape), plan,
                                         MemoryCategory::activations);
      const std::int64_t extra = memory.peak() - base;
      results[rank] = download(backend, out, out_shape);

      ++t.pairs;
      if (has_multi_axis_dim(from) || has_multi_axis_dim(to)) ++t.multi_axis_dims;
      for (const ReshardStep& s : plan.steps) ++t.kinds[static_cast<std::size_t>(s.kind)];
      check_moves(plan, log, t);
      const std::int64_t want_extra =
          plan.steps.empty() ? out_shape.numel() * 4 : plan.extra_memory_bytes;
      if (extra != want_extra) {
        ++t.wrong_memory;
        t.fail(detail::concat("peak memory beyond the source ", extra, " bytes, the plan says ",
                              want_extra, ": ", describe(plan)));
      }

      world.barrier().wait();  // every rank's result is in `results`
      const std::vector<std::int64_t> flat = global_indices(global, to, mesh, device);
      const std::vector<std::int64_t> group = partial_group(to, mesh, device);
      std::int64_t wrong = 0;
      std::string first;
      for (std::size_t e = 0; e < flat.size(); ++e) {
        float sum = 0;
        for (std::int64_t d : group) sum += results[static_cast<std::size_t>(d)][e];
        ++t.elements;
        if (sum != global_value(flat[e]) && wrong++ == 0) {
          first = detail::concat("element ", e, " = ", sum, ", expected ", global_value(flat[e]));
        }
      }
      if (wrong > 0) {
        t.wrong += wrong;
        t.fail(detail::concat("rank ", rank, ": ", wrong, " of ", flat.size(), " elements wrong (",
                              first, "): ", describe(plan)));
      }
      world.barrier().wait();  // nobody reads `results` any more
    }
  });
  Tally all;
  for (const Tally& t : tallies) all.add(t);
  all.pairs /= static_cast<std::int64_t>(n);  // every rank ran every pair
  all.multi_axis_dims /= static_cast<std::int64_t>(n);
  all.collectives /= static_cast<std::int64_t>(n);
  for (auto& k : all.kinds) k /= static_cast<std::int64_t>(n);
  return all;
}

void run_sweeps(const DeviceMesh& mesh, const std::vector<TensorShape>& shapes) {
  Tally total;
  for (const TensorShape& shape : shapes) {
    const Tally t = sweep(mesh, shape);
    INFO("mesh " << mesh << ", tensor " << shape);
    for (const std::string& f : t.failures) UNSCOPED_INFO(f);
    CHECK(t.wrong == 0);
    CHECK(t.wrong_bytes == 0);
    CHECK(t.wrong_memory == 0);
    CHECK(t.elements > 0);
    total.add(t);
  }
  std::ostringstream kinds;
  for (std::size_t k = 0; k < total.kinds.size(); ++k) {
    kinds << (k > 0 ? ", " : "") << to_string_view(static_cast<ReshardKind>(k)) << " "
          << total.kinds[k];
  }
  WARN("mesh " << mesh << ": " << total.pairs << " ordered pairs of specs checked ("
               << total.multi_axis_dims << " with a dim split by several axes), "
               << total.collectives
               << " collectives compared with their steps; steps run: " << kinds.str());
  // Every kind of step ran on this mesh.
  for (std::size_t k = 0; k < total.kinds.size(); ++k) {
    INFO(to_string_view(static_cast<ReshardKind>(k)));
    CHECK(total.kinds[k] > 0);
  }
}

const std::vector<TensorShape> kShapes = {
    {{"i", 16}}, {{"i", 8}, {"j", 8}}, {{"i", 4}, {"j", 8}, {"k", 8}}};

}  // namespace

TEST_CASE("execute_reshard: every pair of specs on a 1-D mesh of 4", "[reshard][thread]") {
  run_sweeps(DeviceMesh{{"x", 4}}, kShapes);
}

TEST_CASE("execute_reshard: every pair of specs on a 2x2 mesh", "[reshard][thread]") {
  run_sweeps(DeviceMesh{{"a", 2}, {"b", 2}}, kShapes);
}

TEST_CASE("execute_reshard: every pair of specs on a 2x4 mesh", "[reshard][thread]") {
  run_sweeps(DeviceMesh{{"a", 2}, {"b", 4}}, kShapes);
}

TEST_CASE("execute_reshard: pairs of specs on a 2x2x2 mesh", "[reshard][thread]") {
  run_sweeps(DeviceMesh{{"a", 2}, {"b", 2}, {"c", 2}}, kShapes);
}

TEST_CASE("reshard_tensor: A -> B -> A is the identity", "[reshard][thread]") {
  const DeviceMesh mesh{{"dp", 2}, {"tp", 2}};
  const TensorShape global{{"s", 4}, {"h", 8}};
  const HardwareProfile hw = hardware::cpu();
  const std::vector<ShardingSpec> specs =
      enumerate_specs(global, mesh, {.partial = PartialSpecs::include});
  std::vector<std::int64_t> wrong(4, 0), checked(4, 0);
  run_threads(4, [&](Communicator& world) {
    const auto rank = static_cast<std::size_t>(world.rank());
    MeshComms comms(world, mesh);
    cpu::CpuBackend backend;
    ReshardCache cache;
    for (const ShardingSpec& a : specs) {
      if (a.is_partial()) continue;  // a Partial value's summands are not unique
      const TensorShape shape_a = local_shape(global, a, mesh);
      const std::vector<float> start = local_values(global, a, mesh, world.rank());
      const Buffer src = upload(backend, shape_a, start);
      for (const ShardingSpec& b : specs) {
        const Buffer there = reshard_tensor(backend, comms, cache, hw, global, src.view(shape_a), a,
                                            b, MemoryCategory::temporaries);
        const Buffer back = reshard_tensor(backend, comms, cache, hw, global,
                                           there.view(local_shape(global, b, mesh)), b, a,
                                           MemoryCategory::activations);
        const std::vector<float> end = download(backend, back, shape_a);
        checked[rank] += static_cast<std::int64_t>(end.size());
        for (std::size_t e = 0; e < end.size(); ++e) wrong[rank] += end[e] != start[e];
      }
    }
  });
  for (std::size_t r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(wrong[r] == 0);
    CHECK(checked[r] > 0);
  }
}

TEST_CASE("make_partial: coordinate 0 of the axis keeps the value, the others hold zeros",
          "[reshard][thread]") {
  const DeviceMesh mesh{{"dp", 2}, {"tp", 2}};
  const TensorShape global{{"s", 4}, {"h", 8}};
  const ShardingSpec from = ShardingSpec::replicated(2).shard(TensorDim{0}, AxisName("dp"));
  ShardingSpec to = from;
  to.add_partial(AxisName("tp"));
  const ReshardPlan plan = reshard(global, DType::fp32, from, to, mesh, hardware::cpu(),
                                   {.make_partial = MakePartial::allow});
  REQUIRE(plan.steps.size() == 1);
  REQUIRE(plan.steps[0].kind == ReshardKind::make_partial);
  std::vector<std::vector<float>> got(4), want(4);
  run_threads(4, [&](Communicator& world) {
    const auto rank = static_cast<std::size_t>(world.rank());
    MeshComms comms(world, mesh);
    cpu::CpuBackend backend;
    const TensorShape local = local_shape(global, from, mesh);
    const std::vector<float> values = local_values(global, from, mesh, world.rank());
    const Buffer src = upload(backend, local, values);
    const Buffer out =
        execute_reshard(backend, comms, global, src.view(local), plan, MemoryCategory::activations);
    got[rank] = download(backend, out, local);
    const bool keeps = comms.coord()[mesh.index_of(AxisName("tp"))] == 0;
    want[rank] = keeps ? values : std::vector<float>(values.size(), 0.0f);
  });
  for (std::size_t r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(got[r] == want[r]);
  }
}

TEST_CASE("execute_reshard: misuse throws naming what was expected", "[reshard][thread]") {
  const DeviceMesh mesh{{"dp", 2}, {"tp", 2}};
  const TensorShape global{{"s", 4}, {"h", 8}};
  const HardwareProfile hw = hardware::cpu();
  const ShardingSpec from = ShardingSpec::replicated(2).shard(TensorDim{1}, AxisName("tp"));
  const ShardingSpec to = ShardingSpec::replicated(2).shard(TensorDim{0}, AxisName("dp"));
  const ReshardPlan plan = reshard(global, DType::fp32, from, to, mesh, hw);
  REQUIRE_FALSE(plan.steps.empty());
  std::vector<std::string> wrong_shape(4), wrong_dtype(4), wrong_plan(4);
  run_threads(4, [&](Communicator& world) {
    const auto rank = static_cast<std::size_t>(world.rank());
    MeshComms comms(world, mesh);
    cpu::CpuBackend backend;
    const TensorShape bad{{"s", 4}, {"h", 8}};  // the global shape, not the local (4, 4)
    const Buffer buffer = backend.allocate(bad, DType::fp32, MemoryCategory::activations);
    auto message = [&](auto&& call) {
      try {
        call();
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string("(no error)");
    };
    wrong_shape[rank] = message([&] {
      (void)execute_reshard(backend, comms, global, buffer.view(bad), plan,
                            MemoryCategory::activations);
    });
    const TensorShape local = local_shape(global, from, mesh);
    wrong_dtype[rank] = message([&] {
      (void)execute_reshard(backend, comms, global,
                            ConstTensorView(buffer.data(), local, DType::fp16), plan,
                            MemoryCategory::activations);
    });
    // The plan's steps start from S(tp) on dim 1; claiming S(dp) there makes its first step
    // inapplicable (the local shape is the same, so only the step check can catch it).
    ReshardPlan lie = plan;
    lie.from = ShardingSpec::replicated(2).shard(TensorDim{1}, AxisName("dp"));
    wrong_plan[rank] = message([&] {
      (void)execute_reshard(backend, comms, global, buffer.view(local), lie,
                            MemoryCategory::activations);
    });
  });
  for (std::size_t r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK_THAT(wrong_shape[r], Catch::Contains("has shape (s=4, h=8)") &&
                                   Catch::Contains("expected the local shape (s=4, h=4)"));
    CHECK_THAT(wrong_dtype[r], Catch::Contains("is fp16") && Catch::Contains("fp32 and bf16"));
    CHECK_THAT(wrong_plan[r], Catch::Contains("does not apply to spec 'R,S(dp)'"));
  }
}
