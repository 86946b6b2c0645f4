#include "corpus.hpp"

#include <algorithm>
#include <carto/error.hpp>
#include <carto/util/files.hpp>
#include <cctype>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace demo {

namespace fs = std::filesystem;

namespace {

constexpr const char* kWhatWouldBeRight =
    "; pass --data with a readable text file or a directory of text files";

std::string read_file(const fs::path& path) {
  try {
    return carto::read_file_bounded(path.string(), carto::kMaxDataFileBytes, "--data file");
  } catch (const carto::Error& e) {
    carto::detail::fail("carto-demo: ", std::string(e.what()).substr(7), kWhatWouldBeRight);
  }
}

}  // namespace

Corpus Corpus::load(const std::string& path) {
  std::vector<fs::path> paths;
  if (path.empty()) {
    for (const char* name : kDefaultLicenses) {
      const fs::path p = fs::path(kLicenseDir) / name;
      std::error_code ec;
      if (fs::is_regular_file(p, ec)) paths.push_back(p);
    }
    if (paths.empty()) {
      carto::detail::fail(
          "carto-demo: none of the default license texts (GPL-3, Apache-2.0, ...) "
          "exists under ",
          kLicenseDir, kWhatWouldBeRight);
    }
  } else {
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (ec || !fs::exists(status)) {
      carto::detail::fail("carto-demo: cannot read --data '", path,
                          "': ", ec ? ec.message() : "no such file or directory",
                          kWhatWouldBeRight);
    }
    if (fs::is_directory(status)) {
      fs::directory_iterator it(path, ec);
      if (ec) {
        carto::detail::fail("carto-demo: cannot list the --data directory '", path,
                            "': ", ec.message(), kWhatWouldBeRight);
      }
      for (const fs::directory_entry& entry : it) {
        if (entry.is_regular_file(ec)) paths.push_back(entry.path());
      }
      std::sort(paths.begin(), paths.end());
      if (paths.empty()) {
        carto::detail::fail("carto-demo: the --data directory '", path, "' holds no regular file",
                            kWhatWouldBeRight);
      }
    } else {
      paths.emplace_back(path);
    }
  }

  Corpus c;
  std::string text;
  for (const fs::path& p : paths) {
    text += read_file(p);
    if (text.size() > static_cast<std::size_t>(carto::kMaxDataFileBytes)) {
      carto::detail::fail("carto-demo: the --data files hold more than ",
                          carto::format_bytes(carto::kMaxDataFileBytes),
                          " together; pass fewer or smaller text files");
    }
    c.files_.push_back(p.string());
  }
  if (text.empty()) {
    carto::detail::fail("carto-demo: the --data text is empty (",
                        paths.size() == 1 ? "the file '" + paths.front().string() + "' is empty"
                                          : "every file is empty",
                        ")", kWhatWouldBeRight);
  }
  std::array<bool, 256> used{};
  for (const char ch : text) used[static_cast<unsigned char>(ch)] = true;
  std::array<std::int32_t, 256> id{};
  for (std::size_t b = 0; b < used.size(); ++b) {
    if (!used[b]) continue;
    id[b] = static_cast<std::int32_t>(c.chars_.size());
    c.chars_.push_back(static_cast<char>(b));
  }
  c.tokens_.reserve(text.size());
  for (const char ch : text) c.tokens_.push_back(id[static_cast<unsigned char>(ch)]);
  return c;
}

char Corpus::printable(std::int32_t token) const {
  const char ch = chars_.at(static_cast<std::size_t>(token));
  const auto u = static_cast<unsigned char>(ch);
  return ch == '\n' || (u >= 0x20 && u < 0x7f) ? ch : ' ';
}

carto::TokenBatch Corpus::batch(std::int64_t rows, std::int64_t seq, std::uint64_t seed,
                                std::int64_t step) const {
  carto::TokenBatch b{.batch = rows, .seq = seq};
  std::mt19937_64 gen(seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(step));
  std::uniform_int_distribution<std::int64_t> offset(0, size() - seq - 1);
  b.ids.reserve(static_cast<std::size_t>(rows * seq));
  b.targets.reserve(b.ids.capacity());
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto o = static_cast<std::size_t>(offset(gen));
    for (std::size_t i = 0; i < static_cast<std::size_t>(seq); ++i) {
      b.ids.push_back(tokens_[o + i]);
      b.targets.push_back(tokens_[o + i + 1]);
    }
  }
  return b;
}

std::vector<std::vector<std::int32_t>> Corpus::prompts(std::int64_t count, std::int64_t max_chars,
                                                       std::uint64_t seed) const {
  std::vector<std::vector<std::int32_t>> out;
  std::mt19937_64 gen(seed + 17);
  std::uniform_int_distribution<std::int64_t> offset(0, size() - 1);
  auto at = [&](std::int64_t k) {
    return chars_[static_cast<std::size_t>(tokens_[static_cast<std::size_t>(k)])];
  };
  for (std::int64_t i = 0; i < count; ++i) {
    // The start of the next line with a letter after a random offset; its first two words.
    std::int64_t o = offset(gen);
    while (o + 1 < size() &&
           !(at(o) == '\n' && std::isalpha(static_cast<unsigned char>(at(o + 1))))) {
      ++o;
    }
    o = o + 1 < size() ? o + 1 : 0;
    std::vector<std::int32_t> prompt;
    int spaces = 0;
    for (std::int64_t k = o; k < size() && static_cast<std::int64_t>(prompt.size()) < max_chars;
         ++k) {
      const char ch = at(k);
      if (ch == '\n') break;
      prompt.push_back(tokens_[static_cast<std::size_t>(k)]);
      if (ch == ' ' && ++spaces == 2) break;
    }
    if (prompt.empty()) prompt.push_back(tokens_.front());
    out.push_back(std::move(prompt));
  }
  return out;
}

}  // namespace demo
