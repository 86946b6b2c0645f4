// Shortest-path resharding: optimality against Floyd-Warshall, the triangle inequality over every
// triple of specs, closed-form one-step costs, symbolic replay of every path, and the exactness of
// each kind of step checked on the device slices of carto's layout.
#include <algorithm>
#include <carto/cost.hpp>
#include <carto/spec.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cost/cost_support.hpp"

using namespace carto;
using carto::test::close;
using carto::test::error_of;
using carto::test::leq;

namespace {

// One link level for every axis: α = 5 µs, B = 100 GB/s.
HardwareProfile uniform() {
  HardwareProfile hw = hardware::cpu();
  hw.name = "uniform";
  hw.links = {{.name = "link", .devices = 0, .bandwidth = 100e9, .latency = 5e-6}};
  return hw;
}

// Nodes of `per_node` devices on a fast link joined by a slow one.
HardwareProfile two_level(std::int64_t per_node, std::int64_t nodes) {
  HardwareProfile hw = uniform();
  hw.name = "two_level";
  hw.links = {{.name = "fast", .devices = per_node, .bandwidth = 300e9, .latency = 3e-6},
              {.name = "slow", .devices = per_node * nodes, .bandwidth = 25e9, .latency = 15e-6}};
  return hw;
}

struct Case {
  const char* name;
  TensorShape shape;
  DeviceMesh mesh;
  HardwareProfile hw;
};

// Rank-3 tensors on a 2x4 and a 2x2x2 mesh; one shape with uneven splits so that some specs are
// missing from the graph.
std::vector<Case> cases() {
  return {
      {"2x4 uniform", {{"b", 16}, {"s", 32}, {"h", 48}}, {{"a", 2}, {"b", 4}}, uniform()},
      {"2x4 two-level", {{"b", 16}, {"s", 32}, {"h", 48}}, {{"a", 2}, {"b", 4}}, two_level(4, 2)},
      {"2x4 uneven", {{"b", 2}, {"s", 12}, {"h", 8}}, {{"a", 2}, {"b", 4}}, two_level(4, 2)},
      {"2x2x2 uniform",
       {{"b", 8}, {"s", 16}, {"h", 24}},
       {{"x", 2}, {"y", 2}, {"z", 2}},
       uniform()},
      {"2x2x2 two-level",
       {{"b", 8}, {"s", 16}, {"h", 24}},
       {{"x", 2}, {"y", 2}, {"z", 2}},
       two_level(2, 4)},
  };
}

// ---- an independent symbolic model of the steps
// ---------------------------------------------------

bool in_list(const AxisList& l, const AxisName& x) {
  return std::find(l.begin(), l.end(), x) != l.end();
}

ShardingSpec drop_partial(const ShardingSpec& s, const AxisName& x) {
  ShardingSpec out;
  for (const AxisList& d : s.dims()) out.add_dim(d);
  for (const AxisName& p : s.partial())
    if (!(p == x)) out.add_partial(p);
  return out;
}

ShardingSpec dims_replaced(const ShardingSpec& s, std::size_t d, const AxisList& list) {
  ShardingSpec out;
  for (std::size_t k = 0; k < s.rank(); ++k) out.add_dim(k == d ? list : s.dims()[k]);
  for (const AxisName& p : s.partial()) out.add_partial(p);
  return out;
}

// Applies a step to a spec, REQUIREing its preconditions (the axis is where the step says).
ShardingSpec apply(const ShardingSpec& s, const ReshardStep& step) {
  const AxisName& x = step.axis;
  const bool partial = in_list(s.partial(), x);
  switch (step.kind) {
    case ReshardKind::local_slice: {
      REQUIRE(!s.uses(x));
      AxisList l = s.dims()[step.dim];
      l.push_back(x);
      return dims_replaced(s, step.dim, l);
    }
    case ReshardKind::make_partial: {
      REQUIRE(!s.uses(x));
      ShardingSpec out = s;
      out.add_partial(x);
      return out;
    }
    case ReshardKind::all_gather: {
      AxisList l = s.dims()[step.dim];
      REQUIRE((!l.empty() && l.back() == x));
      l.pop_back();
      return dims_replaced(s, step.dim, l);
    }
    case ReshardKind::all_to_all: {
      AxisList from = s.dims()[step.dim];
      REQUIRE((!from.empty() && from.back() == x));
      REQUIRE(step.to_dim != step.dim);
      from.pop_back();
      AxisList to = s.dims()[step.to_dim];
      to.push_back(x);
      return dims_replaced(dims_replaced(s, step.dim, from), step.to_dim, to);
    }
    case ReshardKind::all_reduce: REQUIRE(partial); return drop_partial(s, x);
    case ReshardKind::reduce_scatter: {
      REQUIRE(partial);
      AxisList l = s.dims()[step.dim];
      l.push_back(x);
      return dims_replaced(drop_partial(s, x), step.dim, l);
    }
  }
  FAIL("unknown step kind");
  return s;
}

std::int64_t local_bytes(const TensorShape& shape, const ShardingSpec& s, const DeviceMesh& mesh,
                         DType t) {
  return local_shape(shape, s, mesh).numel() * size_bytes(t);
}

// The closed form of one step written out from DESIGN.md §4 (not through collective_time):
// all-reduce 2(n-1)/n·S/B + 2(n-1)α; all-gather, reduce-scatter, all-to-all (n-1)/n·S/B + (n-1)α.
double closed_form(const ReshardEdge& e, std::int64_t in_bytes, std::int64_t n,
                   const LinkLevel& l) {
  const double S = static_cast<double>(in_bytes);
  const double f = static_cast<double>(n - 1) / static_cast<double>(n);
  switch (e.kind) {
    case ReshardKind::local_slice:
    case ReshardKind::make_partial: return 0.0;
    case ReshardKind::all_reduce:
      return n == 1 ? 0.0 : 2 * f * S / l.bandwidth + 2 * (n - 1) * l.latency;
    case ReshardKind::all_gather:
      return n == 1 ? 0.0 : f * (S * n) / l.bandwidth + (n - 1) * l.latency;
    case ReshardKind::reduce_scatter:
    case ReshardKind::all_to_all: return n == 1 ? 0.0 : f * S / l.bandwidth + (n - 1) * l.latency;
  }
  return -1;
}

// ---- exactness on device slices
// -------------------------------------------------------------------

std::int64_t volume(const Slice& s) {
  std::int64_t v = 1;
  for (const std::int64_t e : s.extent) v *= e;
  return v;
}
bool inside(const Slice& inner, const Slice& outer) {
  for (std::size_t d = 0; d < inner.offset.size(); ++d) {
    if (inner.offset[d] < outer.offset[d] ||
        inner.offset[d] + inner.extent[d] > outer.offset[d] + outer.extent[d])
      return false;
  }
  return true;
}
std::int64_t overlap(const Slice& a, const Slice& b) {
  std::int64_t v = 1;
  for (std::size_t d = 0; d < a.offset.size(); ++d) {
    const std::int64_t lo = std::max(a.offset[d], b.offset[d]);
    const std::int64_t hi = std::min(a.offset[d] + a.extent[d], b.offset[d] + b.extent[d]);
    v *= std::max<std::int64_t>(0, hi - lo);
  }
  return v;
}

// The devices of `device`'s group on mesh axis `axis`.
std::vector<std::int64_t> group(const DeviceMesh& mesh, std::size_t axis, std::int64_t device) {
  std::vector<std::int64_t> g;
  MeshCoord c = mesh.coord(device);
  for (std::int64_t k = 0; k < mesh.axis(axis).size; ++k) {
    c[axis] = k;
    g.push_back(mesh.device(c));
  }
  return g;
}

// Whether one step is an exact data movement within each group of its axis: what every device
// ends with is assembled from what its group held before, as the step's collective moves it.
// Returns the number of devices where it is not.
int inexact_devices(const TensorShape& shape, const DeviceMesh& mesh, const ShardingSpec& before,
                    const ShardingSpec& after, ReshardKind kind, std::size_t axis) {
  int bad = 0;
  for (std::int64_t d = 0; d < mesh.num_devices(); ++d) {
    const Slice mine_old = device_slice(shape, before, mesh, d);
    const Slice mine_new = device_slice(shape, after, mesh, d);
    const std::vector<std::int64_t> g = group(mesh, axis, d);
    bool ok = true;
    std::int64_t covered = 0;
    switch (kind) {
      case ReshardKind::local_slice: ok = inside(mine_new, mine_old); break;
      case ReshardKind::make_partial:
      case ReshardKind::all_reduce:
        // Every member holds (a summand of) the same block, and keeps it.
        for (const std::int64_t e : g) ok = ok && device_slice(shape, before, mesh, e) == mine_old;
        ok = ok && mine_new == mine_old;
        break;
      case ReshardKind::all_gather:
        // The group's old blocks tile the new block.
        for (const std::int64_t e : g) {
          const Slice s = device_slice(shape, before, mesh, e);
          ok = ok && inside(s, mine_new);
          covered += overlap(s, mine_new);
        }
        ok = ok && covered == volume(mine_new);
        for (std::size_t i = 0; i < g.size(); ++i)
          for (std::size_t j = 0; j < i; ++j)
            ok = ok && overlap(device_slice(shape, before, mesh, g[i]),
                               device_slice(shape, before, mesh, g[j])) == 0;
        break;
      case ReshardKind::all_to_all: {
        // The new block is covered by the group's old blocks, and the old block by the group's
        // new blocks (everything sent lands somewhere, everything received came from the group).
        std::int64_t sent = 0;
        for (const std::int64_t e : g) {
          covered += overlap(device_slice(shape, before, mesh, e), mine_new);
          sent += overlap(device_slice(shape, after, mesh, e), mine_old);
        }
        ok = covered == volume(mine_new) && sent == volume(mine_old);
        break;
      }
      case ReshardKind::reduce_scatter:
        // Same old block in the group (summands); the new blocks tile it.
        for (const std::int64_t e : g) {
          ok = ok && device_slice(shape, before, mesh, e) == mine_old;
          const Slice s = device_slice(shape, after, mesh, e);
          ok = ok && inside(s, mine_old);
          covered += volume(s);
        }
        ok = ok && covered == volume(mine_old) && inside(mine_new, mine_old);
        break;
    }
    if (!ok) ++bad;
  }
  return bad;
}

}  // namespace

TEST_CASE("a spec to itself costs zero with no steps", "[cost][reshard]") {
  for (Case& c : cases()) {
    ReshardGraph g(c.shape, DType::fp32, c.mesh, c.hw);
    for (std::size_t a = 0; a < g.size(); ++a) {
      const ReshardPlan p = g.plan(a, a);
      CHECK(p.steps.empty());
      CHECK(p.time_s == 0.0);
      CHECK(p.extra_memory_bytes == 0);
    }
  }
}

TEST_CASE("Dijkstra's cost is the minimum: Floyd-Warshall over the same edges", "[cost][reshard]") {
  for (Case& c : cases()) {
    INFO(c.name);
    ReshardGraph g(c.shape, DType::fp32, c.mesh, c.hw);
    const std::size_t n = g.size();
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> d(n, std::vector<double>(n, inf));
    for (std::size_t a = 0; a < n; ++a) {
      d[a][a] = 0;
      for (const ReshardEdge& e : g.edges(a)) d[a][e.to] = std::min(d[a][e.to], e.time_s);
    }
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t a = 0; a < n; ++a)
        for (std::size_t b = 0; b < n; ++b)
          if (d[a][k] + d[k][b] < d[a][b]) d[a][b] = d[a][k] + d[k][b];
    int mismatches = 0;
    for (std::size_t a = 0; a < n; ++a)
      for (std::size_t b = 0; b < n; ++b) {
        const double t = g.time(a, b);
        const bool same = (t == inf && d[a][b] == inf) || close(t, d[a][b]);
        if (!same) {
          ++mismatches;
          UNSCOPED_INFO(g.spec(a) << " -> " << g.spec(b) << ": dijkstra " << t << ", floyd "
                                  << d[a][b]);
        }
      }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("triangle inequality over every triple of specs", "[cost][reshard]") {
  for (Case& c : cases()) {
    INFO(c.name);
    ReshardGraph g(c.shape, DType::bf16, c.mesh, c.hw);
    const std::size_t n = g.size();
    std::size_t triples = 0;
    int violations = 0;
    for (std::size_t a = 0; a < n; ++a)
      for (std::size_t b = 0; b < n; ++b)
        for (std::size_t k = 0; k < n; ++k) {
          ++triples;
          const double direct = g.time(a, k);
          const double via = g.time(a, b) + g.time(b, k);
          if (!leq(direct, via)) {
            ++violations;
            UNSCOPED_INFO(g.spec(a) << " -> " << g.spec(k) << " = " << direct << " > via "
                                    << g.spec(b) << " = " << via);
          }
        }
    CHECK(triples == n * n * n);
    CHECK(violations == 0);
  }
}

TEST_CASE("graph nodes are every valid spec, Partial included", "[cost][reshard]") {
  // 2 mesh axes, rank 3: each axis R, S on one of 3 dims, or P (5^2 = 25 assignments), plus the
  // second order of the 3 assignments that put both axes on one dim: 28 specs.
  ReshardGraph g({{"b", 16}, {"s", 32}, {"h", 48}}, DType::fp32, {{"a", 2}, {"b", 4}}, uniform());
  CHECK(g.size() == 28);
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g.find(g.spec(i)) == i);
}

TEST_CASE("every one-step move costs its closed form", "[cost][reshard]") {
  for (Case& c : cases()) {
    INFO(c.name);
    const bool uniform_links = c.hw.links.size() == 1;
    ReshardGraph g(c.shape, DType::fp32, c.mesh, c.hw);
    int checked = 0;
    for (std::size_t a = 0; a < g.size(); ++a) {
      const std::int64_t L = local_bytes(c.shape, g.spec(a), c.mesh, DType::fp32);
      for (const ReshardEdge& e : g.edges(a)) {
        INFO(g.spec(a) << " -> " << g.spec(e.to) << " by " << to_string_view(e.kind) << " on "
                       << c.mesh.axis(e.axis).name);
        const double expect =
            closed_form(e, L, c.mesh.axis(e.axis).size, axis_link(c.mesh, e.axis, c.hw));
        CHECK(close(e.time_s, expect));
        // The shortest path is never dearer than the direct move; with one link level for every
        // axis the direct move is the shortest path.
        CHECK(leq(g.time(a, e.to), expect));
        if (uniform_links) CHECK(close(g.time(a, e.to), expect));
        ++checked;
      }
    }
    CHECK(checked > 0);
  }
}

TEST_CASE("with a slow and a fast axis the search beats the direct collective", "[cost][reshard]") {
  // {x:2, y:2} over nodes of 2: y (innermost) is on the fast link, x on the slow one. Moving x's
  // split from dim 0 to dim 1 directly is one all-to-all of L bytes on the slow link; slicing by y
  // first halves what crosses it, and gathering y back is cheap.
  const TensorShape shape{{"b", 1024}, {"s", 1024}, {"h", 256}};
  const DeviceMesh mesh{{"x", 2}, {"y", 2}};
  const HardwareProfile hw = two_level(2, 2);
  const ShardingSpec from = parse_spec("S(x),R,R");
  const ShardingSpec to = parse_spec("R,S(x),R");
  const ReshardPlan p = reshard(shape, DType::fp32, from, to, mesh, hw);
  const double L = 1024.0 * 1024 * 256 * 4 / 2;
  const double direct = 0.5 * L / 25e9 + 15e-6;
  const double sliced = 0.5 * (L / 2) / 25e9 + 15e-6 + 0.5 * L / 300e9 + 3e-6;
  CHECK(close(p.time_s, sliced));
  CHECK(p.time_s < direct);
  REQUIRE(p.steps.size() == 3);
  CHECK(p.steps[0].kind == ReshardKind::local_slice);
  CHECK(p.steps[1].kind == ReshardKind::all_to_all);
  CHECK(p.steps[2].kind == ReshardKind::all_gather);
}

TEST_CASE("every path really transforms the source into the target", "[cost][reshard]") {
  for (Case& c : cases()) {
    INFO(c.name);
    for (const MakePartial mp : {MakePartial::forbid, MakePartial::allow}) {
      ReshardGraph g(c.shape, DType::fp32, c.mesh, c.hw, {.make_partial = mp});
      for (std::size_t a = 0; a < g.size(); ++a)
        for (std::size_t b = 0; b < g.size(); ++b) {
          if (!g.reachable(a, b)) continue;
          const ReshardPlan p = g.plan(g.spec(a), g.spec(b));
          ShardingSpec s = g.spec(a);
          double total = 0;
          std::int64_t peak = 0;
          for (const ReshardStep& step : p.steps) {
            s = apply(s, step);
            CHECK(s == step.after);
            CHECK_NOTHROW(check_spec(c.shape, s, c.mesh));
            total += step.time_s;
            peak = std::max(peak, step.extra_bytes);
          }
          CHECK(s == g.spec(b));
          CHECK(close(p.time_s, total));
          CHECK(p.extra_memory_bytes == peak);
          if (mp == MakePartial::forbid) {
            for (const ReshardStep& step : p.steps) CHECK(step.kind != ReshardKind::make_partial);
          }
        }
    }
  }
}

TEST_CASE("every step of the graph is an exact data movement on device slices", "[cost][reshard]") {
  for (Case& c : cases()) {
    INFO(c.name);
    ReshardGraph g(c.shape, DType::fp32, c.mesh, c.hw, {.make_partial = MakePartial::allow});
    int bad = 0;
    for (std::size_t a = 0; a < g.size(); ++a)
      for (const ReshardEdge& e : g.edges(a)) {
        const int n = inexact_devices(c.shape, c.mesh, g.spec(a), g.spec(e.to), e.kind, e.axis);
        if (n != 0) {
          ++bad;
          UNSCOPED_INFO(g.spec(a) << " -> " << g.spec(e.to) << " by " << to_string_view(e.kind));
        }
      }
    CHECK(bad == 0);
  }
  // Why only innermost axes move: gathering the outer axis of S(a,b) is no single all-gather
  // (the a-group's blocks do not tile the wanted block), nor is slicing a new outer axis local.
  const TensorShape shape{{"b", 16}, {"s", 8}, {"h", 8}};
  const DeviceMesh mesh{{"a", 2}, {"b", 4}};
  CHECK(inexact_devices(shape, mesh, parse_spec("S(a,b),R,R"), parse_spec("S(b),R,R"),
                        ReshardKind::all_gather, 0) > 0);
  CHECK(inexact_devices(shape, mesh, parse_spec("S(b),R,R"), parse_spec("S(a,b),R,R"),
                        ReshardKind::local_slice, 0) > 0);
}

TEST_CASE("reachability: a Partial target needs a Partial source", "[cost][reshard]") {
  for (Case& c : cases()) {
    ReshardGraph g(c.shape, DType::fp32, c.mesh, c.hw);
    ReshardGraph allow(c.shape, DType::fp32, c.mesh, c.hw, {.make_partial = MakePartial::allow});
    for (std::size_t a = 0; a < g.size(); ++a)
      for (std::size_t b = 0; b < g.size(); ++b) {
        bool subset = true;
        for (const AxisName& p : g.spec(b).partial())
          subset = subset && in_list(g.spec(a).partial(), p);
        CHECK(g.reachable(a, b) == subset);
        CHECK(allow.reachable(a, b));
      }
  }
  const TensorShape shape{{"b", 16}, {"s", 32}, {"h", 48}};
  const DeviceMesh mesh{{"a", 2}, {"b", 4}};
  const std::string e = error_of([&] {
    (void)reshard(shape, DType::fp32, parse_spec("R,R,R"), parse_spec("R,R,R|P(a)"), mesh,
                  uniform());
  });
  CHECK_THAT(e, Catch::Contains("no resharding path") && Catch::Contains("'R,R,R|P(a)'") &&
                    Catch::Contains("Partial over axis 'a'") && Catch::Contains("{a:2, b:4}"));
  const ReshardPlan p = reshard(shape, DType::fp32, parse_spec("R,R,R"), parse_spec("R,R,R|P(a)"),
                                mesh, uniform(), {.make_partial = MakePartial::allow});
  REQUIRE(p.steps.size() == 1);
  CHECK(p.steps[0].kind == ReshardKind::make_partial);
  CHECK(p.time_s == 0);
}

TEST_CASE("invalid specs are named with the shape and mesh", "[cost][reshard]") {
  const TensorShape shape{{"b", 6}, {"s", 32}, {"h", 48}};
  const DeviceMesh mesh{{"a", 2}, {"b", 4}};
  const std::string uneven = error_of([&] {
    (void)reshard(shape, DType::fp32, parse_spec("S(b),R,R"), parse_spec("R,R,R"), mesh, uniform());
  });
  CHECK_THAT(uneven, Catch::Contains("'S(b),R,R'") && Catch::Contains("reshard source") &&
                         Catch::Contains("(b=6, s=32, h=48)") && Catch::Contains("{a:2, b:4}"));
  const std::string unknown = error_of([&] {
    (void)reshard(shape, DType::fp32, parse_spec("R,R,R"), parse_spec("R,S(tp),R"), mesh,
                  uniform());
  });
  CHECK_THAT(unknown, Catch::Contains("'R,S(tp),R'") && Catch::Contains("reshard target") &&
                          Catch::Contains("'tp'"));
  const std::string rank = error_of([&] {
    (void)reshard(shape, DType::fp32, parse_spec("R,R"), parse_spec("R,R,R"), mesh, uniform());
  });
  CHECK_THAT(rank, Catch::Contains("'R,R'") && Catch::Contains("rank 3"));
}

TEST_CASE("peak extra memory of a move, by hand", "[cost][reshard]") {
  const TensorShape shape{{"b", 16}, {"s", 32}, {"h", 48}};
  const DeviceMesh mesh{{"a", 2}, {"b", 4}};
  const std::int64_t full = 16 * 32 * 48 * 2;  // bf16 bytes of the whole tensor
  {
    // Gathering dim 0 over a (2): the output (full) arrives in rank-major order = the layout.
    const ReshardPlan p =
        reshard(shape, DType::bf16, parse_spec("S(a),R,R"), parse_spec("R,R,R"), mesh, uniform());
    REQUIRE(p.steps.size() == 1);
    CHECK(p.steps[0].bytes == full);
    CHECK(p.extra_memory_bytes == full);
  }
  {
    // Gathering dim 1 over b (4): chunks interleave along dim 0, so a staging buffer of the
    // output size is needed too: 2 · full.
    const ReshardPlan p =
        reshard(shape, DType::bf16, parse_spec("R,S(b),R"), parse_spec("R,R,R"), mesh, uniform());
    REQUIRE(p.steps.size() == 1);
    CHECK(p.extra_memory_bytes == 2 * full);
  }
  {
    // All-reduce of P(a) then nothing else: the output buffer only.
    const ReshardPlan p = reshard(shape, DType::bf16, parse_spec("S(b),R,R|P(a)"),
                                  parse_spec("S(b),R,R"), mesh, uniform());
    REQUIRE(p.steps.size() == 1);
    CHECK(p.steps[0].kind == ReshardKind::all_reduce);
    CHECK(p.steps[0].bytes == full / 4);
    CHECK(p.extra_memory_bytes == full / 4);
  }
  {
    // A free slice: only the (smaller) destination buffer.
    const ReshardPlan p =
        reshard(shape, DType::bf16, parse_spec("R,R,R"), parse_spec("R,R,S(a,b)"), mesh, uniform());
    REQUIRE(p.steps.size() == 2);
    CHECK(p.time_s == 0);
    // Step 1 out of the source: its output full/2; step 2: its input full/2 + output full/8.
    CHECK(p.steps[0].extra_bytes == full / 2);
    CHECK(p.steps[1].extra_bytes == full / 2 + full / 8);
    CHECK(p.extra_memory_bytes == full / 2 + full / 8);
  }
}

TEST_CASE("the cache keys graphs by tensor, mesh, hardware and options", "[cost][reshard]") {
  ReshardCache cache;
  const TensorShape shape{{"b", 16}, {"s", 32}, {"h", 48}};
  const DeviceMesh mesh{{"a", 2}, {"b", 4}};
  const ShardingSpec from = parse_spec("S(a),R,S(b)");
  const ShardingSpec to = parse_spec("R,S(b),S(a)");
  const ReshardPlan p1 = cache.plan(shape, DType::fp32, from, to, mesh, uniform());
  const ReshardPlan p2 = cache.plan(shape, DType::fp32, from, to, mesh, uniform());
  CHECK(cache.size() == 1);
  CHECK(p1.time_s == p2.time_s);
  CHECK(&cache.graph(shape, DType::fp32, mesh, uniform()) ==
        &cache.graph(shape, DType::fp32, mesh, uniform()));
  (void)cache.plan(shape, DType::bf16, from, to, mesh, uniform());
  (void)cache.plan(shape, DType::fp32, from, to, mesh, two_level(4, 2));
  (void)cache.plan(shape, DType::fp32, from, to, mesh, uniform(),
                   {.make_partial = MakePartial::allow});
  CHECK(cache.size() == 4);
  // bf16 moves half the bytes of fp32: every bandwidth term halves, the latency terms stay.
  CHECK(cache.plan(shape, DType::bf16, from, to, mesh, uniform()).time_s < p1.time_s);
}

TEST_CASE("the issue's example: S(dp),R,R to R,R,S(tp) on 8 H100 nodes", "[cost][reshard]") {
  // (8, 2048, 12288) bf16 on {dp:8, tp:8}: dp crosses nodes (InfiniBand, 46 GB/s), tp stays in a
  // node (NVLink, 370 GB/s). Gathering dp first moves the whole 402,653,184 B over InfiniBand;
  // slicing tp on dim 2 first (free) leaves an eighth of it to gather: 7/8 · full/8 / 46e9 + 7 · 14
  // µs.
  const TensorShape shape{{"b", 8}, {"s", 2048}, {"h", 12288}};
  const DeviceMesh mesh{{"dp", 8}, {"tp", 8}};
  const HardwareProfile hw = hardware_for_devices(hardware::h100(), mesh.num_devices());
  const ReshardPlan p =
      reshard(shape, DType::bf16, parse_spec("S(dp),R,R"), parse_spec("R,R,S(tp)"), mesh, hw);
  const double full = 8.0 * 2048 * 12288 * 2;  // 402,653,184 bytes
  REQUIRE(p.steps.size() == 2);
  CHECK(p.steps[0].kind == ReshardKind::local_slice);
  CHECK(p.steps[1].kind == ReshardKind::all_gather);
  CHECK(p.steps[1].axis == AxisName("dp"));
  CHECK(p.steps[1].bytes == static_cast<std::int64_t>(full / 8));
  CHECK(close(p.time_s, 7.0 / 8 * (full / 8) / 46e9 + 7 * 14e-6));
}
