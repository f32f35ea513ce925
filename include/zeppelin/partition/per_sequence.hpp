// zeppelin/partition/per_sequence.hpp
// Per-sequence sharding (WLB-LLM's name for what Megatron-LM's CP does with a packed
// micro-batch): the group's documents are laid end to end as ONE token stream, which is cut
// into 2C equal chunks; rank i of a CP group of C ranks holds chunks i and 2C-1-i, whatever
// documents they cut. Attention stays causal within each document, so a rank's work depends
// on where the cuts fall: the imbalance WLB-LLM's per-document sharding (per_document.hpp)
// removes.
//   in : batch, topology, capacity L, cp_size (0: one CP group of all N * P ranks)
//   out: for a group's stream of T tokens (its documents in batch order), with
//        D = 2C * floor(T / 2C): positions [i c, (i+1) c) and [(2C-1-i) c, (2C-i) c) of the
//        stream, c = D / 2C, go to rank i, cut into one shard per document they touch; the
//        R = T - D < 2C tail positions are dealt round-robin (rank p mod C), padding-free.
// Several CP groups (cp_size < N * P): documents dealt by detail/cp_groups.hpp.
// Throws invalid_argument (cp_size not dividing N * P), infeasible (batch > N * P * L, a
// document no group can take, a rank over L). Host-only.
#pragma once

#include <zeppelin/partition/detail/cp_groups.hpp>
#include <zeppelin/partition/detail/plan_builder.hpp>
#include <zeppelin/partition/partitioner.hpp>

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct per_sequence {
  static constexpr std::string_view name = "per_sequence";
  //! Tokens a GPU may hold (L).
  token_count capacity = 4096;
  //! Ranks per CP group; 0 = all ranks.
  std::int32_t cp_size = 0;

  [[nodiscard]] plan partition(const batch& b, const topology& t) const { return partition_into<detail::plan_store>(b, t); }

  //! The plan's layout into a builder's Store (partition/detail/plan_builder.hpp).
  template <class Store>
  [[nodiscard]] typename Store::result_type partition_into(const batch& b, const topology& t) const {
    return detail::partition_over_cp_groups<Store>(
        name, b, t, capacity, cp_size, collective_kind::ring, 3,
        [&](auto& out, const std::vector<rank_index>& ranks, group_index id, const std::vector<sequence_index>& seqs) {
          const auto C = static_cast<token_count>(ranks.size());
          token_count total = 0;
          for (const sequence_index s : seqs) total += b.length(s);
          const token_count chunk = total / (2 * C), body = chunk * 2 * C;
          // the owner of stream position p in [0, body): chunk j = p / chunk -> rank min(j, 2C-1-j)
          const auto owner = [&](token_count p) {
            const token_count j = p / chunk;
            return j < C ? j : 2 * C - 1 - j;
          };
          token_count start = 0;  // the document's first stream position
          for (const sequence_index s : seqs) {
            const token_count len = b.length(s);
            // the body part of the document: maximal runs of positions with one owner (chunks
            // C - 1 and C are adjacent and share theirs)
            for (token_count p = start; p < std::min(start + len, body);) {
              token_count end = std::min({start + len, body, (p / chunk + 1) * chunk});
              while (end < std::min(start + len, body) && owner(end) == owner(p)) end = std::min({start + len, body, (end / chunk + 1) * chunk});
              out.add_range(ranks[static_cast<std::size_t>(owner(p))], s, {p - start, end - start}, id);
              p = end;
            }
            for (token_count p = std::max(start, body); p < start + len; ++p)
              out.add_range(ranks[static_cast<std::size_t>((p - body) % C)], s, {p - start, p - start + 1}, id);
            start += len;
          }
        });
  }
  friend bool operator==(const per_sequence&, const per_sequence&) = default;
};
static_assert(partitioner<per_sequence>);

ZEPPELIN_NAMESPACE_END
