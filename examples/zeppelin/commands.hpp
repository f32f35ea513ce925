// examples/zeppelin/commands.hpp
// The subcommands of the `zeppelin` tool. Each lives in its own .cpp and registers itself
// with ZEPPELIN_TOOL_COMMAND(order, function); main.cpp adds them to the CLI11 app in
// `order`. A subcommand prints its result to stdout; on error it throws, and main prints
// the message to stderr and exits with status 1.
#pragma once

#include "../common/cli_integers.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <string>
#include <thread>
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

//! The threads of a simulation or search when the user names none: every hardware thread.
//! Their results do not depend on their threads, so the tool takes the machine (the
//! library's defaults are one: a trainer owns its threads).
inline int hardware_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

//! --threads: threads that run `work` at once (sim_options::threads, greedy_dispatch::threads),
//! at least one.
inline CLI::Option* add_threads_option(CLI::App* cmd, int& threads,
                                       const std::string& work = "threads that simulate independent groups of GPUs at once") {
  return add_integer_option(cmd, "--threads", threads, work + " (default: the machine's hardware threads; the results do not depend on it)")
      ->capture_default_str()
      ->check(example_cli::positive());
}

//! The subcommand `zeppelin` runs when given no arguments (the main job).
inline constexpr const char* default_command = "simulate";

}  // namespace zeppelin_tool

#define ZEPPELIN_TOOL_COMMAND(order, function)                                      \
  [[maybe_unused]] static const bool zeppelin_tool_registered_##function =          \
      (::zeppelin_tool::command_registry().push_back({(order), &(function)}), true)
