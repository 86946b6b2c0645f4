// carto/runtime/checkpoint.hpp — a Trainer's whole state saved as one folder and loaded back,
// onto the same plan (bitwise) or onto another plan, mesh or precision (resharded).
//
// Design note (DESIGN.md §7, checkpoints; the folder's layout is in checkpoint_format.hpp).
// save_checkpoint and load_checkpoint are collective: every rank of the trainer's world calls them
// with the same folder, which all ranks must see (one machine, or a shared filesystem).
//
// Saving is atomic. Rank 0 makes an empty temporary folder beside the target (`.NAME.partial`),
// each rank writes and syncs its file there (AtomicFile), rank 0 gathers every file's size, CRC-32
// and pieces, writes and syncs the manifest, syncs the folder and swaps it with the target in one
// rename (renameat2 RENAME_EXCHANGE; a plain rename when there is no target yet), syncs the parent
// folder and removes the old state. A process killed at any point leaves the previous checkpoint
// whole (and at most a stale `.NAME.partial`, removed by the next save). A target that exists and
// is not a checkpoint folder is refused, never replaced.
//
// Loading checks the manifest (parse_checkpoint_manifest), then that it is for this model (the
// parameters' count, shapes and fingerprint), then each file it reads: size, CRC-32, header. When
// this rank's layout is the saved one (same mesh, precision, ZeRO stage and stored specs), the rank
// reads only its own file and copies the bytes back: the next steps are bitwise those of an
// uninterrupted run. Otherwise it reads every rank's file, assembles each parameter's whole weights
// (the fp32 master under mixed_bf16, else the value), m and v in fp32, and keeps its own box and
// chunk of them (rounded to bf16 for a mixed_bf16 value). The step count (AdamW's bias correction),
// the seed (parameter and dropout streams, which are functions of seed and step) and the data
// position come back too. A failure on any rank is an error on every rank, never a hang.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "carto/error.hpp"
#include "carto/runtime/bf16.hpp"
#include "carto/runtime/checkpoint_format.hpp"
#include "carto/runtime/trainer.hpp"
#include "carto/search/plan_io.hpp"
#include "carto/util/files.hpp"

namespace carto {

struct CheckpointSaveOptions {
  // Called on every rank after each stage of a save: "prepared" (the temporary folder exists),
  // "rank_file" (this rank's file is synced), "manifest" (rank 0 only: the manifest is synced,
  // the folder not yet in place), "done". For tests that kill the writer in the middle.
  std::function<void(std::string_view stage)> after_stage{};
};

struct CheckpointLoadInfo {
  bool resharded = false;  // this rank assembled its state from every file (another layout)
  std::int64_t step = 0;
  std::int64_t data_position = 0;
};

namespace ckpt_detail {

using Buf = Executor::StateBuffer;
inline constexpr std::array<Buf, 4> kBuffers = {Buf::value, Buf::master, Buf::m, Buf::v};

inline std::string join(const std::string& dir, std::string_view name) {
  return detail::concat(dir, "/", name);
}

// The target folder without trailing slashes, and its temporary sibling `.NAME.partial`.
inline std::string normalized(std::string dir) {
  if (dir.empty()) detail::fail("carto: the checkpoint folder path is empty; give a folder path");
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}
inline std::string partial_of(const std::string& dir) {
  const std::string parent = detail::parent_folder(dir);
  const std::size_t slash = dir.find_last_of('/');
  const std::string name = slash == std::string::npos ? dir : dir.substr(slash + 1);
  return join(parent, detail::concat(".", name, ".partial"));
}

inline void sync_folder(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    detail::fail("carto: cannot open the folder '", folder,
                 "' to sync it: ", detail::os_reason(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0)
    detail::fail("carto: cannot sync the folder '", folder, "': ", detail::os_reason(err));
}

// Throws on every rank when some rank failed: its own error there; elsewhere the first failing
// rank's message (its first 240 bytes, carried as one float per byte).
inline void agree(Communicator& world, const std::exception_ptr& error, std::string_view what) {
  constexpr std::size_t kText = 240;
  std::vector<float> mine(kText + 1, 0.0f);
  if (error) {
    mine[0] = 1.0f;
    std::string message = "an unknown exception";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    for (std::size_t i = 0; i < message.size() && i < kText; ++i)
      mine[i + 1] = static_cast<float>(static_cast<unsigned char>(message[i]));
  }
  std::vector<float> all(mine.size() * static_cast<std::size_t>(world.size()), 0.0f);
  world.all_gather(std::span<const float>(mine), std::span<float>(all)).wait();
  if (error) std::rethrow_exception(error);
  for (std::size_t r = 0; r < static_cast<std::size_t>(world.size()); ++r) {
    const float* at = all.data() + r * mine.size();
    if (at[0] == 0) continue;
    std::string message;
    for (std::size_t i = 1; i <= kText && at[i] != 0; ++i)
      message.push_back(static_cast<char>(static_cast<unsigned char>(at[i])));
    detail::fail("carto: ", what, " failed on rank ", r, ": ", message);
  }
}

template <class F>
std::exception_ptr attempt(F&& f) {
  try {
    f();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// Integers through the float collectives: 16 bits per float (exact), 4 floats per value >= 0.
inline void put_u64(std::vector<float>& out, std::uint64_t v) {
  for (int k = 0; k < 4; ++k) out.push_back(static_cast<float>((v >> (16 * k)) & 0xffffu));
}
inline std::uint64_t get_u64(const float* in) {
  std::uint64_t v = 0;
  for (int k = 0; k < 4; ++k) v |= static_cast<std::uint64_t>(in[k]) << (16 * k);
  return v;
}

inline void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) out.push_back(static_cast<char>((v >> (8 * k)) & 0xffu));
}
inline std::uint64_t get_le(std::string_view in, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int k = 0; k < bytes; ++k)
    v |=
        static_cast<std::uint64_t>(static_cast<unsigned char>(in[at + static_cast<std::size_t>(k)]))
        << (8 * k);
  return v;
}

// Calls f(global_index, k) for elements [begin, begin + count) of the row-major flat box `box` of
// a tensor of shape `global`.
template <class F>
void for_box_range(const TensorShape& global, const Slice& box, std::int64_t begin,
                   std::int64_t count, F&& f) {
  const std::size_t r = global.rank();
  std::vector<std::int64_t> stride(r, 1), idx(r, 0);
  for (std::size_t d = r; d-- > 1;) stride[d - 1] = stride[d] * global.dims()[d].extent;
  std::int64_t rest = begin;
  for (std::size_t d = r; d-- > 0;) {
    idx[d] = rest % box.extent[d];
    rest /= box.extent[d];
  }
  for (std::int64_t k = 0; k < count; ++k) {
    std::int64_t gi = 0;
    for (std::size_t d = 0; d < r; ++d) gi += (box.offset[d] + idx[d]) * stride[d];
    f(gi, k);
    for (std::size_t d = r; d-- > 0;) {
      if (++idx[d] < box.extent[d]) break;
      idx[d] = 0;
    }
  }
}

// This rank's pieces (offsets from the header on, in order) and the file's bytes.
inline std::vector<CheckpointPiece> own_pieces(Executor& ex, std::string* payload) {
  std::vector<CheckpointPiece> out;
  std::int64_t offset = kCheckpointHeaderBytes;
  const std::vector<TensorId> params = ex.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    for (Buf b : kBuffers) {
      const Executor::StatePiece s = ex.state_piece(params[i], b);
      if (!s.held) continue;
      out.push_back({.parameter = static_cast<std::int64_t>(i),
                     .buffer = static_cast<CheckpointBuffer>(b),
                     .dtype = s.dtype,
                     .offset = offset,
                     .begin = s.begin,
                     .count = s.count});
      offset += s.count * size_bytes(s.dtype);
      if (payload != nullptr) {
        const std::vector<std::byte> bytes = ex.state_bytes(params[i], b);
        payload->append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      }
    }
  }
  return out;
}

inline std::string rank_header(std::int64_t rank, std::int64_t ranks) {
  std::string h(kCheckpointMagic);
  put_le(h, kCheckpointFileVersion, 4);
  put_le(h, static_cast<std::uint64_t>(rank), 4);
  put_le(h, static_cast<std::uint64_t>(ranks), 8);
  put_le(h, 0, 8);  // reserved
  return h;
}

// The checked content of rank `r`'s file.
inline std::string read_rank_file(const std::string& dir, const CheckpointManifest& m,
                                  std::size_t r) {
  const CheckpointRank& want = m.ranks[r];
  const std::string path = join(dir, want.file);
  const std::int64_t size = check_input_file(path, kInt64Max, "checkpoint rank file");
  if (size != want.bytes)
    detail::fail("carto: checkpoint rank file '", path, "' has ", size,
                 " bytes; the manifest says ", want.bytes,
                 size < want.bytes ? " (a truncated file)" : " (a different file)");
  std::string data = read_file_bounded(path, want.bytes, "checkpoint rank file");
  const std::uint32_t crc = crc32(std::as_bytes(std::span<const char>(data)));
  if (crc != want.crc32)
    detail::fail("carto: checkpoint rank file '", path, "' has CRC-32 ", detail::hex32(crc),
                 "; the manifest says ", detail::hex32(want.crc32), " (the file is corrupted)");
  if (data.compare(0, kCheckpointHeaderBytes,
                   rank_header(static_cast<std::int64_t>(r),
                               static_cast<std::int64_t>(m.ranks.size()))) != 0)
    detail::fail("carto: checkpoint rank file '", path, "' does not start with the header of rank ",
                 r, " of ", m.ranks.size());
  return data;
}

// The manifest of `dir` checked against the trainer's model.
inline CheckpointManifest checked_manifest(const std::string& dir, const Trainer& trainer) {
  const std::string path = join(dir, kCheckpointManifestName);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    detail::fail("carto: '", dir, "' is not a checkpoint folder: ",
                 ::stat(dir.c_str(), &st) != 0 ? detail::os_reason(errno) : "not a folder");
  CheckpointManifest m;
  try {
    m = parse_checkpoint_manifest(
        read_file_bounded(path, kMaxCheckpointManifestBytes, "checkpoint manifest"));
  } catch (const Error& e) {
    detail::fail("carto: cannot load checkpoint '", dir, "': ", e.what());
  }
  const std::vector<TensorShape> shapes = parameter_shapes(trainer.graph());
  if (m.parameters.size() != shapes.size() || m.fingerprint != checkpoint_fingerprint(shapes)) {
    std::string first;
    for (std::size_t i = 0; i < shapes.size() && i < m.parameters.size() && first.empty(); ++i)
      if (!(shapes[i] == m.parameters[i].shape))
        first = detail::concat("; parameter ", i, " is ", m.parameters[i].shape, " there and ",
                               shapes[i], " here");
    detail::fail("carto: checkpoint '", dir, "' is of another model: model '", m.model, "' with ",
                 m.parameters.size(), " parameters (fingerprint ", m.fingerprint,
                 "); this trainer's model has ", shapes.size(), " (fingerprint ",
                 checkpoint_fingerprint(shapes), ")", first);
  }
  return m;
}

// Rank `rank`'s state from its own file: the same layout, bytes copied back.
inline void load_same_layout(Executor& ex, const std::string& dir, const CheckpointManifest& m,
                             std::size_t rank) {
  const std::string data = read_rank_file(dir, m, rank);
  const std::vector<TensorId> params = ex.parameters();
  for (const CheckpointPiece& p : m.ranks[rank].pieces) {
    const auto n = static_cast<std::size_t>(p.count * size_bytes(p.dtype));
    ex.set_state_bytes(
        params[static_cast<std::size_t>(p.parameter)], static_cast<Buf>(p.buffer),
        std::as_bytes(std::span<const char>(data).subspan(static_cast<std::size_t>(p.offset), n)));
  }
}

// Rank `rank`'s state assembled from every file: another layout.
inline void load_resharded(Executor& ex, const std::string& dir, const CheckpointManifest& m) {
  std::vector<std::string> files;
  for (std::size_t r = 0; r < m.ranks.size(); ++r) files.push_back(read_rank_file(dir, m, r));
  const bool saved_mixed = m.precision == Precision::mixed_bf16;
  const std::vector<TensorId> params = ex.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const CheckpointParameter& cp = m.parameters[i];
    const auto n = static_cast<std::size_t>(cp.shape.numel());
    // weights, m, v: the whole tensors, and which elements some piece gave.
    std::array<std::vector<float>, 3> whole;
    std::array<std::vector<bool>, 3> have;
    for (std::size_t k = 0; k < 3; ++k) whole[k].assign(n, 0.0f), have[k].assign(n, false);
    for (std::size_t r = 0; r < m.ranks.size(); ++r) {
      const Slice box = device_slice(cp.shape, cp.spec, m.mesh, static_cast<std::int64_t>(r));
      for (const CheckpointPiece& p : m.ranks[r].pieces) {
        if (p.parameter != static_cast<std::int64_t>(i)) continue;
        if (p.buffer == CheckpointBuffer::value && saved_mixed) continue;  // the master's rounding
        const std::size_t k = p.buffer == CheckpointBuffer::m   ? 1
                              : p.buffer == CheckpointBuffer::v ? 2
                                                                : 0;
        const char* at = files[r].data() + p.offset;
        for_box_range(cp.shape, box, p.begin, p.count, [&](std::int64_t gi, std::int64_t e) {
          float x = 0;
          if (p.dtype == DType::bf16) {
            Bf16 h;
            std::memcpy(&h.bits, at + e * 2, 2);
            x = to_float(h);
          } else {
            std::memcpy(&x, at + e * 4, 4);
          }
          whole[k][static_cast<std::size_t>(gi)] = x;
          have[k][static_cast<std::size_t>(gi)] = true;
        });
      }
    }
    for (std::size_t k = 0; k < 3; ++k) {
      for (std::size_t e = 0; e < n; ++e)
        if (!have[k][e])
          detail::fail("carto: checkpoint '", dir, "': no rank file holds element ", e, " of ",
                       k == 0   ? "the weights"
                       : k == 1 ? "AdamW's m"
                                : "AdamW's v",
                       " of parameter ", i, " (", cp.shape, ")");
    }
    const Slice mine = device_slice(cp.shape, ex.stored_spec(params[i]), ex.mesh(), ex.device());
    for (Buf b : kBuffers) {
      const Executor::StatePiece s = ex.state_piece(params[i], b);
      if (!s.held) continue;
      const std::size_t k = b == Buf::m ? 1 : b == Buf::v ? 2 : 0;
      std::vector<float> values(static_cast<std::size_t>(s.count));
      for_box_range(cp.shape, mine, s.begin, s.count, [&](std::int64_t gi, std::int64_t e) {
        values[static_cast<std::size_t>(e)] = whole[k][static_cast<std::size_t>(gi)];
      });
      ex.set_state_values(params[i], b, values);
    }
  }
}

}  // namespace ckpt_detail

// Checks, before long work starts, that a checkpoint can be saved to `dir`: its parent folder
// exists and is writable, and `dir` is absent, empty or a checkpoint folder (never replaced
// otherwise). Not collective.
inline void check_checkpoint_target(const std::string& folder) {
  const std::string dir = ckpt_detail::normalized(folder);
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    std::error_code ec;
    const bool checkpoint =
        S_ISDIR(st.st_mode) &&
        (std::filesystem::is_empty(dir, ec) ||
         ::access(ckpt_detail::join(dir, kCheckpointManifestName).c_str(), F_OK) == 0);
    if (!checkpoint)
      detail::fail("carto: cannot save a checkpoint to '", dir,
                   "': it exists and is not a checkpoint folder; give a new path");
  }
  const std::string parent = detail::parent_folder(dir);
  if (::stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    detail::fail("carto: cannot save a checkpoint to '", dir, "': its folder '", parent,
                 "' does not exist");
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    detail::fail("carto: cannot save a checkpoint to '", dir, "': its folder '", parent,
                 "': ", detail::os_reason(errno));
}

// Saves the trainer's whole state into folder `dir` (see the note above). Collective.
inline void save_checkpoint(Trainer& trainer, const std::string& folder,
                            const CheckpointSaveOptions& options = {}) {
  using namespace ckpt_detail;
  const std::string dir = normalized(folder);
  const std::string partial = partial_of(dir);
  Executor& ex = trainer.executor();
  Communicator& world = trainer.comms().world();
  const auto rank = static_cast<std::size_t>(world.rank());
  const auto ranks = static_cast<std::size_t>(world.size());
  auto stage = [&](std::string_view s) {
    if (options.after_stage) options.after_stage(s);
  };
  std::exception_ptr error;
  if (rank == 0) {
    error = attempt([&] {
      check_checkpoint_target(dir);
      std::error_code ec;
      std::filesystem::remove_all(partial, ec);
      if (ec)
        detail::fail("carto: cannot save a checkpoint to '", dir, "': cannot remove the stale '",
                     partial, "': ", ec.message());
      if (::mkdir(partial.c_str(), 0777) != 0)
        detail::fail("carto: cannot save a checkpoint to '", dir, "': cannot create '", partial,
                     "': ", detail::os_reason(errno));
    });
  }
  agree(world, error, "saving a checkpoint");
  stage("prepared");
  std::string payload;
  std::vector<CheckpointPiece> pieces;
  std::uint32_t crc = 0;
  error = attempt([&] {
    pieces = own_pieces(ex, &payload);
    const std::string header =
        rank_header(static_cast<std::int64_t>(rank), static_cast<std::int64_t>(ranks));
    Crc32 c;
    c.update(std::as_bytes(std::span<const char>(header)));
    c.update(std::as_bytes(std::span<const char>(payload)));
    crc = c.value();
    AtomicFile file(join(partial, checkpoint_rank_file(static_cast<std::int64_t>(rank))),
                    "checkpoint rank file");
    file.write(header);
    file.write(payload);
    file.commit();
  });
  agree(world, error, "saving a checkpoint");
  stage("rank_file");
  // Every rank's size, CRC and pieces to rank 0 (every rank has the same number of pieces).
  std::vector<float> info;
  put_u64(info, static_cast<std::uint64_t>(kCheckpointHeaderBytes) + payload.size());
  put_u64(info, crc);
  for (const CheckpointPiece& p : pieces) {
    put_u64(info, static_cast<std::uint64_t>(p.offset));
    put_u64(info, static_cast<std::uint64_t>(p.begin));
    put_u64(info, static_cast<std::uint64_t>(p.count));
  }
  std::vector<float> all(info.size() * ranks);
  world.all_gather(std::span<const float>(info), std::span<float>(all)).wait();
  if (rank == 0) {
    error = attempt([&] {
      CheckpointManifest m;
      m.model = trainer.plan().model;
      const std::vector<TensorShape> shapes = parameter_shapes(trainer.graph());
      m.fingerprint = checkpoint_fingerprint(shapes);
      m.precision = ex.precision();
      m.zero_stage = ex.zero_stage();
      m.mesh = ex.mesh();
      m.step = ex.step_count();
      m.seed = ex.seed();
      m.data_position = trainer.data_position();
      const std::vector<TensorId> params = ex.parameters();
      for (std::size_t i = 0; i < params.size(); ++i)
        m.parameters.push_back({.shape = shapes[i], .spec = ex.stored_spec(params[i])});
      for (std::size_t r = 0; r < ranks; ++r) {
        const float* at = all.data() + r * info.size();
        CheckpointRank cr{.file = checkpoint_rank_file(static_cast<std::int64_t>(r)),
                          .bytes = static_cast<std::int64_t>(get_u64(at)),
                          .crc32 = static_cast<std::uint32_t>(get_u64(at + 4)),
                          .pieces = pieces};
        for (std::size_t k = 0; k < pieces.size(); ++k) {
          cr.pieces[k].offset = static_cast<std::int64_t>(get_u64(at + 8 + 12 * k));
          cr.pieces[k].begin = static_cast<std::int64_t>(get_u64(at + 12 + 12 * k));
          cr.pieces[k].count = static_cast<std::int64_t>(get_u64(at + 16 + 12 * k));
        }
        m.ranks.push_back(std::move(cr));
      }
      m.plan = to_json(trainer.plan());
      atomic_write(join(partial, kCheckpointManifestName), to_json(m).dump(1) + "\n",
                   "checkpoint manifest");
      sync_folder(partial);
      stage("manifest");
      const std::string parent = detail::parent_folder(dir);
      if (::access(dir.c_str(), F_OK) != 0) {
        if (::rename(partial.c_str(), dir.c_str()) != 0)
          detail::fail("carto: cannot save a checkpoint to '", dir, "': renaming '", partial,
                       "' failed: ", detail::os_reason(errno));
      } else if (::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) !=
                 0) {
        detail::fail("carto: cannot save a checkpoint to '", dir, "': swapping it with '", partial,
                     "' failed: ", detail::os_reason(errno),
                     "; the previous checkpoint is unchanged");
      }
      sync_folder(parent);
      std::error_code ec;
      std::filesystem::remove_all(partial, ec);  // the previous state; a failure leaves it stale
    });
  }
  agree(world, error, "saving a checkpoint");
  stage("done");
}

// Loads the trainer's whole state from folder `dir`, resharding when the trainer's plan, mesh or
// precision differ from the saved ones (see the note above). Collective.
inline CheckpointLoadInfo load_checkpoint(Trainer& trainer, const std::string& folder) {
  using namespace ckpt_detail;
  const std::string dir = normalized(folder);
  Executor& ex = trainer.executor();
  Communicator& world = trainer.comms().world();
  const auto rank = static_cast<std::size_t>(world.rank());
  CheckpointLoadInfo info;
  const std::exception_ptr error = attempt([&] {
    const CheckpointManifest m = checked_manifest(dir, trainer);
    bool same = m.mesh == ex.mesh() && m.precision == ex.precision() &&
                m.zero_stage == ex.zero_stage() && rank < m.ranks.size();
    const std::vector<TensorId> params = ex.parameters();
    for (std::size_t i = 0; same && i < params.size(); ++i)
      same = m.parameters[i].spec == ex.stored_spec(params[i]);
    if (same) {
      const std::vector<CheckpointPiece> mine = own_pieces(ex, nullptr);
      same = mine == m.ranks[rank].pieces;
    }
    if (same) {
      load_same_layout(ex, dir, m, rank);
    } else {
      load_resharded(ex, dir, m);
    }
    ex.restore_step(m.step, m.seed);
    trainer.set_data_position(m.data_position);
    info = {.resharded = !same, .step = m.step, .data_position = m.data_position};
  });
  agree(world, error, "loading a checkpoint");
  return info;
}

}  // namespace carto
