// zeppelin/data/length_stats.hpp
// Summary statistics of a set of sequence lengths (a sampled batch, a real length file),
// in the terms the balancing problem cares about.
// In:  lengths (tokens, each > 0, at least one).
// Out: length_stats: count, total, min, max, mean; median, p90, p99 by the nearest-rank
//      rule; the sum of squared lengths (causal attention work grows with sum l^2); the
//      share of TOKENS in sequences of at least 4K / 16K / 64K tokens (how much of the
//      batch needs context parallelism); the share of SEQUENCES in each Zeppelin Table 2
//      column (data/datasets.hpp), so a sample can be compared with the paper's table.
// Nearest-rank percentile: for p in [0, 100] and n sorted values x_1 <= ... <= x_n, the
// p-th percentile is x_r with r = max(1, ceil(p * n / 100)): always an observed length, no
// interpolation; the median is the 50th (the lower middle value when n is even).
// Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/data/datasets.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct length_stats {
  std::size_t count = 0;          //!< number of sequences
  token_count total_tokens = 0;   //!< sum of lengths
  token_count min_length = 0;
  token_count max_length = 0;
  double mean = 0.0;              //!< total_tokens / count
  token_count median = 0;         //!< nearest-rank 50th percentile
  token_count p90 = 0;            //!< nearest-rank 90th percentile
  token_count p99 = 0;            //!< nearest-rank 99th percentile
  //! sum of l^2 (accumulated exactly in 128 bits, then rounded to double).
  double sum_of_squares = 0.0;
  //! Share of tokens in sequences with length >= 4096, >= 16384 and >= 65536.
  double token_share_4k = 0.0;
  double token_share_16k = 0.0;
  double token_share_64k = 0.0;
  //! Share of sequences in each Table 2 column (table2_edges / table2_labels).
  std::array<double, table2_columns> table2_share{};
  //! Share of sequences of 256K tokens or more (beyond Table 2's last column).
  double beyond_table2_share = 0.0;
};

//! Nearest-rank percentile (definition in the file comment) of ascending `sorted` lengths.
//! Throws invalid_argument if `sorted` is empty or percent is outside [0, 100].
[[nodiscard]] inline token_count nearest_rank(std::span<const token_count> sorted, int percent) {
  ZEPPELIN_EXPECTS(!sorted.empty(), "a percentile needs at least one value", {});
  ZEPPELIN_EXPECTS(percent >= 0 && percent <= 100, "a percentile must lie in [0, 100]",
                   {{"percent", static_cast<double>(percent)}});
  const auto n = static_cast<detail::uint128>(sorted.size());
  const auto rank = static_cast<std::size_t>((static_cast<detail::uint128>(percent) * n + 99) / 100);
  return sorted[std::max<std::size_t>(rank, 1) - 1];
}

//! Statistics of `lengths` (any order). Throws invalid_argument if it is empty, a length is
//! not positive, or the total overflows token_count.
[[nodiscard]] inline length_stats summarize(std::span<const token_count> lengths) {
  ZEPPELIN_EXPECTS(!lengths.empty(), "statistics need at least one length", {});
  length_stats s;
  s.count = lengths.size();
  detail::uint128 squares = 0;
  token_count tokens_4k = 0, tokens_16k = 0, tokens_64k = 0;
  std::array<std::size_t, table2_columns + 1> per_column{};
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const token_count l = lengths[i];
    ZEPPELIN_EXPECTS(l > 0, "lengths must be positive", {{"index", static_cast<double>(i)}, {"length", static_cast<double>(l)}});
    ZEPPELIN_EXPECTS(s.total_tokens <= std::numeric_limits<token_count>::max() - l, "the token total overflows",
                     {{"index", static_cast<double>(i)}});
    s.total_tokens += l;
    squares += static_cast<detail::uint128>(l) * static_cast<detail::uint128>(l);
    if (l >= 4096) tokens_4k += l;
    if (l >= 16384) tokens_16k += l;
    if (l >= 65536) tokens_64k += l;
    ++per_column[table2_column(l)];
  }
  std::vector<token_count> sorted(lengths.begin(), lengths.end());
  std::sort(sorted.begin(), sorted.end());
  s.min_length = sorted.front();
  s.max_length = sorted.back();
  const auto n = static_cast<double>(s.count);
  const auto total = static_cast<double>(s.total_tokens);
  s.mean = total / n;
  s.median = nearest_rank(sorted, 50);
  s.p90 = nearest_rank(sorted, 90);
  s.p99 = nearest_rank(sorted, 99);
  s.sum_of_squares = static_cast<double>(squares);
  s.token_share_4k = static_cast<double>(tokens_4k) / total;
  s.token_share_16k = static_cast<double>(tokens_16k) / total;
  s.token_share_64k = static_cast<double>(tokens_64k) / total;
  for (std::size_t c = 0; c < table2_columns; ++c) s.table2_share[c] = static_cast<double>(per_column[c]) / n;
  s.beyond_table2_share = static_cast<double>(per_column[table2_columns]) / n;
  return s;
}

//! Statistics of a batch's lengths.
[[nodiscard]] inline length_stats summarize(const batch& b) { return summarize(b.lengths()); }

ZEPPELIN_NAMESPACE_END
