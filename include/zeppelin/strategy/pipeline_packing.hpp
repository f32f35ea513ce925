// zeppelin/strategy/pipeline_packing.hpp
// Hydraulis' stage 2 of data assignment (section 6.1, Eq. 1, Appendix D): pack the
// sequences dispatched to one pipeline into its micro-batches.
//   in : the pipeline's scheme_profile, the lengths of its sequences
//   out: pipeline_packing: V micro-batches (indices into the lengths), the slowest
//        micro-batch's T and the pipeline latency (PP - 1 + V) x that T
//   minimise (max_j sum_i o_ij T(l_i, P)) x (PP - 1 + V)
//   s.t. each sequence in exactly one micro-batch, sum_i o_ij l_i <= MaxLen(P)
// with a micro-batch's T = sum (a l^2 + b l) + c. V ranges over Appendix D's pruned range
// [max(ceil(sum l / MaxLen), 1), min(floor(sum l / UtilLen), U)] (the upper end raised to
// the lower when below it), at most 16 values spread evenly over it (the authors' code).
// Two policies, each trying every V of the range and keeping the lowest latency (ties: the
// smaller V):
//   greedy_pipeline_packing  sequences by decreasing T onto the micro-batch of least T with
//                            room (ties: the lowest), then local improvement: moves and swaps out of the slowest
//                            micro-batch while they lower it; for any size;
//   exact_pipeline_packing   branch and bound per V (sequences longest first, micro-batches
//                            in the same state tried once, cut at the best known, starting
//                            from the greedy packing); more than node_limit nodes over all V
//                            throw resource_limit. For small instances (the authors run an
//                            ILP solver with a 0.5 s limit).
// A V for which no packing fits MaxLen is skipped. When no V of the range fits (the range
// starts at the token bound, which bin packing may not reach), V grows past the range one
// at a time until one fits; V = U (a sequence per micro-batch) always does.
// Errors: invalid_argument for no sequences, a length < 1, a sequence longer than MaxLen
// (naming index, length and MaxLen); infeasible as above; resource_limit (exact).
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/strategy/scheme_profile.hpp>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct pipeline_packing {
  std::vector<std::vector<std::int64_t>> micro_batches;  //!< indices into the lengths
  double slowest_seconds = 0;                            //!< max over micro-batches of T
  double seconds = 0;                                    //!< (PP - 1 + V) x slowest_seconds
  [[nodiscard]] int count() const noexcept { return static_cast<int>(micro_batches.size()); }
};

//! A packing policy for one pipeline.
template <class K>
concept pipeline_packing_policy = requires(const K& k, const scheme_profile& p, std::span<const token_count> lengths) {
  { k.pack(p, lengths) } -> std::same_as<pipeline_packing>;
};

//! The V values Appendix D's range allows (see the file comment), ascending.
[[nodiscard]] inline std::vector<int> micro_batch_counts(const scheme_profile& p, std::span<const token_count> lengths) {
  ZEPPELIN_EXPECTS(!lengths.empty(), "a pipeline packing needs at least one sequence", {});
  long double total = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    ZEPPELIN_EXPECTS(lengths[i] >= 1, "a sequence needs at least 1 token", {{"index", double(i)}, {"length", double(lengths[i])}});
    ZEPPELIN_EXPECTS(lengths[i] <= p.max_len, "a sequence is longer than the pipeline's MaxLen",
                     {{"index", double(i)}, {"length", double(lengths[i])}, {"max_len", double(p.max_len)}});
    total += static_cast<long double>(lengths[i]);
  }
  const auto u = static_cast<long long>(lengths.size());
  const long long lo = std::max<long long>(1, static_cast<long long>(std::ceil(total / static_cast<long double>(p.max_len))));
  long long hi = std::min<long long>(u, static_cast<long long>(std::floor(total / static_cast<long double>(std::max<token_count>(p.util_len, 1)))));
  hi = std::max(hi, lo);
  std::vector<int> out;
  constexpr long long most = 16;
  if (hi - lo + 1 <= most) {
    for (long long v = lo; v <= hi; ++v) out.push_back(static_cast<int>(v));
  } else {
    for (long long k = 0; k < most; ++k) out.push_back(static_cast<int>(lo + (hi - lo) * k / (most - 1)));
  }
  return out;
}

//! The pipeline_packing of given micro-batches (indices into `lengths`): each one's T, the
//! slowest, and (PP - 1 + V) x the slowest. The one place that prices a packing: the
//! policies below and the homogeneous baseline (strategy/homogeneous_baseline.hpp) use it.
[[nodiscard]] inline pipeline_packing packing_of(const scheme_profile& p, std::vector<std::vector<std::int64_t>> micro_batches,
                                                 std::span<const token_count> lengths) {
  pipeline_packing out;
  out.micro_batches = std::move(micro_batches);
  std::vector<token_count> own;
  for (const auto& mb : out.micro_batches) {
    own.clear();
    for (const std::int64_t i : mb) own.push_back(lengths[static_cast<std::size_t>(i)]);
    out.slowest_seconds = std::max(out.slowest_seconds, p.micro_batch_seconds(own));
  }
  out.seconds = (p.scheme.pp - 1 + out.count()) * out.slowest_seconds;
  return out;
}

namespace detail {

struct packing_bins {
  std::vector<double> seconds;         // T of each micro-batch (c included once non-empty)
  std::vector<token_count> tokens;
  std::vector<std::vector<std::int64_t>> members;
};


// Greedy placement plus local improvement for V micro-batches; nullopt if some sequence
// fits in no micro-batch.
inline std::optional<packing_bins> greedy_bins(const scheme_profile& p, std::span<const token_count> lengths, int v) {
  std::vector<std::int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int64_t x, std::int64_t y) { return lengths[static_cast<std::size_t>(x)] > lengths[static_cast<std::size_t>(y)]; });
  packing_bins b{std::vector<double>(static_cast<std::size_t>(v), 0), std::vector<token_count>(static_cast<std::size_t>(v), 0),
                 std::vector<std::vector<std::int64_t>>(static_cast<std::size_t>(v))};
  const auto cost = [&](std::int64_t i) { return p.sequence_seconds(lengths[static_cast<std::size_t>(i)]); };
  const auto add = [&](std::size_t j, std::int64_t i) {
    if (b.members[j].empty()) b.seconds[j] += p.latency.c;
    b.members[j].push_back(i);
    b.seconds[j] += cost(i);
    b.tokens[j] += lengths[static_cast<std::size_t>(i)];
  };
  // each sequence to the fastest micro-batch it fits in (ties: the lowest index): a walk in
  // (T, index) order that skips only the micro-batches too full for it, usually none
  std::set<std::pair<double, std::size_t>> by_time;
  for (std::size_t j = 0; j < b.seconds.size(); ++j) by_time.emplace(0.0, j);
  for (const std::int64_t i : order) {
    const token_count l = lengths[static_cast<std::size_t>(i)];
    auto it = by_time.begin();
    while (it != by_time.end() && b.tokens[it->second] + l > p.max_len) ++it;
    if (it == by_time.end()) return std::nullopt;
    const std::size_t j = it->second;
    by_time.erase(it);
    add(j, i);
    by_time.emplace(b.seconds[j], j);
  }
  // Local improvement: move or swap a sequence out of the slowest micro-batch while that
  // lowers the larger of the two micro-batches involved below the slowest.
  for (int round = 0; round < 4 * static_cast<int>(lengths.size()) + 16; ++round) {
    const auto slowest = static_cast<std::size_t>(std::max_element(b.seconds.begin(), b.seconds.end()) - b.seconds.begin());
    const double top = b.seconds[slowest];
    bool improved = false;
    for (std::size_t a = 0; a < b.members[slowest].size() && !improved; ++a) {
      const std::int64_t x = b.members[slowest][a];
      const token_count lx = lengths[static_cast<std::size_t>(x)];
      for (std::size_t j = 0; j < b.seconds.size() && !improved; ++j) {
        if (j == slowest) continue;
        const double cj = b.members[j].empty() ? p.latency.c : 0.0;
        const double left = b.members[slowest].size() == 1 ? 0.0 : b.seconds[slowest] - cost(x);
        // move x to j
        if (b.tokens[j] + lx <= p.max_len && std::max(left, b.seconds[j] + cj + cost(x)) < top) {
          b.members[slowest].erase(b.members[slowest].begin() + static_cast<std::ptrdiff_t>(a));
          b.seconds[slowest] = left;
          b.tokens[slowest] -= lx;
          add(j, x);
          improved = true;
          break;
        }
        // swap x with a cheaper y of j
        for (std::size_t c = 0; c < b.members[j].size(); ++c) {
          const std::int64_t y = b.members[j][c];
          const token_count ly = lengths[static_cast<std::size_t>(y)];
          const double delta = cost(x) - cost(y);
          if (delta <= 0 || b.tokens[slowest] - lx + ly > p.max_len || b.tokens[j] - ly + lx > p.max_len) continue;
          if (std::max(b.seconds[slowest] - delta, b.seconds[j] + delta) >= top) continue;
          std::swap(b.members[slowest][a], b.members[j][c]);
          b.seconds[slowest] -= delta, b.seconds[j] += delta;
          b.tokens[slowest] += ly - lx, b.tokens[j] += lx - ly;
          improved = true;
          break;
        }
      }
    }
    if (!improved) break;
  }
  // drop emptied micro-batches (a move can empty one); V counts the non-empty ones
  for (std::size_t j = b.members.size(); j-- > 0;)
    if (b.members[j].empty()) {
      b.members.erase(b.members.begin() + static_cast<std::ptrdiff_t>(j));
      b.seconds.erase(b.seconds.begin() + static_cast<std::ptrdiff_t>(j));
      b.tokens.erase(b.tokens.begin() + static_cast<std::ptrdiff_t>(j));
    }
  return b;
}

// A lower bound on the latency of any packing of `lengths` into exactly v micro-batches:
// (PP - 1 + v) x the slowest micro-batch, which is at least the mean (total work / v + c)
// and, when no sequence's share is negative, at least the one holding the longest sequence.
class packing_latency_floor {
 public:
  packing_latency_floor(const scheme_profile& p, std::span<const token_count> lengths) : p_(&p) {
    token_count longest = 0;
    bool nonnegative = true;
    for (const token_count l : lengths) {
      const double share = p.sequence_seconds(l);
      work_ += share;
      nonnegative = nonnegative && share >= 0;
      longest = std::max(longest, l);
    }
    longest_seconds_ = nonnegative ? p.sequence_seconds(longest) + p.latency.c : 0.0;
  }
  [[nodiscard]] double operator()(int v) const noexcept {
    return (p_->scheme.pp - 1 + v) * std::max(work_ / v + p_->latency.c, longest_seconds_);
  }

 private:
  const scheme_profile* p_;
  double work_ = 0;
  double longest_seconds_ = 0;
};

// The best packing over micro_batch_counts (ties: the smaller V), then past the range
// until one fits. pack_with(v) returns the policy's packing into exactly v micro-batches or
// nullopt (greedy_bins fills all v: the first v sequences each open an empty one, and no
// move takes a micro-batch's last sequence, which would not lower the slowest; the exact
// search keeps only packings with v non-empty). The counts are tried in order of
// packing_latency_floor, and a count whose floor is above the best packing found is not
// packed (it cannot beat it): the same result as packing every count, for a fraction of
// the work when the pipeline holds many sequences.
template <class PackWith>
pipeline_packing best_over_counts(const scheme_profile& p, std::span<const token_count> lengths, PackWith&& pack_with) {
  std::vector<int> counts = micro_batch_counts(p, lengths);
  const packing_latency_floor floor(p, lengths);
  std::stable_sort(counts.begin(), counts.end(), [&](int x, int y) { return floor(x) < floor(y); });
  std::optional<pipeline_packing> best;
  int best_count = 0;
  for (const int v : counts) {
    // the slack keeps a count whose packing could tie the best up to rounding
    if (best && floor(v) * (1 - 1e-9) > best->seconds) break;
    std::optional<pipeline_packing> candidate = pack_with(v);
    if (!candidate) continue;
    if (!best || candidate->seconds < best->seconds || (candidate->seconds == best->seconds && v < best_count)) {
      best = std::move(candidate);
      best_count = v;
    }
  }
  for (int v = counts.back() + 1; !best && v <= static_cast<int>(lengths.size()); ++v) best = pack_with(v);
  if (!best) {
    const token_count total = std::accumulate(lengths.begin(), lengths.end(), token_count{0});
    ZEPPELIN_THROW(infeasible, "no packing of the pipeline's sequences fits MaxLen",
                   {{"tokens", double(total)}, {"max_len", double(p.max_len)}, {"sequences", double(lengths.size())}});
  }
  return std::move(*best);
}

}  // namespace detail

//! Greedy packing with local improvement over the pruned V range (see the file comment).
struct greedy_pipeline_packing {
  [[nodiscard]] pipeline_packing pack(const scheme_profile& p, std::span<const token_count> lengths) const {
    return detail::best_over_counts(p, lengths, [&](int v) -> std::optional<pipeline_packing> {
      std::optional<detail::packing_bins> bins = detail::greedy_bins(p, lengths, v);
      if (!bins) return std::nullopt;
      return packing_of(p, std::move(bins->members), lengths);
    });
  }
  friend bool operator==(const greedy_pipeline_packing&, const greedy_pipeline_packing&) = default;
};
static_assert(pipeline_packing_policy<greedy_pipeline_packing>);

//! Eq. 1 to optimality per V by branch and bound (see the file comment).
struct exact_pipeline_packing {
  std::int64_t node_limit = 2'000'000;

  [[nodiscard]] pipeline_packing pack(const scheme_profile& p, std::span<const token_count> lengths) const {
    ZEPPELIN_EXPECTS(node_limit >= 1, "the exact packing needs a positive node limit", {{"node_limit", double(node_limit)}});
    std::int64_t nodes = 0;
    return detail::best_over_counts(p, lengths, [&](int v) -> std::optional<pipeline_packing> {
      search s{p, lengths, v, node_limit, nodes};
      if (std::optional<detail::packing_bins> start = detail::greedy_bins(p, lengths, v); start && static_cast<int>(start->members.size()) == v) {
        s.best = *std::max_element(start->seconds.begin(), start->seconds.end());
        s.best_bins = std::move(*start);
      }
      s.run();
      if (s.best_bins.members.empty()) return std::nullopt;  // no packing into exactly v micro-batches
      return packing_of(p, std::move(s.best_bins.members), lengths);
    });
  }
  friend bool operator==(const exact_pipeline_packing&, const exact_pipeline_packing&) = default;

 private:
  // Exactly v non-empty micro-batches minimising the slowest T.
  struct search {
    const scheme_profile& p;
    std::span<const token_count> lengths;
    int v;
    std::int64_t node_limit;
    std::int64_t& nodes;
    double best = std::numeric_limits<double>::infinity();
    detail::packing_bins best_bins{};
    std::vector<std::int64_t> order{};
    detail::packing_bins bins{};

    void run() {
      order.resize(lengths.size());
      std::iota(order.begin(), order.end(), std::int64_t{0});
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t x, std::int64_t y) {
        return lengths[static_cast<std::size_t>(x)] > lengths[static_cast<std::size_t>(y)];
      });
      bins = {std::vector<double>(static_cast<std::size_t>(v), 0), std::vector<token_count>(static_cast<std::size_t>(v), 0),
              std::vector<std::vector<std::int64_t>>(static_cast<std::size_t>(v))};
      place(0, 0, 0);
    }
    void place(std::size_t k, double top, int used) {
      if (++nodes > node_limit)
        ZEPPELIN_THROW(resource_limit, "the exact pipeline packing exceeded its node limit",
                       {{"sequences", double(lengths.size())}, {"micro_batches", double(v)}, {"node_limit", double(node_limit)}});
      const auto left = static_cast<int>(order.size() - k);
      if (v - used > left) return;  // too few sequences left to fill every micro-batch
      if (k == order.size()) {
        if (top < best) best = top, best_bins = bins;
        return;
      }
      const std::int64_t i = order[k];
      const token_count l = lengths[static_cast<std::size_t>(i)];
      const double cost = p.sequence_seconds(l);
      for (std::size_t j = 0; j < bins.seconds.size(); ++j) {
        if (bins.tokens[j] + l > p.max_len) continue;
        bool seen = false;
        for (std::size_t e = 0; e < j && !seen; ++e) seen = bins.tokens[e] == bins.tokens[j] && bins.seconds[e] == bins.seconds[j];
        if (seen) continue;
        const bool opens = bins.members[j].empty();
        const double next_seconds = bins.seconds[j] + cost + (opens ? p.latency.c : 0.0);
        const double next = std::max(top, next_seconds);
        if (next >= best) continue;
        const double saved = bins.seconds[j];
        bins.seconds[j] = next_seconds;
        bins.tokens[j] += l;
        bins.members[j].push_back(i);
        place(k + 1, next, used + (opens ? 1 : 0));
        bins.members[j].pop_back();
        bins.tokens[j] -= l;
        bins.seconds[j] = saved;
      }
    }
  };
};
static_assert(pipeline_packing_policy<exact_pipeline_packing>);

ZEPPELIN_NAMESPACE_END
