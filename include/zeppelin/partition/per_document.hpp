// zeppelin/partition/per_document.hpp
// WLB-LLM per-document sharding (padding-free), over context-parallel groups.
//   in : batch, topology, capacity L, cp_size (0: one CP group of all N * P ranks)
//   out: for every document i of a CP group of C ranks, with L_i = D_i + R_i,
//        D_i = 2C * floor(L_i / 2C): the first D_i tokens are cut into 2C EQUAL chunks of
//        D_i / 2C tokens and rank i gets chunks i and 2C-1-i (exact pair balance on the
//        divisible part: every rank computes c^2 (2C-1) + c (c+1) pairs); the R_i < 2C tail
//        tokens [D_i, L_i) are dealt one by one round-robin with ONE counter per CP group
//        that runs across the group's documents (batch order), so token counts of the ranks
//        of a group differ by at most one.
// Several CP groups (cp_size < N * P): documents dealt by detail/cp_groups.hpp. The groups run
// `collective` (a ring, or WLB-LLM's all-gather).
// Throws invalid_argument (cp_size not dividing N * P), infeasible (batch > N * P * L, a
// document no group can take, a rank over L). Host-only.
#pragma once

#include <zeppelin/partition/detail/cp_groups.hpp>
#include <zeppelin/partition/detail/plan_builder.hpp>
#include <zeppelin/partition/partitioner.hpp>

#include <algorithm>
#include <cstdint>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

struct per_document {
  static constexpr std::string_view name = "per_document";
  //! Tokens a GPU may hold (L).
  token_count capacity = 4096;
  //! Ranks per CP group; 0 = all ranks.
  std::int32_t cp_size = 0;
  //! How a group's members exchange K/V: a ring (TransformerEngine's per-document CP), or an
  //! all-gather of K/V in forward and a reduce-scatter of dK/dV in backward (WLB-LLM's, Llama-3
  //! style).
  collective_kind collective = collective_kind::ring;

  [[nodiscard]] plan partition(const batch& b, const topology& t) const { return partition_into<detail::plan_store>(b, t); }

  //! The plan's layout into a builder's Store (partition/detail/plan_builder.hpp): the plan, or
  //! its sums alone (layout_totals_store).
  template <class Store>
  [[nodiscard]] typename Store::result_type partition_into(const batch& b, const topology& t) const {
    return detail::partition_over_cp_groups<Store>(
        name, b, t, capacity, cp_size, collective, 3,
        [&](auto& out, const std::vector<rank_index>& ranks, group_index id,
            const std::vector<sequence_index>& seqs) {
          const auto C = static_cast<token_count>(ranks.size());
          token_count counter = 0;  // the round-robin dealer of tail tokens
          for (const sequence_index s : seqs) {
            const token_count len = b.length(s), chunk = len / (2 * C), body = chunk * 2 * C;
            if (chunk > 0)
              for (token_count i = 0; i < C; ++i) {
                const token_range head{i * chunk, (i + 1) * chunk}, tail{(2 * C - 1 - i) * chunk, (2 * C - i) * chunk};
                const rank_index r = ranks[static_cast<std::size_t>(i)];
                if (head.end == tail.begin) {
                  out.add_range(r, s, {head.begin, tail.end}, id);
                } else {
                  out.add_range(r, s, head, id);
                  out.add_range(r, s, tail, id);
                }
              }
            for (token_count p = body; p < len; ++p, ++counter)
              out.add_range(ranks[static_cast<std::size_t>(counter % C)], s, {p, p + 1}, id);
          }
        });
  }
  friend bool operator==(const per_document&, const per_document&) = default;
};
static_assert(partitioner<per_document>);

ZEPPELIN_NAMESPACE_END
