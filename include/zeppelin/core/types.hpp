// zeppelin/core/types.hpp
// Scalar vocabulary shared by every domain: token counts, indices, half-open token ranges.
// nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>

#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN

//! A number of tokens, or a token position inside a sequence. Signed 64-bit so that
//! multi-million-token batches and differences never overflow silently.
using token_count = std::int64_t;
//! A rank (GPU) index in [0, topology::num_ranks()).
using rank_index = std::int32_t;
//! A sequence index in [0, batch::size()) (position in the batch, not the user's id).
using sequence_index = std::int32_t;

//! Half-open range [begin, end) of token positions inside one sequence.
struct token_range {
  token_count begin = 0;
  token_count end = 0;

  ZEPPELIN_HOST_DEVICE constexpr token_count size() const noexcept { return end - begin; }
  ZEPPELIN_HOST_DEVICE constexpr bool empty() const noexcept { return end <= begin; }
  friend constexpr bool operator==(const token_range&, const token_range&) = default;
};

ZEPPELIN_NAMESPACE_END
