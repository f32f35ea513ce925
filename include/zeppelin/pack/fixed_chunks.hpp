// zeppelin/pack/fixed_chunks.hpp
// Fixed-size chunking, the Seq1F1B-like baseline of InfiniPipe's evaluation (Wang et al.,
// "InfiniPipe: ...", section 5: "an enhanced version of Seq1F1B that splits and packs
// sequences into fixed-sized chunks"; Seq1F1B: Sun et al., "Seq1F1B: Efficient
// Sequence-Level Pipeline Parallelism for Large Language Model Training").
//   in : the sequences' lengths, the chunk size S
//   out: chunks (core/chunk.hpp): every sequence longer than S cut into S-token slices and a
//        tail (each its own chunk: split chunks, then a hybrid chunk holding the tail alone);
//        the others packed first-fit decreasing into batched chunks of at most S tokens
// Order: the cut sequences longest first (ties: lower index), each in slice order, then the
// batched chunks in the order they were opened. Unlike the sequence processor
// (pack/sequence_processor.hpp) nothing balances time: slices of one sequence get longer in
// attention work as their context grows, and a batched chunk of short sequences costs less
// than a split slice of the same size.
// Errors: invalid_argument for no sequences, a length < 1, or S < 1.
// Host-only.
#pragma once

#include <zeppelin/core/chunk.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/detail/leftmost_at_least.hpp>
#include <zeppelin/core/error.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Fixed-size chunks of at most `chunk_tokens` tokens (see the file comment).
[[nodiscard]] inline std::vector<chunk> fixed_size_chunks(std::span<const token_count> lengths, token_count chunk_tokens) {
  ZEPPELIN_EXPECTS(!lengths.empty(), "chunking needs at least one sequence", {});
  ZEPPELIN_EXPECTS(chunk_tokens >= 1, "a chunk holds at least one token", {{"chunk_tokens", double(chunk_tokens)}});
  for (std::size_t i = 0; i < lengths.size(); ++i)
    ZEPPELIN_EXPECTS(lengths[i] >= 1, "a sequence needs at least 1 token", {{"index", double(i)}, {"length", double(lengths[i])}});
  std::vector<std::int64_t> by_length(lengths.size());
  std::iota(by_length.begin(), by_length.end(), std::int64_t{0});
  std::stable_sort(by_length.begin(), by_length.end(),
                   [&](std::int64_t a, std::int64_t b) { return lengths[static_cast<std::size_t>(a)] > lengths[static_cast<std::size_t>(b)]; });
  std::vector<chunk> out, batched;
  detail::leftmost_at_least_tree<token_count> room;  // per batched chunk: tokens left
  for (const std::int64_t s : by_length) {
    const token_count length = lengths[static_cast<std::size_t>(s)];
    if (length > chunk_tokens) {
      for (token_count at = 0; at < length; at += chunk_tokens) out.push_back({at, {{s, at, std::min(length, at + chunk_tokens)}}});
      continue;
    }
    std::size_t b = room.leftmost_at_least(length);  // first fit
    if (b == room.npos) b = room.size(), batched.emplace_back(), room.push(chunk_tokens);
    batched[b].slices.push_back({s, 0, length});
    room.set(b, room.value(b) - length);
  }
  out.insert(out.end(), std::make_move_iterator(batched.begin()), std::make_move_iterator(batched.end()));
  return out;
}

ZEPPELIN_NAMESPACE_END
