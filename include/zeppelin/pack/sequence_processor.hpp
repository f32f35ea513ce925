// zeppelin/pack/sequence_processor.hpp
// InfiniPipe's sequence processor (Wang et al., "InfiniPipe: Elastic Pipeline Parallelism
// for Efficient Variable-Length Long-Context LLM Training", section 3.2, Algorithm 1,
// workload-balanced chunking): a global batch of sequences becomes the chunks of an
// elastic pipeline (core/chunk.hpp), priced by the chunk cost model (cost/chunk_cost.hpp).
//   in : the sequences' lengths, the number of slices n of the longest sequence (or a
//        search over n = 1 .. max_slices under an evaluator of whole plans)
//   out: chunking {mesh, chunks}
// Algorithm 1 for a given n ("time" is the backward T_tot of Eq. 4, priced marginally:
// a chunk's fixed time once plus its slices' marginal times):
//   1. mesh: the longest sequence cut into n slices of equal backward time, non-increasing
//      (later slices carry more causal context), integer boundaries, each slice's marginal
//      time within one token's time at the end of the sequence of the equal share
//      (pack/detail/slice_mesh.hpp); T_t = the largest slice time, T_m = mesh[0];
//   2. every sequence longer than mesh[0] is cut along the mesh's prefix: slices
//      [P_{i-1}, P_i) while P_i < its length, the rest its tail slice (<= the next mesh
//      slice, so <= T_m); the cut slices before the tail become split chunks; sequences of
//      at most mesh[0] tokens are never split;
//   3. one bucket per tail slice; the short sequences, by time descending (ties: longer,
//      then lower index), are packed best-fit decreasing under T_t and T_m, with the
//      termination fix of pack/detail/chunk_buckets.hpp;
//   4. a bucket with a tail becomes a hybrid chunk (the tail alone if nothing was packed
//      with it), any other a batched chunk.
// Canonical order of the chunks: the cut sequences longest first (ties: lower index), each
// as its split chunks in slice order followed by its hybrid chunk (the chains are
// contiguous, as schedule/pipeline/chunk_one_f_one_b.hpp takes them); then the batched
// chunks in the order they were opened. Inside a chunk: the tail slice first, then the
// short sequences in packing order.
// The search (search()) runs Algorithm 1 for every n in 1 .. min(max_slices, longest)
// whose mesh[0] respects max_chunk_tokens and keeps the plan the evaluator prices lowest
// (ties: the smaller n). The default evaluator is a 1F1B estimate (one_f_one_b_estimate).
// Complexity: O(|S| log |S| + |S| B + n log L) per n, B <= |S| buckets.
// Deterministic: sorts with total orders, no unordered containers, no random numbers.
// Errors: invalid_argument for no sequences, a length outside [1, max_sequence_length],
// n_slices outside [1, longest], max_slices < 1, negative max_chunk_tokens, an invalid
// cost model or a backward time that does not grow with tokens, an evaluator result that is
// not finite and non-negative; infeasible when mesh[0] exceeds max_chunk_tokens (for the
// search: for every n). Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/chunk_cost.hpp>
#include <zeppelin/core/chunk.hpp>
#include <zeppelin/pack/detail/chunk_buckets.hpp>
#include <zeppelin/pack/detail/slice_mesh.hpp>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The sequence processor's plan: the mesh and the chunks in canonical order (see the file
//! header).
struct chunking {
  std::vector<token_count> mesh;  //!< slice lengths of the longest sequence, non-increasing
  std::vector<chunk> chunks;
  friend bool operator==(const chunking&, const chunking&) = default;
};

//! Prices a whole chunking of `lengths` (predicted seconds of the step; lower is better).
template <class E>
concept chunking_evaluator = requires(const E& e, const chunking& c, std::span<const token_count> lengths) {
  { e(c, lengths) } -> std::convertible_to<double>;
};

//! The default evaluator until a chunk scheduler prices plans: a 1F1B pipeline of the chunks,
//! sum_k T(k) + (d_p - 1) max_k T(k), T(k) = forward + backward T_tot of chunk k (Eq. 4):
//! every stage runs every chunk once, plus the warm-up and cool-down of the slowest chunk.
struct one_f_one_b_estimate {
  chunk_cost_model cost;

  //! Throws invalid_argument for an invalid cost model.
  [[nodiscard]] double operator()(const chunking& c, std::span<const token_count> /*lengths*/) const {
    validate(cost);
    double sum = 0, slowest = 0;
    for (const chunk& k : c.chunks) {
      const double t = cost.seconds(cost.forward, k) + cost.seconds(cost.backward, k);
      sum += t;
      slowest = std::max(slowest, t);
    }
    return sum + (cost.d_p - 1) * slowest;
  }
  friend bool operator==(const one_f_one_b_estimate&, const one_f_one_b_estimate&) = default;
};
static_assert(chunking_evaluator<one_f_one_b_estimate>);

//! Workload-balanced chunking (Algorithm 1) and the search over the slice count.
struct sequence_processor {
  chunk_cost_model cost;
  //! The largest n the search tries. The chunk scheduler's grouping DP solves n (n + 1) / 2
  //! sub-problems for the n chunks of the longest sequence, and each extra slice adds a
  //! chunk to every stage's in-flight window; 16 keeps both small.
  int max_slices = 16;
  //! The most tokens one chunk may hold (from memory: M_act of Eq. 5 within a stage's
  //! budget); 0: no limit. Every chunk holds at most mesh[0] tokens.
  token_count max_chunk_tokens = 0;

  //! The mesh for the longest length `longest` and `n_slices` slices (step 1).
  //! Throws invalid_argument for longest outside [1, max_sequence_length], n_slices
  //! outside [1, longest], an invalid cost model or a backward time that does not grow.
  [[nodiscard]] std::vector<token_count> mesh(token_count longest, int n_slices) const {
    validate(cost);
    ZEPPELIN_EXPECTS(longest >= 1 && longest <= max_sequence_length, "the longest sequence must hold 1 .. max_sequence_length tokens",
                     {{"longest", double(longest)}, {"max_sequence_length", double(max_sequence_length)}});
    ZEPPELIN_EXPECTS(n_slices >= 1 && n_slices <= longest, "n_slices must lie in [1, longest sequence]",
                     {{"n_slices", double(n_slices)}, {"longest", double(longest)}});
    const auto cumulative = [&](token_count x) { return cost.slice_seconds(cost.backward, chunk_slice{0, 0, x}); };
    ZEPPELIN_EXPECTS(cumulative(1) > 0, "the backward time must grow with tokens (a1, a2 or the all-to-all bandwidth term)",
                     {{"a1", cost.backward.a1}, {"a2", cost.backward.a2}, {"bandwidth", cost.all_to_all.bandwidth}});
    return detail::equal_time_mesh(longest, n_slices, cumulative);
  }

  //! Algorithm 1 with `n_slices` slices of the longest sequence. Throws as the file header
  //! lists (infeasible when mesh[0] > max_chunk_tokens > 0).
  [[nodiscard]] chunking process(std::span<const token_count> lengths, int n_slices) const {
    check(lengths);
    chunking out;
    out.mesh = mesh(*std::max_element(lengths.begin(), lengths.end()), n_slices);
    if (max_chunk_tokens > 0 && out.mesh.front() > max_chunk_tokens)
      ZEPPELIN_THROW(infeasible, "the mesh's first slice exceeds max_chunk_tokens: use more slices",
                     {{"n_slices", double(n_slices)}, {"largest_slice", double(out.mesh.front())}, {"max_chunk_tokens", double(max_chunk_tokens)}});
    out.chunks = chunks_along(lengths, out.mesh);
    return out;
  }

  //! The plan `evaluate` prices lowest over n = 1 .. min(max_slices, longest) (ties: the
  //! smaller n), skipping n whose mesh[0] exceeds max_chunk_tokens > 0. Throws as the file
  //! header lists; infeasible when no n fits max_chunk_tokens.
  template <chunking_evaluator E>
  [[nodiscard]] chunking search(std::span<const token_count> lengths, const E& evaluate) const {
    check(lengths);
    ZEPPELIN_EXPECTS(max_slices >= 1, "max_slices must be at least 1", {{"max_slices", double(max_slices)}});
    const token_count longest = *std::max_element(lengths.begin(), lengths.end());
    const int top = static_cast<int>(std::min<token_count>(max_slices, longest));
    chunking best;
    double best_seconds = 0;
    token_count smallest_first = longest;
    for (int n = 1; n <= top; ++n) {
      chunking c;
      c.mesh = mesh(longest, n);
      smallest_first = std::min(smallest_first, c.mesh.front());
      if (max_chunk_tokens > 0 && c.mesh.front() > max_chunk_tokens) continue;
      c.chunks = chunks_along(lengths, c.mesh);
      const double seconds = static_cast<double>(evaluate(c, lengths));
      ZEPPELIN_EXPECTS(std::isfinite(seconds) && seconds >= 0, "the evaluator must return finite non-negative seconds",
                       {{"n_slices", double(n)}, {"seconds", seconds}});
      if (best.mesh.empty() || seconds < best_seconds) {
        best = std::move(c);
        best_seconds = seconds;
      }
    }
    if (best.mesh.empty())
      ZEPPELIN_THROW(infeasible, "no slice count up to max_slices keeps the mesh's first slice within max_chunk_tokens",
                     {{"max_slices", double(max_slices)}, {"largest_slice", double(smallest_first)}, {"max_chunk_tokens", double(max_chunk_tokens)}});
    return best;
  }

  //! search() under one_f_one_b_estimate{cost}.
  [[nodiscard]] chunking search(std::span<const token_count> lengths) const { return search(lengths, one_f_one_b_estimate{cost}); }

  friend bool operator==(const sequence_processor&, const sequence_processor&) = default;

 private:
  void check(std::span<const token_count> lengths) const {
    ZEPPELIN_EXPECTS(!lengths.empty(), "the sequence processor needs at least one sequence", {{"sequences", 0.0}});
    for (std::size_t i = 0; i < lengths.size(); ++i)
      ZEPPELIN_EXPECTS(lengths[i] >= 1 && lengths[i] <= max_sequence_length, "sequence lengths must lie in [1, max_sequence_length]",
                       {{"sequence", double(i)}, {"length", double(lengths[i])}, {"max_sequence_length", double(max_sequence_length)}});
    ZEPPELIN_EXPECTS(max_chunk_tokens >= 0, "max_chunk_tokens cannot be negative (0: no limit)",
                     {{"max_chunk_tokens", double(max_chunk_tokens)}});
  }

  //! Steps 2-4 along `mesh` (see the file header), chunks in canonical order.
  [[nodiscard]] std::vector<chunk> chunks_along(std::span<const token_count> lengths, const std::vector<token_count>& mesh) const {
    const chunk_compute_coefficients& pass = cost.backward;
    const double fixed = cost.fixed_seconds(pass);
    std::vector<token_count> prefix(mesh.size() + 1, 0);
    double largest_slice = 0;
    for (std::size_t j = 0; j < mesh.size(); ++j) {
      prefix[j + 1] = prefix[j] + mesh[j];
      largest_slice = std::max(largest_slice, cost.slice_seconds(pass, chunk_slice{0, prefix[j], prefix[j + 1]}));
    }
    const token_count token_threshold = mesh.front();

    std::vector<std::int64_t> cut, whole;
    for (std::size_t i = 0; i < lengths.size(); ++i) (lengths[i] > token_threshold ? cut : whole).push_back(static_cast<std::int64_t>(i));
    const auto length_of = [&](std::int64_t i) { return lengths[static_cast<std::size_t>(i)]; };
    std::sort(cut.begin(), cut.end(), [&](std::int64_t a, std::int64_t b) { return length_of(a) != length_of(b) ? length_of(a) > length_of(b) : a < b; });

    std::vector<std::vector<chunk>> splits(cut.size());
    std::vector<detail::chunk_bucket> buckets;
    buckets.reserve(cut.size() + whole.size());
    for (std::size_t c = 0; c < cut.size(); ++c) {
      const token_count length = length_of(cut[c]);
      std::size_t j = 1;  // slices [P_{i-1}, P_i) for i <= j, with P_j < length
      while (prefix[j + 1] < length) ++j;
      for (std::size_t i = 1; i <= j; ++i) splits[c].push_back({prefix[i - 1], {{cut[c], prefix[i - 1], prefix[i]}}});
      const chunk_slice tail{cut[c], prefix[j], length};
      buckets.push_back({fixed + cost.slice_seconds(pass, tail), tail.tokens(), {tail}});
    }

    std::vector<detail::bucket_item> items;
    items.reserve(whole.size());
    for (const std::int64_t i : whole) {
      const chunk_slice s{i, 0, length_of(i)};
      items.push_back({cost.slice_seconds(pass, s), s});
    }
    std::sort(items.begin(), items.end(), [](const detail::bucket_item& a, const detail::bucket_item& b) {
      if (a.time != b.time) return a.time > b.time;
      if (a.slice.end != b.slice.end) return a.slice.end > b.slice.end;
      return a.slice.sequence < b.slice.sequence;
    });
    detail::best_fit_decreasing(buckets, items, fixed, fixed + largest_slice, token_threshold);

    std::vector<chunk> out;
    // A bucket's first slice is its tail, if it has one: its begin is the context (else 0).
    const auto emit = [&](detail::chunk_bucket& b) { out.push_back({b.slices.front().begin, std::move(b.slices)}); };
    for (std::size_t c = 0; c < cut.size(); ++c) {
      for (chunk& s : splits[c]) out.push_back(std::move(s));
      emit(buckets[c]);
    }
    for (std::size_t b = cut.size(); b < buckets.size(); ++b) emit(buckets[b]);
    return out;
  }
};

ZEPPELIN_NAMESPACE_END
