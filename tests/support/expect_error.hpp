// tests/support/expect_error.hpp
// expect_error<E>(f) runs f, fails the test unless f throws E, and returns the exception so
// the test can check the numbers it carries (e.value("length")). expect_invalid(f) is
// expect_error<zeppelin::invalid_argument>(f).
#pragma once

#include <catch2/catch.hpp>
#include <zeppelin/core/error.hpp>

#include <stdexcept>
#include <utility>

namespace zeppelin_test {

template <class Error, class F>
Error expect_error(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e;
  }
  FAIL("the call did not throw the expected exception type");
  throw std::logic_error("unreachable: FAIL throws");
}

template <class F>
zeppelin::invalid_argument expect_invalid(F&& f) {
  return expect_error<zeppelin::invalid_argument>(std::forward<F>(f));
}

}  // namespace zeppelin_test
