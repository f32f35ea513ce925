#include <catch2/catch.hpp>
#include <zeppelin/core.hpp>
TEST_CASE("smoke", "[core]") { REQUIRE(zeppelin::batch({1, 2}).total_tokens() == 3); }
