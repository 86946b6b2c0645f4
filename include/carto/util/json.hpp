// carto/util/json.hpp — a small JSON value with a writer and a strict parser.
//
// Design note: tools print reports as JSON and plans are saved as JSON; both need only objects with
// keys in insertion order, arrays, strings, booleans, null and numbers. Integers are kept exact as
// int64 (byte and FLOP counts exceed 2^53 for large models); other numbers are doubles written with
// 17 significant digits so they read back bit-exact. The parser accepts RFC 8259 JSON and reports
// errors as carto::Error with the 0-based position and what was expected there.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "carto/error.hpp"

namespace carto {

class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;  // insertion order kept

  Json() = default;                                       // null
  Json(std::nullptr_t) {}                                 // NOLINT(google-explicit-constructor)
  Json(bool b) : value_(b) {}                             // NOLINT
  Json(int v) : value_(static_cast<std::int64_t>(v)) {}   // NOLINT
  Json(long v) : value_(static_cast<std::int64_t>(v)) {}  // NOLINT
  Json(long long v) : value_(static_cast<std::int64_t>(v)) {}  // NOLINT
  Json(unsigned long v) : value_(checked_unsigned(v)) {}       // NOLINT
  Json(unsigned long long v) : value_(checked_unsigned(v)) {}  // NOLINT
  Json(double v) : value_(v) {}                                // NOLINT
  Json(const char* s) : value_(std::string(s)) {}              // NOLINT
  Json(std::string s) : value_(std::move(s)) {}                // NOLINT
  Json(std::string_view s) : value_(std::string(s)) {}         // NOLINT
  Json(Array a) : value_(std::move(a)) {}                      // NOLINT
  Json(Object o) : value_(std::move(o)) {}                     // NOLINT

  static Json object() { return Json(Object{}); }
  static Json array() { return Json(Array{}); }

  [[nodiscard]] bool is_null() const { return std::holds_alternative<std::monostate>(value_); }
  [[nodiscard]] bool is_bool() const { return std::holds_alternative<bool>(value_); }
  [[nodiscard]] bool is_int() const { return std::holds_alternative<std::int64_t>(value_); }
  [[nodiscard]] bool is_number() const {
    return is_int() || std::holds_alternative<double>(value_);
  }
  [[nodiscard]] bool is_string() const { return std::holds_alternative<std::string>(value_); }
  [[nodiscard]] bool is_array() const { return std::holds_alternative<Array>(value_); }
  [[nodiscard]] bool is_object() const { return std::holds_alternative<Object>(value_); }

  [[nodiscard]] bool as_bool() const { return get<bool>("a boolean"); }
  [[nodiscard]] std::int64_t as_int() const { return get<std::int64_t>("an integer"); }
  [[nodiscard]] double as_double() const {
    if (is_int()) return static_cast<double>(std::get<std::int64_t>(value_));
    return get<double>("a number");
  }
  [[nodiscard]] const std::string& as_string() const { return get<std::string>("a string"); }
  [[nodiscard]] const Array& as_array() const { return get<Array>("an array"); }
  [[nodiscard]] Array& as_array() { return get<Array>("an array"); }
  [[nodiscard]] const Object& as_object() const { return get<Object>("an object"); }
  [[nodiscard]] Object& as_object() { return get<Object>("an object"); }

  // Object access. operator[] inserts a null member when absent (on a null value: makes an object).
  Json& operator[](std::string_view key) {
    if (is_null()) value_ = Object{};
    Object& o = as_object();
    for (auto& [k, v] : o) {
      if (k == key) return v;
    }
    o.emplace_back(std::string(key), Json());
    return o.back().second;
  }
  [[nodiscard]] const Json* find(std::string_view key) const {
    for (const auto& [k, v] : as_object()) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  // The member `key`; throws naming the key when it is missing.
  [[nodiscard]] const Json& at(std::string_view key) const {
    if (const Json* v = find(key)) return *v;
    detail::fail("carto: JSON object has no member '", key, "'");
  }
  void push_back(Json v) {
    if (is_null()) value_ = Array{};
    as_array().push_back(std::move(v));
  }

  [[nodiscard]] std::string dump(int indent = -1) const {
    std::string out;
    write(out, indent, 0);
    return out;
  }

  friend bool operator==(const Json& a, const Json& b) { return a.value_ == b.value_; }

  static Json parse(std::string_view text);

 private:
  template <class T>
  const T& get(const char* what) const {
    if (const T* v = std::get_if<T>(&value_)) return *v;
    detail::fail("carto: JSON value is ", type_name(), ", expected ", what);
  }
  template <class T>
  T& get(const char* what) {
    if (T* v = std::get_if<T>(&value_)) return *v;
    detail::fail("carto: JSON value is ", type_name(), ", expected ", what);
  }
  [[nodiscard]] const char* type_name() const {
    static constexpr const char* names[] = {"null",     "a boolean", "an integer", "a number",
                                            "a string", "an array",  "an object"};
    return names[value_.index()];
  }
  template <class U>
  static std::int64_t checked_unsigned(U v) {
    if (v > static_cast<U>(INT64_MAX)) detail::fail("carto: JSON integer ", v, " exceeds int64");
    return static_cast<std::int64_t>(v);
  }

  static void write_string(std::string& out, const std::string& s) {
    out += '"';
    for (const char c : s) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
            out += buf;
          } else {
            out += c;
          }
      }
    }
    out += '"';
  }

  void write(std::string& out, int indent, int depth) const {
    auto newline = [&](int d) {
      if (indent < 0) return;
      out += '\n';
      out.append(static_cast<std::size_t>(indent * d), ' ');
    };
    switch (value_.index()) {
      case 0: out += "null"; break;
      case 1: out += std::get<bool>(value_) ? "true" : "false"; break;
      case 2: out += std::to_string(std::get<std::int64_t>(value_)); break;
      case 3: {
        const double d = std::get<double>(value_);
        if (!std::isfinite(d)) detail::fail("carto: JSON cannot hold the number ", d);
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.17g", d);
        out += buf;
        if (std::string_view(buf).find_first_of(".eE") == std::string_view::npos) out += ".0";
        break;
      }
      case 4: write_string(out, std::get<std::string>(value_)); break;
      case 5: {
        const Array& a = std::get<Array>(value_);
        out += '[';
        for (std::size_t i = 0; i < a.size(); ++i) {
          if (i > 0) out += ',';
          newline(depth + 1);
          a[i].write(out, indent, depth + 1);
        }
        if (!a.empty()) newline(depth);
        out += ']';
        break;
      }
      default: {
        const Object& o = std::get<Object>(value_);
        out += '{';
        for (std::size_t i = 0; i < o.size(); ++i) {
          if (i > 0) out += ',';
          newline(depth + 1);
          write_string(out, o[i].first);
          out += indent < 0 ? ":" : ": ";
          o[i].second.write(out, indent, depth + 1);
        }
        if (!o.empty()) newline(depth);
        out += '}';
      }
    }
  }

  std::variant<std::monostate, bool, std::int64_t, double, std::string, Array, Object> value_;
};

namespace detail {

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  Json document() {
    Json v = value(0);
    space();
    if (pos_ != text_.size()) error("the end of the document");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 256;

  [[noreturn]] void error(std::string_view expected) const {
    fail("carto: invalid JSON at position ", pos_, ": expected ", expected,
         pos_ < text_.size() ? concat(", found '", text_[pos_], "'")
                             : std::string(", found the end"));
  }
  void space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\t')) {
      ++pos_;
    }
  }
  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) == word) {
      pos_ += word.size();
      return true;
    }
    return false;
  }
  Json value(int depth) {
    if (depth > kMaxDepth) error("nesting of at most 256 levels");
    space();
    if (pos_ >= text_.size()) error("a value");
    const char c = text_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Json(string());
    if (literal("true")) return Json(true);
    if (literal("false")) return Json(false);
    if (literal("null")) return Json();
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    error("a value");
  }
  Json object(int depth) {
    ++pos_;
    Json out = Json::object();
    space();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return out;
    }
    for (;;) {
      space();
      if (pos_ >= text_.size() || text_[pos_] != '"') error("a member name in double quotes");
      std::string key = string();
      space();
      if (pos_ >= text_.size() || text_[pos_] != ':') error("':'");
      ++pos_;
      if (out.find(key) != nullptr) {
        fail("carto: invalid JSON at position ", pos_, ": member '", key, "' appears twice");
      }
      out.as_object().emplace_back(std::move(key), value(depth + 1));
      space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return out;
      }
      error("',' or '}'");
    }
  }
  Json array(int depth) {
    ++pos_;
    Json out = Json::array();
    space();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return out;
    }
    for (;;) {
      out.push_back(value(depth + 1));
      space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return out;
      }
      error("',' or ']'");
    }
  }
  unsigned hex4() {
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      if (pos_ >= text_.size()) error("4 hex digits after \\u");
      const char c = text_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<unsigned>(c - 'A' + 10);
      } else {
        --pos_;
        error("a hex digit");
      }
    }
    return v;
  }
  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= text_.size()) error("'\"' to close the string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos_;
        error("an escaped control character");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) error("an escape character");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (!literal("\\u")) error("a low surrogate \\uDC00-\\uDFFF");
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) error("a low surrogate \\uDC00-\\uDFFF");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8(out, cp);
          break;
        }
        default: --pos_; error("one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u");
      }
    }
  }
  Json number() {
    const std::size_t start = pos_;
    bool integral = true;
    if (text_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const std::size_t s = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      if (pos_ == s) error("a digit");
    };
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
    } else {
      digits();
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      integral = false;
      ++pos_;
      digits();
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      digits();
    }
    const std::string token(text_.substr(start, pos_ - start));
    if (integral) {
      errno = 0;
      char* end = nullptr;
      const long long v = std::strtoll(token.c_str(), &end, 10);
      if (errno == 0) return Json(v);
    }
    const double v = std::strtod(token.c_str(), nullptr);
    if (!std::isfinite(v)) {
      pos_ = start;
      error("a number within the range of a double (at most about 1.8e308 in magnitude)");
    }
    return Json(v);
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace detail

inline Json Json::parse(std::string_view text) { return detail::JsonParser(text).document(); }

}  // namespace carto
