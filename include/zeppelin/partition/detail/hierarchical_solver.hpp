// zeppelin/partition/detail/hierarchical_solver.hpp
// The engine of the hierarchical partitioner (partition/hierarchical.hpp): the steps every
// node allocation shares, with the allocation-specific decisions left to a node_allocation
// policy (partition/node_allocation.hpp).
//   in : batch, topology, capacity L, a load metric; run(allocation, method name)
//   out: the plan and its hierarchical_trace
// Steps (sequences in the longest-first order, "positions"):
//   1. z2 = the positions no node can hold (|s| >= P L): allocation.layout_inter lays their
//      rings out (commit, or stream when they cannot fit).
//   2. z01 to nodes: allocation.pick_node chooses the node that takes a position whole; none
//      (-1): the position is split over the fewest nodes whose room covers it, most room
//      first (ties lowest node), shares leveled by water filling: an inter-node fragment group.
//   3. per node (Alg. 2): (a) its fragments of inter-node groups leveled over its P GPUs;
//      (b) z1 = {|s| >= L}: allocation.place_ring with the allocation's node_share;
//      (c) z0 = the rest, whole to the GPU of least metric load where it fits L (ties lowest
//      GPU), else a fragment group by room over the fewest GPUs whose room covers it.
//   4. the plan (plan_builder), or the contiguous fallback should a rank exceed L.
// Everything here only places tokens where a GPU has room. Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/detail/water_fill.hpp>
#include <zeppelin/partition/detail/plan_builder.hpp>
#include <zeppelin/partition/detail/weighted_zigzag.hpp>
#include <zeppelin/partition/hierarchical_trace.hpp>
#include <zeppelin/schedule/zigzag.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

//! One node's GPUs while Alg. 2 places its work: tokens and metric load per GPU (a copy of
//! the solver's per-rank counts, refreshed by hierarchical_solver::sync), a scratch order of
//! its GPUs, and the positions placed whole on it (longest first).
struct hierarchical_node {
  std::size_t base = 0;  //!< its first rank
  std::vector<token_count> tokens;
  std::vector<double> load;
  std::vector<std::size_t> pick;
  std::vector<std::size_t> seqs;
};

template <class Metric>
class hierarchical_solver {
 public:
  // the metric by value: GCC 12 warns (-Wmaybe-uninitialized) when an empty metric object
  // is bound by reference to a temporary solver at -O2
  hierarchical_solver(const batch& b, const topology& t, token_count capacity, Metric metric)
      : b_(b), t_(t), L_(capacity), metric_(std::move(metric)), N_(t.nodes()), P_(t.gpus_per_node()), R_(t.num_ranks()),
        T_(b.total_tokens()), order_(by_length_descending(b)) {
    len_.resize(order_.size());
    cost_.resize(order_.size());
    for (std::size_t i = 0; i < order_.size(); ++i) len_[i] = b.length(order_[i]);
    for (std::size_t i = 0; i < len_.size(); ++i) cost_[i] = static_cast<double>(metric_(len_[i], causal_pairs(len_[i])));
  }

  //! The plan (method name `method`) and its trace, with `allocation` deciding steps 1-3.
  template <class Allocation>
  std::pair<plan, hierarchical_trace> run(const Allocation& allocation, std::string_view method) {
    method_ = method;
    hierarchical_trace trace;
    trace.node_of_sequence.assign(static_cast<std::size_t>(b_.size()), -1);
    const token_count node_room = this->node_room();
    trace.inter_threshold = node_room;
    trace.inter_passes = 1;
    trace.local_threshold.assign(static_cast<std::size_t>(N_), L_);
    trace.allocation = Allocation::name;
    // |z2|: z2 is a prefix of the descending order
    std::size_t m = 0;
    while (m < len_.size() && len_[m] >= node_room) ++m;
    rank_tokens_.assign(static_cast<std::size_t>(R_), 0);
    rank_load_.assign(static_cast<std::size_t>(R_), 0.0);
    layout_.assign(len_.size(), {});
    allocation.layout_inter(*this, m, trace);
    place_on_nodes(m, allocation);
    place_in_nodes(m, trace, allocation);
    for (const token_count v : rank_tokens_)
      if (v > L_) return contiguous(std::move(trace), "the zone layouts");
    std::vector<plan_note> notes;
    for (std::size_t i = m; i < len_.size(); ++i) {
      trace.node_of_sequence[static_cast<std::size_t>(order_[i])] = node_of_[i];
      if (node_of_[i] < 0) trace.inter_spilled.push_back(order_[i]);
      if (layout_[i].intra_spilled) trace.intra_spilled.push_back(order_[i]);
    }
    std::sort(trace.inter_spilled.begin(), trace.inter_spilled.end());
    std::sort(trace.intra_spilled.begin(), trace.intra_spilled.end());
    if (trace.proportional)
      notes.push_back({note_kind::proportional_split,
                       "inter-node sequences need more than N empty nodes (sum ceil(|s|/s_avg) > N): proportional "
                       "split over ranks that shares nodes",
                       {},
                       {}});
    if (trace.streamed)
      notes.push_back({note_kind::streamed_split,
                       "the proportional split needs more than the capacity on a rank: inter-node sequences are "
                       "laid end to end over the ranks at ceil(T/R) tokens each (rings share boundary ranks)",
                       {},
                       {}});
    if (!trace.inter_spilled.empty())
      notes.push_back({note_kind::inter_node_spill,
                       std::to_string(trace.inter_spilled.size()) +
                           " sequence(s) fit no node whole: split over the nodes with the most room (inter-node "
                           "fragment groups, shares by room)",
                       trace.inter_spilled,
                       {}});
    if (std::string note = allocation.note(Metric::name); !note.empty())
      notes.push_back({note_kind::metric_allocation, std::move(note), {}, {}});
    if (!trace.intra_spilled.empty())
      notes.push_back({note_kind::intra_node_spill,
                       std::to_string(trace.intra_spilled.size()) +
                           " sequence(s) fit no GPU whole (or no equal split): split over the GPUs of their node with "
                           "the most room (intra-node fragment groups, shares by room)",
                       trace.intra_spilled,
                       {}});
    return {build(std::move(notes)), std::move(trace)};
  }

  // ---- what the node allocations read ----

  //! L, N, P, R = N P and T = sum |s|.
  [[nodiscard]] token_count capacity() const noexcept { return L_; }
  //! P * L, saturated: what one node may hold (core/checked_math.hpp).
  [[nodiscard]] token_count node_room() const noexcept { return saturating_mul(L_, P_); }
  [[nodiscard]] int nodes() const noexcept { return N_; }
  [[nodiscard]] int gpus_per_node() const noexcept { return P_; }
  [[nodiscard]] rank_index num_ranks() const noexcept { return R_; }
  [[nodiscard]] token_count total_tokens() const noexcept { return T_; }
  //! Number of positions (sequences); position i is the i-th longest (ties: lower index first).
  [[nodiscard]] std::size_t positions() const noexcept { return len_.size(); }
  [[nodiscard]] token_count length(std::size_t i) const noexcept { return len_[i]; }
  //! Metric load of position i whole on one GPU.
  [[nodiscard]] double cost(std::size_t i) const noexcept { return cost_[i]; }
  //! Metric load of one rank of a g-rank ring of position i: ceil(|s| / g) rows (the largest
  //! zigzag share) and the mean pairs |s|(|s| + 1) / (2 g) (zigzag is balanced within
  //! zigzag_imbalance_bound).
  [[nodiscard]] double ring_cost(std::size_t i, token_count g) const {
    const token_count len = len_[i];
    return static_cast<double>(metric_((len + g - 1) / g, causal_pairs(len) / g));
  }

  // ---- what the node allocations call ----

  //! Records the layout of position i (ranks in ring order; `shares` empty: the plain zigzag,
  //! else a weighted zigzag) and adds its tokens and metric load to the ranks. Zero shares
  //! are dropped; shares equal to the plain zigzag's become the plain zigzag.
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

  //! z2 (positions [0, m)) end to end over the ranks, ceil(T / R) <= L tokens per rank; each
  //! sequence a weighted zigzag over the ranks its stretch covers. Sets trace.streamed.
  void stream(std::size_t m, hierarchical_trace& trace) {
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

  //! Refreshes the node's copy of its GPUs' tokens and loads after a commit.
  void sync(hierarchical_node& node) const {
    for (std::size_t g = 0; g < node.tokens.size(); ++g)
      node.tokens[g] = rank_tokens_[node.base + g], node.load[g] = rank_load_[node.base + g];
  }

  //! GPUs of the node by tokens ascending (ties lowest GPU), into `pick`.
  static void sort_by_tokens(std::vector<std::size_t>& pick, const std::vector<token_count>& tokens) {
    std::iota(pick.begin(), pick.end(), std::size_t{0});
    std::stable_sort(pick.begin(), pick.end(), [&](std::size_t x, std::size_t y) { return tokens[x] < tokens[y]; });
  }

  //! A fragment group by room: water-fills position i over the k_min (or more, until their
  //! room covers it) GPUs of the node with the fewest tokens, ring in GPU order; commits it.
  void fill_in_node(std::size_t i, hierarchical_node& node, std::size_t k_min) {
    const auto P = static_cast<std::size_t>(P_);
    sort_by_tokens(node.pick, node.tokens);
    std::size_t k = 0;
    for (token_count room = 0; k < P && (room < len_[i] || k < k_min); ++k) room = saturating_add(room, L_ - node.tokens[node.pick[k]]);
    std::sort(node.pick.begin(), node.pick.begin() + static_cast<std::ptrdiff_t>(k));
    std::vector<token_count> loads(k);
    std::vector<rank_index> ranks(k);
    for (std::size_t j = 0; j < k; ++j)
      loads[j] = node.tokens[node.pick[j]], ranks[j] = static_cast<rank_index>(node.base + node.pick[j]);
    std::vector<token_count> shares(k);
    water_fill(loads, L_, len_[i], shares, fill_scratch_);
    commit(i, std::move(ranks), std::move(shares), true);
    sync(node);
  }

 private:
  // Where position i runs: one rank (local) or a ring; `shares` empty means the plain zigzag
  // over `ranks`, else the weighted zigzag with these token shares.
  struct layout {
    std::vector<rank_index> ranks;
    std::vector<token_count> shares;
    bool intra_spilled = false;
  };

  // Shares that the plain zigzag over as many ranks gives (or one rank): use the plain zigzag.
  static bool plain_shares(token_count len, std::span<const token_count> shares) {
    const auto G = static_cast<std::int32_t>(shares.size());
    for (std::int32_t p = 0; p < G; ++p)
      if (shares[static_cast<std::size_t>(p)] != zigzag_tokens(len, G, p)) return false;
    return true;
  }

  // Step 2: z01 to the node allocation.pick_node chooses, else split by room over nodes.
  template <class Allocation>
  void place_on_nodes(std::size_t m, const Allocation& allocation) {
    const token_count node_cap = node_room();
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
      const int best = allocation.pick_node(*this, i, std::span<const token_count>(node_tokens_), std::span<const double>(node_load));
      if (best >= 0) {
        node_tokens_[static_cast<std::size_t>(best)] += len_[i];
        node_load[static_cast<std::size_t>(best)] += cost_[i];
        node_of_[i] = best;
        continue;
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
      std::vector<token_count> amount(k);
      water_fill(loads, node_cap, len_[i], amount, fill_scratch_);
      for (std::size_t j = 0; j < k; ++j)
        if (amount[j] > 0) {
          spill_[i].push_back({by_room[j], amount[j]});
          node_tokens_[static_cast<std::size_t>(by_room[j])] += amount[j];
          node_load[static_cast<std::size_t>(by_room[j])] +=
              cost_[i] * static_cast<double>(amount[j]) / static_cast<double>(len_[i]);
        }
    }
  }

  // Step 3 for every node, then the rings of the inter-node fragment groups.
  template <class Allocation>
  void place_in_nodes(std::size_t m, hierarchical_trace& trace, const Allocation& allocation) {
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
          place_in_node(n, fragments[static_cast<std::size_t>(n)], std::move(at_node[static_cast<std::size_t>(n)]), allocation);
    for (std::size_t i = m; i < len_.size(); ++i)
      if (node_of_[i] < 0) {
        // the node fragments were already added to rank_tokens_ by place_in_node
        layout_[i] = {std::move(spill_ranks_[i]), std::move(spill_shares_[i]), false};
        if (plain_shares(len_[i], layout_[i].shares)) layout_[i].shares.clear();
      }
  }

  // Alg. 2 on one node (step 3). Returns the node's local threshold s0 (L).
  template <class Allocation>
  token_count place_in_node(int n, const std::vector<std::pair<std::size_t, token_count>>& fragments,
                            std::vector<std::size_t> seqs, const Allocation& allocation) {
    const auto P = static_cast<std::size_t>(P_);
    hierarchical_node node{static_cast<std::size_t>(n * P_), std::vector<token_count>(P), std::vector<double>(P),
                           std::vector<std::size_t>(P), std::move(seqs)};
    sync(node);
    // (a) inter-node fragments: the metric load of a share w of a weighted zigzag is taken as
    // w mean pairs, w (|s| + 1) / 2 (exact up to one token's work, weighted_zigzag.hpp)
    std::vector<token_count> shares(P);
    for (const auto& [i, amount] : fragments) {
      water_fill(node.tokens, L_, amount, shares, fill_scratch_);
      for (std::size_t g = 0; g < P; ++g) {
        if (shares[g] == 0) continue;
        node.tokens[g] += shares[g];
        node.load[g] += static_cast<double>(metric_(shares[g], shares[g] * (len_[i] + 1) / 2));
        rank_tokens_[node.base + g] = node.tokens[g];
        rank_load_[node.base + g] = node.load[g];
        spill_ranks_[i].push_back(static_cast<rank_index>(node.base + g));
        spill_shares_[i].push_back(shares[g]);
      }
    }
    const auto share = allocation.node_share(*this, node);
    for (const std::size_t i : node.seqs) {
      const token_count len = len_[i];
      if (len >= L_) {  // (b) z1
        allocation.place_ring(*this, node, i, share);
        continue;
      }
      // (c) z0
      std::size_t best = P;
      for (std::size_t g = 0; g < P; ++g)
        if (node.tokens[g] + len <= L_ && (best == P || node.load[g] < node.load[best])) best = g;
      if (best == P) {
        fill_in_node(i, node, 2);
        continue;
      }
      node.tokens[best] += len;
      node.load[best] += static_cast<double>(metric_(len, causal_pairs(len)));
      rank_tokens_[node.base + best] = node.tokens[best];
      rank_load_[node.base + best] = node.load[best];
      layout_[i] = {{static_cast<rank_index>(node.base + best)}, {}, false};
    }
    return L_;
  }

  plan build(std::vector<plan_note> notes) const {
    plan_builder out(method_, t_, L_);
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
    plan_builder out(method_, t_, L_);
    const auto cut = [&](rank_index r) { return static_cast<token_count>(static_cast<int128>(T_) * r / R_); };
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
    out.note({note_kind::contiguous_fallback,
              std::string("contiguous fallback: ") + what +
                  " could not keep every GPU within the capacity; rank r holds stream tokens [floor(r T/R), "
                  "floor((r+1) T/R)), not causally balanced",
              {},
              {}});
    return {std::move(out).finish(), std::move(trace)};
  }

  const batch& b_;
  const topology& t_;
  token_count L_;
  Metric metric_;
  int N_, P_;
  rank_index R_;
  token_count T_;
  std::string_view method_;
  std::vector<sequence_index> order_;
  std::vector<token_count> len_;                                 // lengths in `order_`
  std::vector<double> cost_;                                     // metric load whole
  std::vector<token_count> rank_tokens_;                         // tokens placed per rank
  std::vector<double> rank_load_;                                // metric load per rank
  std::vector<layout> layout_;                                   // per position of `order_`
  std::vector<int> node_of_;                                     // node of a whole z01 position, else -1
  std::vector<token_count> node_tokens_;                         // Alg. 1 tokens per node
  std::vector<std::vector<std::pair<int, token_count>>> spill_;  // node shares of a spilled position
  std::vector<std::vector<rank_index>> spill_ranks_;             // its ranks, node-major
  std::vector<std::vector<token_count>> spill_shares_;           // and their shares
  water_fill_scratch fill_scratch_;                              // reused by every water fill
};

}  // namespace detail

ZEPPELIN_NAMESPACE_END
