// tests/pack/helpers.hpp
// Shared by the pack tests: seeded random streams with a long tail, the conservation check
// (emitted + pending = input, each index once, N micro-batches per iteration, each <= L,
// tokens and workload consistent), and the attention work of a micro-batch.
#pragma once

#include <catch2/catch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/pack.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace pack_test {

using namespace zeppelin;

//! `count` lengths in [1, max_length]: mostly short, about 1 in 6 at least max_length / 2.
inline std::vector<token_count> random_lengths(random_generator& rng, std::size_t count, token_count max_length) {
  std::vector<token_count> out(count);
  for (auto& d : out)
    d = rng.below(6) == 0 ? rng.between(max_length / 2, max_length) : rng.between(1, std::max<token_count>(1, max_length / 8));
  return out;
}

//! The arriving documents for lengths (indices 0..n-1).
inline std::vector<document_ref> refs(std::span<const token_count> lengths, std::int64_t first = 0) {
  std::vector<document_ref> out;
  for (std::size_t i = 0; i < lengths.size(); ++i) out.push_back({first + static_cast<std::int64_t>(i), lengths[i]});
  return out;
}

inline std::int64_t attention(const packed_micro_batch& mb, std::span<const token_count> lengths) {
  std::int64_t a = 0;
  for (const std::int64_t i : mb.documents) a += lengths[static_cast<std::size_t>(i)] * lengths[static_cast<std::size_t>(i)];
  return a;
}

inline std::int64_t max_attention(const packed_iteration& it, std::span<const token_count> lengths) {
  std::int64_t m = 0;
  for (const auto& mb : it.micro_batches) m = std::max(m, attention(mb, lengths));
  return m;
}

//! Checks every invariant of a run; `w` is the workload model the packer reports with.
inline void check_conservation(const packing_run& run, std::span<const token_count> lengths, const packing_limits& limits,
                               const document_workload& w = {}) {
  std::vector<int> seen(lengths.size(), 0);
  for (const packed_iteration& it : run.iterations) {
    REQUIRE(it.micro_batches.size() == static_cast<std::size_t>(limits.micro_batches));
    for (const packed_micro_batch& mb : it.micro_batches) {
      token_count tokens = 0;
      double workload = 0;
      for (const std::int64_t i : mb.documents) {
        REQUIRE(i >= 0);
        REQUIRE(static_cast<std::size_t>(i) < lengths.size());
        ++seen[static_cast<std::size_t>(i)];
        tokens += lengths[static_cast<std::size_t>(i)];
        workload += w(lengths[static_cast<std::size_t>(i)]);
      }
      REQUIRE(tokens == mb.tokens);
      REQUIRE(tokens <= limits.max_tokens);
      REQUIRE(mb.workload == Approx(workload).epsilon(1e-12));
    }
  }
  for (const std::int64_t i : run.pending) ++seen[static_cast<std::size_t>(i)];
  for (std::size_t i = 0; i < seen.size(); ++i) {
    INFO("document " << i);
    REQUIRE(seen[i] == 1);
  }
  REQUIRE(std::is_sorted(run.pending.begin(), run.pending.end()));
}

}  // namespace pack_test
