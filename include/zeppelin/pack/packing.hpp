// zeppelin/pack/packing.hpp
// The vocabulary of document packing (the pipeline level of WLB-LLM, Wang et al., OSDI 2025):
// documents of a stream go into N micro-batches per training iteration, each of at most
// L_max tokens.
//   packing_limits      N (micro_batches) and L_max (max_tokens)
//   document_ref        a document of the stream: its index in the stream and its length
//   packed_micro_batch  the documents of one micro-batch (stream indices), tokens, workload
//   packed_iteration    the N micro-batches of one iteration
//   imbalance degrees   WLB-LLM's max / mean over an iteration's micro-batches: of the
//                       workload (W_a + W_l, section 6.4's Max_Latency x PP / Total_Latency
//                       with N micro-batches in place of PP) and of attention alone
//                       (section 3.3's Max_Attn / Avg_Attn, attention = sum of d^2)
// Errors: validate(packing_limits) and check_document throw invalid_argument (N < 1, L < 1,
// L beyond max_sequence_length; a document of length < 1 or > L, naming its index, length
// and L). The imbalance functions throw invalid_argument for an index outside `lengths`.
// Host-only (std::vector).
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! What one training iteration takes: `micro_batches` (N) micro-batches of at most
//! `max_tokens` (L_max) tokens each.
struct packing_limits {
  //! The most micro-batches an iteration may have: every iteration allocates its N
  //! micro-batches, and N beyond a million is a mistyped number, not a training step.
  static constexpr int max_micro_batches = 1 << 20;
  int micro_batches = 1;     //!< N in [1, max_micro_batches]
  token_count max_tokens = 0;  //!< L_max >= 1: the tokens GPU memory allows in one micro-batch
  friend constexpr bool operator==(const packing_limits&, const packing_limits&) = default;
};

//! Throws invalid_argument for N outside [1, max_micro_batches], L < 1 or
//! L > max_sequence_length (so a micro-batch's sum of d^2 fits 64 bits).
inline void validate(const packing_limits& limits) {
  ZEPPELIN_EXPECTS(limits.micro_batches >= 1 && limits.micro_batches <= packing_limits::max_micro_batches,
                   "a packing needs 1 .. " + std::to_string(packing_limits::max_micro_batches) + " micro-batches per iteration",
                   {{"micro_batches", double(limits.micro_batches)}, {"max_micro_batches", double(packing_limits::max_micro_batches)}});
  ZEPPELIN_EXPECTS(limits.max_tokens >= 1 && limits.max_tokens <= max_sequence_length,
                   "the micro-batch token limit must lie in [1, max_sequence_length]",
                   {{"max_tokens", double(limits.max_tokens)}, {"max_sequence_length", double(max_sequence_length)}});
}

//! A document of the input stream.
struct document_ref {
  std::int64_t index = 0;  //!< position in the stream (the length file's line order)
  token_count length = 0;  //!< tokens
  friend constexpr bool operator==(const document_ref&, const document_ref&) = default;
};

//! Throws invalid_argument, naming index, length and L, for a document shorter than 1 token
//! or longer than limits.max_tokens (documents are never split).
inline void check_document(const document_ref& d, const packing_limits& limits) {
  ZEPPELIN_EXPECTS(d.length >= 1, "a document needs at least 1 token", {{"index", double(d.index)}, {"length", double(d.length)}});
  ZEPPELIN_EXPECTS(d.length <= limits.max_tokens, "a document is longer than the micro-batch token limit L",
                   {{"index", double(d.index)}, {"length", double(d.length)}, {"L", double(limits.max_tokens)}});
}

//! One micro-batch: documents in the order the packer placed them.
struct packed_micro_batch {
  std::vector<std::int64_t> documents;  //!< indices into the input stream
  token_count tokens = 0;               //!< sum of the documents' lengths
  double workload = 0;                  //!< sum of the packer's document_workload W(d)
  friend bool operator==(const packed_micro_batch&, const packed_micro_batch&) = default;
};

//! The micro-batches of one training iteration (exactly N of them, some possibly empty).
struct packed_iteration {
  std::vector<packed_micro_batch> micro_batches;
  friend bool operator==(const packed_iteration&, const packed_iteration&) = default;
};

//! max / mean of `values`; 1 when there are none or they sum to 0.
[[nodiscard]] inline double imbalance_degree(std::span<const double> values) noexcept {
  double sum = 0;
  double top = 0;
  for (const double v : values) {
    sum += v;
    top = std::max(top, v);
  }
  return sum > 0 ? top / (sum / static_cast<double>(values.size())) : 1.0;
}

//! WLB-LLM's imbalance degree of an iteration: max / mean of its micro-batches' workload.
[[nodiscard]] inline double workload_imbalance(const packed_iteration& it) {
  std::vector<double> w;
  w.reserve(it.micro_batches.size());
  for (const packed_micro_batch& mb : it.micro_batches) w.push_back(mb.workload);
  return imbalance_degree(w);
}

//! Max_Attn / Avg_Attn of an iteration: attention work sum d^2 of each micro-batch, lengths
//! looked up in the stream `lengths` by document index.
[[nodiscard]] inline double attention_imbalance(const packed_iteration& it, std::span<const token_count> lengths) {
  std::vector<double> w;
  w.reserve(it.micro_batches.size());
  for (const packed_micro_batch& mb : it.micro_batches) {
    double attention = 0;
    for (const std::int64_t i : mb.documents) {
      ZEPPELIN_EXPECTS(i >= 0 && static_cast<std::size_t>(i) < lengths.size(), "a packed document index is outside the stream",
                       {{"index", double(i)}, {"documents", double(lengths.size())}});
      const auto d = static_cast<double>(lengths[static_cast<std::size_t>(i)]);
      attention += d * d;
    }
    w.push_back(attention);
  }
  return imbalance_degree(w);
}

//! Mean of workload_imbalance over the iterations that hold any document (1 if none do).
[[nodiscard]] inline double mean_workload_imbalance(std::span<const packed_iteration> iterations) {
  double sum = 0;
  std::int64_t counted = 0;
  for (const packed_iteration& it : iterations) {
    const bool any = std::any_of(it.micro_batches.begin(), it.micro_batches.end(),
                                 [](const packed_micro_batch& mb) { return !mb.documents.empty(); });
    if (!any) continue;
    sum += workload_imbalance(it);
    ++counted;
  }
  return counted > 0 ? sum / static_cast<double>(counted) : 1.0;
}

ZEPPELIN_NAMESPACE_END
