// detail::parallel_for: every index runs exactly once whatever the thread count, and the
// first exception in index order comes back once every index has run.
#include <catch2/catch.hpp>

#include <zeppelin/detail/parallel_for.hpp>

#include <atomic>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

using namespace zeppelin;

TEST_CASE("parallel_for runs every index once on any number of threads", "[core][parallel_for]") {
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{257}})
    for (const int threads : {-1, 1, 2, 8}) {
      CAPTURE(n, threads);
      std::vector<std::atomic<int>> runs(n);
      detail::parallel_for(n, threads, [&](std::size_t i) { ++runs[i]; });
      for (std::size_t i = 0; i < n; ++i) CHECK(runs[i].load() == 1);
    }
}

TEST_CASE("parallel_for rethrows the first failing index's exception after all ran", "[core][parallel_for]") {
  for (const int threads : {1, 4}) {
    CAPTURE(threads);
    std::atomic<int> ran{0};
    const auto f = [&](std::size_t i) {
      ++ran;
      if (i == 3 || i == 7) throw std::runtime_error("index " + std::to_string(i));
    };
    CHECK_THROWS_WITH(detail::parallel_for(10, threads, f), "index 3");
    CHECK(ran.load() == (threads == 1 ? 4 : 10));
  }
}
