// A small strict XML well-formedness checker for the tests of generated SVG and XHTML: elements
// balanced and properly nested, attribute names followed by ="..." or '...', no attribute given
// twice, '<' never in text or values, and '&' only as one of the five named entities or a
// numeric character reference. Comments, a DOCTYPE line and processing instructions are skipped.
// It is no validator (no DTD, no namespaces); it answers the first problem found, or nothing.
#pragma once

#include <cctype>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace carto::testing {

namespace detail {

inline bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == ':' ||
         c == '.';
}

// The problem with the entity or character data `text` (no '<' allowed), if any.
inline std::optional<std::string> check_text(std::string_view text, std::size_t at) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '<') return "a raw '<' in text or a value at " + std::to_string(at + i);
    if (text[i] != '&') continue;
    const std::size_t end = text.find(';', i);
    if (end == std::string_view::npos || end - i > 10)
      return "an unterminated '&' at " + std::to_string(at + i);
    const std::string_view ref = text.substr(i + 1, end - i - 1);
    static const std::set<std::string_view> kNamed = {"amp", "lt", "gt", "quot", "apos"};
    bool ok = kNamed.count(ref) != 0;
    if (!ok && ref.size() >= 2 && ref[0] == '#') {
      ok = true;
      const bool hex = ref[1] == 'x';
      for (std::size_t k = hex ? 2 : 1; k < ref.size(); ++k) {
        ok = ok && (hex ? std::isxdigit(static_cast<unsigned char>(ref[k])) != 0
                        : std::isdigit(static_cast<unsigned char>(ref[k])) != 0);
      }
      ok = ok && ref.size() > (hex ? 2u : 1u);
    }
    if (!ok) return "an unknown entity '&" + std::string(ref) + ";' at " + std::to_string(at + i);
    i = end;
  }
  return std::nullopt;
}

}  // namespace detail

// The first well-formedness problem of `doc`, or nothing when it is well-formed with one root.
inline std::optional<std::string> xml_problem(std::string_view doc) {
  std::vector<std::string> open;
  std::size_t roots = 0;
  std::size_t i = 0;
  while (i < doc.size()) {
    const std::size_t lt = doc.find('<', i);
    const std::string_view text = doc.substr(i, lt == std::string_view::npos ? doc.npos : lt - i);
    if (auto p = detail::check_text(text, i)) return p;
    if (open.empty()) {
      for (char c : text)
        if (std::isspace(static_cast<unsigned char>(c)) == 0)
          return "text outside the root element at " + std::to_string(i);
    }
    if (lt == std::string_view::npos) break;
    i = lt;
    if (doc.substr(i, 4) == "<!--") {
      const std::size_t end = doc.find("-->", i + 4);
      if (end == std::string_view::npos) return "an unterminated comment at " + std::to_string(i);
      i = end + 3;
      continue;
    }
    if (doc.substr(i, 2) == "<!" || doc.substr(i, 2) == "<?") {
      if (!open.empty()) return "a declaration inside an element at " + std::to_string(i);
      const std::size_t end = doc.find('>', i);
      if (end == std::string_view::npos) return "an unterminated declaration";
      i = end + 1;
      continue;
    }
    const bool closing = doc.substr(i, 2) == "</";
    std::size_t k = i + (closing ? 2 : 1);
    const std::size_t name_start = k;
    while (k < doc.size() && detail::name_char(doc[k])) ++k;
    const std::string name(doc.substr(name_start, k - name_start));
    if (name.empty()) return "a tag without a name at " + std::to_string(i);
    if (closing) {
      while (k < doc.size() && std::isspace(static_cast<unsigned char>(doc[k])) != 0) ++k;
      if (k >= doc.size() || doc[k] != '>')
        return "a malformed end tag </" + name + " at " + std::to_string(i);
      if (open.empty() || open.back() != name) {
        return "</" + name + "> at " + std::to_string(i) + " closes " +
               (open.empty() ? std::string("nothing") : "<" + open.back() + ">");
      }
      open.pop_back();
      i = k + 1;
      continue;
    }
    std::set<std::string> attributes;
    bool self_closing = false;
    while (true) {
      const std::size_t before = k;
      while (k < doc.size() && std::isspace(static_cast<unsigned char>(doc[k])) != 0) ++k;
      if (k >= doc.size()) return "an unterminated tag <" + name + ">";
      if (doc[k] == '>') break;
      if (doc.substr(k, 2) == "/>") {
        self_closing = true;
        ++k;
        break;
      }
      if (k == before)
        return "attributes of <" + name + "> not separated by space at " + std::to_string(k);
      const std::size_t a = k;
      while (k < doc.size() && detail::name_char(doc[k])) ++k;
      const std::string attribute(doc.substr(a, k - a));
      if (attribute.empty()) return "a bad character in <" + name + "> at " + std::to_string(k);
      if (!attributes.insert(attribute).second)
        return "attribute '" + attribute + "' of <" + name + "> given twice";
      if (k + 1 >= doc.size() || doc[k] != '=' || (doc[k + 1] != '"' && doc[k + 1] != '\''))
        return "attribute '" + attribute + "' of <" + name + "> without a quoted value at " +
               std::to_string(k);
      const char quote = doc[k + 1];
      const std::size_t end = doc.find(quote, k + 2);
      if (end == std::string_view::npos) return "an unterminated value of '" + attribute + "'";
      if (auto p = detail::check_text(doc.substr(k + 2, end - k - 2), k + 2)) return p;
      k = end + 1;
    }
    if (open.empty()) ++roots;
    if (roots > 1) return "a second root element <" + name + ">";
    if (!self_closing) open.push_back(name);
    i = k + 1;
  }
  if (!open.empty()) return "<" + open.back() + "> is never closed";
  if (roots == 0) return "no element";
  return std::nullopt;
}

// Every "<svg ...>...</svg>" of `page` (not nested), in order.
inline std::vector<std::string_view> svg_parts(std::string_view page) {
  std::vector<std::string_view> parts;
  std::size_t i = 0;
  while ((i = page.find("<svg", i)) != std::string_view::npos) {
    const std::size_t end = page.find("</svg>", i);
    if (end == std::string_view::npos) {
      parts.push_back(page.substr(i));
      break;
    }
    parts.push_back(page.substr(i, end + 6 - i));
    i = end + 6;
  }
  return parts;
}

}  // namespace carto::testing
