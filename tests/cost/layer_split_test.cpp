// tests/cost/layer_split_test.cpp
// split_layers: as even as possible, the first (layers % parts) chunks one more, errors
// naming both numbers; split_model: the embedding on the first chunk, the LM head on the last.
#include <catch2/catch.hpp>

#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/cost/layer_split.hpp>

#include <algorithm>
#include <numeric>
#include <vector>

using namespace zeppelin;

TEST_CASE("split_layers spreads layers as evenly as possible, the first chunks one more", "[cost][layer_split]") {
  REQUIRE(split_layers(32, 4) == std::vector<int>{8, 8, 8, 8});
  REQUIRE(split_layers(10, 4) == std::vector<int>{3, 3, 2, 2});
  REQUIRE(split_layers(5, 5) == std::vector<int>{1, 1, 1, 1, 1});
  REQUIRE(split_layers(7, 1) == std::vector<int>{7});
  for (int layers = 1; layers <= 64; ++layers)
    for (int parts = 1; parts <= layers; ++parts) {
      const auto s = split_layers(layers, parts);
      REQUIRE(static_cast<int>(s.size()) == parts);
      REQUIRE(std::accumulate(s.begin(), s.end(), 0) == layers);
      REQUIRE(std::is_sorted(s.rbegin(), s.rend()));  // non-increasing
      REQUIRE(s.front() - s.back() <= 1);
      REQUIRE(s.back() >= 1);
    }
}

TEST_CASE("split_layers rejects more stages than layers and no stage at all", "[cost][layer_split]") {
  REQUIRE_THROWS_AS(split_layers(4, 0), invalid_argument);
  REQUIRE_THROWS_AS(split_layers(4, -1), invalid_argument);
  try {
    (void)split_layers(3, 4);
    FAIL("expected invalid_argument");
  } catch (const invalid_argument& e) {
    REQUIRE(e.value("layers") == 3.0);
    REQUIRE(e.value("parts") == 4.0);
    REQUIRE(std::string(e.what()).find("more stages than layers") != std::string::npos);
  }
}

TEST_CASE("split_model puts the embedding first and the LM head last", "[cost][layer_split]") {
  const auto m = models::llama_7b();
  const auto chunks = split_model(m, 3);
  REQUIRE(chunks.size() == 3);
  REQUIRE(chunks[0] == stage_slice{.layers = 11, .embedding = true, .lm_head = false});
  REQUIRE(chunks[1] == stage_slice{.layers = 11, .embedding = false, .lm_head = false});
  REQUIRE(chunks[2] == stage_slice{.layers = 10, .embedding = false, .lm_head = true});
  const auto one = split_model(m, 1);
  REQUIRE(one.size() == 1);
  REQUIRE(one[0] == stage_slice{.layers = 32, .embedding = true, .lm_head = true});
  REQUIRE_THROWS_AS(split_model(m, 33), invalid_argument);
  REQUIRE_THROWS_AS(split_model(model_config{}, 1), invalid_argument);
}
