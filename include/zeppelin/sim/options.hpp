// zeppelin/sim/options.hpp
// How the simulator executes a plan: which mechanisms are on and how much it simulates.
//   in : nothing (designated initialisers)
//   out: sim_options, read by simulate() (sim/simulate.hpp)
// The partitioner decides WHERE tokens live (the plan); these options decide HOW the step
// runs on that layout: the attention collective (ring or all-gather, read from the plan's
// method by default), proxy routing of inter-node transfers, remapping to the
// token-balanced layout for the linear modules, the attention engine's stream policy, how
// ring blocks become kernel launches, and tensor parallelism inside every CP rank. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/route/proxy.hpp>
#include <zeppelin/sim/event_engine.hpp>

#include <cstdint>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

//! How K/V reach the queries of a ring group.
enum class attention_collective : std::uint8_t {
  from_plan = 0,   //!< all_gather when plan.method == "allgather", else ring
  ring = 1,        //!< G ring rounds overlapped with the round's attention (TE CP, Zeppelin)
  all_gather = 2,  //!< gather all K/V first, then one attention call; backward re-gathers
                   //!< and reduce-scatters dK/dV (LLaMA-3 CP), both on the critical path
};

//! How the attention engine orders a GPU's attention calls (Zeppelin 3.2).
enum class engine_policy : std::uint8_t {
  in_order = 0,     //!< one CUDA stream: ring groups by queue order (inter -> intra -> local), round after round
  prioritized = 1,  //!< Zeppelin's engine: prioritised streams, inter > intra > local; a call
                    //!< that becomes ready preempts a lower-priority one (local work fills the
                    //!< gaps while ring K/V are in flight)
};

//! How a rank's ring attention blocks become kernel launches. Both compute the same blocks
//! (the same pairs and executed FLOPs, sim/detail/attention_call.hpp); they differ in how
//! many launches there are, the rows each is priced at and what each waits for.
enum class launch_policy : std::uint8_t {
  per_group = 0,    //!< one varlen launch per (ring group, round) on each member: it starts once
                    //!< that group's K/V for the round has arrived and is priced at the
                    //!< throughput of that group's rows alone (ring attention run per group, as
                    //!< TE CP's attention does for its one CP group)
  fused_round = 1,  //!< one varlen launch per (rank, queue, round index): the blocks of round k
                    //!< of EVERY ring group of the queue (inter-node, then intra-node) the rank is
                    //!< a member of, as one CSR block list (cuda/attention_params.hpp); it starts
                    //!< when the K/V of all of them have arrived and is priced over the union
                    //!< of its blocks (each block keeps its own tile padding; the table is read
                    //!< at the launch's total rows). Groups with fewer than k + 1 rounds have
                    //!< left the launch. What the executor does: exec/attention_engine.hpp
                    //!< runs a queue's groups in lockstep, round k of all of them as one phase.
                    //!< With the local queue already one launch per rank, a rank then issues at
                    //!< most (rounds of its inter queue + rounds of its intra queue + 1)
                    //!< attention launches per layer and direction.
};

[[nodiscard]] constexpr std::string_view to_string(launch_policy l) noexcept {
  return l == launch_policy::fused_round ? "fused_round" : "per_group";
}

struct sim_options {
  attention_collective collective = attention_collective::from_plan;
  //! Proxy routing (Zeppelin 3.3): the transfers of every round go through `proxy`
  //! (route/proxy.hpp), which splits an inter-node edge over proxy GPUs on distinct NICs of
  //! both nodes (dispatch over NVLink, multi-NIC transfer, combine over NVLink) when
  //! equation (1) says that is cheaper. Also what NCCL's multi-channel rings do for an
  //! all-gather. Off: direct_router, every transfer on its source GPU's own path.
  bool routing = false;
  //! The router used when `routing` is on: restrict the proxies (`proxies`), cap the pairs
  //! per edge (`max_proxies`), keep or drop the never-lose guard (`fallback_to_direct`).
  proxy_router proxy{};
  //! Remapping (Zeppelin 3.4): before the linear modules move every rank to the
  //! token-balanced layout (exact min-max remap solver) and back before attention, forward
  //! and backward (two alltoallv per layer and direction, hidden-state sized).
  bool remap = false;
  engine_policy engine = engine_policy::in_order;
  //! Kernel launches of ring rounds; the methods choose theirs (sim/methods.hpp). The
  //! all-gather collective follows it too: fused_round makes one launch per rank and queue
  //! over the gathered K/V of all its groups. Local sequences are always one launch per rank.
  launch_policy launch = launch_policy::per_group;
  //! TP group size inside each CP rank (the plan and topology are then the
  //! tensor_parallel_view, sim/tensor_parallel.hpp): adds the sequence-parallel collectives.
  int tensor_parallel = 1;
  //! Layers simulated explicitly, back to back, per phase (forward / backward of each
  //! micro-batch); the phase time is scaled by layers / chained_layers. 0 = every layer.
  //! Layers are identical, so one layer already gives the steady state when a layer boundary
  //! synchronises the ranks (remap alltoallv, TP collectives, rings spanning the GPUs);
  //! chaining more lets fast ranks run ahead across layers.
  int chained_layers = 1;
  //! Keep every task's timing for a trace (sim_result::trace); costs memory.
  bool record_trace = false;
  friend bool operator==(const sim_options&, const sim_options&) = default;
};

ZEPPELIN_NAMESPACE_END
