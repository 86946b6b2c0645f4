// The tracked allocator: allocation and free sequences whose current, peak and at-peak split are
// known in closed form; RAII handles; limits; the invariants of memory.hpp's design note.
#include <carto/runtime/memory.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <sstream>
#include <vector>

using namespace carto;

namespace {
constexpr std::int64_t KiB = 1024;
constexpr std::int64_t MiB = 1024 * KiB;
}  // namespace

TEST_CASE("memory: a training-step-like sequence has the peak and split known in closed form",
          "[memory]") {
  TrackedAllocator alloc({.name = "rank 0"});
  const MemoryTracker& t = alloc.tracker();
  // Parameters 4 MiB, gradients 4 MiB, optimizer states 8 MiB stay for the whole step.
  TrackedBuffer params = alloc.allocate(MemoryKind::parameters, 4 * MiB);
  TrackedBuffer grads = alloc.allocate(MemoryKind::gradients, 4 * MiB);
  TrackedBuffer states = alloc.allocate(MemoryKind::optimizer_states, 8 * MiB);
  // Forward: three layers save 1, 2, 3 MiB; each uses a 5 MiB temporary that dies at layer end.
  std::vector<TrackedBuffer> saved;
  for (std::int64_t layer = 1; layer <= 3; ++layer) {
    TrackedBuffer tmp = alloc.allocate(MemoryKind::temporaries, 5 * MiB);
    saved.push_back(alloc.allocate(MemoryKind::saved_activations, layer * MiB));
  }
  // After forward: 16 + 6 MiB in use. The peak came at layer 3: 16 + 1 + 2 + 5 + 3 = 27 MiB.
  CHECK(t.current_bytes() == 22 * MiB);
  CHECK(t.peak_bytes() == 27 * MiB);
  MemoryBreakdown want;
  want[MemoryKind::parameters] = 4 * MiB;
  want[MemoryKind::gradients] = 4 * MiB;
  want[MemoryKind::optimizer_states] = 8 * MiB;
  want[MemoryKind::saved_activations] = 6 * MiB;
  want[MemoryKind::temporaries] = 5 * MiB;
  CHECK(t.at_peak() == want);
  CHECK(t.at_peak().total() == t.peak_bytes());
  // Backward in reverse with a 10 MiB communication buffer at the last layer: 16 + 6 + 10 = 32.
  {
    TrackedBuffer comm = alloc.allocate(MemoryKind::communication_buffers, 10 * MiB);
    saved.pop_back();  // frees 3 MiB after the buffer exists: peak stays at 32
  }
  CHECK(t.peak_bytes() == 32 * MiB);
  want[MemoryKind::temporaries] = 0;
  want[MemoryKind::communication_buffers] = 10 * MiB;
  CHECK(t.at_peak() == want);
  // A category's own peak may come at another moment than the total peak.
  CHECK(t.peak_bytes(MemoryKind::temporaries) == 5 * MiB);
  CHECK(t.at_peak()[MemoryKind::temporaries] == 0);
  saved.clear();
  CHECK(t.current_bytes() == 16 * MiB);
  CHECK(t.live_allocations() == 3);
  CHECK(t.total_allocations() == 10);
}

TEST_CASE("memory: buffers free exactly once, on destruction, move or reset", "[memory]") {
  TrackedAllocator alloc;
  const MemoryTracker& t = alloc.tracker();
  TrackedBuffer a = alloc.allocate_array<float>(MemoryKind::workspace, 100);
  CHECK(a.size_bytes() == 400);
  CHECK(a.as<float>().size() == 100);
  CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 64 == 0);
  for (std::size_t i = 0; i < 100; ++i) a.as<float>()[i] = static_cast<float>(i);
  TrackedBuffer b = std::move(a);
  CHECK(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  CHECK(b.as<float>()[99] == 99.0f);
  CHECK(t.current_bytes() == 400);
  b = alloc.allocate(MemoryKind::gradients, 96);  // the assignment then frees the 400 bytes
  CHECK(t.current_bytes() == 96);
  CHECK(t.current_bytes(MemoryKind::workspace) == 0);
  CHECK(t.peak_bytes() == 496);  // both were live during the assignment's right-hand side
  b.reset();
  b.reset();
  CHECK(t.current_bytes() == 0);
  CHECK(t.live_allocations() == 0);
  TrackedBuffer none = alloc.allocate(MemoryKind::temporaries, 0);
  CHECK(none.empty());
  CHECK(t.total_allocations() == 2);
  TrackedBuffer odd = alloc.allocate(MemoryKind::temporaries, 12);
  CHECK_THROWS_WITH(odd.as<double>(),
                    Catch::Contains("12 bytes of temporaries is not a whole number"));
}

TEST_CASE("memory: random sequences keep the invariants, peaks match a replay", "[memory]") {
  std::mt19937_64 rng(1234);
  for (int trial = 0; trial < 20; ++trial) {
    TrackedAllocator alloc;
    const MemoryTracker& t = alloc.tracker();
    std::vector<TrackedBuffer> live;
    MemoryBreakdown current;
    MemoryBreakdown at_peak;
    std::int64_t peak = 0;
    for (int step = 0; step < 200; ++step) {
      if (live.empty() || rng() % 3 != 0) {
        const auto c = kAllMemoryKinds[rng() % kNumMemoryKinds];
        const std::int64_t bytes = 1 + static_cast<std::int64_t>(rng() % 4096);
        live.push_back(alloc.allocate(c, bytes));
        current[c] += bytes;
        if (current.total() > peak) {
          peak = current.total();
          at_peak = current;
        }
      } else {
        const std::size_t i = rng() % live.size();
        current[live[i].kind()] -= live[i].size_bytes();
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      }
      REQUIRE(t.current() == current);
      REQUIRE(t.current_bytes() == current.total());
    }
    CHECK(t.peak_bytes() == peak);
    CHECK(t.at_peak() == at_peak);
    for (MemoryKind c : kAllMemoryKinds) CHECK(t.peak_by_kind()[c] >= at_peak[c]);
  }
}

TEST_CASE("memory: reset_peak starts a new measurement", "[memory]") {
  TrackedAllocator alloc;
  const MemoryTracker& t = alloc.tracker();
  TrackedBuffer keep = alloc.allocate(MemoryKind::parameters, 1000);
  { TrackedBuffer big = alloc.allocate(MemoryKind::temporaries, 5000); }
  CHECK(t.peak_bytes() == 6000);
  alloc.tracker().reset_peak();
  CHECK(t.peak_bytes() == 1000);
  CHECK(t.at_peak()[MemoryKind::parameters] == 1000);
  { TrackedBuffer small = alloc.allocate(MemoryKind::temporaries, 300); }
  CHECK(t.peak_bytes() == 1300);
}

TEST_CASE("memory: a limit fails the allocation with what is in use", "[memory]") {
  TrackedAllocator alloc({.name = "rank 3", .limit_bytes = 10 * KiB});
  TrackedBuffer a = alloc.allocate(MemoryKind::parameters, 6 * KiB);
  CHECK_THROWS_WITH(alloc.allocate(MemoryKind::saved_activations, 5 * KiB),
                    Catch::Contains("rank 3: allocating 5120 bytes of saved_activations") &&
                        Catch::Contains("past the limit of 10240") &&
                        Catch::Contains("parameters=6144"));
  CHECK(alloc.tracker().current_bytes() == 6 * KiB);  // the failed allocation left no trace
  TrackedBuffer b = alloc.allocate(MemoryKind::saved_activations, 4 * KiB);  // exactly at the limit
  CHECK(alloc.tracker().current_bytes() == 10 * KiB);
}

TEST_CASE("memory: bad arguments are errors that say why", "[memory]") {
  CHECK_THROWS_WITH(TrackedAllocator({.alignment = 48}), Catch::Contains("power of two"));
  TrackedAllocator alloc;
  CHECK_THROWS_WITH(alloc.allocate(MemoryKind::workspace, -1), Catch::Contains("-1 bytes"));
  MemoryTracker t;
  CHECK_THROWS_WITH(t.record_free(MemoryKind::gradients, 8),
                    Catch::Contains("only 0 are allocated"));
  std::ostringstream s;
  s << t.current();
  CHECK(s.str() ==
        "parameters=0 gradients=0 optimizer_states=0 saved_activations=0 temporaries=0 "
        "communication_buffers=0 workspace=0 total=0");
}

TEST_CASE("memory: kinds map onto the profiler's categories", "[memory]") {
  STATIC_REQUIRE(profile_category(MemoryKind::optimizer_states) == MemoryCategory::optimizer);
  STATIC_REQUIRE(profile_category(MemoryKind::saved_activations) == MemoryCategory::activations);
  STATIC_REQUIRE(profile_category(MemoryKind::communication_buffers) ==
                 MemoryCategory::temporaries);
  STATIC_REQUIRE(profile_category(MemoryKind::workspace) == MemoryCategory::temporaries);
  for (const MemoryCategory c :
       {MemoryCategory::parameters, MemoryCategory::gradients, MemoryCategory::optimizer,
        MemoryCategory::activations, MemoryCategory::temporaries}) {
    CHECK(profile_category(memory_kind(c)) == c);
  }
  MemoryTracker t;
  t.record_allocate(MemoryKind::parameters, 100);
  t.record_allocate(MemoryCategory::optimizer, 200);  // as the backend's Allocator tags it
  t.record_allocate(MemoryKind::saved_activations, 30);
  t.record_allocate(MemoryKind::temporaries, 4);
  t.record_allocate(MemoryKind::communication_buffers, 5);
  t.record_allocate(MemoryKind::workspace, 6);
  const MemoryBytes b = to_memory_bytes(t.at_peak());
  CHECK(b == MemoryBytes{.parameters = 100,
                         .gradients = 0,
                         .optimizer = 200,
                         .activations = 30,
                         .temporaries = 15});
  CHECK(b.total() == t.peak_bytes());
  t.record_free(MemoryCategory::optimizer, 200);
  CHECK(t.current_bytes(MemoryKind::optimizer_states) == 0);
}
