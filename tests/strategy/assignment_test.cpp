// tests/strategy/assignment_test.cpp
// Hydraulis' two-stage data assignment (strategy/dispatch.hpp, strategy/pipeline_packing.hpp,
// strategy/iteration_plan.hpp): every sequence once on a pipeline that holds it, greedy
// never below the exact optimum and the exact optimum equal to a brute force, more trials
// never worse, determinism, packings within MaxLen and the V range, and the per-iteration
// choice the cheapest candidate.
#include <catch2/catch.hpp>
#include <zeppelin/strategy.hpp>
#include <zeppelin/strategy/detail/best_trial.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "../support/expect_error.hpp"
#include "helpers.hpp"

using namespace zeppelin;
using namespace strategy_test;

namespace {

std::vector<token_count> lengths_of(std::span<const token_count> all, std::span<const std::int64_t> idx) {
  std::vector<token_count> out;
  for (const std::int64_t i : idx) out.push_back(all[static_cast<std::size_t>(i)]);
  return out;
}

void check_dispatch(const dispatch_result& r, std::span<const scheme_profile> pipelines, std::span<const token_count> lengths) {
  std::vector<int> seen(lengths.size(), 0);
  double makespan = 0;
  for (std::size_t j = 0; j < pipelines.size(); ++j) {
    for (const std::int64_t i : r.sequences[j]) {
      ++seen[static_cast<std::size_t>(i)];
      REQUIRE(lengths[static_cast<std::size_t>(i)] <= pipelines[j].max_len);
    }
    const double lb = pipeline_lower_bound(pipelines[j], lengths_of(lengths, r.sequences[j]));
    REQUIRE(r.lower_bound[j] == Approx(lb).epsilon(1e-12));
    makespan = std::max(makespan, lb);
  }
  for (const int s : seen) REQUIRE(s == 1);
  REQUIRE(r.makespan == Approx(makespan).epsilon(1e-12));
}

double brute_force_dispatch(std::span<const scheme_profile> pipelines, std::span<const token_count> lengths) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<std::vector<token_count>> on(pipelines.size());
  std::function<void(std::size_t)> go = [&](std::size_t i) {
    if (i == lengths.size()) {
      double top = 0;
      for (std::size_t j = 0; j < pipelines.size(); ++j) top = std::max(top, pipeline_lower_bound(pipelines[j], on[j]));
      best = std::min(best, top);
      return;
    }
    for (std::size_t j = 0; j < pipelines.size(); ++j) {
      if (pipelines[j].max_len < lengths[i]) continue;
      on[j].push_back(lengths[i]);
      go(i + 1);
      on[j].pop_back();
    }
  };
  go(0);
  return best;
}

// Least (PP - 1 + V) x slowest micro-batch over the V range, V non-empty micro-batches.
double brute_force_packing(const scheme_profile& p, std::span<const token_count> lengths) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> counts = micro_batch_counts(p, lengths);
  for (int v = counts.back() + 1; v <= static_cast<int>(lengths.size()); ++v) counts.push_back(v);  // past the range, only if none fits
  for (const int v : counts) {
    if (v > micro_batch_counts(p, lengths).back() && best < std::numeric_limits<double>::infinity()) break;
    std::vector<token_count> tokens(static_cast<std::size_t>(v), 0);
    std::vector<std::vector<token_count>> mbs(static_cast<std::size_t>(v));
    std::function<void(std::size_t)> go = [&](std::size_t i) {
      if (i == lengths.size()) {
        double top = 0;
        for (const auto& mb : mbs) {
          if (mb.empty()) return;
          top = std::max(top, p.micro_batch_seconds(mb));
        }
        best = std::min(best, (p.scheme.pp - 1 + v) * top);
        return;
      }
      for (std::size_t j = 0; j < mbs.size(); ++j) {
        if (tokens[j] + lengths[i] > p.max_len) continue;
        tokens[j] += lengths[i];
        mbs[j].push_back(lengths[i]);
        go(i + 1);
        mbs[j].pop_back();
        tokens[j] -= lengths[i];
      }
    };
    go(0);
  }
  return best;
}

}  // namespace

TEST_CASE("dispatch: exact equals a brute force, greedy is never below it", "[strategy]") {
  random_generator rng(21);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<scheme_profile> pipelines = random_profiles(rng, 1, 3, 300, 1000);
    std::stable_sort(pipelines.begin(), pipelines.end(), [](const auto& x, const auto& y) { return x.max_len > y.max_len; });
    std::vector<token_count> lengths(static_cast<std::size_t>(rng.between(1, 7)));
    for (auto& l : lengths) l = rng.between(1, pipelines.front().max_len);
    INFO("trial " << trial);
    const dispatch_result exact = exact_dispatch{}.dispatch(pipelines, lengths);
    const dispatch_result greedy = greedy_dispatch{.trials = 20, .seed = 5}.dispatch(pipelines, lengths);
    check_dispatch(exact, pipelines, lengths);
    check_dispatch(greedy, pipelines, lengths);
    REQUIRE(exact.makespan == Approx(brute_force_dispatch(pipelines, lengths)).epsilon(1e-12));
    REQUIRE(greedy.makespan >= exact.makespan * (1 - 1e-12));
    REQUIRE(dispatch_lower_bound(pipelines, lengths) <= exact.makespan * (1 + 1e-12));
  }
}

TEST_CASE("dispatch_within: the full dispatch within the cutoff, nothing above it", "[strategy]") {
  random_generator rng(23);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<scheme_profile> pipelines = random_profiles(rng, 1, 5, 300, 1000);
    std::stable_sort(pipelines.begin(), pipelines.end(), [](const auto& x, const auto& y) { return x.max_len > y.max_len; });
    std::vector<token_count> lengths(static_cast<std::size_t>(rng.between(1, 40)));
    for (auto& l : lengths) l = rng.between(1, pipelines.front().max_len);
    INFO("trial " << trial);
    const greedy_dispatch greedy{.trials = 8, .seed = 7};
    const dispatch_result full = greedy.dispatch(pipelines, lengths);
    const double above = full.makespan * (1 + 1e-9), below = full.makespan * (1 - 1e-9);
    const std::optional<dispatch_result> within = greedy.dispatch_within(pipelines, lengths, above);
    REQUIRE(within.has_value());
    REQUIRE(within->sequences == full.sequences);
    REQUIRE(!greedy.dispatch_within(pipelines, lengths, below).has_value());
    // a policy without its own cutoff: dispatched in full, then compared
    const dispatch_result exact = exact_dispatch{}.dispatch(pipelines, std::span(lengths).first(std::min<std::size_t>(lengths.size(), 6)));
    REQUIRE(dispatch_within(exact_dispatch{}, pipelines, std::span(lengths).first(std::min<std::size_t>(lengths.size(), 6)), exact.makespan)->sequences ==
            exact.sequences);
    REQUIRE(!dispatch_within(exact_dispatch{}, pipelines, std::span(lengths).first(std::min<std::size_t>(lengths.size(), 6)), exact.makespan * (1 - 1e-9)));
  }
}

TEST_CASE("greedy dispatch: more trials never worse, deterministic, and errors", "[strategy]") {
  random_generator rng(8);
  std::vector<scheme_profile> pipelines = {profile(4, 2, 32768, 2e-8, 3e-4, 0.02), profile(2, 1, 8192, 6e-8, 6e-4, 0.01),
                                           profile(2, 1, 8192, 6e-8, 6e-4, 0.01), profile(1, 1, 4096, 1e-7, 1e-3, 0.01)};
  std::vector<token_count> lengths(300);
  for (auto& l : lengths) l = rng.below(20) == 0 ? rng.between(8193, 32768) : rng.between(16, 4096);
  double previous = std::numeric_limits<double>::infinity();
  for (const int trials : {1, 2, 5, 20, 100}) {
    const dispatch_result r = greedy_dispatch{.trials = trials, .seed = 42}.dispatch(pipelines, lengths);
    check_dispatch(r, pipelines, lengths);
    REQUIRE(r.makespan <= previous);
    previous = r.makespan;
  }
  const dispatch_result a = greedy_dispatch{.trials = 30, .seed = 9}.dispatch(pipelines, lengths);
  const dispatch_result b = greedy_dispatch{.trials = 30, .seed = 9}.dispatch(pipelines, lengths);
  REQUIRE(a.sequences == b.sequences);
  // sequences only pipeline 0 holds all land there
  for (std::size_t i = 0; i < lengths.size(); ++i)
    if (lengths[i] > 8192) REQUIRE(std::find(a.sequences[0].begin(), a.sequences[0].end(), std::int64_t(i)) != a.sequences[0].end());

  const std::vector<token_count> too_long = {10, 40000};
  const auto e = zeppelin_test::expect_error<infeasible>([&] { (void)greedy_dispatch{}.dispatch(pipelines, too_long); });
  REQUIRE(e.value("index") == 1);
  REQUIRE(e.value("largest_max_len") == 32768);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)greedy_dispatch{.trials = 0}.dispatch(pipelines, lengths); }).value("trials") == 0);
  std::reverse(pipelines.begin(), pipelines.end());
  REQUIRE_THROWS_AS(greedy_dispatch{}.dispatch(pipelines, lengths), invalid_argument);
}

TEST_CASE("pipeline packing: exact equals a brute force, greedy never below, within MaxLen and the V range", "[strategy]") {
  random_generator rng(31);
  for (int trial = 0; trial < 200; ++trial) {
    const scheme_profile p = profile(1, static_cast<int>(rng.between(1, 4)), rng.between(100, 400), 1e-3 * double(rng.between(0, 5)),
                                     double(rng.between(1, 5)), double(rng.between(0, 300)), rng.between(1, 200));
    std::vector<token_count> lengths(static_cast<std::size_t>(rng.between(1, 7)));
    for (auto& l : lengths) l = rng.between(1, p.max_len);
    INFO("trial " << trial);
    const std::vector<int> range = micro_batch_counts(p, lengths);
    const pipeline_packing exact = exact_pipeline_packing{}.pack(p, lengths);
    const pipeline_packing greedy = greedy_pipeline_packing{}.pack(p, lengths);
    for (const pipeline_packing* k : {&exact, &greedy}) {
      std::vector<int> seen(lengths.size(), 0);
      double slowest = 0;
      for (const auto& mb : k->micro_batches) {
        REQUIRE(!mb.empty());
        const auto own = lengths_of(lengths, mb);
        token_count tokens = 0;
        for (const token_count l : own) tokens += l;
        REQUIRE(tokens <= p.max_len);
        slowest = std::max(slowest, p.micro_batch_seconds(own));
        for (const std::int64_t i : mb) ++seen[static_cast<std::size_t>(i)];
      }
      for (const int s : seen) REQUIRE(s == 1);
      REQUIRE(k->slowest_seconds == Approx(slowest).epsilon(1e-12));
      REQUIRE(k->seconds == Approx((p.scheme.pp - 1 + k->count()) * slowest).epsilon(1e-12));
    }
    if (exact.count() > range.back()) REQUIRE(greedy.count() >= exact.count());  // past the range only when nothing in it fits
    else REQUIRE(std::find(range.begin(), range.end(), exact.count()) != range.end());
    REQUIRE(exact.seconds == Approx(brute_force_packing(p, lengths)).epsilon(1e-12));
    REQUIRE(greedy.seconds >= exact.seconds * (1 - 1e-12));
  }
  const scheme_profile p = profile(1, 2, 1000, 0, 1, 10, 100);
  const std::vector<token_count> lengths(40, 500);  // 20000 tokens: V in [20, 40]
  const std::vector<int> range = micro_batch_counts(p, lengths);
  REQUIRE(range.size() == 16);
  REQUIRE(range.front() == 20);
  REQUIRE(range.back() == 40);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)micro_batch_counts(p, std::vector<token_count>{1001}); }).value("max_len") == 1000);
}

TEST_CASE("plan_iteration picks the cheapest candidate and keeps every sequence", "[strategy]") {
  const scheme_profile small = profile(1, 1, 4096, 1e-7, 1e-3, 0.01), big = profile(4, 2, 32768, 2e-8, 3e-4, 0.02);
  const std::vector<strategy> candidates = {{{{small, 8}, {big, 1}}, 0}, {{{big, 4}}, 0}, {{{small, 16}}, 0}};
  random_generator rng(4);
  std::vector<token_count> lengths(200);
  for (auto& l : lengths) l = rng.below(25) == 0 ? rng.between(4097, 30000) : rng.between(16, 4096);
  const greedy_dispatch dispatcher{.trials = 10, .seed = 1};
  const iteration_plan plan = plan_iteration(candidates, lengths, dispatcher, greedy_pipeline_packing{});
  REQUIRE(plan.candidate != 2);  // candidate 2 cannot hold the long sequences
  double expected = std::numeric_limits<double>::infinity();
  for (std::size_t c = 0; c < 2; ++c) expected = std::min(expected, plan_with(candidates[c], lengths, dispatcher, greedy_pipeline_packing{}).seconds);
  REQUIRE(plan.seconds == expected);
  std::vector<int> seen(lengths.size(), 0);
  for (const pipeline_plan& p : plan.pipelines) {
    REQUIRE(!p.sequences.empty());
    std::vector<std::int64_t> packed;
    for (const auto& mb : p.packing.micro_batches) packed.insert(packed.end(), mb.begin(), mb.end());
    std::vector<std::int64_t> own = p.sequences;
    std::sort(packed.begin(), packed.end());
    std::sort(own.begin(), own.end());
    REQUIRE(packed == own);
    for (const std::int64_t i : own) ++seen[static_cast<std::size_t>(i)];
  }
  for (const int s : seen) REQUIRE(s == 1);
  // fewer sequences than pipelines: a plan with idle pipelines rather than none
  const std::vector<token_count> two = {100, 200};
  const iteration_plan sparse = plan_iteration(candidates, two, dispatcher, greedy_pipeline_packing{});
  REQUIRE(sparse.seconds > 0);
  const std::vector<token_count> too_long = {50000};
  REQUIRE(zeppelin_test::expect_error<infeasible>([&] { (void)plan_iteration(candidates, too_long, dispatcher, greedy_pipeline_packing{}); })
              .value("longest") == 50000);
}

TEST_CASE("plan_iteration's pruning changes nothing: the best of every candidate planned in full", "[strategy]") {
  random_generator rng(31);
  for (int trial = 0; trial < 200; ++trial) {
    // candidates that mix the same few schemes, so that their bounds and plans are close
    std::vector<scheme_profile> kinds;
    for (int k = static_cast<int>(rng.between(1, 3)); k > 0; --k) kinds.push_back(random_profile(rng, 400, 3000));
    std::vector<strategy> candidates(static_cast<std::size_t>(rng.between(1, 8)));
    for (strategy& s : candidates) {
      for (const scheme_profile& k : kinds)
        if (rng.below(3) != 0) s.parts.push_back({k, static_cast<int>(rng.between(1, 4))});
      if (s.parts.empty()) s.parts.push_back({kinds.front(), 1});
    }
    std::vector<token_count> lengths(static_cast<std::size_t>(rng.between(1, 120)));
    for (auto& l : lengths) l = rng.below(6) == 0 ? rng.between(1, 3000) : rng.between(1, 400);
    const greedy_dispatch dispatcher{.trials = 6, .seed = 4};
    // the reference: every candidate that holds the longest sequence, planned in full;
    // plans without idle pipelines first, then the fastest, then the lowest index
    const token_count longest = *std::max_element(lengths.begin(), lengths.end());
    std::optional<std::tuple<bool, double, std::size_t>> want;
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      if (pipelines_of(candidates[c]).front().max_len < longest) continue;
      const iteration_plan plan = plan_with(candidates[c], lengths, dispatcher, greedy_pipeline_packing{});
      const bool idle = std::any_of(plan.pipelines.begin(), plan.pipelines.end(), [](const pipeline_plan& p) { return p.sequences.empty(); });
      REQUIRE(dispatcher.dispatch(pipelines_of(candidates[c]), lengths).makespan <= plan.seconds * (1 + 1e-12));
      const std::tuple<bool, double, std::size_t> key{idle, plan.seconds, c};
      if (!want || key < *want) want = key;
    }
    INFO("trial " << trial);
    if (!want) {
      REQUIRE_THROWS_AS(plan_iteration(candidates, lengths, dispatcher, greedy_pipeline_packing{}), infeasible);
      continue;
    }
    const iteration_plan got = plan_iteration(candidates, lengths, dispatcher, greedy_pipeline_packing{});
    REQUIRE(got.candidate == std::get<2>(*want));
    REQUIRE(got.seconds == std::get<1>(*want));
  }
}

namespace {

// Algorithm 1 as a plain scan over every pipeline: the reference for greedy_dispatch's
// grouped search (same orders, same ties: least largest bound, then an empty pipeline, then
// the lowest index).
std::vector<std::vector<std::int64_t>> reference_greedy(std::span<const scheme_profile> pipelines, std::span<const token_count> lengths,
                                                        int trials, std::uint64_t seed) {
  std::vector<std::size_t> allowed(lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i)
    while (allowed[i] < pipelines.size() && pipelines[allowed[i]].max_len >= lengths[i]) ++allowed[i];
  std::vector<std::int64_t> forced, free;
  for (std::size_t i = 0; i < lengths.size(); ++i) (allowed[i] == 1 ? forced : free).push_back(std::int64_t(i));
  std::stable_sort(free.begin(), free.end(), [&](auto x, auto y) { return lengths[std::size_t(x)] > lengths[std::size_t(y)]; });
  double best = std::numeric_limits<double>::infinity();
  std::vector<std::size_t> assignment(lengths.size()), best_assignment;
  for (int t = 0; t < trials; ++t) {
    std::vector<std::int64_t> shuffled = free;  // trial t > 0: the longest-first order shuffled by (seed, t)
    random_generator rng(seed, static_cast<std::uint64_t>(t));
    if (t > 0)
      for (std::size_t k = shuffled.size(); k > 1; --k) std::swap(shuffled[k - 1], shuffled[static_cast<std::size_t>(rng.below(k))]);
    std::vector<std::int64_t> order = forced;
    order.insert(order.end(), shuffled.begin(), shuffled.end());
    std::vector<std::vector<token_count>> on(pipelines.size());
    double top = 0;
    for (const std::int64_t i : order) {
      const token_count l = lengths[std::size_t(i)];
      std::size_t pick = 0;
      double value = std::numeric_limits<double>::infinity();
      bool pick_empty = false;
      for (std::size_t j = 0; j < allowed[std::size_t(i)]; ++j) {
        on[j].push_back(l);
        const double v = std::max(pipeline_lower_bound(pipelines[j], on[j]), top);
        on[j].pop_back();
        const bool empty = on[j].empty();
        if (v < value || (v == value && empty && !pick_empty)) pick = j, value = v, pick_empty = empty;
      }
      on[pick].push_back(l);
      assignment[std::size_t(i)] = pick;
      top = std::max(top, value);
      if (top >= best) break;
    }
    if (top < best) best = top, best_assignment = assignment;
  }
  std::vector<std::vector<std::int64_t>> out(pipelines.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) out[best_assignment[i]].push_back(std::int64_t(i));
  return out;
}

// A few schemes with many identical pipelines each (longest MaxLen first), and a number of
// lengths in [fewest, most], a fifth of them up to the longest MaxLen and the rest short.
struct grouped_instance {
  std::vector<scheme_profile> pipelines;
  std::vector<token_count> lengths;
};
grouped_instance random_grouped_instance(random_generator& rng, std::int64_t fewest, std::int64_t most) {
  grouped_instance out;
  const int kinds = static_cast<int>(rng.between(1, 3));
  for (int k = 0; k < kinds; ++k) {
    const scheme_profile p = random_profile(rng, 500, 4000);
    out.pipelines.insert(out.pipelines.end(), static_cast<std::size_t>(rng.between(1, 9)), p);
  }
  std::stable_sort(out.pipelines.begin(), out.pipelines.end(), [](const auto& x, const auto& y) { return x.max_len > y.max_len; });
  out.lengths.resize(static_cast<std::size_t>(rng.between(fewest, most)));
  for (auto& l : out.lengths) l = rng.below(5) == 0 ? rng.between(1, out.pipelines.front().max_len) : rng.between(1, 300);
  return out;
}

}  // namespace

TEST_CASE("greedy dispatch's grouped search makes Algorithm 1's choices", "[strategy]") {
  random_generator rng(55);
  for (int trial = 0; trial < 60; ++trial) {
    const auto [pipelines, lengths] = random_grouped_instance(rng, 1, 60);
    const int trials = static_cast<int>(rng.between(1, 6));
    INFO("trial " << trial);
    REQUIRE(greedy_dispatch{.trials = trials, .seed = 3}.dispatch(pipelines, lengths).sequences == reference_greedy(pipelines, lengths, trials, 3));
  }
}

TEST_CASE("best_trial keeps the least (value, index) whatever order the offers come in", "[strategy]") {
  random_generator rng(57);
  for (int round = 0; round < 200; ++round) {
    // few distinct values, so that ties between trials are common
    std::vector<std::pair<double, std::size_t>> offers;
    for (std::size_t t = 0; t < 12; ++t) offers.emplace_back(static_cast<double>(rng.below(4)), t);
    const auto least = *std::min_element(offers.begin(), offers.end());
    for (std::size_t k = offers.size(); k > 1; --k) std::swap(offers[k - 1], offers[static_cast<std::size_t>(rng.below(k))]);
    detail::best_trial<std::size_t> best;
    for (const auto& [value, t] : offers) {
      const auto key = best.snapshot();
      // a snapshot beats exactly the pairs after it, ties at a later index included
      REQUIRE(key.beats(value, t) == (std::pair{key.value, key.index} < std::pair{value, t}));
      best.offer(value, t, t);
    }
    REQUIRE(best.snapshot().value == least.first);
    REQUIRE(best.snapshot().index == least.second);
    REQUIRE(std::move(best).take() == least.second);
  }
  REQUIRE(!detail::best_trial<int>{}.take().has_value());
}

TEST_CASE("greedy dispatch gives the same dispatch whatever its threads", "[strategy]") {
  random_generator rng(56);
  for (int trial = 0; trial < 30; ++trial) {
    const auto [pipelines, lengths] = random_grouped_instance(rng, 1, 400);
    const int trials = static_cast<int>(rng.between(1, 40));
    INFO("trial " << trial);
    const std::vector<std::vector<std::int64_t>> one = greedy_dispatch{.trials = trials, .seed = 4}.dispatch(pipelines, lengths).sequences;
    REQUIRE(one == reference_greedy(pipelines, lengths, trials, 4));
    for (const int threads : {2, 3, 8}) REQUIRE(greedy_dispatch{.trials = trials, .seed = 4, .threads = threads}.dispatch(pipelines, lengths).sequences == one);
  }
  // more sequences than a trial places between its looks at the other trials' best (1,024),
  // so trials also stop on a best that another thread found while they ran
  for (int trial = 0; trial < 4; ++trial) {
    const auto [pipelines, lengths] = random_grouped_instance(rng, 3000, 6000);
    INFO("large trial " << trial);
    const std::vector<std::vector<std::int64_t>> one = greedy_dispatch{.trials = 24, .seed = 5}.dispatch(pipelines, lengths).sequences;
    for (const int threads : {2, 4}) REQUIRE(greedy_dispatch{.trials = 24, .seed = 5, .threads = threads}.dispatch(pipelines, lengths).sequences == one);
  }
  const std::vector<scheme_profile> pipelines = {random_profile(rng, 500, 4000)};
  const std::vector<token_count> lengths = {10, 20};
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)greedy_dispatch{.threads = 0}.dispatch(pipelines, lengths); }).value("threads") == 0);
}

TEST_CASE("candidate_lower_bound never exceeds the candidate's plan", "[strategy]") {
  random_generator rng(12);
  for (int trial = 0; trial < 40; ++trial) {
    strategy s;
    const int kinds = static_cast<int>(rng.between(1, 3));
    for (int k = 0; k < kinds; ++k) s.parts.push_back({random_profile(rng, 400, 3000), static_cast<int>(rng.between(1, 4))});
    token_count top = 0;
    for (const auto& part : s.parts) top = std::max(top, part.profile.max_len);
    std::vector<token_count> lengths(static_cast<std::size_t>(rng.between(1, 80)));
    for (auto& l : lengths) l = rng.below(4) == 0 ? rng.between(1, top) : rng.between(1, 400);
    INFO("trial " << trial);
    const iteration_plan plan = plan_with(s, lengths, greedy_dispatch{.trials = 5, .seed = 2}, greedy_pipeline_packing{});
    REQUIRE(candidate_lower_bound(s, lengths) <= plan.seconds * (1 + 1e-12));
    const iteration_plan exact = plan_with(s, std::span(lengths).first(std::min<std::size_t>(lengths.size(), 7)), exact_dispatch{}, exact_pipeline_packing{});
    REQUIRE(candidate_lower_bound(s, std::span(lengths).first(std::min<std::size_t>(lengths.size(), 7))) <= exact.seconds * (1 + 1e-12));
  }
}

TEST_CASE("greedy packing packs only the counts that can win, with the result of packing every count", "[strategy]") {
  random_generator rng(77);
  int skipped = 0;
  for (int trial = 0; trial < 60; ++trial) {
    scheme_profile p = random_profile(rng, 2000, 8000);
    p.util_len = rng.between(1, 400);
    std::vector<token_count> lengths(static_cast<std::size_t>(rng.between(1, 400)));
    for (auto& l : lengths) l = rng.below(5) == 0 ? rng.between(1, p.max_len) : rng.between(1, p.max_len / 8);
    INFO("trial " << trial);
    // the reference: every count of the range packed, the least (seconds, count) kept
    const detail::packing_latency_floor floor(p, lengths);
    std::optional<pipeline_packing> want;
    for (const int v : micro_batch_counts(p, lengths)) {
      std::optional<detail::packing_bins> bins = detail::greedy_bins(p, lengths, v);
      if (!bins) continue;
      const pipeline_packing at_v = packing_of(p, std::move(bins->members), lengths);
      REQUIRE(at_v.count() == v);
      REQUIRE(floor(v) <= at_v.seconds * (1 + 1e-12));  // the floor bounds every packing into v
      if (!want || at_v.seconds < want->seconds) want = at_v;
    }
    if (!want) continue;  // past the range: no count is skipped there
    for (const int v : micro_batch_counts(p, lengths)) skipped += floor(v) * (1 - 1e-9) > want->seconds;
    const pipeline_packing got = greedy_pipeline_packing{}.pack(p, lengths);
    REQUIRE(got.micro_batches == want->micro_batches);
    REQUIRE(got.seconds == want->seconds);
  }
  REQUIRE(skipped > 100);  // the instances exercise the skipping
}

TEST_CASE("greedy dispatch caps its trials by the placement budget", "[strategy]") {
  const greedy_dispatch d{};
  REQUIRE(d.trials_for(0) == 100);
  REQUIRE(d.trials_for(10'485) == 100);
  REQUIRE(d.trials_for(10'486) == 99);
  REQUIRE(d.trials_for(100'000) == 10);
  REQUIRE(d.trials_for(std::size_t{1} << 21) == 1);
  random_generator rng(91);
  for (int trial = 0; trial < 20; ++trial) {
    const auto [pipelines, lengths] = random_grouped_instance(rng, 50, 400);
    const auto budget = static_cast<std::int64_t>(rng.between(1, 20 * static_cast<std::int64_t>(lengths.size())));
    const int runs = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(30, budget / static_cast<std::int64_t>(lengths.size()))));
    INFO("trial " << trial << ", budget " << budget);
    REQUIRE(greedy_dispatch{.trials = 30, .seed = 6, .placement_budget = budget}.trials_for(lengths.size()) == runs);
    REQUIRE(greedy_dispatch{.trials = 30, .seed = 6, .placement_budget = budget}.dispatch(pipelines, lengths).sequences ==
            reference_greedy(pipelines, lengths, runs, 6));
  }
  const std::vector<scheme_profile> pipelines = {profile(1, 1, 4096, 1e-7, 1e-3, 0.01)};
  const std::vector<token_count> lengths = {10, 20};
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)greedy_dispatch{.placement_budget = 0}.dispatch(pipelines, lengths); })
              .value("placement_budget") == 0);
}

TEST_CASE("plan_iteration gives the same plan whatever its packing threads", "[strategy]") {
  random_generator rng(64);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<strategy> candidates(static_cast<std::size_t>(rng.between(1, 4)));
    for (strategy& s : candidates)
      for (int k = static_cast<int>(rng.between(1, 3)); k > 0; --k) s.parts.push_back({random_profile(rng, 3000, 9000), static_cast<int>(rng.between(1, 6))});
    std::vector<token_count> lengths(static_cast<std::size_t>(rng.between(20, 600)));
    for (auto& l : lengths) l = rng.between(1, 3000);
    const greedy_dispatch dispatcher{.trials = 4, .seed = 2};
    INFO("trial " << trial);
    const iteration_plan one = plan_iteration(candidates, lengths, dispatcher, greedy_pipeline_packing{});
    for (const int threads : {2, 3, 8}) {
      const iteration_plan many = plan_iteration(candidates, lengths, dispatcher, greedy_pipeline_packing{}, threads);
      REQUIRE(many.candidate == one.candidate);
      REQUIRE(many.seconds == one.seconds);
      REQUIRE(many.pipelines.size() == one.pipelines.size());
      for (std::size_t j = 0; j < one.pipelines.size(); ++j) REQUIRE(many.pipelines[j].packing.micro_batches == one.pipelines[j].packing.micro_batches);
    }
  }
  const std::vector<strategy> candidates = {{{{profile(1, 1, 4096, 1e-7, 1e-3, 0.01), 2}}, 0}};
  const std::vector<token_count> lengths = {10, 20};
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)plan_iteration(candidates, lengths, greedy_dispatch{}, greedy_pipeline_packing{}, 0); })
              .value("threads") == 0);
}
