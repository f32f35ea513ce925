// zeppelin/checkpoint/any_checkpoint_policy.hpp
// The checkpoint policies as one value, chosen at run time (a command line, a config file).
//   in : a policy, or its text form: "none", "full", "selective:K" (K layers on every stage),
//        "selective:K0,K1,..." (one count per stage), or "stage_aware:S:B0,B1,...:C0,C1,..."
//        (InfiniPipe's stage-aware plan, checkpoint/stage_aware.hpp: S stages, per chunk in
//        forward order its backward position B, and the n + S - 1 diagonal counts C)
//   out: any_checkpoint_policy (a std::variant of the models), itself a checkpoint_policy
// The text form of a stage-aware plan keeps what the policy answers (stages, order, counts);
// the solver's bound and node count are not part of it (a parsed plan reads lower bound 0 and
// 0 nodes).
// Errors: checkpoint_policy_by_name throws invalid_argument naming the text and the valid
// forms, and for a stage-aware plan whose backward positions are not a permutation or whose
// counts are not n + S - 1.
// Host-only (std::string parsing).
#pragma once

#include <zeppelin/checkpoint/basic_policies.hpp>
#include <zeppelin/checkpoint/checkpoint_policy.hpp>
#include <zeppelin/checkpoint/selective_recompute.hpp>
#include <zeppelin/checkpoint/stage_aware.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct any_checkpoint_policy {
  std::variant<no_recompute, full_recompute, selective_recompute, stage_aware_recompute> policy;

  [[nodiscard]] int recomputed_layers(const checkpoint_site& site) const {
    return std::visit([&](const auto& p) { return p.recomputed_layers(site); }, policy);
  }
  friend bool operator==(const any_checkpoint_policy&, const any_checkpoint_policy&) = default;
};
static_assert(checkpoint_policy<any_checkpoint_policy>);

namespace detail {
template <class I>
std::string comma_list(const std::vector<I>& values) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
  return out;
}
// "K0,K1,..." as integers >= 0; nothing when an item is empty, not a number or negative.
template <class I>
std::optional<std::vector<I>> parse_counts(std::string_view text) {
  std::vector<I> out;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    I k = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), k);
    if (item.empty() || ec != std::errc{} || end != item.data() + item.size() || k < 0) return std::nullopt;
    out.push_back(k);
    if (comma == std::string_view::npos) return out;
    text = text.substr(comma + 1);
  }
}
}  // namespace detail

//! The text form of `p` (see the file comment).
[[nodiscard]] inline std::string to_string(const any_checkpoint_policy& p) {
  if (std::holds_alternative<no_recompute>(p.policy)) return "none";
  if (std::holds_alternative<full_recompute>(p.policy)) return "full";
  if (const auto* s = std::get_if<selective_recompute>(&p.policy)) return "selective:" + detail::comma_list(s->layers_per_stage);
  const stage_aware_plan& plan = std::get<stage_aware_recompute>(p.policy).plan;
  return "stage_aware:" + std::to_string(plan.stages) + ":" + detail::comma_list(plan.backward_position) + ":" +
         detail::comma_list(plan.diagonal_layers);
}

//! Parses the text forms of the file comment.
[[nodiscard]] inline any_checkpoint_policy checkpoint_policy_by_name(std::string_view text) {
  if (text == "none") return {no_recompute{}};
  if (text == "full") return {full_recompute{}};
  const auto bad = [&] {
    ZEPPELIN_THROW(invalid_argument,
                   "unknown checkpoint policy '" + std::string(text) +
                       "' (valid: none, full, selective:K, selective:K0,K1,... with layer counts K >= 0, stage_aware:S:B0,B1,...:C0,C1,... "
                       "with S >= 1 stages, the chunks' backward positions B and n + S - 1 diagonal counts C >= 0)",
                   {});
  };
  constexpr std::string_view selective = "selective:", stage_aware = "stage_aware:";
  if (text.starts_with(selective)) {
    const auto counts = detail::parse_counts<int>(text.substr(selective.size()));
    if (!counts) bad();
    return {selective_recompute{*counts}};
  }
  if (!text.starts_with(stage_aware)) bad();
  const std::string_view rest = text.substr(stage_aware.size());
  const std::size_t a = rest.find(':'), b = a == std::string_view::npos ? a : rest.find(':', a + 1);
  if (b == std::string_view::npos) bad();
  const auto stages = detail::parse_counts<int>(rest.substr(0, a));
  const auto order = detail::parse_counts<std::int64_t>(rest.substr(a + 1, b - a - 1));
  const auto layers = detail::parse_counts<int>(rest.substr(b + 1));
  if (!stages || stages->size() != 1 || stages->front() < 1 || !order || !layers) bad();
  stage_aware_plan plan;
  plan.stages = stages->front();
  plan.backward_position = *order;
  plan.diagonal_layers = *layers;
  std::vector<std::int64_t> sorted = *order;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t k = 0; k < sorted.size(); ++k)
    ZEPPELIN_EXPECTS(sorted[k] == static_cast<std::int64_t>(k), "a stage-aware plan's backward positions must be a permutation of 0..n-1",
                     {{"chunks", double(sorted.size())}, {"position", double(k)}, {"found", double(sorted[k])}});
  ZEPPELIN_EXPECTS(layers->size() == order->size() + static_cast<std::size_t>(plan.stages) - 1,
                   "a stage-aware plan needs n + S - 1 diagonal counts",
                   {{"counts", double(layers->size())}, {"chunks", double(order->size())}, {"stages", double(plan.stages)}});
  plan.total_layers = std::accumulate(layers->begin(), layers->end(), std::int64_t{0});
  return {stage_aware_recompute{std::move(plan)}};
}

ZEPPELIN_NAMESPACE_END
