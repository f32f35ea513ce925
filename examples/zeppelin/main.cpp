// examples/zeppelin/main.cpp
// `zeppelin [subcommand] [options]`. With no subcommand it runs the main job
// (`zeppelin simulate`, on its embedded defaults unless options are given). Errors go to
// stderr, exit status 1; so does a failed write of standard output.
#include "commands.hpp"

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/output_file.hpp>

#include <algorithm>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <string_view>
#include <vector>

int main(int argc, char** argv) {
  CLI::App app{"zeppelin: plan, route, remap and simulate balanced long-context training steps"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "zeppelin " + std::to_string(ZEPPELIN_VERSION_MAJOR) + "." +
                                        std::to_string(ZEPPELIN_VERSION_MINOR) + "." + std::to_string(ZEPPELIN_VERSION_PATCH));
  app.option_defaults()->always_capture_default();  // every subcommand's --help shows its defaults
  auto registry = zeppelin_tool::command_registry();
  std::stable_sort(registry.begin(), registry.end(), [](const auto& a, const auto& b) { return a.order < b.order; });
  for (const auto& command : registry) command.add(app);
  example_cli::refuse_empty_values(app);

  // No subcommand (no arguments, or options only): the options go to the main job.
  std::vector<const char*> args(argv, argv + argc);
  const bool asks_for_help =
      argc > 1 && (std::string_view(argv[1]) == "-h" || std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "--version");
  if (argc == 1 || (argv[1][0] == '-' && !asks_for_help))
    args.insert(args.begin() + 1, zeppelin_tool::default_command);
  try {
    app.parse(static_cast<int>(args.size()), args.data());
    zeppelin::finish_standard_output();  // `--json > /dev/full` is an error, not exit 0
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::bad_alloc&) {
    std::cerr << "zeppelin: out of memory: the batch or cluster is too large for this machine's memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "zeppelin: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
