// examples/zeppelin/exchanges_option.hpp
// --exchanges per_port|per_flow, the option of the commands that price Hydraulis' switching on
// the step simulator (`zeppelin step`, `zeppelin strategy`). Kept out of commands.hpp so the
// other commands do not parse the simulator's backend.
#pragma once

#include "commands.hpp"

#include <zeppelin/sim/step_backend.hpp>

#include <CLI/CLI.hpp>

#include <optional>

namespace zeppelin_tool {

//! --exchanges per_port|per_flow: how a step simulation prices Hydraulis' switching
//! (sim/step_backend.hpp exchange_pricing); empty: per_port.
inline CLI::Option* add_exchanges_option(CLI::App* cmd, std::optional<zeppelin::exchange_pricing>& exchanges) {
  return cmd
      ->add_option("--exchanges", exchanges,
                   "how the simulation prices the switching's exchanges: per_port (each whole, at its busiest port's "
                   "bytes, after every GPU posted it; the default) or per_flow (every transfer a flow, max-min fair; slow at "
                   "1,000+ GPUs)")
      ->transform(example_cli::one_of({{"per_port", static_cast<long long>(zeppelin::exchange_pricing::per_port)},
                                       {"per_flow", static_cast<long long>(zeppelin::exchange_pricing::per_flow)}}));
}

}  // namespace zeppelin_tool
