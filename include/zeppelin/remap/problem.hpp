// zeppelin/remap/problem.hpp
// The remap problem of Zeppelin section 3.4 and its answer, a transfer matrix.
//   in : current token counts A (one per rank, node-major), the target counts B (by default
//        the balanced layout: floor(sum A / d) each, the remainder one token each), the
//        GPUs per node P and the per-token costs b_intra, b_inter (T_ij = b_inter when
//        ranks i and j sit on different nodes, b_intra otherwise)
//   out: a sparse integral matrix M (tokens sent from rank i to rank j) with
//        sum_j M_ij = max(A - B, 0)_i and sum_i M_ij = max(B - A, 0)_j, and its costs:
//        send cost of rank i = sum_j T_ij M_ij, receive cost of rank j = sum_i T_ij M_ij.
// Host-only (planning).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! What a remap solver minimises.
enum class remap_objective : std::uint8_t {
  max_send = 0,          //!< the paper: the largest per-sender cost  max_i sum_j T_ij M_ij
  max_send_receive = 1,  //!< the largest send or receive cost of any rank
  min_inter_volume = 2,  //!< the fewest tokens across nodes; ties broken by max_send
};

[[nodiscard]] constexpr std::string_view to_string(remap_objective o) noexcept {
  switch (o) {
    case remap_objective::max_send: return "max-send";
    case remap_objective::max_send_receive: return "max-send-receive";
    case remap_objective::min_inter_volume: return "min-inter-volume";
  }
  return "?";
}

//! One remap instance. Build it with make_remap_problem() (which validates it) or fill the
//! members and call validate_remap_problem().
struct remap_problem {
  std::vector<token_count> current{};  //!< A: tokens each rank holds now
  std::vector<token_count> target{};   //!< B: tokens each rank must hold afterwards
  int gpus_per_node = 1;               //!< P: ranks r and s share a node iff r / P == s / P
  double intra_cost = 1;               //!< b_intra: cost of one token inside a node
  double inter_cost = 1;               //!< b_inter: cost of one token across nodes

  [[nodiscard]] rank_index num_ranks() const noexcept { return static_cast<rank_index>(current.size()); }
  [[nodiscard]] int node_of(rank_index r) const noexcept { return r / gpus_per_node; }
  [[nodiscard]] int num_nodes() const noexcept { return num_ranks() / gpus_per_node; }
  //! T_ij.
  [[nodiscard]] double cost(rank_index i, rank_index j) const noexcept {
    return node_of(i) == node_of(j) ? intra_cost : inter_cost;
  }
  //! max(A - B, 0)_r: what rank r must send.
  [[nodiscard]] token_count surplus(rank_index r) const noexcept {
    const auto i = static_cast<std::size_t>(r);
    return current[i] > target[i] ? current[i] - target[i] : 0;
  }
  //! max(B - A, 0)_r: what rank r must receive.
  [[nodiscard]] token_count deficit(rank_index r) const noexcept {
    const auto i = static_cast<std::size_t>(r);
    return target[i] > current[i] ? target[i] - current[i] : 0;
  }
  friend bool operator==(const remap_problem&, const remap_problem&) = default;
};

//! The token-balanced layout B for counts A: every rank gets floor(sum A / d) tokens and the
//! sum A mod d remaining tokens go one each to the ranks holding the most tokens (ties: lowest
//! rank). Giving the extra tokens to the fullest ranks never increases any surplus and
//! minimises the total volume that moves (each extra token placed on a rank with
//! A_r > floor removes one token from the transfer). Throws invalid_argument on an empty or
//! negative input.
[[nodiscard]] inline std::vector<token_count> balanced_target(const std::vector<token_count>& current) {
  ZEPPELIN_EXPECTS(!current.empty(), "a remap needs at least one rank", {});
  token_count total = 0;
  for (std::size_t r = 0; r < current.size(); ++r) {
    ZEPPELIN_EXPECTS(current[r] >= 0, "token counts must be non-negative",
                     {{"rank", double(r)}, {"tokens", double(current[r])}});
    ZEPPELIN_EXPECTS(total <= std::numeric_limits<token_count>::max() - current[r],
                     "the ranks' token counts together overflow 64 bits", {{"rank", double(r)}, {"tokens", double(current[r])}});
    total += current[r];
  }
  const auto d = static_cast<token_count>(current.size());
  std::vector<token_count> target(current.size(), total / d);
  const auto extra = static_cast<std::size_t>(total % d);
  if (extra == 0) return target;
  std::vector<rank_index> order(current.size());
  std::iota(order.begin(), order.end(), rank_index{0});
  const auto fuller = [&](rank_index a, rank_index b) {
    const auto ta = current[static_cast<std::size_t>(a)], tb = current[static_cast<std::size_t>(b)];
    return ta != tb ? ta > tb : a < b;  // a strict total order: the chosen set is unique
  };
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(extra) - 1, order.end(), fuller);
  for (std::size_t k = 0; k < extra; ++k) ++target[static_cast<std::size_t>(order[k])];
  return target;
}

//! Throws invalid_argument unless the problem is well formed: d >= 1 ranks, P >= 1 dividing
//! d, A and B of size d with non-negative entries and equal sums that fit 64 bits, finite
//! positive costs.
inline void validate_remap_problem(const remap_problem& p) {
  ZEPPELIN_EXPECTS(!p.current.empty(), "a remap needs at least one rank", {});
  ZEPPELIN_EXPECTS(p.gpus_per_node >= 1, "gpus per node must be positive", {{"gpus_per_node", double(p.gpus_per_node)}});
  ZEPPELIN_EXPECTS(p.current.size() % static_cast<std::size_t>(p.gpus_per_node) == 0,
                   "the rank count must be a multiple of the GPUs per node",
                   {{"ranks", double(p.current.size())}, {"gpus_per_node", double(p.gpus_per_node)}});
  ZEPPELIN_EXPECTS(p.current.size() <= (std::size_t{1} << 30), "too many ranks", {{"ranks", double(p.current.size())}});
  ZEPPELIN_EXPECTS(p.target.size() == p.current.size(), "the target needs one count per rank",
                   {{"ranks", double(p.current.size())}, {"target_entries", double(p.target.size())}});
  ZEPPELIN_EXPECTS(std::isfinite(p.intra_cost) && p.intra_cost > 0, "the intra-node cost must be positive and finite",
                   {{"intra_cost", p.intra_cost}});
  ZEPPELIN_EXPECTS(std::isfinite(p.inter_cost) && p.inter_cost > 0, "the inter-node cost must be positive and finite",
                   {{"inter_cost", p.inter_cost}});
  token_count a = 0, b = 0;
  for (std::size_t r = 0; r < p.current.size(); ++r) {
    ZEPPELIN_EXPECTS(p.current[r] >= 0, "token counts must be non-negative",
                     {{"rank", double(r)}, {"tokens", double(p.current[r])}});
    ZEPPELIN_EXPECTS(p.target[r] >= 0, "target token counts must be non-negative",
                     {{"rank", double(r)}, {"tokens", double(p.target[r])}});
    ZEPPELIN_EXPECTS(a <= std::numeric_limits<token_count>::max() - p.current[r],
                     "the ranks' token counts together overflow 64 bits", {{"rank", double(r)}, {"tokens", double(p.current[r])}});
    ZEPPELIN_EXPECTS(b <= std::numeric_limits<token_count>::max() - p.target[r],
                     "the target token counts together overflow 64 bits", {{"rank", double(r)}, {"tokens", double(p.target[r])}});
    a += p.current[r];
    b += p.target[r];
  }
  ZEPPELIN_EXPECTS(a == b, "the target must hold as many tokens as the current layout",
                   {{"current_total", double(a)}, {"target_total", double(b)}});
}

//! A validated problem with the balanced target (balanced_target()).
[[nodiscard]] inline remap_problem make_remap_problem(std::vector<token_count> current, int gpus_per_node,
                                                      double intra_cost, double inter_cost) {
  remap_problem p{};
  p.target = balanced_target(current);
  p.current = std::move(current);
  p.gpus_per_node = gpus_per_node;
  p.intra_cost = intra_cost;
  p.inter_cost = inter_cost;
  validate_remap_problem(p);
  return p;
}

//! One positive entry M_ij of a remap matrix: `tokens` tokens that rank `from` hands to rank
//! `to`. A count of tokens, not a message: the bytes, offsets and route pieces that carry it
//! are the execution program's transfers (core/transfer.hpp, program/remap_program.hpp).
struct remap_entry {
  rank_index from = 0;
  rank_index to = 0;
  token_count tokens = 0;
  friend bool operator==(const remap_entry&, const remap_entry&) = default;
};

//! A sparse transfer matrix: the positive entries, sorted by (from, to), no duplicates, no
//! diagonal entries.
struct remap_matrix {
  rank_index ranks = 0;
  std::vector<remap_entry> entries{};

  //! M_ij (0 when absent). O(log nnz).
  [[nodiscard]] token_count at(rank_index i, rank_index j) const noexcept {
    const auto it = std::lower_bound(entries.begin(), entries.end(), remap_entry{i, j, 0},
                                     [](const remap_entry& a, const remap_entry& b) {
                                       return a.from != b.from ? a.from < b.from : a.to < b.to;
                                     });
    return it != entries.end() && it->from == i && it->to == j ? it->tokens : 0;
  }
  //! The d x d matrix (row i = what rank i sends).
  [[nodiscard]] std::vector<std::vector<token_count>> dense() const {
    std::vector<std::vector<token_count>> m(static_cast<std::size_t>(ranks),
                                            std::vector<token_count>(static_cast<std::size_t>(ranks), 0));
    for (const auto& t : entries) m[static_cast<std::size_t>(t.from)][static_cast<std::size_t>(t.to)] = t.tokens;
    return m;
  }
  friend bool operator==(const remap_matrix&, const remap_matrix&) = default;
};

//! The figures every objective is made of.
struct remap_costs {
  double max_send = 0;             //!< max_i sum_j T_ij M_ij (the paper's objective)
  double max_receive = 0;          //!< max_j sum_i T_ij M_ij
  token_count moved_tokens = 0;    //!< sum M
  token_count inter_node_tokens = 0;  //!< sum of M_ij over pairs on different nodes

  [[nodiscard]] double max_send_receive() const noexcept { return std::max(max_send, max_receive); }
  //! The primary value of `o` (for min_inter_volume: the token count, as a double).
  [[nodiscard]] double value(remap_objective o) const noexcept {
    switch (o) {
      case remap_objective::max_send: return max_send;
      case remap_objective::max_send_receive: return max_send_receive();
      case remap_objective::min_inter_volume: return static_cast<double>(inter_node_tokens);
    }
    return max_send;
  }
};

//! Prices a matrix (which must belong to the problem: same rank count). O(d + nnz).
[[nodiscard]] inline remap_costs evaluate(const remap_problem& p, const remap_matrix& m) {
  ZEPPELIN_EXPECTS(m.ranks == p.num_ranks(), "the matrix and the problem have different rank counts",
                   {{"matrix_ranks", double(m.ranks)}, {"problem_ranks", double(p.num_ranks())}});
  std::vector<double> send(static_cast<std::size_t>(m.ranks), 0.0), recv(static_cast<std::size_t>(m.ranks), 0.0);
  remap_costs c{};
  for (const auto& t : m.entries) {
    const double w = p.cost(t.from, t.to) * static_cast<double>(t.tokens);
    send[static_cast<std::size_t>(t.from)] += w;
    recv[static_cast<std::size_t>(t.to)] += w;
    c.moved_tokens += t.tokens;
    if (p.node_of(t.from) != p.node_of(t.to)) c.inter_node_tokens += t.tokens;
  }
  for (std::size_t r = 0; r < send.size(); ++r) {
    c.max_send = std::max(c.max_send, send[r]);
    c.max_receive = std::max(c.max_receive, recv[r]);
  }
  return c;
}

//! Throws invalid_argument unless `m` is a feasible answer to `p`: entries sorted by
//! (from, to), positive, off the diagonal, row sums = surpluses, column sums = deficits.
inline void check_remap_matrix(const remap_problem& p, const remap_matrix& m) {
  ZEPPELIN_EXPECTS(m.ranks == p.num_ranks(), "the matrix and the problem have different rank counts",
                   {{"matrix_ranks", double(m.ranks)}, {"problem_ranks", double(p.num_ranks())}});
  std::vector<token_count> row(static_cast<std::size_t>(m.ranks), 0), col(row);
  for (std::size_t k = 0; k < m.entries.size(); ++k) {
    const auto& t = m.entries[k];
    ZEPPELIN_EXPECTS(t.from >= 0 && t.from < m.ranks && t.to >= 0 && t.to < m.ranks && t.from != t.to && t.tokens > 0,
                     "bad matrix entry", {{"from", double(t.from)}, {"to", double(t.to)}, {"tokens", double(t.tokens)}});
    if (k > 0) {
      const auto& q = m.entries[k - 1];
      ZEPPELIN_EXPECTS(q.from < t.from || (q.from == t.from && q.to < t.to), "matrix entries must be sorted and unique",
                       {{"entry", double(k)}});
    }
    row[static_cast<std::size_t>(t.from)] += t.tokens;
    col[static_cast<std::size_t>(t.to)] += t.tokens;
  }
  for (rank_index r = 0; r < m.ranks; ++r) {
    ZEPPELIN_EXPECTS(row[static_cast<std::size_t>(r)] == p.surplus(r), "a rank must send exactly its surplus",
                     {{"rank", double(r)}, {"sent", double(row[static_cast<std::size_t>(r)])}, {"surplus", double(p.surplus(r))}});
    ZEPPELIN_EXPECTS(col[static_cast<std::size_t>(r)] == p.deficit(r), "a rank must receive exactly its deficit",
                     {{"rank", double(r)}, {"received", double(col[static_cast<std::size_t>(r)])}, {"deficit", double(p.deficit(r))}});
  }
}

ZEPPELIN_NAMESPACE_END
