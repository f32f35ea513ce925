// examples/zeppelin/main.cpp
// `zeppelin [subcommand] [options]`. With no arguments it runs the main job
// (`zeppelin simulate` on its embedded defaults). Errors go to stderr, exit status 1.
#include "commands.hpp"

#include <zeppelin/core/error.hpp>

#include <algorithm>
#include <exception>
#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"zeppelin: plan, route, remap and simulate balanced long-context training steps"};
  app.require_subcommand(0, 1);
  auto registry = zeppelin_tool::command_registry();
  std::stable_sort(registry.begin(), registry.end(), [](const auto& a, const auto& b) { return a.order < b.order; });
  for (const auto& command : registry) command.add(app);

  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {
      // No subcommand: run the main job with its defaults.
      const char* args[] = {argv[0], zeppelin_tool::default_command};
      app.parse(2, args);
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "zeppelin: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
