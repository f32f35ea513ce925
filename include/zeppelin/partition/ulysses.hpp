// zeppelin/partition/ulysses.hpp
// DeepSpeed-Ulysses sequence parallelism (the InfiniPipe paper's "DeepSpeed" baseline and
// the head-parallel half of USP): every sequence is cut into one contiguous slice per rank of
// its group; attention runs in the head layout after an all-to-all (collective_kind::
// all_to_all, program/detail/all_to_all_collective.hpp), where every rank holds every token
// of its group for its share of the heads, so no zigzag is needed for balance.
//   in : batch, topology, capacity L, cp_size (0: one group of all N * P ranks; else groups of
//        cp_size consecutive ranks, data-parallel over the groups, sequences dealt by
//        detail/cp_groups.hpp as for allgather)
//   out: the plan. Slices of a sequence of length q G + s: s of them hold q + 1 tokens; which
//        rank gets the first slice rotates over the group's sequences (a counter advanced by
//        s per sequence), so the ranks of a group hold token totals within one of each other.
// The program builder refuses a group whose size does not split the model's heads into lanes
// (program/detail/all_to_all_collective.hpp): choose cp_size a divisor of the heads.
// Throws invalid_argument (cp_size not dividing N * P), infeasible (batch > N * P * L, a
// sequence no group can take). Host-only.
#pragma once

#include <zeppelin/partition/detail/cp_groups.hpp>
#include <zeppelin/partition/detail/plan_builder.hpp>
#include <zeppelin/partition/partitioner.hpp>

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

  [[nodiscard]] plan partition(const batch& b, const topology& t) const {
    return detail::partition_over_cp_groups(
        name, b, t, capacity, cp_size, collective_kind::all_to_all, 1,
        [&](detail::plan_builder& out, const std::vector<rank_index>& ranks, group_index id, const std::vector<sequence_index>& seqs) {
          const auto G = static_cast<token_count>(ranks.size());
          token_count first = 0;  // the rank of the next sequence's first slice
          for (const sequence_index s : seqs) {
            const token_count length = b.length(s), q = length / G, extra = length % G;
            token_count begin = 0;
            for (token_count i = 0; i < G; ++i) {
              const token_count end = begin + q + (i < extra ? 1 : 0);
              if (end > begin) out.add_range(ranks[static_cast<std::size_t>((first + i) % G)], s, {begin, end}, id);
              begin = end;
            }
            first = (first + extra) % G;
          }
        });
  }
  friend bool operator==(const ulysses&, const ulysses&) = default;
};
static_assert(partitioner<ulysses>);

ZEPPELIN_NAMESPACE_END
