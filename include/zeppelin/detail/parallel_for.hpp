// zeppelin/detail/parallel_for.hpp
// Runs f(i) for every i in [0, n) on up to `threads` threads (the caller's among them).
//   in : n, threads (>= 1), f: independent calls (each writes only what index i owns)
//   out: every call done, or the exception of the lowest index that threw (the same one
//        whatever `threads` is: threads = 1 stops there, more threads finish the others first)
// Threads take the next index from a shared counter, so which thread runs which index varies,
// but nothing a call returns does: a caller that writes per index and combines the results in
// index order afterwards is deterministic whatever `threads` is. threads <= 1 runs the calls
// in order on the calling thread and starts none. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

template <class F>
void parallel_for(std::size_t n, int threads, F&& f) {
  const std::size_t workers = std::min(n, static_cast<std::size_t>(std::max(threads, 1)));
  if (workers <= 1) {
    for (std::size_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::vector<std::exception_ptr> errors(n);
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t i = next++; i < n; i = next++) try {
        f(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
  };
  {
    std::vector<std::jthread> pool;
    pool.reserve(workers - 1);
    for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(work);
    work();
  }  // joined
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
