// zeppelin/strategy/strategy_proposal.hpp
// Hydraulis' strategy proposal (section 7): the heterogeneous strategies S = sum_i d_i x P_i
// worth trying, one per longest length an iteration may have.
//   in : scheme profiles (strategy/scheme_profile.hpp), the cluster's GPUs N, a sample of
//        the dataset's sequence lengths, proposal_options (the length grid)
//   out: strategy_dp: t[g], the least latency of the sample's sequences up to length cell g
//        on at most N GPUs, and the strategy reaching it; propose_strategies: the distinct
//        S[N][g] for every g, then the best homogeneous strategy
// Lengths are grouped into cells of `length_step` tokens; only cells holding a sequence
// count (g = 1..cells(), cell g's longest sequence is cell_max(g)). Each pipeline kind
// serves one interval of cells: d pipelines of scheme k take the sequences of cells
// (g', g] when MaxLen(P_k) >= cell_max(g), and their latency is the lower bound of
// strategy/dispatch.hpp (Hydraulis' Eq. 2 with the micro-batches MaxLen forces) shared over
// the d pipelines:
//   cost = max((a S2 + b S1) / d + c + (PP_k - 1) T_k(m), (PP_k - 1 + ceil(S1 / (d MaxLen_k))) T_k(m))
// (S1, S2: sums of l and l^2 over the interval per iteration of the sample (options.
// sample_iterations); m = cell_max(g); one micro-batch's constant; the bubble of the longest
// sequence, the term the authors' code adds). t[g] is the least largest cost over partitions
// of cells 1..g into such intervals on at most N GPUs in all (strategy/detail/
// strategy_cells.hpp). The paper relaxes d to steps of 0.1 and rounds; here d is an integer
// (as in the authors' code), so every strategy is realisable as proposed.
// Two exact searches give the same t[g]: the paper's dynamic program over GPU counts
// (strategy/detail/gpu_table_search.hpp, O(N G sum_k (N / N(P_k)) log G), quadratic in N)
// and a search on the largest cost (strategy/detail/threshold_search.hpp, O(G^3 K),
// independent of N); strategy_dp runs the one whose operation count is the smaller, so a
// few hundred GPUs and more take the second.
// Errors: invalid_argument for N outside 1 .. max_strategy_gpus, length_step < 1, an empty
// sample or a length < 1, or a scheme list that is empty; infeasible (from
// propose_strategies) when no scheme holds the sample's longest sequence, naming it and the
// largest MaxLen.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/strategy/detail/gpu_table_search.hpp>
#include <zeppelin/strategy/detail/strategy_cells.hpp>
#include <zeppelin/strategy/detail/threshold_search.hpp>
#include <zeppelin/strategy/scheme_profile.hpp>

#include <algorithm>
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

//! The length grid of the authors' code for N GPUs: 128 tokens, 1024 from 1024 GPUs on. The
//! threshold search takes O(G^3 K) for G cells; the coarser grid keeps it fast at scale.
[[nodiscard]] constexpr token_count authors_length_step(long long gpus) noexcept { return gpus >= 1024 ? 1024 : 128; }

class strategy_dp {
 public:
  strategy_dp(std::span<const scheme_profile> schemes, long long gpus, std::span<const token_count> sample, const proposal_options& options = {})
      : cells_(schemes, gpus, sample, options.length_step, options.sample_iterations),
        solution_(detail::gpu_table_work(cells_) <= detail::threshold_work(cells_) ? detail::gpu_table_search(cells_)
                                                                                   : detail::threshold_search(cells_)) {}

  [[nodiscard]] long long gpus() const noexcept { return cells_.gpus(); }
  [[nodiscard]] int cells() const noexcept { return cells_.cells(); }
  //! The longest sample length in cells 1..g (1 <= g <= cells()).
  [[nodiscard]] token_count cell_max(int g) const {
    check_cell(g, 1);
    return cells_.cell_max(g);
  }
  //! t[g]: the least latency of the sample's sequences in cells 1..g on at most gpus() GPUs,
  //! in seconds; infinity when no strategy holds them; 0 for g = 0.
  [[nodiscard]] double latency(int g) const {
    check_cell(g, 0);
    return solution_.latency[static_cast<std::size_t>(g)];
  }

  //! The strategy reaching t[g] (empty parts when g = 0 or t[g] is infinite).
  [[nodiscard]] strategy strategy_at(int g) const {
    strategy s;
    s.predicted_seconds = latency(g);
    std::vector<int> count(cells_.schemes(), 0);
    for (const detail::strategy_interval& i : solution_.intervals[static_cast<std::size_t>(g)])
      count[static_cast<std::size_t>(i.scheme)] += static_cast<int>(i.pipelines);
    for (std::size_t k = 0; k < cells_.schemes(); ++k)
      if (count[k] > 0) s.parts.push_back({cells_.scheme(k), count[k]});
    std::sort(s.parts.begin(), s.parts.end(), [](const strategy_part& x, const strategy_part& y) { return x.profile.scheme < y.profile.scheme; });
    return s;
  }

  //! The interval cost of the file comment: d pipelines of scheme k on cells (from, g].
  [[nodiscard]] double interval_cost(std::size_t k, long long d, int from, int g) const {
    ZEPPELIN_EXPECTS(k < cells_.schemes() && d >= 1 && from >= 0 && from < g && g <= cells(), "an interval of the strategy table is out of range",
                     {{"scheme", double(k)}, {"pipelines", double(d)}, {"from", double(from)}, {"to", double(g)}, {"cells", double(cells())}});
    return cells_.cost(k, d, from, g);
  }

  static constexpr double infinity = detail::strategy_cells::infinity;

 private:
  void check_cell(int g, int lowest) const {
    ZEPPELIN_EXPECTS(g >= lowest && g <= cells(), "a cell of the strategy table is out of range",
                     {{"cell", double(g)}, {"lowest", double(lowest)}, {"cells", double(cells())}});
  }

  detail::strategy_cells cells_;
  detail::strategy_solution solution_;
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
    strategy s = dp.strategy_at(g);
    if (s.parts.empty()) continue;
    if (std::none_of(out.begin(), out.end(), [&](const strategy& o) { return o.same_pipelines(s); })) out.push_back(std::move(s));
  }
  strategy homogeneous;
  homogeneous.predicted_seconds = strategy_dp::infinity;
  for (std::size_t k = 0; k < schemes.size(); ++k) {
    const long long d = gpus / schemes[k].scheme.gpus();
    if (schemes[k].max_len < dp.cell_max(G) || d < 1) continue;
    const double cost = dp.interval_cost(k, d, 0, G);
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
