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

#include <zeppelin/partition/detail/cp_groups.hpp>
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

  [[nodiscard]] plan partition(const batch& b, const topology& t) const {
    return detail::partition_over_cp_groups(
        name, b, t, capacity, cp_size, collective_kind::all_gather, 2,
        [&](detail::plan_builder& out, const std::vector<rank_index>& ranks, group_index id,
            const std::vector<sequence_index>& seqs) {
          zigzag_dealer dealer(static_cast<std::int32_t>(ranks.size()));
          for (const sequence_index s : seqs) out.add_zigzag(s, b.length(s), ranks, id, 0, dealer.next(b.length(s)));
        });
  }
  friend bool operator==(const allgather&, const allgather&) = default;
};
static_assert(partitioner<allgather>);

ZEPPELIN_NAMESPACE_END
