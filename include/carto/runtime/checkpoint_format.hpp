// carto/runtime/checkpoint_format.hpp — what a sharded checkpoint folder holds, and the checks of
// its manifest.
//
// Design note (DESIGN.md §7, checkpoints). A checkpoint is one folder: `manifest.json` and one file
// per rank, `rank-00000.bin`, ... A rank file is a 32-byte header (the magic "cartock1", the format
// version, the rank and the rank count as little-endian integers) followed by the raw bytes of its
// pieces. A piece is one state buffer of one parameter as the rank held it (Executor::StateBuffer:
// the compute value, the fp32 master under mixed_bf16, AdamW's m and v): elements [begin, begin +
// count) of the rank's flat local tensor of that parameter (its box device_slice(shape, spec, mesh,
// rank), row-major), in its dtype, at byte `offset` of the file. The manifest
// ("carto-checkpoint/1") records the model (name, the parameters' fingerprint, each parameter's
// shape and stored spec), the mesh, precision and ZeRO stage, the step count, RNG seed and data
// position, the plan (as plan_io writes it, for the record), and per rank its file, byte count,
// CRC-32 and pieces. So a loader on the same layout copies its own file's bytes back (bitwise), and
// one on any other plan, mesh or precision assembles each parameter's whole value, m and v from
// every file's pieces. parse_checkpoint_manifest checks every field (types, ranges, that each piece
// lies inside its file and its rank's box) and names the field that is wrong; it is a separate
// function so a fuzzer can call it on any text.
#pragma once

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/profile/options.hpp"
#include "carto/spec/dtype.hpp"
#include "carto/spec/layout.hpp"
#include "carto/spec/text.hpp"
#include "carto/util/checked.hpp"
#include "carto/util/json.hpp"

namespace carto {

inline constexpr std::string_view kCheckpointFormat = "carto-checkpoint/1";
inline constexpr std::string_view kCheckpointManifestName = "manifest.json";
inline constexpr std::int64_t kMaxCheckpointManifestBytes = std::int64_t{64} << 20;  // 64 MiB
inline constexpr std::int64_t kMaxCheckpointParameters = std::int64_t{1} << 20;
inline constexpr std::int64_t kCheckpointHeaderBytes = 32;
inline constexpr std::string_view kCheckpointMagic = "cartock1";
inline constexpr std::uint32_t kCheckpointFileVersion = 1;

// CRC-32 of IEEE 802.3 (reflected polynomial 0xEDB88320, initial value and final XOR 0xFFFFFFFF),
// as zlib's crc32 computes it; the check value of "123456789" is 0xCBF43926.
class Crc32 {
 public:
  void update(std::span<const std::byte> bytes) {
    static const std::array<std::uint32_t, 256> table = [] {
      std::array<std::uint32_t, 256> t{};
      for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1u) != 0 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        t[i] = c;
      }
      return t;
    }();
    for (std::byte b : bytes)
      state_ = table[(state_ ^ static_cast<std::uint32_t>(b)) & 0xffu] ^ (state_ >> 8);
  }
  [[nodiscard]] std::uint32_t value() const { return state_ ^ 0xFFFFFFFFu; }

 private:
  std::uint32_t state_ = 0xFFFFFFFFu;
};

inline std::uint32_t crc32(std::span<const std::byte> bytes) {
  Crc32 c;
  c.update(bytes);
  return c.value();
}

// The state buffers of a parameter (Executor::StateBuffer, in the same order).
enum class CheckpointBuffer : std::uint8_t { value, master, m, v };
inline constexpr std::array<std::string_view, 4> kCheckpointBufferNames = {"value", "master", "m",
                                                                           "v"};

struct CheckpointPiece {
  std::int64_t parameter = 0;  // ordinal among the graph's parameters, in tensor-id order
  CheckpointBuffer buffer = CheckpointBuffer::value;
  DType dtype = DType::fp32;
  std::int64_t offset = 0;  // bytes into the rank file
  std::int64_t begin = 0;   // first element of the flat local tensor
  std::int64_t count = 0;
  friend bool operator==(const CheckpointPiece&, const CheckpointPiece&) = default;
};

struct CheckpointRank {
  std::string file;
  std::int64_t bytes = 0;
  std::uint32_t crc32 = 0;
  std::vector<CheckpointPiece> pieces{};
};

struct CheckpointParameter {
  TensorShape shape{};
  ShardingSpec spec{};  // its stored spec when saved
};

struct CheckpointManifest {
  std::string model{};
  std::string fingerprint{};  // checkpoint_fingerprint of the parameters' shapes
  Precision precision = Precision::fp32;
  int zero_stage = 0;
  DeviceMesh mesh{};
  std::int64_t step = 0;
  std::uint64_t seed = 0;
  std::int64_t data_position = 0;
  std::vector<CheckpointParameter> parameters{};
  std::vector<CheckpointRank> ranks{};
  Json plan{};  // plan_io's JSON of the plan it was trained with (for the record)
};

// The file name of rank `rank`'s state: rank-00000.bin, ...
inline std::string checkpoint_rank_file(std::int64_t rank) {
  std::string digits = std::to_string(rank);
  if (digits.size() < 5) digits.insert(0, 5 - digits.size(), '0');
  return "rank-" + digits + ".bin";
}

namespace detail {
inline std::string hex32(std::uint32_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(8, '0');
  for (int i = 7; i >= 0; --i, v >>= 4) out[static_cast<std::size_t>(i)] = kHex[v & 0xfu];
  return out;
}
}  // namespace detail

// The CRC-32 (8 hex digits) of the parameters' count and shapes in their text form ("n;a=4,b=8;
// ..."), in order: what a checkpoint must match to load into a model.
inline std::string checkpoint_fingerprint(std::span<const TensorShape> shapes) {
  std::string text = std::to_string(shapes.size());
  for (const TensorShape& s : shapes) text += ";" + to_string(s);
  return detail::hex32(crc32(std::as_bytes(std::span<const char>(text))));
}

// The shapes of a graph's parameters, in tensor-id order (the order Executor::parameters gives).
inline std::vector<TensorShape> parameter_shapes(const Graph& g) {
  std::vector<TensorShape> out;
  for (const TensorInfo& t : g.tensors())
    if (t.kind == TensorKind::parameter) out.push_back(t.shape);
  return out;
}

namespace detail {

// The member `key` of object `j` (at `path`), or an error naming the field.
inline const Json& manifest_field(const Json& j, std::string_view path, std::string_view key) {
  const std::string where = path.empty() ? std::string(key) : concat(path, ".", key);
  if (!j.is_object()) fail("carto: checkpoint manifest: field '", path, "' must be an object");
  const Json* v = j.find(key);
  if (v == nullptr) fail("carto: checkpoint manifest: field '", where, "' is missing");
  return *v;
}

inline std::int64_t manifest_int(const Json& v, std::string_view what, std::int64_t least,
                                 std::int64_t most) {
  if (!v.is_int())
    fail("carto: checkpoint manifest: field '", what, "' must be an integer in [", least, ", ",
         most, "]");
  const std::int64_t x = v.as_int();
  if (x < least || x > most)
    fail("carto: checkpoint manifest: field '", what, "' is ", x, "; it must be in [", least, ", ",
         most, "]");
  return x;
}

inline const std::string& manifest_string(const Json& v, std::string_view what) {
  if (!v.is_string()) fail("carto: checkpoint manifest: field '", what, "' must be a string");
  return v.as_string();
}

inline const Json::Array& manifest_array(const Json& v, std::string_view what, std::int64_t most) {
  if (!v.is_array()) fail("carto: checkpoint manifest: field '", what, "' must be an array");
  if (static_cast<std::int64_t>(v.as_array().size()) > most)
    fail("carto: checkpoint manifest: field '", what, "' has ", v.as_array().size(),
         " entries; at most ", most, " are accepted");
  return v.as_array();
}

// Text parsed by `parse` (parse_shape, parse_spec, parse_mesh), its error prefixed with the field.
template <class F>
auto manifest_text(const Json& v, std::string_view what, F&& parse) {
  const std::string& text = manifest_string(v, what);
  try {
    return parse(text);
  } catch (const Error& e) {
    fail("carto: checkpoint manifest: field '", what, "' is not valid (", e.what(), ")");
  }
}

inline std::uint64_t manifest_u64(const Json& v, std::string_view what) {
  const std::string& text = manifest_string(v, what);
  std::uint64_t x = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    fail("carto: checkpoint manifest: field '", what,
         "' must be a decimal unsigned 64-bit integer in a string; got '", text.substr(0, 40), "'");
  return x;
}

inline std::uint32_t manifest_hex32(const Json& v, std::string_view what) {
  const std::string& text = manifest_string(v, what);
  std::uint32_t x = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x, 16);
  if (text.size() != 8 || ec != std::errc() || end != text.data() + text.size())
    fail("carto: checkpoint manifest: field '", what, "' must be 8 hex digits; got '",
         text.substr(0, 40), "'");
  return x;
}

inline CheckpointPiece manifest_piece(const Json& v, const std::string& what,
                                      const CheckpointManifest& m, std::int64_t rank,
                                      std::int64_t file_bytes) {
  const Json::Array& a = manifest_array(v, what, 6);
  if (a.size() != 6)
    fail("carto: checkpoint manifest: field '", what,
         "' must be [parameter, buffer, dtype, offset, begin, count]");
  CheckpointPiece p;
  p.parameter = manifest_int(a[0], what + "[0] (parameter)", 0,
                             static_cast<std::int64_t>(m.parameters.size()) - 1);
  const std::string& buffer = manifest_string(a[1], what + "[1] (buffer)");
  std::size_t b = 0;
  while (b < kCheckpointBufferNames.size() && kCheckpointBufferNames[b] != buffer) ++b;
  if (b == kCheckpointBufferNames.size())
    fail("carto: checkpoint manifest: field '", what, "[1] (buffer)' is '", buffer.substr(0, 40),
         "'; use value, master, m or v");
  p.buffer = static_cast<CheckpointBuffer>(b);
  const bool mixed = m.precision == Precision::mixed_bf16;
  if (p.buffer == CheckpointBuffer::master && !mixed)
    fail("carto: checkpoint manifest: field '", what, "' is a master piece in an fp32 checkpoint");
  const DType want = p.buffer == CheckpointBuffer::value ? compute_dtype(m.precision) : DType::fp32;
  const std::string& dtype = manifest_string(a[2], what + "[2] (dtype)");
  if (dtype != to_string_view(want))
    fail("carto: checkpoint manifest: field '", what, "[2] (dtype)' is '", dtype.substr(0, 40),
         "'; a ", to_string_view(m.precision), " checkpoint holds its ", buffer, " in ",
         to_string_view(want));
  p.dtype = want;
  p.offset = manifest_int(a[3], what + "[3] (offset)", kCheckpointHeaderBytes, file_bytes);
  const CheckpointParameter& param = m.parameters[static_cast<std::size_t>(p.parameter)];
  const std::int64_t local = local_shape(param.shape, param.spec, m.mesh).numel();
  p.begin = manifest_int(a[4], what + "[4] (begin)", 0, local);
  p.count = manifest_int(a[5], what + "[5] (count)", 0, local - p.begin);
  const std::int64_t end =
      checked_add(p.offset, checked_mul(p.count, size_bytes(p.dtype), what), what);
  if (end > file_bytes)
    fail("carto: checkpoint manifest: field '", what, "' ends at byte ", end, " of rank ", rank,
         "'s file, which has ", file_bytes);
  return p;
}

}  // namespace detail

inline Json to_json(const CheckpointManifest& m) {
  Json j;
  j["format"] = kCheckpointFormat;
  j["model"] = m.model;
  j["fingerprint"] = m.fingerprint;
  j["precision"] = std::string(to_string_view(m.precision));
  j["zero_stage"] = m.zero_stage;
  std::string mesh;  // "x=2,y=2", as parse_mesh reads it
  for (const MeshAxis& a : m.mesh.axes())
    mesh += detail::concat(mesh.empty() ? "" : ",", a.name.view(), "=", a.size);
  j["mesh"] = mesh;
  j["step"] = m.step;
  j["seed"] = std::to_string(m.seed);
  j["data_position"] = m.data_position;
  j["parameters"] = Json::array();
  for (const CheckpointParameter& p : m.parameters) {
    Json o;
    o["shape"] = to_string(p.shape);
    o["spec"] = to_string(p.spec);
    j["parameters"].push_back(o);
  }
  j["ranks"] = Json::array();
  for (const CheckpointRank& r : m.ranks) {
    Json o;
    o["file"] = r.file;
    o["bytes"] = r.bytes;
    o["crc32"] = detail::hex32(r.crc32);
    o["pieces"] = Json::array();
    for (const CheckpointPiece& p : r.pieces) {
      Json a = Json::array();
      a.push_back(p.parameter);
      a.push_back(kCheckpointBufferNames[static_cast<std::size_t>(p.buffer)]);
      a.push_back(std::string(to_string_view(p.dtype)));
      a.push_back(p.offset);
      a.push_back(p.begin);
      a.push_back(p.count);
      o["pieces"].push_back(a);
    }
    j["ranks"].push_back(o);
  }
  j["plan"] = m.plan.is_null() ? Json::object() : m.plan;
  return j;
}

// Reads a manifest's text and checks it on its own (not against a model): every field present
// with its type and range, the fingerprint that of the listed shapes, each spec valid for the
// mesh, one rank entry per device naming its own file, and every piece inside its file and its
// rank's local tensor. Throws carto::Error naming the field.
inline CheckpointManifest parse_checkpoint_manifest(std::string_view text) {
  using namespace detail;
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Error& e) {
    fail("carto: checkpoint manifest is not valid JSON (", e.what(), ")");
  }
  CheckpointManifest m;
  const std::string& format = manifest_string(manifest_field(j, "", "format"), "format");
  if (format != kCheckpointFormat)
    fail("carto: checkpoint manifest: field 'format' is '", format.substr(0, 40),
         "'; this carto reads '", kCheckpointFormat, "'");
  m.model = manifest_string(manifest_field(j, "", "model"), "model");
  m.fingerprint = manifest_string(manifest_field(j, "", "fingerprint"), "fingerprint");
  const std::string& precision = manifest_string(manifest_field(j, "", "precision"), "precision");
  if (precision != "fp32" && precision != "mixed_bf16")
    fail("carto: checkpoint manifest: field 'precision' is '", precision.substr(0, 40),
         "'; use fp32 or mixed_bf16");
  m.precision = precision == "fp32" ? Precision::fp32 : Precision::mixed_bf16;
  m.zero_stage =
      static_cast<int>(manifest_int(manifest_field(j, "", "zero_stage"), "zero_stage", 0, 3));
  m.mesh = manifest_text(manifest_field(j, "", "mesh"), "mesh",
                         [](const std::string& s) { return parse_mesh(s); });
  const std::int64_t devices = check_at_most(m.mesh.num_devices(), kMaxDevices,
                                             "checkpoint manifest: the mesh's device count");
  m.step = manifest_int(manifest_field(j, "", "step"), "step", 0, kInt64Max);
  m.seed = manifest_u64(manifest_field(j, "", "seed"), "seed");
  m.data_position =
      manifest_int(manifest_field(j, "", "data_position"), "data_position", 0, kInt64Max);
  const Json::Array& params =
      manifest_array(manifest_field(j, "", "parameters"), "parameters", kMaxCheckpointParameters);
  std::vector<TensorShape> shapes;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string where = concat("parameters[", i, "]");
    CheckpointParameter p;
    p.shape = manifest_text(manifest_field(params[i], where, "shape"), where + ".shape",
                            [](const std::string& s) { return parse_shape(s); });
    p.spec = manifest_text(manifest_field(params[i], where, "spec"), where + ".spec",
                           [](const std::string& s) { return parse_spec(s); });
    try {
      check_spec(p.shape, p.spec, m.mesh, where);
    } catch (const Error& e) {
      fail("carto: checkpoint manifest: field '", where, ".spec' does not fit the mesh (", e.what(),
           ")");
    }
    shapes.push_back(p.shape);
    m.parameters.push_back(std::move(p));
  }
  if (m.fingerprint != checkpoint_fingerprint(shapes))
    fail("carto: checkpoint manifest: field 'fingerprint' is '", m.fingerprint.substr(0, 40),
         "' but its parameters' shapes give ", checkpoint_fingerprint(shapes));
  const Json::Array& ranks = manifest_array(manifest_field(j, "", "ranks"), "ranks", devices);
  if (static_cast<std::int64_t>(ranks.size()) != devices)
    fail("carto: checkpoint manifest: field 'ranks' has ", ranks.size(), " entries; mesh ", m.mesh,
         " has ", devices, " devices");
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const std::string where = concat("ranks[", r, "]");
    CheckpointRank rank;
    rank.file = manifest_string(manifest_field(ranks[r], where, "file"), where + ".file");
    if (rank.file != checkpoint_rank_file(static_cast<std::int64_t>(r)))
      fail("carto: checkpoint manifest: field '", where, ".file' is '", rank.file.substr(0, 40),
           "'; rank ", r, "'s file is ", checkpoint_rank_file(static_cast<std::int64_t>(r)));
    rank.bytes = manifest_int(manifest_field(ranks[r], where, "bytes"), where + ".bytes",
                              kCheckpointHeaderBytes, kInt64Max);
    rank.crc32 = manifest_hex32(manifest_field(ranks[r], where, "crc32"), where + ".crc32");
    const Json::Array& pieces =
        manifest_array(manifest_field(ranks[r], where, "pieces"), where + ".pieces",
                       checked_mul(4, static_cast<std::int64_t>(params.size()), "pieces"));
    for (std::size_t k = 0; k < pieces.size(); ++k) {
      rank.pieces.push_back(manifest_piece(pieces[k], concat(where, ".pieces[", k, "]"), m,
                                           static_cast<std::int64_t>(r), rank.bytes));
    }
    m.ranks.push_back(std::move(rank));
  }
  if (const Json* plan = j.find("plan")) {
    if (!plan->is_object()) fail("carto: checkpoint manifest: field 'plan' must be an object");
    m.plan = *plan;
  }
  return m;
}

}  // namespace carto
