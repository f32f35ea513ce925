// zeppelin/partition/ulysses.hpp
// DeepSpeed-Ulysses sequence parallelism (the InfiniPipe paper's "DeepSpeed" baseline) and
// USP's Ulysses x ring hybrid: attention runs in the head layout after an all-to-all
// (collective_kind::all_to_all, program/detail/all_to_all_collective.hpp), where every rank
// holds every token of its subgroup for its share of the heads. Every sequence is
// zigzag-split over its group (schedule/zigzag.hpp: position p of G holds chunks p and
// 2G - 1 - p, no padding), as USP lays out its ring: with Ulysses alone the layout does not
// change the work (a lane sees every token of the group), and where the heads force a ring
// over subgroups of u ranks, subgroup i holds chunks i u .. i u + u - 1 and their mirrors, the
// balanced causal share of every sequence that contiguous slices would not give (the last
// subgroup would do 2r - 1 times the first's work).
//   in : batch, topology, capacity L, cp_size (0: one group of all N * P ranks; else groups of
//        cp_size consecutive ranks, data-parallel over the groups, sequences dealt by
//        detail/cp_groups.hpp as for allgather)
//   out: the plan. Which position gets a sequence's first chunk rotates over the group's
//        sequences (zigzag_dealer, one counter per group), so the ranks of a group hold token
//        totals within one chunk of each other.
// The program builder refuses a group whose size does not split the model's heads into lanes
// (program/detail/all_to_all_collective.hpp): choose cp_size a divisor of the heads.
// Throws invalid_argument (cp_size not dividing N * P), infeasible (batch > N * P * L, a
// sequence no group can take). Host-only.
#pragma once

#include <zeppelin/partition/detail/cp_zigzag_layout.hpp>
#include <zeppelin/partition/detail/plan_builder.hpp>
#include <zeppelin/partition/partitioner.hpp>
#include <zeppelin/schedule/zigzag.hpp>

#include <cstdint>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct ulysses {
  static constexpr std::string_view name = "ulysses";
  //! Tokens a GPU may hold (L).
  token_count capacity = 4096;
  //! Ranks per sequence-parallel group; 0 = all ranks.
  std::int32_t cp_size = 0;

  //! What its groups run.
  static constexpr collective_kind collective = collective_kind::all_to_all;

  [[nodiscard]] plan partition(const batch& b, const topology& t) const { return partition_into<detail::plan_store>(b, t); }

  //! The plan's layout into a builder's Store (partition/detail/plan_builder.hpp): the plan, or
  //! its sums alone (layout_totals_store).
  template <class Store>
  [[nodiscard]] typename Store::result_type partition_into(const batch& b, const topology& t) const {
    return layout().template lay_out<Store>(name, b, t, collective);
  }

  //! Its layout, which even_split, allgather and ulysses share but for the collective.
  [[nodiscard]] detail::cp_zigzag_layout layout() const { return {capacity, cp_size}; }
  friend bool operator==(const ulysses&, const ulysses&) = default;
};
static_assert(partitioner<ulysses>);

ZEPPELIN_NAMESPACE_END
