// zeppelin/schedule/zigzag.hpp
// Zigzag split of one sequence over a ring group (Zeppelin 3.2, TE context parallelism).
//   in : a sequence length L >= 1, a ring of G >= 1 ranks, a rank position 0 <= i < G
//   out: 2G near-equal chunks (sizes q = floor(L / 2G) or q + 1, no padding, any L);
//        position i owns chunk i ("head") and chunk 2G-1-i ("tail").
//   zigzag_tokens / zigzag_pairs : the tokens and the causal pairs position i holds
//   zigzag_extras / zigzag_dealer: which positions hold one token more, and the rotation that
//        deals those extra tokens round-robin over a ring across the sequences of a batch
// When 2G divides L this is exactly TE's layout (chunks of L/(2G) tokens, see the index map
// in TransformerEngine's THD CP index map). Chunks are empty when L < 2G.
//
// Remainder rule. With L = q n + s (n chunks, 0 <= s < n) the s chunks of q + 1 tokens are
// the FIRST s chunks when 2s <= n, else the LAST s chunks (equivalently: the n - s short
// chunks come first). Why: an extra token in chunk c adds ~q causal pairs to every later
// chunk and ~(c+1) q to its own, so an extra at the front shifts every position evenly while
// an extra at the back lands on one rank (~L pairs). For a zigzag of G positions, with
// pairs(i) = causal pairs of the queries position i holds against all earlier keys and
// m = min(s, 2G - s):
//   spread = max_i pairs(i) - min_i pairs(i) <= (m - 1)(2q + 1) + 1   (0 when m == 0),
// proved by summing the two chunks in closed form (s <= G: positions i < s get
// C + i (2q + 1), positions i >= s get C + q (s - 1) - 1; s > G mirrors it with n - s short
// chunks). Among ALL near-equal splits it is optimal (exhaustive search for G <= 5, every
// L < 200 and random L < 1e5; tests/schedule/zigzag_test.cpp repeats it for G <= 4).
// The plain floor(c L / n) rule puts the extras at the back: its spread reaches ~L already
// for s = 1 (L = 2Gq + 1 gives 2Gq + 1), the new rule gives 1 there.
// nvcc-safe: ZEPPELIN_HOST_DEVICE constexpr; the checked wrapper is host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/causal_pairs.hpp>

#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN

//! A sequence of `length` tokens cut into `chunks` near-equal chunks, its division done once:
//! chunk c is [boundary(c), boundary(c + 1)) (see chunk_range).
struct near_equal_split {
  token_count n, q, s;
  ZEPPELIN_HOST_DEVICE constexpr near_equal_split(token_count length, std::int32_t chunks) noexcept
      : n(chunks), q(length / chunks), s(length % chunks) {}
  //! Start of chunk c (0 <= c <= chunks; c == chunks gives the length).
  ZEPPELIN_HOST_DEVICE constexpr token_count boundary(std::int32_t c) const noexcept {
    const token_count x = c;
    const token_count extra = 2 * s <= n ? (x < s ? x : s) : (x > n - s ? x - (n - s) : 0);
    return x * q + extra;
  }
  ZEPPELIN_HOST_DEVICE constexpr token_range chunk(std::int32_t c) const noexcept { return token_range{boundary(c), boundary(c + 1)}; }
};

//! Start of chunk c (0 <= c <= chunks; c == chunks gives `length`) of the near-equal split used by chunk_range.
ZEPPELIN_HOST_DEVICE constexpr token_count chunk_boundary(token_count length, std::int32_t chunks, std::int32_t c) noexcept {
  return near_equal_split(length, chunks).boundary(c);
}

//! Boundaries of chunk c of a sequence of `length` tokens cut into `chunks` near-equal chunks: [b(c), b(c+1));
//! sizes are floor(length / chunks) or one more, the longer chunks first when the remainder s <= chunks / 2 and
//! last otherwise (the causally best placement for zigzag, see the file comment); any length >= 1, chunks >= 1
//! (empty chunks when length < chunks).
ZEPPELIN_HOST_DEVICE constexpr token_range chunk_range(token_count length, std::int32_t chunks, std::int32_t c) noexcept {
  return near_equal_split(length, chunks).chunk(c);
}

//! The two chunks rank position i (0 <= i < G) of a ring of G ranks owns under zigzag: chunk i and chunk 2G-1-i of 2G chunks.
struct zigzag_pair {
  token_range head, tail;
  friend constexpr bool operator==(const zigzag_pair&, const zigzag_pair&) = default;
};

//! The zigzag of one sequence over a group of `group_size` ranks, its division done once: at(p)
//! is zigzag_chunks(length, group_size, p) (a layout deals a sequence over every position).
struct zigzag_split {
  near_equal_split chunks;
  ZEPPELIN_HOST_DEVICE constexpr zigzag_split(token_count length, std::int32_t group_size) noexcept : chunks(length, 2 * group_size) {}
  ZEPPELIN_HOST_DEVICE constexpr zigzag_pair at(std::int32_t position) const noexcept {
    return zigzag_pair{chunks.chunk(position), chunks.chunk(static_cast<std::int32_t>(chunks.n) - 1 - position)};
  }
};

//! Zigzag chunks of ring position `position` of a group of `group_size` ranks (no range checks; see
//! zigzag_chunks_checked). head precedes tail; they touch (head.end == tail.begin) only at position G-1.
ZEPPELIN_HOST_DEVICE constexpr zigzag_pair zigzag_chunks(token_count length, std::int32_t group_size, std::int32_t position) noexcept {
  return zigzag_split(length, group_size).at(position);
}

//! The proven bound on max_i pairs(i) - min_i pairs(i) over the G positions of a zigzag split of `length`
//! tokens (pairs(i) = causal pairs of position i's queries): (m - 1)(2q + 1) + 1 with q = floor(L / 2G),
//! m = min(s, 2G - s), s = L mod 2G; 0 when 2G divides L.
ZEPPELIN_HOST_DEVICE constexpr std::int64_t zigzag_imbalance_bound(token_count length, std::int32_t group_size) noexcept {
  const token_count n = 2 * token_count{group_size}, q = length / n, s = length % n;
  const token_count m = s < n - s ? s : n - s;
  return m == 0 ? 0 : (m - 1) * (2 * q + 1) + 1;
}

//! Tokens ring position `position` of `group_size` holds of a sequence of `length` tokens.
ZEPPELIN_HOST_DEVICE constexpr token_count zigzag_tokens(token_count length, std::int32_t group_size, std::int32_t position) noexcept {
  const zigzag_pair z = zigzag_chunks(length, group_size, position);
  return z.head.size() + z.tail.size();
}

//! Causal pairs ring position `position` of `group_size` computes for a sequence of `length`
//! tokens: its queries (head and tail) against every earlier key of the sequence.
ZEPPELIN_HOST_DEVICE constexpr std::int64_t zigzag_pairs(token_count length, std::int32_t group_size, std::int32_t position) noexcept {
  const zigzag_pair z = zigzag_chunks(length, group_size, position);
  return causal_pairs_from_start(z.head) + causal_pairs_from_start(z.tail);
}

//! The positions of a zigzag over G ranks that hold one token more than the others: a cyclic
//! run of `count` positions starting at `first`. With n = 2G chunks, q = floor(L / n),
//! s = L mod n (the remainder rule above): s <= G gives positions [0, s) with 2q + 1 tokens
//! and the rest 2q; s > G gives every position 2q + 1 and positions [2G - s, G) one more.
//! count = 0 when every position holds the same number of tokens.
struct zigzag_extra_run {
  std::int32_t first = 0;
  std::int32_t count = 0;
  friend constexpr bool operator==(const zigzag_extra_run&, const zigzag_extra_run&) = default;
};
ZEPPELIN_HOST_DEVICE constexpr zigzag_extra_run zigzag_extras(token_count length, std::int32_t group_size) noexcept {
  const token_count n = 2 * token_count{group_size}, s = length % n;
  if (s == 0 || s == group_size) return {};
  if (s < group_size) return {0, static_cast<std::int32_t>(s)};
  return {static_cast<std::int32_t>(n - s), static_cast<std::int32_t>(s - group_size)};
}

//! Deals the remainder tokens of zigzag splits over one ring round-robin across sequences:
//! sequence after sequence, the run of positions holding an extra token (zigzag_extras) is
//! rotated to start at the ring position where the previous run ended (one counter per ring,
//! like WLB-LLM's tail rule). Position p of a sequence then sits at ring position
//! (p + offset) mod G. Every position's share is unchanged (a rotation), so each sequence
//! keeps zigzag_imbalance_bound; over a batch the ring's ranks hold token totals that differ
//! by at most one. A sequence without extras is not rotated (offset 0): a batch whose lengths
//! are all divisible by 2G keeps TransformerEngine's exact layout.
class zigzag_dealer {
 public:
  ZEPPELIN_HOST_DEVICE constexpr explicit zigzag_dealer(std::int32_t group_size) noexcept : G_(group_size) {}
  //! The rotation of the next sequence (of `length` tokens); advances the counter.
  ZEPPELIN_HOST_DEVICE constexpr std::int32_t next(token_count length) noexcept {
    const zigzag_extra_run run = zigzag_extras(length, G_);
    if (run.count == 0) return 0;
    const std::int32_t offset = ((counter_ - run.first) % G_ + G_) % G_;
    counter_ = (counter_ + run.count) % G_;
    return offset;
  }

 private:
  std::int32_t G_;
  std::int32_t counter_ = 0;
};

//! zigzag_chunks with its preconditions checked: length >= 1, group_size >= 1, 0 <= position < group_size.
//! Throws invalid_argument with the offending numbers. Host only.
inline zigzag_pair zigzag_chunks_checked(token_count length, std::int32_t group_size, std::int32_t position) {
  ZEPPELIN_EXPECTS(length >= 1, "zigzag: sequence length must be positive", {{"length", static_cast<double>(length)}});
  ZEPPELIN_EXPECTS(group_size >= 1, "zigzag: group size must be positive", {{"group_size", static_cast<double>(group_size)}});
  ZEPPELIN_EXPECTS(position >= 0 && position < group_size, "zigzag: position outside the ring",
                   {{"position", static_cast<double>(position)}, {"group_size", static_cast<double>(group_size)}});
  return zigzag_chunks(length, group_size, position);
}

ZEPPELIN_NAMESPACE_END
