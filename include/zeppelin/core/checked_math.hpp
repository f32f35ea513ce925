// zeppelin/core/checked_math.hpp
// Integer arithmetic on token counts, capacities and pair counts that cannot overflow.
//   saturating_mul(a, b), saturating_add(a, b)  a, b >= 0: the exact result, or the largest
//       int64 when it does not fit. For "room" figures (N * P * L, a node's P * L, a CP
//       group's budget): a room past 2^63 - 1 tokens is as good as unlimited, since no batch
//       holds more tokens than that.
//   ceil_div(a, b)  a >= 0, b > 0: ceil(a / b) without forming a + b - 1.
// Why not 128-bit everywhere: these run on hot planner paths and in device code; the
// saturating forms are two compares on top of the 64-bit operation.
// nvcc-safe: ZEPPELIN_HOST_DEVICE constexpr.
#pragma once

#include <zeppelin/core/config.hpp>

#include <cstdint>
#include <limits>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {
// the largest int64, spelled out: std::numeric_limits<>::max() is a host function to nvcc
inline constexpr std::int64_t int64_top = 0x7fff'ffff'ffff'ffffLL;
static_assert(int64_top == std::numeric_limits<std::int64_t>::max());
}  // namespace detail

//! a * b for a, b >= 0, saturated at the largest int64.
ZEPPELIN_HOST_DEVICE constexpr std::int64_t saturating_mul(std::int64_t a, std::int64_t b) noexcept {
  constexpr std::int64_t top = detail::int64_top;
  if (a <= 0 || b <= 0) return 0;
  return a > top / b ? top : a * b;
}

//! a + b for a, b >= 0, saturated at the largest int64.
ZEPPELIN_HOST_DEVICE constexpr std::int64_t saturating_add(std::int64_t a, std::int64_t b) noexcept {
  constexpr std::int64_t top = detail::int64_top;
  return a > top - b ? top : a + b;
}

//! ceil(a / b) for a >= 0, b > 0.
ZEPPELIN_HOST_DEVICE constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept {
  return a == 0 ? 0 : (a - 1) / b + 1;
}

ZEPPELIN_NAMESPACE_END
