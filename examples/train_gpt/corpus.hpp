// The training text of carto-demo: a character vocabulary over one or more text files, and the
// random windows a training step reads.
//
// Design note: the vocabulary is the set of bytes the text uses, sorted, so token ids are dense
// (0 .. vocab-1) and the same text always gives the same ids. A batch is `batch` windows of seq + 1
// characters at offsets drawn from (seed, step) alone, so every rank of a run, and every run with
// the same seed, reads the same batch without communicating.
#pragma once

#include <array>
#include <carto/runtime/trainer.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace demo {

// The license texts every Debian system ships; the default corpus is those of them that exist.
inline constexpr const char* kLicenseDir = "/usr/share/common-licenses";
inline constexpr std::array<const char*, 5> kDefaultLicenses = {"GPL-3", "Apache-2.0", "MPL-2.0",
                                                                "LGPL-2.1", "Artistic"};

class Corpus {
 public:
  // Reads `path` (a file, or every regular file of a directory, sorted by name); an empty path
  // reads the default license texts. Throws carto::Error naming the path and what would be right.
  static Corpus load(const std::string& path);

  [[nodiscard]] const std::vector<std::string>& files() const { return files_; }
  [[nodiscard]] std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }
  [[nodiscard]] std::int64_t vocab_size() const { return static_cast<std::int64_t>(chars_.size()); }
  [[nodiscard]] const std::vector<std::int32_t>& tokens() const { return tokens_; }
  // The character of a token, printable: control characters other than newline become spaces.
  [[nodiscard]] char printable(std::int32_t token) const;

  // The windows of one training step: ids = text[o, o + seq), targets = text[o + 1, o + seq + 1).
  [[nodiscard]] carto::TokenBatch batch(std::int64_t rows, std::int64_t seq, std::uint64_t seed,
                                        std::int64_t step) const;
  // `count` prompts for sampling: the first words of lines drawn from (seed), at most `max_chars`.
  [[nodiscard]] std::vector<std::vector<std::int32_t>> prompts(std::int64_t count,
                                                               std::int64_t max_chars,
                                                               std::uint64_t seed) const;

 private:
  std::vector<std::string> files_;
  std::vector<char> chars_;  // token -> character
  std::vector<std::int32_t> tokens_;
};

}  // namespace demo
