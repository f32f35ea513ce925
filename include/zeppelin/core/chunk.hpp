// zeppelin/core/chunk.hpp
// The vocabulary of InfiniPipe's elastic pipeline (Wang et al., "InfiniPipe: Elastic
// Pipeline Parallelism for Efficient Variable-Length Long-Context LLM Training"): the unit a
// pipeline stage runs is a chunk, not a packed micro-batch.
//   chunk_slice  tokens [begin, end) of one sequence
//   chunk        {C, S}: the slices it runs and C, the tokens of its cut sequence before
//                it (the causal context its attention reads from earlier chunks)
//   chunk_kind   batched: whole short sequences only (C = 0);
//                split:   one slice of a long sequence that is not its last;
//                hybrid:  the last (tail) slice of a long sequence, alone or with whole
//                         short sequences packed beside it
//   chunk_links  per chunk, the chunks holding the previous and the next slice of its cut
//                sequence: a slice's forward runs after its predecessor's (it reads the
//                predecessor's K/V), its backward after its successor's (the successor's
//                dK/dV flow back into it)
// A chunk holds at most one cut slice (a slice that is not a whole sequence), and never two
// tail slices. validate_chunks checks a chunking against the sequences' lengths.
// nvcc-safe (host-only data).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Tokens [begin, end) of sequence `sequence` (an index into the step's lengths).
struct chunk_slice {
  std::int64_t sequence = 0;
  token_count begin = 0;
  token_count end = 0;
  [[nodiscard]] constexpr token_count tokens() const noexcept { return end - begin; }
  friend constexpr bool operator==(const chunk_slice&, const chunk_slice&) = default;
};

//! {C, S}: the slices of one chunk and the context C of its cut slice (0 when it has none).
struct chunk {
  token_count context = 0;
  std::vector<chunk_slice> slices;
  [[nodiscard]] token_count tokens() const noexcept {
    token_count t = 0;
    for (const chunk_slice& s : slices) t += s.tokens();
    return t;
  }
  friend bool operator==(const chunk&, const chunk&) = default;
};

enum class chunk_kind : std::uint8_t { batched = 0, split = 1, hybrid = 2 };

//! The kind of `c` given the lengths of the step's sequences (see the file comment).
[[nodiscard]] inline chunk_kind kind_of(const chunk& c, std::span<const token_count> lengths) {
  for (const chunk_slice& s : c.slices) {
    const token_count length = lengths[static_cast<std::size_t>(s.sequence)];
    if (s.begin == 0 && s.end == length) continue;  // a whole sequence
    return s.end == length ? chunk_kind::hybrid : chunk_kind::split;
  }
  return chunk_kind::batched;
}

//! Per chunk, the chunks holding the previous and next slice of its cut sequence (-1: none).
struct chunk_links {
  std::vector<std::int64_t> previous;
  std::vector<std::int64_t> next;
};

//! Throws invalid_argument unless `chunks` cover every token of every sequence exactly once
//! with: slices within their sequence and non-empty; at most one cut slice per chunk, whose
//! begin is the chunk's context (0 without one); a sequence's slices contiguous; no
//! sequence twice in one chunk. Names the chunk, the sequence and the numbers.
inline void validate_chunks(std::span<const chunk> chunks, std::span<const token_count> lengths) {
  std::vector<std::vector<std::pair<token_count, token_count>>> pieces(lengths.size());
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    const chunk& c = chunks[k];
    ZEPPELIN_EXPECTS(!c.slices.empty(), "a chunk needs at least one slice", {{"chunk", double(k)}});
    int cut = 0;
    token_count context = 0;
    for (const chunk_slice& s : c.slices) {
      ZEPPELIN_EXPECTS(s.sequence >= 0 && static_cast<std::size_t>(s.sequence) < lengths.size(), "a slice names an unknown sequence",
                       {{"chunk", double(k)}, {"sequence", double(s.sequence)}, {"sequences", double(lengths.size())}});
      const token_count length = lengths[static_cast<std::size_t>(s.sequence)];
      ZEPPELIN_EXPECTS(s.begin >= 0 && s.begin < s.end && s.end <= length, "a slice must be a non-empty range inside its sequence",
                       {{"chunk", double(k)}, {"sequence", double(s.sequence)}, {"begin", double(s.begin)}, {"end", double(s.end)},
                        {"length", double(length)}});
      if (s.begin != 0 || s.end != length) ++cut, context = s.begin;
      pieces[static_cast<std::size_t>(s.sequence)].emplace_back(s.begin, s.end);
    }
    ZEPPELIN_EXPECTS(cut <= 1, "a chunk holds at most one cut slice (never two tails)", {{"chunk", double(k)}, {"cut_slices", double(cut)}});
    ZEPPELIN_EXPECTS(c.context == context, "a chunk's context must be its cut slice's begin (0 without one)",
                     {{"chunk", double(k)}, {"context", double(c.context)}, {"expected", double(context)}});
    for (std::size_t a = 0; a < c.slices.size(); ++a)
      for (std::size_t b = a + 1; b < c.slices.size(); ++b)
        ZEPPELIN_EXPECTS(c.slices[a].sequence != c.slices[b].sequence, "a chunk holds a sequence at most once",
                         {{"chunk", double(k)}, {"sequence", double(c.slices[a].sequence)}});
  }
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    auto& p = pieces[i];
    std::sort(p.begin(), p.end());
    token_count at = 0;
    for (const auto& [b, e] : p) {
      ZEPPELIN_EXPECTS(b == at, "a sequence's slices must cover it exactly once, in contiguous pieces",
                       {{"sequence", double(i)}, {"expected_begin", double(at)}, {"begin", double(b)}});
      at = e;
    }
    ZEPPELIN_EXPECTS(at == lengths[i], "a sequence's slices must cover all of its tokens",
                     {{"sequence", double(i)}, {"covered", double(at)}, {"length", double(lengths[i])}});
  }
}

//! The slice chains of a valid chunking (validate_chunks): per chunk, the chunk holding the
//! previous / next slice of its cut sequence, -1 for none.
[[nodiscard]] inline chunk_links links_of(std::span<const chunk> chunks, std::span<const token_count> lengths) {
  struct piece {
    std::int64_t sequence;
    token_count begin;
    std::int64_t chunk;
  };
  std::vector<piece> cut;
  for (std::size_t k = 0; k < chunks.size(); ++k)
    for (const chunk_slice& s : chunks[k].slices)
      if (s.begin != 0 || s.end != lengths[static_cast<std::size_t>(s.sequence)]) cut.push_back({s.sequence, s.begin, static_cast<std::int64_t>(k)});
  std::sort(cut.begin(), cut.end(), [](const piece& x, const piece& y) { return x.sequence != y.sequence ? x.sequence < y.sequence : x.begin < y.begin; });
  chunk_links out{std::vector<std::int64_t>(chunks.size(), -1), std::vector<std::int64_t>(chunks.size(), -1)};
  for (std::size_t t = 1; t < cut.size(); ++t)
    if (cut[t].sequence == cut[t - 1].sequence) {
      out.previous[static_cast<std::size_t>(cut[t].chunk)] = cut[t - 1].chunk;
      out.next[static_cast<std::size_t>(cut[t - 1].chunk)] = cut[t].chunk;
    }
  return out;
}

ZEPPELIN_NAMESPACE_END
