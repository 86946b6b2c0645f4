// carto/graph/einsum.hpp — einsum index letters: "bsi,io->bso" means Y[b,s,o] = Σ_i X[b,s,i]
// W[i,o].
//
// Design note (DESIGN.md §3): every operand dim of a contraction carries one index letter. A letter
// that appears in the output is kept (its extent is the extent of every operand dim that carries
// it); a letter that appears only in inputs is contracted (summed over). Forward FLOPs are
// 2 × Π(extent of every distinct letter): one multiply and one add per term, as the papers count.
//
// Invariants, checked by Einsum::parse (errors name the text and what would be right): one or two
// input operands; letters are a-z or A-Z; no letter repeats within one operand (no traces or
// diagonals); every output letter appears in some input; each operand has at most kMaxRank letters.
#pragma once

#include <cstddef>
#include <string_view>

#include "carto/error.hpp"
#include "carto/spec/shape.hpp"
#include "carto/util/static_vector.hpp"

namespace carto {

inline constexpr std::size_t kMaxEinsumInputs = 2;

using IndexLetters = StaticVector<char, kMaxRank>;
// Every distinct letter of an einsum, in order of first appearance (inputs, then output).
using LetterSet = StaticVector<char, kMaxRank*(kMaxEinsumInputs + 1)>;

constexpr bool contains(const IndexLetters& letters, char c) {
  for (char l : letters) {
    if (l == c) return true;
  }
  return false;
}

struct Einsum {
  StaticVector<IndexLetters, kMaxEinsumInputs> inputs{};
  IndexLetters output{};

  // Parses "bsi,io->bso" (spaces are not allowed). Throws (a compile error in a constant
  // expression) naming the text and the problem.
  static constexpr Einsum parse(std::string_view text) {
    const std::size_t arrow = text.find("->");
    if (arrow == std::string_view::npos) {
      detail::fail("carto: einsum '", text, "' has no '->'; write it as \"bsi,io->bso\"");
    }
    Einsum e;
    std::string_view lhs = text.substr(0, arrow);
    for (;;) {
      const std::size_t comma = lhs.find(',');
      if (e.inputs.size() == kMaxEinsumInputs) {
        detail::fail("carto: einsum '", text, "' has more than ", kMaxEinsumInputs,
                     " inputs; split it into pairwise contractions");
      }
      e.inputs.push_back(letters_of(text, lhs.substr(0, comma)));
      if (comma == std::string_view::npos) break;
      lhs = lhs.substr(comma + 1);
    }
    e.output = letters_of(text, text.substr(arrow + 2));
    for (char c : e.output) {
      bool found = false;
      for (const IndexLetters& in : e.inputs) found = found || contains(in, c);
      if (!found) {
        detail::fail("carto: einsum '", text, "': output letter '", c,
                     "' appears in no input; every output index must come from an input");
      }
    }
    return e;
  }

  [[nodiscard]] constexpr LetterSet letters() const {
    LetterSet all;
    auto add = [&all](const IndexLetters& ls) {
      for (char c : ls) {
        bool seen = false;
        for (char a : all) seen = seen || a == c;
        if (!seen) all.push_back(c);
      }
    };
    for (const IndexLetters& in : inputs) add(in);
    add(output);
    return all;
  }
  // A contracted letter appears in the inputs only.
  [[nodiscard]] constexpr bool contracted(char c) const { return !contains(output, c); }

  friend constexpr bool operator==(const Einsum&, const Einsum&) = default;

 private:
  static constexpr IndexLetters letters_of(std::string_view text, std::string_view part) {
    if (part.empty()) {
      detail::fail("carto: einsum '", text,
                   "' has an empty operand; give each operand its letters");
    }
    if (part.size() > kMaxRank) {
      detail::fail("carto: einsum '", text, "': operand '", part, "' has ", part.size(),
                   " letters; at most ", kMaxRank, " are allowed");
    }
    IndexLetters ls;
    for (char c : part) {
      const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
      if (!letter) {
        detail::fail("carto: einsum '", text, "': '", c,
                     "' is not an index letter; use a-z or A-Z, operands separated by ','");
      }
      if (contains(ls, c)) {
        detail::fail("carto: einsum '", text, "': letter '", c, "' repeats in operand '", part,
                     "'; traces and diagonals are not supported");
      }
      ls.push_back(c);
    }
    return ls;
  }
};

}  // namespace carto
