// zeppelin/partition/allgather.hpp
// LLaMA-3 context parallelism (the paper's "LLaMA CP" baseline): every sequence is cut into
// 2 * CP chunks and rank i of its CP group holds chunks i and 2CP-1-i; before attention the
// group all-gathers K and V, so each rank attends its queries against the whole sequence
// (no ring rounds; the group's rank order is the all-gather's ring order).
//   in : batch, topology, capacity L, cp_size (0: one CP group of all N * P ranks, as in the
//        paper's baseline; else groups of cp_size consecutive ranks, data-parallel over the
//        groups, sequences dealt by detail/cp_groups.hpp)
//   out: the layout of even_split restricted to each CP group; every group's collective is
//        collective_kind::all_gather, which tells the executors and the simulator to
//        all-gather instead of running a ring.
// Uneven lengths: the near-equal chunks of schedule/zigzag.hpp (no padding), the runs of
// extra tokens rotated round-robin over each group's ring (zigzag_dealer, one
// counter per CP group across its sequences, see even_split.hpp): the ranks of a group hold
// token totals within one of each other, so a group whose sequences total <= cp * L never
// puts more than L on a rank (exact fill included).
// Throws invalid_argument (cp_size not dividing N * P), infeasible (batch > N * P * L, a
// sequence no group can take). Host-only.
#pragma once

#include <zeppelin/partition/detail/cp_zigzag_layout.hpp>
#include <zeppelin/partition/detail/plan_builder.hpp>
#include <zeppelin/partition/partitioner.hpp>
#include <zeppelin/schedule/zigzag.hpp>

#include <algorithm>
#include <cstdint>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

struct allgather {
  static constexpr std::string_view name = "allgather";
  //! Tokens a GPU may hold (L).
  token_count capacity = 4096;
  //! Ranks per CP group; 0 = all ranks.
  std::int32_t cp_size = 0;

  //! What its groups run.
  static constexpr collective_kind collective = collective_kind::all_gather;

  [[nodiscard]] plan partition(const batch& b, const topology& t) const { return partition_into<detail::plan_store>(b, t); }

  //! The plan's layout into a builder's Store (partition/detail/plan_builder.hpp): the plan, or
  //! its sums alone (layout_totals_store).
  template <class Store>
  [[nodiscard]] typename Store::result_type partition_into(const batch& b, const topology& t) const {
    return layout().template lay_out<Store>(name, b, t, collective);
  }

  //! Its layout, which even_split, allgather and ulysses share but for the collective.
  [[nodiscard]] detail::cp_zigzag_layout layout() const { return {capacity, cp_size}; }
  friend bool operator==(const allgather&, const allgather&) = default;
};
static_assert(partitioner<allgather>);

ZEPPELIN_NAMESPACE_END
