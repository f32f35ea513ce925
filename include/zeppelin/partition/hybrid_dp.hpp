// zeppelin/partition/hybrid_dp.hpp
// ByteScale-like hybrid data/context parallelism (the paper's "Hybrid DP" baseline; the
// per-sub-sample CP size of Megatron-LM's BalancedCPScheduler).
//   in : batch, topology, capacity L
//   out: every sequence runs on an aligned block of g consecutive node-major ranks
//        [j g, (j + 1) g): g = 1 (data parallel, the whole sequence on one GPU) when it fits
//        L, else the smallest power of two g <= N * P whose zigzag split puts <= L tokens on
//        every rank (ring CP over the block); when no power of two <= N * P fits, g = N * P.
//        FLOP-balanced greedy: sequences by causal pairs descending (ties: index); each goes
//        to the block, in the first micro-batch where some block has room, whose busiest rank
//        has the fewest causal pairs in that micro-batch (ties: lowest block). When no block
//        of any open micro-batch has room, a new micro-batch opens ("extra micro-batches when
//        short sequences exceed memory"); plan.notes says how many were needed.
// Throws infeasible for a batch > N * P * L and for a sequence that even all N * P ranks
// cannot hold within L. Host-only.
#pragma once

#include <zeppelin/core/checked_math.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/partition/detail/plan_builder.hpp>
#include <zeppelin/partition/partitioner.hpp>
#include <zeppelin/schedule/zigzag.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct hybrid_dp {
  static constexpr std::string_view name = "hybrid_dp";
  //! Tokens a GPU may hold per micro-batch (L).
  token_count capacity = 4096;

  //! Ranks of the ring a sequence of `length` tokens gets (1: data parallel); 0 when none fits.
  [[nodiscard]] std::int32_t group_size(token_count length, rank_index ranks) const noexcept {
    auto fits = [&](std::int32_t g) {
      // the first position holds the largest zigzag share only in some remainder cases: check all
      for (std::int32_t i = 0; i < g; ++i)
        if (zigzag_tokens(length, g, i) > capacity) return false;
      return true;
    };
    std::int32_t g = 1;
    while (g <= ranks && saturating_mul(g, capacity) < length) g *= 2;
    for (; g <= ranks; g *= 2)
      if (fits(g)) return g;
    return fits(ranks) ? ranks : 0;
  }

  [[nodiscard]] plan partition(const batch& b, const topology& t) const {
    using detail::dbl;
    detail::check_input(b, t, capacity, name);
    const rank_index R = t.num_ranks();
    struct item {
      sequence_index seq;
      std::int32_t g;
    };
    std::vector<item> items;
    items.reserve(static_cast<std::size_t>(b.size()));
    for (const sequence_index s : detail::by_length_descending(b)) {  // pairs grow with length
      const std::int32_t g = group_size(b.length(s), R);
      if (g == 0)
        ZEPPELIN_THROW(infeasible, "hybrid_dp: a sequence does not fit even when split over every GPU",
                       {{"seq", dbl(s)}, {"length", dbl(b.length(s))}, {"ranks", dbl(R)}, {"capacity", dbl(capacity)}});
      items.push_back({s, g});
    }

    // Per micro-batch and rank: tokens held and causal pairs computed.
    std::vector<std::vector<token_count>> tokens;
    std::vector<std::vector<std::int64_t>> pairs;
    std::vector<token_count> share;
    detail::plan_builder out(name, t, capacity);
    for (const item& it : items) {
      const token_count len = b.length(it.seq);
      share.resize(static_cast<std::size_t>(it.g));
      for (std::int32_t i = 0; i < it.g; ++i) share[static_cast<std::size_t>(i)] = zigzag_tokens(len, it.g, i);
      const rank_index blocks = it.g == R ? 1 : R / it.g;
      std::int32_t mb = 0;
      rank_index best = -1;
      for (;; ++mb) {
        if (static_cast<std::size_t>(mb) == tokens.size()) {
          tokens.emplace_back(static_cast<std::size_t>(R), 0);
          pairs.emplace_back(static_cast<std::size_t>(R), 0);
        }
        const auto& tk = tokens[static_cast<std::size_t>(mb)];
        const auto& pr = pairs[static_cast<std::size_t>(mb)];
        std::int64_t best_load = 0;
        for (rank_index j = 0; j < blocks; ++j) {
          bool room = true;
          std::int64_t load = 0;
          for (std::int32_t i = 0; i < it.g && room; ++i) {
            const auto r = static_cast<std::size_t>(j * it.g + i);
            room = tk[r] + share[static_cast<std::size_t>(i)] <= capacity;
            load = pr[r] > load ? pr[r] : load;
          }
          if (room && (best < 0 || load < best_load)) best = j, best_load = load;
        }
        if (best >= 0) break;
      }
      std::vector<rank_index> ranks(static_cast<std::size_t>(it.g));
      for (std::int32_t i = 0; i < it.g; ++i) ranks[static_cast<std::size_t>(i)] = best * it.g + i;
      auto& tk = tokens[static_cast<std::size_t>(mb)];
      auto& pr = pairs[static_cast<std::size_t>(mb)];
      for (std::int32_t i = 0; i < it.g; ++i) {
        const auto r = static_cast<std::size_t>(ranks[static_cast<std::size_t>(i)]);
        tk[r] += share[static_cast<std::size_t>(i)];
        pr[r] += it.g == 1 ? causal_pairs(len) : zigzag_pairs(len, it.g, i);
      }
      if (it.g == 1) out.add_range(ranks[0], it.seq, {0, len}, no_group, mb);
      else out.add_zigzag(it.seq, len, ranks, out.group_for(ranks), mb);
    }
    if (tokens.size() > 1)
      out.note({.kind = note_kind::extra_micro_batches,
                .text = "hybrid_dp: " + std::to_string(tokens.size()) +
                        " micro-batches: sequences did not fit the GPUs' capacity in one pass",
                .sequences = {},
                .values = {{"micro_batches", static_cast<double>(tokens.size())}}});
    return std::move(out).finish();
  }
  friend bool operator==(const hybrid_dp&, const hybrid_dp&) = default;
};
static_assert(partitioner<hybrid_dp>);

ZEPPELIN_NAMESPACE_END
