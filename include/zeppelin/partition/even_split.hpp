// zeppelin/partition/even_split.hpp
// TransformerEngine context parallelism (the paper's "TE CP" baseline): every sequence is
// zigzag-split over ONE global ring of all N * P ranks (node-major order).
//   in : batch, topology, capacity L
//   out: one group (all ranks; zone inter when N > 1); every sequence is zigzag-split over the
//        ring (schedule/zigzag.hpp): its position p holds chunks p and 2R-1-p. No padding:
//        when 2R does not divide a length the chunks differ by one token (zigzag.hpp's
//        remainder rule) and the positions holding an extra token form a cyclic run; the run
//        of each sequence is rotated to start where the previous sequence's run ended
//        (zigzag_dealer, one counter across the batch, as WLB-LLM deals its tails),
//        so position p of a sequence sits on ring rank (p + offset) mod R.
// Guarantees: per-rank token totals differ by at most one (max = ceil(T / R)), so every
//   batch with T <= N * P * L fits, exact fill L = T / R included; every sequence keeps
//   zigzag_imbalance_bound (a rotation permutes its positions). When every length is
//   divisible by 2R no sequence is rotated and the layout is TE's THD index map
//   (TransformerEngine's THD CP index map); a divisible sequence after a non-divisible one is not rotated
//   either (offset 0 when it has no extra tokens).
// Throws infeasible when the batch exceeds N * P * L. Host-only.
#pragma once

#include <zeppelin/partition/detail/cp_zigzag_layout.hpp>
#include <zeppelin/partition/detail/plan_builder.hpp>
#include <zeppelin/partition/partitioner.hpp>
#include <zeppelin/schedule/zigzag.hpp>

#include <algorithm>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct even_split {
  static constexpr std::string_view name = "even_split";
  //! Tokens a GPU may hold (L).
  token_count capacity = 4096;

  //! What its ring runs.
  static constexpr collective_kind collective = collective_kind::ring;

  [[nodiscard]] plan partition(const batch& b, const topology& t) const { return partition_into<detail::plan_store>(b, t); }

  //! The plan's layout into a builder's Store (partition/detail/plan_builder.hpp): the plan, or
  //! its sums alone (layout_totals_store).
  template <class Store>
  [[nodiscard]] typename Store::result_type partition_into(const batch& b, const topology& t) const {
    return layout().template lay_out<Store>(name, b, t, collective);
  }

  //! Its layout (one CP group of all ranks), which even_split, allgather and ulysses share but
  //! for the collective.
  [[nodiscard]] detail::cp_zigzag_layout layout() const { return {capacity, 0}; }
  friend bool operator==(const even_split&, const even_split&) = default;
};
static_assert(partitioner<even_split>);

ZEPPELIN_NAMESPACE_END
