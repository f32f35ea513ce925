// zeppelin/cost/throughput_table.hpp
// An achieved-throughput profile: sorted points (x, achieved FLOP/s), e.g. x = query rows of
// an attention call, read back at any x by piecewise-linear interpolation in log2(x),
// clamped to the first / last value outside the profiled range.
//   in:  points with strictly increasing finite x > 0 and finite values > 0
//   out: at(x) -> FLOP/s (> 0) for any finite x > 0
// Interpolating in log2(x) matches how such profiles are taken (one point per power of
// two); clamping keeps the estimate finite and positive everywhere. Lookups are O(log n).
// Determinism: at() uses std::log2, so two processes agree bit for bit when they share the
// C library (the usual case for one training job).
// Host-only class (std::vector); nvcc-safe as a header.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <numbers>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! One profiled point: at size `x`, the kernel achieved `flops_per_second`.
struct throughput_point {
  double x = 0;
  double flops_per_second = 0;
  friend constexpr bool operator==(const throughput_point&, const throughput_point&) = default;
};

class throughput_table {
 public:
  //! An empty table; at() throws until points are assigned. Exists so that aggregates
  //! holding a table stay default-constructible.
  throughput_table() = default;

  //! Throws invalid_argument when `points` is empty, an x is not finite or <= 0, the x are
  //! not strictly increasing, or a value is not finite or <= 0 (the offending index and
  //! numbers are attached).
  explicit throughput_table(std::vector<throughput_point> points) : points_(std::move(points)) {
    ZEPPELIN_EXPECTS(!points_.empty(), "a throughput table needs at least one point", {});
    for (std::size_t i = 0; i < points_.size(); ++i) {
      const auto& p = points_[i];
      ZEPPELIN_EXPECTS(std::isfinite(p.x) && p.x > 0, "throughput table sizes must be finite and positive",
                       {{"index", double(i)}, {"x", p.x}});
      ZEPPELIN_EXPECTS(std::isfinite(p.flops_per_second) && p.flops_per_second > 0,
                       "throughput table values must be finite and positive",
                       {{"index", double(i)}, {"x", p.x}, {"flops_per_second", p.flops_per_second}});
      if (i > 0)
        ZEPPELIN_EXPECTS(points_[i - 1].x < p.x, "throughput table sizes must be strictly increasing",
                         {{"index", double(i)}, {"previous_x", points_[i - 1].x}, {"x", p.x}});
    }
  }
  throughput_table(std::initializer_list<throughput_point> points)
      : throughput_table(std::vector<throughput_point>(points)) {}

  //! Achieved FLOP/s at size `x`: linear in log2(x) between neighbouring points, the first
  //! (last) value below (above) the profiled range. Throws invalid_argument for an empty
  //! table or an x that is not finite and positive.
  [[nodiscard]] double at(double x) const {
    ZEPPELIN_EXPECTS(!points_.empty(), "lookup in an empty throughput table", {{"x", x}});
    ZEPPELIN_EXPECTS(std::isfinite(x) && x > 0, "throughput lookups need a finite positive size", {{"x", x}});
    if (x <= points_.front().x) return points_.front().flops_per_second;
    if (x >= points_.back().x) return points_.back().flops_per_second;
    // First point with p.x > x; it exists and is not the first (x is strictly inside).
    const auto hi = std::upper_bound(points_.begin(), points_.end(), x,
                                     [](double v, const throughput_point& p) { return v < p.x; });
    const auto lo = hi - 1;
    const double t = std::log2(x / lo->x) / std::log2(hi->x / lo->x);
    return lo->flops_per_second + t * (hi->flops_per_second - lo->flops_per_second);
  }
  [[nodiscard]] double operator()(double x) const { return at(x); }

  //! The same table with every value multiplied by `factor` (> 0, finite): a profile moved
  //! to another GPU by a peak or efficiency ratio.
  [[nodiscard]] throughput_table scaled(double factor) const {
    ZEPPELIN_EXPECTS(std::isfinite(factor) && factor > 0, "a throughput scale factor must be finite and positive",
                     {{"factor", factor}});
    std::vector<throughput_point> p = points_;
    for (auto& point : p) point.flops_per_second *= factor;
    return throughput_table(std::move(p));
  }

  //! True when work / at(work) never decreases as work grows: doing more never takes less
  //! time. Below and above the profile the rate is constant (time grows linearly). Inside a
  //! segment v(x) = a + b log2(x), and d/dx [x / v(x)] >= 0 <=> v(x) >= b / ln 2; v is
  //! monotone on the segment, so checking the segment's left end (b > 0) suffices.
  [[nodiscard]] bool time_monotone() const noexcept {
    for (std::size_t i = 0; i + 1 < points_.size(); ++i) {
      const auto& a = points_[i];
      const auto& b = points_[i + 1];
      const double slope = (b.flops_per_second - a.flops_per_second) / std::log2(b.x / a.x);
      if (slope > 0 && a.flops_per_second * std::numbers::ln2 < slope) return false;
    }
    return true;
  }

  [[nodiscard]] const std::vector<throughput_point>& points() const noexcept { return points_; }
  [[nodiscard]] bool empty() const noexcept { return points_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return points_.size(); }

  friend bool operator==(const throughput_table&, const throughput_table&) = default;

 private:
  std::vector<throughput_point> points_;
};

ZEPPELIN_NAMESPACE_END
