// zeppelin/partition/hierarchical.hpp
// Zeppelin's two-level, three-zone sequence partitioner (EuroSys '26, section 3.1):
// Alg. 1 (inter-node) places sequences on nodes, Alg. 2 (intra-node) on GPUs.
//   in : batch, topology (N nodes x P GPUs), capacity L (tokens per GPU), a load metric
//   out: a plan whose groups are inter-node rings (zone inter), intra-node rings (zone
//        intra) and whose local sequences sit whole on one GPU (no group); every rank's
//        shards are ordered inter -> intra -> local (the attention engine's queue order).
//
// Alg. 1 (per step): sort S by length descending (ties: index); s1 = P * L.
//   z2 = {|s| >= s1} (inter-node), z01 = the rest, s_avg = sum|S| / N.
//   z2 layout, paper rule: s takes k_s = ceil(|s| / s_avg) EMPTY nodes (the next unused
//     nodes in order) and is zigzag-split over all their k_s * P ranks, node-major, as ONE
//     ring (so its node shares are even and, inside a node, its P device shares too: the
//     first loop of Alg. 2 is folded in). k_s = 1 happens after s1 was lowered: such a
//     sequence stays inside one node (zone intra).
//   z2 layout, DECISION (sum k_s > N): proportional split that shares nodes. Ranks, not
//     nodes, are apportioned: every z2 sequence gets g_s >= 1 consecutive ranks by the
//     D'Hondt rule (repeatedly give one more rank to the largest |s| / g_s, ties: lowest
//     index) until max |s| / g_s <= ceil(sum|S| / (N P)) (the rank-level s_avg) or the ranks
//     run out; groups that straddle a node boundary are inter-node, the others intra-node.
//     plan.notes says so. (It needs |z2| <= N P; otherwise the contiguous fallback below.)
//   z01, longest first, to the node with the fewest tokens (ties: lowest node); when
//     |s| + tokens(node) > P L: s1 = max|z01| (the longest z01 moves to z2) and restart.
//   Termination (pinned by tests): each restart moves >= 1 sequence from z01 to z2, so
//     s1 strictly decreases and there are at most |S| passes; with z01 empty nothing fails.
// Alg. 2 (per node, after Alg. 1 succeeded): s0 = L.
//   z1 = {s in z01 at node : |s| >= s0}, z0 = the rest (local).
//   c_avg = sum_{s in z01 at node} |s|^2 / P. DECISION: over z01, not z1: c_avg is the node's
//     per-GPU share of all its non-inter quadratic work, so a z1 sequence gets the share of
//     GPUs its quadratic work deserves; over z1 alone a lone z1 sequence would always take
//     all P GPUs however much local work the node has.
//   z1: k = ceil(|s|^2 / c_avg) clamped to [2, P] (and to |s|; 1 when P == 1) fragments,
//     zigzag-split over the k GPUs with the fewest tokens (ties: lowest GPU; ring in GPU
//     order). DECISION: "least-loaded" instead of the paper's round-robin cursor: identical
//     when the fragments are equal, and it keeps capacity; when a GPU would exceed L, k grows
//     (up to min(P, |s|)).
//   z0, longest first, to the GPU of least LOAD under the metric policy (tokens as in the
//     paper, causal pairs, or a cost model's time) among the GPUs where it fits L (ties:
//     lowest GPU); when it fits none: s0 = max|z0| and restart (at most |z01| passes).
//   DECISION (not in the paper): when a node cannot be completed (z1 fragments cannot fit
//     even at k = min(P, |s|) with z0 empty), Alg. 1 restarts with s1 = max|z01| as for a
//     node overflow, so the plan never exceeds L.
// Contiguous fallback (plan.notes says so): when even every sequence in z2 cannot be laid
//   out within L (only when L is within rounding of sum|S| / (N P), where uneven chunks and
//   whole sequences cannot pack exactly), rank r takes the stream tokens
//   [floor(r T / R), floor((r + 1) T / R)) and each sequence rings over the ranks it spans.
//   This always fits (ceil(T / R) <= L) but is not causally balanced.
// Throws infeasible for sum|S| > N P L, invalid_argument for L <= 0. Host-only.
#pragma once

#include <zeppelin/core/error.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/partition/detail/plan_builder.hpp>
#include <zeppelin/partition/load_metric.hpp>
#include <zeppelin/partition/partitioner.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! What the hierarchical partitioner decided, beside the plan (for tests, tools, tuning).
struct hierarchical_trace {
  //! Final inter-node threshold s1: z2 = sequences with length >= s1.
  token_count inter_threshold = 0;
  //! Passes of Alg. 1's loop (1 when nothing had to be lowered).
  std::int32_t inter_passes = 0;
  //! z2 was laid out by the proportional rank split (sum ceil(|s| / s_avg) > N).
  bool proportional = false;
  //! The contiguous fallback was taken.
  bool contiguous = false;
  //! Final intra-node threshold s0 per node (z0 = sequences of the node shorter than it).
  std::vector<token_count> local_threshold;
  //! Per sequence: its node when in z01, -1 when in z2 (or contiguous).
  std::vector<std::int32_t> node_of_sequence;
  friend bool operator==(const hierarchical_trace&, const hierarchical_trace&) = default;
};

template <load_metric Metric = token_metric>
struct hierarchical {
  static constexpr std::string_view name = "hierarchical";
  //! Tokens a GPU may hold (L).
  token_count capacity = 4096;
  //! How Alg. 2 measures a GPU's load when placing local sequences.
  Metric metric{};

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
  hierarchical_solver(const batch& b, const topology& t, token_count capacity, const Metric& metric)
      : b_(b), t_(t), L_(capacity), metric_(metric), N_(t.nodes()), P_(t.gpus_per_node()), R_(t.num_ranks()),
        T_(b.total_tokens()), order_(by_length_descending(b)) {
    len_.resize(order_.size());
    for (std::size_t i = 0; i < order_.size(); ++i) len_[i] = b.length(order_[i]);
  }

  std::pair<plan, hierarchical_trace> run() {
    hierarchical_trace trace;
    trace.node_of_sequence.assign(static_cast<std::size_t>(b_.size()), -1);
    const token_count node_room = L_ * P_;
    token_count s1 = node_room;
    std::size_t m = prefix_at_least(0, s1);  // |z2|: z2 is a prefix of the descending order
    std::vector<std::string> notes;
    for (;;) {
      ++trace.inter_passes;
      trace.inter_threshold = s1;
      bool proportional = false;
      if (!layout_z2(m, proportional)) return contiguous(std::move(trace), std::move(notes), "an inter-node layout");
      trace.proportional = proportional;
      bool ok = place_on_nodes(m) && place_in_nodes(m, trace);
      if (ok) break;
      if (m == len_.size()) return contiguous(std::move(trace), std::move(notes), "the intra-node layouts");
      s1 = len_[m];  // s1 = max|z01|
      m = prefix_at_least(m, s1);
    }
    for (std::size_t i = m; i < len_.size(); ++i)
      trace.node_of_sequence[static_cast<std::size_t>(order_[i])] = node_of_[i];
    if (trace.inter_passes > 1)
      notes.push_back("inter-node threshold s1 lowered from P*L = " + std::to_string(node_room) + " to " +
                      std::to_string(trace.inter_threshold) + " after " + std::to_string(trace.inter_passes - 1) +
                      " failed placement(s)");
    if (trace.proportional)
      notes.push_back("inter-node sequences need more than N empty nodes (sum ceil(|s|/s_avg) > N): proportional "
                      "split over ranks that shares nodes");
    for (int n = 0; n < N_; ++n)
      if (trace.local_threshold[static_cast<std::size_t>(n)] < L_)
        notes.push_back("node " + std::to_string(n) + ": local threshold s0 lowered to " +
                        std::to_string(trace.local_threshold[static_cast<std::size_t>(n)]));
    return {build(m, std::move(notes)), std::move(trace)};
  }

 private:
  // First position >= from whose length is < threshold (the z2 prefix ends there).
  std::size_t prefix_at_least(std::size_t from, token_count threshold) const {
    while (from < len_.size() && len_[from] >= threshold) ++from;
    return from;
  }

  void add_zigzag_load(token_count length, const std::vector<rank_index>& ranks) {
    const auto G = static_cast<std::int32_t>(ranks.size());
    for (std::int32_t i = 0; i < G; ++i) {
      const auto r = static_cast<std::size_t>(ranks[static_cast<std::size_t>(i)]);
      const token_count rows = zigzag_tokens(length, G, i);
      rank_tokens_[r] += rows;
      rank_load_[r] += static_cast<double>(metric_(rows, zigzag_pairs(length, G, i)));
    }
  }

  // Alg. 1 lines 7-10: ring groups of z2 (positions [0, m) of the order). False when no
  // layout keeps every rank within L.
  bool layout_z2(std::size_t m, bool& proportional) {
    rank_tokens_.assign(static_cast<std::size_t>(R_), 0);
    rank_load_.assign(static_cast<std::size_t>(R_), 0.0);
    z2_ranks_.assign(m, {});
    // k_s = ceil(|s| / s_avg) = ceil(|s| N / T)
    int128 nodes_needed = 0;
    for (std::size_t i = 0; i < m; ++i) nodes_needed += (static_cast<int128>(len_[i]) * N_ + T_ - 1) / T_;
    proportional = nodes_needed > N_;
    if (!proportional) {
      int next = 0;
      for (std::size_t i = 0; i < m; ++i) {
        const int k = static_cast<int>((static_cast<int128>(len_[i]) * N_ + T_ - 1) / T_);
        for (rank_index r = next * P_; r < (next + k) * P_; ++r) z2_ranks_[i].push_back(r);
        next += k;
      }
    } else {
      if (m > static_cast<std::size_t>(R_)) return false;
      // D'Hondt: g_i ranks, next rank to the largest len_i / g_i (ties: lowest i).
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
      for (std::size_t i = 0; i < m; ++i) {
        for (token_count j = 0; j < g[i]; ++j) z2_ranks_[i].push_back(next++);
      }
    }
    for (std::size_t i = 0; i < m; ++i) add_zigzag_load(len_[i], z2_ranks_[i]);
    for (const token_count v : rank_tokens_)
      if (v > L_) return false;
    return true;
  }

  // Alg. 1 lines 11-19: z01 to the node with the fewest tokens.
  bool place_on_nodes(std::size_t m) {
    node_of_.assign(len_.size(), -1);
    using entry = std::pair<token_count, int>;
    std::priority_queue<entry, std::vector<entry>, std::greater<entry>> heap;
    for (int n = 0; n < N_; ++n) {
      token_count tokens = 0;
      for (int g = 0; g < P_; ++g) tokens += rank_tokens_[static_cast<std::size_t>(n * P_ + g)];
      heap.push({tokens, n});
    }
    for (std::size_t i = m; i < len_.size(); ++i) {
      const auto [tokens, n] = heap.top();
      if (len_[i] + tokens > L_ * P_) return false;
      heap.pop();
      heap.push({tokens + len_[i], n});
      node_of_[i] = n;
    }
    return true;
  }

  // Alg. 2 for every node.
  bool place_in_nodes(std::size_t m, hierarchical_trace& trace) {
    trace.local_threshold.assign(static_cast<std::size_t>(N_), L_);
    z1_ranks_.assign(len_.size(), {});
    device_of_.assign(len_.size(), -1);
    std::vector<std::vector<std::size_t>> at_node(static_cast<std::size_t>(N_));
    for (std::size_t i = m; i < len_.size(); ++i) at_node[static_cast<std::size_t>(node_of_[i])].push_back(i);
    for (int n = 0; n < N_; ++n)
      if (!place_in_node(n, at_node[static_cast<std::size_t>(n)], trace.local_threshold[static_cast<std::size_t>(n)]))
        return false;
    return true;
  }

  bool place_in_node(int node, const std::vector<std::size_t>& seqs, token_count& s0) {
    const auto base = static_cast<std::size_t>(node * P_);
    const auto P = static_cast<std::size_t>(P_);
    int128 sum_sq = 0;
    for (const std::size_t i : seqs) sum_sq += static_cast<int128>(len_[i]) * len_[i];
    std::vector<token_count> tokens(P);
    std::vector<double> load(P);
    std::vector<std::size_t> pick(P);
    std::size_t z1 = 0;  // z1 = seqs[0, z1): the node's list is descending
    while (z1 < seqs.size() && len_[seqs[z1]] >= s0) ++z1;
    for (;;) {
      for (std::size_t g = 0; g < P; ++g) tokens[g] = rank_tokens_[base + g], load[g] = rank_load_[base + g];
      for (const std::size_t i : seqs) device_of_[i] = -1, z1_ranks_[i].clear();
      for (std::size_t j = 0; j < z1; ++j) {
        const std::size_t i = seqs[j];
        const token_count len = len_[i];
        // k = ceil(|s|^2 / c_avg) = ceil(|s|^2 P / sum_sq), clamped to [2, P] and to |s|
        const int128 want = (static_cast<int128>(len) * len * P_ + sum_sq - 1) / sum_sq;
        const token_count hi = std::min<token_count>(P_, len);
        token_count k = want < 2 ? 2 : want > hi ? hi : static_cast<token_count>(want);
        if (k > hi) k = hi;
        bool placed = false;
        for (; k <= hi && !placed; ++k) {
          for (std::size_t g = 0; g < P; ++g) pick[g] = g;
          std::stable_sort(pick.begin(), pick.end(), [&](std::size_t x, std::size_t y) { return tokens[x] < tokens[y]; });
          std::sort(pick.begin(), pick.begin() + k);
          placed = true;
          for (token_count p = 0; p < k && placed; ++p)
            placed = tokens[pick[static_cast<std::size_t>(p)]] + zigzag_tokens(len, static_cast<std::int32_t>(k), static_cast<std::int32_t>(p)) <= L_;
          if (!placed) continue;
          auto& ranks = z1_ranks_[i];
          ranks.clear();
          for (token_count p = 0; p < k; ++p) {
            const std::size_t g = pick[static_cast<std::size_t>(p)];
            const auto G = static_cast<std::int32_t>(k), pos = static_cast<std::int32_t>(p);
            const token_count rows = zigzag_tokens(len, G, pos);
            tokens[g] += rows;
            load[g] += static_cast<double>(metric_(rows, k == 1 ? causal_pairs(len) : zigzag_pairs(len, G, pos)));
            ranks.push_back(static_cast<rank_index>(base + g));
          }
        }
        if (!placed) return false;
      }
      bool lowered = false;
      for (std::size_t j = z1; j < seqs.size(); ++j) {
        const std::size_t i = seqs[j];
        const token_count len = len_[i];
        std::size_t best = P;
        for (std::size_t g = 0; g < P; ++g)
          if (tokens[g] + len <= L_ && (best == P || load[g] < load[best])) best = g;
        if (best == P) {
          s0 = len_[seqs[z1]];  // s0 = max|z0|
          while (z1 < seqs.size() && len_[seqs[z1]] >= s0) ++z1;
          lowered = true;
          break;
        }
        tokens[best] += len;
        load[best] += static_cast<double>(metric_(len, causal_pairs(len)));
        device_of_[i] = static_cast<rank_index>(base + best);
      }
      if (!lowered) return true;
    }
  }

  plan build(std::size_t m, std::vector<std::string> notes) const {
    plan_builder out(hierarchical<Metric>::name, t_, L_);
    for (std::size_t i = 0; i < m; ++i) add(out, i, z2_ranks_[i]);
    for (std::size_t i = m; i < len_.size(); ++i)
      if (device_of_[i] >= 0) out.add_range(device_of_[i], order_[i], {0, len_[i]}, no_group);
      else add(out, i, z1_ranks_[i]);
    for (auto& n : notes) out.note(std::move(n));
    return std::move(out).finish();
  }

  void add(plan_builder& out, std::size_t i, const std::vector<rank_index>& ranks) const {
    if (ranks.size() == 1) out.add_range(ranks.front(), order_[i], {0, len_[i]}, no_group);
    else out.add_zigzag(order_[i], len_[i], ranks, out.group_for(ranks));
  }

  std::pair<plan, hierarchical_trace> contiguous(hierarchical_trace trace, std::vector<std::string> notes,
                                                 const char* what) const {
    trace.contiguous = true;
    trace.local_threshold.assign(static_cast<std::size_t>(N_), 0);
    std::fill(trace.node_of_sequence.begin(), trace.node_of_sequence.end(), -1);
    notes.push_back(std::string("contiguous fallback: ") + what +
                    " could not keep every GPU within the capacity (it is within rounding of the average load); "
                    "rank r holds stream tokens [floor(r T/R), floor((r+1) T/R)), not causally balanced");
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
    for (auto& n : notes) out.note(std::move(n));
    return {std::move(out).finish(), std::move(trace)};
  }

  const batch& b_;
  const topology& t_;
  token_count L_;
  Metric metric_;
  int N_, P_;
  rank_index R_;
  token_count T_;
  std::vector<sequence_index> order_;
  std::vector<token_count> len_;                   // lengths in `order_`
  std::vector<token_count> rank_tokens_;           // z2 tokens per rank
  std::vector<double> rank_load_;                  // z2 metric load per rank
  std::vector<std::vector<rank_index>> z2_ranks_;  // ring of z2 position i
  std::vector<int> node_of_;                       // node of z01 position i
  std::vector<std::vector<rank_index>> z1_ranks_;  // ring of a z1 position
  std::vector<rank_index> device_of_;              // rank of a z0 position, else -1
};

}  // namespace detail

template <load_metric Metric>
std::pair<plan, hierarchical_trace> hierarchical<Metric>::solve(const batch& b, const topology& t) const {
  detail::check_input(b, t, capacity, name);
  return detail::hierarchical_solver<Metric>(b, t, capacity, metric).run();
}

ZEPPELIN_NAMESPACE_END
