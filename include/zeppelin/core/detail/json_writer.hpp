// zeppelin/core/detail/json_writer.hpp
// The two pieces every JSON the library writes by hand needs (plans, traces):
//   json_escape(s)   s with '"', '\' and control characters escaped (other bytes as they are)
//   json_double(x)   a finite double in 17 significant digits (reads back bit for bit);
//                    "null" when x is not finite
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

inline std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else out += c;
  }
  return out;
}

inline std::string json_double(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
