// carto/runtime/safetensors.hpp — reading and writing tensors in the safetensors format.
//
// Design note: a safetensors file is an 8-byte little-endian header length n, n bytes of JSON
// mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
// to the byte after the header; an optional "__metadata__" object of strings), then the raw
// little-endian row-major bytes. Only "F32" and "BF16" tensors are read and written; values reach
// the caller as fp32 (bf16 widened exactly) and are written in the dtype asked for (bf16 rounded to
// nearest even). The reader validates the whole header when it opens the file (length within the
// file and at most kMaxHeader, a JSON object, known dtypes, offsets in range, sized as the shape
// says, no two tensors overlapping) and reads a box of a tensor by seeking to each contiguous run
// along its last dim, so a rank reads only the bytes of its own shard. Every error is a
// carto::Error naming the file, the tensor and what was expected. The writer writes a temporary
// file beside the target and renames it over the target once complete, so a failed save never
// leaves a half-written checkpoint under the final name. No executor dependency.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "carto/error.hpp"
#include "carto/runtime/bf16.hpp"
#include "carto/spec/dtype.hpp"
#include "carto/util/json.hpp"

namespace carto::safetensors {

// The largest header accepted (the reference implementation's limit too): 100 MB.
inline constexpr std::uint64_t kMaxHeader = 100'000'000;

struct Entry {
  std::string name;
  DType dtype = DType::fp32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // relative to the data section
  [[nodiscard]] std::int64_t numel() const {
    std::int64_t n = 1;
    for (std::int64_t e : shape) n *= e;
    return n;
  }
};

namespace detail {
inline std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}
inline std::uint64_t element_bytes(DType d) { return d == DType::bf16 ? 2 : 4; }
}  // namespace detail

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)), in_(path_, std::ios::binary) {
    CARTO_CHECK(in_.good(), "safetensors file '", path_, "' cannot be opened for reading");
    std::error_code ec;
    const std::uint64_t size = std::filesystem::file_size(path_, ec);
    CARTO_CHECK(!ec, "safetensors file '", path_, "': cannot read its size: ", ec.message());
    CARTO_CHECK(size >= 8, "safetensors file '", path_, "' is ", size,
                " bytes, shorter than the 8-byte header length; the file is truncated");
    unsigned char len[8];
    in_.read(reinterpret_cast<char*>(len), 8);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
    CARTO_CHECK(n <= kMaxHeader, "safetensors file '", path_, "': header length ", n,
                " exceeds the limit of ", kMaxHeader, " bytes");
    CARTO_CHECK(n <= size - 8, "safetensors file '", path_, "': header length ", n,
                " runs past the end of the ", size, "-byte file (at most ", size - 8,
                "); the file is truncated");
    std::string text(n, '\0');
    in_.read(text.data(), static_cast<std::streamsize>(n));
    data_start_ = 8 + n;
    data_bytes_ = size - data_start_;
    Json header;
    try {
      header = Json::parse(text);
    } catch (const Error& e) {
      ::carto::detail::fail("safetensors file '", path_,
                            "': the header is not valid JSON: ", e.what());
    }
    CARTO_CHECK(header.is_object(), "safetensors file '", path_,
                "': the header must be a JSON object of tensors");
    for (const auto& [name, v] : header.as_object()) {
      if (name == "__metadata__") continue;
      entries_.push_back(parse_entry(name, v));
    }
    std::vector<const Entry*> by_begin;
    for (const Entry& e : entries_) by_begin.push_back(&e);
    std::sort(by_begin.begin(), by_begin.end(),
              [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
    for (std::size_t i = 1; i < by_begin.size(); ++i) {
      const Entry& a = *by_begin[i - 1];
      const Entry& b = *by_begin[i];
      CARTO_CHECK(b.begin >= a.end || a.begin == a.end || b.begin == b.end, "safetensors file '",
                  path_, "': tensor '", b.name, "' (bytes ", b.begin, "-", b.end,
                  ") overlaps tensor '", a.name, "' (bytes ", a.begin, "-", a.end,
                  "); tensors must occupy disjoint byte ranges");
    }
  }

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] const std::vector<Entry>& entries() const { return entries_; }
  [[nodiscard]] const Entry* find(const std::string& name) const {
    for (const Entry& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }
  // The tensor `name`, which must exist with exactly `shape`.
  [[nodiscard]] const Entry& require(const std::string& name,
                                     const std::vector<std::int64_t>& shape) const {
    const Entry* e = find(name);
    CARTO_CHECK(e != nullptr, "safetensors file '", path_, "' has no tensor '", name,
                "'; expected one of shape ", detail::shape_text(shape));
    CARTO_CHECK(e->shape == shape, "safetensors file '", path_, "': tensor '", name, "' has shape ",
                detail::shape_text(e->shape), "; expected ", detail::shape_text(shape));
    return *e;
  }

  // The box [offset, offset + extent) of a tensor as fp32, row-major in the box.
  std::vector<float> read_box(const Entry& e, const std::vector<std::int64_t>& offset,
                              const std::vector<std::int64_t>& extent) {
    const std::size_t r = e.shape.size();
    CARTO_CHECK(offset.size() == r && extent.size() == r, "safetensors file '", path_,
                "': a box of rank ", offset.size(), " read from tensor '", e.name, "' of rank ", r);
    std::int64_t count = 1;
    for (std::size_t d = 0; d < r; ++d) {
      CARTO_CHECK(offset[d] >= 0 && extent[d] >= 0 && offset[d] + extent[d] <= e.shape[d],
                  "safetensors file '", path_, "': tensor '", e.name, "' of shape ",
                  detail::shape_text(e.shape), " has no box at ", offset[d], " + ", extent[d],
                  " along dim ", d);
      count *= extent[d];
    }
    std::vector<float> out(static_cast<std::size_t>(count));
    if (count == 0) return out;
    const std::uint64_t width = detail::element_bytes(e.dtype);
    const std::int64_t run = r == 0 ? 1 : extent[r - 1];
    std::vector<std::int64_t> stride(r, 1);
    for (std::size_t d = r; d-- > 1;) stride[d - 1] = stride[d] * e.shape[d];
    std::vector<std::int64_t> idx(r, 0);  // over the box, last dim fixed at 0
    std::vector<unsigned char> bytes(static_cast<std::size_t>(run) * width);
    for (std::int64_t done = 0; done < count; done += run) {
      std::int64_t flat = 0;
      for (std::size_t d = 0; d < r; ++d) flat += (offset[d] + idx[d]) * stride[d];
      in_.clear();
      in_.seekg(static_cast<std::streamoff>(data_start_ + e.begin +
                                            static_cast<std::uint64_t>(flat) * width));
      in_.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      CARTO_CHECK(in_.good(), "safetensors file '", path_, "': reading tensor '", e.name,
                  "' failed; the file is truncated or unreadable");
      for (std::int64_t j = 0; j < run; ++j) {
        const unsigned char* b = bytes.data() + static_cast<std::size_t>(j) * width;
        float v = 0;
        if (e.dtype == DType::bf16) {
          v = to_float(Bf16{static_cast<std::uint16_t>(b[0] | (b[1] << 8))});
        } else {
          const std::uint32_t u =
              static_cast<std::uint32_t>(b[0]) | (static_cast<std::uint32_t>(b[1]) << 8) |
              (static_cast<std::uint32_t>(b[2]) << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
          v = std::bit_cast<float>(u);
        }
        out[static_cast<std::size_t>(done + j)] = v;
      }
      for (std::size_t d = r - (r > 0 ? 1 : 0); d-- > 0;) {
        if (++idx[d] < extent[d]) break;
        idx[d] = 0;
      }
    }
    return out;
  }
  std::vector<float> read_all(const Entry& e) {
    return read_box(e, std::vector<std::int64_t>(e.shape.size(), 0), e.shape);
  }

 private:
  Entry parse_entry(const std::string& name, const Json& v) const {
    auto bad = [&](const std::string& what) {
      ::carto::detail::fail("safetensors file '", path_, "': tensor '", name, "': ", what);
    };
    if (!v.is_object()) bad("its header entry must be an object {dtype, shape, data_offsets}");
    Entry e;
    e.name = name;
    const Json* dt = v.find("dtype");
    const Json* sh = v.find("shape");
    const Json* off = v.find("data_offsets");
    if (dt == nullptr || sh == nullptr || off == nullptr)
      bad("its header entry needs dtype, shape and data_offsets");
    if (!dt->is_string() || (dt->as_string() != "F32" && dt->as_string() != "BF16"))
      bad("dtype " + dt->dump() + " is not supported; expected \"F32\" or \"BF16\"");
    e.dtype = dt->as_string() == "BF16" ? DType::bf16 : DType::fp32;
    if (!sh->is_array()) bad("shape must be an array of non-negative integers");
    for (const Json& d : sh->as_array()) {
      if (!d.is_int() || d.as_int() < 0) bad("shape must be an array of non-negative integers");
      e.shape.push_back(d.as_int());
    }
    if (!off->is_array() || off->as_array().size() != 2 || !off->as_array()[0].is_int() ||
        !off->as_array()[1].is_int() || off->as_array()[0].as_int() < 0 ||
        off->as_array()[1].as_int() < off->as_array()[0].as_int())
      bad("data_offsets must be [begin, end] with 0 <= begin <= end");
    e.begin = static_cast<std::uint64_t>(off->as_array()[0].as_int());
    e.end = static_cast<std::uint64_t>(off->as_array()[1].as_int());
    if (e.end > data_bytes_) {
      bad("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
          "] run past the " + std::to_string(data_bytes_) +
          "-byte data section; the file is truncated or the offsets are out of range");
    }
    const std::uint64_t want =
        static_cast<std::uint64_t>(e.numel()) * detail::element_bytes(e.dtype);
    if (e.end - e.begin != want) {
      bad("data_offsets span " + std::to_string(e.end - e.begin) + " bytes; shape " +
          detail::shape_text(e.shape) + " in " + dt->as_string() + " needs " +
          std::to_string(want));
    }
    return e;
  }

  std::string path_;
  std::ifstream in_;
  std::uint64_t data_start_ = 0, data_bytes_ = 0;
  std::vector<Entry> entries_;
};

// One tensor to write: fp32 values, row-major, numel(shape) of them.
struct Tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

// Writes `tensors` in `dtype` (fp32 or bf16) to `path`: a temporary file beside it, renamed over
// it once complete.
inline void write(const std::string& path, std::span<const Tensor> tensors, DType dtype) {
  CARTO_CHECK(dtype == DType::fp32 || dtype == DType::bf16, "safetensors file '", path,
              "': tensors are written as fp32 or bf16; got ", to_string_view(dtype));
  const std::uint64_t width = detail::element_bytes(dtype);
  // The header is written as text: building it as a Json tree trips g++ 12's false
  // -Wmaybe-uninitialized inside std::vector<Json> at -O3. Names are escaped by Json's dump.
  std::string text = "{";
  std::vector<std::string> names;
  std::uint64_t at = 0;
  for (const Tensor& t : tensors) {
    std::int64_t n = 1;
    std::string shape = "[";
    for (std::size_t d = 0; d < t.shape.size(); ++d) {
      n *= t.shape[d];
      shape += (d > 0 ? "," : "") + std::to_string(t.shape[d]);
    }
    shape += "]";
    CARTO_CHECK(static_cast<std::size_t>(n) == t.values.size(), "safetensors file '", path,
                "': tensor '", t.name, "' of shape ", detail::shape_text(t.shape), " needs ", n,
                " values; got ", t.values.size());
    CARTO_CHECK(std::find(names.begin(), names.end(), t.name) == names.end(), "safetensors file '",
                path, "': tensor '", t.name, "' is written twice");
    names.push_back(t.name);
    const std::uint64_t begin = at;
    at += static_cast<std::uint64_t>(n) * width;
    text += ::carto::detail::concat(text.size() > 1 ? "," : "", Json(std::string(t.name)).dump(),
                                    ":{\"dtype\":\"", dtype == DType::bf16 ? "BF16" : "F32",
                                    "\",\"shape\":", shape, ",\"data_offsets\":[", begin, ",", at,
                                    "]}");
  }
  text += "}";
  while (text.size() % 8 != 0) text += ' ';  // the data section starts 8-byte aligned
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    CARTO_CHECK(out.good(), "safetensors file '", temp, "' cannot be opened for writing");
    unsigned char len[8];
    std::uint64_t n = text.size();
    for (unsigned char& b : len) {
      b = static_cast<unsigned char>(n & 0xFF);
      n >>= 8;
    }
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::vector<unsigned char> bytes;
    for (const Tensor& t : tensors) {
      bytes.assign(t.values.size() * width, 0);
      for (std::size_t i = 0; i < t.values.size(); ++i) {
        unsigned char* b = bytes.data() + i * width;
        std::uint32_t u = dtype == DType::bf16 ? to_bf16(t.values[i]).bits
                                               : std::bit_cast<std::uint32_t>(t.values[i]);
        for (std::uint64_t k = 0; k < width; ++k, u >>= 8) b[k] = static_cast<unsigned char>(u);
      }
      out.write(reinterpret_cast<const char*>(bytes.data()),
                static_cast<std::streamsize>(bytes.size()));
    }
    out.close();
    if (!out) {
      std::remove(temp.c_str());
      ::carto::detail::fail("safetensors file '", temp, "': writing failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    std::remove(temp.c_str());
    ::carto::detail::fail("safetensors file '", path, "': renaming '", temp,
                          "' over it failed: ", ec.message());
  }
}

}  // namespace carto::safetensors
