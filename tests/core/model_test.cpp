// tests/core/model_test.cpp
// model_config and validate(model) (core/model.hpp) and the presets (core/model_presets.hpp):
// every preset validates and has the parameter count its name promises, GQA and MoE presets
// say so, and each bad shape is rejected with its numbers.
#include <catch2/catch.hpp>

#include "support/expect_error.hpp"
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>

#include <set>
#include <string>
#include <vector>

namespace zp = zeppelin;

namespace {

struct named_preset {
  zp::model_config model;
  double nominal_parameters;  // the size in the model's name
};

std::vector<named_preset> presets() {
  namespace m = zp::models;
  return {{m::llama_3b(), 3e9},   {m::llama_7b(), 7e9},   {m::llama_13b(), 13e9}, {m::llama_30b(), 30e9},
          {m::llama_70b(), 70e9}, {m::llama_550m(), 550e6}, {m::llama3_8b(), 8e9}, {m::gpt_7b(), 7e9},
          {m::gpt_13b(), 13e9},   {m::gpt_30b(), 30e9},   {m::moe_8x550m(), 0}};
}

// Dense parameters: attention (Q, O: H x q_width; K, V: H x kv_width), MLP (3 or 2
// matrices of H x F, times the experts for MoE), untied input and output embeddings.
double parameters(const zp::model_config& m) {
  const double h = m.hidden;
  const double attention = 2 * h * static_cast<double>(m.q_width()) + 2 * h * static_cast<double>(m.kv_width());
  const double mlp = (m.gated_mlp ? 3.0 : 2.0) * h * m.ffn_hidden * (m.is_moe() ? m.experts : 1);
  return m.layers * (attention + mlp) + 2.0 * m.vocab * h;
}

using zeppelin_test::expect_invalid;

zp::invalid_argument expect_invalid_model(const zp::model_config& m) {
  return expect_invalid([&] { zp::validate(m); });
}

}  // namespace

TEST_CASE("every model preset validates and has a distinct name", "[core][model][presets]") {
  std::set<std::string> names;
  for (const auto& [m, nominal] : presets()) {
    INFO(m.name);
    CHECK_NOTHROW(zp::validate(m));
    names.insert(m.name);
    CHECK(m.heads * m.head_dim == m.hidden);  // true of every public model used here
    CHECK(m.q_width() == static_cast<long long>(m.heads) * m.head_dim);
    CHECK(m.kv_width() == static_cast<long long>(m.kv_heads) * m.head_dim);
    CHECK(m.bytes_per_element == 2);  // bf16
    if (nominal > 0) {
      // the size in the name is the parameter count, within 20%
      CHECK(parameters(m) > 0.8 * nominal);
      CHECK(parameters(m) < 1.2 * nominal);
    }
  }
  CHECK(names.size() == presets().size());
}

TEST_CASE("GQA presets have fewer KV heads than query heads", "[core][model][presets]") {
  const auto l70 = zp::models::llama_70b();
  CHECK(l70.heads == 64);
  CHECK(l70.kv_heads == 8);
  CHECK(l70.kv_width() == 1024);
  CHECK(l70.q_width() == 8192);
  const auto l3 = zp::models::llama3_8b();
  CHECK(l3.kv_heads < l3.heads);
  CHECK(l3.heads % l3.kv_heads == 0);
  CHECK(l3.vocab == 128256);
  // the others are MHA
  for (const auto& m : {zp::models::llama_3b(), zp::models::llama_7b(), zp::models::llama_13b(),
                        zp::models::llama_30b(), zp::models::gpt_7b()})
    CHECK(m.kv_heads == m.heads);
}

TEST_CASE("the MoE preset is the 550M shape with 8 experts and top-2", "[core][model][presets]") {
  const auto moe = zp::models::moe_8x550m();
  const auto dense = zp::models::llama_550m();
  CHECK(moe.is_moe());
  CHECK_FALSE(dense.is_moe());
  CHECK(moe.experts == 8);
  CHECK(moe.experts_per_token == 2);
  auto as_dense = moe;
  as_dense.name = dense.name;
  as_dense.experts = 0;
  as_dense.experts_per_token = 0;
  CHECK(as_dense == dense);
  for (const auto& [m, nominal] : presets())
    if (m.name != moe.name) CHECK_FALSE(m.is_moe());
}

TEST_CASE("GPT presets use a plain 4H MLP and LLaMA presets SwiGLU", "[core][model][presets]") {
  for (const auto& m : {zp::models::gpt_7b(), zp::models::gpt_13b(), zp::models::gpt_30b()}) {
    CHECK_FALSE(m.gated_mlp);
    CHECK(m.ffn_hidden == 4 * m.hidden);
    CHECK(m.vocab == 50257);
  }
  for (const auto& m : {zp::models::llama_7b(), zp::models::llama_70b(), zp::models::llama3_8b()}) CHECK(m.gated_mlp);
}

TEST_CASE("random valid shapes validate", "[core][model]") {
  zp::random_generator rng(301);
  for (int trial = 0; trial < 500; ++trial) {
    zp::model_config m;
    m.layers = static_cast<int>(rng.between(1, 128));
    m.kv_heads = static_cast<int>(rng.between(1, 16));
    m.heads = m.kv_heads * static_cast<int>(rng.between(1, 8));
    m.head_dim = static_cast<int>(rng.between(1, 256));
    m.hidden = m.heads * m.head_dim;
    m.ffn_hidden = static_cast<int>(rng.between(1, 60000));
    m.vocab = static_cast<int>(rng.between(1, 300000));
    m.gated_mlp = rng.below(2) == 0;
    if (rng.below(2) == 0) {
      m.experts = static_cast<int>(rng.between(1, 64));
      m.experts_per_token = static_cast<int>(rng.between(1, m.experts));
    }
    REQUIRE_NOTHROW(zp::validate(m));
  }
}

TEST_CASE("non-positive dimensions are rejected with the field", "[core][model]") {
  struct field {
    const char* name;
    int zp::model_config::*member;
  };
  const field fields[] = {{"layers", &zp::model_config::layers},       {"hidden", &zp::model_config::hidden},
                          {"heads", &zp::model_config::heads},         {"kv_heads", &zp::model_config::kv_heads},
                          {"head_dim", &zp::model_config::head_dim},   {"ffn_hidden", &zp::model_config::ffn_hidden},
                          {"vocab", &zp::model_config::vocab}};
  for (const auto& f : fields)
    for (int bad : {0, -1, -4096}) {
      auto m = zp::models::llama_7b();
      m.*(f.member) = bad;
      INFO(f.name << " = " << bad);
      const auto e = expect_invalid_model(m);
      CHECK(e.value(f.name) == static_cast<double>(bad));
    }
  auto m = zp::models::llama_7b();
  m.bytes_per_element = 0;
  CHECK(expect_invalid_model(m).value("bytes_per_element") == 0.0);
  CHECK_THROWS_AS(zp::validate(zp::model_config{}), zp::invalid_argument);  // all zero
}

TEST_CASE("kv_heads must divide heads", "[core][model]") {
  auto m = zp::models::llama_7b();  // 32 heads
  for (int kv : {3, 5, 7, 12, 31, 33, 64}) {
    m.kv_heads = kv;
    const auto e = expect_invalid_model(m);
    CHECK(e.value("heads") == 32.0);
    CHECK(e.value("kv_heads") == static_cast<double>(kv));
  }
  for (int kv : {1, 2, 4, 8, 16, 32}) {
    m.kv_heads = kv;
    CHECK_NOTHROW(zp::validate(m));
  }
}

TEST_CASE("MoE top-k must lie in 1..experts and dense models have no experts", "[core][model]") {
  auto moe = zp::models::moe_8x550m();
  for (int k : {0, -1, 9, 100}) {
    moe.experts_per_token = k;
    const auto e = expect_invalid_model(moe);
    CHECK(e.value("experts") == 8.0);
    CHECK(e.value("experts_per_token") == static_cast<double>(k));
  }
  moe.experts_per_token = 8;
  CHECK_NOTHROW(zp::validate(moe));

  auto dense = zp::models::llama_7b();
  dense.experts_per_token = 2;
  CHECK(expect_invalid_model(dense).value("experts_per_token") == 2.0);
  dense.experts_per_token = 0;
  dense.experts = -3;  // not MoE, not dense either
  CHECK(expect_invalid_model(dense).value("experts") == -3.0);
}
