// zeppelin/data/power_law.hpp
// A long-tail document-length distribution for when a paper publishes none (WLB-LLM's data
// is internal: "the majority of input documents are relatively short, while some extremely
// long documents exist, with the longest reaching the full context window", its Fig. 3).
//   in : the longest length (the context window), >= 2
//   out: a length_histogram over [1, max_length] with bins [1, 1K), [1K, 2K), [2K, 4K), ...,
//        [2^k, max_length] (the last bin closed) whose document shares halve from one bin to
//        the next
// Halving per doubling is a density ~ 1/d^2 (a Pareto tail with alpha = 1): every octave
// from 1K up holds the same number of tokens, so short and long documents weigh equally
// in the token stream, and about half the documents are under 1K tokens. For a 128K
// context: mean ~3K tokens, one document in 256 over 64K. A max_length below 1K gives
// the single bin [1, max_length].
// Errors: invalid_argument for max_length < 2 or beyond max_sequence_length.
// Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/data/length_distribution.hpp>

#include <algorithm>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The power law of the file comment.
[[nodiscard]] inline length_histogram power_law_lengths(token_count max_length) {
  ZEPPELIN_EXPECTS(max_length >= 2 && max_length <= max_sequence_length, "the power law's longest length must lie in [2, max_sequence_length]",
                   {{"max_length", double(max_length)}, {"max_sequence_length", double(max_sequence_length)}});
  std::vector<length_bin> bins;
  double share = 1;
  for (token_count lo = 1, hi = 1024; lo <= max_length - 1; lo = hi, hi *= 2, share /= 2)
    bins.push_back({lo, std::min(hi, max_length + 1), share});
  // the last bin [2^k, max_length] is closed
  bins.back().hi = max_length + 1;
  return length_histogram(std::move(bins));
}

ZEPPELIN_NAMESPACE_END
