// zeppelin/sim/options.hpp
// How the simulator executes a plan: the execution choices it hands to make_program
// (program/options.hpp: launches, engine, router, remap) and how much it simulates.
//   in : nothing (designated initialisers)
//   out: sim_options, read by simulate() (sim/simulate.hpp)
// The partitioner decides WHERE tokens live and each group's collective (the plan); these
// options decide HOW the step runs on that layout. The simulator builds the execution program
// every engine runs from them, so it prices exactly what the engines execute. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/program/options.hpp>
#include <zeppelin/program/wire_format.hpp>
#include <zeppelin/remap/problem.hpp>

#include <cstddef>
#include <optional>

ZEPPELIN_NAMESPACE_BEGIN

struct sim_options {
  //! Kernel launches of ring rounds (program/options.hpp); the methods choose theirs
  //! (planner/methods.hpp).
  launch_policy launch = launch_policy::per_group;
  //! How a micro-batch's levels share the GPU: one stream, or Zeppelin's prioritised queues.
  engine_policy engine = engine_policy::in_order;
  //! How every phase's payloads are routed: direct_router, or proxy_router (Zeppelin 3.3,
  //! which splits an inter-node payload over proxy GPUs on distinct NICs of both nodes when
  //! equation (1) says that is cheaper; also what NCCL's multi-channel rings do for an
  //! all-gather).
  any_router router{};
  //! Remapping (Zeppelin 3.4): before the linear modules move every rank to the
  //! token-balanced layout (exact min-max remap solver, this objective) and back before
  //! attention, forward and backward.
  std::optional<remap_objective> remap{};
  //! TP group size inside each CP rank (the plan and topology are then the
  //! tensor_parallel_view, sim/tensor_parallel.hpp): adds the sequence-parallel collectives.
  int tensor_parallel = 1;
  //! Layers simulated explicitly, back to back, per phase (forward / backward of each
  //! micro-batch); the phase time is scaled by layers / chained_layers. 0 = every layer.
  //! Layers are identical, so one layer already gives the steady state when a layer boundary
  //! synchronises the ranks (remap alltoallv, TP collectives, rings spanning the GPUs);
  //! chaining more lets fast ranks run ahead across layers.
  int chained_layers = 1;
  //! Tasks an event engine holds at most, about: ranks that exchange nothing with one another
  //! are simulated apart, in chunks of about this many tasks per layer, so that each run's
  //! tasks stay in cache (sim/detail/independent_ranks.hpp). The results do not depend on it
  //! (the same arithmetic runs either way); a trace or an execution record runs every rank in
  //! one engine. Must be >= 1.
  std::size_t tasks_per_engine = std::size_t{1} << 18;
  //! Threads (the caller's among them) that run those chunks at once; the results do not
  //! depend on it (each chunk writes its own ranks, and the chunks are combined in rank
  //! order). 1: the calling thread alone. Must be >= 1.
  int threads = 1;
  //! Keep every task's timing for a trace (sim_result::trace); costs memory.
  bool record_trace = false;
  //! Keep the execution record of one layer (sim_result::record, program/record.hpp): every
  //! transfer and launch the simulator priced.
  bool record_execution = false;
  friend bool operator==(const sim_options&, const sim_options&) = default;
};

//! The program options `o` stands for, for tensors of wire format `wire`: what simulate()
//! builds its execution program with, and what an engine running the same choices uses.
[[nodiscard]] inline program_options to_program_options(const sim_options& o, const wire_format& wire) {
  return program_options{wire, o.launch, o.engine, o.router, o.remap};
}

ZEPPELIN_NAMESPACE_END
