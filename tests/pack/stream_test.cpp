// tests/pack/stream_test.cpp
// pack_stream with every packer: conservation (emitted + pending = input, each index once),
// exactly N micro-batches per iteration each <= L, determinism, arrival batching, delay
// accounting, keep_pending vs flush, and the errors of bad input.
#include "helpers.hpp"
#include "support/expect_error.hpp"

#include <catch2/catch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/pack.hpp>

#include <algorithm>
#include <vector>

using namespace zeppelin;
using namespace pack_test;
using zeppelin_test::expect_invalid;

namespace {

std::vector<any_packer> all_packers() {
  std::vector<any_packer> out;
  for (const packer_kind k : packer_kinds) out.push_back(make_packer(k));
  out.push_back({fixed_greedy{.window = 3}});
  out.push_back({wlb::with_queues(0)});
  out.push_back({wlb::with_queues(1)});
  out.push_back({wlb::with_queues(3)});
  wlb patient = wlb::with_queues(2);
  patient.max_wait = 1000;
  out.push_back({patient});
  return out;
}

}  // namespace

TEST_CASE("pack_stream conserves documents for every packer", "[pack]") {
  random_generator rng(15);
  for (int trial = 0; trial < 40; ++trial) {
    const packing_limits limits{.micro_batches = static_cast<int>(rng.between(1, 4)), .max_tokens = rng.between(8, 400)};
    // fixed_exact is exponential: keep its streams small.
    const auto count = static_cast<std::size_t>(rng.between(0, 60));
    const std::vector<token_count> lengths = random_lengths(rng, count, limits.max_tokens);
    for (const any_packer& p : all_packers()) {
      const bool exact = p.kind() == packer_kind::fixed_exact;
      const std::vector<token_count> used(lengths.begin(), lengths.begin() + static_cast<std::ptrdiff_t>(exact ? std::min<std::size_t>(count, 14) : count));
      INFO("trial " << trial << " packer " << to_string(p.kind()));
      for (const stream_end end : {stream_end::flush, stream_end::keep_pending}) {
        const packing_run run = pack_stream(p, used, limits, {.at_end = end});
        check_conservation(run, used, limits);
        if (end == stream_end::flush) REQUIRE(run.pending.empty());
        for (std::size_t i = 0; i < used.size(); ++i) REQUIRE((run.delay[i] >= 0) == !std::binary_search(run.pending.begin(), run.pending.end(), static_cast<std::int64_t>(i)));
      }
    }
  }
}

TEST_CASE("pack_stream is deterministic", "[pack]") {
  random_generator rng(7);
  const packing_limits limits{.micro_batches = 4, .max_tokens = 1 << 12};
  const std::vector<token_count> lengths = random_lengths(rng, 400, limits.max_tokens);
  for (const any_packer& p : all_packers()) {
    if (p.kind() == packer_kind::fixed_exact) continue;
    const packing_run a = pack_stream(p, lengths, limits);
    const packing_run b = pack_stream(p, lengths, limits);
    REQUIRE(a.iterations == b.iterations);
    REQUIRE(a.delay == b.delay);
  }
}

TEST_CASE("pack_stream cuts arrivals at N x L tokens and records arrival and delay", "[pack]") {
  // N = 2, L = 10: budget 20. Batches: {5, 5, 6} (16; +7 > 20), {7, 10} (17), {9}.
  const std::vector<token_count> lengths = {5, 5, 6, 7, 10, 9};
  const packing_limits limits{.micro_batches = 2, .max_tokens = 10};
  const packing_run run = pack_stream(original{}, lengths, limits);
  REQUIRE(run.arrived_in == std::vector<std::int64_t>{0, 0, 0, 1, 1, 2});
  // original, iteration 0: mb0 {5, 5}, mb1 {6}; iteration 1: {7}, {10}; iteration 2: {9}, {}.
  REQUIRE(run.iterations.size() == 3);
  REQUIRE(run.iterations[0].micro_batches[0].documents == std::vector<std::int64_t>{0, 1});
  REQUIRE(run.iterations[0].micro_batches[1].documents == std::vector<std::int64_t>{2});
  REQUIRE(run.delay == std::vector<std::int64_t>{0, 0, 0, 0, 0, 0});

  // A smaller budget: 12 tokens per iteration -> {5, 5}, {6}, {7}, {10}, {9}.
  const packing_run small = pack_stream(original{}, lengths, limits, {.tokens_per_iteration = 12});
  REQUIRE(small.arrived_in == std::vector<std::int64_t>{0, 0, 1, 2, 3, 4});
}

TEST_CASE("delay counts the iterations a document waited, flush included", "[pack]") {
  // wlb, N = 2, L = 100, queue at >= 50, 130 tokens per iteration: batches {30, 60, 40},
  // {30, 70}, {40, 30, 30}. The outliers 60 (doc 1) and 70 (doc 4) arrive in iterations 0
  // and 1; the queue releases them together in iteration 1: doc 1 waited 1 iteration.
  const std::vector<token_count> lengths = {30, 60, 40, 30, 70, 40, 30, 30};
  const packing_limits limits{.micro_batches = 2, .max_tokens = 100};
  wlb w = wlb::with_queues(1);
  const packing_run run = pack_stream(w, lengths, limits, {.tokens_per_iteration = 130});
  check_conservation(run, lengths, limits);
  REQUIRE(run.arrived_in == std::vector<std::int64_t>{0, 0, 0, 1, 1, 2, 2, 2});
  REQUIRE(run.delay[1] == 1);
  REQUIRE(run.delay[4] == 0);
  const double expected = 60.0 * 1 / (30 + 60 + 40 + 30 + 70 + 40 + 30 + 30);
  REQUIRE(mean_token_delay(run, lengths) == Approx(expected));

  // keep_pending: an outlier alone in its queue at the end stays pending, delay -1.
  const std::vector<token_count> lone = {30, 60, 30};
  const packing_run kept = pack_stream(w, lone, limits, {.at_end = stream_end::keep_pending});
  REQUIRE(kept.pending == std::vector<std::int64_t>{1});
  REQUIRE(kept.delay[1] == -1);
  const packing_run flushed = pack_stream(w, lone, limits);
  REQUIRE(flushed.pending.empty());
  REQUIRE(flushed.iterations.size() == 2);
  REQUIRE(flushed.delay[1] == 1);
}

TEST_CASE("pack_stream and every packer reject bad input with the numbers", "[pack]") {
  const std::vector<token_count> lengths = {3, 12, 4};
  const auto e = expect_invalid([&] { (void)pack_stream(wlb{}, lengths, {.micro_batches = 2, .max_tokens = 10}); });
  REQUIRE(e.value("index") == 1);
  REQUIRE(e.value("length") == 12);
  REQUIRE(e.value("L") == 10);
  REQUIRE(expect_invalid([&] { (void)pack_stream(original{}, lengths, {.micro_batches = 0, .max_tokens = 100}); }).value("micro_batches") == 0);
  REQUIRE(expect_invalid([&] { (void)pack_stream(original{}, lengths, {.micro_batches = 1, .max_tokens = 0}); }).value("max_tokens") == 0);
  const std::vector<token_count> zero = {3, 0};
  REQUIRE(expect_invalid([&] { (void)pack_stream(fixed_greedy{}, zero, {.micro_batches = 1, .max_tokens = 10}); }).value("index") == 1);
  for (const any_packer& p : all_packers()) {
    any_packer::state s;
    const std::vector<document_ref> docs = {{0, 5}, {1, 11}};
    const auto err = expect_invalid([&] { (void)p.pack(s, docs, {.micro_batches = 2, .max_tokens = 10}); });
    REQUIRE(err.value("index") == 1);
    REQUIRE(err.value("L") == 10);
    expect_invalid([&] { (void)p.pack(s, {}, {.micro_batches = 0, .max_tokens = 10}); });
    expect_invalid([&] { (void)p.flush(s, {.micro_batches = 1, .max_tokens = 0}); });
  }
  expect_invalid([&] { (void)pack_stream(fixed_greedy{.window = 0}, lengths, {.micro_batches = 1, .max_tokens = 100}); });
  expect_invalid([&] { (void)pack_stream(fixed_exact{.node_limit = 0}, lengths, {.micro_batches = 1, .max_tokens = 100}); });
  expect_invalid([&] { (void)pack_stream(original{}, lengths, {.micro_batches = 1, .max_tokens = 100}, {.tokens_per_iteration = -1}); });
}

TEST_CASE("any_packer names, kinds and state ownership", "[pack]") {
  for (const packer_kind k : packer_kinds) {
    REQUIRE(packer_kind_by_name(to_string(k)) == k);
    REQUIRE(make_packer(k).kind() == k);
  }
  const auto e = expect_invalid([] { (void)packer_kind_by_name("greedy"); });
  REQUIRE_THAT(e.what(), Catch::Contains("original, fixed_greedy, fixed_exact, wlb"));
  any_packer::state s;
  const std::vector<document_ref> docs = {{0, 5}};
  (void)make_packer(packer_kind::wlb).pack(s, docs, {.micro_batches = 1, .max_tokens = 10});
  expect_invalid([&] { (void)make_packer(packer_kind::original).pack(s, docs, {.micro_batches = 1, .max_tokens = 10}); });
}

TEST_CASE("arrival_batches cuts a stream into global batches of at most the budget", "[pack]") {
  using Batches = std::vector<std::pair<std::size_t, std::size_t>>;
  const std::vector<token_count> lengths = {3, 3, 5, 10, 1, 2, 4};
  // 3+3 fill 6; 5 alone (5+10 > 6); 10 is over the budget: a batch of its own; 1+2 then 4 does not fit
  REQUIRE(arrival_batches(lengths, 6) == Batches{{0, 2}, {2, 3}, {3, 4}, {4, 6}, {6, 7}});
  REQUIRE(arrival_batches(lengths, 1000) == Batches{{0, 7}});
  REQUIRE(arrival_batches(std::vector<token_count>{}, 6).empty());
}
