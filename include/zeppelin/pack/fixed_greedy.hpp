// zeppelin/pack/fixed_greedy.hpp
// WLB-LLM's "fixed-length greedy" packing (Wang et al., OSDI 2025, section 3.2 and Table 2;
// the Fixed-4D baseline): the documents of `window` global batches (iterations' arrivals)
// are shuffled into window x N micro-batches of at most L tokens, balancing the attention
// work sum d^2 greedily.
//   in : the documents arriving each iteration
//   out: per iteration N micro-batches. Every `window` iterations the collected documents
//        (and those carried from the previous window) are sorted longest first (ties by
//        lowest index) and each goes onto the micro-batch with the least attention work
//        sum d^2 among those it still fits in (tokens <= L; ties: lowest micro-batch); a
//        document that fits in none waits for the next window. Micro-batches k N .. k N + N - 1
//        form the window's k-th iteration.
// With window = 1 an iteration packs its own arrivals (no delay beyond carried documents).
// With window w > 1 the first w - 1 iterations of a stream are empty (the window fills) and
// every document waits up to w - 1 iterations: the price of a larger packing window that the
// paper measures as lost data randomness. When L does not bind this is LPT scheduling of the
// jobs d^2: the largest micro-batch is at most (4/3 - 1/(3 N w)) times the optimum.
// Errors: invalid_argument for N < 1, L < 1, window < 1, or a document longer than L.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/pack/detail/bins.hpp>
#include <zeppelin/pack/packer.hpp>
#include <zeppelin/pack/packing.hpp>
#include <zeppelin/pack/workload.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <iterator>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Longest first onto the micro-batch with the least sum d^2 that has room, over `window`
//! global batches.
struct fixed_greedy {
  int window = 1;                //!< global batches packed together (>= 1)
  document_workload workload{};  //!< fills packed_micro_batch::workload (reporting only)

  struct state {
    std::vector<document_ref> collected;  //!< carried documents, then this window's arrivals
    int batches = 0;                      //!< arrival batches collected in the current window
    std::deque<packed_iteration> ready;   //!< packed iterations not yet emitted
  };

  [[nodiscard]] packed_iteration pack(state& s, std::span<const document_ref> arriving, const packing_limits& limits) const {
    check(limits);
    detail::check_pack_input(arriving, limits, workload);
    s.collected.insert(s.collected.end(), arriving.begin(), arriving.end());
    if (++s.batches >= window) {
      pack_window(s, window, limits);
      s.batches = 0;
    }
    if (s.ready.empty()) return detail::empty_iteration(limits);
    packed_iteration it = std::move(s.ready.front());
    s.ready.pop_front();
    return it;
  }

  [[nodiscard]] std::vector<packed_iteration> flush(state& s, const packing_limits& limits) const {
    check(limits);
    for (const document_ref& d : s.collected) check_document(d, limits);
    if (!s.collected.empty()) pack_window(s, std::max(s.batches, 1), limits);
    while (!s.collected.empty()) pack_window(s, 1, limits);  // each round places >= 1 document
    s.batches = 0;
    std::vector<packed_iteration> out(std::make_move_iterator(s.ready.begin()), std::make_move_iterator(s.ready.end()));
    s.ready.clear();
    return out;
  }

  friend bool operator==(const fixed_greedy&, const fixed_greedy&) = default;

 private:
  void check(const packing_limits& limits) const {
    validate(limits);
    ZEPPELIN_EXPECTS(window >= 1, "the packing window needs at least 1 global batch", {{"window", double(window)}});
  }

  //! Packs s.collected into `iterations` x N micro-batches appended to s.ready; what fits
  //! nowhere stays in s.collected.
  void pack_window(state& s, int iterations, const packing_limits& limits) const {
    std::vector<document_ref> docs = std::move(s.collected);
    s.collected.clear();
    std::stable_sort(docs.begin(), docs.end(), detail::longer_first);
    const auto bins = static_cast<std::size_t>(iterations) * static_cast<std::size_t>(limits.micro_batches);
    std::vector<packed_micro_batch> mbs(bins);
    std::vector<std::int64_t> attention(bins, 0);
    for (const document_ref& d : docs) {
      std::size_t best = bins;
      for (std::size_t j = 0; j < bins; ++j)
        if (mbs[j].tokens + d.length <= limits.max_tokens && (best == bins || attention[j] < attention[best])) best = j;
      if (best == bins) {
        s.collected.push_back(d);
        continue;
      }
      detail::place(mbs[best], d, workload);
      attention[best] += detail::attention_work(d.length);
    }
    const auto n = static_cast<std::size_t>(limits.micro_batches);
    for (std::size_t k = 0; k < static_cast<std::size_t>(iterations); ++k) {
      packed_iteration it;
      it.micro_batches.assign(std::make_move_iterator(mbs.begin() + static_cast<std::ptrdiff_t>(k * n)),
                              std::make_move_iterator(mbs.begin() + static_cast<std::ptrdiff_t>((k + 1) * n)));
      s.ready.push_back(std::move(it));
    }
  }
};
static_assert(packer<fixed_greedy>);

ZEPPELIN_NAMESPACE_END
