// zeppelin/partition/registry.hpp
// Every partitioner as one value, and the one place that maps a method name to a partitioner
// (the `zeppelin plan` and `zeppelin simulate` tools, the simulator's methods and the examples
// all choose through it).
//   in : a partitioner name (partitioner_names) and partitioner_settings: the capacity L
//        every model takes, the CP group size of allgather, per_document and ulysses, the load metric
//        of hierarchical and micro_batched (hierarchical over the fewest micro-batches that
//        plan), micro_batched's least number of micro-batches
//   out: any_partitioner, a std::variant of the configured models; partition(p, b, t) runs
//        the one it holds and returns its plan (plan.method == the name); partition_totals
//        only the plan's sums, where the model can lay them out without the shards
// Settings a model does not read are ignored (cp_size by even_split, hierarchical, hybrid_dp
// and micro_batched; the metric by all but hierarchical and micro_batched; micro_batches by
// all but micro_batched). Throws invalid_argument for an unknown name,
// listing the valid ones; partition() throws what the model throws. Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/layout_totals.hpp>
#include <zeppelin/partition/allgather.hpp>
#include <zeppelin/partition/any_load_metric.hpp>
#include <zeppelin/partition/even_split.hpp>
#include <zeppelin/partition/hierarchical.hpp>
#include <zeppelin/partition/hybrid_dp.hpp>
#include <zeppelin/partition/micro_batched.hpp>
#include <zeppelin/partition/partitioner.hpp>
#include <zeppelin/partition/per_document.hpp>
#include <zeppelin/partition/per_sequence.hpp>
#include <zeppelin/partition/ulysses.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

ZEPPELIN_NAMESPACE_BEGIN

using any_partitioner =
    std::variant<hierarchical<token_metric>, hierarchical<attention_cost_metric>, hierarchical<cost_model_metric<>>, even_split,
                 allgather, hybrid_dp, per_document, ulysses, micro_batched<hierarchical<token_metric>>,
                 micro_batched<hierarchical<attention_cost_metric>>, micro_batched<hierarchical<cost_model_metric<>>>, per_sequence>;

struct partitioner_settings {
  token_count capacity = 4096;          //!< L, tokens per GPU per micro-batch
  std::int32_t cp_size = 0;             //!< allgather, per_document, per_sequence, ulysses: ranks per CP group (0: all)
  any_load_metric metric = token_metric{};  //!< hierarchical, micro_batched: what a GPU's load is
  std::int32_t micro_batches = 0;       //!< micro_batched: at least this many (0: the fewest that plan)
};

namespace detail {

struct partitioner_entry {
  std::string_view name;
  any_partitioner (*make)(const partitioner_settings&);
};

inline any_partitioner make_hierarchical(const partitioner_settings& s) {
  return std::visit([&](const auto& m) -> any_partitioner { return hierarchical<std::decay_t<decltype(m)>>{s.capacity, m}; },
                    s.metric);
}

//! hierarchical<metric> over the fewest micro-batches that plan (partition/micro_batched.hpp).
inline any_partitioner make_micro_batched(const partitioner_settings& s) {
  return std::visit(
      [&](const auto& m) -> any_partitioner {
        using inner = hierarchical<std::decay_t<decltype(m)>>;
        return micro_batched<inner>{s.capacity, inner{s.capacity, m}, s.micro_batches};
      },
      s.metric);
}

inline constexpr std::array<partitioner_entry, 8> partitioners{{
    {hierarchical<>::name, make_hierarchical},
    {even_split::name, [](const partitioner_settings& s) -> any_partitioner { return even_split{s.capacity}; }},
    {allgather::name, [](const partitioner_settings& s) -> any_partitioner { return allgather{s.capacity, s.cp_size}; }},
    {hybrid_dp::name, [](const partitioner_settings& s) -> any_partitioner { return hybrid_dp{s.capacity}; }},
    {per_document::name, [](const partitioner_settings& s) -> any_partitioner { return per_document{s.capacity, s.cp_size}; }},
    {ulysses::name, [](const partitioner_settings& s) -> any_partitioner { return ulysses{s.capacity, s.cp_size}; }},
    {micro_batched<hierarchical<>>::name, make_micro_batched},
    {per_sequence::name, [](const partitioner_settings& s) -> any_partitioner { return per_sequence{s.capacity, s.cp_size}; }},
}};

}  // namespace detail

//! The names partitioner_by_name accepts, in registry order.
inline constexpr std::array<std::string_view, detail::partitioners.size()> partitioner_names = [] {
  std::array<std::string_view, detail::partitioners.size()> names{};
  for (std::size_t i = 0; i < names.size(); ++i) names[i] = detail::partitioners[i].name;
  return names;
}();

//! The partitioner called `name`, configured by `s`.
[[nodiscard]] inline any_partitioner partitioner_by_name(std::string_view name, const partitioner_settings& s = {}) {
  std::string valid;
  for (const detail::partitioner_entry& e : detail::partitioners) {
    if (e.name == name) return e.make(s);
    valid += (valid.empty() ? "" : ", ") + std::string(e.name);
  }
  ZEPPELIN_THROW(invalid_argument, "unknown partitioner '" + std::string(name) + "' (valid: " + valid + ")", {});
}

//! The plan the partitioner held by `p` makes for `b` on `t`.
[[nodiscard]] inline plan partition(const any_partitioner& p, const batch& b, const topology& t) {
  return std::visit([&](const auto& model) { return model.partition(b, t); }, p);
}

//! The sums of the plan the partitioner held by `p` makes for `b` on `t` (cost/layout_totals.hpp),
//! laid out without building its shards, where its model can (partition_into a
//! layout_totals_store: even_split, allgather, ulysses, per_document); std::nullopt where it
//! cannot. Throws what partition() throws.
[[nodiscard]] inline std::optional<layout_totals> partition_totals(const any_partitioner& p, const batch& b, const topology& t) {
  return std::visit(
      [&](const auto& model) -> std::optional<layout_totals> {
        if constexpr (requires { model.template partition_into<detail::layout_totals_store>(b, t); })
          return model.template partition_into<detail::layout_totals_store>(b, t);
        else
          return std::nullopt;
      },
      p);
}

//! Whether the partitioners held by `a` and `b` lay out every batch alike but for the collective
//! their groups run: equal partitioners, or even_split, allgather and ulysses of one capacity and
//! CP size (detail/cp_zigzag_layout.hpp).
[[nodiscard]] inline bool same_layout_but_collective(const any_partitioner& a, const any_partitioner& b) {
  return a == b || std::visit(
                       [](const auto& x, const auto& y) {
                         if constexpr (requires { x.layout() == y.layout(); }) return x.layout() == y.layout();
                         else return false;
                       },
                       a, b);
}

//! The partitioner whose plan of `b` on `t` the partitioner held by `p` returns when it plans
//! with that one first: a micro-batched partitioner whose search starts at one micro-batch
//! returns its inner partitioner's plan of the whole batch (at its capacity) unless that one
//! refuses the batch, and only then plans more micro-batches (micro_batched.hpp); std::nullopt
//! for every other partitioner and batch.
[[nodiscard]] inline std::optional<any_partitioner> one_pass_partitioner(const any_partitioner& p, const batch& b, const topology& t) {
  return std::visit(
      [&](const auto& model) -> std::optional<any_partitioner> {
        if constexpr (requires { model.starts_in_one_pass(b, t); }) {
          if (model.starts_in_one_pass(b, t)) return any_partitioner(model.one_pass());
        }
        return std::nullopt;
      },
      p);
}

//! The collective every group of the partitioner held by `p` runs, where it gives all of them
//! one (std::nullopt where its groups differ: hierarchical, hybrid_dp).
[[nodiscard]] inline std::optional<collective_kind> collective_of(const any_partitioner& p) {
  return std::visit(
      [](const auto& model) -> std::optional<collective_kind> {
        if constexpr (requires { collective_kind{model.collective}; }) return model.collective;  // a constant, or per_document's choice
        else return std::nullopt;
      },
      p);
}

//! The name of the partitioner held by `p` (plan.method of its plans).
[[nodiscard]] inline std::string_view name_of(const any_partitioner& p) noexcept {
  return std::visit([](const auto& model) -> std::string_view { return std::decay_t<decltype(model)>::name; }, p);
}

ZEPPELIN_NAMESPACE_END
