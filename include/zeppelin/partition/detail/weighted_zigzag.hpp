// zeppelin/partition/detail/weighted_zigzag.hpp
// Zigzag split of one sequence over a ring whose members take UNEQUAL token shares (a
// fragment group sized by the room its GPUs have left).
//   in : sequence length len, shares w_0..w_{G-1} >= 1 with sum w_i = len (ring order)
//   out: weighted_zigzag: per position i a head [a_i, a_i + h_i) taken from the front and a tail
//        [len - b_i - t_i, len - b_i) taken from the back, h_i + t_i = w_i, with
//        a_i = sum_{j<i} h_j and b_i = sum_{j<i} t_j (plain zigzag's nesting: position 0
//        holds the first head and the last tail, position G-1 the middle);
//        weighted_pairs: the causal pairs each position computes (causal_pairs_from_start of its chunks).
// Head/tail rule: h_i = t_i = w_i / 2 for even w_i; for odd w_i the extra token goes to the
// head when a_i <= b_i, else to the tail, so a_i - b_i stays in {0, 1}.
// Balance (what "causally balanced" means for unequal shares): the attention work of a rank
// should be proportional to the tokens it holds, i.e. every rank pays the sequence's mean
// (len + 1) / 2 pairs per token. With pairs_i = the causal pairs of position i's queries
// against all earlier keys,
//   | 2 pairs_i - w_i (len + 1) | <= len + 1        (at most one token's mean work off),
// from pairs_i - w_i (len+1)/2 = h_i e_i + d_i ((len-1)/2 - a_i - h_i + e_i) + (d_i - d_i^2)/2,
// e_i = a_i - b_i, d_i = t_i - h_i: for d_i = 0 it is h_i e_i in [0, w_i / 2]; for a head extra
// (e_i = 0, d_i = -1) a_i + h_i - (len + 1)/2 and for a tail extra (e_i = 1, d_i = 1)
// (len + 1)/2 - a_i, both within (len + 1)/2 since a_i + h_i <= (len + 1)/2 + 1 (heads
// and tails meet in the middle). Checked exhaustively for small cases in
// tests/partition/fill_test.cpp. With equal shares and len divisible by 2G it is exactly
// the plain zigzag. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/causal_pairs.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

struct weighted_chunks {
  token_range head, tail;
};

//! The head and tail of every position of a weighted zigzag (see the file comment).
inline std::vector<weighted_chunks> weighted_zigzag(token_count len, std::span<const token_count> shares) {
  std::vector<weighted_chunks> out(shares.size());
  token_count a = 0, b = 0;
  for (std::size_t i = 0; i < shares.size(); ++i) {
    const token_count w = shares[i];
    const token_count h = w % 2 == 0 ? w / 2 : (a <= b ? w / 2 + 1 : w / 2);
    const token_count t = w - h;
    out[i].head = {a, a + h};
    out[i].tail = {len - b - t, len - b};
    a += h;
    b += t;
  }
  return out;
}

//! Causal pairs of every position of a weighted zigzag.
inline std::vector<std::int64_t> weighted_pairs(token_count len, std::span<const token_count> shares) {
  const std::vector<weighted_chunks> parts = weighted_zigzag(len, shares);
  std::vector<std::int64_t> out(parts.size());
  for (std::size_t p = 0; p < parts.size(); ++p) out[p] = causal_pairs_from_start(parts[p].head) + causal_pairs_from_start(parts[p].tail);
  return out;
}

}  // namespace detail

ZEPPELIN_NAMESPACE_END
