// zeppelin/data/sampler.hpp
// A seeded batch sampler: sequence lengths drawn from a length distribution until a total
// token budget is filled EXACTLY ("batch sequence lengths sampled proportionally to dataset
// distributions up to the total context length", Zeppelin section 5).
// In:  a length_histogram, the budget total_tokens (> 0), a seed (or a random_generator to
//      continue), options: min_length / max_length and how draws outside them are treated.
// Out: lengths l_1..l_n (or a zeppelin::batch with ids 0..n-1) with sum l_i == total_tokens.
//
// Budget rule (truncate the last sequence): lengths are drawn one after another; each draw
// that fits in the remaining budget is kept as is; the first draw that does not fit is
// truncated to the remaining tokens and ends the batch. Consequences: every sequence except
// the last is an unbiased draw; the last is biased short (it is the remainder), may be shorter
// than min_length, and is the only sequence when the budget is smaller than the first draw.
// Alternatives considered: dropping the overflowing draw (total no longer exact, and planners
// are compared at a fixed token count); redrawing until a draw fits (biases the tail of the
// batch toward short sequences and never ends if the remainder is below every length in the
// distribution); merging the remainder into the previous sequence (breaks max_length).
//
// Length limits (sampler_options::limit_rule):
// - clamp (default): a draw above max_length is truncated to max_length and a draw below
//   min_length is raised to it, as a data loader cuts documents at the context window; the
//   probability mass outside the range piles up at its ends.
// - condition: draws come from the distribution conditioned on [min_length, max_length]
//   (length_histogram::restricted: exact, no rejection loop), as a length filter would.
// Determinism: the lengths depend only on (distribution, total_tokens, seed, options);
// every step is defined bit for bit by core/random.hpp, so all machines agree.
// Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/data/length_distribution.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! How the sampler treats draws outside [min_length, max_length]; see the file comment.
enum class length_limit_rule {
  clamp,      //!< truncate long draws to max_length, raise short ones to min_length
  condition,  //!< draw from the distribution conditioned on the range
};

//! The most lengths one sample_lengths call draws (half a GB of lengths): a budget that
//! needs more is a mistyped number, refused at once rather than drawn for minutes.
inline constexpr std::int64_t max_sampled_sequences = std::int64_t{1} << 26;

//! Options of sample_lengths / sample_batch, e.g. {.max_length = 65536}.
struct sampler_options {
  //! Shortest length drawn (>= 1). The last, budget-truncated sequence may be shorter.
  token_count min_length = 1;
  //! Longest length drawn, e.g. the context window; 0 means no cap.
  token_count max_length = 0;
  length_limit_rule limit_rule = length_limit_rule::clamp;
};

//! Draws lengths from `distribution` with `rng` until exactly `total_tokens` are used (see
//! the budget rule in the file comment); continues rng's stream, so successive calls give
//! successive independent batches. Throws invalid_argument if total_tokens <= 0,
//! min_length < 1, max_length is neither 0 nor >= min_length, or (condition rule) the
//! distribution has no mass in the range; resource_limit when the budget needs more than
//! max_sampled_sequences draws (refused before drawing when the distribution's mean says so).
//! rng is not advanced when it throws invalid_argument.
[[nodiscard]] inline std::vector<token_count> sample_lengths(const length_histogram& distribution,
                                                             token_count total_tokens, random_generator& rng,
                                                             const sampler_options& options = {}) {
  const token_count min_len = options.min_length;
  const token_count max_len = options.max_length;
  ZEPPELIN_EXPECTS(total_tokens > 0, "the token budget must be positive",
                   {{"total_tokens", static_cast<double>(total_tokens)}});
  ZEPPELIN_EXPECTS(min_len >= 1, "min_length must be at least 1", {{"min_length", static_cast<double>(min_len)}});
  ZEPPELIN_EXPECTS(max_len == 0 || max_len >= min_len, "max_length must be 0 (no cap) or >= min_length",
                   {{"min_length", static_cast<double>(min_len)}, {"max_length", static_cast<double>(max_len)}});

  const bool limited = min_len > 1 || max_len > 0;
  std::optional<length_histogram> conditioned;
  if (limited && options.limit_rule == length_limit_rule::condition)
    conditioned = distribution.restricted(min_len, max_len > 0 ? max_len : std::max(min_len, distribution.max_length()));
  const length_histogram& source = conditioned ? *conditioned : distribution;
  const token_count cap = max_len > 0 ? max_len : source.max_length();

  std::vector<token_count> lengths;
  const double expected = static_cast<double>(total_tokens) / source.mean();
  const auto too_many = [&](double sequences) {
    ZEPPELIN_THROW(resource_limit,
                   "the token budget needs more sequences than one sample draws (max_sampled_sequences); sample a smaller budget",
                   {{"total_tokens", static_cast<double>(total_tokens)}, {"sequences", sequences},
                    {"max_sampled_sequences", static_cast<double>(max_sampled_sequences)}});
  };
  if (expected > static_cast<double>(max_sampled_sequences)) too_many(expected);
  lengths.reserve(static_cast<std::size_t>(std::min(expected, double{1 << 20})) + 1);
  token_count remaining = total_tokens;
  while (remaining > 0) {
    if (static_cast<std::int64_t>(lengths.size()) == max_sampled_sequences) too_many(static_cast<double>(lengths.size()) + 1);
    token_count length = source.sample(rng);
    if (options.limit_rule == length_limit_rule::clamp) length = std::clamp(length, min_len, std::max(cap, min_len));
    length = std::min(length, remaining);  // the budget rule: only the last draw is cut
    lengths.push_back(length);
    remaining -= length;
  }
  return lengths;
}

//! sample_lengths with a fresh generator random_generator(seed).
[[nodiscard]] inline std::vector<token_count> sample_lengths(const length_histogram& distribution,
                                                             token_count total_tokens, std::uint64_t seed,
                                                             const sampler_options& options = {}) {
  random_generator rng(seed);
  return sample_lengths(distribution, total_tokens, rng, options);
}

//! A batch (ids 0..n-1) whose lengths are sample_lengths(distribution, total_tokens, rng,
//! options); total_tokens() == total_tokens.
[[nodiscard]] inline batch sample_batch(const length_histogram& distribution, token_count total_tokens,
                                        random_generator& rng, const sampler_options& options = {}) {
  return batch(sample_lengths(distribution, total_tokens, rng, options));
}

//! sample_batch with a fresh generator random_generator(seed): the same (distribution,
//! total_tokens, seed, options) give the same batch on every machine.
[[nodiscard]] inline batch sample_batch(const length_histogram& distribution, token_count total_tokens,
                                        std::uint64_t seed, const sampler_options& options = {}) {
  random_generator rng(seed);
  return sample_batch(distribution, total_tokens, rng, options);
}

ZEPPELIN_NAMESPACE_END
