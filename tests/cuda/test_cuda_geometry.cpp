// The CUDA backend's integer arithmetic (kernels/cuda/geometry.hpp), on the host with g++ alone:
// size classes, strided walks, placed rows, Philox block groups, column-sum tiles, 1-D grids and
// the row-major to cuBLASLt mapping, each against a brute-force reference over whole domains.
// No CUDA header is included, so this test builds and runs on any machine.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cuda/geometry.hpp>
#include <set>
#include <vector>

using namespace carto;
using namespace carto::cuda;

namespace {

// Small integers (|v| <= 8) from Philox, so that products and sums are exact in double.
double small_value(RngStream s, std::int64_t i) {
  return static_cast<double>(static_cast<int>(rng::bits(s, i) % 17) - 8);
}

}  // namespace

TEST_CASE("size classes: aligned, at most a quarter wasted, idempotent and monotone",
          "[geometry]") {
  STATIC_REQUIRE(size_class(1) == 256);
  STATIC_REQUIRE(size_class(256) == 256);
  STATIC_REQUIRE(size_class(257) == 512);
  STATIC_REQUIRE(size_class(1025) == 1280);
  STATIC_REQUIRE(size_class(std::size_t{8} << 20) == std::size_t{8} << 20);
  STATIC_REQUIRE(size_class((std::size_t{8} << 20) + 1) == std::size_t{10} << 20);
  std::int64_t wrong = 0;
  std::size_t previous = 0;
  std::set<std::size_t> classes;
  auto check = [&](std::size_t bytes) {
    const std::size_t c = size_class(bytes);
    classes.insert(c);
    const bool ok = c >= bytes && c % kAllocationAlignment == 0 && size_class(c) == c &&
                    c >= previous && (bytes <= 1024 ? c - bytes < 256 : 4 * (c - bytes) < c) &&
                    (bytes <= kLargeClassFrom || c % kLargeClassGranule == 0);
    wrong += !ok;
    previous = c;
  };
  for (std::size_t b = 1; b <= (std::size_t{1} << 20); ++b) check(b);  // every size to 1 MiB
  for (std::size_t b = (std::size_t{1} << 20) + 1; b <= (std::size_t{64} << 30); b += b / 4099 + 1)
    check(b);
  CHECK(wrong == 0);
  // Four classes per octave: 1 MiB holds 4 + 4·(log2(1 MiB) - 10) classes between 1 KiB and 1 MiB.
  std::int64_t below_mib = 0;
  for (std::size_t c : classes) below_mib += c > 1024 && c <= (std::size_t{1} << 20);
  CHECK(below_mib == 4 * 10);
}

TEST_CASE("strided walks visit the box in row-major order with fewer dims", "[geometry]") {
  const RngStream s{.seed = 3, .id = stream_id(RngPurpose::test, 40, 0)};
  std::int64_t boxes = 0, wrong = 0, merged = 0;
  for (std::int64_t trial = 0; trial < 400; ++trial) {
    const auto rank = static_cast<std::size_t>(1 + rng::bits(s, 100 * trial) % 4);
    Index extents;
    for (std::size_t d = 0; d < rank; ++d)
      extents.push_back(1 + rng::bits(s, 100 * trial + 1 + static_cast<std::int64_t>(d)) % 4);
    // Source: a contiguous tensor padded in some dims; destination: the box of a larger tensor or
    // the box itself (contiguous), so that merging is possible in some trials and not in others.
    StridedBox from{.offset = rng::bits(s, 100 * trial + 20) % 7, .strides = extents};
    StridedBox to{.offset = rng::bits(s, 100 * trial + 21) % 5, .strides = extents};
    std::int64_t fs = 1, ts = 1;
    for (std::size_t d = rank; d-- > 0;) {
      from.strides[d] = fs;
      to.strides[d] = ts;
      fs *= extents[d] + (rng::bits(s, 100 * trial + 30 + static_cast<std::int64_t>(d)) % 2);
      ts *= extents[d] + (trial % 3 == 0 ? 0 : 1);
    }
    const StridedWalk walk = strided_walk(from, to, extents);
    // The reference: an odometer over the original extents.
    std::vector<WalkOffsets> expected;
    Index coord = extents;
    for (std::int64_t& c : coord) c = 0;
    for (bool done = false; !done;) {
      WalkOffsets o{from.offset, to.offset};
      for (std::size_t d = 0; d < rank; ++d) {
        o.src += coord[d] * from.strides[d];
        o.dst += coord[d] * to.strides[d];
      }
      expected.push_back(o);
      done = true;
      for (std::size_t d = rank; d-- > 0;) {
        if (++coord[d] < extents[d]) {
          done = false;
          break;
        }
        coord[d] = 0;
      }
    }
    ++boxes;
    merged += walk.rank < static_cast<int>(rank);
    wrong += walk.count != static_cast<std::int64_t>(expected.size());
    for (std::int64_t i = 0; i < walk.count && i < static_cast<std::int64_t>(expected.size());
         ++i) {
      const WalkOffsets got = walk_offsets(walk, i);
      wrong += got.src != expected[static_cast<std::size_t>(i)].src ||
               got.dst != expected[static_cast<std::size_t>(i)].dst;
    }
    std::int64_t last_src = 0, last_dst = 0;
    for (const WalkOffsets& o : expected) {
      last_src = std::max(last_src, o.src);
      last_dst = std::max(last_dst, o.dst);
    }
    wrong += walk_last(walk).src != last_src || walk_last(walk).dst != last_dst;
  }
  CHECK(boxes == 400);
  CHECK(wrong == 0);
  CHECK(merged > 50);  // the trials exercise merging
  // A whole contiguous tensor is one dim; an empty box has no elements.
  constexpr StridedWalk whole = strided_walk({.offset = 0, .strides = {12, 4, 1}},
                                             {.offset = 0, .strides = {12, 4, 1}}, {2, 3, 4});
  STATIC_REQUIRE(whole.rank == 1);
  STATIC_REQUIRE(whole.count == 24);
  CHECK(strided_walk({.offset = 0, .strides = {1}}, {.offset = 0, .strides = {1}}, {0}).count == 0);
  CHECK(walk_last(strided_walk({.offset = 0, .strides = {1}}, {.offset = 0, .strides = {1}}, {0}))
            .src == -1);
  CHECK_THROWS_AS(
      strided_walk({.offset = 0, .strides = {1}}, {.offset = 0, .strides = {1, 1}}, {2}), Error);
}

TEST_CASE("placed rows give every element its global index", "[geometry]") {
  const Index global{5, 4, 9};
  std::int64_t checked = 0, wrong = 0;
  auto check = [&](const ShardPlacement& where, const Index& local) {
    const RowPlacement rows = row_placement(where, local);
    for_each_global_index(where, local, [&](std::int64_t l, std::int64_t g) {
      const std::int64_t row = l / rows.row_length, col = l % rows.row_length;
      ++checked;
      wrong += row_global_start(rows, row) + col != g;
    });
    wrong += rows.rows * rows.row_length != local[0] * local[1] * local[2];
  };
  check({}, global);
  check({.global_extents = global, .offset = {1, 2, 3}}, {3, 2, 5});
  check({.global_extents = global, .offset = {4, 0, 8}}, {1, 4, 1});
  check({.global_extents = global, .offset = {0, 3, 0}}, {5, 1, 9});
  CHECK(checked == 180 + 30 + 4 + 45);
  CHECK(wrong == 0);
  const RowPlacement scalar = row_placement({}, Index{});
  CHECK(scalar.rows == 1);
  CHECK(scalar.row_length == 1);
  CHECK(row_global_start(scalar, 0) == 0);
  CHECK_THROWS_AS(row_placement({.global_extents = global, .offset = {4, 0, 0}}, Index{2, 4, 9}),
                  Error);
}

TEST_CASE("Philox block groups cover a row once, each index in its block and slot", "[geometry]") {
  STATIC_REQUIRE(groups_per_row(1, 4) == 1);
  STATIC_REQUIRE(groups_per_row(2, 4) == 2);  // e.g. columns at indices 3 and 4
  std::int64_t wrong = 0, rows = 0;
  for (int per_block : {2, 4}) {
    for (std::int64_t g0 : {0ll, 1ll, 2ll, 3ll, 5ll, 6ll, 7ll, 1001ll, (1ll << 40) + 3}) {
      for (std::int64_t length = 1; length <= 21; ++length) {
        std::vector<int> seen(static_cast<std::size_t>(length), 0);
        for (std::int64_t j = 0; j < groups_per_row(length, per_block); ++j) {
          const BlockGroup g = block_group(g0, length, j, per_block);
          for (std::int64_t c = 0; c < g.count; ++c) {
            const std::int64_t col = g.first_col + c, index = g0 + col;
            if (col < 0 || col >= length) {
              ++wrong;
              continue;
            }
            ++seen[static_cast<std::size_t>(col)];
            wrong += g.block != static_cast<std::uint64_t>(index / per_block) ||
                     g.first_slot + c != index % per_block;
          }
        }
        for (int n : seen) wrong += n != 1;
        ++rows;
      }
    }
  }
  CHECK(rows == 2 * 9 * 21);
  CHECK(wrong == 0);
}

TEST_CASE("column-sum tiles cover the rows with no empty chunk and fit the grid", "[geometry]") {
  std::int64_t wrong = 0;
  for (std::int64_t rows : {1ll, 7ll, 31ll, 32ll, 33ll, 1000ll, 8192ll, 1ll << 20, 1ll << 33}) {
    for (std::int64_t width : {1ll, 31ll, 32ll, 33ll, 768ll, 50257ll, 1ll << 20}) {
      const ColumnSumTiles t = column_sum_tiles(rows, width);
      wrong += t.column_tiles * kColumnTile < width || (t.column_tiles - 1) * kColumnTile >= width;
      wrong +=
          t.row_chunks * t.rows_per_chunk < rows || (t.row_chunks - 1) * t.rows_per_chunk >= rows;
      wrong += t.row_chunks < 1 || t.row_chunks > 65535;
      // About the target of 1024 blocks when the rows allow it: a chunk of more than the least
      // 32 rows means one more chunk row would pass the target (or the columns alone do).
      wrong += t.rows_per_chunk > 4 * kRowLanes && t.row_chunks > 1 &&
               t.column_tiles * (t.row_chunks + 1) <= 1024;
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("1-D grids cover n elements within the block limit", "[geometry]") {
  STATIC_REQUIRE(grid_1d(0).blocks == 1);
  STATIC_REQUIRE(grid_1d(256).blocks == 1);
  STATIC_REQUIRE(grid_1d(257).blocks == 2);
  STATIC_REQUIRE(grid_1d(std::int64_t{1} << 40).blocks == 65535);
  for (std::int64_t n = 1; n < 100000; n += 37) {
    const Grid1d g = grid_1d(n);
    CHECK(static_cast<std::int64_t>(g.blocks) * g.threads >= n);
    CHECK(static_cast<std::int64_t>(g.blocks - 1) * g.threads < n);
  }
}

namespace {

// cuBLASLt's semantics on column-major operands, executed naively: for each batch entry,
// C(i, j) = alpha · Σ_p op(first)(i, p) · op(second)(p, j) + beta · C(i, j), with op(X)(i, p) =
// X[i + p·ld] untransposed and X[p + i·ld] transposed (the layout's rows and cols before op).
void column_major_gemm(const LtGemm& lt, const std::vector<double>& first,
                       const std::vector<double>& second, std::vector<double>& c) {
  for (std::int64_t b = 0; b < lt.batch; ++b) {
    for (std::int64_t i = 0; i < lt.m; ++i) {
      for (std::int64_t j = 0; j < lt.n; ++j) {
        double sum = 0;
        for (std::int64_t p = 0; p < lt.k; ++p) {
          const std::int64_t fa = b * lt.first.batch_stride +
                                  (lt.transpose_first ? p + i * lt.first.ld : i + p * lt.first.ld);
          const std::int64_t sb =
              b * lt.second.batch_stride +
              (lt.transpose_second ? j + p * lt.second.ld : p + j * lt.second.ld);
          sum += first[static_cast<std::size_t>(fa)] * second[static_cast<std::size_t>(sb)];
        }
        c[static_cast<std::size_t>(b * lt.c.batch_stride + i + j * lt.c.ld)] = sum;
      }
    }
  }
}

// What cuBLASLt checks of the layouts: each operand's stored (rows, cols) is op's shape (m, k),
// (k, n), (m, n), read before the transpose, with ld >= rows.
bool layouts_consistent(const LtGemm& lt) {
  const bool first = lt.transpose_first ? lt.first.rows == lt.k && lt.first.cols == lt.m
                                        : lt.first.rows == lt.m && lt.first.cols == lt.k;
  const bool second = lt.transpose_second ? lt.second.rows == lt.n && lt.second.cols == lt.k
                                          : lt.second.rows == lt.k && lt.second.cols == lt.n;
  return first && second && lt.c.rows == lt.m && lt.c.cols == lt.n &&
         lt.first.ld >= lt.first.rows && lt.second.ld >= lt.second.rows && lt.c.ld >= lt.c.rows;
}

}  // namespace

TEST_CASE("the row-major GEMM maps onto cuBLASLt's column-major product exactly", "[geometry]") {
  const RngStream s{.seed = 5, .id = stream_id(RngPurpose::test, 41, 0)};
  std::int64_t cases = 0, wrong = 0, folded = 0;
  const std::int64_t m = 3, n = 5, k = 4;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (std::int64_t batch : {1, 3}) {
        for (bool batched_a : {false, true}) {
          for (bool batched_b : {false, true}) {
            if (batch == 1 && (batched_a || batched_b)) continue;  // one combination only
            const std::int64_t a_batch = batched_a ? batch : 1, b_batch = batched_b ? batch : 1;
            const RowMajorGemm g{.a_rows = ta ? k : m,
                                 .a_cols = ta ? m : k,
                                 .a_batch = a_batch,
                                 .b_rows = tb ? n : k,
                                 .b_cols = tb ? k : n,
                                 .b_batch = b_batch,
                                 .c_rows = m,
                                 .c_cols = n,
                                 .c_batch = batch,
                                 .transpose_a = ta,
                                 .transpose_b = tb};
            REQUIRE(gemm_dims_agree(g));
            std::vector<double> a(static_cast<std::size_t>(a_batch * m * k)),
                b(static_cast<std::size_t>(b_batch * k * n));
            for (std::size_t i = 0; i < a.size(); ++i)
              a[i] = small_value(s, 1000 * cases + static_cast<std::int64_t>(i));
            for (std::size_t i = 0; i < b.size(); ++i)
              b[i] = small_value(s, 1000 * cases + 500 + static_cast<std::int64_t>(i));
            // The row-major reference, element by element.
            std::vector<double> expected(static_cast<std::size_t>(batch * m * n));
            for (std::int64_t e = 0; e < batch; ++e)
              for (std::int64_t i = 0; i < m; ++i)
                for (std::int64_t j = 0; j < n; ++j) {
                  double sum = 0;
                  for (std::int64_t p = 0; p < k; ++p) {
                    const std::int64_t ea = a_batch == 1 ? 0 : e, eb = b_batch == 1 ? 0 : e;
                    const double av =
                        a[static_cast<std::size_t>(ea * m * k + (ta ? p * m + i : i * k + p))];
                    const double bv =
                        b[static_cast<std::size_t>(eb * k * n + (tb ? j * k + p : p * n + j))];
                    sum += av * bv;
                  }
                  expected[static_cast<std::size_t>((e * m + i) * n + j)] = sum;
                }
            const LtGemm lt = lt_gemm(g);
            std::vector<double> c(expected.size(), 1e30);
            column_major_gemm(lt, b, a, c);  // cuBLASLt's first operand is B's memory
            ++cases;
            folded += lt.batch == 1 && batch > 1;
            wrong += !layouts_consistent(lt) || c != expected;
          }
        }
      }
    }
  }
  CHECK(cases == 4 * (1 + 4));
  CHECK(folded == 2);  // A batched and untransposed, B broadcast: one GEMM of batch·m rows
  CHECK(wrong == 0);
  // Mismatched operands are rejected.
  CHECK_FALSE(gemm_dims_agree(
      {.a_rows = 3, .a_cols = 4, .b_rows = 5, .b_cols = 2, .c_rows = 3, .c_cols = 2}));
  CHECK_FALSE(gemm_dims_agree({.a_rows = 3,
                               .a_cols = 4,
                               .a_batch = 2,
                               .b_rows = 4,
                               .b_cols = 2,
                               .c_rows = 3,
                               .c_cols = 2,
                               .c_batch = 3}));
}
