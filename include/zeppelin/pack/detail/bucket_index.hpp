// zeppelin/pack/detail/bucket_index.hpp
// The queries of best-fit decreasing (pack/detail/chunk_buckets.hpp) over the buckets, in
// O(log B) typical time instead of a scan of all B buckets.
//   in : the buckets (only appended to and grown), kept in step by push and update
//   out: fewest (the lowest index of the fewest tokens); first_fit (the bucket of highest
//        priority whose tokens and time take an item); least_time (the least bucket time
//        plus the item's time over the buckets whose tokens take it)
// A segment tree over bucket indices holds per node the least time, the fewest and most
// tokens. A node is searched only when its least tokens and least time could take the item,
// and, for first_fit, when its best possible ratio (least time over most tokens) could
// precede the best bucket found so far. Every test is the scan's own expression (the same
// sums and products on the same doubles, each monotone in the bucket's values), so the
// answers equal the scan's, ties included (lowest index). Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

//! True when bucket a comes before bucket b in the priority order of best-fit decreasing
//! (lower time per token, then fewer tokens; callers break the remaining ties by index).
//! The ratios are compared by cross-multiplication, exact for equal ratios.
template <class Bucket>
[[nodiscard]] bool precedes(const Bucket& a, const Bucket& b) noexcept {
  const double x = a.time * static_cast<double>(b.tokens), y = b.time * static_cast<double>(a.tokens);
  return x != y ? x < y : a.tokens < b.tokens;
}

//! An item's fit: its tokens and time, and the thresholds T_m and T_t.
struct bucket_fit {
  token_count tokens = 0;
  double time = 0;
  token_count token_threshold = 0;
  double time_threshold = 0;
};

//! Bucket: time (double) and tokens (token_count) members, tokens >= 1.
template <class Bucket>
class bucket_index {
 public:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  explicit bucket_index(const std::vector<Bucket>& buckets) : buckets_(&buckets) {
    while (capacity_ < buckets.size()) capacity_ *= 2;
    node_.assign(2 * capacity_, empty_node());
    for (std::size_t i = 0; i < buckets.size(); ++i) node_[capacity_ + i] = leaf(buckets[i]);
    for (std::size_t k = capacity_ - 1; k >= 1; --k) node_[k] = merge(node_[2 * k], node_[2 * k + 1]);
  }

  //! Indexes the bucket just appended to the buckets.
  void push() {
    if (buckets_->size() > capacity_) {
      *this = bucket_index(*buckets_);
      return;
    }
    update(buckets_->size() - 1);
  }
  //! Re-reads bucket i after it grew.
  void update(std::size_t i) {
    std::size_t k = capacity_ + i;
    node_[k] = leaf((*buckets_)[i]);
    for (k /= 2; k >= 1; k /= 2) node_[k] = merge(node_[2 * k], node_[2 * k + 1]);
  }

  //! The lowest index of the fewest tokens, or npos when there is no bucket.
  [[nodiscard]] std::size_t fewest() const noexcept {
    if (buckets_->empty()) return npos;
    std::size_t k = 1;
    while (k < capacity_) k = node_[2 * k].fewest_tokens <= node_[2 * k + 1].fewest_tokens ? 2 * k : 2 * k + 1;
    return k - capacity_;
  }

  //! The bucket of highest priority (precedes, then lowest index) with tokens + fit.tokens <=
  //! T_m and time + fit.time <= T_t, or npos.
  [[nodiscard]] std::size_t first_fit(const bucket_fit& fit) const {
    std::size_t best = npos;
    first_fit(1, 0, capacity_, fit, best);
    return best;
  }

  //! The least time + fit.time over the buckets with tokens + fit.tokens <= T_m (infinity
  //! when none).
  [[nodiscard]] double least_time(const bucket_fit& fit) const {
    double least = std::numeric_limits<double>::infinity();
    least_time(1, fit, least);
    return least;
  }

 private:
  struct summary {
    double least_time;
    token_count fewest_tokens, most_tokens;
  };
  static summary empty_node() noexcept {
    return {std::numeric_limits<double>::infinity(), std::numeric_limits<token_count>::max() / 4, 0};
  }
  static summary leaf(const Bucket& b) noexcept { return {b.time, b.tokens, b.tokens}; }
  static summary merge(const summary& x, const summary& y) noexcept {
    return {std::min(x.least_time, y.least_time), std::min(x.fewest_tokens, y.fewest_tokens), std::max(x.most_tokens, y.most_tokens)};
  }
  [[nodiscard]] bool may_take(const summary& s, const bucket_fit& fit) const noexcept {
    return s.fewest_tokens + fit.tokens <= fit.token_threshold && s.least_time + fit.time <= fit.time_threshold;
  }

  // node k covers bucket indices [lo, lo + width)
  void first_fit(std::size_t k, std::size_t lo, std::size_t width, const bucket_fit& fit, std::size_t& best) const {
    const summary& s = node_[k];
    if (lo >= buckets_->size() || !may_take(s, fit)) return;
    if (best != npos) {
      // no bucket here can precede the best: its ratio is at least least_time / most_tokens
      const Bucket& b = (*buckets_)[best];
      if (s.least_time * static_cast<double>(b.tokens) > b.time * static_cast<double>(s.most_tokens)) return;
    }
    if (width == 1) {
      if (best == npos || precedes((*buckets_)[lo], (*buckets_)[best])) best = lo;
      return;
    }
    first_fit(2 * k, lo, width / 2, fit, best);
    first_fit(2 * k + 1, lo + width / 2, width / 2, fit, best);
  }

  void least_time(std::size_t k, const bucket_fit& fit, double& least) const {
    const summary& s = node_[k];
    if (s.fewest_tokens + fit.tokens > fit.token_threshold || !(s.least_time + fit.time < least)) return;
    if (k >= capacity_) {
      least = s.least_time + fit.time;
      return;
    }
    least_time(2 * k, fit, least);
    least_time(2 * k + 1, fit, least);
  }

  const std::vector<Bucket>* buckets_;
  std::size_t capacity_ = 1;
  std::vector<summary> node_;
};

}  // namespace detail

ZEPPELIN_NAMESPACE_END
