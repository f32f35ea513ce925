// zeppelin/strategy/detail/strategy_cells.hpp
// The problem Hydraulis' strategy proposal solves (section 7), shared by its two exact
// searches (gpu_table_search.hpp, threshold_search.hpp).
//   in : scheme profiles, the cluster's GPUs N, a sample of sequence lengths, the length
//        grid (cells of `length_step` tokens; only cells holding a sequence count) and the
//        iterations the sample holds
//   out: cells 1..G (cell g's longest sequence is cell_max(g)), the interval cost
//          cost_k(g', g, d) = max(W / d + c + (PP_k - 1) T_k(m), (PP_k - 1 + ceil(S1 / (d MaxLen_k))) T_k(m))
//        of d pipelines of scheme k serving the sequences of cells (g', g] (W = a S2 + b S1,
//        S1 and S2 the sums of l and l^2 over the interval per iteration, m = cell_max(g)),
//        and strategy_solution, what a search returns: per g, t[g] (the least largest
//        interval cost over partitions of cells 1..g into intervals, each with d >= 1
//        pipelines of one scheme whose MaxLen holds its longest sequence, using at most N
//        GPUs in all) and the intervals reaching it.
// The cost does not increase with d nor decrease as an interval grows at either end: both
// searches rely on it. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/strategy/parallel_scheme.hpp>
#include <zeppelin/strategy/scheme_profile.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

//! d pipelines of scheme `scheme` serving cells (from, to].
struct strategy_interval {
  int scheme = 0;
  long long pipelines = 0;
  int from = 0;
  int to = 0;
  friend bool operator==(const strategy_interval&, const strategy_interval&) = default;
};

//! What a search returns: t[g] for g = 0..G (t[0] = 0; infinity when no strategy holds
//! cells 1..g) and, per g, the intervals of a strategy reaching it (last interval first).
struct strategy_solution {
  std::vector<double> latency;
  std::vector<std::vector<strategy_interval>> intervals;
};

class strategy_cells {
 public:
  static constexpr double infinity = std::numeric_limits<double>::infinity();

  strategy_cells(std::span<const scheme_profile> schemes, long long gpus, std::span<const token_count> sample, token_count length_step,
                 double sample_iterations)
      : schemes_(schemes.begin(), schemes.end()), gpus_(gpus) {
    check_strategy_gpus(gpus);
    ZEPPELIN_EXPECTS(length_step >= 1, "the length step must be >= 1 token", {{"length_step", double(length_step)}});
    ZEPPELIN_EXPECTS(sample_iterations > 0 && std::isfinite(sample_iterations), "the sample must hold a positive, finite number of iterations",
                     {{"sample_iterations", sample_iterations}});
    ZEPPELIN_EXPECTS(!sample.empty(), "the strategy proposal needs a sample of sequence lengths", {});
    ZEPPELIN_EXPECTS(!schemes_.empty(), "the strategy proposal needs at least one scheme", {});
    build_cells(sample, length_step, sample_iterations);
    build_terms();
  }

  [[nodiscard]] long long gpus() const noexcept { return gpus_; }
  [[nodiscard]] int cells() const noexcept { return static_cast<int>(cell_max_.size()) - 1; }
  [[nodiscard]] std::size_t schemes() const noexcept { return schemes_.size(); }
  [[nodiscard]] const scheme_profile& scheme(std::size_t k) const noexcept { return schemes_[k]; }
  [[nodiscard]] token_count cell_max(int g) const noexcept { return cell_max_[static_cast<std::size_t>(g)]; }
  //! Whether scheme k's MaxLen holds cell g's longest sequence.
  [[nodiscard]] bool holds(std::size_t k, int g) const noexcept { return schemes_[k].max_len >= cell_max(g); }
  //! The most pipelines of scheme k the GPUs hold.
  [[nodiscard]] long long most_pipelines(std::size_t k) const noexcept { return gpus_ / schemes_[k].scheme.gpus(); }
  //! PP_k x T_k(cell_max(g)): no interval of scheme k ending at g costs less.
  [[nodiscard]] double least_cost(std::size_t k, int g) const noexcept {
    return schemes_[k].scheme.pp * slowest_[term(k, g)];
  }

  //! cost_k(from, g, d) of the file comment (0 <= from < g <= G, d >= 1).
  [[nodiscard]] double cost(std::size_t k, long long d, int from, int g) const noexcept { return interval(k, from, g).cost(d); }

  //! The fewest pipelines d in [1, most_pipelines(k)] with cost(k, d, from, g) <= T, or 0
  //! when none. Each term of the cost is a correctly rounded monotone function of d, so the
  //! closed-form estimate from the two terms is corrected by a search on the cost itself.
  [[nodiscard]] long long fewest_pipelines(std::size_t k, int from, int g, double T) const noexcept {
    const interval_terms c = interval(k, from, g);
    const long long cap = most_pipelines(k);
    if (cap < 1) return 0;
    const double room = T - c.fixed;
    const double batches = std::floor(T / c.slowest - (c.pp - 1));
    double estimate = 1;
    if (room > 0) estimate = std::max(estimate, std::ceil(c.work / room));
    if (batches >= 1) estimate = std::max(estimate, std::ceil(c.tokens / (batches * c.max_len)));
    if (!(estimate < static_cast<double>(cap))) {
      if (c.cost(cap) > T) return 0;
      estimate = static_cast<double>(cap);
    }
    const auto d = static_cast<long long>(estimate);
    long long lo = 0, hi = cap;  // cost(lo) > T (0: below the range), cost(hi) <= T
    if (c.cost(d) <= T) {
      if (d == 1 || c.cost(d - 1) > T) return d;
      hi = d - 1;
    } else {
      if (d == cap) return 0;
      if (c.cost(d + 1) <= T) return d + 1;
      lo = d + 1;
      if (c.cost(cap) > T) return 0;
    }
    while (hi - lo > 1) {
      const long long mid = lo + (hi - lo) / 2;
      (c.cost(mid) <= T ? hi : lo) = mid;
    }
    return hi;
  }

  //! The largest cost of `intervals` (0 when empty).
  [[nodiscard]] double top(std::span<const strategy_interval> intervals) const noexcept {
    double t = 0;
    for (const strategy_interval& i : intervals) t = std::max(t, cost(static_cast<std::size_t>(i.scheme), i.pipelines, i.from, i.to));
    return t;
  }
  //! The GPUs `intervals` use.
  [[nodiscard]] long long gpus_of(std::span<const strategy_interval> intervals) const noexcept {
    long long n = 0;
    for (const strategy_interval& i : intervals) n += i.pipelines * schemes_[static_cast<std::size_t>(i.scheme)].scheme.gpus();
    return n;
  }

 private:
  // One interval's terms: cost(d) = max(work / d + fixed, (pp - 1 + ceil(tokens / (d max_len))) slowest).
  struct interval_terms {
    double tokens, work, fixed, slowest, max_len;
    int pp;
    [[nodiscard]] double cost(long long d) const noexcept {
      const auto x = static_cast<double>(d);
      return std::max(work / x + fixed, (pp - 1 + std::ceil(tokens / (x * max_len))) * slowest);
    }
  };
  [[nodiscard]] interval_terms interval(std::size_t k, int from, int g) const noexcept {
    const scheme_profile& p = schemes_[k];
    const double s1 = sum1_[static_cast<std::size_t>(g)] - sum1_[static_cast<std::size_t>(from)];
    return {s1, p.latency.a * (sum2_[static_cast<std::size_t>(g)] - sum2_[static_cast<std::size_t>(from)]) + p.latency.b * s1,
            fixed_[term(k, g)], slowest_[term(k, g)], static_cast<double>(std::max<token_count>(p.max_len, 1)), p.scheme.pp};
  }

  [[nodiscard]] std::size_t term(std::size_t k, int g) const noexcept {
    return k * static_cast<std::size_t>(cells() + 1) + static_cast<std::size_t>(g);
  }

  void build_cells(std::span<const token_count> sample, token_count step, double iterations) {
    std::vector<token_count> sorted(sample.begin(), sample.end());
    std::sort(sorted.begin(), sorted.end());
    ZEPPELIN_EXPECTS(sorted.front() >= 1, "a sequence needs at least 1 token", {{"length", double(sorted.front())}});
    cell_max_.assign(1, 0);
    sum1_.assign(1, 0);
    sum2_.assign(1, 0);
    std::int64_t current = -1;
    for (const token_count l : sorted) {
      const std::int64_t cell = (l + step - 1) / step;
      if (cell != current) {
        current = cell;
        cell_max_.push_back(l);
        sum1_.push_back(sum1_.back());
        sum2_.push_back(sum2_.back());
      }
      cell_max_.back() = l;
      const auto x = static_cast<double>(l);
      sum1_.back() += x / iterations;
      sum2_.back() += x * x / iterations;
    }
  }

  // Per (scheme, cell): the slowest micro-batch T_k(cell_max) and the fixed part of the work
  // term, c + (PP_k - 1) T_k(cell_max).
  void build_terms() {
    slowest_.resize(schemes_.size() * static_cast<std::size_t>(cells() + 1));
    fixed_.resize(slowest_.size());
    for (std::size_t k = 0; k < schemes_.size(); ++k)
      for (int g = 0; g <= cells(); ++g) {
        const scheme_profile& p = schemes_[k];
        slowest_[term(k, g)] = p.latency.at(static_cast<double>(cell_max(g)));
        fixed_[term(k, g)] = p.latency.c + (p.scheme.pp - 1) * slowest_[term(k, g)];
      }
  }

  std::vector<scheme_profile> schemes_;
  long long gpus_;
  std::vector<token_count> cell_max_;    // [0] = 0
  std::vector<double> sum1_, sum2_;       // prefix sums over cells, per iteration
  std::vector<double> slowest_, fixed_;  // per (scheme, cell)
};

}  // namespace detail

ZEPPELIN_NAMESPACE_END
