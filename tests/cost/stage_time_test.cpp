// tests/cost/stage_time_test.cpp
// analytic_stage_time: attention grows with sum d^2 at equal tokens, TP halves the linear
// time, the slowest CP rank sets the pace and the others wait, the per-micro-batch constant
// is paid once, LM head on the last chunk only, errors. fitted_stage_time: reproduces
// a l^2 + b l + c summed over documents and scales with the chunk's layers.
#include <catch2/catch.hpp>

#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cost/stage_time.hpp>

#include <cstdint>
#include <vector>

using namespace zeppelin;

namespace {
const stage_slice middle{.layers = 8, .embedding = false, .lm_head = false};

// The linear (GEMM) part of the forward of `mb` on one rank (cp = 1): the forward minus each
// layer's attention, one call over all the micro-batch's rows and pairs.
double linear_forward(const analytic_stage_time& s, const micro_batch& mb, const stage_slice& slice) {
  std::int64_t pairs = 0;
  for (const token_count d : mb.documents) pairs += causal_pairs(d);
  const double attention = s.attention.forward_seconds(mb.tokens(), pairs, s.model.heads / s.tp, s.model.head_dim);
  return s.times(mb, slice).forward - slice.layers * attention;
}
}  // namespace

TEST_CASE("analytic stage time grows with sum d^2 at equal tokens", "[cost][stage_time]") {
  const auto s = analytic_stage_time::for_gpu(models::llama_7b(), gpus::h100_sxm());
  const micro_batch one{.documents = {8192}, .cp_shares = {}};
  const micro_batch two{.documents = {4096, 4096}, .cp_shares = {}};
  const micro_batch many{.documents = std::vector<token_count>(8, 1024), .cp_shares = {}};
  const auto t1 = s.times(one, middle), t2 = s.times(two, middle), t8 = s.times(many, middle);
  REQUIRE(t1.forward > t2.forward);
  REQUIRE(t2.forward > t8.forward);
  REQUIRE(t1.backward > t2.backward);
  REQUIRE(t1.backward > t1.forward);
  REQUIRE(t1.layer_forward * middle.layers == Approx(t1.forward));
  REQUIRE(t1.cp_wait == 0);
  // The linear part is the same: the difference is attention alone.
  REQUIRE(linear_forward(s, one, middle) == Approx(linear_forward(s, two, middle)));
  // Exactly: layers x (attention of all pairs in one call + GEMMs).
  const double expected = 8 * (s.attention.forward_seconds(8192, causal_pairs(8192), 32, 128) +
                               s.linear.seconds(8192 * linear_forward_flops_per_token(s.model), s.gpu));
  REQUIRE(t1.forward == Approx(expected).epsilon(1e-12));
}

TEST_CASE("TP = 2 halves the linear time and splits the heads", "[cost][stage_time]") {
  const auto s1 = analytic_stage_time::for_gpu(models::llama_13b(), gpus::h100_sxm(), 1);
  const auto s2 = analytic_stage_time::for_gpu(models::llama_13b(), gpus::h100_sxm(), 2);
  const micro_batch mb{.documents = {3000, 9000, 500}, .cp_shares = {}};
  REQUIRE(linear_forward(s2, mb, middle) == Approx(linear_forward(s1, mb, middle) / 2).epsilon(1e-12));
  // Attention on half the heads: exactly half the FLOPs, priced at the same rows' rate.
  REQUIRE(s2.times(mb, middle).forward == Approx(s1.times(mb, middle).forward / 2).epsilon(1e-12));
  // A TP degree that does not divide the heads is rejected.
  auto s3 = s1;
  s3.tp = 3;
  REQUIRE_THROWS_AS(s3.times(mb, middle), invalid_argument);
}

TEST_CASE("the slowest CP rank sets the pace and the others wait", "[cost][stage_time]") {
  const auto s = analytic_stage_time::for_gpu(models::llama_7b(), gpus::h100_sxm(), 1, 2);
  // Balanced zigzag: 2cp = 4 divides the length, both ranks do the same work.
  const micro_batch zigzag{.documents = {16384}, .cp_shares = {}};
  const auto tz = s.times(zigzag, middle);
  REQUIRE(tz.cp_wait == Approx(0).margin(1e-15));
  // Unbalanced explicit shares.
  const cp_share heavy{12000, 60'000'000}, light{4384, 9'000'000};
  const micro_batch skewed{.documents = {16384}, .cp_shares = {heavy, light}};
  const auto t = s.times(skewed, middle);
  const auto rank = [&](const cp_share& sh, bool forward) {
    const double attn = forward ? s.attention.forward_seconds(sh.tokens, sh.pairs, 32, 128)
                                : s.attention.backward_seconds(sh.tokens, sh.pairs, 32, 128);
    const double lin = static_cast<double>(sh.tokens) * linear_forward_flops_per_token(s.model) * (forward ? 1 : 2);
    return middle.layers * (attn + s.linear.seconds(lin, s.gpu));
  };
  REQUIRE(t.forward == Approx(rank(heavy, true)).epsilon(1e-12));
  REQUIRE(t.backward == Approx(rank(heavy, false)).epsilon(1e-12));
  REQUIRE(t.cp_wait > 0);
  REQUIRE(t.cp_wait == Approx((rank(heavy, true) - rank(light, true) + rank(heavy, false) - rank(light, false)) / 2).epsilon(1e-12));
  // Shares for the wrong CP degree.
  auto s4 = s;
  s4.cp = 4;
  REQUIRE_THROWS_AS(s4.times(skewed, middle), invalid_argument);
}

TEST_CASE("the per-micro-batch constant is paid once, not per document", "[cost][stage_time]") {
  auto s = analytic_stage_time::for_gpu(models::llama_7b(), gpus::h100_sxm());
  const micro_batch mb{.documents = {100, 200, 300, 400, 500, 600, 700, 800, 900, 1000}, .cp_shares = {}};
  const auto without = s.times(mb, middle);
  s.micro_batch_seconds = 3e-4;
  const auto with = s.times(mb, middle);
  REQUIRE(with.forward - without.forward == Approx(3e-4).epsilon(1e-9));
  REQUIRE(with.backward - without.backward == Approx(3e-4).epsilon(1e-9));
  REQUIRE(with.layer_forward == without.layer_forward);
  s.micro_batch_seconds = -1;
  REQUIRE_THROWS_AS(s.times(mb, middle), invalid_argument);
}

TEST_CASE("the LM head is priced on the last chunk, the embedding is free", "[cost][stage_time]") {
  const auto s = analytic_stage_time::for_gpu(models::llama_7b(), gpus::h100_sxm(), 2);
  const micro_batch mb{.documents = {4096}, .cp_shares = {}};
  const auto plain = s.times(mb, middle);
  const auto first = s.times(mb, {.layers = 8, .embedding = true, .lm_head = false});
  const auto last = s.times(mb, {.layers = 8, .embedding = false, .lm_head = true});
  REQUIRE(first == plain);
  const double head = s.linear.seconds(4096 * lm_head_flops_per_token(s.model) / 2, s.gpu);
  REQUIRE(last.forward - plain.forward == Approx(head).epsilon(1e-9));
  REQUIRE(last.backward - plain.backward == Approx(2 * head).epsilon(1e-9));
  REQUIRE(last.layer_forward == plain.layer_forward);
  REQUIRE_THROWS_AS(s.times(mb, {.layers = 33, .embedding = false, .lm_head = false}), invalid_argument);
  REQUIRE_THROWS_AS(s.times(micro_batch{}, middle), invalid_argument);
}

TEST_CASE("the fitted stage time reproduces a l^2 + b l + c per document", "[cost][stage_time]") {
  const fitted_stage_time f{.forward = {.a = 2e-11, .b = 3e-6, .c = 1e-3}, .backward = {.a = 5e-11, .b = 6e-6, .c = 2e-3}, .layers = 8};
  const micro_batch mb{.documents = {1000, 5000, 20000}, .cp_shares = {}};
  double fwd = 0, bwd = 0;
  for (const double d : {1000.0, 5000.0, 20000.0}) {
    fwd += 2e-11 * d * d + 3e-6 * d;
    bwd += 5e-11 * d * d + 6e-6 * d;
  }
  const auto t = f.times(mb, middle);
  REQUIRE(t.forward == Approx(fwd + 1e-3).epsilon(1e-12));
  REQUIRE(t.backward == Approx(bwd + 2e-3).epsilon(1e-12));
  REQUIRE(t.layer_forward == Approx(fwd / 8).epsilon(1e-12));
  REQUIRE(t.cp_wait == 0);
  // Half the layers: half the per-document terms, the same constant.
  const auto half = f.times(mb, {.layers = 4, .embedding = false, .lm_head = false});
  REQUIRE(half.forward == Approx(fwd / 2 + 1e-3).epsilon(1e-12));
  REQUIRE(half.backward == Approx(bwd / 2 + 2e-3).epsilon(1e-12));
  REQUIRE(half.layer_forward == Approx(t.layer_forward).epsilon(1e-12));
  auto bad = f;
  bad.layers = 0;
  REQUIRE_THROWS_AS(bad.times(mb, middle), invalid_argument);
  REQUIRE_THROWS_AS(f.times(micro_batch{.documents = {0}, .cp_shares = {}}, middle), invalid_argument);
}
