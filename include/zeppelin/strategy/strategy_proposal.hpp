// zeppelin/strategy/strategy_proposal.hpp
// Hydraulis' strategy proposal (section 7): a dynamic program over GPUs and sequence
// lengths that proposes the heterogeneous strategies S = sum_i d_i x P_i worth trying, one
// per longest length an iteration may have.
//   in : scheme profiles (strategy/scheme_profile.hpp), the cluster's GPUs N, a sample of
//        the dataset's sequence lengths, proposal_options (the length grid)
//   out: strategy_dp: t[n][g], the least latency of the sample's sequences up to length
//        cell g on at most n GPUs, and the strategy reaching it; propose_strategies: the
//        distinct S[N][g] for every g, then the best homogeneous strategy
// Lengths are grouped into cells of `length_step` tokens; only cells holding a sequence
// count (g = 1..cells(), cell g's longest sequence is cell_max(g)). Each pipeline kind
// serves one interval of cells: d pipelines of scheme k take the sequences of cells
// (g', g] when MaxLen(P_k) >= cell_max(g), and their latency is the lower bound of
// strategy/dispatch.hpp (Hydraulis' Eq. 2 with the micro-batches MaxLen forces) shared over
// the d pipelines:
//   cost = max((a S2 + b S1) / d + c + (PP_k - 1) T_k(m), (PP_k - 1 + ceil(S1 / (d MaxLen_k))) T_k(m))
// (S1, S2: sums of l and l^2 over the interval per iteration of the sample (options.
// sample_iterations); m = cell_max(g); one micro-batch's
// constant; the bubble of the longest sequence, the term the authors' code adds). Then
//   t[n][0] = 0, t[0][g > 0] = infinity,
//   t[n][g] = min(t[n - 1][g], min over (k, d: d N(P_k) <= n), g' < g of
//                 max(t[n - d N(P_k)][g'], cost_k(g', g, d))).
// The paper relaxes d to steps of 0.1 and rounds; here d is an integer (as in the authors'
// code), so every strategy is realisable as proposed. t[m][g'] does not decrease with g' and
// the cost does not increase with g', so the inner minimum is found by binary search:
// O(N G sum_k (N / N(P_k)) log G) time for G cells, O(N G) memory.
// Errors: invalid_argument for N < 1, length_step < 1, an empty sample or a length < 1, or
// a scheme list that is empty; infeasible (from propose_strategies) when no scheme holds
// the sample's longest sequence, naming it and the largest MaxLen.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/strategy/scheme_profile.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! d pipelines of one scheme.
struct strategy_part {
  scheme_profile profile;
  int pipelines = 0;
  friend bool operator==(const strategy_part&, const strategy_part&) = default;
};

//! A (heterogeneous) strategy: pipelines of one or more schemes, sorted by scheme.
struct strategy {
  std::vector<strategy_part> parts;
  double predicted_seconds = 0;  //!< the proposal's estimate for the sample it was made for

  [[nodiscard]] long long gpus() const noexcept {
    long long g = 0;
    for (const strategy_part& p : parts) g += p.pipelines * p.profile.scheme.gpus();
    return g;
  }
  [[nodiscard]] int pipelines() const noexcept {
    int n = 0;
    for (const strategy_part& p : parts) n += p.pipelines;
    return n;
  }
  //! The same pipelines (predicted_seconds aside).
  [[nodiscard]] bool same_pipelines(const strategy& o) const noexcept { return parts == o.parts; }
};

struct proposal_options {
  token_count length_step = 128;  //!< grid cell (the authors: 128; 1024 at 1024 GPUs)
  //! Iterations' worth of sequences the sample holds: the DP prices ONE iteration, so the
  //! sample's sums are divided by this. A larger sample sees more of the long tail; without
  //! the division its work would swamp the per-iteration terms (c, the bubble).
  double sample_iterations = 1;
};

class strategy_dp {
 public:
  strategy_dp(std::span<const scheme_profile> schemes, long long gpus, std::span<const token_count> sample, const proposal_options& options = {})
      : schemes_(schemes.begin(), schemes.end()), gpus_(gpus) {
    check_strategy_gpus(gpus);
    ZEPPELIN_EXPECTS(options.length_step >= 1, "the length step must be >= 1 token", {{"length_step", double(options.length_step)}});
    ZEPPELIN_EXPECTS(options.sample_iterations > 0 && std::isfinite(options.sample_iterations),
                     "the sample must hold a positive, finite number of iterations", {{"sample_iterations", options.sample_iterations}});
    ZEPPELIN_EXPECTS(!sample.empty(), "the strategy proposal needs a sample of sequence lengths", {});
    ZEPPELIN_EXPECTS(!schemes_.empty(), "the strategy proposal needs at least one scheme", {});
    build_cells(sample, options.length_step, options.sample_iterations);
    run();
  }

  [[nodiscard]] int cells() const noexcept { return static_cast<int>(cell_max_.size()) - 1; }
  //! The longest sample length in cells 1..g (g >= 1).
  [[nodiscard]] token_count cell_max(int g) const { return cell_max_.at(static_cast<std::size_t>(g)); }
  //! t[n][g]: seconds; infinity when no strategy on n GPUs holds cells 1..g.
  [[nodiscard]] double latency(long long n, int g) const { return t_.at(index(n, g)); }

  //! The strategy reaching t[n][g] (empty parts when g = 0 or it is infinite).
  [[nodiscard]] strategy strategy_at(long long n, int g) const {
    strategy s;
    s.predicted_seconds = latency(n, g);
    if (s.predicted_seconds == infinity) return s;
    std::vector<int> count(schemes_.size(), 0);
    while (g > 0) {
      const choice c = choice_[index(n, g)];
      if (c.scheme < 0) {
        --n;
        continue;
      }
      count[static_cast<std::size_t>(c.scheme)] += c.pipelines;
      n -= c.pipelines * schemes_[static_cast<std::size_t>(c.scheme)].scheme.gpus();
      g = c.from;
    }
    for (std::size_t k = 0; k < schemes_.size(); ++k)
      if (count[k] > 0) s.parts.push_back({schemes_[k], count[k]});
    std::sort(s.parts.begin(), s.parts.end(), [](const strategy_part& x, const strategy_part& y) { return x.profile.scheme < y.profile.scheme; });
    return s;
  }

  //! The interval cost of the file comment: d pipelines of scheme k on cells (from, g].
  [[nodiscard]] double interval_cost(std::size_t k, int d, int from, int g) const {
    const scheme_profile& p = schemes_[k];
    const double s1 = sum1_[static_cast<std::size_t>(g)] - sum1_[static_cast<std::size_t>(from)];
    const double s2 = sum2_[static_cast<std::size_t>(g)] - sum2_[static_cast<std::size_t>(from)];
    const double slowest = p.latency.at(static_cast<double>(cell_max(g)));
    const double forced = std::ceil(s1 / (static_cast<double>(d) * static_cast<double>(std::max<token_count>(p.max_len, 1))));
    return std::max((p.latency.a * s2 + p.latency.b * s1) / d + p.latency.c + (p.scheme.pp - 1) * slowest,
                    (p.scheme.pp - 1 + forced) * slowest);
  }

  static constexpr double infinity = std::numeric_limits<double>::infinity();

 private:
  struct choice {
    int scheme = -1;  // -1: t[n - 1][g]
    int pipelines = 0;
    int from = 0;
  };

  [[nodiscard]] std::size_t index(long long n, int g) const {
    ZEPPELIN_EXPECTS(n >= 0 && n <= gpus_ && g >= 0 && g <= cells(), "a strategy table index is out of range",
                     {{"n", double(n)}, {"g", double(g)}, {"gpus", double(gpus_)}, {"cells", double(cells())}});
    return slot(n, g);
  }
  [[nodiscard]] std::size_t slot(long long n, int g) const noexcept {
    return static_cast<std::size_t>(n) * static_cast<std::size_t>(cells() + 1) + static_cast<std::size_t>(g);
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

  void run() {
    const int G = cells();
    t_.assign(static_cast<std::size_t>(gpus_ + 1) * static_cast<std::size_t>(G + 1), infinity);
    choice_.assign(t_.size(), choice{});
    t_[slot(0, 0)] = 0;
    for (long long n = 1; n <= gpus_; ++n) {
      t_[slot(n, 0)] = 0;
      for (int g = 1; g <= G; ++g) {
        double best = t_[slot(n - 1, g)];
        choice pick{};
        for (std::size_t k = 0; k < schemes_.size(); ++k) {
          const scheme_profile& p = schemes_[k];
          if (p.max_len < cell_max(g)) continue;
          const long long size = p.scheme.gpus();
          for (int d = 1; static_cast<long long>(d) * size <= n; ++d) {
            const long long m = n - d * size;
            // lowest g' in [0, g - 1] with t[m][g'] >= cost(g', g, d)
            int lo = 0, hi = g;  // hi: none found yet
            while (lo < hi) {
              const int mid = (lo + hi) / 2;
              if (t_[slot(m, mid)] >= interval_cost(k, d, mid, g))
                hi = mid;
              else
                lo = mid + 1;
            }
            const auto consider = [&](int from, double value) {
              if (value < best) best = value, pick = {static_cast<int>(k), d, from};
            };
            if (lo < g) consider(lo, t_[slot(m, lo)]);
            if (lo > 0) consider(lo - 1, interval_cost(k, d, lo - 1, g));
          }
        }
        t_[slot(n, g)] = best;
        choice_[slot(n, g)] = pick;
      }
    }
  }

  std::vector<scheme_profile> schemes_;
  long long gpus_;
  std::vector<token_count> cell_max_;  // [0] = 0
  std::vector<double> sum1_, sum2_;     // prefix sums over cells
  std::vector<double> t_;
  std::vector<choice> choice_;
};

//! Hydraulis' candidate set: the distinct S[N][g] for g = 1..cells (strategies for
//! iterations whose longest sequence lies in cell g), then the best homogeneous strategy
//! (the scheme and floor(N / N(P)) pipelines of least interval cost over the whole sample)
//! unless already present. Throws infeasible when no scheme holds the longest sequence.
[[nodiscard]] inline std::vector<strategy> propose_strategies(std::span<const scheme_profile> schemes, long long gpus,
                                                              std::span<const token_count> sample, const proposal_options& options = {}) {
  const strategy_dp dp(schemes, gpus, sample, options);
  const int G = dp.cells();
  std::vector<strategy> out;
  for (int g = 1; g <= G; ++g) {
    strategy s = dp.strategy_at(gpus, g);
    if (s.parts.empty()) continue;
    if (std::none_of(out.begin(), out.end(), [&](const strategy& o) { return o.same_pipelines(s); })) out.push_back(std::move(s));
  }
  strategy homogeneous;
  homogeneous.predicted_seconds = strategy_dp::infinity;
  for (std::size_t k = 0; k < schemes.size(); ++k) {
    const long long d = gpus / schemes[k].scheme.gpus();
    if (schemes[k].max_len < dp.cell_max(G) || d < 1) continue;
    const double cost = dp.interval_cost(k, static_cast<int>(std::min<long long>(d, std::numeric_limits<int>::max())), 0, G);
    if (cost < homogeneous.predicted_seconds)
      homogeneous = {{{schemes[k], static_cast<int>(d)}}, cost};
  }
  if (homogeneous.parts.empty()) {
    token_count largest = 0;
    for (const scheme_profile& p : schemes) largest = std::max(largest, p.max_len);
    ZEPPELIN_THROW(infeasible, "no parallel scheme holds the longest sequence",
                   {{"longest", double(dp.cell_max(G))}, {"largest_max_len", double(largest)}});
  }
  if (std::none_of(out.begin(), out.end(), [&](const strategy& o) { return o.same_pipelines(homogeneous); })) out.push_back(homogeneous);
  return out;
}

ZEPPELIN_NAMESPACE_END
