// zeppelin/pack/fixed_exact.hpp
// WLB-LLM's "fixed-length solver" (Wang et al., OSDI 2025, Eq. 1): the packing of a set of
// documents into N micro-batches of at most L tokens that minimises the largest attention
// work, solved to optimality by branch and bound (the paper uses a commercial ILP solver):
//   minimise max_j sum_i x_ij d_i^2  s.t.  sum_j x_ij = 1,  sum_i x_ij d_i <= L,  x_ij in {0,1}
//   in : document lengths, N, L (solve); or a stream's arrivals (pack)
//   out: solve: the micro-batch of each document, or nothing when no packing exists;
//        best_within_limit: the best packing found within node_limit (anytime, never
//        resource_limit), its lower bound and whether it is proven optimal;
//        pack: the optimal packing of the carried and arriving documents. When they cannot
//        all be packed (more than N L tokens, or no feasible packing), the latest documents
//        wait for the next iteration, one at a time until the rest can be packed.
// Search: documents sorted longest first (ties by lowest index) are placed one by one,
// trying the micro-batches in order of increasing attention work (ties by index) among
// those with room; symmetry breaking: micro-batches in the same state (tokens and work,
// e.g. all empty ones) are tried once. Bounds: a branch is cut when its largest work
// reaches the best packing known (initially the greedy longest-first packing of
// fixed_greedy); the search stops at the lower bound max(ceil(sum d^2 / N), max d^2).
// NP-hard: it is meant for small instances (tens of documents, a few micro-batches).
// Errors: invalid_argument for N < 1, L < 1, a document longer than L, node_limit < 1;
// resource_limit when a search visits more than node_limit nodes (naming documents,
// micro_batches and node_limit).
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/pack/detail/bins.hpp>
#include <zeppelin/pack/packer.hpp>
#include <zeppelin/pack/packing.hpp>
#include <zeppelin/pack/workload.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! What fixed_exact::best_within_limit found: the best packing within the node limit (an
//! anytime answer, as an ILP solver with a time limit gives) and the proof status.
struct exact_packing {
  std::vector<int> assignment;    //!< micro-batch of each document (input order); empty if none was found
  std::int64_t largest_work = 0;  //!< max over micro-batches of sum d^2 of `assignment`
  std::int64_t lower_bound = 0;   //!< max(ceil(sum d^2 / N), max d^2): no packing does better
  bool optimal = false;           //!< the search finished: `assignment` is optimal, or none exists
  std::int64_t nodes = 0;         //!< search nodes visited
};

namespace detail {

//! Branch and bound over the placements of documents sorted longest first.
class fixed_exact_search {
 public:
  fixed_exact_search(std::span<const token_count> lengths, int bins, token_count max_tokens, std::int64_t node_limit)
      : order_(lengths.size()), max_tokens_(max_tokens), node_limit_(node_limit), bins_(static_cast<std::size_t>(bins)) {
    std::iota(order_.begin(), order_.end(), std::size_t{0});
    std::stable_sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) { return lengths[a] > lengths[b]; });
    for (const std::size_t i : order_) {
      length_.push_back(lengths[i]);
      work_.push_back(attention_work(lengths[i]));
    }
  }

  //! The micro-batch of each document (input order), or nullopt if no packing exists.
  //! Throws resource_limit past the node limit.
  std::optional<std::vector<int>> run() {
    search_all();
    if (stopped_)
      ZEPPELIN_THROW(resource_limit, "the exact packing search exceeded its node limit",
                     {{"documents", double(length_.size())}, {"micro_batches", double(bins_)}, {"node_limit", double(node_limit_)}});
    if (best_assignment_.empty() && !length_.empty()) return std::nullopt;
    return assignment_in_input_order();
  }

  //! The best packing within the node limit and what is proven about it.
  exact_packing best_within_limit() {
    search_all();
    exact_packing out;
    out.nodes = nodes_;
    out.lower_bound = lower_bound_;
    out.optimal = !stopped_;
    if (best_assignment_.empty() && !length_.empty()) return out;
    out.assignment = assignment_in_input_order();
    out.largest_work = best_;
    return out;
  }

  [[nodiscard]] std::int64_t nodes() const noexcept { return nodes_; }

 private:
  void search_all() {
    const std::size_t n = length_.size();
    if (n == 0) {
      best_ = 0;
      return;
    }
    long double total = 0;
    long double total_tokens = 0;
    for (std::size_t k = 0; k < n; ++k) {
      total += static_cast<long double>(work_[k]);
      total_tokens += static_cast<long double>(length_[k]);
    }
    if (total_tokens > static_cast<long double>(max_tokens_) * static_cast<long double>(bins_)) return;
    // Feasible so far: each bin holds <= L tokens, so its work <= L^2 and the average fits.
    const auto average = static_cast<std::int64_t>(std::ceil(total / static_cast<long double>(bins_)));
    lower_bound_ = std::max(average, work_.front());
    greedy_start();
    tokens_.assign(bins_, 0);
    load_.assign(bins_, 0);
    current_.assign(n, -1);
    if (best_ > lower_bound_) search(0, 0);
  }

  [[nodiscard]] std::vector<int> assignment_in_input_order() const {
    std::vector<int> out(length_.size());
    for (std::size_t k = 0; k < length_.size(); ++k) out[order_[k]] = best_assignment_[k];
    return out;
  }

  void greedy_start() {
    std::vector<token_count> tokens(bins_, 0);
    std::vector<std::int64_t> load(bins_, 0);
    std::vector<int> assignment(length_.size());
    for (std::size_t k = 0; k < length_.size(); ++k) {
      std::size_t best = bins_;
      for (std::size_t j = 0; j < bins_; ++j)
        if (tokens[j] + length_[k] <= max_tokens_ && (best == bins_ || load[j] < load[best])) best = j;
      if (best == bins_) return;
      tokens[best] += length_[k];
      load[best] += work_[k];
      assignment[k] = static_cast<int>(best);
    }
    best_ = *std::max_element(load.begin(), load.end());
    best_assignment_ = std::move(assignment);
  }

  void search(std::size_t k, std::int64_t current_max) {
    if (stopped_ || ++nodes_ > node_limit_) {
      stopped_ = true;
      return;
    }
    if (k == length_.size()) {
      best_ = current_max;
      best_assignment_ = current_;
      return;
    }
    // Candidate micro-batches by increasing work, ties by index; one per distinct state.
    std::vector<std::size_t> candidates;
    for (std::size_t j = 0; j < bins_; ++j) {
      if (tokens_[j] + length_[k] > max_tokens_ || std::max(current_max, load_[j] + work_[k]) >= best_) continue;
      bool seen = false;
      for (const std::size_t c : candidates) seen = seen || (tokens_[c] == tokens_[j] && load_[c] == load_[j]);
      if (!seen) candidates.push_back(j);
    }
    std::stable_sort(candidates.begin(), candidates.end(), [&](std::size_t a, std::size_t b) { return load_[a] < load_[b]; });
    for (const std::size_t j : candidates) {
      const std::int64_t next_max = std::max(current_max, load_[j] + work_[k]);
      if (next_max >= best_) continue;  // best_ may have improved since the candidates were listed
      tokens_[j] += length_[k];
      load_[j] += work_[k];
      current_[k] = static_cast<int>(j);
      search(k + 1, next_max);
      tokens_[j] -= length_[k];
      load_[j] -= work_[k];
      if (best_ <= lower_bound_ || stopped_) return;
    }
  }

  std::vector<std::size_t> order_;  // order_[k]: input position of the k-th longest document
  std::vector<token_count> length_;
  std::vector<std::int64_t> work_;
  token_count max_tokens_;
  std::int64_t node_limit_;
  std::size_t bins_;
  std::int64_t lower_bound_ = 0;
  std::int64_t best_ = std::numeric_limits<std::int64_t>::max();
  std::vector<int> best_assignment_;
  std::vector<int> current_;
  std::vector<token_count> tokens_;
  std::vector<std::int64_t> load_;
  std::int64_t nodes_ = 0;
  bool stopped_ = false;  // the node limit was reached: best_ is not proven optimal
};

}  // namespace detail

//! Optimal fixed-length packing (Eq. 1) by branch and bound; for small instances.
struct fixed_exact {
  std::int64_t node_limit = 2'000'000;  //!< search nodes per solve before resource_limit
  document_workload workload{};          //!< fills packed_micro_batch::workload (reporting only)

  struct state {
    std::vector<document_ref> carried;  //!< in arrival order
  };

  //! The micro-batch (0 .. limits.micro_batches - 1) of each document minimising the
  //! largest sum of d^2, or nullopt when the documents cannot be packed at all. Throws as
  //! in the file comment.
  [[nodiscard]] std::optional<std::vector<int>> solve(std::span<const token_count> lengths, const packing_limits& limits) const {
    check(limits);
    for (std::size_t i = 0; i < lengths.size(); ++i) check_document({static_cast<std::int64_t>(i), lengths[i]}, limits);
    return detail::fixed_exact_search(lengths, limits.micro_batches, limits.max_tokens, node_limit).run();
  }

  //! The best packing the search finds within node_limit nodes, never throwing
  //! resource_limit: the greedy start improved by branch and bound, with the lower bound
  //! and whether it is proven optimal (see exact_packing). Other errors as solve.
  [[nodiscard]] exact_packing best_within_limit(std::span<const token_count> lengths, const packing_limits& limits) const {
    check(limits);
    for (std::size_t i = 0; i < lengths.size(); ++i) check_document({static_cast<std::int64_t>(i), lengths[i]}, limits);
    return detail::fixed_exact_search(lengths, limits.micro_batches, limits.max_tokens, node_limit).best_within_limit();
  }

  [[nodiscard]] packed_iteration pack(state& s, std::span<const document_ref> arriving, const packing_limits& limits) const {
    check(limits);
    detail::check_pack_input(arriving, limits, workload);
    std::vector<document_ref> docs = std::move(s.carried);
    s.carried.clear();
    docs.insert(docs.end(), arriving.begin(), arriving.end());
    return pack_documents(s, std::move(docs), limits);
  }

  [[nodiscard]] std::vector<packed_iteration> flush(state& s, const packing_limits& limits) const {
    check(limits);
    for (const document_ref& d : s.carried) check_document(d, limits);
    std::vector<packed_iteration> out;
    while (!s.carried.empty()) {
      std::vector<document_ref> docs = std::move(s.carried);
      s.carried.clear();
      out.push_back(pack_documents(s, std::move(docs), limits));  // packs >= 1 document
    }
    return out;
  }

  friend bool operator==(const fixed_exact&, const fixed_exact&) = default;

 private:
  void check(const packing_limits& limits) const {
    validate(limits);
    ZEPPELIN_EXPECTS(node_limit >= 1, "the exact packing needs a positive node limit", {{"node_limit", double(node_limit)}});
  }

  //! Packs `docs` (arrival order) optimally; the latest that cannot be packed go back to
  //! s.carried in arrival order.
  packed_iteration pack_documents(state& s, std::vector<document_ref> docs, const packing_limits& limits) const {
    const auto capacity = static_cast<long double>(limits.max_tokens) * limits.micro_batches;
    long double total = 0;
    for (const document_ref& d : docs) total += static_cast<long double>(d.length);
    std::size_t keep = docs.size();
    while (keep > 0 && total > capacity) total -= static_cast<long double>(docs[--keep].length);
    std::optional<std::vector<int>> assignment;
    std::vector<token_count> lengths;
    for (; keep > 0; --keep) {
      lengths.clear();
      for (std::size_t i = 0; i < keep; ++i) lengths.push_back(docs[i].length);
      assignment = detail::fixed_exact_search(lengths, limits.micro_batches, limits.max_tokens, node_limit).run();
      if (assignment) break;
    }
    packed_iteration it = detail::empty_iteration(limits);
    for (std::size_t i = 0; i < keep; ++i)
      detail::place(it.micro_batches[static_cast<std::size_t>((*assignment)[i])], docs[i], workload);
    s.carried.insert(s.carried.begin(), docs.begin() + static_cast<std::ptrdiff_t>(keep), docs.end());
    return it;
  }
};
static_assert(packer<fixed_exact>);

ZEPPELIN_NAMESPACE_END
