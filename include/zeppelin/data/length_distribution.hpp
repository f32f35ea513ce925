// zeppelin/data/length_distribution.hpp
// A piecewise-uniform distribution of sequence lengths: the form in which papers report
// their datasets (share of sequences per length bin).
// In:  bins [lo, hi) in tokens, each with a non-negative weight (any positive total; the
//      weights are normalised here, so a table whose shares do not sum to 1 is usable).
// Out: the normalised bin probabilities, the exact mean, and draws: a bin chosen with
//      probability weight / sum, then a length uniform over the bin's integers lo..hi-1.
// Draws are defined bit for bit on top of core/random.hpp (one uniform() against a
// cumulative table computed in a fixed order, then between()), so the same generator
// state gives the same length on every machine. Host-only (data/ is a planning domain).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! One histogram bin: lengths lo..hi-1 (half-open [lo, hi), in tokens), drawn with
//! probability weight / (sum of all weights).
struct length_bin {
  token_count lo = 1;
  token_count hi = 2;
  double weight = 0.0;

  //! Number of distinct lengths in the bin (hi - lo).
  [[nodiscard]] constexpr token_count width() const noexcept { return hi - lo; }
  [[nodiscard]] constexpr bool contains(token_count length) const noexcept { return lo <= length && length < hi; }
  friend constexpr bool operator==(const length_bin&, const length_bin&) = default;
};

//! A validated, normalised piecewise-uniform length distribution. A copyable, equality-
//! comparable value with no empty state (it always has a drawable bin).
class length_histogram {
 public:
  //! Throws invalid_argument unless: at least one bin; every lo >= 1 and hi > lo; bins sorted
  //! by lo and non-overlapping (bins[i].hi <= bins[i+1].lo; gaps are allowed); every weight
  //! finite and >= 0; the weights have a positive, finite sum. Zero-weight bins are kept
  //! (so a paper's columns keep their indices) and are never drawn.
  explicit length_histogram(std::vector<length_bin> bins) : bins_(std::move(bins)) {
    ZEPPELIN_EXPECTS(!bins_.empty(), "a length histogram needs at least one bin", {});
    double sum = 0.0;
    cumulative_.reserve(bins_.size());
    for (std::size_t i = 0; i < bins_.size(); ++i) {
      const length_bin& b = bins_[i];
      const auto bin = static_cast<double>(i);
      ZEPPELIN_EXPECTS(b.lo >= 1, "histogram bins must start at a length >= 1",
                       {{"bin", bin}, {"lo", static_cast<double>(b.lo)}});
      ZEPPELIN_EXPECTS(b.hi > b.lo, "histogram bins must be non-empty (hi > lo)",
                       {{"bin", bin}, {"lo", static_cast<double>(b.lo)}, {"hi", static_cast<double>(b.hi)}});
      ZEPPELIN_EXPECTS(std::isfinite(b.weight) && b.weight >= 0.0, "histogram weights must be finite and >= 0",
                       {{"bin", bin}, {"weight", b.weight}});
      if (i > 0)
        ZEPPELIN_EXPECTS(bins_[i - 1].hi <= b.lo, "histogram bins must be sorted and must not overlap",
                         {{"bin", bin},
                          {"previous_hi", static_cast<double>(bins_[i - 1].hi)},
                          {"lo", static_cast<double>(b.lo)}});
      sum += b.weight;
      cumulative_.push_back(sum);
    }
    ZEPPELIN_EXPECTS(sum > 0.0 && std::isfinite(sum), "histogram weights must have a positive, finite sum",
                     {{"sum", sum}});
    // Normalise in a fixed order; prefix sums of non-negative numbers are non-decreasing
    // under IEEE rounding, and the last one is the sum itself, so the table ends at 1.
    for (double& c : cumulative_) c /= sum;
    cumulative_.back() = 1.0;
    weight_sum_ = sum;
  }

  //! The bins as given (weights not normalised).
  [[nodiscard]] std::span<const length_bin> bins() const noexcept { return bins_; }
  [[nodiscard]] std::size_t size() const noexcept { return bins_.size(); }
  //! Sum of the given weights (e.g. 0.945 for Zeppelin Table 2's GitHub row).
  [[nodiscard]] double weight_sum() const noexcept { return weight_sum_; }
  //! Probability of bin i: weight / weight_sum().
  [[nodiscard]] double probability(std::size_t i) const { return bins_.at(i).weight / weight_sum_; }

  //! Smallest and largest length that can be drawn (from the bins with positive weight).
  [[nodiscard]] token_count min_length() const noexcept {
    for (const auto& b : bins_)
      if (b.weight > 0.0) return b.lo;
    return bins_.front().lo;  // unreachable: the sum is positive
  }
  [[nodiscard]] token_count max_length() const noexcept {
    for (auto it = bins_.rbegin(); it != bins_.rend(); ++it)
      if (it->weight > 0.0) return it->hi - 1;
    return bins_.back().hi - 1;  // unreachable
  }

  //! Exact expected length: sum over bins of probability * (lo + hi - 1) / 2. Always finite:
  //! when the given weights times the lengths pass the largest double (weights near 1e300),
  //! the sum is taken over the normalised weights instead.
  [[nodiscard]] double mean() const noexcept {
    const auto midpoint = [](const length_bin& b) {
      return (static_cast<double>(b.lo) + static_cast<double>(b.hi - 1)) * 0.5;
    };
    double m = 0.0;
    for (const auto& b : bins_) m += b.weight * midpoint(b);
    if (std::isfinite(m)) return m / weight_sum_;
    m = 0.0;  // probabilities <= 1 and midpoints < 2^63: no overflow
    for (const auto& b : bins_) m += b.weight / weight_sum_ * midpoint(b);
    return m;
  }

  //! Index of the bin that holds `length`, or nullopt if it falls outside every bin.
  [[nodiscard]] std::optional<std::size_t> bin_of(token_count length) const noexcept {
    const auto it = std::upper_bound(bins_.begin(), bins_.end(), length,
                                     [](token_count l, const length_bin& b) { return l < b.lo; });
    if (it == bins_.begin()) return std::nullopt;
    const auto i = static_cast<std::size_t>(it - bins_.begin()) - 1;
    if (!bins_[i].contains(length)) return std::nullopt;
    return i;
  }

  //! Index of a bin drawn with probability probability(i): the first bin whose normalised
  //! cumulative weight exceeds rng.uniform(). Consumes exactly one 64-bit draw.
  [[nodiscard]] std::size_t sample_bin(random_generator& rng) const noexcept {
    const double u = rng.uniform();  // in [0, 1); the table ends at 1.0, so a bin is found
    const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
    return static_cast<std::size_t>(it - cumulative_.begin());
  }

  //! A length: sample_bin(rng), then uniform over that bin's integers lo..hi-1.
  [[nodiscard]] token_count sample(random_generator& rng) const noexcept {
    const length_bin& b = bins_[sample_bin(rng)];
    return rng.between(b.lo, b.hi - 1);
  }

  //! This distribution conditioned on min_length <= length <= max_length: bins are clipped
  //! to [min_length, max_length + 1) and each keeps weight * (clipped width / width), which
  //! is exact for a piecewise-uniform distribution; bins left empty are dropped. Throws
  //! invalid_argument if min_length < 1, max_length < min_length, or no probability mass
  //! lies in the range.
  [[nodiscard]] length_histogram restricted(token_count min_length, token_count max_length) const {
    ZEPPELIN_EXPECTS(min_length >= 1 && max_length >= min_length,
                     "a length range needs 1 <= min_length <= max_length",
                     {{"min_length", static_cast<double>(min_length)}, {"max_length", static_cast<double>(max_length)}});
    std::vector<length_bin> clipped;
    double mass = 0.0;
    for (const auto& b : bins_) {
      const token_count lo = std::max(b.lo, min_length);
      const token_count hi = max_length < b.hi ? max_length + 1 : b.hi;  // no overflow at INT64_MAX
      if (hi <= lo) continue;
      const double w = b.weight * (static_cast<double>(hi - lo) / static_cast<double>(b.width()));
      clipped.push_back({lo, hi, w});
      mass += w;
    }
    ZEPPELIN_EXPECTS(mass > 0.0, "the length distribution has no probability mass in the requested range",
                     {{"min_length", static_cast<double>(min_length)}, {"max_length", static_cast<double>(max_length)}});
    return length_histogram(std::move(clipped));
  }

  //! Same bins and same given weights (normalisation does not make unequal weights equal).
  friend bool operator==(const length_histogram& a, const length_histogram& b) { return a.bins_ == b.bins_; }

 private:
  std::vector<length_bin> bins_;
  std::vector<double> cumulative_;  // normalised prefix sums; back() == 1.0
  double weight_sum_ = 0.0;
};

ZEPPELIN_NAMESPACE_END
