// examples/zeppelin/commands.hpp
// The subcommands of the `zeppelin` tool. Each lives in its own .cpp and registers itself
// with ZEPPELIN_TOOL_COMMAND(order, function); main.cpp adds them to the CLI11 app in
// `order`. A subcommand prints its result to stdout; on error it throws, and main prints
// the message to stderr and exits with status 1.
#pragma once

#include "../common/cli_integers.hpp"

#include <CLI/CLI.hpp>

#include <string>
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

using example_cli::add_integer_option;
using example_cli::add_size_option;
using example_cli::exact_integer;

//! Every --json output (and every JSON file the tool writes) carries its format name,
//! "zeppelin.<command>", and version: a reader checks both before it trusts the rest
//! (docs/formats.md). The version grows when a field changes meaning or goes away; a new
//! field does not change it.
inline constexpr int json_format_version = 1;

//! {"format": "zeppelin.<command>", "version": json_format_version}: the object a JSON output
//! (nlohmann::json or ordered_json) starts from.
template <class Json>
Json with_format(const char* command) {
  return Json{{"format", std::string("zeppelin.") + command}, {"version", json_format_version}};
}

//! The subcommand `zeppelin` runs when given no arguments (the main job).
inline constexpr const char* default_command = "simulate";

}  // namespace zeppelin_tool

#define ZEPPELIN_TOOL_COMMAND(order, function)                                      \
  [[maybe_unused]] static const bool zeppelin_tool_registered_##function =          \
      (::zeppelin_tool::command_registry().push_back({(order), &(function)}), true)
