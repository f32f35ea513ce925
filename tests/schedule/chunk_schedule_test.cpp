// tests/schedule/chunk_schedule_test.cpp
// Chunk-level 1F1B (schedule/pipeline/chunk_one_f_one_b.hpp) over seeded random chains:
// validate() accepts every schedule (complete, ordered, matched, deadlock-free) and its
// in-flight bound min(M, P - p + N_P - 1) is reached; on every stage a chain's forwards run
// in slice order and its backwards in reverse slice order, each chunk's backward after its
// own forward; with chains of one chunk it is 1F1B; bad chains are refused with the numbers.
#include <catch2/catch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/chunk_cost.hpp>
#include <zeppelin/pack/sequence_processor.hpp>
#include <zeppelin/pack/chunk_grouping.hpp>
#include <zeppelin/pack/chunk_order.hpp>
#include <zeppelin/schedule/pipeline.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;

namespace {
std::vector<int> random_chains(random_generator& g, int m) {
  std::vector<int> chains;
  for (int left = m; left > 0;) {
    const int c = static_cast<int>(std::min<std::int64_t>(left, g.below(3) == 0 ? g.between(2, 6) : 1));
    chains.push_back(c);
    left -= c;
  }
  return chains;
}
}  // namespace

TEST_CASE("chunk-level 1F1B is valid, holds its window and keeps slice order", "[schedule][pipeline]") {
  random_generator g(20261124);
  for (int trial = 0; trial < 400; ++trial) {
    const int P = static_cast<int>(g.between(1, 8));
    const int M = static_cast<int>(g.between(1, 30));
    std::vector<token_count> tokens(static_cast<std::size_t>(M));
    for (auto& t : tokens) t = g.between(1, 50000);
    const chunk_one_f_one_b policy{.chains = random_chains(g, M)};
    const int longest = *std::max_element(policy.chains.begin(), policy.chains.end());
    CAPTURE(P, M, policy.chains);
    const pipeline_schedule s = policy.build(P, tokens);
    REQUIRE(s.kind == pipeline_schedule_kind::chunk_one_f_one_b);
    const std::vector<int> backward = policy.backward_order(M);
    const std::vector<std::int64_t> f2b = policy.backward_positions(M);
    for (std::size_t b = 0; b < backward.size(); ++b) REQUIRE(f2b[static_cast<std::size_t>(backward[b])] == static_cast<std::int64_t>(b));
    const pipeline_check c = validate(s);
    REQUIRE(c.max_in_flight == s.in_flight_bound);
    // chain of each micro-batch and its position in the chain
    std::vector<int> chain_of, slice_of;
    for (std::size_t ch = 0; ch < policy.chains.size(); ++ch)
      for (int i = 0; i < policy.chains[ch]; ++i) chain_of.push_back(static_cast<int>(ch)), slice_of.push_back(i);
    for (int p = 0; p < P; ++p) {
      REQUIRE(s.in_flight_bound[static_cast<std::size_t>(p)] == std::min(M, P - p + longest - 1));
      std::vector<int> last_forward(policy.chains.size(), -1), last_backward(policy.chains.size(), 1 << 30);
      std::vector<bool> forwarded(static_cast<std::size_t>(M), false);
      for (const pipeline_op& op : s.ops[static_cast<std::size_t>(p)]) {
        const auto k = static_cast<std::size_t>(op.micro_batch);
        const auto ch = static_cast<std::size_t>(chain_of[k]);
        if (op.kind == pipeline_op_kind::forward) {
          REQUIRE(slice_of[k] == last_forward[ch] + 1);  // after its predecessor
          last_forward[ch] = slice_of[k];
          forwarded[k] = true;
        } else if (op.kind == pipeline_op_kind::backward) {
          REQUIRE(forwarded[k]);
          const int expected = last_backward[ch] == (1 << 30) ? policy.chains[ch] - 1 : last_backward[ch] - 1;
          REQUIRE(slice_of[k] == expected);  // after its successor
          last_backward[ch] = slice_of[k];
        }
      }
    }
    // with every chain of one chunk: 1F1B exactly
    if (longest == 1) {
      pipeline_schedule plain = one_f_one_b{}.build(P, tokens);
      plain.kind = pipeline_schedule_kind::chunk_one_f_one_b;
      REQUIRE(s == plain);
    }
  }
}

TEST_CASE("chunk-level 1F1B: the longest chain's forwards fill the last stage before its first backward", "[schedule][pipeline]") {
  // 2 stages, chains {3, 1}: the last stage runs F0 F1 F2 before B2 B1 B0
  const std::vector<token_count> tokens = {100, 200, 300, 400};
  const pipeline_schedule s = chunk_one_f_one_b{.chains = {3, 1}}.build(2, tokens);
  std::vector<std::pair<pipeline_op_kind, int>> last;
  for (const pipeline_op& op : s.ops[1])
    if (is_compute(op.kind)) last.emplace_back(op.kind, op.micro_batch);
  using K = pipeline_op_kind;
  REQUIRE(last == std::vector<std::pair<K, int>>{{K::forward, 0}, {K::forward, 1}, {K::forward, 2}, {K::backward, 2},
                                                 {K::forward, 3}, {K::backward, 1}, {K::backward, 0}, {K::backward, 3}});
  REQUIRE(s.in_flight_bound == std::vector<int>{4, 3});
}

TEST_CASE("chunk-level 1F1B refuses chains that do not cover the micro-batches", "[schedule][pipeline]") {
  const std::vector<token_count> tokens = {1, 2, 3};
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)chunk_one_f_one_b{.chains = {2}}.build(2, tokens); }).value("chained") == 2);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)chunk_one_f_one_b{.chains = {3, 0}}.build(2, tokens); }).value("chain") == 1);
}

TEST_CASE("chunk-level 1F1B made by name has no chains: every chunk its own chain, 1F1B's order", "[schedule][pipeline]") {
  const std::vector<token_count> tokens = {5, 1, 2, 3, 4};
  const any_pipeline_schedule s = make_pipeline_schedule(pipeline_schedule_kind_by_name("chunk-1f1b"));
  REQUIRE(s.kind() == pipeline_schedule_kind::chunk_one_f_one_b);
  REQUIRE(s.virtual_stages() == 1);
  const pipeline_schedule built = s.build(3, tokens);
  REQUIRE(built.kind == pipeline_schedule_kind::chunk_one_f_one_b);
  pipeline_schedule as_1f1b = one_f_one_b{}.build(3, tokens);
  as_1f1b.kind = pipeline_schedule_kind::chunk_one_f_one_b;
  REQUIRE(built == as_1f1b);
}

namespace {
// A random valid chunking: long sequences cut into 2..4 slices (the last, the tail, with
// some short sequences beside it), short ones in batched chunks of 1..3.
struct random_chunking {
  std::vector<token_count> lengths;
  std::vector<chunk> chunks;
};
random_chunking make_chunking(random_generator& g) {
  random_chunking r;
  const int n = static_cast<int>(g.between(1, 14));
  for (int i = 0; i < n; ++i) r.lengths.push_back(g.below(3) == 0 ? g.between(4000, 9000) : g.between(1, 3000));
  std::vector<std::int64_t> shorts;
  std::vector<std::size_t> tails;
  for (std::size_t i = 0; i < r.lengths.size(); ++i) {
    const token_count l = r.lengths[i];
    if (l <= 3000) {
      shorts.push_back(static_cast<std::int64_t>(i));
      continue;
    }
    const int slices = static_cast<int>(g.between(2, 4));
    token_count at = 0;
    for (int s = 0; s < slices; ++s) {
      const token_count end = s + 1 == slices ? l : at + (l - at) / 2;
      r.chunks.push_back({at, {{static_cast<std::int64_t>(i), at, end}}});
      at = end;
    }
    tails.push_back(r.chunks.size() - 1);
  }
  for (const std::int64_t i : shorts) {
    const token_count l = r.lengths[static_cast<std::size_t>(i)];
    if (!tails.empty() && g.below(2) == 0) {
      r.chunks[tails[static_cast<std::size_t>(g.below(tails.size()))]].slices.push_back({i, 0, l});
    } else if (!r.chunks.empty() && r.chunks.back().context == 0 && r.chunks.back().slices.size() < 3 && g.below(2) == 0 &&
               r.chunks.back().slices.front().end == r.lengths[static_cast<std::size_t>(r.chunks.back().slices.front().sequence)]) {
      r.chunks.back().slices.push_back({i, 0, l});
    } else {
      r.chunks.push_back({0, {{i, 0, l}}});
    }
  }
  // shuffle the chunks: the order must not depend on how they were listed
  for (std::size_t k = r.chunks.size(); k > 1; --k) std::swap(r.chunks[k - 1], r.chunks[static_cast<std::size_t>(g.below(k))]);
  return r;
}
}  // namespace

TEST_CASE("forward_order_of runs whole chains, longest sequence first", "[schedule][pipeline]") {
  random_generator g(7);
  for (int trial = 0; trial < 300; ++trial) {
    const random_chunking r = make_chunking(g);
    CAPTURE(trial);
    validate_chunks(r.chunks, r.lengths);
    const chunk_order order = forward_order_of(r.chunks, r.lengths);
    REQUIRE(order == forward_order_of(r.chunks, r.lengths));
    std::vector<std::int64_t> sorted = order.forward;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t k = 0; k < sorted.size(); ++k) REQUIRE(sorted[k] == static_cast<std::int64_t>(k));
    std::size_t at = 0;
    token_count previous = std::numeric_limits<token_count>::max();
    for (const int c : order.chains) {
      // one unit: its slices of one cut sequence in order, or one batched chunk
      token_count unit_length = 0;
      if (c == 1) {
        for (const chunk_slice& s : r.chunks[static_cast<std::size_t>(order.forward[at])].slices)
          unit_length = std::max(unit_length, r.lengths[static_cast<std::size_t>(s.sequence)]);
        REQUIRE(r.chunks[static_cast<std::size_t>(order.forward[at])].context == 0);
      } else {
        const chunk_links links = links_of(r.chunks, r.lengths);
        REQUIRE(links.previous[static_cast<std::size_t>(order.forward[at])] == -1);
        for (int i = 1; i < c; ++i)
          REQUIRE(links.previous[static_cast<std::size_t>(order.forward[at + static_cast<std::size_t>(i)])] == order.forward[at + static_cast<std::size_t>(i) - 1]);
        REQUIRE(links.next[static_cast<std::size_t>(order.forward[at + static_cast<std::size_t>(c) - 1])] == -1);
        const chunk& first = r.chunks[static_cast<std::size_t>(order.forward[at])];
        unit_length = r.lengths[static_cast<std::size_t>(first.slices.front().sequence)];
      }
      REQUIRE(unit_length <= previous);  // longest first
      previous = unit_length;
      at += static_cast<std::size_t>(c);
    }
    REQUIRE(at == r.chunks.size());
    // the chains build a valid chunk-level 1F1B over the chunks' tokens
    std::vector<token_count> tokens;
    for (const std::int64_t k : order.forward) tokens.push_back(r.chunks[static_cast<std::size_t>(k)].tokens());
    const pipeline_schedule s = chunk_one_f_one_b{.chains = order.chains}.build(3, tokens);
    REQUIRE(validate(s).max_in_flight == s.in_flight_bound);
  }
}

TEST_CASE("group_pipelines equals a brute force over contiguous groupings", "[schedule][pipeline]") {
  random_generator g(8);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int> counts(static_cast<std::size_t>(g.between(1, 12)));
    for (int& c : counts) c = static_cast<int>(g.between(1, 7));
    // cost(lo, hi): a delta per pipeline plus a recompute term growing with hi, sometimes infeasible
    const double delta = static_cast<double>(g.between(0, 5));
    std::vector<std::vector<double>> table(8, std::vector<double>(8));
    for (auto& row : table)
      for (double& x : row) x = g.below(10) == 0 ? std::numeric_limits<double>::infinity() : static_cast<double>(g.between(0, 20));
    const auto cost = [&](int lo, int hi) { return delta + table[static_cast<std::size_t>(lo)][static_cast<std::size_t>(hi)]; };
    std::vector<int> levels = counts;
    std::sort(levels.begin(), levels.end());
    levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
    const std::size_t m = levels.size();
    double best = std::numeric_limits<double>::infinity();
    std::size_t fewest = 0;
    for (std::uint32_t cuts = 0; cuts < (1u << (m - 1)); ++cuts) {  // bit b: a new pipeline after level b
      double total = 0;
      std::size_t first = 0, groups = 0;
      for (std::size_t b = 0; b < m; ++b)
        if (b + 1 == m || (cuts >> b & 1u)) total += cost(levels[first], levels[b]), first = b + 1, ++groups;
      if (total < best || (total == best && groups < fewest)) best = total, fewest = groups;
    }
    CAPTURE(trial, counts);
    if (best == std::numeric_limits<double>::infinity()) {
      REQUIRE_THROWS_AS(group_pipelines(counts, cost), infeasible);
      continue;
    }
    const chunk_grouping got = group_pipelines(counts, cost);
    REQUIRE(got.seconds == best);
    REQUIRE(got.pipelines.size() == fewest);
    double sum = 0;
    for (std::size_t p = 0; p < got.pipelines.size(); ++p) {
      sum += got.pipelines[p].seconds;
      REQUIRE(got.pipelines[p].seconds == cost(got.pipelines[p].first_count, got.pipelines[p].last_count));
      if (p > 0) REQUIRE(got.pipelines[p].first_count > got.pipelines[p - 1].last_count);
    }
    REQUIRE(got.pipelines.front().first_count == levels.front());
    REQUIRE(got.pipelines.back().last_count == levels.back());
    REQUIRE(sum == best);
  }
  const auto flat = [](int, int) { return 1.0; };
  REQUIRE_THROWS_AS(group_pipelines(std::vector<int>{}, flat), invalid_argument);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)group_pipelines(std::vector<int>{2, 0}, flat); }).value("unit") == 1);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)group_pipelines(std::vector<int>{2}, [](int, int) { return -1.0; }); }).value("seconds") == -1);
}

TEST_CASE("the sequence processor's chunks run as chunk-level 1F1B, cut sequences first", "[schedule][pipeline]") {
  random_generator g(9);
  const chunk_cost_model cost = chunk_cost_model::for_model(models::gpt_7b(), clusters::infinipipe_a800_ib(4), 8, 4);
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<token_count> lengths(static_cast<std::size_t>(g.between(1, 40)));
    for (auto& l : lengths) l = g.below(8) == 0 ? g.between(16384, 131072) : g.between(128, 8192);
    const int longest = static_cast<int>(*std::max_element(lengths.begin(), lengths.end()));
    const int n = static_cast<int>(g.between(1, std::min(6, longest)));
    CAPTURE(trial, n);
    const chunking c = sequence_processor{.cost = cost}.process(lengths, n);
    const chunk_order order = forward_order_of(c.chunks, lengths);
    REQUIRE(order.chains.front() == n);  // the longest sequence's n slices run first
    std::vector<token_count> tokens;
    for (const std::int64_t k : order.forward) tokens.push_back(c.chunks[static_cast<std::size_t>(k)].tokens());
    const pipeline_schedule s = chunk_one_f_one_b{.chains = order.chains}.build(4, tokens);
    REQUIRE(validate(s).max_in_flight == s.in_flight_bound);
    REQUIRE(s.in_flight_bound.front() == std::min(static_cast<int>(tokens.size()), 4 + n - 1));
  }
}
