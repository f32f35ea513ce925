// zeppelin/pack/chunk_order.hpp
// The order in which a chunk-level 1F1B pipeline forwards its chunks (InfiniPipe, Wang et
// al., "InfiniPipe: Elastic Pipeline Parallelism for Efficient Variable-Length Long-Context
// LLM Training", section 3.3: inside one pipeline the longest sequences run first).
//   in : a valid chunking (core/chunk.hpp: validate_chunks) and the sequences' lengths
//   out: chunk_order: the chunk indices in forward order and the chains (the chunks per
//        unit, in that order) that schedule/pipeline/chunk_one_f_one_b.hpp takes
// A unit is a cut sequence's chunks (its split chunks and the hybrid chunk holding its
// tail, in slice order) or one batched chunk. Units run longest first: a chain by the
// length of its cut sequence, a batched chunk by its longest sequence. Ties: the lower
// sequence index, then the lower chunk index. Deterministic.
// Errors: validate_chunks'.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/chunk.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct chunk_order {
  std::vector<std::int64_t> forward;  //!< chunk indices in forward order
  std::vector<int> chains;            //!< chunks per unit, in forward order (sums to the chunks)
  friend bool operator==(const chunk_order&, const chunk_order&) = default;
};

//! The longest-first forward order of `chunks` (see the file comment).
[[nodiscard]] inline chunk_order forward_order_of(std::span<const chunk> chunks, std::span<const token_count> lengths) {
  validate_chunks(chunks, lengths);
  const chunk_links links = links_of(chunks, lengths);
  struct unit {
    token_count length;     // the unit's sequence length (its cut sequence, else its longest)
    std::int64_t sequence;  // that sequence
    std::int64_t first;     // its first chunk
  };
  std::vector<unit> units;
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    if (links.previous[k] != -1) continue;  // not the first chunk of its chain
    unit u{0, 0, static_cast<std::int64_t>(k)};
    const bool chained = links.next[k] != -1;
    for (const chunk_slice& s : chunks[k].slices) {
      const token_count length = lengths[static_cast<std::size_t>(s.sequence)];
      const bool cut = s.begin != 0 || s.end != length;
      const bool longer = length > u.length || (length == u.length && s.sequence < u.sequence);
      if (chained ? cut : longer) u.length = length, u.sequence = s.sequence;
    }
    units.push_back(u);
  }
  std::stable_sort(units.begin(), units.end(), [](const unit& x, const unit& y) {
    if (x.length != y.length) return x.length > y.length;
    if (x.sequence != y.sequence) return x.sequence < y.sequence;
    return x.first < y.first;
  });
  chunk_order out;
  for (const unit& u : units) {
    int count = 0;
    for (std::int64_t k = u.first; k != -1; k = links.next[static_cast<std::size_t>(k)]) out.forward.push_back(k), ++count;
    out.chains.push_back(count);
  }
  return out;
}

ZEPPELIN_NAMESPACE_END
