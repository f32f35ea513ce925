// tests/pack/chunking_test.cpp
// InfiniPipe's chunk cost model (Eqs. 1, 3, 4, 5 against hand-computed numbers, the marginal
// split, the defaults, profile coefficients, errors) and sequence processor (Algorithm 1):
// on seeded random batches and cost models, tokens are conserved per sequence, slices are
// contiguous and in order, a slice's context is the sum of the slices before it, short
// sequences are never split, batched chunks have C = 0, a hybrid chunk has exactly one tail,
// the mesh is non-increasing, sums to the longest length and has equal backward times
// within one token's time; small hand-worked plans; termination on the input the paper's
// threshold rule loops on; determinism; the outer search returns the evaluator's best plan
// (never worse than n_slices = 1); the memory limit; the errors.
#include "support/expect_error.hpp"

#include <catch2/catch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost.hpp>
#include <zeppelin/pack.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace zeppelin;
using zeppelin_test::expect_error;
using zeppelin_test::expect_invalid;

namespace {

//! time = a1 (e^2 - b^2) + a2 (e - b) per slice on one GPU, no fixed cost, no all-to-all.
chunk_cost_model plain_cost(double a1, double a2) {
  chunk_cost_model m;
  m.forward = {a1, a2, 0.0};
  m.backward = {a1, a2, 0.0};
  return m;
}

chunk_cost_model random_cost(random_generator& rng) {
  chunk_cost_model m;
  m.d_s = 1 << rng.below(4);
  m.d_p = static_cast<int>(1 + rng.below(8));
  m.layers = static_cast<int>(1 + rng.below(64));
  m.hidden = 64 * static_cast<std::int64_t>(1 + rng.below(100));
  m.kv_hidden = std::max<std::int64_t>(1, m.hidden >> rng.below(4));
  const double a1 = rng.below(5) == 0 ? 0.0 : rng.uniform() * 1e-8;
  const double a2 = rng.below(5) == 0 && a1 > 0 ? 0.0 : 1e-7 + rng.uniform() * 1e-3;
  const double b1 = rng.below(2) == 0 ? 0.0 : rng.uniform() * 1e-2;
  m.forward = {a1, a2, b1};
  m.backward = {2.5 * a1, 2 * a2, b1};
  m.all_to_all = rng.below(3) == 0 ? no_all_to_all() : link_spec{1e10 + rng.uniform() * 4e11, rng.uniform() * 1e-5};
  m.token_activation_bytes = rng.uniform() * 1e7;
  return m;
}

//! 1 .. 64 lengths, mostly short with a long tail; sometimes all equal.
std::vector<token_count> random_lengths(random_generator& rng) {
  const token_count top = std::array<token_count, 4>{16, 1000, 40000, 300000}[rng.below(4)];
  std::vector<token_count> out(static_cast<std::size_t>(1 + rng.below(64)));
  const bool equal = rng.below(8) == 0;
  for (token_count& l : out)
    l = equal ? top : rng.below(6) == 0 ? rng.between(top / 2 + 1, top) : rng.between(1, std::max<token_count>(1, top / 8));
  return out;
}

bool whole(const chunk_slice& s, std::span<const token_count> lengths) {
  return s.begin == 0 && s.end == lengths[static_cast<std::size_t>(s.sequence)];
}

//! Every structural property of a chunking of `lengths` with `n` slices.
void check_chunking(const chunking& c, std::span<const token_count> lengths, int n) {
  const token_count longest = *std::max_element(lengths.begin(), lengths.end());
  // The mesh.
  REQUIRE(c.mesh.size() == static_cast<std::size_t>(n));
  token_count sum = 0;
  for (std::size_t j = 0; j < c.mesh.size(); ++j) {
    REQUIRE(c.mesh[j] >= 1);
    if (j > 0) REQUIRE(c.mesh[j] <= c.mesh[j - 1]);
    sum += c.mesh[j];
  }
  REQUIRE(sum == longest);
  std::vector<token_count> prefix{0};
  for (const token_count m : c.mesh) prefix.push_back(prefix.back() + m);
  // Tokens conserved, contiguous slices, context = the cut slice's begin.
  validate_chunks(c.chunks, lengths);
  // Per sequence, its pieces in chunk order: contiguous, in slice order, each context the
  // sum of the slices before it.
  std::vector<token_count> covered(lengths.size(), 0);
  for (const chunk& k : c.chunks) {
    REQUIRE(k.tokens() <= c.mesh.front());  // T_m
    int tails = 0, cuts = 0;
    for (std::size_t i = 0; i < k.slices.size(); ++i) {
      const chunk_slice& s = k.slices[i];
      const token_count length = lengths[static_cast<std::size_t>(s.sequence)];
      REQUIRE(s.begin == covered[static_cast<std::size_t>(s.sequence)]);
      covered[static_cast<std::size_t>(s.sequence)] = s.end;
      if (length <= c.mesh.front()) REQUIRE(whole(s, lengths));  // short: never split
      if (whole(s, lengths)) continue;
      ++cuts;
      REQUIRE(i == 0);  // the cut slice leads its chunk
      REQUIRE(k.context == s.begin);
      const auto at = std::find(prefix.begin(), prefix.end(), s.begin);
      REQUIRE(at != prefix.end());  // cut along the mesh prefix
      const auto j = static_cast<std::size_t>(at - prefix.begin());
      if (s.end == length) {
        ++tails;
        REQUIRE(s.end <= prefix[j + 1]);  // the tail: what is left after the last full mesh slice
        REQUIRE(s.begin > 0);
      } else {
        REQUIRE(s.end == prefix[j + 1]);  // a split slice is a mesh slice
        REQUIRE(k.slices.size() == 1);
      }
    }
    switch (kind_of(k, lengths)) {
      case chunk_kind::batched: REQUIRE(k.context == 0); REQUIRE(cuts == 0); break;
      case chunk_kind::hybrid: REQUIRE(tails == 1); break;
      case chunk_kind::split: REQUIRE(cuts == 1); REQUIRE(tails == 0); break;
    }
  }
  for (std::size_t i = 0; i < lengths.size(); ++i) REQUIRE(covered[i] == lengths[i]);
  // Canonical order: cut sequences longest first, each chain contiguous, batched chunks last.
  const chunk_links links = links_of(c.chunks, lengths);
  bool batched_seen = false;
  token_count previous_cut = std::numeric_limits<token_count>::max();
  for (std::size_t k = 0; k < c.chunks.size(); ++k) {
    if (links.next[k] >= 0) REQUIRE(links.next[k] == static_cast<std::int64_t>(k) + 1);
    const chunk_kind kind = kind_of(c.chunks[k], lengths);
    if (kind == chunk_kind::batched) {
      batched_seen = true;
      continue;
    }
    REQUIRE_FALSE(batched_seen);
    if (links.previous[k] < 0) {
      const token_count length = lengths[static_cast<std::size_t>(c.chunks[k].slices.front().sequence)];
      REQUIRE(length <= previous_cut);
      previous_cut = length;
    }
  }
}

//! |marginal backward time of each mesh slice - the equal share| <= one token's time at the
//! end of the longest sequence.
void check_equal_time(const chunk_cost_model& cost, const std::vector<token_count>& mesh) {
  const auto cumulative = [&](token_count x) { return cost.slice_seconds(cost.backward, chunk_slice{0, 0, x}); };
  token_count longest = 0;
  for (const token_count m : mesh) longest += m;
  const double share = cumulative(longest) / static_cast<double>(mesh.size());
  const double token = cumulative(longest) - cumulative(longest - 1);
  token_count at = 0;
  for (const token_count m : mesh) {
    const double t = cumulative(at + m) - cumulative(at);
    INFO("slice [" << at << ", " << at + m << ") time " << t << " share " << share << " one token " << token);
    REQUIRE(std::abs(t - share) <= token * (1 + 1e-9));
    at += m;
  }
}

std::vector<chunk_slice> slices(std::initializer_list<chunk_slice> s) { return s; }

}  // namespace

// ---------------------------------------------------------------------------------------
// Cost model.

TEST_CASE("chunk cost model: Eq. 1, 3, 4 and 5 by hand", "[cost][chunk_cost]") {
  chunk_cost_model m;
  m.d_s = 2;
  m.d_p = 4;
  m.layers = 8;
  m.element_bytes = 2;
  m.hidden = 100;
  m.kv_hidden = 25;
  m.forward = {1e-6, 1e-3, 0.4};
  m.backward = {3e-6, 2e-3, 0.8};
  m.all_to_all = {1e6, 1e-3};
  m.token_activation_bytes = 1000;
  const std::vector<token_count> lengths = {300, 30, 20};
  // Hybrid: tail [100, 300) of sequence 0 with context 100, plus the whole sequence 1.
  const chunk hybrid{100, slices({{0, 100, 300}, {1, 0, 30}})};
  const chunk split{0, slices({{0, 0, 100}})};
  const chunk batched{0, slices({{1, 0, 30}, {2, 0, 20}})};
  // Eq. 1, N = 8: (a1 ((C + s0)^2 - C^2) + a2 s0 + a1 s^2 + a2 s) / N + b1 / d_p.
  const double comp = (1e-6 * (300.0 * 300 - 100.0 * 100) + 1e-3 * 200 + 1e-6 * 900 + 1e-3 * 30) / 8 + 0.4 / 4;
  REQUIRE(m.compute_seconds(m.forward, hybrid) == Approx(comp).epsilon(1e-12));
  // Eq. 3 (GQA): (e (D + D_kv) sum s / (d_s B) + 2 beta) 2L / d_p.
  const double a2a = (2.0 * 125 * 230 / (2 * 1e6) + 2 * 1e-3) * 2 * 8 / 4;
  REQUIRE(m.all_to_all_seconds(hybrid) == Approx(a2a).epsilon(1e-12));
  REQUIRE(m.seconds(m.forward, hybrid) == Approx(comp + a2a).epsilon(1e-12));
  REQUIRE(m.seconds(m.backward, hybrid) > m.seconds(m.forward, hybrid));
  // MHA (D_kv = D): the paper's Eq. 3, (e D sum s / (d_s B) + beta) 4L / d_p.
  chunk_cost_model mha = m;
  mha.kv_hidden = mha.hidden;
  REQUIRE(mha.all_to_all_seconds(batched) == Approx((2.0 * 100 * 50 / (2 * 1e6) + 1e-3) * 4 * 8 / 4).epsilon(1e-12));
  // Eq. 5: the dK/dV term only for the split chunk.
  REQUIRE(m.activation_bytes(split, lengths) == Approx((1000 + 2 * 2.0 * 8 * 25) * 100 / 8).epsilon(1e-12));
  REQUIRE(m.activation_bytes(hybrid, lengths) == Approx(1000.0 * 230 / 8).epsilon(1e-12));
  REQUIRE(m.activation_bytes(batched, lengths) == Approx(1000.0 * 50 / 8).epsilon(1e-12));
}

TEST_CASE("chunk cost model: T_tot is the fixed part plus marginal slice times", "[cost][chunk_cost]") {
  random_generator rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const chunk_cost_model m = random_cost(rng);
    chunk c;
    const token_count context = rng.between(0, 5000);
    c.context = context;
    c.slices.push_back({0, context, context + rng.between(1, 5000)});
    for (std::int64_t i = 1, count = static_cast<std::int64_t>(rng.below(5)); i <= count; ++i) c.slices.push_back({i, 0, rng.between(1, 3000)});
    for (const chunk_compute_coefficients& pass : {m.forward, m.backward}) {
      double t = m.fixed_seconds(pass);
      for (const chunk_slice& s : c.slices) t += m.slice_seconds(pass, s);
      REQUIRE(m.seconds(pass, c) == Approx(t).epsilon(1e-12));
      REQUIRE(m.seconds(pass, c) == Approx(m.compute_seconds(pass, c) + m.all_to_all_seconds(c)).epsilon(1e-12));
    }
  }
}

TEST_CASE("chunk cost model: defaults from the model shape and GPU", "[cost][chunk_cost]") {
  const model_config gpt = models::gpt_13b();
  const chunk_cost_model m = chunk_cost_model::for_model(gpt, clusters::infinipipe_a800_ib(4), 8, 4);
  validate(m);
  const attention_time_model attention = attention_time_model::for_gpu(gpus::a800_80g());
  const double fwd_rate = attention.forward.points().back().flops_per_second;
  REQUIRE(m.forward.a1 == Approx(gpt.layers * 2.0 * gpt.heads * gpt.head_dim / fwd_rate).epsilon(1e-12));
  const double gemm = linear_time_model{}.seconds(linear_forward_flops_per_token(gpt), gpus::a800_80g());
  REQUIRE(m.forward.a2 == Approx(gpt.layers * (gemm + 2.0 * gpt.heads * gpt.head_dim / fwd_rate)).epsilon(1e-12));
  REQUIRE(m.backward.a1 > 2 * m.forward.a1);
  REQUIRE(m.backward.a2 > 2 * m.forward.a2);
  REQUIRE(m.forward.b1 == 0);
  REQUIRE(m.all_to_all.bandwidth == Approx(links::nvlink_a800().bandwidth * 8 / 7));
  REQUIRE(m.kv_hidden == gpt.kv_width());
  const pipeline_memory_model memory{gpt, parallel_layout{}, memory_settings{}};
  REQUIRE(m.token_activation_bytes == Approx(gpt.layers * memory.activation_bytes_per_token_layer()));
  // No SP: no all-to-all.
  const chunk_cost_model solo = chunk_cost_model::for_model(gpt, clusters::wlb_h100_roce(1), 1, 2);
  REQUIRE(solo.all_to_all_seconds(chunk{0, slices({{0, 0, 4096}})}) == 0.0);
  // A 64K sequence's backward on one of 32 GPUs takes a sensible fraction of a second.
  const double t = m.seconds(m.backward, chunk{0, slices({{0, 0, 65536}})});
  REQUIRE(t > 0.1);
  REQUIRE(t < 10);
}

TEST_CASE("chunk cost model: coefficients from a fitted stage profile", "[cost][chunk_cost]") {
  const quadratic_profile p{2e-10, 3e-5, 4e-3};
  chunk_cost_model m;
  m.d_s = 4;
  m.d_p = 3;
  m.forward = chunk_compute_coefficients::from_stage_profile(p, m.d_s, m.d_p);
  for (const token_count l : {1, 1000, 123456})
    REQUIRE(m.compute_seconds(m.forward, chunk{0, slices({{0, 0, l}})}) == Approx(p.at(static_cast<double>(l))).epsilon(1e-12));
}

TEST_CASE("chunk cost model: errors name the value", "[cost][chunk_cost]") {
  chunk_cost_model m;
  m.d_s = 0;
  REQUIRE(expect_invalid([&] { validate(m); }).value("d_s") == 0);
  m = {};
  m.backward.a1 = -1;
  REQUIRE(expect_invalid([&] { validate(m); }).value("a1") == -1);
  m = {};
  m.all_to_all.bandwidth = 0;
  REQUIRE(expect_invalid([&] { validate(m); }).value("bandwidth") == 0);
  m = {};
  m.forward.b1 = std::numeric_limits<double>::quiet_NaN();
  REQUIRE(std::isnan(*expect_invalid([&] { validate(m); }).value("b1")));
  REQUIRE(expect_invalid([&] { (void)chunk_cost_model::for_model(models::gpt_7b(), clusters::wlb_h100_roce(1), 8, 0); })
              .value("d_p") == 0);
}

// ---------------------------------------------------------------------------------------
// Sequence processor.

TEST_CASE("chunking: the mesh by hand", "[pack][chunking]") {
  // Pure quadratic time x^2: 12 tokens in 2 slices of 72 each -> boundary sqrt(72) = 8.49 -> 8.
  REQUIRE(sequence_processor{plain_cost(1, 0)}.mesh(12, 2) == std::vector<token_count>{8, 4});
  // Linear time: equal lengths; the rounding remainder goes to the first slices.
  REQUIRE(sequence_processor{plain_cost(0, 1)}.mesh(10, 3) == std::vector<token_count>{4, 3, 3});
  REQUIRE(sequence_processor{plain_cost(0, 1)}.mesh(7, 7) == std::vector<token_count>(7, 1));
  // 8K, 4K, 2K-like: later slices carry more context.
  const auto mesh = sequence_processor{plain_cost(1, 0)}.mesh(14336, 3);
  REQUIRE(mesh[0] > mesh[1]);
  REQUIRE(mesh[1] > mesh[2]);
  // One slice per token even when the quadratic share of the last slices rounds to 0.
  REQUIRE(sequence_processor{plain_cost(1, 0)}.mesh(5, 5) == std::vector<token_count>(5, 1));
}

TEST_CASE("chunking: the mesh has equal backward times within one token", "[pack][chunking]") {
  random_generator rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    const chunk_cost_model cost = random_cost(rng);
    const token_count longest = rng.between(1, rng.below(2) == 0 ? 64 : 500000);
    const int n = static_cast<int>(rng.between(1, std::min<token_count>(longest, 48)));
    const std::vector<token_count> mesh = sequence_processor{cost}.mesh(longest, n);
    INFO("longest " << longest << " n " << n << " a1 " << cost.backward.a1 << " a2 " << cost.backward.a2);
    REQUIRE(mesh.size() == static_cast<std::size_t>(n));
    REQUIRE(std::is_sorted(mesh.begin(), mesh.end(), std::greater<>()));
    REQUIRE(mesh.back() >= 1);
    token_count sum = 0;
    for (const token_count m : mesh) sum += m;
    REQUIRE(sum == longest);
    check_equal_time(cost, mesh);
  }
}

TEST_CASE("chunking: properties on random batches", "[pack][chunking]") {
  random_generator rng(2025);
  for (int trial = 0; trial < 400; ++trial) {
    const sequence_processor sp{random_cost(rng)};
    const std::vector<token_count> lengths = random_lengths(rng);
    const token_count longest = *std::max_element(lengths.begin(), lengths.end());
    const int n = static_cast<int>(rng.between(1, std::min<token_count>(longest, 16)));
    INFO("trial " << trial << " n " << n);
    const chunking c = sp.process(lengths, n);
    check_chunking(c, lengths, n);
    REQUIRE(c.mesh == sp.mesh(longest, n));
    // Sequences longer than mesh[0] are cut: they hold no whole slice.
    for (const chunk& k : c.chunks)
      for (const chunk_slice& s : k.slices)
        if (lengths[static_cast<std::size_t>(s.sequence)] > c.mesh.front()) REQUIRE_FALSE(whole(s, lengths));
    // One hybrid chunk per cut sequence, and one slice of one sequence per split chunk.
    std::size_t cut = 0, hybrid = 0;
    for (const token_count l : lengths) cut += l > c.mesh.front() ? 1 : 0;
    for (const chunk& k : c.chunks) hybrid += kind_of(k, lengths) == chunk_kind::hybrid ? 1 : 0;
    REQUIRE(hybrid == cut);
    // Deterministic: the same input gives the same plan.
    REQUIRE(sp.process(lengths, n) == c);
    REQUIRE(sequence_processor{sp}.process(lengths, n) == c);
  }
}

TEST_CASE("chunking: one slice packs every sequence whole", "[pack][chunking]") {
  const sequence_processor sp{plain_cost(1e-9, 1e-6)};
  const std::vector<token_count> lengths = {100, 7, 50, 100, 3};
  const chunking c = sp.process(lengths, 1);
  REQUIRE(c.mesh == std::vector<token_count>{100});
  for (const chunk& k : c.chunks) REQUIRE(kind_of(k, lengths) == chunk_kind::batched);
  check_chunking(c, lengths, 1);
}

TEST_CASE("chunking: a linear-time plan by hand", "[pack][chunking]") {
  // time = tokens: mesh {6, 6}, T_t = T_m = 6. 12 is cut into [0, 6) and its tail [6, 12);
  // 5, 4 and 3 each find no bucket with room (fewest tokens + theirs > 6) and open one;
  // 2 fits the buckets of 4 and 3 (time per token ties at 1): the one with fewer tokens.
  const std::vector<token_count> lengths = {2, 12, 5, 4, 3};
  const chunking c = sequence_processor{plain_cost(0, 1)}.process(lengths, 2);
  REQUIRE(c.mesh == std::vector<token_count>{6, 6});
  const std::vector<chunk> expected = {
      {0, slices({{1, 0, 6}})}, {6, slices({{1, 6, 12}})}, {0, slices({{2, 0, 5}})}, {0, slices({{3, 0, 4}})},
      {0, slices({{4, 0, 3}, {0, 0, 2}})}};
  REQUIRE(c.chunks == expected);
}

TEST_CASE("chunking: the threshold raise terminates where the paper's rule loops", "[pack][chunking]") {
  // Bucket 0: a tail with high time per token (few tokens, much context); bucket 1: a short
  // sequence with many tokens and little time. The item fits bucket 0's tokens only, and
  // bucket 0 is over T_t. The paper's raise, min over ALL buckets of time + item time, is
  // bucket 1's, which cannot take the tokens: it admits no bucket, so its retry loops.
  std::vector<detail::chunk_bucket> buckets = {{80, 4, {{0, 8, 12}}}, {49, 7, {{1, 0, 7}}}};
  const std::vector<detail::bucket_item> items = {{9, {2, 0, 3}}};
  const double t_m = 8;
  double paper_raise = std::numeric_limits<double>::infinity();
  for (const auto& b : buckets) paper_raise = std::min(paper_raise, b.time + items[0].time);
  for (const auto& b : buckets) REQUIRE_FALSE((b.time + items[0].time <= paper_raise && static_cast<double>(b.tokens + 3) <= t_m));
  // The fix raises T_t over the token-feasible buckets only: bucket 0 takes the item.
  const double t_t = detail::best_fit_decreasing(buckets, items, 0.0, 80.0, 8);
  REQUIRE(t_t == 89.0);
  REQUIRE(buckets[0].slices.size() == 2);
  REQUIRE(buckets[0].tokens == 7);
  REQUIRE(buckets[0].time == 89.0);
  REQUIRE(buckets[1].slices.size() == 1);
  // End to end: time = x^2, lengths {12, 7, 3}, 2 slices: mesh {8, 4}, T_t = 80, T_m = 8;
  // 7 opens a bucket (4 + 7 > 8), then 3 is exactly the case above.
  const std::vector<token_count> lengths = {12, 7, 3};
  const chunking c = sequence_processor{plain_cost(1, 0)}.process(lengths, 2);
  const std::vector<chunk> expected = {{0, slices({{0, 0, 8}})}, {8, slices({{0, 8, 12}, {2, 0, 3}})}, {0, slices({{1, 0, 7}})}};
  REQUIRE(c.chunks == expected);
}

TEST_CASE("chunking: packing never loops on random adversarial buckets", "[pack][chunking]") {
  // Random buckets and items: every item is placed, the threshold never falls, and an item
  // placed over the old threshold is placed at exactly the raised one.
  random_generator rng(99);
  for (int trial = 0; trial < 500; ++trial) {
    const token_count t_m = rng.between(1, 100);
    std::vector<detail::chunk_bucket> buckets;
    for (std::int64_t b = 0, count = static_cast<std::int64_t>(rng.below(6)); b < count; ++b) {
      const token_count tokens = rng.between(1, t_m);
      buckets.push_back({rng.uniform() * 100, tokens, {{b, 0, tokens}}});
    }
    std::vector<detail::bucket_item> items;
    for (std::int64_t i = 0, count = static_cast<std::int64_t>(rng.below(30)); i < count; ++i)
      items.push_back({rng.uniform() * 30, {100 + i, 0, rng.between(1, t_m)}});
    std::size_t placed_before = 0;
    for (const auto& b : buckets) placed_before += b.slices.size();
    double t_t = rng.uniform() * 50;
    for (const auto& item : items) {
      const double next = detail::best_fit_decreasing(buckets, std::span(&item, 1), 0.0, t_t, t_m);
      REQUIRE(next >= t_t);
      t_t = next;
    }
    std::size_t placed = 0;
    for (const auto& b : buckets) {
      placed += b.slices.size();
      REQUIRE(b.tokens <= t_m);
    }
    REQUIRE(placed == placed_before + items.size());
  }
}

namespace {

// The scan best_fit_decreasing's index must answer like: every query over every bucket.
double best_fit_by_scan(std::vector<detail::chunk_bucket>& buckets, std::span<const detail::bucket_item> items, double open_time,
                        double time_threshold, token_count token_threshold) {
  for (const detail::bucket_item& item : items) {
    const token_count tokens = item.slice.tokens();
    const auto token_fits = [&](const detail::chunk_bucket& b) { return b.tokens + tokens <= token_threshold; };
    std::size_t fewest = 0;
    for (std::size_t i = 1; i < buckets.size(); ++i)
      if (buckets[i].tokens < buckets[fewest].tokens) fewest = i;
    if (buckets.empty() || !token_fits(buckets[fewest])) {
      buckets.push_back({open_time + item.time, tokens, {item.slice}});
      continue;
    }
    const auto first_fit = [&] {
      std::size_t chosen = buckets.size();
      for (std::size_t i = 0; i < buckets.size(); ++i)
        if (token_fits(buckets[i]) && buckets[i].time + item.time <= time_threshold &&
            (chosen == buckets.size() || detail::precedes(buckets[i], buckets[chosen])))
          chosen = i;
      return chosen;
    };
    std::size_t chosen = first_fit();
    if (chosen == buckets.size()) {
      time_threshold = buckets[fewest].time + item.time;
      for (const detail::chunk_bucket& b : buckets)
        if (token_fits(b) && b.time + item.time < time_threshold) time_threshold = b.time + item.time;
      chosen = first_fit();
    }
    buckets[chosen].time += item.time;
    buckets[chosen].tokens += tokens;
    buckets[chosen].slices.push_back(item.slice);
  }
  return time_threshold;
}

}  // namespace

TEST_CASE("chunking: the indexed best-fit decreasing places every item where the scan does", "[pack][chunking]") {
  // Many buckets with equal ratios, equal token counts and equal times, so that every tie
  // rule is exercised; small integers make exact ties common.
  random_generator rng(2027);
  for (int trial = 0; trial < 300; ++trial) {
    const token_count t_m = rng.between(1, 64);
    const bool integral = rng.below(2) == 0;
    const auto time = [&](double scale) { return integral ? static_cast<double>(rng.between(0, 8)) : rng.uniform() * scale; };
    std::vector<detail::chunk_bucket> buckets;
    for (std::int64_t b = 0, count = static_cast<std::int64_t>(rng.below(40)); b < count; ++b) {
      const token_count tokens = rng.between(1, t_m);
      buckets.push_back({time(100), tokens, {{b, 0, tokens}}});
    }
    std::vector<detail::bucket_item> items;
    for (std::int64_t i = 0, count = static_cast<std::int64_t>(rng.between(1, 200)); i < count; ++i)
      items.push_back({time(30), {1000 + i, 0, rng.between(1, t_m)}});
    const double open_time = time(10), t_t = time(50);
    std::vector<detail::chunk_bucket> indexed = buckets, scanned = buckets;
    INFO("trial " << trial);
    REQUIRE(detail::best_fit_decreasing(indexed, items, open_time, t_t, t_m) == best_fit_by_scan(scanned, items, open_time, t_t, t_m));
    REQUIRE(indexed == scanned);
  }
}

TEST_CASE("chunking: the search returns the evaluator's best plan", "[pack][chunking]") {
  random_generator rng(77);
  for (int trial = 0; trial < 60; ++trial) {
    const sequence_processor sp{random_cost(rng), static_cast<int>(1 + rng.below(12))};
    const std::vector<token_count> lengths = random_lengths(rng);
    const token_count longest = *std::max_element(lengths.begin(), lengths.end());
    const one_f_one_b_estimate estimate{sp.cost};
    const chunking best = sp.search(lengths);
    // Brute force over n: the lowest estimate, ties to the smaller n.
    const int top = static_cast<int>(std::min<token_count>(sp.max_slices, longest));
    chunking expected = sp.process(lengths, 1);
    for (int n = 2; n <= top; ++n) {
      const chunking c = sp.process(lengths, n);
      if (estimate(c, lengths) < estimate(expected, lengths)) expected = c;
    }
    REQUIRE(best == expected);
    REQUIRE(estimate(best, lengths) <= estimate(sp.process(lengths, 1), lengths));
    // A custom evaluator, lowest at 3 slices; every n is priced once, in order.
    std::vector<int> seen;
    const auto near_three = [&](const chunking& c, std::span<const token_count>) {
      seen.push_back(static_cast<int>(c.mesh.size()));
      return std::abs(static_cast<double>(c.mesh.size()) - 3);
    };
    REQUIRE(sp.search(lengths, near_three).mesh.size() == static_cast<std::size_t>(std::min(top, 3)));
    for (std::size_t i = 0; i < seen.size(); ++i) REQUIRE(seen[i] == static_cast<int>(i) + 1);
    // Ties go to the smaller n.
    const auto flat = [](const chunking&, std::span<const token_count>) { return 1.0; };
    REQUIRE(sp.search(lengths, flat) == sp.process(lengths, 1));
    REQUIRE(seen.size() == static_cast<std::size_t>(top));
  }
}

TEST_CASE("chunking: the 1F1B estimate by hand", "[pack][chunking]") {
  chunk_cost_model cost = plain_cost(0, 1);
  cost.d_p = 3;
  cost.backward = {0, 2, 0};
  const std::vector<token_count> lengths = {4, 10};
  const chunking c{{10}, {{0, slices({{1, 0, 10}})}, {0, slices({{0, 0, 4}})}}};
  // T = (1 + 2) x tokens / N, N = 3: 10 and 4; sum 14 + (3 - 1) x 10.
  REQUIRE(one_f_one_b_estimate{cost}(c, lengths) == Approx(34));
}

TEST_CASE("chunking: the memory limit on chunk tokens", "[pack][chunking]") {
  const std::vector<token_count> lengths = {1000, 600, 300, 50, 20};
  sequence_processor sp{plain_cost(1e-6, 1e-3)};
  sp.max_chunk_tokens = 400;
  const chunking c = sp.search(lengths);
  REQUIRE(c.mesh.front() <= 400);
  for (const chunk& k : c.chunks) REQUIRE(k.tokens() <= 400);
  check_chunking(c, lengths, static_cast<int>(c.mesh.size()));
  const auto e = expect_error<infeasible>([&] { (void)sp.process(lengths, 1); });
  REQUIRE(e.value("largest_slice") == 1000);
  REQUIRE(e.value("max_chunk_tokens") == 400);
  sp.max_slices = 2;
  const auto all = expect_error<infeasible>([&] { (void)sp.search(lengths); });
  REQUIRE(all.value("max_slices") == 2);
  REQUIRE(*all.value("largest_slice") > 400);
}

TEST_CASE("chunking: errors name the value and the limit", "[pack][chunking]") {
  const sequence_processor sp{plain_cost(1e-9, 1e-6)};
  const std::vector<token_count> none;
  REQUIRE(expect_invalid([&] { (void)sp.process(none, 1); }).value("sequences") == 0);
  const std::vector<token_count> zero = {5, 0};
  const auto e = expect_invalid([&] { (void)sp.process(zero, 1); });
  REQUIRE(e.value("sequence") == 1);
  REQUIRE(e.value("length") == 0);
  const std::vector<token_count> lengths = {5, 3};
  REQUIRE(expect_invalid([&] { (void)sp.process(lengths, 0); }).value("n_slices") == 0);
  const auto over = expect_invalid([&] { (void)sp.process(lengths, 6); });
  REQUIRE(over.value("n_slices") == 6);
  REQUIRE(over.value("longest") == 5);
  sequence_processor bad = sp;
  bad.max_slices = 0;
  REQUIRE(expect_invalid([&] { (void)bad.search(lengths); }).value("max_slices") == 0);
  bad = sp;
  bad.max_chunk_tokens = -1;
  REQUIRE(expect_invalid([&] { (void)bad.process(lengths, 1); }).value("max_chunk_tokens") == -1);
  bad = sequence_processor{plain_cost(0, 0)};
  REQUIRE(expect_invalid([&] { (void)bad.process(lengths, 1); }).value("a2") == 0);
  bad = sp;
  bad.cost.d_p = 0;
  REQUIRE(expect_invalid([&] { (void)bad.process(lengths, 1); }).value("d_p") == 0);
  const auto nan = [](const chunking&, std::span<const token_count>) { return std::numeric_limits<double>::quiet_NaN(); };
  REQUIRE(expect_invalid([&] { (void)sp.search(lengths, nan); }).value("n_slices") == 1);
}
