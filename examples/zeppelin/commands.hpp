// examples/zeppelin/commands.hpp
// The subcommands of the `zeppelin` tool. Each lives in its own .cpp and registers itself
// with ZEPPELIN_TOOL_COMMAND(order, function); main.cpp adds them to the CLI11 app in
// `order`. A subcommand prints its result to stdout; on error it throws, and main prints
// the message to stderr and exits with status 1.
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <limits>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace zeppelin_tool {

struct command_registration {
  int order;                     //!< position in `zeppelin --help`
  void (*add)(CLI::App& app);    //!< adds the subcommand and its callback
};

inline std::vector<command_registration>& command_registry() {
  static std::vector<command_registration> registry;
  return registry;
}

//! A check that an option's text is a decimal integer within T's range. CLI11 alone clamps
//! what does not fit (--capacity 2^63 becomes 2^63 - 1, --seed -1 becomes 2^64 - 1): a value
//! the user did not write. Runs before the conversion; the message names the text and range.
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

//! The subcommand `zeppelin` runs when given no arguments (the main job).
inline constexpr const char* default_command = "simulate";

}  // namespace zeppelin_tool

#define ZEPPELIN_TOOL_COMMAND(order, function)                                      \
  [[maybe_unused]] static const bool zeppelin_tool_registered_##function =          \
      (::zeppelin_tool::command_registry().push_back({(order), &(function)}), true)
