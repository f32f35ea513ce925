// Tests of cost/step_work.hpp: FLOP totals, additivity over batches, and the lower bound.
#include <catch2/catch.hpp>

#include <zeppelin/core.hpp>
#include <zeppelin/cost/step_work.hpp>

#include <vector>

using namespace zeppelin;

namespace {
std::vector<token_count> random_lengths(random_generator& rng) {
  std::vector<token_count> lengths(static_cast<std::size_t>(rng.between(1, 12)));
  for (auto& len : lengths) len = rng.between(1, 70000);
  return lengths;
}
}  // namespace

TEST_CASE("step work FLOPs equal the per-sequence formulas", "[cost][step_work]") {
  const model_config m = models::llama_7b();
  const gpu_spec gpu = gpus::h200();
  random_generator rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const batch b(random_lengths(rng));
    const step_work w = estimate_step_work(b, m, gpu);
    double attention = 0;
    for (token_count len : b.lengths())
      attention += 4.0 * static_cast<double>(len) * static_cast<double>(len + 1) / 2.0 * m.heads * m.head_dim * m.layers;
    REQUIRE(w.attention_forward_flops == Approx(attention).epsilon(1e-12));
    REQUIRE(w.attention_backward_flops == Approx(2.5 * attention).epsilon(1e-12));
    const double per_token = m.layers * linear_forward_flops_per_token(m) + lm_head_flops_per_token(m);
    REQUIRE(w.linear_forward_flops == Approx(per_token * static_cast<double>(b.total_tokens())).epsilon(1e-12));
    REQUIRE(w.linear_backward_flops == Approx(2 * w.linear_forward_flops).epsilon(1e-12));
  }
}

TEST_CASE("step work is additive over a split batch", "[cost][step_work]") {
  const model_config m = models::llama3_8b();
  const gpu_spec gpu = gpus::a800_80g();
  random_generator rng(12);
  for (int trial = 0; trial < 100; ++trial) {
    auto all = random_lengths(rng);
    all.push_back(rng.between(1, 5000));
    const auto cut = static_cast<std::ptrdiff_t>(rng.below(all.size() - 1) + 1);
    const step_work whole = estimate_step_work(batch(all), m, gpu);
    const step_work a = estimate_step_work(batch({all.begin(), all.begin() + cut}), m, gpu);
    const step_work b = estimate_step_work(batch({all.begin() + cut, all.end()}), m, gpu);
    REQUIRE(whole.total_flops() == Approx(a.total_flops() + b.total_flops()).epsilon(1e-12));
    REQUIRE(whole.attention_seconds == Approx(a.attention_seconds + b.attention_seconds).epsilon(1e-12));
    REQUIRE(whole.linear_seconds == Approx(a.linear_seconds + b.linear_seconds).epsilon(1e-12));
  }
}

TEST_CASE("the balanced lower bound never exceeds the single-GPU time spread over G GPUs", "[cost][step_work]") {
  random_generator rng(13);
  for (int trial = 0; trial < 200; ++trial) {
    const batch b(random_lengths(rng));
    const step_work w = estimate_step_work(b, models::llama_3b(), gpus::a800_80g());
    const int g = static_cast<int>(rng.between(1, 1024));
    const double bound = w.balanced_lower_bound(g);
    REQUIRE(bound > 0);
    REQUIRE(bound * g <= w.single_gpu_seconds() * (1 + 1e-12));
    REQUIRE(w.balanced_lower_bound(1) == Approx(bound * g).epsilon(1e-12));
  }
}

TEST_CASE("the lower bound of one long sequence is its best-rate time", "[cost][step_work]") {
  // A 64K sequence on one H100 runs at the tables' best rates, so bound == single-GPU time
  // for the attention part when the table is flat past its last anchor.
  const batch b({1 << 17});
  const step_work w = estimate_step_work(b, models::llama_7b(), gpus::h100_sxm());
  REQUIRE(w.balanced_lower_bound(1) == Approx(w.single_gpu_seconds()).epsilon(1e-9));
}

TEST_CASE("step work rejects bad input", "[cost][step_work][errors]") {
  const batch b({100});
  const step_work w = estimate_step_work(b, models::llama_7b(), gpus::h200());
  REQUIRE_THROWS_AS(w.balanced_lower_bound(0), invalid_argument);
  model_config bad = models::llama_7b();
  bad.kv_heads = 5;
  REQUIRE_THROWS_AS(estimate_step_work(b, bad, gpus::h200()), invalid_argument);
  attention_time_model empty;
  empty.forward = throughput_table();
  REQUIRE_THROWS_AS(estimate_step_work(b, models::llama_7b(), gpus::h200(), empty), invalid_argument);
}
