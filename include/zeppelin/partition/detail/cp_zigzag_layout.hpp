// zeppelin/partition/detail/cp_zigzag_layout.hpp
// The layout even_split (TE CP), allgather (LLaMA-3 CP) and ulysses (DeepSpeed-Ulysses, USP)
// share: every sequence zigzag-split over its CP group (schedule/zigzag.hpp: position p of G
// holds chunks p and 2G - 1 - p, no padding), the runs of extra tokens rotated over the group
// (zigzag_dealer, one counter per group across its sequences in batch order). The three differ
// only in the collective their groups run, so a planner that has the layout of one has the
// layout of the others (same capacity and cp_size) once it sets that collective.
//   in : batch, topology, capacity L, cp_size (0: one group of all N * P ranks; else groups of
//        cp_size consecutive ranks, sequences dealt by detail/cp_groups.hpp), the collective,
//        the partitioner's name (errors, plan.method)
//   out: what the builder's Store makes of it (partition/detail/plan_builder.hpp): the plan,
//        or its sums alone
// Throws invalid_argument (cp_size not dividing N * P), infeasible (batch > N * P * L, a
// sequence no group can take, a rank above L). Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/partition/detail/cp_groups.hpp>
#include <zeppelin/partition/detail/plan_builder.hpp>
#include <zeppelin/schedule/zigzag.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

struct cp_zigzag_layout {
  token_count capacity = 4096;  //!< L, tokens a GPU may hold
  std::int32_t cp_size = 0;     //!< ranks per CP group; 0 = all ranks

  template <class Store>
  [[nodiscard]] typename Store::result_type lay_out(std::string_view name, const batch& b, const topology& t,
                                                    collective_kind collective) const {
    check_input(b, t, capacity, name);
    const cp_assignment a = assign_cp_groups(b, t, cp_size, capacity, name);
    basic_plan_builder<Store> out(name, t, capacity);
    // a sequence of L tokens makes min(L, 2G) non-empty chunks: reserve the most a group's
    // members hold on average, not 2 x sequences on every rank (512 GB of address space at
    // 8192 ranks and 1M sequences)
    const auto G = static_cast<token_count>(a.cp_size);
    std::size_t most = 0;
    for (const auto& seqs : a.sequences) {
      std::size_t chunks = 0;
      for (const sequence_index s : seqs) chunks += static_cast<std::size_t>(std::min(b.length(s), 2 * G));
      most = std::max(most, chunks / static_cast<std::size_t>(G) + 2);
    }
    out.reserve(most);
    for (std::size_t g = 0; g < a.groups.size(); ++g) {
      const std::vector<rank_index>& ranks = a.groups[g];
      const group_index id = out.group_for(ranks, collective);
      zigzag_dealer dealer(static_cast<std::int32_t>(ranks.size()));
      for (const sequence_index s : a.sequences[g]) out.add_zigzag(s, b.length(s), ranks, id, 0, dealer.next(b.length(s)));
    }
    out.require_capacity();
    return std::move(out).finish();
  }
  friend bool operator==(const cp_zigzag_layout&, const cp_zigzag_layout&) = default;
};

}  // namespace detail

ZEPPELIN_NAMESPACE_END
