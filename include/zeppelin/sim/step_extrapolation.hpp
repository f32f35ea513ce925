// zeppelin/sim/step_extrapolation.hpp
// The step of a plan whose execution program is too large to build, priced from two smaller
// runs of the same method over what is identical in it, and extrapolated linearly:
//   members    every CP group spans every rank (TE CP's one ring, LLaMA-3's one all-gather,
//              Ulysses' one all-to-all with USP's ring where the ranks outnumber the heads):
//              a group of G ranks runs G x G (position, round) pairs (6.7e7 at 8,192 ranks,
//              program_options::max_member_rounds). Every member holds the same share of every
//              sequence and each ring round (all-gather step) computes and moves the same chunk
//              pairs on every member, so at a fixed number of tokens per rank the step grows
//              linearly with the members. The runs: two clusters of the same nodes (links,
//              NICs, GPUs) of K1 < K2 = 2 K1 ranks (K1 >= 32; for an all-to-all group, the
//              Ulysses degree R has and a ring of two subgroups or more), every sequence's
//              length scaled by K / R (the same tokens per rank; a sequence's 2K zigzag chunks
//              as long as its 2R chunks on R ranks). Rank r takes the breakdown of sample rank
//              r mod K2, extrapolated with rank (r mod K2) mod K1 of the smaller run.
//   documents  one micro-batch of many documents whose ring and all-gather groups cut each
//              into shards, every pair of which the program holds (TE CP's 2G zigzag shards
//              of 4M tokens of 512-token documents: program_options::max_shard_pairs). Each
//              document adds the same chunk pairs and bytes to every round, so the step grows
//              linearly with the documents. The runs: the same cluster, the documents in
//              length order, one in 2^j and one in 2^(j-1) (j >= 2 the least whose larger
//              sample holds at most 1/8 of max_shard_pairs, a program of a few hundred MB;
//              each sample two documents or more, planned in one micro-batch). Each rank
//              takes its own breakdown.
// With x1, x2 a figure of the two runs at sizes s1 < s2 (members or documents) and s the
// plan's, x = x2 + (s - s2) (x2 - x1) / (s2 - s1) for the step, forward, backward and LM head
// seconds, each rank's attention, linear and total seconds (its idle time, the wait for the
// slowest rank at a phase's end, is the larger run's; its exposed communication the rest of
// its total), and the bytes over NICs and NVLink, the launches and the FLOPs (over members:
// per rank, times R). The tokens, the lower bound (sim/lower_bound.hpp) and the pairs are the
// full batch's; the imbalance and the largest port load are the larger run's.
// sim_result::extrapolated names the axis and the two sizes.
//   in : the plan (on the CP view), the batch, the PHYSICAL topology and its TP size, the
//        model, the options the program would be built with (its wire format and limits),
//        the cost model, and `run(batch, physical)`: the method planned and simulated on
//        another batch or cluster (a sim_result)
//   out: the extrapolated sim_result (members tried first), or nothing where the plan is not
//        one either axis covers
// Tests hold both within a few percent of the whole simulation where both run
// (tests/sim/step_extrapolation_test.cpp; bench/README.md, "CP baselines at cluster scale").
// Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/program/build.hpp>
#include <zeppelin/program/detail/all_to_all_collective.hpp>
#include <zeppelin/program/options.hpp>
#include <zeppelin/sim/cost_model.hpp>
#include <zeppelin/sim/lower_bound.hpp>
#include <zeppelin/sim/result.hpp>
#include <zeppelin/sim/tensor_parallel.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

// Whether every group of `p` spans all of its ranks (and it has one).
[[nodiscard]] inline bool groups_span_every_rank(const plan& p) {
  if (p.groups.empty()) return false;
  for (const ring_group& g : p.groups)
    if (static_cast<rank_index>(g.ranks.size()) != p.num_ranks()) return false;
  return true;
}

// `b` with every length scaled by k / r (at least one token).
[[nodiscard]] inline batch scaled_batch(const batch& b, std::int64_t k, std::int64_t r) {
  std::vector<token_count> lengths;
  lengths.reserve(b.lengths().size());
  for (const token_count l : b.lengths())
    lengths.push_back(std::max<token_count>(1, static_cast<token_count>(std::llround(static_cast<double>(l) * static_cast<double>(k) / static_cast<double>(r)))));
  return batch(std::move(lengths));
}

// One in `every` of b's documents in length order (longest first; ties by index).
[[nodiscard]] inline batch sampled_batch(const batch& b, std::int64_t every) {
  std::vector<std::size_t> order(b.lengths().size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return b.lengths()[x] > b.lengths()[y]; });
  std::vector<token_count> lengths;
  for (std::size_t i = 0; i < order.size(); i += static_cast<std::size_t>(every)) lengths.push_back(b.lengths()[order[i]]);
  return batch(std::move(lengths));
}

// `physical` with `nodes` nodes.
[[nodiscard]] inline topology with_nodes(const topology& physical, int nodes) {
  topology_config c = physical.config();
  c.name += " (" + std::to_string(nodes) + " of " + std::to_string(c.nodes) + " nodes)";
  c.nodes = nodes;
  return topology(std::move(c));
}

// x at s from x1 at s1 and x2 at s2, linear.
[[nodiscard]] constexpr double extrapolated(double x1, double x2, double s1, double s2, double s) noexcept {
  return x2 + (s - s2) * (x2 - x1) / (s2 - s1);
}

// The figures every axis extrapolates alike (the file comment): `a` at s1, `c` at s2, the
// plan at s; `totals` maps two runs' totals (bytes, launches, FLOPs) to the plan's, and rank r
// of the result takes rank sample_rank(r, runs' ranks) of each run.
template <class Totals, class SampleRank>
[[nodiscard]] sim_result extrapolated_result(const sim_result& a, const sim_result& c, double s1, double s2, double s, rank_index ranks,
                                             Totals&& totals, SampleRank&& sample_rank) {
  const auto at = [&](double x1, double x2) { return extrapolated(x1, x2, s1, s2, s); };
  sim_result out;
  out.method = c.method;
  out.step_time_s = at(a.step_time_s, c.step_time_s);
  out.forward_s = at(a.forward_s, c.forward_s);
  out.backward_s = at(a.backward_s, c.backward_s);
  out.lm_head_s = at(a.lm_head_s, c.lm_head_s);
  out.cross_node_bytes = totals(a.cross_node_bytes, c.cross_node_bytes);
  out.intra_node_bytes = totals(a.intra_node_bytes, c.intra_node_bytes);
  out.attention_launches = totals(a.attention_launches, c.attention_launches);
  out.attention_flops = totals(a.attention_flops, c.attention_flops);
  out.max_port_utilization = c.max_port_utilization;
  out.imbalance = c.imbalance;
  out.ranks.resize(static_cast<std::size_t>(ranks));
  for (rank_index r = 0; r < ranks; ++r) {
    const rank_breakdown& x1 = a.ranks[static_cast<std::size_t>(sample_rank(r, static_cast<rank_index>(a.ranks.size())))];
    const rank_breakdown& x2 = c.ranks[static_cast<std::size_t>(sample_rank(r, static_cast<rank_index>(c.ranks.size())))];
    rank_breakdown& y = out.ranks[static_cast<std::size_t>(r)];
    y.attention_s = at(x1.attention_s, x2.attention_s);
    y.linear_s = at(x1.linear_s, x2.linear_s);
    y.idle_s = x2.idle_s;  // waiting at a phase's end for the slowest rank: no round's
    y.exposed_comm_s = at(x1.total_s(), x2.total_s()) - y.attention_s - y.linear_s - y.idle_s;
  }
  return out;
}

}  // namespace detail

//! The node counts (n1, n2 = 2 n1) of the two runs over members for `p` on `physical` (see
//! the file comment), or nothing where none qualify.
[[nodiscard]] inline std::optional<std::pair<int, int>> extrapolation_nodes(const plan& p, const topology& physical, int tp, const wire_format& wire) {
  if (!detail::groups_span_every_rank(p)) return std::nullopt;
  const bool all_to_all = std::any_of(p.groups.begin(), p.groups.end(), [](const ring_group& g) { return g.collective == collective_kind::all_to_all; });
  const std::int32_t per_node = physical.gpus_per_node() / std::max(tp, 1);
  const std::int32_t u = detail::ulysses_degree(wire, static_cast<std::int32_t>(p.num_ranks()));
  for (int n = 1; 2 * n < physical.nodes(); ++n) {
    const std::int32_t k1 = n * per_node, k2 = 2 * k1;
    if (k1 < 32) continue;
    if (all_to_all && (detail::ulysses_degree(wire, k1) != u || detail::ulysses_degree(wire, k2) != u || k1 / u < 2)) continue;
    return std::pair{n, 2 * n};
  }
  return std::nullopt;
}

//! The sampling step 2^j of the runs over documents for `p` of `b` under `o`'s
//! max_shard_pairs (see the file comment), or nothing where none qualifies.
[[nodiscard]] inline std::optional<std::int64_t> extrapolation_sampling(const plan& p, const batch& b, const program_options& o) {
  if (p.micro_batches() != 1) return std::nullopt;
  const std::int64_t pairs = detail::shard_pairs_of(p), fits = o.max_shard_pairs / 8;
  const auto n = static_cast<std::int64_t>(b.lengths().size());
  for (std::int64_t every = 2; n >= 2 * every; every *= 2)  // the smaller sample: two documents or more
    if (pairs / (every / 2) <= fits) return every;
  return std::nullopt;
}

//! The extrapolated step of `p` (see the file comment). `run(batch, physical)` returns the
//! method's sim_result on that batch and cluster.
template <class Run>
[[nodiscard]] std::optional<sim_result> extrapolate_step(const plan& p, const batch& b, const topology& physical, int tp, const model_config& m,
                                                         const program_options& o, const sim_cost_model& cost, Run&& run) {
  const topology view = tensor_parallel_view(physical, tp);
  const rank_index R = view.num_ranks();
  std::optional<sim_result> out;
  if (const std::optional<std::pair<int, int>> nodes = extrapolation_nodes(p, physical, tp, o.wire)) {
    const std::int64_t K1 = static_cast<std::int64_t>(nodes->first) * view.gpus_per_node(), K2 = 2 * K1;
    const sim_result a = run(detail::scaled_batch(b, K1, R), detail::with_nodes(physical, nodes->first));
    const sim_result c = run(detail::scaled_batch(b, K2, R), detail::with_nodes(physical, nodes->second));
    const auto k1 = static_cast<double>(K1), k2 = static_cast<double>(K2), r = static_cast<double>(R);
    out = detail::extrapolated_result(
        a, c, k1, k2, r, R, [&](double x1, double x2) { return r * detail::extrapolated(x1 / k1, x2 / k2, k1, k2, r); },
        [](rank_index rank, rank_index sample) { return rank % sample; });
    out->extrapolated = {extrapolation_axis::members, {K1, K2}};
  } else if (const std::optional<std::int64_t> every = extrapolation_sampling(p, b, o)) {
    const batch fewer = detail::sampled_batch(b, *every), more = detail::sampled_batch(b, *every / 2);
    const sim_result a = run(fewer, physical), c = run(more, physical);
    if (a.micro_batches != 1 || c.micro_batches != 1) return std::nullopt;
    const auto n1 = static_cast<double>(fewer.size()), n2 = static_cast<double>(more.size()), n = static_cast<double>(b.size());
    out = detail::extrapolated_result(
        a, c, n1, n2, n, R, [&](double x1, double x2) { return detail::extrapolated(x1, x2, n1, n2, n); },
        [](rank_index rank, rank_index) { return rank; });
    out->extrapolated = {extrapolation_axis::documents, {static_cast<std::int64_t>(fewer.size()), static_cast<std::int64_t>(more.size())}};
  } else {
    return std::nullopt;
  }
  out->micro_batches = p.micro_batches();
  for (const token_count l : b.lengths()) out->attention_pairs += causal_pairs(l);
  out->tokens_per_s = static_cast<double>(b.total_tokens()) / out->step_time_s;
  out->lower_bound_s = step_lower_bound(b, m, view, cost);
  out->efficiency = out->lower_bound_s / out->step_time_s;
  return out;
}

ZEPPELIN_NAMESPACE_END
