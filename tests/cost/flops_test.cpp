// tests/cost/flops_test.cpp
// Attention and linear-module FLOP formulas and transfer sizes against values computed by
// hand for LLaMA-2-7B (MHA), LLaMA-3-8B (GQA), the 8x550M MoE preset and GPT-7B (plain MLP).
#include <catch2/catch.hpp>

#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/cost/attention_flops.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cost/linear_flops.hpp>
#include <zeppelin/cost/transfer_bytes.hpp>

using namespace zeppelin;

static_assert(attention_forward_flops(1000, 64, 128) == 32768000.0);
static_assert(attention_backward_flops(1000, 64, 128) == 2.5 * 32768000.0);
static_assert(attention_forward_flops(0, 32, 128) == 0.0);

TEST_CASE("attention FLOPs: 4 * pairs * heads * head_dim forward, 2.5x backward", "[cost][flops]") {
  const auto m7 = models::llama_7b();
  const auto pairs = causal_pairs(token_count{8192});  // 33,558,528
  REQUIRE(pairs == 33558528);
  // 4 * 33558528 * 32 * 128 and 10 * 33558528 * 32 * 128, computed by hand.
  REQUIRE(attention_forward_flops(pairs, m7) == 549822922752.0);
  REQUIRE(attention_backward_flops(pairs, m7) == 1374557306880.0);
  // GQA does not change attention FLOPs: LLaMA-3-8B has the 7B's query heads and head dim.
  REQUIRE(attention_forward_flops(pairs, models::llama3_8b()) == attention_forward_flops(pairs, m7));
  // FlashAttention's benchmark formula for causal: 4 * s^2 * heads * d / 2 (it counts s^2/2,
  // we count the exact s(s+1)/2 pairs): equal up to the diagonal.
  const double fa_causal = 4.0 * 8192.0 * 8192.0 * 32 * 128 / 2;
  REQUIRE(attention_forward_flops(pairs, m7) - fa_causal == 4.0 * 8192 / 2 * 32 * 128);
}

TEST_CASE("linear FLOPs per token of LLaMA-2-7B (MHA, SwiGLU)", "[cost][flops]") {
  const auto m = models::llama_7b();
  const auto b = linear_forward_flops_breakdown(m);
  REQUIRE(b.qkv == 100663296.0);     // 2 * 4096 * (4096 + 2 * 4096)
  REQUIRE(b.output == 33554432.0);   // 2 * 4096 * 4096
  REQUIRE(b.mlp == 270532608.0);     // 2 * 3 * 4096 * 11008
  REQUIRE(b.router == 0.0);
  REQUIRE(linear_forward_flops_per_token(m) == 404750336.0);
  REQUIRE(linear_backward_flops_per_token(m) == 809500672.0);
  // Forward FLOPs are 2 x the layer's weight count (the 6N rule's forward third):
  // 4 H^2 + 3 H F = 202,375,168 parameters.
  REQUIRE(linear_forward_flops_per_token(m) == 2.0 * 202375168.0);
  REQUIRE(lm_head_flops_per_token(m) == 262144000.0);  // 2 * 4096 * 32000
  REQUIRE(lm_head_backward_flops_per_token(m) == 524288000.0);
}

TEST_CASE("linear FLOPs per token of a GQA model (LLaMA-3-8B) and of LLaMA-2-70B", "[cost][flops]") {
  const auto b = linear_forward_flops_breakdown(models::llama3_8b());
  REQUIRE(b.qkv == 50331648.0);    // 2 * 4096 * (4096 + 2 * 8 * 128)
  REQUIRE(b.output == 33554432.0);
  REQUIRE(b.mlp == 352321536.0);   // 2 * 3 * 4096 * 14336
  REQUIRE(b.total() == 436207616.0);
  REQUIRE(lm_head_flops_per_token(models::llama3_8b()) == 1050673152.0);  // 2 * 4096 * 128256
  // 70B: qkv 2*8192*(8192+2048), output 2*8192*8192, MLP 6*8192*28672.
  REQUIRE(linear_forward_flops_per_token(models::llama_70b()) == 167772160.0 + 134217728.0 + 1409286144.0);
}

TEST_CASE("linear FLOPs per token of the 8x550M MoE preset and a plain-MLP model", "[cost][flops]") {
  const auto b = linear_forward_flops_breakdown(models::moe_8x550m());
  REQUIRE(b.qkv == 14155776.0);    // 2 * 1536 * 4608
  REQUIRE(b.output == 4718592.0);  // 2 * 1536 * 1536
  REQUIRE(b.mlp == 75497472.0);    // top-2 x (2 * 3 * 1536 * 4096)
  REQUIRE(b.router == 24576.0);    // 2 * 1536 * 8
  REQUIRE(linear_forward_flops_per_token(models::moe_8x550m()) == 94396416.0);
  // Top-k, not the expert count, drives the MLP FLOPs: the dense 550M has one expert's worth.
  REQUIRE(linear_forward_flops_breakdown(models::llama_550m()).mlp * 2 == b.mlp);

  const auto g = linear_forward_flops_breakdown(models::gpt_7b());
  REQUIRE(g.mlp == 268435456.0);   // 2 * 2 * 4096 * 16384 (up + down)
  REQUIRE(g.total() == 100663296.0 + 33554432.0 + 268435456.0);
}

TEST_CASE("transfer sizes per token and layer", "[cost][flops]") {
  REQUIRE(kv_bytes_per_token(models::llama_7b()) == 16384.0);   // 2 * 32 * 128 * 2
  REQUIRE(kv_bytes_per_token(models::llama3_8b()) == 4096.0);   // 2 * 8 * 128 * 2
  REQUIRE(kv_bytes_per_token(models::llama_3b()) == 12800.0);   // 2 * 32 * 100 * 2
  REQUIRE(q_bytes_per_token(models::llama3_8b()) == 8192.0);
  REQUIRE(hidden_bytes_per_token(models::llama_7b()) == 8192.0);
  auto fp32 = models::llama_7b();
  fp32.bytes_per_element = 4;
  REQUIRE(kv_bytes_per_token(fp32) == 32768.0);
}

TEST_CASE("FLOP and size functions reject malformed models", "[cost][flops]") {
  auto bad = models::llama_7b();
  bad.kv_heads = 5;  // does not divide 32
  REQUIRE_THROWS_AS(linear_forward_flops_per_token(bad), invalid_argument);
  REQUIRE_THROWS_AS(kv_bytes_per_token(bad), invalid_argument);
  auto moe = models::moe_8x550m();
  moe.experts_per_token = 9;
  REQUIRE_THROWS_AS(linear_forward_flops_breakdown(moe), invalid_argument);
  auto empty = model_config{};
  REQUIRE_THROWS_AS(lm_head_flops_per_token(empty), invalid_argument);
  REQUIRE_THROWS_AS(hidden_bytes_per_token(empty), invalid_argument);
}
