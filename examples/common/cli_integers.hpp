// examples/common/cli_integers.hpp
// Option checks shared by the examples' command lines: integers that refuse what they cannot
// hold, sizes, signs and named choices, each refusal naming the text the user wrote.
// CLI11 alone clamps text that does not fit the variable (--capacity 2^63 becomes 2^63 - 1,
// --seed -1 becomes 2^64 - 1): a value the user did not write.
//   exact_integer<T>()             a CLI11 check: the text is a decimal integer in T's range
//   add_integer_option(app, ...)   app->add_option with that check
//   token_size()                   a CLI11 transform: "4096", "64K", "1M", "2G" (K = 1024) ->
//                                  the decimal count, refusing negative or overflowing sizes
//   add_size_option(app, ...)      app->add_option with that transform: every token count and
//                                  capacity of the command lines accepts the same sizes
//   one_of({{name, value}, ...})   a CLI11 transform from one of the names to its value (an enum's
//                                  or an integer's), naming the choices when refused (CLI11's
//                                  CheckedTransformer prints the values, raw bytes for a uint8_t
//                                  enum, and its message stops at a NUL)
//   refuse_empty_values(app)       every value-taking option refuses '' (CLI11 reads it as 0)
//   positive(), non_negative()     CLI11 checks of a number's sign whose message names the text
//                                  and the bound (CLI11's PositiveNumber prints its range with
//                                  DBL_MAX written out in 309 digits, and "0 not in range 0 to")
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

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

//! A check that an option's number (integer or floating) is one `accept` takes; text that is
//! not a number passes on to the conversion, which refuses it. The message names the text and
//! what was `wanted`.
template <class Accept>
CLI::Validator number_check(Accept accept, std::string name, std::string wanted) {
  return CLI::Validator(
      [accept, wanted](std::string& text) -> std::string {
        double value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, ec] = std::from_chars(text.data(), end, value);
        if (ec != std::errc{} || stop != end || accept(value)) return {};
        return "'" + text + "' is not " + wanted;
      },
      std::move(name), "number_check");
}
//! > 0 (an integer option: at least 1); NaN fails.
inline CLI::Validator positive() {
  return number_check([](double v) { return v > 0; }, "POSITIVE", "positive (> 0)");
}
//! >= 0; NaN fails.
inline CLI::Validator non_negative() {
  return number_check([](double v) { return v >= 0; }, "NONNEGATIVE", "non-negative (>= 0)");
}

//! Rewrites one of the names into its value's decimal text, which CLI11 then converts to the
//! option's integer or enum; refuses anything else, listing the names. The names, in the order
//! given, are also the help's type.
inline CLI::Validator one_of(std::vector<std::pair<std::string, long long>> choices) {
  std::string names;
  for (const auto& [name, value] : choices) names += (names.empty() ? "" : "|") + name;
  return CLI::Validator(
      [choices, names](std::string& text) -> std::string {
        for (const auto& [name, value] : choices)
          if (text == name) {
            text = std::to_string(value);
            return {};
          }
        return "'" + text + "' is not one of " + names;
      },
      names, "one_of");
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

//! Adds to every option of `app` and its subcommands that takes a value a check refusing an
//! empty one: CLI11 reads `--slack ''` as 0, a value the user did not write. Call it once,
//! after every option is added.
inline void refuse_empty_values(CLI::App& app) {
  const CLI::Validator non_empty(
      [](std::string& text) -> std::string { return text.empty() ? std::string("an empty value is not a value; give one") : std::string(); },
      "", "non_empty");
  for (CLI::Option* option : app.get_options([](CLI::Option* o) { return o->get_type_size_min() > 0; })) option->check(non_empty);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) refuse_empty_values(*sub);
}

}  // namespace example_cli
