// zeppelin/cost/cp_sharding.hpp
// How a context-parallel (CP) group shares the attention of one packed micro-batch, as the
// query segments each rank's varlen attention call covers.
//   in : the micro-batch's document lengths (attention never crosses documents), CP degree
//   out: cp_segments: per rank, its segments {query rows, causal pairs}; one segment is one
//        sequence of the rank's varlen call (cu_seqlens entry), so the kernel pads each
//        segment's rows to its tile separately (cost/varlen_attention_time.hpp)
// Models (cp_sharding concept):
//   per_document_sharding: every document cut into 2 cp zigzag chunks (chunk i holds
//     n / (2cp) tokens plus one when i < n % (2cp)), rank r owning chunks r and 2cp-1-r
//     (TransformerEngine CP's load balancing per sequence; WLB-LLM's per-document sharding);
//     the two chunks form one segment where they touch (r = cp - 1; every document at cp = 1);
//   padding_free_sharding: WLB-LLM's per-document sharding without padding: the first
//     D = 2cp floor(n / 2cp) tokens of every document in 2cp equal zigzag chunks, and the
//     n - D tail tokens dealt one by one to ranks 0, 1, ..., cp-1, 0, ... with ONE counter
//     across the micro-batch, so the ranks' token counts differ by at most one and their
//     pairs are equal on the divisible parts; a rank's ranges of one document that touch
//     form one segment;
//   per_sequence_sharding: the packed micro-batch as ONE sequence of T tokens cut into 2 cp
//     zigzag chunks the same way, each chunk split at document borders into segments
//     (WLB-LLM's per-sequence sharding: few, long segments, but the ranks' pairs differ);
//   adaptive_sharding (cost/adaptive_cp_sharding.hpp): per micro-batch, whichever of the
//     two gives the faster slowest rank under the kernel tile model.
// A segment's pairs are those of its query rows against every key of its document at or
// before them, so over all ranks every token and every causal pair of the micro-batch is
// counted exactly once. shares_of() sums a rank's segments into a cp_share.
// Errors: invalid_argument for cp < 1 or a length outside [1, max_sequence_length].
// Host-only functions; nvcc-safe as a header.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/micro_batch.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/causal_pairs.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! One sequence of a rank's varlen attention call: its query rows and causal pairs.
struct attention_segment {
  token_count rows = 0;
  std::int64_t pairs = 0;
  friend constexpr bool operator==(const attention_segment&, const attention_segment&) = default;
};

//! Per CP rank, its attention segments.
using cp_segments = std::vector<std::vector<attention_segment>>;

template <class S>
concept cp_sharding = std::regular<S> && requires(const S& s, std::span<const token_count> documents, int cp) {
  { s.segments(documents, cp) } -> std::same_as<cp_segments>;
};

namespace detail {

inline void check_cp_input(std::span<const token_count> documents, int cp) {
  ZEPPELIN_EXPECTS(cp >= 1, "the CP degree must be at least 1", {{"cp", double(cp)}});
  for (const token_count n : documents)
    ZEPPELIN_EXPECTS(n >= 1 && n <= max_sequence_length, "a document length must lie in [1, max_sequence_length]",
                     {{"length", double(n)}, {"max_sequence_length", double(max_sequence_length)}});
}

//! The query ranges rank r owns of a sequence of n tokens cut into 2 cp zigzag chunks:
//! chunks r and 2cp-1-r, as one range where they touch. Empty ranges are left out.
inline void zigzag_ranges(token_count n, int cp, int r, std::vector<token_range>& out) {
  out.clear();
  const token_count chunks = 2 * static_cast<token_count>(cp), base = n / chunks, extra = n % chunks;
  const auto chunk = [&](token_count i) {
    const token_count begin = i * base + std::min(i, extra);
    return token_range{begin, begin + base + (i < extra ? 1 : 0)};
  };
  const token_range a = chunk(r), b = chunk(chunks - 1 - r);
  if (a.end == b.begin) {
    if (!a.empty() || !b.empty()) out.push_back({a.begin, b.end});
    return;
  }
  for (const token_range q : {a, b})
    if (!q.empty()) out.push_back(q);
}

}  // namespace detail

struct per_document_sharding {
  [[nodiscard]] cp_segments segments(std::span<const token_count> documents, int cp) const {
    detail::check_cp_input(documents, cp);
    cp_segments out(static_cast<std::size_t>(cp));
    std::vector<token_range> ranges;
    for (int r = 0; r < cp; ++r)
      for (const token_count n : documents) {
        detail::zigzag_ranges(n, cp, r, ranges);
        for (const token_range q : ranges) out[static_cast<std::size_t>(r)].push_back({q.size(), causal_pairs_from_start(q)});
      }
    return out;
  }
  friend constexpr bool operator==(const per_document_sharding&, const per_document_sharding&) = default;
};
static_assert(cp_sharding<per_document_sharding>);

struct padding_free_sharding {
  [[nodiscard]] cp_segments segments(std::span<const token_count> documents, int cp) const {
    detail::check_cp_input(documents, cp);
    cp_segments out(static_cast<std::size_t>(cp));
    std::vector<std::vector<token_range>> owned(static_cast<std::size_t>(cp));  // per rank, this document's ranges
    std::vector<token_range> ranges;
    std::int64_t counter = 0;  // the round-robin dealer of tail tokens, across the micro-batch
    const token_count chunks = 2 * static_cast<token_count>(cp);
    for (const token_count n : documents) {
      const token_count divisible = n / chunks * chunks;
      for (int r = 0; r < cp; ++r) {
        auto& mine = owned[static_cast<std::size_t>(r)];
        mine.clear();
        detail::zigzag_ranges(divisible, cp, r, ranges);
        mine.insert(mine.end(), ranges.begin(), ranges.end());
      }
      for (token_count t = divisible; t < n; ++t, ++counter) owned[static_cast<std::size_t>(counter % cp)].push_back({t, t + 1});
      for (int r = 0; r < cp; ++r) {
        auto& mine = owned[static_cast<std::size_t>(r)];
        std::sort(mine.begin(), mine.end(), [](const token_range& a, const token_range& b) { return a.begin < b.begin; });
        for (std::size_t i = 0; i < mine.size();) {
          token_range q = mine[i];
          for (++i; i < mine.size() && mine[i].begin == q.end; ++i) q.end = mine[i].end;
          out[static_cast<std::size_t>(r)].push_back({q.size(), causal_pairs_from_start(q)});
        }
      }
    }
    return out;
  }
  friend constexpr bool operator==(const padding_free_sharding&, const padding_free_sharding&) = default;
};
static_assert(cp_sharding<padding_free_sharding>);

struct per_sequence_sharding {
  [[nodiscard]] cp_segments segments(std::span<const token_count> documents, int cp) const {
    detail::check_cp_input(documents, cp);
    std::vector<token_count> starts(documents.size() + 1, 0);  // document d spans [starts[d], starts[d + 1])
    for (std::size_t d = 0; d < documents.size(); ++d) starts[d + 1] = starts[d] + documents[d];
    cp_segments out(static_cast<std::size_t>(cp));
    std::vector<token_range> ranges;
    for (int r = 0; r < cp; ++r) {
      detail::zigzag_ranges(starts.back(), cp, r, ranges);
      for (const token_range q : ranges) {
        // the first document ending after q.begin, then every document q overlaps
        auto d = static_cast<std::size_t>(std::upper_bound(starts.begin() + 1, starts.end(), q.begin) - (starts.begin() + 1));
        for (; d < documents.size() && starts[d] < q.end; ++d) {
          const token_range part{std::max(q.begin, starts[d]), std::min(q.end, starts[d + 1])};
          out[static_cast<std::size_t>(r)].push_back({part.size(), causal_pairs(part, token_range{starts[d], part.end})});
        }
      }
    }
    return out;
  }
  friend constexpr bool operator==(const per_sequence_sharding&, const per_sequence_sharding&) = default;
};
static_assert(cp_sharding<per_sequence_sharding>);

//! Per rank, the sum of its segments' rows (tokens) and pairs.
[[nodiscard]] inline std::vector<cp_share> shares_of(const cp_segments& segments) {
  std::vector<cp_share> out(segments.size());
  for (std::size_t r = 0; r < segments.size(); ++r)
    for (const attention_segment& s : segments[r]) out[r].tokens += s.rows, out[r].pairs += s.pairs;
  return out;
}

ZEPPELIN_NAMESPACE_END
