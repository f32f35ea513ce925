// zeppelin/core/random.hpp
// A portable seeded pseudo-random generator: xoshiro256** seeded through splitmix64, with
// integer and real draws defined here bit for bit (no std::*_distribution, whose output
// differs between standard libraries). The same seed gives the same sequence on every
// machine, compiler and rank, on host and device.
// nvcc-safe; every member is ZEPPELIN_HOST_DEVICE and constexpr.
#pragma once

#include <zeppelin/core/config.hpp>

#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {
// 128-bit product for Lemire's method; __extension__ keeps -Wpedantic quiet on GCC/Clang.
__extension__ using uint128 = unsigned __int128;
}  // namespace detail

//! splitmix64 step: the standard seeding function for the xoshiro family (Vigna, 2015).
ZEPPELIN_HOST_DEVICE constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

//! xoshiro256** 1.0 (Blackman & Vigna). Satisfies std::uniform_random_bit_generator.
class random_generator {
 public:
  using result_type = std::uint64_t;

  //! seed: any 64-bit value; stream: an independent sub-sequence id (e.g. a rank or an
  //! iteration) mixed into the seeding, so (seed, stream) pairs give unrelated sequences.
  ZEPPELIN_HOST_DEVICE constexpr explicit random_generator(std::uint64_t seed,
                                                           std::uint64_t stream = 0) noexcept {
    std::uint64_t sm = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (auto& word : state_) word = splitmix64(sm);
  }

  ZEPPELIN_HOST_DEVICE static constexpr result_type min() noexcept { return 0; }
  ZEPPELIN_HOST_DEVICE static constexpr result_type max() noexcept { return ~result_type{0}; }

  //! The next 64 uniformly distributed bits.
  ZEPPELIN_HOST_DEVICE constexpr result_type operator()() noexcept {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  //! Uniform integer in [0, bound) by Lemire's multiply-and-reject method (unbiased).
  //! bound == 0 returns 0.
  ZEPPELIN_HOST_DEVICE constexpr std::uint64_t below(std::uint64_t bound) noexcept {
    if (bound == 0) return 0;
    std::uint64_t x = (*this)();
    detail::uint128 m = static_cast<detail::uint128>(x) * bound;
    auto low = static_cast<std::uint64_t>(m);
    if (low < bound) {
      const std::uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        x = (*this)();
        m = static_cast<detail::uint128>(x) * bound;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

  //! Uniform integer in the closed range [lo, hi]; requires lo <= hi.
  ZEPPELIN_HOST_DEVICE constexpr std::int64_t between(std::int64_t lo, std::int64_t hi) noexcept {
    const auto span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
    if (span == ~std::uint64_t{0}) return static_cast<std::int64_t>((*this)());
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + below(span + 1));
  }

  //! Uniform double in [0, 1) with 53 random bits.
  ZEPPELIN_HOST_DEVICE constexpr double uniform() noexcept {
    return static_cast<double>((*this)() >> 11) * 0x1.0p-53;
  }

  //! Fisher-Yates shuffle of [first, last) with random-access iterators.
  template <class RandomIt>
  ZEPPELIN_HOST_DEVICE constexpr void shuffle(RandomIt first, RandomIt last) noexcept {
    const auto n = static_cast<std::uint64_t>(last - first);
    for (std::uint64_t i = n; i > 1; --i) {
      const std::uint64_t j = below(i);
      auto tmp = first[i - 1];
      first[i - 1] = first[j];
      first[j] = tmp;
    }
  }

 private:
  ZEPPELIN_HOST_DEVICE static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept {
    return (x << k) | (x >> (64 - k));
  }

  std::uint64_t state_[4]{};
};

ZEPPELIN_NAMESPACE_END
