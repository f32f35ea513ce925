// python/capi/capi_support.hpp
// What every translation unit of the C ABI shares:
//   guarded(f)     the error convention of zeppelin_capi.h: runs f, turns any exception into a
//                  nonzero return and this thread's last_error message (one definition for the
//                  whole library), so no C++ exception crosses the C ABI
//   expect(ok, m)  throws invalid_argument(m) when !ok
//   expect_buffers throws invalid_argument naming the call and the first NULL buffer of those
//                  a call will touch, before anything reads or writes through them
//   fill_table     the (out, room, count) convention of the int64 tables (fill_rows: of rows
//                  built in full first)
//   lengths_of     a batch's lengths from the caller's array
#pragma once

#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace zeppelin::capi {

inline thread_local std::string last_error;

template <class F>
int guarded(F&& f) noexcept {
  try {
    last_error.clear();
    f();
    return 0;
  } catch (const std::bad_alloc&) {
    last_error = "zeppelin: out of memory";
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "zeppelin: unknown error";
  }
  return 1;
}

inline void expect(bool ok, const std::string& what) {
  if (!ok) ZEPPELIN_THROW(invalid_argument, what, {});
}

//! Throws invalid_argument "<call>: <name> must not be NULL" for the first NULL of `buffers`
//! (name, pointer).
inline void expect_buffers(const char* call, std::initializer_list<std::pair<const char*, const void*>> buffers) {
  for (const auto& [name, pointer] : buffers)
    expect(pointer != nullptr, std::string(call) + ": " + name + " must not be NULL");
}

//! *count = n; when out != NULL and room >= n, row(i, out + i * Width) writes row i.
template <int Width, class Row>
void fill_table(std::int64_t n, std::int64_t* out, std::int64_t room, std::int64_t* count, Row&& row) {
  expect(count != nullptr, "zeppelin: count must not be NULL");
  *count = n;
  if (out == nullptr || room < n) return;
  for (std::int64_t i = 0; i < n; ++i) row(i, out + i * Width);
}

//! fill_table over rows built in full first (Width values per row, row-major).
template <int Width>
void fill_rows(const std::vector<std::int64_t>& rows, std::int64_t* out, std::int64_t room, std::int64_t* count) {
  fill_table<Width>(static_cast<std::int64_t>(rows.size() / Width), out, room, count,
                    [&](std::int64_t i, std::int64_t* row) { std::copy_n(rows.data() + i * Width, Width, row); });
}

//! A batch's lengths from the C caller's array; at least one.
inline std::vector<token_count> lengths_of(const std::int64_t* lengths, std::int64_t sequences) {
  expect(lengths != nullptr && sequences >= 1, "zeppelin: the batch needs at least one length (sequences " + std::to_string(sequences) + ")");
  return {lengths, lengths + sequences};
}

}  // namespace zeppelin::capi
