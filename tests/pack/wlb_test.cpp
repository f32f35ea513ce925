// tests/pack/wlb_test.cpp
// WLB-LLM's Algorithm 1: outlier routing by threshold, FIFO queues, release of exactly N,
// the placement rule (least workload, else fewest tokens, else carry over), the maximum
// wait, the flush, with_queues' thresholds and the errors.
#include "helpers.hpp"
#include "support/expect_error.hpp"

#include <catch2/catch.hpp>
#include <zeppelin/pack.hpp>

#include <algorithm>
#include <vector>

using namespace zeppelin;
using namespace pack_test;
using zeppelin_test::expect_invalid;

namespace {

std::vector<std::int64_t> queue_indices(const wlb::state& s, std::size_t q) {
  std::vector<std::int64_t> out;
  for (const waiting_document& w : s.queues[q]) out.push_back(w.document.index);
  return out;
}

std::vector<std::int64_t> emitted(const packed_iteration& it) {
  std::vector<std::int64_t> out;
  for (const auto& mb : it.micro_batches) out.insert(out.end(), mb.documents.begin(), mb.documents.end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("with_queues and threshold tokens", "[pack][wlb]") {
  REQUIRE(wlb{}.thresholds == std::vector<double>{0.5, 0.75});
  REQUIRE(wlb::with_queues(2) == wlb{});
  REQUIRE(wlb::with_queues(3).thresholds == std::vector<double>{0.5, 0.75, 0.875});
  REQUIRE(wlb::with_queues(0).thresholds.empty());
  const packing_limits limits{.micro_batches = 4, .max_tokens = 131072};
  REQUIRE(wlb::with_queues(3).threshold_tokens(limits) == std::vector<token_count>{65536, 98304, 114688});
  REQUIRE(wlb{}.threshold_tokens({.micro_batches = 1, .max_tokens = 101}) == std::vector<token_count>{51, 76});
  // L_max above the context window: the thresholds follow the context.
  REQUIRE(wlb{.context_window = 131072}.threshold_tokens({.micro_batches = 4, .max_tokens = 196608}) ==
          std::vector<token_count>{65536, 98304});
  const std::vector<token_count> bounds = {50, 75};
  REQUIRE(wlb::queue_of(49, bounds) == -1);
  REQUIRE(wlb::queue_of(50, bounds) == 0);
  REQUIRE(wlb::queue_of(74, bounds) == 0);
  REQUIRE(wlb::queue_of(75, bounds) == 1);
  REQUIRE(wlb::queue_of(100, bounds) == 1);
}

TEST_CASE("outliers wait in the queue of their range, FIFO, and leave N at a time", "[pack][wlb]") {
  const packing_limits limits{.micro_batches = 3, .max_tokens = 100};
  const wlb w{.max_wait = 1000};  // thresholds 50 and 75
  wlb::state s;
  // Iteration 0: 60 (q0), 80 (q1), 10, 55 (q0), 90 (q1): nothing released yet.
  std::vector<document_ref> a = {{0, 60}, {1, 80}, {2, 10}, {3, 55}, {4, 90}};
  packed_iteration it = w.pack(s, a, limits);
  REQUIRE(emitted(it) == std::vector<std::int64_t>{2});
  REQUIRE(queue_indices(s, 0) == std::vector<std::int64_t>{0, 3});
  REQUIRE(queue_indices(s, 1) == std::vector<std::int64_t>{1, 4});
  // Iteration 1: 70 (q0), 50 (q0), 20: q0 holds 4 >= 3 and releases exactly 3, oldest first.
  a = {{5, 70}, {6, 50}, {7, 20}};
  it = w.pack(s, a, limits);
  REQUIRE(emitted(it) == std::vector<std::int64_t>{0, 3, 5, 7});
  REQUIRE(queue_indices(s, 0) == std::vector<std::int64_t>{6});
  REQUIRE(queue_indices(s, 1) == std::vector<std::int64_t>{1, 4});
  // Each released outlier has a micro-batch of its own (one outlier per micro-batch).
  for (const auto& mb : it.micro_batches) {
    const auto outliers = std::count_if(mb.documents.begin(), mb.documents.end(), [](std::int64_t i) { return i == 0 || i == 3 || i == 5; });
    REQUIRE(outliers == 1);
  }
  // Iteration 2: 75 (q1): q1 releases 1, 4, 8.
  a = {{8, 75}};
  it = w.pack(s, a, limits);
  REQUIRE(emitted(it) == std::vector<std::int64_t>{1, 4, 8});
  REQUIRE(s.queues[1].empty());
  // Flush: the last outlier comes out.
  const std::vector<packed_iteration> rest = w.flush(s, limits);
  REQUIRE(rest.size() == 1);
  REQUIRE(emitted(rest[0]) == std::vector<std::int64_t>{6});
  REQUIRE(s.queues[0].empty());
  REQUIRE(s.carried.empty());
}

TEST_CASE("placement: least workload if it fits, else fewest tokens, else carry over", "[pack][wlb]") {
  const packing_limits limits{.micro_batches = 2, .max_tokens = 100};
  // No queues; pure attention workload d^2 so the numbers are easy.
  const wlb w{.thresholds = {}, .max_wait = 1000, .workload = {.quadratic = 1, .linear = 0}};
  wlb::state s;
  // Sorted: 60, 45, 40, 30, 30, 10 (ties by index).
  // 60 -> mb0 (both empty: lowest). 45 -> mb1. 40 -> least workload mb1 (2025): 85 fits.
  // 30 (doc 3) -> least workload mb0 (3600 < 2025 + 1600 = 3625): 90 fits.
  // 30 (doc 5) -> least workload mb1 (3625 < 4500): 115 > 100; fewest tokens mb1 (85 < 90) too;
  //   carried. 10 -> least workload mb1: 95 fits.
  const std::vector<document_ref> a = {{0, 40}, {1, 60}, {2, 45}, {3, 30}, {4, 10}, {5, 30}};
  const packed_iteration it = w.pack(s, a, limits);
  REQUIRE(it.micro_batches[0].documents == std::vector<std::int64_t>{1, 3});
  REQUIRE(it.micro_batches[1].documents == std::vector<std::int64_t>{2, 0, 4});
  REQUIRE(s.carried.size() == 1);
  REQUIRE(s.carried[0].document.index == 5);
  REQUIRE(s.carried[0].arrived == 0);

  // The fewest-tokens fallback: the least-workload micro-batch is full in tokens.
  wlb::state t;
  const std::vector<document_ref> b = {{0, 90}, {1, 20}, {2, 20}, {3, 20}, {4, 20}, {5, 20}};
  // 90 -> mb0 (8100). The 20s all go to mb1, whose work (at most 6400) stays below 8100,
  // up to exactly L = 100 tokens (<= L fits).
  const packed_iteration it2 = w.pack(t, b, limits);
  REQUIRE(it2.micro_batches[0].documents == std::vector<std::int64_t>{0});
  REQUIRE(it2.micro_batches[1].tokens == 100);
  REQUIRE(t.carried.empty());
  wlb::state u;
  const std::vector<document_ref> c = {{0, 50}, {1, 50}, {2, 45}, {3, 9}};
  // 50 -> mb0, 50 -> mb1, 45 -> mb0 (ties: lowest) 95; 9: least workload mb1 (2500): 59 fits.
  const packed_iteration it3 = w.pack(u, c, limits);
  REQUIRE(it3.micro_batches[0].documents == std::vector<std::int64_t>{0, 2});
  REQUIRE(it3.micro_batches[1].documents == std::vector<std::int64_t>{1, 3});
  wlb::state x;
  // The least-workload micro-batch has no room, the fewest-tokens one has: 70 alone (4900)
  // vs 30 + 30 + 30 (2700, 90 tokens); then 15 -> least workload is the 90-token one:
  // 105 > 100; fewest tokens is the 70-token one: 85 fits.
  const std::vector<document_ref> e = {{0, 70}, {1, 30}, {2, 30}, {3, 30}, {4, 15}};
  const packed_iteration it4 = w.pack(x, e, limits);
  REQUIRE(it4.micro_batches[0].documents == std::vector<std::int64_t>{0, 4});
  REQUIRE(it4.micro_batches[1].documents == std::vector<std::int64_t>{1, 2, 3});
}

TEST_CASE("maximum wait forces a document into the next iteration", "[pack][wlb]") {
  const packing_limits limits{.micro_batches = 2, .max_tokens = 100};
  const std::vector<document_ref> outlier = {{0, 80}};
  for (const std::int64_t max_wait : {0, 1, 3}) {
    const wlb w{.max_wait = max_wait};
    wlb::state s;
    std::int64_t emitted_at = -1;
    for (std::int64_t t = 0; t < 10 && emitted_at < 0; ++t) {
      const std::vector<document_ref> filler = {{t + 1, 10}};
      const packed_iteration it = w.pack(s, t == 0 ? std::span<const document_ref>(outlier) : std::span<const document_ref>(filler), limits);
      for (const auto& mb : it.micro_batches)
        if (std::find(mb.documents.begin(), mb.documents.end(), 0) != mb.documents.end()) {
          emitted_at = t;
          // forced documents go first: into micro-batch 0 of an empty iteration
          REQUIRE(mb.documents.front() == 0);
        }
    }
    REQUIRE(emitted_at == max_wait);
  }
  // On a stream: no document waits more than max_wait iterations.
  random_generator rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    const packing_limits l{.micro_batches = static_cast<int>(rng.between(1, 4)), .max_tokens = 1000};
    const std::vector<token_count> lengths = random_lengths(rng, 300, l.max_tokens);
    const wlb w{.thresholds = {0.5, 0.75, 0.9}, .max_wait = rng.between(0, 4)};
    // Arrivals at 3/4 of the capacity: at full capacity a backlog builds up that no packer
    // can drain, and more than N forced documents may then compete for N micro-batches.
    const packing_run run = pack_stream(w, lengths, l, {.tokens_per_iteration = l.micro_batches * l.max_tokens * 3 / 4});
    check_conservation(run, lengths, l);
    // A document waits longer only if, at its deadline, it was forced but fitted in no
    // micro-batch (more forced documents than room): then it fits in none of them at the end
    // of that iteration either.
    std::int64_t late = 0;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      if (run.delay[i] <= w.max_wait) continue;
      ++late;
      const packed_iteration& deadline = run.iterations[static_cast<std::size_t>(run.arrived_in[i] + w.max_wait)];
      for (const packed_micro_batch& mb : deadline.micro_batches) {
        INFO("document " << i << " length " << lengths[i] << " max_wait " << w.max_wait);
        REQUIRE(mb.tokens + lengths[i] > l.max_tokens);
      }
    }
    REQUIRE(late * 50 <= static_cast<std::int64_t>(lengths.size()));
  }
}

TEST_CASE("every iteration has N micro-batches within L and the queues balance a long-tail stream", "[pack][wlb]") {
  random_generator rng(11);
  const packing_limits limits{.micro_batches = 4, .max_tokens = 1 << 14};
  const std::vector<token_count> lengths = random_lengths(rng, 3000, limits.max_tokens);
  const packing_run base = pack_stream(original{}, lengths, limits);
  const packing_run balanced = pack_stream(wlb{}, lengths, limits);
  check_conservation(base, lengths, limits);
  check_conservation(balanced, lengths, limits);
  REQUIRE(mean_workload_imbalance(balanced.iterations) < mean_workload_imbalance(base.iterations));
}

TEST_CASE("wlb rejects bad thresholds and waits", "[pack][wlb]") {
  const packing_limits limits{.micro_batches = 2, .max_tokens = 100};
  wlb::state s;
  REQUIRE(expect_invalid([&] { (void)wlb{.thresholds = {0.7, 0.6}}.pack(s, {}, limits); }).value("queue") == 1);
  expect_invalid([&] { (void)wlb{.thresholds = {0.0}}.pack(s, {}, limits); });
  expect_invalid([&] { (void)wlb{.thresholds = {1.5}}.pack(s, {}, limits); });
  REQUIRE(expect_invalid([&] { (void)wlb{.max_wait = -1}.pack(s, {}, limits); }).value("max_wait") == -1);
  REQUIRE(expect_invalid([&] { (void)wlb{.context_window = -1}.pack(s, {}, limits); }).value("context_window") == -1);
  expect_invalid([&] { (void)wlb{.workload = {.quadratic = -1, .linear = 1}}.pack(s, {}, limits); });
  expect_invalid([] { (void)wlb::with_queues(-1); });
}
