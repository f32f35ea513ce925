// zeppelin/partition/even_split.hpp
// TransformerEngine context parallelism (the paper's "TE CP" baseline): every sequence is
// zigzag-split over ONE global ring of all N * P ranks (node-major order).
//   in : batch, topology, capacity L
//   out: one group (all ranks; zone inter when N > 1), rank i of the ring holds chunks i and
//        2R-1-i of every sequence (schedule/zigzag.hpp). No padding: when 2R does not divide
//        a length the chunks differ by one token (zigzag.hpp's remainder rule); sequences
//        shorter than 2R leave some ranks without a chunk of them. On divisible lengths the
//        layout equals TE's THD index map (reference-behaviour.md).
// Throws infeasible when the batch exceeds N * P * L, or when the uneven chunks put more
// than L tokens on a rank (the message names the tokens needed). Host-only.
#pragma once

#include <zeppelin/partition/detail/plan_builder.hpp>
#include <zeppelin/partition/partitioner.hpp>

#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct even_split {
  static constexpr std::string_view name = "even_split";
  //! Tokens a GPU may hold (L).
  token_count capacity = 4096;

  [[nodiscard]] plan partition(const batch& b, const topology& t) const {
    detail::check_input(b, t, capacity, name);
    detail::plan_builder out(name, t, capacity);
    std::vector<rank_index> ring(static_cast<std::size_t>(t.num_ranks()));
    for (rank_index r = 0; r < t.num_ranks(); ++r) ring[static_cast<std::size_t>(r)] = r;
    const group_index g = out.group_for(ring);
    out.reserve(2 * static_cast<std::size_t>(b.size()));
    for (sequence_index s = 0; s < b.size(); ++s) out.add_zigzag(s, b.length(s), ring, g);
    out.require_capacity();
    return std::move(out).finish();
  }
  friend bool operator==(const even_split&, const even_split&) = default;
};
static_assert(partitioner<even_split>);

ZEPPELIN_NAMESPACE_END
