// zeppelin/partition/load_metric.hpp
// Load metrics: what "load" means when a partitioner balances work over GPUs.
//   in : one block of work on one GPU: `rows` query tokens that compute `pairs` causal
//        (query, key) pairs (a whole local sequence: rows = |s|, pairs = |s|(|s|+1)/2; a
//        zigzag shard of a ring: its rows and the pairs of those rows against all earlier keys)
//   out: a non-negative double; loads of one GPU add up
// Models:
//   token_metric            rows                       (Zeppelin Alg. 2 as published)
//   attention_cost_metric   pairs + linear_pairs_per_token * rows   (attention is quadratic;
//                           the optional linear term prices the per-token GEMM work in pair
//                           units, for layouts whose linear modules are not remapped)
//   cost_model_metric<M>    M::forward_seconds(rows, pairs, heads, head_dim)
//                           + linear_seconds_per_token * rows, e.g. the tile-padded
//                           FlashAttention time of cost/attention_time_model.hpp
// The linear terms default to 0: with remapping (Zeppelin 3.4) the linear modules run on the
// token-balanced layout, so only attention differs between ranks.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/attention_time_model.hpp>

#include <concepts>
#include <cstdint>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

//! A load metric: `m(rows, pairs)` is the cost of `rows` query tokens computing `pairs`
//! causal pairs; `M::name` names it.
template <class M>
concept load_metric = std::regular<M> && requires(const M& m, token_count rows, std::int64_t pairs) {
  { m(rows, pairs) } -> std::convertible_to<double>;
  { M::name } -> std::convertible_to<std::string_view>;
};

//! Load = tokens (the paper's Alg. 2).
struct token_metric {
  static constexpr std::string_view name = "tokens";
  [[nodiscard]] constexpr double operator()(token_count rows, std::int64_t /*pairs*/) const noexcept {
    return static_cast<double>(rows);
  }
  friend constexpr bool operator==(const token_metric&, const token_metric&) = default;
};
static_assert(load_metric<token_metric>);

//! Load = causal (query, key) pairs: the FLOPs of causal attention up to a constant, plus
//! `linear_pairs_per_token` per query row (the linear modules' work per token in pair units;
//! for LLaMA-7B about linear_forward_flops_per_token / (4 * hidden) = 3 * 10^3; 0: attention only).
struct attention_cost_metric {
  static constexpr std::string_view name = "attention";
  double linear_pairs_per_token = 0;
  [[nodiscard]] constexpr double operator()(token_count rows, std::int64_t pairs) const noexcept {
    return static_cast<double>(pairs) + linear_pairs_per_token * static_cast<double>(rows);
  }
  friend constexpr bool operator==(const attention_cost_metric&, const attention_cost_metric&) = default;
};
static_assert(load_metric<attention_cost_metric>);

//! Load = forward seconds predicted by an attention cost model (any attention_cost_model,
//! default the FlashAttention-2 tile-padded model), for `heads` query heads of `head_dim`.
//! Short blocks cost a whole 128-row tile and run at the lower throughput of a small launch,
//! which the token and pair metrics ignore. `linear_seconds_per_token` adds the linear
//! modules' time per query row (0: attention only, right when the linear layout is remapped).
template <attention_cost_model Model = attention_time_model>
struct cost_model_metric {
  static constexpr std::string_view name = "cost_model";
  Model model{};
  int heads = 32;
  int head_dim = 128;
  double linear_seconds_per_token = 0;
  [[nodiscard]] double operator()(token_count rows, std::int64_t pairs) const {
    return static_cast<double>(model.forward_seconds(rows, pairs, heads, head_dim)) +
           linear_seconds_per_token * static_cast<double>(rows);
  }
  friend bool operator==(const cost_model_metric&, const cost_model_metric&) = default;
};
static_assert(load_metric<cost_model_metric<>>);

ZEPPELIN_NAMESPACE_END
