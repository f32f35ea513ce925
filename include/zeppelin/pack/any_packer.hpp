// zeppelin/pack/any_packer.hpp
// The packers as one value, chosen at run time (a command line, a config).
//   in : a packer_kind (or its name: "original", "fixed_greedy", "fixed_exact", "wlb")
//   out: any_packer, itself a packer: its state holds the chosen packer's state
// Errors: packer_kind_by_name throws invalid_argument listing the valid names; any_packer's
// pack / flush throw invalid_argument for a state that belongs to another kind of packer,
// and whatever the chosen packer throws.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/pack/fixed_exact.hpp>
#include <zeppelin/pack/fixed_greedy.hpp>
#include <zeppelin/pack/original.hpp>
#include <zeppelin/pack/packer.hpp>
#include <zeppelin/pack/wlb.hpp>

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

enum class packer_kind { original, fixed_greedy, fixed_exact, wlb };

inline constexpr std::array<packer_kind, 4> packer_kinds{packer_kind::original, packer_kind::fixed_greedy,
                                                         packer_kind::fixed_exact, packer_kind::wlb};

[[nodiscard]] constexpr std::string_view to_string(packer_kind k) noexcept {
  switch (k) {
    case packer_kind::original: return "original";
    case packer_kind::fixed_greedy: return "fixed_greedy";
    case packer_kind::fixed_exact: return "fixed_exact";
    case packer_kind::wlb: return "wlb";
  }
  return "?";
}

//! The kind called `name`; throws invalid_argument listing the valid names otherwise.
[[nodiscard]] inline packer_kind packer_kind_by_name(std::string_view name) {
  std::string valid;
  for (const packer_kind k : packer_kinds) {
    if (to_string(k) == name) return k;
    valid += (valid.empty() ? "" : ", ") + std::string(to_string(k));
  }
  ZEPPELIN_THROW(invalid_argument, "unknown packing method '" + std::string(name) + "' (valid: " + valid + ")", {});
}

//! One of the packers; a packer itself.
struct any_packer {
  std::variant<original, fixed_greedy, fixed_exact, wlb> policy;

  struct state {
    //! monostate until the first pack / flush, then the chosen packer's state.
    std::variant<std::monostate, original::state, fixed_greedy::state, fixed_exact::state, wlb::state> held;
  };

  [[nodiscard]] packer_kind kind() const noexcept { return packer_kinds[policy.index()]; }

  [[nodiscard]] packed_iteration pack(state& s, std::span<const document_ref> arriving, const packing_limits& limits) const {
    return std::visit([&](const auto& p) { return p.pack(state_of(p, s), arriving, limits); }, policy);
  }

  [[nodiscard]] std::vector<packed_iteration> flush(state& s, const packing_limits& limits) const {
    return std::visit([&](const auto& p) { return p.flush(state_of(p, s), limits); }, policy);
  }

  friend bool operator==(const any_packer&, const any_packer&) = default;

 private:
  template <class P>
  static typename P::state& state_of(const P&, state& s) {
    if (std::holds_alternative<std::monostate>(s.held)) s.held.template emplace<typename P::state>();
    auto* held = std::get_if<typename P::state>(&s.held);
    ZEPPELIN_EXPECTS(held != nullptr, "a packing state was used with another kind of packer",
                     {{"state_kind", double(s.held.index())}});
    return *held;
  }
};
static_assert(packer<any_packer>);

//! The packer of kind `k` with its default configuration (wlb: 2 queues; fixed_greedy:
//! window 1).
[[nodiscard]] inline any_packer make_packer(packer_kind k) {
  switch (k) {
    case packer_kind::original: return {original{}};
    case packer_kind::fixed_greedy: return {fixed_greedy{}};
    case packer_kind::fixed_exact: return {fixed_exact{}};
    case packer_kind::wlb: return {wlb{}};
  }
  ZEPPELIN_THROW(invalid_argument, "unknown packer kind", {{"kind", double(static_cast<int>(k))}});
}

ZEPPELIN_NAMESPACE_END
