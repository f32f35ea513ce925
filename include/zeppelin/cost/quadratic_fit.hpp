// zeppelin/cost/quadratic_fit.hpp
// Least-squares fits of a profiled time against sequence length, the latency shape of
// Hydraulis (Appendix C.2: T(l, P) = a l^2 + b l + c, the quadratic term attention, the
// linear term everything else, the constant kernel-launch delays) and of WLB-LLM's
// per-document attention workload W_a(d) = a2 d^2 + a1 d (no intercept: constants belong
// to the micro-batch, not to each of its documents).
//   in : profile points (length, seconds), e.g. one forward of a micro-batch of one document
//   out: quadratic_profile {a, b, c} minimising sum (a l^2 + b l + c - seconds)^2
//        (c = 0 for fit_quadratic_no_intercept)
// Method: the columns l^2, l, 1 are scaled (l by the largest length, then each column to
// unit norm) and the least-squares problem is solved by Householder QR in long double, so
// lengths up to 10^6 and beyond keep their accuracy (the normal equations would square the
// condition number of the Vandermonde matrix).
// Errors: invalid_argument for a length or time that is NaN, infinite or negative, or too
// few distinct lengths to determine the coefficients (3 for fit_quadratic, 2 positive ones
// for fit_quadratic_no_intercept). The fitted coefficients are not constrained in sign.
// Host-only (std::vector); nvcc-safe as a header.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! seconds = a l^2 + b l + c.
struct quadratic_profile {
  double a = 0;  //!< seconds per token^2
  double b = 0;  //!< seconds per token
  double c = 0;  //!< seconds
  //! a l^2 + b l + c.
  [[nodiscard]] constexpr double at(double l) const noexcept { return (a * l + b) * l + c; }
  friend constexpr bool operator==(const quadratic_profile&, const quadratic_profile&) = default;
};

//! One profiled measurement: `seconds` for a sequence (or micro-batch) of `length` tokens.
struct profile_point {
  double length = 0;
  double seconds = 0;
  friend constexpr bool operator==(const profile_point&, const profile_point&) = default;
};

namespace detail {

inline void check_profile(std::span<const profile_point> points, bool positive_lengths_only, std::size_t needed) {
  std::vector<double> lengths;
  lengths.reserve(points.size());
  for (const profile_point& p : points) {
    ZEPPELIN_EXPECTS(std::isfinite(p.length) && p.length >= 0 && std::isfinite(p.seconds) && p.seconds >= 0,
                     "profile points must be finite and non-negative", {{"length", p.length}, {"seconds", p.seconds}});
    if (!positive_lengths_only || p.length > 0) lengths.push_back(p.length);
  }
  std::sort(lengths.begin(), lengths.end());
  const auto distinct = static_cast<std::size_t>(std::unique(lengths.begin(), lengths.end()) - lengths.begin());
  ZEPPELIN_EXPECTS(distinct >= needed, "too few distinct lengths to fit the profile",
                   {{"distinct_lengths", double(distinct)}, {"needed", double(needed)}});
}

//! Least squares over the columns (l/s)^2, l/s [, 1] by Householder QR; returns the
//! coefficients of l^2, l [, 1] in that order.
template <std::size_t K>
std::array<double, K> least_squares_powers(std::span<const profile_point> points) {
  using real = long double;
  const std::size_t m = points.size();
  real scale = 0;
  for (const profile_point& p : points) scale = std::max(scale, static_cast<real>(p.length));
  // Column-major m x K design matrix and right-hand side.
  std::vector<real> a(m * K), y(m);
  for (std::size_t i = 0; i < m; ++i) {
    const real x = static_cast<real>(points[i].length) / scale;
    a[0 * m + i] = x * x;
    a[1 * m + i] = x;
    if constexpr (K == 3) a[2 * m + i] = 1;
    y[i] = static_cast<real>(points[i].seconds);
  }
  std::array<real, K> norm{};
  for (std::size_t j = 0; j < K; ++j) {
    real s = 0;
    for (std::size_t i = 0; i < m; ++i) s += a[j * m + i] * a[j * m + i];
    norm[j] = std::sqrt(s);
    for (std::size_t i = 0; i < m; ++i) a[j * m + i] /= norm[j];
  }
  // Householder: column k of R below the diagonal becomes zero; Q^T is applied to y too.
  std::array<real, K> diag{};
  for (std::size_t k = 0; k < K; ++k) {
    real s = 0;
    for (std::size_t i = k; i < m; ++i) s += a[k * m + i] * a[k * m + i];
    const real alpha = a[k * m + k] > 0 ? -std::sqrt(s) : std::sqrt(s);
    ZEPPELIN_EXPECTS(alpha != 0, "the profile's lengths do not determine the coefficients", {{"column", double(k)}});
    std::vector<real> v(a.begin() + static_cast<std::ptrdiff_t>(k * m + k), a.begin() + static_cast<std::ptrdiff_t>(k * m + m));
    v[0] -= alpha;
    real vv = 0;
    for (const real e : v) vv += e * e;
    const auto reflect = [&](real* col) {
      real dot = 0;
      for (std::size_t i = 0; i < v.size(); ++i) dot += v[i] * col[k + i];
      const real f = 2 * dot / vv;
      for (std::size_t i = 0; i < v.size(); ++i) col[k + i] -= f * v[i];
    };
    for (std::size_t j = k + 1; j < K; ++j) reflect(&a[j * m]);
    reflect(y.data());
    diag[k] = alpha;
  }
  std::array<real, K> z{};
  for (std::size_t k = K; k-- > 0;) {
    real s = y[k];
    for (std::size_t j = k + 1; j < K; ++j) s -= a[j * m + k] * z[j];
    z[k] = s / diag[k];
  }
  std::array<double, K> out{};
  out[0] = static_cast<double>(z[0] / norm[0] / (scale * scale));
  out[1] = static_cast<double>(z[1] / norm[1] / scale);
  if constexpr (K == 3) out[2] = static_cast<double>(z[2] / norm[2]);
  return out;
}

}  // namespace detail

//! Least-squares a l^2 + b l + c through `points` (Hydraulis' T(l, P)). Throws
//! invalid_argument for a NaN, infinite or negative length or time, or fewer than 3
//! distinct lengths.
[[nodiscard]] inline quadratic_profile fit_quadratic(std::span<const profile_point> points) {
  detail::check_profile(points, false, 3);
  const auto z = detail::least_squares_powers<3>(points);
  return {z[0], z[1], z[2]};
}

//! Least-squares a l^2 + b l through `points`, c = 0 (WLB-LLM's per-document
//! W_a(d) = a2 d^2 + a1 d). Throws invalid_argument for a NaN, infinite or negative length
//! or time, or fewer than 2 distinct positive lengths.
[[nodiscard]] inline quadratic_profile fit_quadratic_no_intercept(std::span<const profile_point> points) {
  detail::check_profile(points, true, 2);
  const auto z = detail::least_squares_powers<2>(points);
  return {z[0], z[1], 0.0};
}

ZEPPELIN_NAMESPACE_END
