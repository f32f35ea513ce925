// zeppelin/partition/hierarchical.hpp
// Zeppelin's two-level, three-zone sequence partitioner (EuroSys '26, section 3.1):
// Alg. 1 (inter-node) places sequences on nodes, Alg. 2 (intra-node) on GPUs.
//   in : batch, topology (N nodes x P GPUs), capacity L (tokens per GPU), a load metric
//   out: a plan whose groups are inter-node rings (zone inter), intra-node rings (zone
//        intra) and whose local sequences sit whole on one GPU (no group); every rank's
//        shards are ordered inter -> intra -> local (the attention engine's queue order).
//
// Alg. 1 (per step): sort S by length descending (ties: index); s1 = P * L.
//   z2 = {|s| >= s1} (no node can hold it), z01 = the rest, s_avg = sum|S| / N.
//   z2 layout, paper rule: s takes k_s = ceil(|s| / s_avg) EMPTY nodes (the next unused
//     nodes in order) and is zigzag-split over all their k_s * P ranks, node-major, as ONE
//     ring (so its node shares are even and, inside a node, its P device shares too: the
//     first loop of Alg. 2 is folded in). Fits: |s| / (k_s P) <= s_avg / P <= L.
//   z2 layout, DECISION (sum k_s > N): proportional split that shares nodes. Ranks, not
//     nodes, are apportioned: every z2 sequence gets g_s >= 1 consecutive ranks by the
//     D'Hondt rule (repeatedly give one more rank to the largest |s| / g_s, ties: lowest
//     index) until max |s| / g_s <= ceil(sum|S| / (N P)) (the rank-level s_avg) or the ranks
//     run out; groups that straddle a node boundary are inter-node, the others intra-node.
//     When a D'Hondt ring would need more than L on a rank (the ranks ran out), the z2
//     sequences are laid end to end over the ranks, ceil(T / R) tokens per rank ("streamed"),
//     each a weighted zigzag over the ranks its stretch covers. plan.notes says so.
//   z01, longest first, to the node with the fewest tokens (ties: lowest node).
//   DECISION (instead of the paper's restart with s1 = max|z01|): a sequence that fits no
//     node whole is split over the fewest nodes whose room covers it (most room first, ties
//     lowest node), its node shares leveled by water filling (detail/water_fill.hpp): an
//     inter-node fragment group ("inter_spilled"). Why: the restart moves EVERY sequence at
//     least as long into z2, where each takes whole empty nodes, and re-runs everything; it
//     cannot reach exact fill (L = T / R: the contiguous fallback in 36-40 of 40 dataset
//     batches, bench/README.md) and cost up to 91 passes at 4M tokens / 1024 GPUs. The
//     spill changes only the sequence that does not fit, keeps it inter-node as the restart
//     would, and never fails since sum|S| <= N P L. s1 stays P * L (trace: one pass).
// Alg. 2 (per node): s0 = L.
//   (a) the node's fragments of inter-node fragment groups, leveled over its P GPUs.
//   (b) z1 = {s in z01 at node : |s| >= s0}. c_avg = sum_{s in z01 at node} |s|^2 / P.
//     DECISION: over z01, not z1: c_avg is the node's per-GPU share of all its non-inter
//     quadratic work, so a z1 sequence gets the share of GPUs its quadratic work deserves;
//     over z1 alone a lone z1 sequence would always take all P GPUs however much local work
//     the node has. k = ceil(|s|^2 / c_avg) clamped to [2, P] (and to |s|; 1 when P == 1)
//     equal zigzag fragments on the k GPUs with the fewest tokens (ties: lowest GPU; ring in
//     GPU order). DECISION: "least-loaded" instead of the paper's round-robin cursor:
//     identical when the fragments are equal, and it keeps capacity; when a GPU would exceed
//     L, k grows (up to min(P, |s|)); when no k fits, a fragment group by room (below) over
//     at least the paper's k GPUs.
//   (c) z0 = the rest, longest first, whole to the GPU of least LOAD under the metric policy
//     (tokens as in the paper, causal pairs, or a cost model's time) among the GPUs where it
//     fits L (ties: lowest GPU). DECISION (instead of the paper's restart with s0 = max|z0|,
//     which turns every longer local sequence into a ring): a sequence that fits no GPU is
//     split over the fewest GPUs of the node whose room covers it ("intra_spilled").
//   Fragment group by room: the chosen GPUs (fewest tokens first) share the sequence by water
//     filling (the receiving GPUs end level), ring in GPU order; the split is the weighted
//     zigzag of detail/weighted_zigzag.hpp (the plain zigzag when the shares are the plain
//     zigzag's). Balance then means: each rank does its token share of the sequence's
//     attention work, up to one token's mean work (|2 pairs - w (|s| + 1)| <= |s| + 1), so a
//     GPU's work follows its tokens as it does for whole sequences.
//   Never fails: every step only places tokens where a GPU has room and the node's tokens
//     are <= P L by Alg. 1.
// Metric allocation (hierarchical::metric_allocation = true; default false: the above, with
//   only (c) using the metric). The metric's load replaces tokens wherever Alg. 1 and 2 balance:
//   z2 = {|s| >= P L} (cross nodes only when they must). Each z2 ring starts with the fewest
//     ranks that hold it, max(2, ceil(|s| / L)); then, D'Hondt on the metric, the ring of the
//     largest per-rank load takes one more rank while that lowers the bottleneck
//     max(largest ring load, lambda), lambda = the level at which the other sequences, as a
//     fluid of their mean load per token poured lowest load first over every rank up to L,
//     run out (capacity is a hard constraint; when the top ring does not improve, the
//     longest is tried once). Rings take consecutive ranks, node-major; the streamed layout
//     when even the fewest ranks exceed R.
//   z01, longest first, whole to the node of least metric load with token room (ties lowest),
//     else the spill by room above.
//   (b) k = the fewest GPUs (>= 2, >= ceil(|s| / L), <= P) whose per-rank ring load is <= the
//     node's load / P (the metric's c_avg, counting every fragment and sequence of the node),
//     on the k GPUs of least load with room for the zigzag share; (c) unchanged.
//   Measured in the simulator (bench/README.md "Hierarchical load metrics"): it balances
//   causal pairs better (max / mean 1.27 -> 1.15 on dataset batches) but the simulated step
//   is not faster on average, because wider rings make shorter attention launches.
// Contiguous fallback (plan.notes says so): kept as a last resort should a rank exceed L
//   (unreachable by the invariants above; 0 of 1440 dataset batches at 0-12.5 % slack, and
//   the property tests require it never happens): rank r takes the stream tokens
//   [floor(r T / R), floor((r + 1) T / R)) and each sequence rings over the ranks it spans.
// Throws infeasible for sum|S| > N P L, invalid_argument for L <= 0. Host-only.
#pragma once

#include <zeppelin/core/error.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/partition/detail/plan_builder.hpp>
#include <zeppelin/partition/detail/water_fill.hpp>
#include <zeppelin/partition/detail/weighted_zigzag.hpp>
#include <zeppelin/partition/load_metric.hpp>
#include <zeppelin/partition/partitioner.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <queue>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! What the hierarchical partitioner decided, beside the plan (for tests, tools, tuning).
struct hierarchical_trace {
  //! Inter-node threshold s1: z2 = sequences with length >= s1 (P * L: overflowing sequences
  //! are split, not moved to z2 by lowering s1).
  token_count inter_threshold = 0;
  //! Passes of Alg. 1 (1: the spill replaced the paper's restart loop).
  std::int32_t inter_passes = 0;
  //! z2 was laid out by the proportional rank split (sum ceil(|s| / s_avg) > N).
  bool proportional = false;
  //! The contiguous fallback was taken.
  bool contiguous = false;
  //! Intra-node threshold s0 per node (z0 = sequences of the node shorter than it; L, as
  //! local sequences that fit no GPU are split rather than lowering s0; 0 when contiguous).
  std::vector<token_count> local_threshold;
  //! Per sequence: its node when in z01 and placed whole on a node, -1 when in z2, split over
  //! nodes (inter_spilled) or contiguous.
  std::vector<std::int32_t> node_of_sequence;
  //! z01 sequences that fit no node whole, split over the nodes with room (batch indices, ascending).
  std::vector<sequence_index> inter_spilled;
  //! Sequences split by room inside their node: local ones that fit no GPU whole, intra-node
  //! ones whose equal zigzag fits no k GPUs (batch indices, ascending).
  std::vector<sequence_index> intra_spilled;
  //! The proportional split needed more than L on a rank: z2 was laid end to end over the ranks.
  bool streamed = false;
  //! The metric governed the allocation (hierarchical::metric_allocation).
  bool metric_allocation = false;
  friend bool operator==(const hierarchical_trace&, const hierarchical_trace&) = default;
};

template <load_metric Metric = token_metric>
struct hierarchical {
  static constexpr std::string_view name = "hierarchical";
  //! Tokens a GPU may hold (L).
  token_count capacity = 4096;
  //! How a GPU's load is measured (partition/load_metric.hpp).
  Metric metric{};
  //! true: the metric governs the whole hierarchy (which sequences cross nodes, how many
  //! ranks each ring gets, which nodes and GPUs take them, where locals go); false: the
  //! paper's token-based Alg. 1 + 2, the metric only placing local sequences (default: it
  //! simulated faster on average, bench/README.md "Hierarchical load metrics").
  bool metric_allocation = false;

  [[nodiscard]] plan partition(const batch& b, const topology& t) const { return solve(b, t).first; }

  //! The plan and the decisions behind it.
  [[nodiscard]] std::pair<plan, hierarchical_trace> solve(const batch& b, const topology& t) const;

  friend bool operator==(const hierarchical&, const hierarchical&) = default;
};
static_assert(partitioner<hierarchical<>>);
static_assert(partitioner<hierarchical<attention_cost_metric>>);
static_assert(partitioner<hierarchical<cost_model_metric<>>>);

namespace detail {

template <class Metric>
class hierarchical_solver {
 public:
  hierarchical_solver(const batch& b, const topology& t, token_count capacity, const Metric& metric, bool by_metric)
      : b_(b), t_(t), L_(capacity), metric_(metric), by_metric_(by_metric), N_(t.nodes()), P_(t.gpus_per_node()),
        R_(t.num_ranks()), T_(b.total_tokens()), order_(by_length_descending(b)) {
    len_.resize(order_.size());
    for (std::size_t i = 0; i < order_.size(); ++i) len_[i] = b.length(order_[i]);
    if (by_metric_) {
      cost_.resize(len_.size());
      for (std::size_t i = 0; i < len_.size(); ++i) cost_[i] = whole_cost(i);
    }
  }

  std::pair<plan, hierarchical_trace> run() {
    hierarchical_trace trace;
    trace.node_of_sequence.assign(static_cast<std::size_t>(b_.size()), -1);
    const token_count node_room = L_ * P_;
    trace.inter_threshold = node_room;
    trace.inter_passes = 1;
    trace.local_threshold.assign(static_cast<std::size_t>(N_), L_);
    trace.metric_allocation = by_metric_;
    // |z2|: z2 is a prefix of the descending order (metric costs do not fall with length)
    const std::size_t m = by_metric_ ? metric_z2_size() : prefix_at_least(0, node_room);
    if (by_metric_ && m > 0) trace.inter_threshold = std::min(node_room, len_[m - 1]);
    rank_tokens_.assign(static_cast<std::size_t>(R_), 0);
    rank_load_.assign(static_cast<std::size_t>(R_), 0.0);
    layout_.assign(len_.size(), {});
    if (by_metric_) layout_z2_metric(m, trace);
    else layout_z2(m, trace);
    place_on_nodes(m);
    place_in_nodes(m, trace);
    for (const token_count v : rank_tokens_)
      if (v > L_) return contiguous(std::move(trace), "the zone layouts");
    std::vector<std::string> notes;
    for (std::size_t i = m; i < len_.size(); ++i) {
      trace.node_of_sequence[static_cast<std::size_t>(order_[i])] = node_of_[i];
      if (node_of_[i] < 0) trace.inter_spilled.push_back(order_[i]);
      if (layout_[i].intra_spilled) trace.intra_spilled.push_back(order_[i]);
    }
    std::sort(trace.inter_spilled.begin(), trace.inter_spilled.end());
    std::sort(trace.intra_spilled.begin(), trace.intra_spilled.end());
    if (trace.proportional)
      notes.push_back("inter-node sequences need more than N empty nodes (sum ceil(|s|/s_avg) > N): proportional "
                      "split over ranks that shares nodes");
    if (trace.streamed)
      notes.push_back("the proportional split needs more than the capacity on a rank: inter-node sequences are "
                      "laid end to end over the ranks at ceil(T/R) tokens each (rings share boundary ranks)");
    if (!trace.inter_spilled.empty())
      notes.push_back(std::to_string(trace.inter_spilled.size()) +
                      " sequence(s) fit no node whole: split over the nodes with the most room (inter-node fragment "
                      "groups, shares by room)");
    if (by_metric_)
      notes.push_back(std::string("allocation by the ") + std::string(Metric::name) +
                      " metric: ring sizes, nodes and GPUs balance the metric's load under the capacity");
    if (!trace.intra_spilled.empty())
      notes.push_back(std::to_string(trace.intra_spilled.size()) +
                      " sequence(s) fit no GPU whole (or no equal split): split over the GPUs of their node with the "
                      "most room (intra-node fragment groups, shares by room)");
    return {build(std::move(notes)), std::move(trace)};
  }

 private:
  // Where position i of the order runs: one rank (local) or a ring; `shares` empty means the
  // plain zigzag over `ranks`, else the weighted zigzag with these token shares.
  struct layout {
    std::vector<rank_index> ranks;
    std::vector<token_count> shares;
    bool intra_spilled = false;
  };

  // First position >= from whose length is < threshold (the z2 prefix ends there).
  std::size_t prefix_at_least(std::size_t from, token_count threshold) const {
    while (from < len_.size() && len_[from] >= threshold) ++from;
    return from;
  }

  // Causal pairs of every position of a weighted zigzag.
  static std::vector<std::int64_t> weighted_pairs(token_count length, std::span<const token_count> shares) {
    const auto parts = weighted_zigzag(length, shares);
    std::vector<std::int64_t> out(parts.size());
    for (std::size_t p = 0; p < parts.size(); ++p) out[p] = query_pairs(parts[p].head) + query_pairs(parts[p].tail);
    return out;
  }

  // Shares that the plain zigzag over as many ranks gives (or one rank): use the plain zigzag.
  static bool plain_shares(token_count len, std::span<const token_count> shares) {
    const auto G = static_cast<std::int32_t>(shares.size());
    for (std::int32_t p = 0; p < G; ++p)
      if (shares[static_cast<std::size_t>(p)] != zigzag_tokens(len, G, p)) return false;
    return true;
  }

  // Records the layout of position i and adds its tokens and metric load to the ranks. Zero
  // shares are dropped; shares equal to the plain zigzag's become the plain zigzag.
  void commit(std::size_t i, std::vector<rank_index> ranks, std::vector<token_count> shares, bool spilled = false) {
    const token_count len = len_[i];
    if (!shares.empty()) {
      std::size_t k = 0;
      for (std::size_t p = 0; p < shares.size(); ++p)
        if (shares[p] > 0) ranks[k] = ranks[p], shares[k++] = shares[p];
      ranks.resize(k);
      shares.resize(k);
      if (plain_shares(len, shares)) shares.clear();
    }
    const auto G = static_cast<std::int32_t>(ranks.size());
    const std::vector<std::int64_t> pairs = shares.empty() ? std::vector<std::int64_t>{} : weighted_pairs(len, shares);
    for (std::int32_t p = 0; p < G; ++p) {
      const auto r = static_cast<std::size_t>(ranks[static_cast<std::size_t>(p)]);
      const token_count rows = G == 1 ? len : shares.empty() ? zigzag_tokens(len, G, p) : shares[static_cast<std::size_t>(p)];
      const std::int64_t q = G == 1 ? causal_pairs(len) : shares.empty() ? zigzag_pairs(len, G, p) : pairs[static_cast<std::size_t>(p)];
      rank_tokens_[r] += rows;
      rank_load_[r] += static_cast<double>(metric_(rows, q));
    }
    layout_[i] = {std::move(ranks), std::move(shares), spilled};
  }

  // Alg. 1 lines 7-10: ring groups of z2 (positions [0, m) of the order).
  void layout_z2(std::size_t m, hierarchical_trace& trace) {
    // k_s = ceil(|s| / s_avg) = ceil(|s| N / T)
    int128 nodes_needed = 0;
    for (std::size_t i = 0; i < m; ++i) nodes_needed += (static_cast<int128>(len_[i]) * N_ + T_ - 1) / T_;
    trace.proportional = nodes_needed > N_;
    std::vector<std::vector<rank_index>> rings(m);
    if (!trace.proportional) {
      // paper rule: k_s empty nodes each; |s| / (k_s P) <= s_avg / P <= L, so it always fits
      int next = 0;
      for (std::size_t i = 0; i < m; ++i) {
        const int k = static_cast<int>((static_cast<int128>(len_[i]) * N_ + T_ - 1) / T_);
        for (rank_index r = next * P_; r < (next + k) * P_; ++r) rings[i].push_back(r);
        next += k;
      }
    } else {
      // D'Hondt: g_i ranks, next rank to the largest len_i / g_i (ties: lowest i); m <= N
      // since every z2 sequence holds more than P L tokens and T <= N P L.
      std::vector<token_count> g(m, 1);
      auto before = [&](std::size_t x, std::size_t y) {  // priority of y above x
        const int128 lhs = static_cast<int128>(len_[x]) * g[y], rhs = static_cast<int128>(len_[y]) * g[x];
        return lhs != rhs ? lhs < rhs : x > y;
      };
      std::priority_queue<std::size_t, std::vector<std::size_t>, decltype(before)> heap(before);
      for (std::size_t i = 0; i < m; ++i) heap.push(i);
      const token_count target = (T_ + R_ - 1) / R_;
      token_count spare = R_ - static_cast<token_count>(m);
      while (spare > 0 && !heap.empty()) {
        const std::size_t i = heap.top();
        if ((len_[i] + g[i] - 1) / g[i] <= target) break;  // every z2 share is at most the rank average
        heap.pop();
        if (g[i] >= len_[i]) continue;
        ++g[i];
        --spare;
        heap.push(i);
      }
      rank_index next = 0;
      bool fits = true;
      for (std::size_t i = 0; i < m; ++i) {
        for (token_count j = 0; j < g[i]; ++j) rings[i].push_back(next++);
        fits = fits && zigzag_tokens(len_[i], static_cast<std::int32_t>(g[i]), 0) <= L_ &&
               (g[i] < 2 || zigzag_tokens(len_[i], static_cast<std::int32_t>(g[i]), static_cast<std::int32_t>(g[i]) - 1) <= L_);
      }
      if (!fits) {
        stream_z2(m, trace);
        return;
      }
    }
    for (std::size_t i = 0; i < m; ++i) commit(i, std::move(rings[i]), {});
  }

  // Stream: z2 end to end over the ranks, ceil(T / R) <= L tokens per rank; each sequence is
  // a weighted zigzag over the ranks its stretch covers.
  void stream_z2(std::size_t m, hierarchical_trace& trace) {
    trace.streamed = true;
    const token_count per_rank = (T_ + R_ - 1) / R_;
    token_count at = 0;
    for (std::size_t i = 0; i < m; ++i) {
      std::vector<rank_index> ranks;
      std::vector<token_count> shares;
      const token_count begin = at, end = at + len_[i];
      for (token_count r = begin / per_rank; r * per_rank < end; ++r) {
        ranks.push_back(static_cast<rank_index>(r));
        shares.push_back(std::min(end, (r + 1) * per_rank) - std::max(begin, r * per_rank));
      }
      at = end;
      commit(i, std::move(ranks), std::move(shares));
    }
  }

  // ---- metric allocation (hierarchical::metric_allocation) ----

  // Metric load of position i whole on one GPU.
  double whole_cost(std::size_t i) const { return static_cast<double>(metric_(len_[i], causal_pairs(len_[i]))); }

  // Metric load of one rank of a g-rank ring of position i: ceil(|s| / g) rows (the largest
  // zigzag share) and the mean pairs |s|(|s| + 1) / (2 g) (zigzag is balanced within
  // zigzag_imbalance_bound).
  double ring_cost(std::size_t i, token_count g) const {
    const token_count len = len_[i];
    return static_cast<double>(metric_((len + g - 1) / g, causal_pairs(len) / g));
  }

  // z2 under the metric: the sequences no node can hold (|s| >= P L), as in the paper.
  // DECISION (measured, bench/README.md "Hierarchical load metrics"): also sending the
  // sequences whose load exceeds a node's share C / N across nodes balanced the pairs better
  // but made the simulated step slower (geomean step / te_cp+routing 0.901 vs 0.868 with the
  // attention metric, 0.861 vs 0.846 with the cost model): a wider ring gives each rank a
  // shorter block per round, and short attention launches run far below peak.
  std::size_t metric_z2_size() const {
    const token_count node_room = L_ * P_;
    std::size_t m = 0;
    while (m < len_.size() && len_[m] >= node_room) ++m;
    return m;
  }

  // The step's bottleneck when the z2 rings hold g_i ranks each and every other sequence is a
  // fluid of mean load density delta = C' / T' poured over all ranks up to the capacity,
  // lowest load first (the level lambda where the fluid runs out). Returns {tokens that do
  // not fit, max(lambda, largest ring load)}, compared lexicographically.
  std::pair<double, double> bottleneck(std::size_t m, const std::vector<token_count>& g, double rest_tokens,
                                       double rest_cost) const {
    struct cls {
      double n, tokens, load;
    };
    std::vector<cls> classes;
    classes.reserve(m + 1);
    token_count used = 0;
    double ring_max = 0;
    for (std::size_t i = 0; i < m; ++i) {
      const double load = ring_cost(i, g[i]);
      classes.push_back({static_cast<double>(g[i]), static_cast<double>(len_[i]) / static_cast<double>(g[i]), load});
      ring_max = std::max(ring_max, load);
      used += g[i];
    }
    classes.push_back({static_cast<double>(R_ - used), 0.0, 0.0});
    if (rest_tokens <= 0) return {0.0, ring_max};
    const double delta = rest_cost / rest_tokens;
    const double cap = static_cast<double>(L_);
    double room = 0, hi = 0;
    for (const cls& c : classes) {
      room += c.n * std::max(0.0, cap - c.tokens);
      hi = std::max(hi, c.load + delta * std::max(0.0, cap - c.tokens));
    }
    if (room < rest_tokens) return {rest_tokens - room, hi};
    if (delta <= 0) return {0.0, ring_max};
    double lo = 0;
    for (int it = 0; it < 60; ++it) {
      const double mid = (lo + hi) / 2;
      double fill = 0;
      for (const cls& c : classes) fill += c.n * std::clamp((mid - c.load) / delta, 0.0, std::max(0.0, cap - c.tokens));
      (fill >= rest_tokens ? hi : lo) = mid;
    }
    return {0.0, std::max(hi, ring_max)};
  }

  // z2 rings under the metric: every z2 sequence starts with the fewest ranks that hold it
  // (ceil(|s| / L), at least 2); then, D'Hondt on the metric, the ring of the largest per-rank
  // load takes one more rank while that lowers the bottleneck (bottleneck()); when it does
  // not, the longest ring (densest load per token: widening it frees the most room for
  // lighter work) is tried once more. Rings take consecutive ranks, node-major. When even the
  // fewest ranks exceed R, the z2 sequences are streamed (stream_z2).
  void layout_z2_metric(std::size_t m, hierarchical_trace& trace) {
    if (m == 0) return;
    std::vector<token_count> g(m);
    token_count used = 0;
    for (std::size_t i = 0; i < m; ++i) {
      g[i] = std::min(len_[i], std::max<token_count>(2, (len_[i] + L_ - 1) / L_));
      used += g[i];
    }
    if (used > R_) {
      stream_z2(m, trace);
      return;
    }
    double rest_tokens = 0, rest_cost = 0;
    for (std::size_t i = m; i < len_.size(); ++i) rest_tokens += static_cast<double>(len_[i]), rest_cost += cost_[i];
    auto best = bottleneck(m, g, rest_tokens, rest_cost);
    const auto widen = [&](std::size_t i) {
      if (g[i] >= len_[i]) return false;
      ++g[i];
      const auto next = bottleneck(m, g, rest_tokens, rest_cost);
      if (next < best) {
        best = next;
        return true;
      }
      --g[i];
      return false;
    };
    while (used < R_) {
      std::size_t top = 0;
      for (std::size_t i = 1; i < m; ++i)
        if (ring_cost(i, g[i]) > ring_cost(top, g[top])) top = i;
      if (!widen(top) && (top == 0 || !widen(0))) break;
      ++used;
    }
    rank_index next = 0;
    for (std::size_t i = 0; i < m; ++i) {
      std::vector<rank_index> ranks(static_cast<std::size_t>(g[i]));
      std::iota(ranks.begin(), ranks.end(), next);
      next += static_cast<rank_index>(g[i]);
      commit(i, std::move(ranks), {});
    }
  }

  // Alg. 1 lines 11-19: z01 to the node with the fewest tokens. DECISION: a sequence that
  // fits no node whole is split over the fewest nodes whose room covers it (most room
  // first, ties lowest node), leveled over them (water_fill): an inter-node fragment group.
  void place_on_nodes(std::size_t m) {
    const token_count node_cap = L_ * P_;
    node_of_.assign(len_.size(), -1);
    spill_.assign(len_.size(), {});
    node_tokens_.assign(static_cast<std::size_t>(N_), 0);
    for (int n = 0; n < N_; ++n)
      for (int g = 0; g < P_; ++g) node_tokens_[static_cast<std::size_t>(n)] += rank_tokens_[static_cast<std::size_t>(n * P_ + g)];
    std::vector<double> node_load(static_cast<std::size_t>(N_), 0.0);
    for (int n = 0; n < N_; ++n)
      for (int g = 0; g < P_; ++g) node_load[static_cast<std::size_t>(n)] += rank_load_[static_cast<std::size_t>(n * P_ + g)];
    std::vector<int> by_room(static_cast<std::size_t>(N_));
    for (std::size_t i = m; i < len_.size(); ++i) {
      int best = 0;
      if (by_metric_) {
        // the node of least metric load among those with room for it whole (ties lowest node)
        best = -1;
        for (int n = 0; n < N_; ++n)
          if (len_[i] + node_tokens_[static_cast<std::size_t>(n)] <= node_cap &&
              (best < 0 || node_load[static_cast<std::size_t>(n)] < node_load[static_cast<std::size_t>(best)]))
            best = n;
        if (best >= 0) {
          node_tokens_[static_cast<std::size_t>(best)] += len_[i];
          node_load[static_cast<std::size_t>(best)] += cost_[i];
          node_of_[i] = best;
          continue;
        }
      } else {
        for (int n = 1; n < N_; ++n)
          if (node_tokens_[static_cast<std::size_t>(n)] < node_tokens_[static_cast<std::size_t>(best)]) best = n;
        if (len_[i] + node_tokens_[static_cast<std::size_t>(best)] <= node_cap) {
          node_tokens_[static_cast<std::size_t>(best)] += len_[i];
          node_of_[i] = best;
          continue;
        }
      }
      std::iota(by_room.begin(), by_room.end(), 0);
      std::stable_sort(by_room.begin(), by_room.end(), [&](int x, int y) {
        return node_tokens_[static_cast<std::size_t>(x)] < node_tokens_[static_cast<std::size_t>(y)];
      });
      std::size_t k = 0;
      for (token_count room = 0; room < len_[i]; ++k) room += node_cap - node_tokens_[static_cast<std::size_t>(by_room[k])];
      std::sort(by_room.begin(), by_room.begin() + static_cast<std::ptrdiff_t>(k));
      std::vector<token_count> loads(k);
      for (std::size_t j = 0; j < k; ++j) loads[j] = node_tokens_[static_cast<std::size_t>(by_room[j])];
      const std::vector<token_count> amount = water_fill(loads, node_cap, len_[i]);
      for (std::size_t j = 0; j < k; ++j)
        if (amount[j] > 0) {
          spill_[i].push_back({by_room[j], amount[j]});
          node_tokens_[static_cast<std::size_t>(by_room[j])] += amount[j];
          if (by_metric_)
            node_load[static_cast<std::size_t>(by_room[j])] +=
                cost_[i] * static_cast<double>(amount[j]) / static_cast<double>(len_[i]);
        }
    }
  }

  // Alg. 2 for every node, then the rings of the inter-node fragment groups.
  void place_in_nodes(std::size_t m, hierarchical_trace& trace) {
    std::vector<std::vector<std::size_t>> at_node(static_cast<std::size_t>(N_));
    std::vector<std::vector<std::pair<std::size_t, token_count>>> fragments(static_cast<std::size_t>(N_));
    for (std::size_t i = m; i < len_.size(); ++i) {
      if (node_of_[i] >= 0) at_node[static_cast<std::size_t>(node_of_[i])].push_back(i);
      for (const auto& [n, amount] : spill_[i]) fragments[static_cast<std::size_t>(n)].push_back({i, amount});
    }
    spill_ranks_.assign(len_.size(), {});
    spill_shares_.assign(len_.size(), {});
    for (int n = 0; n < N_; ++n)
      trace.local_threshold[static_cast<std::size_t>(n)] =
          place_in_node(n, fragments[static_cast<std::size_t>(n)], at_node[static_cast<std::size_t>(n)]);
    for (std::size_t i = m; i < len_.size(); ++i)
      if (node_of_[i] < 0) {
        // the node fragments were already added to rank_tokens_ by place_in_node
        layout_[i] = {std::move(spill_ranks_[i]), std::move(spill_shares_[i]), false};
        if (plain_shares(len_[i], layout_[i].shares)) layout_[i].shares.clear();
      }
  }

  // GPUs of the node by tokens ascending (ties lowest GPU).
  void sort_by_tokens(std::vector<std::size_t>& pick, const std::vector<token_count>& tokens) const {
    std::iota(pick.begin(), pick.end(), std::size_t{0});
    std::stable_sort(pick.begin(), pick.end(), [&](std::size_t x, std::size_t y) { return tokens[x] < tokens[y]; });
  }

  // Water-fills `len` tokens of position i over the k_min (or more, until their room covers
  // it) GPUs of the node with the fewest tokens; commits the fragment group.
  void fill_in_node(std::size_t i, std::size_t base, std::size_t k_min, std::vector<token_count>& tokens,
                    std::vector<double>& load, std::vector<std::size_t>& pick) {
    const auto P = static_cast<std::size_t>(P_);
    sort_by_tokens(pick, tokens);
    std::size_t k = 0;
    for (token_count room = 0; k < P && (room < len_[i] || k < k_min); ++k) room += L_ - tokens[pick[k]];
    std::sort(pick.begin(), pick.begin() + static_cast<std::ptrdiff_t>(k));
    std::vector<token_count> loads(k);
    std::vector<rank_index> ranks(k);
    for (std::size_t j = 0; j < k; ++j) loads[j] = tokens[pick[j]], ranks[j] = static_cast<rank_index>(base + pick[j]);
    std::vector<token_count> shares = water_fill(loads, L_, len_[i]);
    commit(i, std::move(ranks), std::move(shares), true);
    for (std::size_t g = 0; g < P; ++g) tokens[g] = rank_tokens_[base + g], load[g] = rank_load_[base + g];
  }

  // Alg. 2 on one node: (a) its fragments of inter-node fragment groups, leveled over all P
  // GPUs; (b) z1 = {|s| >= L}: k = ceil(|s|^2 / c_avg) clamped to [2, P] (and |s|) equal
  // zigzag fragments on the k GPUs with the fewest tokens, k growing while a GPU would exceed
  // L, else (DECISION) a fragment group by room; (c) z0 = the rest, longest first, whole to
  // the GPU of least metric load where it fits, else (DECISION, instead of lowering s0 for
  // every z0 sequence) a fragment group over the fewest GPUs whose room covers it.
  // Returns the node's local threshold s0 (z1 = its sequences at least this long).
  // Metric allocation (DECISION): z1 = {|s| >= L} as in the paper (also making rings of the
  // locals whose load exceeds the node's per-GPU share changed no simulated step time and
  // can put a ring share on an already loaded GPU); k = the fewest GPUs (>= 2,
  // >= ceil(|s| / L), <= P) whose per-rank ring load is <= tau = (load of the node's
  // fragments and sequences) / P, the metric's c_avg; the ring goes to the k GPUs of least
  // load whose room takes the zigzag share (k grows when fewer have room; a fragment group by
  // room when none fits).
  token_count place_in_node(int node, const std::vector<std::pair<std::size_t, token_count>>& fragments,
                            const std::vector<std::size_t>& seqs) {
    const auto base = static_cast<std::size_t>(node * P_);
    const auto P = static_cast<std::size_t>(P_);
    std::vector<token_count> tokens(P);
    std::vector<double> load(P);
    std::vector<std::size_t> pick(P);
    for (std::size_t g = 0; g < P; ++g) tokens[g] = rank_tokens_[base + g], load[g] = rank_load_[base + g];
    // (a) inter-node fragments: the metric load of a share w of a weighted zigzag is taken as
    // w mean pairs, w (|s| + 1) / 2 (exact up to one token's work, weighted_zigzag.hpp)
    for (const auto& [i, amount] : fragments) {
      const std::vector<token_count> shares = water_fill(tokens, L_, amount);
      for (std::size_t g = 0; g < P; ++g) {
        if (shares[g] == 0) continue;
        tokens[g] += shares[g];
        load[g] += static_cast<double>(metric_(shares[g], shares[g] * (len_[i] + 1) / 2));
        rank_tokens_[base + g] = tokens[g];
        rank_load_[base + g] = load[g];
        spill_ranks_[i].push_back(static_cast<rank_index>(base + g));
        spill_shares_[i].push_back(shares[g]);
      }
    }
    int128 sum_sq = 0;
    for (const std::size_t i : seqs) sum_sq += static_cast<int128>(len_[i]) * len_[i];
    double tau = 0;
    if (by_metric_) {
      for (std::size_t g = 0; g < P; ++g) tau += load[g];
      for (const std::size_t i : seqs) tau += cost_[i];
      tau /= static_cast<double>(P_);
    }
    for (const std::size_t i : seqs) {
      const token_count len = len_[i];
      if (by_metric_ && len >= L_) {  // (b) z1, ring size by the metric
        place_ring_metric(i, base, tau, tokens, load, pick);
        continue;
      }
      if (len >= L_) {  // (b) z1
        const int128 want = (static_cast<int128>(len) * len * P_ + sum_sq - 1) / sum_sq;
        const token_count hi = std::min<token_count>(P_, len);
        token_count k = want < 2 ? 2 : want > hi ? hi : static_cast<token_count>(want);
        if (k > hi) k = hi;
        const token_count k_paper = k;
        bool placed = false;
        for (; k <= hi && !placed; ++k) {
          sort_by_tokens(pick, tokens);
          std::sort(pick.begin(), pick.begin() + k);
          placed = true;
          for (token_count p = 0; p < k && placed; ++p)
            placed = tokens[pick[static_cast<std::size_t>(p)]] +
                         zigzag_tokens(len, static_cast<std::int32_t>(k), static_cast<std::int32_t>(p)) <= L_;
          if (!placed) continue;
          std::vector<rank_index> ranks(static_cast<std::size_t>(k));
          for (token_count p = 0; p < k; ++p) ranks[static_cast<std::size_t>(p)] = static_cast<rank_index>(base + pick[static_cast<std::size_t>(p)]);
          commit(i, std::move(ranks), {});
          for (std::size_t g = 0; g < P; ++g) tokens[g] = rank_tokens_[base + g], load[g] = rank_load_[base + g];
        }
        if (!placed) fill_in_node(i, base, static_cast<std::size_t>(k_paper), tokens, load, pick);
        continue;
      }
      // (c) z0
      std::size_t best = P;
      for (std::size_t g = 0; g < P; ++g)
        if (tokens[g] + len <= L_ && (best == P || load[g] < load[best])) best = g;
      if (best == P) {
        fill_in_node(i, base, 2, tokens, load, pick);
        continue;
      }
      tokens[best] += len;
      load[best] += static_cast<double>(metric_(len, causal_pairs(len)));
      rank_tokens_[base + best] = tokens[best];
      rank_load_[base + best] = load[best];
      layout_[i] = {{static_cast<rank_index>(base + best)}, {}, false};
    }
    return L_;
  }

  // (b) under the metric allocation: see place_in_node.
  void place_ring_metric(std::size_t i, std::size_t base, double tau, std::vector<token_count>& tokens,
                         std::vector<double>& load, std::vector<std::size_t>& pick) {
    const auto P = static_cast<std::size_t>(P_);
    const token_count len = len_[i];
    const token_count hi = std::min<token_count>(P_, len);
    token_count k = std::min(hi, std::max<token_count>(2, (len + L_ - 1) / L_));
    while (k < hi && ring_cost(i, k) > tau) ++k;
    const std::size_t k_first = static_cast<std::size_t>(k);
    std::iota(pick.begin(), pick.end(), std::size_t{0});
    std::stable_sort(pick.begin(), pick.end(), [&](std::size_t x, std::size_t y) { return load[x] < load[y]; });
    for (; k <= hi; ++k) {
      const token_count share = (len + k - 1) / k;  // no zigzag position holds more
      std::vector<rank_index> ranks;
      for (std::size_t j = 0; j < P && ranks.size() < static_cast<std::size_t>(k); ++j)
        if (tokens[pick[j]] + share <= L_) ranks.push_back(static_cast<rank_index>(base + pick[j]));
      if (ranks.size() < static_cast<std::size_t>(k)) continue;
      std::sort(ranks.begin(), ranks.end());
      commit(i, std::move(ranks), {});
      for (std::size_t g = 0; g < P; ++g) tokens[g] = rank_tokens_[base + g], load[g] = rank_load_[base + g];
      return;
    }
    fill_in_node(i, base, k_first, tokens, load, pick);
  }

  plan build(std::vector<std::string> notes) const {
    plan_builder out(hierarchical<Metric>::name, t_, L_);
    for (std::size_t i = 0; i < len_.size(); ++i) {
      const layout& lay = layout_[i];
      if (lay.ranks.size() == 1) out.add_range(lay.ranks.front(), order_[i], {0, len_[i]}, no_group);
      else if (lay.shares.empty()) out.add_zigzag(order_[i], len_[i], lay.ranks, out.group_for(lay.ranks));
      else out.add_weighted_zigzag(order_[i], len_[i], lay.ranks, lay.shares, out.group_for(lay.ranks));
    }
    for (auto& n : notes) out.note(std::move(n));
    return std::move(out).finish();
  }

  // Last resort, unreachable when the zone layouts keep their invariants (every step above
  // only places tokens where a GPU has room, and T <= N P L): rank r takes the stream tokens
  // [floor(r T / R), floor((r + 1) T / R)), each sequence a ring over the ranks it spans.
  std::pair<plan, hierarchical_trace> contiguous(hierarchical_trace trace, const char* what) const {
    trace.contiguous = true;
    trace.local_threshold.assign(static_cast<std::size_t>(N_), 0);
    std::fill(trace.node_of_sequence.begin(), trace.node_of_sequence.end(), -1);
    plan_builder out(hierarchical<Metric>::name, t_, L_);
    const auto cut = [&](rank_index r) {
      return static_cast<token_count>(static_cast<int128>(T_) * r / R_);
    };
    rank_index r = 0;
    for (sequence_index s = 0; s < b_.size(); ++s) {
      const token_count begin = b_.offset(s), end = begin + b_.length(s);
      while (cut(r + 1) <= begin) ++r;
      std::vector<rank_index> ranks;
      for (rank_index q = r; q < R_ && cut(q) < end; ++q)
        if (cut(q + 1) > begin && cut(q + 1) > cut(q)) ranks.push_back(q);
      const group_index g = out.group_for(ranks);
      for (const rank_index q : ranks)
        out.add_range(q, s, {std::max(cut(q), begin) - begin, std::min(cut(q + 1), end) - begin}, g);
    }
    out.note(std::string("contiguous fallback: ") + what +
             " could not keep every GPU within the capacity; rank r holds stream tokens [floor(r T/R), "
             "floor((r+1) T/R)), not causally balanced");
    return {std::move(out).finish(), std::move(trace)};
  }

  const batch& b_;
  const topology& t_;
  token_count L_;
  Metric metric_;
  bool by_metric_;
  int N_, P_;
  rank_index R_;
  token_count T_;
  std::vector<sequence_index> order_;
  std::vector<token_count> len_;                                    // lengths in `order_`
  std::vector<double> cost_;                                        // metric load whole (metric allocation)
  std::vector<token_count> rank_tokens_;                            // tokens placed per rank
  std::vector<double> rank_load_;                                   // metric load per rank
  std::vector<layout> layout_;                                      // per position of `order_`
  std::vector<int> node_of_;                                        // node of a whole z01 position, else -1
  std::vector<token_count> node_tokens_;                            // Alg. 1 tokens per node
  std::vector<std::vector<std::pair<int, token_count>>> spill_;     // node shares of a spilled position
  std::vector<std::vector<rank_index>> spill_ranks_;                // its ranks, node-major
  std::vector<std::vector<token_count>> spill_shares_;              // and their shares
};

}  // namespace detail

template <load_metric Metric>
std::pair<plan, hierarchical_trace> hierarchical<Metric>::solve(const batch& b, const topology& t) const {
  detail::check_input(b, t, capacity, name);
  return detail::hierarchical_solver<Metric>(b, t, capacity, metric, metric_allocation).run();
}

ZEPPELIN_NAMESPACE_END
