// zeppelin/strategy/dispatch.hpp
// Hydraulis' stage 1 of data assignment (section 6.2, Appendix E): dispatch an iteration's
// sequences across the pipelines of a strategy.
//   in : the pipelines (one scheme_profile each; pipelines_of(strategy) lists them longest
//        MaxLen first), the sequences' lengths
//   out: dispatch_result: per pipeline its sequences (indices into the lengths) and the
//        lower bound of its latency, and the largest bound (the makespan)
// A sequence of length l may go to pipeline j when MaxLen(P_j) >= l. The latency of a
// pipeline holding sequences l_i, (PP - 1 + V) x its slowest micro-batch, is bounded below
// by Hydraulis' Eq. 2, tightened by the micro-batches MaxLen forces:
//   LB_j = max(sum_i (a l_i^2 + b l_i) + c + (PP_j - 1) T_j(max_i l_i),
//              (PP_j - 1 + ceil(sum_i l_i / MaxLen_j)) T_j(max_i l_i))      (0 when empty)
// (every sequence's work, at least one micro-batch's constant and the bubble of the longest
// micro-batch, which is at least the longest sequence; and at least ceil(tokens / MaxLen)
// micro-batches, none faster than the longest sequence's). Eq. 2 alone misses the second
// term: a pipeline given more tokens than one micro-batch holds looks cheaper than it is.
// Both policies minimise the largest LB_j:
//   greedy_dispatch  Algorithm 1: `trials` orders of the sequences; in each, the sequences
//                    that only pipeline 1 holds go first (the authors' code), then trial 0
//                    takes the rest longest first and trial t > 0 a random order drawn from
//                    (seed, t) alone; each sequence goes to the allowed pipeline that
//                    minimises the largest bound after placing it (ties: an empty pipeline,
//                    then the lowest index). The best trial wins (ties: the earliest), so
//                    more trials never do worse and the same seed gives the same dispatch.
//                    A trial stops as soon as its largest bound reaches a better trial's
//                    (bounds only grow), and no trial starts once the best reaches
//                    dispatch_lower_bound (none can do better): the result is that of every
//                    trial run to its end. `threads` run trials at once, with the same
//                    result (detail/best_trial.hpp). Trials are capped so that
//                    trials x sequences stays within placement_budget (at least one
//                    trial): each trial is linear in the sequences, and with many
//                    sequences their orders hardly matter (docs/hydraulis.md). The
//                    default 2^20 runs all 100 trials up to 10,485 sequences.
//                    dispatch_within(pipelines, lengths, cutoff) also stops trials above
//                    a cutoff, and returns nullopt when no trial ends within it.
//   exact_dispatch   Eq. 3 solved to optimality by branch and bound (sequences longest
//                    first; pipelines of the same scheme in the same state tried once; cut
//                    at the best known, starting from greedy_dispatch); for small
//                    instances (the authors solve it with an ILP solver: 40 s per 10
//                    iterations at 64 GPUs). More than node_limit nodes throw resource_limit.
// Errors: invalid_argument for no pipelines, a length < 1, trials < 1, threads < 1,
// placement_budget < 1, node_limit < 1;
// infeasible for a sequence no pipeline holds (naming its index, length and the largest
// MaxLen).
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/detail/parallel_for.hpp>
#include <zeppelin/strategy/detail/best_trial.hpp>
#include <zeppelin/strategy/scheme_profile.hpp>
#include <zeppelin/strategy/strategy_proposal.hpp>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! One pipeline per strategy pipeline, longest MaxLen first (ties: scheme order).
[[nodiscard]] inline std::vector<scheme_profile> pipelines_of(const strategy& s) {
  std::vector<scheme_profile> out;
  for (const strategy_part& part : s.parts) out.insert(out.end(), static_cast<std::size_t>(part.pipelines), part.profile);
  std::stable_sort(out.begin(), out.end(), [](const scheme_profile& x, const scheme_profile& y) { return x.max_len > y.max_len; });
  return out;
}

namespace detail {
// LB_j from a pipeline's sum of sequence work, tokens and longest sequence.
inline double lower_bound_of(const scheme_profile& p, double work, token_count tokens, token_count longest) noexcept {
  if (longest == 0) return 0;
  const double slowest = p.latency.at(static_cast<double>(longest));
  const double forced = std::ceil(static_cast<double>(tokens) / static_cast<double>(std::max<token_count>(p.max_len, 1)));
  return std::max(work + p.latency.c + (p.scheme.pp - 1) * slowest, (p.scheme.pp - 1 + forced) * slowest);
}
}  // namespace detail

//! LB_j for a pipeline of `p` holding `lengths` (see the file comment).
[[nodiscard]] inline double pipeline_lower_bound(const scheme_profile& p, std::span<const token_count> lengths) noexcept {
  double work = 0;
  token_count tokens = 0, longest = 0;
  for (const token_count l : lengths) work += p.sequence_seconds(l), tokens += l, longest = std::max(longest, l);
  return detail::lower_bound_of(p, work, tokens, longest);
}

//! A lower bound on the makespan of any dispatch of `lengths` onto `pipelines`, and so on
//! the latency of any plan on them: the largest of
//!   (a) the longest sequence alone on the best pipeline that holds it (a shorter sequence
//!       has more pipelines to choose from and a smaller bound on each);
//!   (b) for every MaxLen level M of the pipelines (next lower level M'), the sequences
//!       longer than M' only fit on the pipelines with MaxLen >= M: their least work there,
//!       spread evenly over those pipelines (LB_j >= the work on j, and the largest is at
//!       least the mean). The lowest level spreads every sequence over every pipeline.
//! Infinity when no pipeline holds the longest sequence; 0 for no sequences. Any pipeline
//! order. O(n x K x levels) for K distinct profiles.
[[nodiscard]] inline double dispatch_lower_bound(std::span<const scheme_profile> pipelines, std::span<const token_count> lengths) {
  if (lengths.empty()) return 0;
  std::vector<const scheme_profile*> kinds;
  std::vector<int> count;  // pipelines per kind
  for (const scheme_profile& p : pipelines) {
    const auto k = std::find_if(kinds.begin(), kinds.end(), [&](const scheme_profile* q) { return *q == p; });
    if (k == kinds.end()) kinds.push_back(&p), count.push_back(1);
    else ++count[static_cast<std::size_t>(k - kinds.begin())];
  }
  const token_count longest = *std::max_element(lengths.begin(), lengths.end());
  double bound = std::numeric_limits<double>::infinity();
  for (const scheme_profile* p : kinds)
    if (p->max_len >= longest) bound = std::min(bound, pipeline_lower_bound(*p, std::span(&longest, 1)));
  if (bound == std::numeric_limits<double>::infinity()) return bound;
  std::vector<token_count> levels;
  for (const scheme_profile* p : kinds) levels.push_back(p->max_len);
  std::sort(levels.begin(), levels.end(), std::greater<>());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  for (std::size_t t = 0; t < levels.size(); ++t) {
    const token_count below = t + 1 < levels.size() ? levels[t + 1] : 0;
    int holders = 0;
    for (std::size_t k = 0; k < kinds.size(); ++k)
      if (kinds[k]->max_len >= levels[t]) holders += count[k];
    double work = 0;
    for (const token_count l : lengths) {
      if (l <= below) continue;
      double least = std::numeric_limits<double>::infinity();
      for (const scheme_profile* p : kinds)
        if (p->max_len >= l) least = std::min(least, p->sequence_seconds(l));
      work += least;
    }
    bound = std::max(bound, work / holders);
  }
  return bound;
}

struct dispatch_result {
  std::vector<std::vector<std::int64_t>> sequences;  //!< per pipeline: indices into the lengths
  std::vector<double> lower_bound;                   //!< LB_j per pipeline
  double makespan = 0;                               //!< max_j LB_j

  [[nodiscard]] bool has_empty_pipeline() const noexcept {
    return std::any_of(sequences.begin(), sequences.end(), [](const auto& s) { return s.empty(); });
  }
};

//! A dispatch policy: sequences onto pipelines.
template <class D>
concept dispatch_policy = requires(const D& d, std::span<const scheme_profile> pipelines, std::span<const token_count> lengths) {
  { d.dispatch(pipelines, lengths) } -> std::same_as<dispatch_result>;
};

//! A dispatch policy that can give up on dispatches whose makespan passes a cutoff.
template <class D>
concept cutoff_dispatch_policy =
    dispatch_policy<D> && requires(const D& d, std::span<const scheme_profile> pipelines, std::span<const token_count> lengths, double cutoff) {
      { d.dispatch_within(pipelines, lengths, cutoff) } -> std::same_as<std::optional<dispatch_result>>;
    };

//! `d`'s dispatch when its makespan is at most `cutoff`, else nullopt: a policy that can give
//! up early does (cutoff_dispatch_policy), any other dispatches in full.
template <dispatch_policy D>
[[nodiscard]] std::optional<dispatch_result> dispatch_within(const D& d, std::span<const scheme_profile> pipelines,
                                                             std::span<const token_count> lengths, double cutoff) {
  if constexpr (cutoff_dispatch_policy<D>) {
    return d.dispatch_within(pipelines, lengths, cutoff);
  } else {
    dispatch_result r = d.dispatch(pipelines, lengths);
    if (r.makespan > cutoff) return std::nullopt;
    return r;
  }
}

namespace detail {

// Pipelines allowed per sequence (a prefix, pipelines sorted by MaxLen descending) and the
// input checks shared by the policies.
inline std::vector<std::size_t> allowed_prefixes(std::span<const scheme_profile> pipelines, std::span<const token_count> lengths) {
  ZEPPELIN_EXPECTS(!pipelines.empty(), "dispatching needs at least one pipeline", {});
  for (std::size_t j = 1; j < pipelines.size(); ++j)
    ZEPPELIN_EXPECTS(pipelines[j - 1].max_len >= pipelines[j].max_len, "pipelines must come longest MaxLen first (pipelines_of)",
                     {{"pipeline", double(j)}, {"max_len", double(pipelines[j].max_len)}, {"previous_max_len", double(pipelines[j - 1].max_len)}});
  std::vector<std::size_t> out(lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    ZEPPELIN_EXPECTS(lengths[i] >= 1, "a sequence needs at least 1 token", {{"index", double(i)}, {"length", double(lengths[i])}});
    const auto j = static_cast<std::size_t>(
        std::partition_point(pipelines.begin(), pipelines.end(), [&](const scheme_profile& p) { return p.max_len >= lengths[i]; }) -
        pipelines.begin());
    if (j == 0)
      ZEPPELIN_THROW(infeasible, "no pipeline of the strategy holds a sequence",
                     {{"index", double(i)}, {"length", double(lengths[i])}, {"largest_max_len", double(pipelines.front().max_len)}});
    out[i] = j;
  }
  return out;
}

// Incremental LB_j of each pipeline while sequences are placed.
class dispatch_state {
 public:
  explicit dispatch_state(std::span<const scheme_profile> pipelines)
      : pipelines_(pipelines), work_(pipelines.size(), 0), tokens_(pipelines.size(), 0), longest_(pipelines.size(), 0) {}
  [[nodiscard]] double bound(std::size_t j) const noexcept { return bound_with(j, 0); }
  //! LB_j if a sequence of `l` tokens (0: none) joined pipeline j.
  [[nodiscard]] double bound_with(std::size_t j, token_count l) const noexcept {
    const scheme_profile& p = pipelines_[j];
    return lower_bound_of(p, work_[j] + p.sequence_seconds(l), tokens_[j] + l, std::max(longest_[j], l));
  }
  [[nodiscard]] bool empty(std::size_t j) const noexcept { return longest_[j] == 0; }
  [[nodiscard]] double work(std::size_t j) const noexcept { return work_[j]; }
  [[nodiscard]] token_count tokens(std::size_t j) const noexcept { return tokens_[j]; }
  [[nodiscard]] token_count longest(std::size_t j) const noexcept { return longest_[j]; }
  //! Two pipelines of one scheme in the same state lead to the same subtrees.
  [[nodiscard]] bool same_state(std::size_t x, std::size_t y) const noexcept {
    return pipelines_[x].scheme == pipelines_[y].scheme && pipelines_[x].max_len == pipelines_[y].max_len && work_[x] == work_[y] &&
           tokens_[x] == tokens_[y] && longest_[x] == longest_[y];
  }
  struct saved {
    double work;
    token_count tokens, longest;
  };
  [[nodiscard]] saved save(std::size_t j) const noexcept { return {work_[j], tokens_[j], longest_[j]}; }
  void restore(std::size_t j, const saved& s) noexcept { work_[j] = s.work, tokens_[j] = s.tokens, longest_[j] = s.longest; }
  void add(std::size_t j, token_count l) noexcept {
    work_[j] += pipelines_[j].sequence_seconds(l);
    tokens_[j] += l;
    longest_[j] = std::max(longest_[j], l);
  }

 private:
  std::span<const scheme_profile> pipelines_;
  std::vector<double> work_;
  std::vector<token_count> tokens_;
  std::vector<token_count> longest_;
};

// The pipelines of one profile, contiguous in the pipeline order ([begin, end)), for the
// greedy's choice in O(log) instead of a scan over every pipeline: a segment tree over the
// members' (work, tokens, longest), component-wise minima over the non-empty members, whose
// node bound lower_bound_of(minima + l) is below every member's own bound (the bound grows
// with each component), and the lowest empty member (members only fill during a trial, so
// it only moves up).
class dispatch_group {
 public:
  dispatch_group(const scheme_profile& profile, std::size_t begin, std::size_t end)
      : profile_(&profile), begin_(begin), end_(end) {
    while (capacity_ < end - begin) capacity_ *= 2;
    reset();
  }
  [[nodiscard]] std::size_t begin() const noexcept { return begin_; }
  [[nodiscard]] const scheme_profile& profile() const noexcept { return *profile_; }

  void reset() {
    node_.assign(2 * capacity_, empty_node());
    lowest_empty_ = begin_;
  }
  //! The lowest empty member below `limit`, or npos.
  [[nodiscard]] std::size_t lowest_empty(std::size_t limit, const dispatch_state& state) {
    while (lowest_empty_ < end_ && !state.empty(lowest_empty_)) ++lowest_empty_;
    return lowest_empty_ < std::min(end_, limit) ? lowest_empty_ : npos;
  }
  //! The lowest non-empty member below `limit` whose bound with `l` is <= threshold, or npos.
  [[nodiscard]] std::size_t first_within(token_count l, double threshold, std::size_t limit, const dispatch_state& state) const {
    return first_within(1, 0, capacity_, l, threshold, limit, state);
  }
  //! The non-empty member below `limit` of least bound with `l` (lowest index on ties):
  //! (bound, index), or (infinity, npos).
  [[nodiscard]] std::pair<double, std::size_t> least(token_count l, std::size_t limit, const dispatch_state& state) const {
    std::pair<double, std::size_t> best{std::numeric_limits<double>::infinity(), npos};
    least(1, 0, capacity_, l, limit, state, best);
    return best;
  }
  void update(std::size_t j, const dispatch_state& state) {
    std::size_t k = capacity_ + (j - begin_);
    node_[k] = {state.work(j), state.tokens(j), state.longest(j)};
    for (k /= 2; k >= 1; k /= 2) node_[k] = merge(node_[2 * k], node_[2 * k + 1]);
  }

  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

 private:
  struct minima {
    double work;
    token_count tokens, longest;
  };
  static minima empty_node() noexcept {
    return {std::numeric_limits<double>::infinity(), std::numeric_limits<token_count>::max() / 4, std::numeric_limits<token_count>::max() / 4};
  }
  static minima merge(const minima& x, const minima& y) noexcept {
    return {std::min(x.work, y.work), std::min(x.tokens, y.tokens), std::min(x.longest, y.longest)};
  }
  [[nodiscard]] double node_bound(std::size_t k, token_count l) const noexcept {
    const minima& m = node_[k];
    if (m.work == std::numeric_limits<double>::infinity()) return std::numeric_limits<double>::infinity();
    return lower_bound_of(*profile_, m.work + profile_->sequence_seconds(l), m.tokens + l, std::max(m.longest, l));
  }
  std::size_t first_within(std::size_t k, std::size_t lo, std::size_t hi, token_count l, double threshold, std::size_t limit,
                           const dispatch_state& state) const {
    if (begin_ + lo >= std::min(end_, limit) || node_bound(k, l) > threshold) return npos;
    if (hi - lo == 1) return begin_ + lo;
    const std::size_t mid = (lo + hi) / 2;
    const std::size_t left = first_within(2 * k, lo, mid, l, threshold, limit, state);
    return left != npos ? left : first_within(2 * k + 1, mid, hi, l, threshold, limit, state);
  }
  void least(std::size_t k, std::size_t lo, std::size_t hi, token_count l, std::size_t limit, const dispatch_state& state,
             std::pair<double, std::size_t>& best) const {
    if (begin_ + lo >= std::min(end_, limit)) return;
    const double bound = node_bound(k, l);
    if (!(bound < best.first)) return;  // a later index cannot win a tie
    if (hi - lo == 1) {
      best = {bound, begin_ + lo};
      return;
    }
    const std::size_t mid = (lo + hi) / 2;
    least(2 * k, lo, mid, l, limit, state, best);
    least(2 * k + 1, mid, hi, l, limit, state, best);
  }

  const scheme_profile* profile_;
  std::size_t begin_, end_;
  std::size_t capacity_ = 1;
  std::vector<minima> node_;
  std::size_t lowest_empty_ = 0;
};

// The groups of equal profiles, in pipeline order.
inline std::vector<dispatch_group> dispatch_groups(std::span<const scheme_profile> pipelines) {
  std::vector<dispatch_group> out;
  for (std::size_t b = 0; b < pipelines.size();) {
    std::size_t e = b + 1;
    while (e < pipelines.size() && pipelines[e] == pipelines[b]) ++e;
    out.emplace_back(pipelines[b], b, e);
    b = e;
  }
  return out;
}

inline dispatch_result finish_dispatch(std::span<const scheme_profile> pipelines, std::span<const token_count> lengths,
                                       std::vector<std::vector<std::int64_t>> sequences) {
  dispatch_result r;
  r.sequences = std::move(sequences);
  std::vector<token_count> l;
  for (std::size_t j = 0; j < pipelines.size(); ++j) {
    l.clear();
    for (const std::int64_t i : r.sequences[j]) l.push_back(lengths[static_cast<std::size_t>(i)]);
    r.lower_bound.push_back(pipeline_lower_bound(pipelines[j], l));
    r.makespan = std::max(r.makespan, r.lower_bound.back());
  }
  return r;
}

}  // namespace detail

//! Algorithm 1 with `trials` orders (see the file comment).
struct greedy_dispatch {
  int trials = 100;
  std::uint64_t seed = 0;
  int threads = 1;  //!< trials run at once (the result does not depend on it)
  std::int64_t placement_budget = std::int64_t{1} << 20;  //!< trials x sequences at most (at least one trial)

  //! The trials a dispatch of `sequences` sequences runs: `trials`, capped by the budget.
  [[nodiscard]] int trials_for(std::size_t sequences) const noexcept {
    const std::int64_t affordable = placement_budget / std::max<std::int64_t>(static_cast<std::int64_t>(sequences), 1);
    return static_cast<int>(std::clamp<std::int64_t>(affordable, 1, trials));
  }

  [[nodiscard]] dispatch_result dispatch(std::span<const scheme_profile> pipelines, std::span<const token_count> lengths) const {
    return *dispatch_within(pipelines, lengths, std::numeric_limits<double>::infinity());
  }

  //! dispatch()'s result when its makespan is at most `cutoff`, else nullopt. A trial stops
  //! as soon as its largest bound passes the cutoff, so a caller that only wants dispatches
  //! beating a plan it has (plan_iteration) pays little for the others.
  [[nodiscard]] std::optional<dispatch_result> dispatch_within(std::span<const scheme_profile> pipelines, std::span<const token_count> lengths,
                                                               double cutoff) const {
    ZEPPELIN_EXPECTS(trials >= 1, "greedy dispatch needs at least 1 trial", {{"trials", double(trials)}});
    ZEPPELIN_EXPECTS(threads >= 1, "greedy dispatch needs at least 1 thread", {{"threads", double(threads)}});
    ZEPPELIN_EXPECTS(placement_budget >= 1, "greedy dispatch needs a placement budget of at least 1",
                     {{"placement_budget", double(placement_budget)}});
    const std::vector<std::size_t> allowed = detail::allowed_prefixes(pipelines, lengths);
    std::vector<std::int64_t> forced, free;
    for (std::size_t i = 0; i < lengths.size(); ++i) (allowed[i] == 1 ? forced : free).push_back(static_cast<std::int64_t>(i));
    std::stable_sort(free.begin(), free.end(), [&](std::int64_t x, std::int64_t y) {
      return lengths[static_cast<std::size_t>(x)] > lengths[static_cast<std::size_t>(y)];
    });
    const std::vector<detail::dispatch_group> groups = detail::dispatch_groups(pipelines);
    const double floor = dispatch_lower_bound(pipelines, lengths);  // no trial can end below it
    detail::best_trial<std::vector<std::size_t>> best;
    detail::parallel_for(static_cast<std::size_t>(trials_for(lengths.size())), threads, [&](std::size_t t) {
      if (best.snapshot().value <= floor) return;  // no trial can beat the best any more
      std::vector<std::int64_t> order = forced;
      const std::size_t head = order.size();
      order.insert(order.end(), free.begin(), free.end());
      random_generator rng(seed, t);  // Fisher-Yates over the free sequences: trial t's order is t's own
      if (t > 0)
        for (std::size_t k = order.size() - head; k > 1; --k) std::swap(order[head + k - 1], order[head + static_cast<std::size_t>(rng.below(k))]);
      std::vector<std::size_t> assignment(lengths.size());
      std::vector<detail::dispatch_group> own = groups;
      if (const std::optional<double> top = run_trial(pipelines, lengths, allowed, order, own, t, cutoff, best, assignment))
        best.offer(*top, t, assignment);
    });
    const std::optional<std::vector<std::size_t>> winner = std::move(best).take();
    if (!winner) return std::nullopt;
    std::vector<std::vector<std::int64_t>> sequences(pipelines.size());
    for (std::size_t i = 0; i < lengths.size(); ++i) sequences[(*winner)[i]].push_back(static_cast<std::int64_t>(i));
    return detail::finish_dispatch(pipelines, lengths, std::move(sequences));
  }
  friend bool operator==(const greedy_dispatch&, const greedy_dispatch&) = default;

 private:
  // One trial over `order`: the largest bound at its end, or nullopt when it passed the
  // cutoff or another trial already beats it (bounds only grow, so it cannot win).
  static std::optional<double> run_trial(std::span<const scheme_profile> pipelines, std::span<const token_count> lengths,
                                         std::span<const std::size_t> allowed, std::span<const std::int64_t> order,
                                         std::vector<detail::dispatch_group>& groups, std::size_t t, double cutoff,
                                         const detail::best_trial<std::vector<std::size_t>>& best, std::vector<std::size_t>& assignment) {
    constexpr std::size_t npos = detail::dispatch_group::npos;
    constexpr std::size_t refresh = 1024;  // placements between looks at the other trials' best
    detail::dispatch_state state(pipelines);
    auto beaten = best.snapshot();
    // The largest bound so far. Placing l on pipeline j makes the largest bound
    // max(B_j(l), top): every pipeline whose B_j(l) <= top ties at top (the least possible),
    // else the least B_j(l) wins; ties prefer an empty pipeline, then the lowest index (the
    // order of Algorithm 1's scan).
    double top = 0;
    for (std::size_t k = 0; k < order.size(); ++k) {
      const auto i = static_cast<std::size_t>(order[k]);
      const token_count l = lengths[i];
      const std::size_t limit = allowed[i];
      std::size_t pick = npos;
      double value = std::numeric_limits<double>::infinity();
      bool pick_empty = false;
      const auto consider = [&](double v, std::size_t j, bool empty) {
        const bool better = v < value || (v == value && (empty != pick_empty ? empty : j < pick));
        if (better) value = v, pick = j, pick_empty = empty;
      };
      for (detail::dispatch_group& g : groups) {
        if (g.begin() >= limit) break;
        if (const std::size_t e = g.lowest_empty(limit, state); e != npos)
          consider(std::max(detail::lower_bound_of(g.profile(), g.profile().sequence_seconds(l), l, l), top), e, true);
      }
      if (value > top)  // no empty pipeline ties at top: the lowest non-empty one that does
        for (const detail::dispatch_group& g : groups) {
          if (g.begin() >= limit) break;
          if (const std::size_t j = g.first_within(l, top, limit, state); j != npos) {
            consider(top, j, false);
            break;
          }
        }
      if (value > top)  // nothing ties at top: the least bound
        for (const detail::dispatch_group& g : groups) {
          if (g.begin() >= limit) break;
          if (const auto [v, j] = g.least(l, limit, state); j != npos) consider(v, j, false);
        }
      state.add(pick, l);
      groups[group_of(groups, pick)].update(pick, state);
      assignment[i] = pick;
      top = std::max(top, value);
      if (k % refresh == refresh - 1) beaten = best.snapshot();
      if (top > cutoff || beaten.beats(top, t)) return std::nullopt;
    }
    return top;
  }
  static std::size_t group_of(const std::vector<detail::dispatch_group>& groups, std::size_t j) noexcept {
    std::size_t g = 0;
    while (g + 1 < groups.size() && groups[g + 1].begin() <= j) ++g;
    return g;
  }
};
static_assert(cutoff_dispatch_policy<greedy_dispatch>);

//! Eq. 3 to optimality by branch and bound (see the file comment); for small instances.
struct exact_dispatch {
  std::int64_t node_limit = 2'000'000;
  greedy_dispatch start{};  //!< the first incumbent

  [[nodiscard]] dispatch_result dispatch(std::span<const scheme_profile> pipelines, std::span<const token_count> lengths) const {
    ZEPPELIN_EXPECTS(node_limit >= 1, "the exact dispatch needs a positive node limit", {{"node_limit", double(node_limit)}});
    const dispatch_result incumbent = start.dispatch(pipelines, lengths);
    search s{pipelines, lengths, detail::allowed_prefixes(pipelines, lengths), node_limit};
    s.best = incumbent.makespan;
    s.best_assignment.assign(lengths.size(), 0);
    for (std::size_t j = 0; j < pipelines.size(); ++j)
      for (const std::int64_t i : incumbent.sequences[j]) s.best_assignment[static_cast<std::size_t>(i)] = j;
    s.run();
    std::vector<std::vector<std::int64_t>> sequences(pipelines.size());
    for (std::size_t i = 0; i < lengths.size(); ++i) sequences[s.best_assignment[i]].push_back(static_cast<std::int64_t>(i));
    return detail::finish_dispatch(pipelines, lengths, std::move(sequences));
  }
  friend bool operator==(const exact_dispatch&, const exact_dispatch&) = default;

 private:
  struct search {
    std::span<const scheme_profile> pipelines;
    std::span<const token_count> lengths;
    std::vector<std::size_t> allowed;
    std::int64_t node_limit;
    double best = 0;
    std::vector<std::size_t> best_assignment{};
    std::vector<std::size_t> order{}, current{};
    std::int64_t nodes = 0;

    void run() {
      order.resize(lengths.size());
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return lengths[x] > lengths[y]; });
      current.assign(lengths.size(), 0);
      detail::dispatch_state state(pipelines);
      place(0, 0, state);
    }
    void place(std::size_t k, double top, detail::dispatch_state& state) {
      if (++nodes > node_limit)
        ZEPPELIN_THROW(resource_limit, "the exact dispatch search exceeded its node limit",
                       {{"sequences", double(lengths.size())}, {"pipelines", double(pipelines.size())}, {"node_limit", double(node_limit)}});
      if (k == order.size()) {
        if (top < best) best = top, best_assignment = current;
        return;
      }
      const std::size_t i = order[k];
      const token_count l = lengths[i];
      for (std::size_t j = 0; j < allowed[i]; ++j) {
        // a pipeline of the same scheme in the same state as an earlier one: same subtree
        bool seen = false;
        for (std::size_t e = 0; e < j && !seen; ++e) seen = state.same_state(e, j);
        if (seen) continue;
        const double next = std::max(top, state.bound_with(j, l));
        if (next >= best) continue;
        const detail::dispatch_state::saved before = state.save(j);
        state.add(j, l);
        current[i] = j;
        place(k + 1, next, state);
        state.restore(j, before);
      }
    }
  };
};
static_assert(dispatch_policy<exact_dispatch>);

ZEPPELIN_NAMESPACE_END
