// zeppelin/step/detail/ring_steps.hpp
// The steps of the ring collectives the step program posts (TP collectives, ZeRO gathers and
// scatters, gradient all-reduces), as element ranges moved between ring positions.
//   in : n members in ring order (position p sends to p + 1), E elements, the collective
//   out: per step, per position p, the one move p makes to p + 1: chunk q (elements
//        [q E / n, (q + 1) E / n)), whether the receiver adds it or copies it
//   reduce_scatter  n - 1 steps; step j: p sends chunk (p - j - 1) mod n, the receiver adds;
//                   afterwards position p holds the sum of chunk p (summed in one fixed
//                   order along the ring, so every rank's bits are the same)
//   all_gather      n - 1 steps; position p starts with chunk p; step j: p sends chunk
//                   (p - j) mod n, the receiver copies
//   all_reduce      reduce_scatter then all_gather (2 (n - 1) steps)
// One member, or no elements: no steps. Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>

#include <cstdint>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

enum class ring_collective : std::uint8_t { reduce_scatter = 0, all_gather = 1, all_reduce = 2 };

struct ring_move {
  std::int64_t first = 0;  //!< first element of the chunk
  std::int64_t count = 0;  //!< elements of the chunk
  bool add = false;        //!< the receiver adds (reduce-scatter steps)
};

//! First element of chunk q (0 <= q <= n) of n over `elements` >= 0 elements: floor(E q / n),
//! computed without overflow.
[[nodiscard]] constexpr std::int64_t ring_chunk_begin(std::int64_t elements, int n, int q) noexcept {
  return elements / n * q + elements % n * q / n;
}

//! [step][position]: the move position p makes to position (p + 1) mod n in that step.
[[nodiscard]] inline std::vector<std::vector<ring_move>> ring_steps(ring_collective kind, int n, std::int64_t elements) {
  std::vector<std::vector<ring_move>> out;
  if (n <= 1 || elements <= 0) return out;
  const auto chunk = [&](int q, bool add) {
    q = ((q % n) + n) % n;
    const std::int64_t b = ring_chunk_begin(elements, n, q), e = ring_chunk_begin(elements, n, q + 1);
    return ring_move{b, e - b, add};
  };
  const bool scatter = kind != ring_collective::all_gather, gather = kind != ring_collective::reduce_scatter;
  if (scatter)
    for (int j = 0; j < n - 1; ++j) {
      auto& step = out.emplace_back();
      for (int p = 0; p < n; ++p) step.push_back(chunk(p - j - 1, true));
    }
  if (gather)
    for (int j = 0; j < n - 1; ++j) {
      auto& step = out.emplace_back();
      for (int p = 0; p < n; ++p) step.push_back(chunk(p - j, false));
    }
  return out;
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
