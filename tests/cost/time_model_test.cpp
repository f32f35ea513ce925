// tests/cost/time_model_test.cpp
// attention_time_model: tile padding (flat latency below 128 query rows, WLB-LLM Fig. 10),
// monotonicity in rows and pairs, the public anchors reproduced, presets per GPU, errors.
// linear_time_model: FLOPs / (efficiency * peak) and the Zeppelin Table 3 linear forward.
#include <catch2/catch.hpp>

#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/attention_time_model.hpp>
#include <zeppelin/cost/causal_pairs.hpp>

#include <cstdint>

using namespace zeppelin;

TEST_CASE("attention time is flat below one 128-row tile and rises above it", "[cost][time_model]") {
  const auto m = attention_time_model::h100_fa2();
  REQUIRE(m.tile_rows == 128);
  for (const std::int64_t keys : {std::int64_t{1}, std::int64_t{100}, std::int64_t{4096}, std::int64_t{131072}}) {
    const double at_tile = m.forward_seconds(128, 128 * keys, 32, 128);
    const double bwd_tile = m.backward_seconds(128, 128 * keys, 32, 128);
    REQUIRE(at_tile > 0);
    for (token_count rows = 1; rows <= 128; ++rows) {
      // Every row sees `keys` keys: the padded tile does the same work whatever the rows.
      REQUIRE(m.forward_seconds(rows, rows * keys, 32, 128) == Approx(at_tile).epsilon(1e-12));
      REQUIRE(m.backward_seconds(rows, rows * keys, 32, 128) == Approx(bwd_tile).epsilon(1e-12));
    }
    REQUIRE(m.forward_seconds(129, 129 * keys, 32, 128) > at_tile * 1.1);
    REQUIRE(m.forward_seconds(512, 512 * keys, 32, 128) > m.forward_seconds(256, 256 * keys, 32, 128) * 1.1);
    // 129 rows already pay for two tiles.
    REQUIRE(m.forward_seconds(129, 129 * keys, 32, 128) == Approx(m.forward_seconds(256, 256 * keys, 32, 128)));
  }
  REQUIRE(m.padded_rows(0) == 0);
  REQUIRE(m.padded_rows(1) == 128);
  REQUIRE(m.padded_rows(128) == 128);
  REQUIRE(m.padded_rows(129) == 256);
  const attention_time_model small_tiles{.tile_rows = 64};
  REQUIRE(small_tiles.padded_rows(65) == 128);
  REQUIRE(small_tiles.forward_flops(64, 64 * 10, 1, 1) == attention_forward_flops(640, 1, 1));
  REQUIRE(small_tiles.forward_flops(32, 32 * 10, 1, 1) == attention_forward_flops(640, 1, 1));
}

TEST_CASE("attention time never decreases with more rows or more pairs", "[cost][time_model]") {
  for (const auto& m : {attention_time_model::h100_fa2(), attention_time_model::a800_fa2()}) {
    REQUIRE(m.forward.time_monotone());
    REQUIRE(m.backward.time_monotone());
    random_generator rng(99, 0);
    for (int trial = 0; trial < 300; ++trial) {
      const std::int64_t keys = rng.between(1, 20000);
      const int heads = static_cast<int>(rng.between(1, 64));
      double prev_f = 0, prev_b = 0;
      for (token_count rows = 1; rows <= (1 << 17); rows += rng.between(1, rows)) {
        const double f = m.forward_seconds(rows, rows * keys, heads, 128);
        const double b = m.backward_seconds(rows, rows * keys, heads, 128);
        REQUIRE(f >= prev_f * (1 - 1e-12));
        REQUIRE(b >= prev_b * (1 - 1e-12));
        REQUIRE(b > f);  // 2.5x the FLOPs at a rate never 2.5x higher
        prev_f = f;
        prev_b = b;
      }
      // Causal self-attention of a growing document: rows and pairs grow together.
      double prev = 0;
      for (token_count len = 1; len <= (1 << 17); len += rng.between(1, len)) {
        const double f = m.forward_seconds(len, causal_pairs(len), heads, 128);
        REQUIRE(f > prev);
        prev = f;
      }
      // Fixed rows: strictly more pairs, strictly more time.
      const token_count rows = rng.between(1, 50000);
      const std::int64_t p = rng.between(1, 1 << 30);
      REQUIRE(m.forward_seconds(rows, p + 1, heads, 128) > m.forward_seconds(rows, p, heads, 128));
    }
  }
}

TEST_CASE("the H100 FA2 tables reproduce the public anchors", "[cost][time_model]") {
  const auto m = attention_time_model::h100_fa2();
  auto achieved_fwd = [&](token_count rows) {
    const auto pairs = causal_pairs(rows);
    return attention_forward_flops(pairs, 32, 128) / m.forward_seconds(rows, pairs, 32, 128);
  };
  auto achieved_bwd = [&](token_count rows) {
    const auto pairs = causal_pairs(rows);
    return attention_backward_flops(pairs, 32, 128) / m.backward_seconds(rows, pairs, 32, 128);
  };
  // the public FlashAttention-2 anchors of cost/attention_time_model.hpp (H100 SXM, FA2, bf16, head dim 128).
  REQUIRE(achieved_fwd(1024) == Approx(45e12));
  REQUIRE(achieved_fwd(16384) == Approx(335e12));
  REQUIRE(achieved_fwd(32768) == Approx(345e12));
  REQUIRE(achieved_bwd(8192) == Approx(205e12));
  REQUIRE(achieved_bwd(32768) == Approx(262e12));
  // Achieved rate stays below the 989 TFLOP/s peak everywhere and grows with size.
  for (const auto& p : m.forward.points()) REQUIRE(p.flops_per_second < 0.4 * 989e12);
  REQUIRE(achieved_fwd(256) < achieved_fwd(2048));
  // Padding lowers the achieved (useful) rate of a 1-row call 128-fold relative to a full tile.
  REQUIRE(attention_forward_flops(7, 1, 128) / m.forward_seconds(1, 7, 1, 128) ==
          Approx(m.forward.at(128) / 128));
}

TEST_CASE("attention presets per GPU", "[cost][time_model]") {
  const auto h100 = attention_time_model::h100_fa2();
  const auto a800 = attention_time_model::a800_fa2();
  REQUIRE(attention_time_model::for_gpu(gpus::h100_sxm()) == h100);
  REQUIRE(attention_time_model::for_gpu(gpus::h800()) == h100);
  REQUIRE(attention_time_model::for_gpu(gpus::h200()) == h100);
  REQUIRE(attention_time_model::for_gpu(gpus::a800_80g()) == a800);
  REQUIRE(attention_time_model::for_gpu(gpu_spec{"A100-SXM", 312e12, 80e9, 2.039e12}) == a800);
  // A800: the best point at 73% of 312 TFLOP/s (FlashAttention-2 on A100).
  REQUIRE(a800.forward.at(1e9) == Approx(0.73 * 312e12));
  REQUIRE(a800.forward.at(4096) == Approx(h100.forward.at(4096) * 0.73 * 312 / 345));
  // An unknown GPU with twice the H100 peak gets the H100 tables doubled.
  const auto fast = attention_time_model::for_gpu(gpu_spec{"future", 2 * 989e12, 1e11, 1e13});
  REQUIRE(fast.forward.at(3000) == Approx(2 * h100.forward.at(3000)));
  REQUIRE(fast.forward_seconds(4096, 1 << 20, 8, 128) == Approx(h100.forward_seconds(4096, 1 << 20, 8, 128) / 2));
  REQUIRE_THROWS_AS(attention_time_model::for_gpu(gpu_spec{"broken", 0, 1, 1}), invalid_argument);
  // One layer of a model: heads and head dim from the config.
  const auto m7 = models::llama_7b();
  REQUIRE(h100.forward_seconds(4096, causal_pairs(4096), m7) == h100.forward_seconds(4096, causal_pairs(4096), 32, 128));
  REQUIRE(h100.backward_seconds(4096, causal_pairs(4096), m7) == h100.backward_seconds(4096, causal_pairs(4096), 32, 128));
}

TEST_CASE("attention time edge cases and errors", "[cost][time_model]") {
  const auto m = attention_time_model::h100_fa2();
  REQUIRE(m.forward_seconds(0, 0, 32, 128) == 0);
  REQUIRE(m.forward_seconds(500, 0, 32, 128) == 0);  // fully masked block: nothing launched
  REQUIRE(m.backward_seconds(500, 0, 32, 128) == 0);
  REQUIRE_THROWS_AS(m.forward_seconds(-1, 0, 32, 128), invalid_argument);
  REQUIRE_THROWS_AS(m.forward_seconds(10, -1, 32, 128), invalid_argument);
  REQUIRE_THROWS_AS(m.forward_seconds(0, 5, 32, 128), invalid_argument);
  REQUIRE_THROWS_AS(m.forward_seconds(10, 5, 0, 128), invalid_argument);
  REQUIRE_THROWS_AS(m.backward_seconds(10, 5, 32, 0), invalid_argument);
  attention_time_model no_tile{.tile_rows = 0};
  REQUIRE_THROWS_AS(no_tile.forward_seconds(10, 5, 32, 128), invalid_argument);
  attention_time_model no_table{.forward = throughput_table{}};
  REQUIRE_THROWS_AS(no_table.forward_seconds(10, 5, 32, 128), invalid_argument);
  try {
    (void)m.forward_seconds(0, 7, 32, 128);
  } catch (const invalid_argument& e) {
    REQUIRE(e.value("pairs") == 7.0);
  }
  auto bad = models::llama_7b();
  bad.heads = 0;
  REQUIRE_THROWS_AS(m.forward_seconds(10, 5, bad), invalid_argument);
}

TEST_CASE("linear time model: FLOPs over efficiency x peak", "[cost][time_model]") {
  const linear_time_model lin{};
  REQUIRE(lin.efficiency == 0.58);
  REQUIRE(lin.seconds(0.58 * 989e12, gpus::h100_sxm()) == Approx(1.0));
  REQUIRE(linear_time_model{.efficiency = 0.5}.seconds(312e12, gpus::a800_80g()) == Approx(2.0));
  // Zeppelin Table 3: LLaMA-7B, 4K tokens per H200, linear forward 93-97 ms (32 layers + LM head).
  const auto m7 = models::llama_7b();
  const auto h200 = gpus::h200();
  const double fwd = 32 * lin.layer_forward_seconds(4096, m7, h200) +
                     lin.seconds(4096 * lm_head_flops_per_token(m7), h200);
  REQUIRE(fwd > 0.093);
  REQUIRE(fwd < 0.097);
  REQUIRE(lin.layer_backward_seconds(4096, m7, h200) == Approx(2 * lin.layer_forward_seconds(4096, m7, h200)));
  REQUIRE_THROWS_AS(lin.seconds(-1, h200), invalid_argument);
  REQUIRE_THROWS_AS(lin.seconds(std::nan(""), h200), invalid_argument);
  REQUIRE_THROWS_AS(linear_time_model{.efficiency = 0}.seconds(1, h200), invalid_argument);
  REQUIRE_THROWS_AS(linear_time_model{.efficiency = 1.5}.seconds(1, h200), invalid_argument);
  REQUIRE_THROWS_AS(lin.seconds(1, gpu_spec{}), invalid_argument);
  REQUIRE_THROWS_AS(lin.layer_forward_seconds(-5, m7, h200), invalid_argument);
}
