// zeppelin/pack/wlb.hpp
// WLB-LLM's heuristic variable-length packing with outlier delay (Wang et al., OSDI 2025,
// section 4, Algorithm 1).
//   in : the documents arriving each iteration (a global batch of the data loader)
//   out: per iteration N micro-batches of at most L_max tokens with balanced workload
//        W = W_a + W_l (pack/workload.hpp)
// Outlier queues: thresholds L_1 < L_2 < ... < L_n (fractions of the context window, which
// is L_max unless context_window says otherwise; configurable); a
// document of length >= L_1 is an outlier and waits, FIFO, in queue i with
// L_i <= length < L_{i+1} (L_{n+1} = infinity). Per iteration (Algorithm 1):
//   1. Doc_Set = the documents carried over from the previous iteration;
//   2. arriving outliers join their queue, the other arrivals join Doc_Set;
//   3. every queue holding >= N documents releases exactly N (its oldest) into Doc_Set, so
//      each micro-batch can get one outlier of the queue's range;
//   4. Doc_Set is sorted by length, longest first (ties by lowest index);
//   5. into N empty micro-batches, each document goes to W_idx, the micro-batch with the
//      least workload, if it fits (tokens + length <= L_max); else to L_idx, the one with the
//      fewest tokens, if it fits; else it is carried over to the next iteration (ties: lowest
//      micro-batch);
//   6. the N micro-batches are emitted.
// Two additions the paper leaves open:
//   - maximum wait: a document that would otherwise wait more than max_wait iterations
//     (now - arrival >= max_wait, in a queue or carried) is forced: it leaves its queue and
//     is placed before Doc_Set (oldest first, ties by index) by the rule of step 5;
//     with N micro-batches at least N forced documents always fit, so no document waits
//     more than max_wait iterations unless more than N are forced at once;
//   - flush at the end of data: the queues release everything and the carried documents
//     are packed by steps 4-6 into further iterations until none is left.
// Note: Algorithm 1 tests "< L_max"; the constraint of Eq. 2 is "<= L_max", used here.
// Errors: invalid_argument for N < 1, L < 1, a document longer than L_max, thresholds not
// strictly increasing in (0, 1], max_wait < 0, a negative context_window, or an invalid
// workload model.
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
#include <deque>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! A document waiting in a queue or carried over, with the iteration it arrived in.
struct waiting_document {
  document_ref document;
  std::int64_t arrived = 0;  //!< iteration (pack call, from 0) of its arrival
  friend constexpr bool operator==(const waiting_document&, const waiting_document&) = default;
};

//! Var-length packing with multi-level outlier queues (Algorithm 1).
struct wlb {
  //! Queue thresholds as fractions of the context window, strictly increasing in (0, 1]:
  //! L_i = ceil(fraction_i x context) tokens. Empty: no outlier delay (var-length packing alone).
  std::vector<double> thresholds = {0.5, 0.75};
  //! The context window the thresholds refer to (tokens); 0: L_max. Set it when L_max, the
  //! memory limit of a micro-batch, exceeds the context window.
  token_count context_window = 0;
  //! The longest a document waits (iterations) before it is forced into an iteration.
  //! A forced outlier lands alone in one micro-batch, so the cap must stay above the time
  //! the rarest queue needs to collect N documents: 8 forced most of the top queue's
  //! releases on a 128K context and cost 0.09 of imbalance with 2 queues (docs/packing.md).
  std::int64_t max_wait = 32;
  document_workload workload{};  //!< W = W_a + W_l balanced across micro-batches

  struct state {
    std::int64_t iteration = 0;                          //!< pack calls so far
    std::vector<std::deque<waiting_document>> queues;    //!< one per threshold, FIFO
    std::vector<waiting_document> carried;               //!< not placed last iteration
  };

  //! `count` queues with thresholds 1 - 2^-i of the context, i = 1..count: 1/2, 3/4, 7/8, ...
  //! (count = 2 is the default {0.5, 0.75}). Throws invalid_argument for count < 0 or > 30.
  [[nodiscard]] static wlb with_queues(int count) {
    ZEPPELIN_EXPECTS(count >= 0 && count <= 30, "the number of outlier queues must lie in [0, 30]", {{"queues", double(count)}});
    wlb w;
    w.thresholds.clear();
    for (int i = 1; i <= count; ++i) w.thresholds.push_back(1.0 - std::ldexp(1.0, -i));
    return w;
  }

  //! The thresholds in tokens for `limits` (ceil(fraction x context)).
  [[nodiscard]] std::vector<token_count> threshold_tokens(const packing_limits& limits) const {
    check(limits);
    const token_count context = context_window > 0 ? context_window : limits.max_tokens;
    std::vector<token_count> out;
    for (const double f : thresholds) out.push_back(static_cast<token_count>(std::ceil(f * static_cast<double>(context))));
    return out;
  }

  //! The queue a document of `length` tokens waits in, or -1 if it is not an outlier.
  [[nodiscard]] static int queue_of(token_count length, std::span<const token_count> threshold_tokens) noexcept {
    int q = -1;
    for (std::size_t i = 0; i < threshold_tokens.size(); ++i)
      if (length >= threshold_tokens[i]) q = static_cast<int>(i);
    return q;
  }

  [[nodiscard]] packed_iteration pack(state& s, std::span<const document_ref> arriving, const packing_limits& limits) const {
    const std::vector<token_count> bounds = threshold_tokens(limits);
    detail::check_pack_input(arriving, limits, workload);
    s.queues.resize(bounds.size());
    const std::int64_t now = s.iteration++;
    const auto forced_now = [&](const waiting_document& w) { return now - w.arrived >= max_wait; };
    // 1. carried documents; the forced ones go first.
    std::vector<waiting_document> forced;
    std::vector<waiting_document> doc_set;
    for (waiting_document& w : s.carried) (forced_now(w) ? forced : doc_set).push_back(w);
    s.carried.clear();
    // 2. arrivals: outliers to their queue, the rest to Doc_Set.
    for (const document_ref& d : arriving) {
      const int q = queue_of(d.length, bounds);
      if (q >= 0)
        s.queues[static_cast<std::size_t>(q)].push_back({d, now});
      else
        doc_set.push_back({d, now});
    }
    // Maximum wait: a queue's forced documents are its oldest (FIFO by arrival).
    for (auto& queue : s.queues)
      while (!queue.empty() && forced_now(queue.front())) {
        forced.push_back(queue.front());
        queue.pop_front();
      }
    // 3. release exactly N from every queue holding >= N.
    const auto n = static_cast<std::size_t>(limits.micro_batches);
    for (auto& queue : s.queues)
      if (queue.size() >= n)
        for (std::size_t k = 0; k < n; ++k) {
          doc_set.push_back(queue.front());
          queue.pop_front();
        }
    // 4-6.
    std::stable_sort(forced.begin(), forced.end(), [](const waiting_document& a, const waiting_document& b) {
      return a.arrived != b.arrived ? a.arrived < b.arrived : a.document.index < b.document.index;
    });
    sort_longest_first(doc_set);
    forced.insert(forced.end(), doc_set.begin(), doc_set.end());
    return place_all(s, forced, limits);
  }

  [[nodiscard]] std::vector<packed_iteration> flush(state& s, const packing_limits& limits) const {
    check(limits);
    std::vector<waiting_document> docs = std::move(s.carried);
    s.carried.clear();
    for (auto& queue : s.queues) {
      docs.insert(docs.end(), queue.begin(), queue.end());
      queue.clear();
    }
    for (const waiting_document& w : docs) check_document(w.document, limits);
    std::vector<packed_iteration> out;
    while (!docs.empty()) {
      sort_longest_first(docs);
      out.push_back(place_all(s, docs, limits));  // places >= 1 document: the first fits an empty micro-batch
      ++s.iteration;
      docs = std::move(s.carried);
      s.carried.clear();
    }
    return out;
  }

  friend bool operator==(const wlb&, const wlb&) = default;

 private:
  void check(const packing_limits& limits) const {
    validate(limits);
    validate(workload);
    ZEPPELIN_EXPECTS(max_wait >= 0, "the maximum wait cannot be negative", {{"max_wait", double(max_wait)}});
    ZEPPELIN_EXPECTS(context_window >= 0 && context_window <= max_sequence_length,
                     "the context window must lie in [0, max_sequence_length] (0: L_max)", {{"context_window", double(context_window)}});
    for (std::size_t i = 0; i < thresholds.size(); ++i) {
      const double f = thresholds[i];
      ZEPPELIN_EXPECTS(f > 0 && f <= 1 && (i == 0 || f > thresholds[i - 1]),
                       "outlier thresholds must be strictly increasing fractions of L in (0, 1]",
                       {{"queue", double(i)}, {"threshold", f}});
    }
  }

  static void sort_longest_first(std::vector<waiting_document>& docs) {
    std::stable_sort(docs.begin(), docs.end(), [](const waiting_document& a, const waiting_document& b) {
      return detail::longer_first(a.document, b.document);
    });
  }

  //! Step 5 over `docs` in order; what fits nowhere goes to s.carried.
  packed_iteration place_all(state& s, const std::vector<waiting_document>& docs, const packing_limits& limits) const {
    packed_iteration it = detail::empty_iteration(limits);
    auto& mbs = it.micro_batches;
    for (const waiting_document& w : docs) {
      std::size_t w_idx = 0;
      std::size_t l_idx = 0;
      for (std::size_t j = 1; j < mbs.size(); ++j) {
        if (mbs[j].workload < mbs[w_idx].workload) w_idx = j;
        if (mbs[j].tokens < mbs[l_idx].tokens) l_idx = j;
      }
      const token_count d = w.document.length;
      if (mbs[w_idx].tokens + d <= limits.max_tokens)
        detail::place(mbs[w_idx], w.document, workload);
      else if (mbs[l_idx].tokens + d <= limits.max_tokens)
        detail::place(mbs[l_idx], w.document, workload);
      else
        s.carried.push_back(w);
    }
    return it;
  }
};
static_assert(packer<wlb>);

ZEPPELIN_NAMESPACE_END
