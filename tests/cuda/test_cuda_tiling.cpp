// The index arithmetic of the CUDA reduction kernels (kernels/cuda/tiling.hpp), on the host.
//
// Each property is checked by its defining equation over a whole domain, by brute force: every row
// visited by exactly one thread group, every tile element owned by exactly one thread, the causal
// window equal to the element-wise mask, the dropout index equal to the CPU backend's
// GlobalIndexer, the shared-memory reads and writes of a warp free of bank conflicts, the
// footprints within the devices' limits. No GPU, no CUDA header.
#include <algorithm>
#include <carto/runtime/rng.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "cuda/tiling.hpp"

namespace tl = carto::cuda::tiling;

namespace {

// Visits every (block, thread) of a row launch and counts how often each (row, column) is touched
// by the column loop `for (j = lane; j < columns; j += width)` of the row loop.
void check_row_launch(std::int64_t rows, std::int64_t columns) {
  const tl::RowLaunch l = tl::row_launch(rows, columns);
  INFO("rows " << rows << ", columns " << columns);
  REQUIRE(l.threads % 32 == 0);
  REQUIRE(l.threads <= 1024);
  REQUIRE(l.group_width() * l.rows_per_block == l.threads);
  REQUIRE(l.whole_block() == (columns > tl::kWarpRowColumns));
  REQUIRE(l.blocks >= 1);
  REQUIRE(l.blocks <= tl::kMaxRowBlocks);
  std::vector<std::uint8_t> row_visits(static_cast<std::size_t>(rows), 0);
  for (unsigned block = 0; block < l.blocks; ++block) {
    for (unsigned thread = 0; thread < l.threads; thread += l.group_width()) {  // lane 0 of a group
      const tl::RowGroup g = tl::row_group(l, block, thread);
      REQUIRE(g.lane == 0);
      for (std::int64_t r = g.first_row; r < rows; r += g.row_step) ++row_visits[r];
    }
  }
  const auto wrong =
      std::count_if(row_visits.begin(), row_visits.end(), [](std::uint8_t v) { return v != 1; });
  CHECK(wrong == 0);
  // Within one group the lanes cover the columns once each.
  std::vector<int> column_visits(static_cast<std::size_t>(columns), 0);
  const unsigned width = l.group_width();
  for (unsigned thread = 0; thread < width; ++thread) {
    const tl::RowGroup g = tl::row_group(l, 0, thread);
    REQUIRE(g.first_row == 0);
    for (std::int64_t j = g.lane; j < columns; j += width) ++column_visits[j];
  }
  CHECK(std::all_of(column_visits.begin(), column_visits.end(), [](int v) { return v == 1; }));
}

// Banks of one warp's shared-memory accesses (in floats): conflict-free when no bank is asked for
// two different addresses (equal addresses are a broadcast).
bool conflict_free(const std::vector<int>& addresses) {
  std::map<int, std::set<int>> by_bank;
  for (const int a : addresses) by_bank[a % 32].insert(a);
  return std::all_of(by_bank.begin(), by_bank.end(),
                     [](const auto& bank) { return bank.second.size() == 1; });
}

// The (ty, tx) of each of a warp's 32 threads.
struct Lane {
  int ty = 0, tx = 0;
};
std::vector<Lane> warp_lanes(int warp) {
  std::vector<Lane> lanes;
  for (int t = 32 * warp; t < 32 * warp + 32; ++t)
    lanes.push_back({t / tl::kTileSide, t % tl::kTileSide});
  return lanes;
}

void check_tile(const tl::Tile& t) {
  INFO("tile rows " << t.rows << ", cols " << t.cols << ", dim " << t.dim);
  REQUIRE(t.rows % tl::kTileSide == 0);
  REQUIRE(t.cols % tl::kTileSide == 0);
  REQUIRE(t.dim % tl::kTileSide == 0);
  // Scores: (ty, tx, r, c) -> (tile_row, tile_col) is a bijection onto rows × cols.
  std::vector<int> scores(static_cast<std::size_t>(t.rows * t.cols), 0);
  std::vector<int> outputs(static_cast<std::size_t>(t.rows * t.dim), 0);
  for (int thread = 0; thread < tl::kTileThreads; ++thread) {
    const int ty = thread / tl::kTileSide, tx = thread % tl::kTileSide;
    for (int r = 0; r < t.thread_rows(); ++r) {
      const int row = tl::tile_row(ty, r);
      REQUIRE(row < t.rows);
      for (int c = 0; c < t.thread_cols(); ++c) ++scores[row * t.cols + tl::tile_col(tx, c)];
      for (int e = 0; e < t.thread_dims(); ++e) ++outputs[row * t.dim + tl::tile_col(tx, e)];
    }
    // A row's score threads are one half warp: the shuffles of width 16 reduce exactly them.
    CHECK(thread / 16 == ty);
  }
  CHECK(std::all_of(scores.begin(), scores.end(), [](int v) { return v == 1; }));
  CHECK(std::all_of(outputs.begin(), outputs.end(), [](int v) { return v == 1; }));
  // The loader: thread + k·256 covers every (row, col) of a (rows × dim) tile once.
  for (const int rows : {t.rows, t.cols}) {
    std::vector<int> loaded(static_cast<std::size_t>(rows * t.dim), 0);
    for (int thread = 0; thread < tl::kTileThreads; ++thread) {
      for (int idx = thread; idx < rows * t.dim; idx += tl::kTileThreads) {
        const tl::TileElement te = tl::tile_element(idx, t.dim);
        REQUIRE(te.row < rows);
        REQUIRE(te.col < t.dim);
        ++loaded[te.row * t.dim + te.col];
      }
    }
    CHECK(std::all_of(loaded.begin(), loaded.end(), [](int v) { return v == 1; }));
  }
  // Bank conflicts of every warp: dot_tile's reads of the column operand at one head-dim column,
  // the score writes, accumulate_product's reads of the head-dim operand.
  const int ds = t.dim_stride(), ss = t.score_stride();
  for (int warp = 0; warp < tl::kTileThreads / 32; ++warp) {
    const std::vector<Lane> lanes = warp_lanes(warp);
    for (int e = 0; e < t.dim; e += 7) {
      for (int c = 0; c < t.thread_cols(); ++c) {
        std::vector<int> a;
        for (const Lane& l : lanes) a.push_back(tl::tile_col(l.tx, c) * ds + e);
        CHECK(conflict_free(a));
      }
      for (int r = 0; r < t.thread_rows(); ++r) {
        std::vector<int> a;
        for (const Lane& l : lanes) a.push_back(tl::tile_row(l.ty, r) * ds + e);
        CHECK(conflict_free(a));
      }
    }
    for (int r = 0; r < t.thread_rows(); ++r) {
      for (int c = 0; c < t.thread_cols(); ++c) {
        std::vector<int> a;
        for (const Lane& l : lanes) a.push_back(tl::tile_row(l.ty, r) * ss + tl::tile_col(l.tx, c));
        CHECK(conflict_free(a));
      }
    }
    for (int j = 0; j < t.cols; j += 5) {
      for (int e = 0; e < t.thread_dims(); ++e) {
        std::vector<int> a;
        for (const Lane& l : lanes) a.push_back(j * ds + tl::tile_col(l.tx, e));
        CHECK(conflict_free(a));
      }
    }
  }
}

}  // namespace

TEST_CASE("row launches visit every row once and every column of a row once", "[cuda][tiling]") {
  for (const std::int64_t columns : {1, 7, 32, 33, 768, 1024, 1025, 4096, 12288, 50257}) {
    for (const std::int64_t rows : {1, 3, 8, 9, 1000}) check_row_launch(rows, columns);
  }
  // Past the grid limit the groups walk the rows with a stride.
  check_row_launch(tl::kMaxRowBlocks * tl::kWarpRowsPerBlock + 5, 64);
  check_row_launch(tl::kMaxRowBlocks + 3, 2048);
  STATIC_REQUIRE(tl::row_launch(10, 1024).rows_per_block == 8);
  STATIC_REQUIRE(tl::row_launch(10, 50257).threads == 1024);
  STATIC_REQUIRE(tl::row_launch(10, 1025).threads == 160);
}

TEST_CASE("the causal window equals the element-wise mask at every offset", "[cuda][tiling]") {
  const std::int64_t queries = 9, keys = 13;
  for (const bool causal : {false, true}) {
    for (std::int64_t qo = 0; qo < 20; qo += 3) {
      for (std::int64_t ko = 0; ko < 20; ko += 4) {
        const tl::CausalMask m{.causal = causal, .query_offset = qo, .key_offset = ko};
        INFO("causal " << causal << ", offsets " << qo << ", " << ko);
        for (std::int64_t i = 0; i < queries; ++i) {
          std::int64_t seen = 0;
          for (std::int64_t j = 0; j < keys; ++j) {
            const bool expected = !causal || ko + j <= qo + i;  // global key not after query
            CHECK(m.sees(i, j) == expected);
            if (expected) {
              CHECK(j == seen);  // the visible keys are a prefix
              ++seen;
            }
          }
          CHECK(m.visible(i, keys) == seen);
        }
        for (std::int64_t j = 0; j < keys; ++j) {
          std::int64_t first = queries;
          for (std::int64_t i = queries - 1; i >= 0; --i) {
            if (m.sees(i, j)) first = i;
          }
          CHECK(m.first_query(j, queries) == first);
        }
        // A query tile needs exactly the keys its widest row sees.
        for (std::int64_t q0 = 0; q0 < queries; q0 += 4) {
          std::int64_t widest = 0;
          for (std::int64_t i = q0; i < std::min(q0 + 4, queries); ++i)
            widest = std::max(widest, m.visible(i, keys));
          CHECK(tl::key_end(m, q0, 4, queries, keys) == widest);
        }
      }
    }
  }
  STATIC_REQUIRE(tl::CausalMask{.causal = true, .query_offset = 4, .key_offset = 0}.visible(0, 8) ==
                 5);
}

TEST_CASE("the dropout index of a probability is the CPU backend's global index",
          "[cuda][tiling]") {
  struct Case {
    carto::Index global, offset, local;
  };
  const std::vector<Case> cases = {
      {{}, {}, {2, 3, 5, 7}},                         // the whole tensor
      {{2, 6, 5, 7}, {0, 3, 0, 0}, {2, 3, 5, 7}},     // a head shard
      {{2, 3, 12, 12}, {0, 0, 4, 0}, {2, 3, 4, 12}},  // a query-sequence shard, gathered keys
      {{4, 6, 16, 16}, {2, 1, 8, 4}, {2, 3, 5, 7}},   // every dim offset
  };
  for (const Case& c : cases) {
    const carto::ShardPlacement where{.global_extents = c.global, .offset = c.offset};
    const carto::GlobalIndexer reference(where, c.local);
    const carto::Index& g = c.global.empty() ? c.local : c.global;
    const tl::ProbIndexer p = tl::prob_indexer(
        {g[0], g[1], g[2], g[3]},
        {reference.offset[0], reference.offset[1], reference.offset[2], reference.offset[3]});
    std::int64_t wrong = 0;
    for (std::int64_t b = 0; b < c.local[0]; ++b)
      for (std::int64_t h = 0; h < c.local[1]; ++h)
        for (std::int64_t i = 0; i < c.local[2]; ++i)
          for (std::int64_t j = 0; j < c.local[3]; ++j)
            wrong += p.index(b, h, i, j) != reference.global_index({b, h, i, j}) ? 1 : 0;
    CHECK(wrong == 0);
  }
  STATIC_REQUIRE(tl::prob_indexer({2, 3, 4, 5}, {0, 0, 0, 0}).index(1, 2, 3, 4) ==
                 ((1 * 3 + 2) * 4 + 3) * 5 + 4);
}

TEST_CASE("attention tiles: one owner per element, no bank conflicts, shared memory that fits",
          "[cuda][tiling]") {
  for (const int dim : {32, 64, 128}) {
    check_tile(tl::forward_tile(dim));
    check_tile(tl::backward_tile(dim));
  }
  // Layouts: consecutive regions, each as large as its tile.
  for (const int dim : {32, 64, 128}) {
    const tl::Tile f = tl::forward_tile(dim);
    const tl::ForwardSmem fs = tl::forward_smem(f);
    CHECK(fs.kv - fs.q == f.rows * f.dim_stride());
    CHECK(fs.p - fs.kv == f.cols * f.dim_stride());
    CHECK(fs.total - fs.p == f.rows * f.score_stride());
    const tl::Tile b = tl::backward_tile(dim);
    const tl::BackwardSmem bs = tl::backward_smem(b);
    CHECK(bs.own_b - bs.own_a == b.rows * b.dim_stride());
    CHECK(bs.tile_a - bs.own_b == b.rows * b.dim_stride());
    CHECK(bs.tile_b - bs.tile_a == b.cols * b.dim_stride());
    CHECK(bs.scores_a - bs.tile_b == b.cols * b.dim_stride());
    CHECK(bs.scores_b - bs.scores_a == b.rows * b.score_stride());
    CHECK(bs.lse - bs.scores_b == b.rows * b.score_stride());
    CHECK(bs.dsum - bs.lse >= std::max(b.rows, b.cols));
    CHECK(bs.total - bs.dsum >= std::max(b.rows, b.cols));
  }
  // The largest class fits the opt-in shared memory of an A100 (163 KiB per block).
  constexpr int kA100Bytes = 163 * 1024;
  STATIC_REQUIRE(tl::forward_smem(tl::forward_tile(128)).total * 4 <= kA100Bytes);
  STATIC_REQUIRE(tl::backward_smem(tl::backward_tile(128)).total * 4 <= kA100Bytes);
}

TEST_CASE("head dims map to the smallest supported class", "[cuda][tiling]") {
  CHECK(tl::head_dim_class(0) == 0);
  for (std::int64_t d = 1; d <= 200; ++d) {
    const int c = tl::head_dim_class(d);
    if (d > tl::kMaxHeadDim) {
      CHECK(c == 0);
      continue;
    }
    CHECK(c >= d);
    CHECK((c == 32 || c == 64 || c == 128));
    CHECK((c == 32 || c / 2 < d));  // the smallest class that holds d
  }
}

TEST_CASE("layernorm's row chunks cover the rows within the chunk and memory limits",
          "[cuda][tiling]") {
  for (const std::int64_t columns : {1, 48, 768, 12288}) {
    for (std::int64_t rows = 1; rows < 300000; rows += rows / 3 + 1) {
      const tl::ColumnChunks c = tl::column_chunks(rows, columns);
      INFO("rows " << rows << ", columns " << columns);
      CHECK(c.chunk_rows % tl::kRowLanes == 0);
      CHECK(c.chunks * c.chunk_rows >= rows);
      CHECK((c.chunks - 1) * c.chunk_rows < rows);  // no empty chunk
      CHECK(c.chunks >= 1);
      CHECK(c.chunks <= tl::kMaxChunks);
      // Several chunks only when each has enough rows and the partials fit in 2 floats per row.
      CHECK((c.chunks == 1 || c.chunk_rows >= tl::kMinChunkRows));
      CHECK((c.chunks == 1 || c.chunks * columns <= rows));
    }
  }
  STATIC_REQUIRE(tl::column_chunks(4096, 32).chunks == 128);
  STATIC_REQUIRE(tl::column_chunks(4096, 768).chunks == 5);
}

TEST_CASE("the radix sort's key bits hold every key", "[cuda][tiling]") {
  for (std::int64_t k = 0; k < 5000; ++k) {
    const int bits = tl::key_bits(k);
    CHECK((std::int64_t{1} << bits) > k);
    CHECK((bits == 1 || (std::int64_t{1} << (bits - 1)) <= k));  // and no more
  }
  STATIC_REQUIRE(tl::key_bits(50257) == 16);
}
