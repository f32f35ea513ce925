// zeppelin/core/detail/json_fields.hpp
// Typed reads of parsed JSON values (core/detail/json_reader.hpp) for the library's formats,
// every refusal an invalid_argument that starts with the format's name ("plan JSON", "step
// plan JSON", "step job") and names the member:
//   integer<Int>(v, what, lo, hi)  an integer in [lo, hi] (default: Int's range)
//   number(v, what)                an integer or a float as a double; null reads as NaN
//                                  (how the writers spell a non-finite number)
//   boolean(v, what)               true or false
//   choice(v, what, values)        the one of `values` whose to_string is v's string; the
//                                  refusal lists the valid names
// Host only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/detail/json_reader.hpp>
#include <zeppelin/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

struct json_fields {
  std::string_view format;  //!< starts every message, e.g. "plan JSON"

  template <class Int>
  [[nodiscard]] Int integer(const json_value& v, std::string_view what, std::int64_t lo = std::numeric_limits<Int>::min(),
                            std::int64_t hi = std::numeric_limits<Int>::max()) const {
    const std::int64_t x = v.as_int(what);
    ZEPPELIN_EXPECTS(x >= lo && x <= hi, std::string(format) + ": \"" + std::string(what) + "\" is out of range",
                     {{"value", double(x)}, {"min", double(lo)}, {"max", double(hi)}});
    return static_cast<Int>(x);
  }

  [[nodiscard]] double number(const json_value& v, std::string_view what) const {
    if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
    if (const auto* i = std::get_if<std::int64_t>(&v.v)) return static_cast<double>(*i);
    const auto* d = std::get_if<double>(&v.v);
    ZEPPELIN_EXPECTS(d != nullptr, std::string(format) + ": \"" + std::string(what) + "\" must be a number", {});
    return *d;
  }

  [[nodiscard]] bool boolean(const json_value& v, std::string_view what) const {
    const auto* b = std::get_if<bool>(&v.v);
    ZEPPELIN_EXPECTS(b != nullptr, std::string(format) + ": \"" + std::string(what) + "\" must be true or false", {});
    return *b;
  }

  template <class Enum, std::size_t N>
  [[nodiscard]] Enum choice(const json_value& v, std::string_view what, const Enum (&values)[N]) const {
    const std::string& name = v.as_string(what);
    std::string valid;
    for (const Enum e : values) {
      if (to_string(e) == name) return e;
      valid += (valid.empty() ? "" : ", ") + std::string(to_string(e));
    }
    ZEPPELIN_THROW(invalid_argument,
                   std::string(format) + ": unknown " + std::string(what) + " \"" + name.substr(0, 40) + "\" (valid: " + valid + ")", {});
  }
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
