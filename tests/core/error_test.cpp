// tests/core/error_test.cpp
// The exception hierarchy (core/error.hpp): named values readable back, a message that
// states the numbers and the throw site, and catchability as zeppelin::error and
// std::runtime_error for every subclass.
#include <catch2/catch.hpp>
#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/validate.hpp>

#include <stdexcept>
#include <string>
#include <type_traits>

namespace zp = zeppelin;
using Catch::Matchers::Contains;

static_assert(std::is_base_of_v<std::runtime_error, zp::error>);
static_assert(std::is_base_of_v<zp::error, zp::invalid_argument>);
static_assert(std::is_base_of_v<zp::error, zp::infeasible>);
static_assert(std::is_base_of_v<zp::error, zp::invalid_plan>);
static_assert(std::is_base_of_v<zp::error, zp::cuda_error>);
static_assert(std::is_base_of_v<zp::error, zp::nccl_error>);
// zeppelin's invalid_argument is its own type, not std::invalid_argument (a catch of
// std::logic_error must not swallow zeppelin errors by accident).
static_assert(!std::is_base_of_v<std::logic_error, zp::invalid_argument>);
static_assert(!std::is_base_of_v<zp::invalid_argument, zp::infeasible>);

TEST_CASE("error carries its named values in order", "[core][error]") {
  const zp::error e("boom", {{"capacity", 4096}, {"rank", -3}, {"ratio", 0.25}}, "here.cpp", 12);
  REQUIRE(e.values().size() == 3);
  CHECK(e.values()[0].name == "capacity");
  CHECK(e.values()[0].value == 4096);
  CHECK(e.values()[1].name == "rank");
  CHECK(e.values()[1].value == -3);
  CHECK(e.values()[2].name == "ratio");
  CHECK(e.value("capacity") == 4096.0);
  CHECK(e.value("rank") == -3.0);
  CHECK(e.value("ratio") == 0.25);
  CHECK_FALSE(e.value("missing").has_value());
  CHECK_FALSE(e.value("").has_value());
  CHECK(std::string(e.file()) == "here.cpp");
  CHECK(e.line() == 12);
}

TEST_CASE("value() returns the first of repeated names", "[core][error]") {
  const zp::error e("x", {{"n", 1}, {"n", 2}}, "f", 1);
  CHECK(e.value("n") == 1.0);
}

TEST_CASE("the message states the numbers and the throw site", "[core][error]") {
  const zp::error e("capacity too small", {{"capacity", 4096}, {"tokens", 5000.5}}, "dir/file.hpp", 77);
  const std::string what = e.what();
  CHECK_THAT(what, Contains("capacity too small"));
  CHECK_THAT(what, Contains("capacity=4096"));
  CHECK_THAT(what, Contains("tokens=5000.5"));
  CHECK_THAT(what, Contains("dir/file.hpp:77"));

  // big token counts are printed in full, not rounded to 6 digits
  const zp::error big("m", {{"total", 123456789012.0}}, "f", 1);
  CHECK_THAT(std::string(big.what()), Contains("total=123456789012"));

  // no values: no empty parentheses
  const zp::error bare("plain", {}, "f.cpp", 3);
  CHECK(std::string(bare.what()) == "plain [f.cpp:3]");
}

TEST_CASE("ZEPPELIN_THROW records this file and line", "[core][error]") {
  int line = 0;
  try {
    line = __LINE__ + 1;
    ZEPPELIN_THROW(infeasible, "too many tokens", {{"tokens", 10}, {"limit", 8}});
  } catch (const zp::infeasible& e) {
    CHECK(e.line() == line);
    CHECK_THAT(std::string(e.file()), Contains("error_test.cpp"));
    CHECK_THAT(std::string(e.what()), Contains("error_test.cpp:" + std::to_string(line)));
    CHECK_THAT(std::string(e.what()), Contains("tokens=10"));
    CHECK_THAT(std::string(e.what()), Contains("limit=8"));
    CHECK(e.value("limit") == 8.0);
    return;
  }
  FAIL("ZEPPELIN_THROW did not throw");
}

namespace {
int evaluations = 0;
bool count_and_return(bool v) {
  ++evaluations;
  return v;
}
}  // namespace

TEST_CASE("ZEPPELIN_EXPECTS throws invalid_argument only when the condition fails", "[core][error]") {
  evaluations = 0;
  CHECK_NOTHROW([] { ZEPPELIN_EXPECTS(count_and_return(true), "never", {{"x", 1}}); }());
  CHECK(evaluations == 1);  // the condition is evaluated exactly once

  // usable as a single statement under an unbraced if/else
  auto checked = [](int n) {
    if (n > 100)
      ZEPPELIN_EXPECTS(n < 1000, "n too big", {{"n", double(n)}});
    else
      return 0;
    return 1;
  };
  CHECK(checked(5) == 0);
  CHECK(checked(500) == 1);
  CHECK_THROWS_AS(checked(5000), zp::invalid_argument);

  try {
    ZEPPELIN_EXPECTS(count_and_return(false), "nodes must be positive", {{"nodes", 0}, {"gpus", 8}});
    FAIL("no throw");
  } catch (const zp::invalid_argument& e) {
    CHECK(e.value("nodes") == 0.0);
    CHECK(e.value("gpus") == 8.0);
    CHECK_THAT(std::string(e.what()), Contains("nodes must be positive"));
    CHECK_THAT(std::string(e.what()), Contains("nodes=0"));
    CHECK_THAT(std::string(e.what()), Contains("error_test.cpp:"));
  }
}

TEST_CASE("every subclass is caught as zeppelin::error and std::runtime_error", "[core][error]") {
  auto throws_as_both = [](auto thrower) {
    bool as_error = false, as_runtime = false;
    try {
      thrower();
    } catch (const zp::error& e) {
      as_error = !std::string(e.what()).empty();
    }
    try {
      thrower();
    } catch (const std::runtime_error& e) {
      as_runtime = !std::string(e.what()).empty();
    }
    return as_error && as_runtime;
  };
  CHECK(throws_as_both([] { ZEPPELIN_THROW(invalid_argument, "a", {}); }));
  CHECK(throws_as_both([] { ZEPPELIN_THROW(infeasible, "b", {}); }));
  CHECK(throws_as_both([] { throw zp::cuda_error(2, "out of memory", __FILE__, __LINE__); }));
  CHECK(throws_as_both([] { throw zp::nccl_error(3, "internal error", __FILE__, __LINE__); }));
  CHECK(throws_as_both([] {
    throw zp::invalid_plan(zp::plan_violation{zp::violation_kind::token_missing, "gap", {{"seq", 1}}}, __FILE__,
                           __LINE__);
  }));
  // a real throw from library code
  CHECK(throws_as_both([] { (void)zp::batch(std::vector<zp::token_count>{}); }));
  CHECK_THROWS_AS(zp::batch(std::vector<zp::token_count>{}), zp::invalid_argument);
}

TEST_CASE("cuda_error and nccl_error expose their code", "[core][error]") {
  const zp::cuda_error c(700, "illegal address", "k.cu", 9);
  CHECK(c.code() == 700);
  CHECK(c.value("code") == 700.0);
  CHECK_THAT(std::string(c.what()), Contains("illegal address"));
  CHECK_THAT(std::string(c.what()), Contains("code=700"));
  CHECK_THAT(std::string(c.what()), Contains("k.cu:9"));
  const zp::nccl_error n(6, "remote error", "c.cpp", 4);
  CHECK(n.code() == 6);
  CHECK(n.value("code") == 6.0);
}

TEST_CASE("invalid_plan keeps the violation kind message and values", "[core][error]") {
  const zp::plan_violation v{zp::violation_kind::capacity_exceeded, "over capacity", {{"rank", 3}, {"capacity", 10}}};
  const zp::invalid_plan e(v, "v.hpp", 5);
  CHECK(e.kind() == zp::violation_kind::capacity_exceeded);
  CHECK(e.value("rank") == 3.0);
  CHECK(e.value("capacity") == 10.0);
  CHECK_THAT(std::string(e.what()), Contains("over capacity"));
  CHECK_THAT(std::string(e.what()), Contains("capacity=10"));
}
