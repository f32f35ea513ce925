// zeppelin/program/options.hpp
// How a plan is executed: the choices make_program (program/build.hpp) records in the
// execution program. The partitioner decides WHERE tokens live and which collective each
// group runs (core/plan.hpp); these options decide HOW the attention layer runs on it.
//   launch   launch_policy: one kernel launch per ring group and round (per_group), or one
//            per rank, level and round over the blocks of ALL the rank's groups of the level
//            (fused_round); either way a launch is split into CSR waves
//            (program/launch_waves.hpp)
//   engine   engine_policy: one compute stream running the levels one after another
//            (in_order), or Zeppelin's engine (prioritized): one stream per queue, inter-node
//            rings above intra-node rings above local sequences, local work enqueued first so
//            it fills the rings' gaps, the rings' rounds interleaved on the one
//            communication stream
//   router   any_router: how each phase's payloads become pieces (direct, or proxy routing
//            over every NIC, route/proxy.hpp)
//   remap    std::optional<remap_objective>: remap every micro-batch between the attention
//            layout and the token-balanced layout (Zeppelin 3.4) with the exact min-max
//            solver under this objective, priced by the topology's per-token link costs
//   wire     the row sizes of the executor's tensors (program/wire_format.hpp)
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/transfer.hpp>
#include <zeppelin/program/shared_list.hpp>
#include <zeppelin/program/wire_format.hpp>
#include <zeppelin/remap/problem.hpp>
#include <zeppelin/route/direct.hpp>
#include <zeppelin/route/proxy.hpp>
#include <zeppelin/route/router.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! How a rank's ring blocks become kernel launches.
enum class launch_policy : std::uint8_t {
  per_group = 0,    //!< per (ring group, round) on each member, as TE CP runs its one CP group
  fused_round = 1,  //!< per (rank, level, round) over the blocks of every group of the level
};

[[nodiscard]] constexpr std::string_view to_string(launch_policy l) noexcept {
  return l == launch_policy::fused_round ? "fused_round" : "per_group";
}

//! How the levels of a micro-batch share the GPU (Zeppelin 3.2).
enum class engine_policy : std::uint8_t {
  in_order = 0,     //!< one compute stream: inter-node rings, then intra-node rings, then local
  prioritized = 1,  //!< one stream per queue with priorities inter > intra > local
};

[[nodiscard]] constexpr std::string_view to_string(engine_policy e) noexcept {
  return e == engine_policy::prioritized ? "prioritized" : "in_order";
}

//! One of the library's routers, chosen at run time (a router itself).
struct any_router {
  std::variant<direct_router, proxy_router> policy{};
  [[nodiscard]] std::vector<transfer> route(std::span<const transfer> payloads, const topology& t) const {
    return std::visit([&](const auto& r) { return r.route(payloads, t); }, policy);
  }
  //! route() for payloads held in a shared list. The direct router's pieces of payloads that
  //! are already whole direct pieces (payload i at index i, offset 0, some bytes; what the
  //! program builder makes) are those payloads: the pieces share the list instead of copying it.
  [[nodiscard]] shared_list<transfer> route(const shared_list<transfer>& payloads, const topology& t) const {
    const std::span<const transfer> all(payloads.items());
    return std::visit(
        [&](const auto& r) -> shared_list<transfer> {
          if constexpr (std::is_same_v<std::decay_t<decltype(r)>, direct_router>) {
            detail::check_payloads(all, t);
            bool whole = true;
            for (std::size_t i = 0; i < all.size() && whole; ++i)
              whole = all[i].bytes > 0 && all[i].payload == static_cast<std::int32_t>(i) && all[i].offset == 0 &&
                      all[i].step == route_step::direct;
            if (whole) return payloads;
          }
          return r.route(all, t);
        },
        policy);
  }
  friend bool operator==(const any_router&, const any_router&) = default;
};
static_assert(router<any_router>);

struct program_options {
  wire_format wire{};
  launch_policy launch = launch_policy::per_group;
  engine_policy engine = engine_policy::in_order;
  any_router router{};
  std::optional<remap_objective> remap{};
  //! Largest program make_program builds, in (position, round) pairs per pass, summed over
  //! groups and micro-batches: a ring or all-gather group of G ranks runs G rounds on each of
  //! its G members (G^2), an all-to-all group of Ulysses degree u runs u peers and G / u ring
  //! rounds on each (G (u + G / u)), and the program holds every one (a few KB each with its
  //! transfers, pieces and launches). 2^20 keeps a program within a few GB; beyond it
  //! make_program throws resource_limit naming the largest group.
  std::int64_t max_member_rounds = std::int64_t{1} << 20;
  //! Largest sum over groups and sequences of (the sequence's shards in the group)^2: each
  //! (query shard, key shard) pair makes up to three attention blocks, held by the ring
  //! schedule and the launches. 2^26 keeps a program within a few GB (TE CP's zigzag of 8192
  //! documents of 512 tokens over 32 GPUs: 3.3e7 pairs, 2.6 GB); beyond it make_program
  //! throws resource_limit.
  std::int64_t max_shard_pairs = std::int64_t{1} << 26;
  friend bool operator==(const program_options&, const program_options&) = default;
};

ZEPPELIN_NAMESPACE_END
