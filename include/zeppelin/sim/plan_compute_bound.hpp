// zeppelin/sim/plan_compute_bound.hpp
// A lower bound on the simulated step of ONE plan: the work its busiest ranks must execute,
// at the best modelled rates, with no communication. The cost-driven planner
// (sim/cost_driven_planner.hpp) simulates its candidates in order of this bound and stops
// when the next bound reaches the best step found, without changing its choice.
//   in : plan (on the CP view), batch, model, the view, cost model, whether the linear modules
//        run in a token-balanced layout (remapping on)
//   out: seconds <= simulate(...).step_time_s for every execution of the plan
// Work per micro-batch (the micro-batches run one after another):
//   - a rank's attention: the causal pairs of the queries it holds, of sequences alone on it or
//     in a ring or all-gather group (each such shard attends to every earlier key of its
//     sequence, on that rank);
//   - an all-to-all (Ulysses) group spreads its pairs over its members by heads, so only the
//     group's total is known: its busiest member carries at least the mean, over the members,
//     of (their other work) + (the group's pairs) / (members);
//   - the linear modules: the rank's tokens, or the micro-batch's mean tokens per rank when
//     remapping balances them.
// Each pair and token is priced as step_lower_bound prices the whole batch (sim/lower_bound.hpp:
// exact FLOPs at the tables' best rates), so the bound is at least step_lower_bound and
// reaches it for a perfectly balanced plan. Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cost/step_work.hpp>
#include <zeppelin/sim/cost_model.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Whether the linear modules run in the plan's attention layout or a token-balanced one.
enum class linear_layout_kind : std::uint8_t { attention_layout, token_balanced };

//! What one causal pair and one token cost at the best modelled rates, and the batch's
//! perfect-balance bound: the per-batch part of plan_compute_bound, computed once when many
//! plans of the same batch are bounded (the cost-driven planner).
struct bound_prices {
  double per_pair = 0;   //!< seconds per causal pair, forward + backward, every layer
  double per_token = 0;  //!< seconds of linear work per token, every layer and the LM head
  double balanced = 0;   //!< step_lower_bound of the batch
};

[[nodiscard]] inline bound_prices bound_prices_for(const batch& b, const model_config& m, const topology& view,
                                                   const sim_cost_model& cost) {
  const step_work work = estimate_step_work(b, m, view.gpu(), cost.attention, cost.linear);
  double total_pairs = 0;
  for (const token_count len : b.lengths()) total_pairs += static_cast<double>(causal_pairs(len));
  const double tokens = static_cast<double>(b.total_tokens());
  return {.per_pair = total_pairs > 0 ? (work.attention_forward_flops / work.best_attention_forward_rate +
                                         work.attention_backward_flops / work.best_attention_backward_rate) /
                                            total_pairs
                                      : 0.0,
          .per_token = tokens > 0 ? work.linear_flops() / work.linear_rate / tokens : 0.0,
          .balanced = work.balanced_lower_bound(view.num_ranks())};
}

//! Seconds no execution of `p` can beat, with the batch's `prices` (see the file comment).
//! `p` must be a valid plan of the batch on its view (core/validate.hpp).
[[nodiscard]] inline double plan_compute_bound(const plan& p, const bound_prices& prices, linear_layout_kind linear) {
  const double per_pair = prices.per_pair, per_token = prices.per_token;
  const std::size_t ranks = p.placements.size();
  const std::int32_t micro_batches = p.micro_batches();
  // [micro-batch][rank]: pairs a rank surely computes, and tokens it holds.
  std::vector<double> own_pairs(static_cast<std::size_t>(micro_batches) * ranks, 0.0);
  std::vector<double> held(own_pairs.size(), 0.0);
  std::vector<double> group_pairs(p.groups.size(), 0.0);
  std::vector<std::int32_t> group_micro_batch(p.groups.size(), 0);
  for (std::size_t r = 0; r < ranks; ++r)
    for (const shard& s : p.placements[r].shards) {
      const std::size_t at = static_cast<std::size_t>(s.micro_batch) * ranks + r;
      const double pairs = static_cast<double>(causal_pairs(s.range, token_range{0, s.range.end}));
      held[at] += static_cast<double>(s.range.size());
      const bool spread_by_heads =
          s.group != no_group && p.groups[static_cast<std::size_t>(s.group)].collective == collective_kind::all_to_all;
      if (spread_by_heads) {
        group_pairs[static_cast<std::size_t>(s.group)] += pairs;
        group_micro_batch[static_cast<std::size_t>(s.group)] = s.micro_batch;
      } else {
        own_pairs[at] += pairs;
      }
    }

  double bound = 0;
  for (std::int32_t mb = 0; mb < micro_batches; ++mb) {
    const std::size_t base = static_cast<std::size_t>(mb) * ranks;
    double mb_tokens = 0;
    for (std::size_t r = 0; r < ranks; ++r) mb_tokens += held[base + r];
    const auto rank_work = [&](std::size_t r) {
      const double linear_tokens = linear == linear_layout_kind::token_balanced ? mb_tokens / static_cast<double>(ranks) : held[base + r];
      return own_pairs[base + r] * per_pair + linear_tokens * per_token;
    };
    double busiest = 0;
    for (std::size_t r = 0; r < ranks; ++r) busiest = std::max(busiest, rank_work(r));
    for (std::size_t g = 0; g < p.groups.size(); ++g) {
      if (group_micro_batch[g] != mb || group_pairs[g] == 0) continue;
      const auto& members = p.groups[g].ranks;
      double others = 0;
      for (const rank_index r : members) others += rank_work(static_cast<std::size_t>(r));
      const double size = static_cast<double>(members.size());
      busiest = std::max(busiest, (others + group_pairs[g] * per_pair) / size);
    }
    bound += busiest;
  }
  return std::max(bound, prices.balanced);
}

//! plan_compute_bound of one plan of `b` on `view`.
[[nodiscard]] inline double plan_compute_bound(const plan& p, const batch& b, const model_config& m, const topology& view,
                                               const sim_cost_model& cost, linear_layout_kind linear) {
  return plan_compute_bound(p, bound_prices_for(b, m, view, cost), linear);
}

ZEPPELIN_NAMESPACE_END
