// zeppelin/partition/any_load_metric.hpp
// The load metrics of partition/load_metric.hpp as one value, chosen at run time by kind or
// by name (a command line, a config file).
//   in : a load_metric_kind (or its name) and, for the cost-model metric, the GPU and the
//        attention shape it prices
//   out: any_load_metric, a std::variant of the configured metric models
// Throws invalid_argument for an unknown name (the message lists the valid ones) and what
// attention_time_model::for_gpu throws for a GPU without a positive peak. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/attention_time_model.hpp>
#include <zeppelin/partition/load_metric.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

ZEPPELIN_NAMESPACE_BEGIN

enum class load_metric_kind : std::uint8_t { tokens, attention, cost_model };

//! Every metric kind; names are the models' `name`s.
inline constexpr std::array<load_metric_kind, 3> load_metric_kinds{load_metric_kind::tokens, load_metric_kind::attention,
                                                                   load_metric_kind::cost_model};

using any_load_metric = std::variant<token_metric, attention_cost_metric, cost_model_metric<>>;

[[nodiscard]] constexpr std::string_view to_string(load_metric_kind k) noexcept {
  switch (k) {
    case load_metric_kind::tokens: return token_metric::name;
    case load_metric_kind::attention: return attention_cost_metric::name;
    case load_metric_kind::cost_model: return cost_model_metric<>::name;
  }
  return "?";
}

//! The kind called `name` ("tokens", "attention", "cost_model").
[[nodiscard]] inline load_metric_kind load_metric_kind_by_name(std::string_view name) {
  std::string valid;
  for (const load_metric_kind k : load_metric_kinds) {
    if (to_string(k) == name) return k;
    valid += (valid.empty() ? "" : ", ") + std::string(to_string(k));
  }
  ZEPPELIN_THROW(invalid_argument, "unknown load metric '" + std::string(name) + "' (valid: " + valid + ")", {});
}

//! The metric of kind `k`: tokens and causal pairs need nothing else; the cost-model metric
//! prices `heads` query heads of `head_dim` with the FlashAttention time model of `gpu`.
[[nodiscard]] inline any_load_metric make_load_metric(load_metric_kind k, const gpu_spec& gpu, int heads = 32,
                                                      int head_dim = 128) {
  switch (k) {
    case load_metric_kind::tokens: return token_metric{};
    case load_metric_kind::attention: return attention_cost_metric{};
    case load_metric_kind::cost_model: {
      ZEPPELIN_EXPECTS(heads >= 1 && head_dim >= 1, "the cost-model metric needs positive heads and head_dim",
                       {{"heads", double(heads)}, {"head_dim", double(head_dim)}});
      return cost_model_metric<>{.model = attention_time_model::for_gpu(gpu), .heads = heads, .head_dim = head_dim};
    }
  }
  ZEPPELIN_THROW(invalid_argument, "unknown load metric kind", {{"kind", double(static_cast<int>(k))}});
}

ZEPPELIN_NAMESPACE_END
