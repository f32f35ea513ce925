// zeppelin/core/detail/json_reader.hpp
// A small strict JSON reader (RFC 8259) for the library's own formats, so that reading a plan
// back needs no JSON dependency.
//   parse_json(text) -> json_value: null, bool, integer (an int64 written without fraction or
//   exponent), number (any other number, as double), string (UTF-8, escapes decoded, \u
//   included), array, object (members in file order; a repeated key is an error).
// Errors: invalid_argument naming the byte offset and what was expected; nesting deeper than
// 64 levels is refused (no recursion bomb); integers outside int64 are refused rather than
// rounded. The accessors (at, as_int, ...) throw invalid_argument naming the member and the
// type they expected. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

struct json_value;
using json_array = std::vector<json_value>;
using json_object = std::vector<std::pair<std::string, json_value>>;

struct json_value {
  std::variant<std::nullptr_t, bool, std::int64_t, double, std::string, std::shared_ptr<json_array>,
               std::shared_ptr<json_object>>
      v{nullptr};

  [[nodiscard]] bool is_null() const noexcept { return std::holds_alternative<std::nullptr_t>(v); }
  [[nodiscard]] bool is_object() const noexcept { return std::holds_alternative<std::shared_ptr<json_object>>(v); }

  //! The member `key` of an object; throws when this is no object or lacks it.
  [[nodiscard]] const json_value& at(std::string_view key) const {
    const json_value* found = find(key);
    ZEPPELIN_EXPECTS(found != nullptr, "JSON: missing member \"" + std::string(key) + "\"", {});
    return *found;
  }
  //! The member `key`, or nullptr (also when this is no object).
  [[nodiscard]] const json_value* find(std::string_view key) const noexcept {
    if (!is_object()) return nullptr;
    for (const auto& [k, value] : *std::get<std::shared_ptr<json_object>>(v))
      if (k == key) return &value;
    return nullptr;
  }
  [[nodiscard]] const json_array& as_array(std::string_view what) const {
    ZEPPELIN_EXPECTS(std::holds_alternative<std::shared_ptr<json_array>>(v), "JSON: \"" + std::string(what) + "\" must be an array", {});
    return *std::get<std::shared_ptr<json_array>>(v);
  }
  [[nodiscard]] std::int64_t as_int(std::string_view what) const {
    ZEPPELIN_EXPECTS(std::holds_alternative<std::int64_t>(v), "JSON: \"" + std::string(what) + "\" must be an integer", {});
    return std::get<std::int64_t>(v);
  }
  [[nodiscard]] const std::string& as_string(std::string_view what) const {
    ZEPPELIN_EXPECTS(std::holds_alternative<std::string>(v), "JSON: \"" + std::string(what) + "\" must be a string", {});
    return std::get<std::string>(v);
  }
};

class json_parser {
 public:
  explicit json_parser(std::string_view text) : s_(text) {}

  json_value document() {
    json_value out = value(0);
    skip_space();
    expect(at_ == s_.size(), "the end of the document");
    return out;
  }

 private:
  static constexpr int max_depth = 64;

  [[noreturn]] void fail(const char* expected) const {
    ZEPPELIN_THROW(invalid_argument, std::string("JSON: expected ") + expected, {{"offset", double(at_)}});
  }
  void expect(bool ok, const char* expected) const {
    if (!ok) fail(expected);
  }
  void skip_space() noexcept {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\t' || s_[at_] == '\n' || s_[at_] == '\r')) ++at_;
  }
  bool take(char c) noexcept {
    skip_space();
    if (at_ < s_.size() && s_[at_] == c) return ++at_, true;
    return false;
  }
  bool take_word(std::string_view w) noexcept {
    if (s_.substr(at_, w.size()) != w) return false;
    at_ += w.size();
    return true;
  }

  json_value value(int depth) {
    expect(depth < max_depth, "nesting of at most 64 levels");
    skip_space();
    expect(at_ < s_.size(), "a value");
    const char c = s_[at_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return {string()};
    if (take_word("true")) return {true};
    if (take_word("false")) return {false};
    if (take_word("null")) return {nullptr};
    return number();
  }

  json_value object(int depth) {
    ++at_;  // '{'
    auto members = std::make_shared<json_object>();
    if (take('}')) return {members};
    do {
      skip_space();
      expect(at_ < s_.size() && s_[at_] == '"', "a member name");
      std::string key = string();
      for (const auto& m : *members)
        if (m.first == key) fail("member names that differ (a name repeats)");
      expect(take(':'), "':'");
      members->emplace_back(std::move(key), value(depth + 1));
    } while (take(','));
    expect(take('}'), "',' or '}'");
    return {members};
  }

  json_value array(int depth) {
    ++at_;  // '['
    auto items = std::make_shared<json_array>();
    if (take(']')) return {items};
    do items->push_back(value(depth + 1));
    while (take(','));
    expect(take(']'), "',' or ']'");
    return {items};
  }

  unsigned hex4() {
    expect(at_ + 4 <= s_.size(), "four hex digits");
    unsigned v = 0;
    const auto [ptr, ec] = std::from_chars(s_.data() + at_, s_.data() + at_ + 4, v, 16);
    expect(ec == std::errc{} && ptr == s_.data() + at_ + 4, "four hex digits");
    at_ += 4;
    return v;
  }

  void append_utf8(std::string& out, unsigned cp) {
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
    ++at_;  // '"'
    std::string out;
    while (true) {
      expect(at_ < s_.size(), "the closing '\"' of a string");
      const char c = s_[at_++];
      if (c == '"') return out;
      expect(static_cast<unsigned char>(c) >= 0x20, "no control character inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      expect(at_ < s_.size(), "an escape");
      switch (s_[at_++]) {
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
          if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
            expect(take_word("\\u"), "the low half of a surrogate pair");
            const unsigned low = hex4();
            expect(low >= 0xDC00 && low < 0xE000, "the low half of a surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else {
            expect(cp < 0xDC00 || cp >= 0xE000, "no lone low surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("one of the escapes \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u");
      }
    }
  }

  json_value number() {
    const std::size_t begin = at_;
    if (at_ < s_.size() && s_[at_] == '-') ++at_;
    const auto digits = [&] {
      const std::size_t from = at_;
      while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') ++at_;
      return at_ - from;
    };
    const std::size_t whole = digits();
    expect(whole > 0, "a value");
    expect(!(whole > 1 && s_[at_ - whole] == '0'), "a number without leading zeros");
    bool integral = true;
    if (at_ < s_.size() && s_[at_] == '.') {
      ++at_, integral = false;
      expect(digits() > 0, "digits after '.'");
    }
    if (at_ < s_.size() && (s_[at_] == 'e' || s_[at_] == 'E')) {
      ++at_, integral = false;
      if (at_ < s_.size() && (s_[at_] == '+' || s_[at_] == '-')) ++at_;
      expect(digits() > 0, "exponent digits");
    }
    const char* first = s_.data() + begin;
    const char* last = s_.data() + at_;
    if (integral) {
      std::int64_t v = 0;
      const auto [ptr, ec] = std::from_chars(first, last, v);
      if (ec == std::errc::result_out_of_range) {
        at_ = begin;
        fail("an integer within int64");
      }
      return {v};
    }
    double d = 0;
    const auto [ptr, ec] = std::from_chars(first, last, d);
    if (ec != std::errc{} || !std::isfinite(d)) {
      at_ = begin;
      fail("a finite number");
    }
    return {d};
  }

  std::string_view s_;
  std::size_t at_ = 0;
};

//! Parses a whole JSON document (see the file comment).
[[nodiscard]] inline json_value parse_json(std::string_view text) { return json_parser(text).document(); }

}  // namespace detail
ZEPPELIN_NAMESPACE_END
