// Enumeration of every valid spec, checked against a closed form and a random search.
//
// Closed form. A spec places each of the m mesh axes either nowhere (replicated), in the Partial
// set (when allowed), or into the ordered axis list of one of the r tensor dims. Choose which k
// axes shard dims: C(m, k) ways. Placing k distinct axes into r ordered lists, one axis at a time:
// the j-th axis (j = 0..k-1) can go to the end of any of the r lists or directly before any of the
// j axes already placed, r + j positions, so r (r+1) ... (r+k-1) ways (the rising factorial r^(k)).
// Each of the other m-k axes is replicated or Partial: 1 or 2 choices each. Hence
//   count(m, r)         = sum_k C(m,k) r^(k)              (no Partial)
//   count_partial(m, r) = sum_k C(m,k) r^(k) 2^(m-k)      (with Partial)
// when every dim divides evenly by every product of axis sizes (extents that are multiples of the
// device count). For other extents the count is the sum, over axis-to-dim assignments whose
// products divide, of the number of orders: prod_d (number of axes on d)!.
#include <algorithm>
#include <carto/spec.hpp>
#include <catch2/catch.hpp>
#include <random>
#include <set>
#include <string>

#include "support/spec_domains.hpp"

using namespace carto;

namespace {

std::int64_t binomial(std::int64_t n, std::int64_t k) {
  std::int64_t c = 1;
  for (std::int64_t i = 1; i <= k; ++i) c = c * (n - k + i) / i;
  return c;
}

std::int64_t rising(std::int64_t r, std::int64_t k) {
  std::int64_t p = 1;
  for (std::int64_t j = 0; j < k; ++j) p *= r + j;
  return p;
}

std::int64_t closed_form(std::int64_t m, std::int64_t r, bool partial) {
  std::int64_t total = 0;
  for (std::int64_t k = 0; k <= m; ++k) {
    total += binomial(m, k) * rising(r, k) * (partial ? (std::int64_t{1} << (m - k)) : 1);
  }
  return total;
}

// A random spec over the mesh's axes (each used at most once), possibly with uneven splits.
ShardingSpec random_spec(std::mt19937& rng, const DeviceMesh& mesh, std::size_t rank) {
  std::vector<AxisName> names;
  for (const MeshAxis& a : mesh.axes()) names.push_back(a.name);
  std::shuffle(names.begin(), names.end(), rng);
  ShardingSpec s = ShardingSpec::replicated(rank);
  for (const AxisName& n : names) {
    const std::size_t where = std::uniform_int_distribution<std::size_t>(0, rank + 1)(rng);
    if (where < rank) s.shard(TensorDim{where}, n);
    if (where == rank) s.add_partial(n);
  }
  return s;
}

}  // namespace

TEST_CASE("enumeration counts match the closed form on evenly divisible shapes",
          "[spec][enumerate]") {
  // Extents 24 and 48 are multiples of every product of axis sizes used here (at most 8 or 12).
  for (const char* mesh_text : {"x=2", "x=8", "dp=2,tp=4", "a=3,b=4", "pp=2,dp=2,tp=2"}) {
    const DeviceMesh mesh = parse_mesh(mesh_text);
    const std::int64_t m = static_cast<std::int64_t>(mesh.num_axes());
    for (const char* shape_text : {"48", "48,24", "24,48,24", "24,24,48,24"}) {
      const TensorShape shape = parse_shape(shape_text);
      const std::int64_t r = static_cast<std::int64_t>(shape.rank());
      INFO(mesh << " " << shape);
      REQUIRE(static_cast<std::int64_t>(enumerate_specs(shape, mesh).size()) ==
              closed_form(m, r, false));
      REQUIRE(static_cast<std::int64_t>(
                  enumerate_specs(shape, mesh, {.partial = PartialSpecs::include}).size()) ==
              closed_form(m, r, true));
    }
  }
  // Worked values: m = 2, r = 3 gives 1 + 2*3 + 3*4 = 19 and 4 + 2*3*2 + 12 = 28; m = 3, r = 4
  // gives 1 + 3*4 + 3*20 + 120 = 193 and 8 + 48 + 120 + 120 = 296.
  REQUIRE(closed_form(2, 3, false) == 19);
  REQUIRE(closed_form(2, 3, true) == 28);
  REQUIRE(closed_form(3, 4, false) == 193);
  REQUIRE(closed_form(3, 4, true) == 296);
}

TEST_CASE("enumeration with uneven extents matches the assignment count", "[spec][enumerate]") {
  for (const DeviceMesh& mesh : testing::small_meshes()) {
    for (const TensorShape& shape : testing::small_shapes()) {
      const std::size_t m = mesh.num_axes();
      const std::size_t r = shape.rank();
      // Sum over assignments axis -> {R, dim 0..r-1} whose products divide of prod_d (count_d)!.
      std::int64_t expect = 0;
      std::vector<std::size_t> choice(m, 0);
      for (;;) {
        std::vector<std::int64_t> product(r, 1);
        std::vector<std::int64_t> count(r, 0);
        for (std::size_t a = 0; a < m; ++a) {
          if (choice[a] > 0) {
            product[choice[a] - 1] *= mesh.axis(a).size;
            ++count[choice[a] - 1];
          }
        }
        bool even = true;
        std::int64_t orders = 1;
        for (std::size_t d = 0; d < r; ++d) {
          even = even && shape.dims()[d].extent % product[d] == 0;
          for (std::int64_t i = 2; i <= count[d]; ++i) orders *= i;
        }
        if (even) expect += orders;
        std::size_t a = m;
        bool advanced = false;
        while (a-- > 0) {
          if (++choice[a] <= r) {
            advanced = true;
            break;
          }
          choice[a] = 0;
        }
        if (!advanced) break;
      }
      INFO(mesh << " " << shape);
      REQUIRE(static_cast<std::int64_t>(enumerate_specs(shape, mesh).size()) == expect);
    }
  }
}

TEST_CASE("enumeration lists valid, distinct specs and misses none", "[spec][enumerate]") {
  std::mt19937 rng(20261130);
  for (const DeviceMesh& mesh : testing::small_meshes()) {
    for (const TensorShape& shape : testing::small_shapes()) {
      const auto specs = enumerate_specs(shape, mesh, {.partial = PartialSpecs::include});
      INFO(mesh << " " << shape);
      std::set<std::string> texts;
      for (const ShardingSpec& s : specs) {
        REQUIRE(validate(shape, s, mesh).ok());
        texts.insert(to_string(s));
      }
      REQUIRE(texts.size() == specs.size());  // distinct (partial is printed in mesh order)
      // Completeness: random specs that validate must all be in the list.
      for (int trial = 0; trial < 300; ++trial) {
        const ShardingSpec s = random_spec(rng, mesh, shape.rank());
        if (!validate(shape, s, mesh).ok()) continue;
        const bool found = std::find(specs.begin(), specs.end(), s) != specs.end();
        INFO("spec " << s);
        REQUIRE(found);
      }
      // Without Partial: exactly the non-partial subset, in the same relative order.
      std::vector<ShardingSpec> non_partial;
      std::copy_if(specs.begin(), specs.end(), std::back_inserter(non_partial),
                   [](const ShardingSpec& s) { return !s.is_partial(); });
      REQUIRE(non_partial == enumerate_specs(shape, mesh));
    }
  }
}

TEST_CASE("enumeration order is deterministic and starts fully replicated", "[spec][enumerate]") {
  const DeviceMesh mesh = parse_mesh("dp=2,tp=4");
  const TensorShape x = parse_shape("b=8,s=8,h=8");
  const auto a = enumerate_specs(x, mesh, {.partial = PartialSpecs::include});
  const auto b = enumerate_specs(x, mesh, {.partial = PartialSpecs::include});
  REQUIRE(a == b);
  REQUIRE(a.front() == parse_spec("R,R,R"));
  // The odometer's first steps: dp stays replicated while tp walks R, dims 0..2, P.
  REQUIRE(a[1] == parse_spec("S(tp),R,R"));
  REQUIRE(a[2] == parse_spec("R,S(tp),R"));
  REQUIRE(a[3] == parse_spec("R,R,S(tp)"));
  REQUIRE(a[4] == parse_spec("R,R,R|P(tp)"));
  REQUIRE(a[5] == parse_spec("S(dp),R,R"));
  REQUIRE(a[6] == parse_spec("S(dp,tp),R,R"));
  REQUIRE(a[7] == parse_spec("S(tp,dp),R,R"));
  REQUIRE(a.back() == parse_spec("R,R,R|P(dp,tp)"));
}

TEST_CASE("enumeration runs in constant expressions", "[spec][enumerate]") {
  constexpr auto count = [] {
    return enumerate_specs(Shape<Dim<"b", 8>, Dim<"h", 8>>::static_value(),
                           Mesh<Axis<"dp", 2>, Axis<"tp", 2>>::value())
        .size();
  }();
  STATIC_REQUIRE(count == 1 + 2 * 2 + 2 * 3);  // closed_form(2, 2, false)
}
