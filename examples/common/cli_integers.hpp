// examples/common/cli_integers.hpp
// Integer options that refuse what they cannot hold, shared by the examples' command lines.
// CLI11 alone clamps text that does not fit the variable (--capacity 2^63 becomes 2^63 - 1,
// --seed -1 becomes 2^64 - 1): a value the user did not write.
//   exact_integer<T>()             a CLI11 check: the text is a decimal integer in T's range
//   add_integer_option(app, ...)   app->add_option with that check
//   token_size()                   a CLI11 transform: "4096", "64K", "1M", "2G" (K = 1024) ->
//                                  the decimal count, refusing negative or overflowing sizes
//   add_size_option(app, ...)      app->add_option with that transform: every token count and
//                                  capacity of the command lines accepts the same sizes
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

namespace example_cli {

//! A check that an option's text is a decimal integer within T's range. Runs before the
//! conversion; the message names the text and the range.
template <class T>
CLI::Validator exact_integer() {
  static_assert(std::is_integral_v<T>);
  return CLI::Validator(
      [](std::string& text) -> std::string {
        T value{};
        const char* end = text.data() + text.size();
        const auto [stop, ec] = std::from_chars(text.data(), end, value);
        if (ec == std::errc{} && stop == end) return {};
        return "'" + text + "' is not an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
               std::to_string(std::numeric_limits<T>::max()) + "]";
      },
      "", "exact_integer");
}

//! app->add_option for an integer variable, refusing text outside its type's range.
template <class T>
CLI::Option* add_integer_option(CLI::App* app, std::string name, T& variable, std::string description) {
  return app->add_option(std::move(name), variable, std::move(description))->check(exact_integer<T>());
}

//! Rewrites a size with an optional K, M or G suffix (powers of 1024) into its decimal value;
//! refuses anything else, negative sizes and sizes past 2^63 - 1, naming the text.
inline CLI::Validator token_size() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        long long value = 0;
        const char* first = text.data();
        const char* last = text.data() + text.size();
        auto [end, ec] = std::from_chars(first, last, value);
        int shift = 0;
        if (ec == std::errc() && end + 1 == last) {
          switch (*end) {
            case 'k': case 'K': shift = 10; ++end; break;
            case 'm': case 'M': shift = 20; ++end; break;
            case 'g': case 'G': shift = 30; ++end; break;
            default: break;
          }
        }
        if (ec != std::errc() || end != last || value < 0 || value > (std::numeric_limits<long long>::max() >> shift))
          return "'" + text + "' is not a token count such as 4096, 64K, 1M or 2G (K = 1024, at most 2^63 - 1)";
        text = std::to_string(value << shift);
        return {};
      },
      "SIZE", "token_size");
}

//! app->add_option for a token count or capacity given as a size (token_size).
template <class T>
CLI::Option* add_size_option(CLI::App* app, std::string name, T& variable, std::string description) {
  return app->add_option(std::move(name), variable, std::move(description))->transform(token_size());
}

}  // namespace example_cli
