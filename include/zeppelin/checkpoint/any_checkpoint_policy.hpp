// zeppelin/checkpoint/any_checkpoint_policy.hpp
// The checkpoint policies as one value, chosen at run time (a command line, a config file).
//   in : a policy, or its text form: "none", "full", "selective:K" (K layers on every stage)
//        or "selective:K0,K1,..." (one count per stage)
//   out: any_checkpoint_policy (a std::variant of the models), itself a checkpoint_policy
// Errors: checkpoint_policy_by_name throws invalid_argument naming the text and the valid forms.
// Host-only (std::string parsing).
#pragma once

#include <zeppelin/checkpoint/basic_policies.hpp>
#include <zeppelin/checkpoint/checkpoint_policy.hpp>
#include <zeppelin/checkpoint/selective_recompute.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>

#include <charconv>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct any_checkpoint_policy {
  std::variant<no_recompute, full_recompute, selective_recompute> policy;

  [[nodiscard]] int recomputed_layers(const checkpoint_site& site) const {
    return std::visit([&](const auto& p) { return p.recomputed_layers(site); }, policy);
  }
  friend bool operator==(const any_checkpoint_policy&, const any_checkpoint_policy&) = default;
};
static_assert(checkpoint_policy<any_checkpoint_policy>);

//! The text form of `p` ("none", "full", "selective:K0,K1,...").
[[nodiscard]] inline std::string to_string(const any_checkpoint_policy& p) {
  if (std::holds_alternative<no_recompute>(p.policy)) return "none";
  if (std::holds_alternative<full_recompute>(p.policy)) return "full";
  std::string out = "selective:";
  const auto& counts = std::get<selective_recompute>(p.policy).layers_per_stage;
  for (std::size_t i = 0; i < counts.size(); ++i) out += (i ? "," : "") + std::to_string(counts[i]);
  return out;
}

//! Parses "none", "full", "selective:K" or "selective:K0,K1,..." (counts >= 0).
[[nodiscard]] inline any_checkpoint_policy checkpoint_policy_by_name(std::string_view text) {
  if (text == "none") return {no_recompute{}};
  if (text == "full") return {full_recompute{}};
  constexpr std::string_view prefix = "selective:";
  const auto bad = [&] {
    ZEPPELIN_THROW(invalid_argument,
                   "unknown checkpoint policy '" + std::string(text) +
                       "' (valid: none, full, selective:K, selective:K0,K1,... with layer counts K >= 0)",
                   {});
  };
  if (text.substr(0, prefix.size()) != prefix) bad();
  selective_recompute s;
  std::string_view rest = text.substr(prefix.size());
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    int k = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), k);
    if (item.empty() || ec != std::errc{} || end != item.data() + item.size() || k < 0) bad();
    s.layers_per_stage.push_back(k);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return {s};
}

ZEPPELIN_NAMESPACE_END
