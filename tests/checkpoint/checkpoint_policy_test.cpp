// tests/checkpoint/checkpoint_policy_test.cpp
// Checkpoint policies (checkpoint/): none / full / selective give the documented layer
// counts for every site, selective spends a stage's count over its chunks in order, and the
// text forms parse, print back and reject bad input with the text.
#include <catch2/catch.hpp>
#include <zeppelin/checkpoint.hpp>
#include <zeppelin/core/random.hpp>

using namespace zeppelin;

TEST_CASE("none and full recompute nothing and everything", "[checkpoint]") {
  random_generator g(7);
  for (int i = 0; i < 200; ++i) {
    const checkpoint_site site{static_cast<int>(g.between(0, 15)), static_cast<int>(g.between(0, 3)),
                               static_cast<int>(g.between(0, 99)), static_cast<int>(g.between(1, 40)), 0};
    CHECK(no_recompute{}.recomputed_layers(site) == 0);
    CHECK(full_recompute{}.recomputed_layers(site) == site.layers);
  }
}

TEST_CASE("selective recompute spends each stage's count over its chunks in order", "[checkpoint]") {
  const selective_recompute s{{5, 0, 3}};
  CHECK(s.recomputed_layers({0, 0, 0, 8, 0}) == 5);
  CHECK(s.recomputed_layers({1, 0, 9, 8, 0}) == 0);
  CHECK(s.recomputed_layers({2, 0, 1, 2, 0}) == 2);  // capped at the chunk's layers
  CHECK(s.recomputed_layers({2, 1, 1, 2, 2}) == 1);  // the rest goes to the next chunk
  CHECK(s.recomputed_layers({2, 2, 1, 2, 4}) == 0);
  const selective_recompute every{{4}};
  random_generator g(11);
  for (int i = 0; i < 200; ++i) {
    const int layers = static_cast<int>(g.between(1, 10));
    const int chunks = static_cast<int>(g.between(1, 4));
    int total = 0;
    for (int c = 0; c < chunks; ++c)
      total += every.recomputed_layers({static_cast<int>(g.between(0, 7)), c, 0, layers, c * layers});
    CHECK(total == std::min(4, layers * chunks));
  }
  CHECK_THROWS_WITH(s.recomputed_layers({3, 0, 0, 4, 0}), Catch::Contains("no count for this stage"));
  CHECK_THROWS_WITH(selective_recompute{{-1}}.recomputed_layers({0, 0, 0, 4, 0}), Catch::Contains("negative"));
}

TEST_CASE("checkpoint policies parse and print their text forms", "[checkpoint]") {
  CHECK(to_string(checkpoint_policy_by_name("none")) == "none");
  CHECK(to_string(checkpoint_policy_by_name("full")) == "full");
  CHECK(to_string(checkpoint_policy_by_name("selective:3")) == "selective:3");
  CHECK(to_string(checkpoint_policy_by_name("selective:3,0,2")) == "selective:3,0,2");
  CHECK(checkpoint_policy_by_name("selective:3,0,2").recomputed_layers({1, 0, 0, 4, 0}) == 0);
  CHECK(checkpoint_policy_by_name("full").recomputed_layers({1, 0, 0, 4, 0}) == 4);
  for (const char* bad : {"", "all", "selective", "selective:", "selective:-1", "selective:2,", "selective:x", "selective:1,,2"})
    CHECK_THROWS_WITH(checkpoint_policy_by_name(bad), Catch::Contains("unknown checkpoint policy") && Catch::Contains("selective:K"));
}
