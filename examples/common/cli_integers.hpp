// examples/common/cli_integers.hpp
// Integer options that refuse what they cannot hold, shared by the examples' command lines.
// CLI11 alone clamps text that does not fit the variable (--capacity 2^63 becomes 2^63 - 1,
// --seed -1 becomes 2^64 - 1): a value the user did not write.
//   exact_integer<T>()             a CLI11 check: the text is a decimal integer in T's range
//   add_integer_option(app, ...)   app->add_option with that check
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

}  // namespace example_cli
