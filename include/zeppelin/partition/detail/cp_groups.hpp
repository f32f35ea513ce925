// zeppelin/partition/detail/cp_groups.hpp
// Context-parallel groups for the flat CP baselines (allgather, ulysses, per_document).
//   in : batch, topology, cp_size (0: every rank), capacity
//   out: the CP groups (consecutive node-major ranks [g * cp, (g + 1) * cp)) and, per group,
//        the sequences it runs. With one group every sequence goes to it. With several (data
//        parallelism over CP replicas) sequences are dealt longest first to the group with
//        the fewest causal pairs so far among those whose token budget cp * capacity still
//        has room (ties: lowest group), i.e. LPT on attention work.
// Throws invalid_argument when cp_size does not divide N * P, infeasible when a sequence fits
// no group's remaining budget. Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/checked_math.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/partition/detail/plan_builder.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

struct cp_assignment {
  std::int32_t cp_size = 0;
  std::vector<std::vector<rank_index>> groups;          // ranks of each CP group, ring order
  std::vector<std::vector<sequence_index>> sequences;   // per group, in batch order
};

inline cp_assignment assign_cp_groups(const batch& b, const topology& t, std::int32_t cp_size, token_count capacity,
                                      std::string_view method) {
  const rank_index R = t.num_ranks();
  ZEPPELIN_EXPECTS(cp_size >= 0 && cp_size <= R && (cp_size == 0 || R % cp_size == 0),
                   std::string(method) + ": cp_size must be 0 (all ranks) or divide nodes * gpus_per_node",
                   {{"cp_size", dbl(cp_size)}, {"ranks", dbl(R)}});
  cp_assignment a;
  a.cp_size = cp_size == 0 ? R : cp_size;
  const std::int32_t count = R / a.cp_size;
  a.groups.resize(static_cast<std::size_t>(count));
  for (std::int32_t g = 0; g < count; ++g)
    for (std::int32_t i = 0; i < a.cp_size; ++i) a.groups[static_cast<std::size_t>(g)].push_back(g * a.cp_size + i);
  a.sequences.resize(static_cast<std::size_t>(count));
  if (count == 1) {
    for (sequence_index s = 0; s < b.size(); ++s) a.sequences[0].push_back(s);
    return a;
  }
  const token_count budget = saturating_mul(capacity, a.cp_size);
  std::vector<token_count> tokens(static_cast<std::size_t>(count), 0);
  std::vector<std::int64_t> pairs(static_cast<std::size_t>(count), 0);
  for (const sequence_index s : by_length_descending(b)) {
    const token_count len = b.length(s);
    std::int32_t best = -1;
    for (std::int32_t g = 0; g < count; ++g) {
      const auto gi = static_cast<std::size_t>(g);
      if (tokens[gi] + len > budget) continue;
      if (best < 0 || pairs[gi] < pairs[static_cast<std::size_t>(best)]) best = g;
    }
    if (best < 0)
      ZEPPELIN_THROW(infeasible, std::string(method) + ": a sequence fits no context-parallel group's remaining budget",
                     {{"seq", dbl(s)}, {"length", dbl(len)}, {"cp_size", dbl(a.cp_size)}, {"capacity", dbl(capacity)},
                      {"group_budget", dbl(budget)}});
    tokens[static_cast<std::size_t>(best)] += len;
    pairs[static_cast<std::size_t>(best)] += causal_pairs(len);
    a.sequences[static_cast<std::size_t>(best)].push_back(s);
  }
  for (auto& seqs : a.sequences) std::sort(seqs.begin(), seqs.end());
  return a;
}

//! The frame of a CP-group partitioner that lays out its groups' sequences its own way
//! (per_document; the zigzag ones share detail/cp_zigzag_layout.hpp): checks the input, deals
//! the sequences to CP groups, calls lay_out(builder, group_ranks, group_id,
//! sequences) once per group to place that group's sequences, checks capacity and returns
//! what the builder's Store makes (the plan, or its sums). Every group runs `collective`;
//! ranges_per_sequence sizes the builder's reservation (ranges a sequence adds per rank).
template <class Store, class LayOut>
[[nodiscard]] typename Store::result_type partition_over_cp_groups(std::string_view name, const batch& b, const topology& t,
                                                                   token_count capacity, std::int32_t cp_size, collective_kind collective,
                                                                   std::size_t ranges_per_sequence, LayOut&& lay_out) {
  check_input(b, t, capacity, name);
  const cp_assignment a = assign_cp_groups(b, t, cp_size, capacity, name);
  basic_plan_builder<Store> out(name, t, capacity);
  std::size_t most = 0;
  for (const auto& seqs : a.sequences) most = std::max(most, seqs.size());
  out.reserve(ranges_per_sequence * most);
  for (std::size_t g = 0; g < a.groups.size(); ++g) lay_out(out, a.groups[g], out.group_for(a.groups[g], collective), a.sequences[g]);
  out.require_capacity();
  return std::move(out).finish();
}

}  // namespace detail

ZEPPELIN_NAMESPACE_END
