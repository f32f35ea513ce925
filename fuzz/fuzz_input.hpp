// fuzz/fuzz_input.hpp
// Shared by the fuzz targets (fuzz/*_fuzz.cpp): a cursor that decodes the fuzzer's bytes
// into bounded values, and the check that turns a broken property into a crash the fuzzer
// (and the replay driver, fuzz/replay_main.cpp) reports.
// Decoding never fails: past the end every read gives zero bytes, so any input, even an empty
// one, decodes to some value. Multi-byte values are little-endian, so a corpus file written
// by hand (docs/fuzzing.md) means the same on every machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string_view>

namespace zeppelin_fuzz {

class fuzz_input {
 public:
  fuzz_input(const std::uint8_t* data, std::size_t size) noexcept : data_(data), size_(size) {}

  [[nodiscard]] std::size_t remaining() const noexcept { return size_ - pos_; }

  //! The next byte, 0 past the end.
  std::uint8_t byte() noexcept { return pos_ < size_ ? data_[pos_++] : std::uint8_t{0}; }

  //! The next `n` (<= 8) bytes as a little-endian unsigned integer (missing bytes are 0).
  std::uint64_t unsigned_bytes(int n) noexcept {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= std::uint64_t{byte()} << (8 * i);
    return v;
  }
  std::uint16_t u16() noexcept { return static_cast<std::uint16_t>(unsigned_bytes(2)); }
  std::uint32_t u32() noexcept { return static_cast<std::uint32_t>(unsigned_bytes(4)); }
  std::uint64_t u64() noexcept { return unsigned_bytes(8); }
  //! Any int64, INT64_MIN and negatives included (two's complement of u64()).
  std::int64_t i64() noexcept {
    const std::uint64_t u = u64();
    std::int64_t v;
    std::memcpy(&v, &u, sizeof v);
    return v;
  }
  //! Any int32.
  std::int32_t i32() noexcept {
    const std::uint32_t u = u32();
    std::int32_t v;
    std::memcpy(&v, &u, sizeof v);
    return v;
  }
  //! Any double bit pattern: NaN, infinities, subnormals, -0 included.
  double f64() noexcept {
    const std::uint64_t u = u64();
    double v;
    std::memcpy(&v, &u, sizeof v);
    return v;
  }

  //! A value chosen by a 2-bit `width` code: 0: 1 + u8, 1: 1 + u16, 2: 1 + u32 (all
  //! positive), 3: any int64 (raw, to reach the limits).
  std::int64_t sized(unsigned width) noexcept {
    switch (width & 3u) {
      case 0: return 1 + static_cast<std::int64_t>(byte());
      case 1: return 1 + static_cast<std::int64_t>(u16());
      case 2: return 1 + static_cast<std::int64_t>(u32());
      default: return i64();
    }
  }

  //! The bytes not read yet (consumes them).
  std::string_view rest() noexcept {
    const std::string_view r(reinterpret_cast<const char*>(data_ + pos_), size_ - pos_);
    pos_ = size_;
    return r;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

//! A broken property: prints what and where, then aborts (libFuzzer saves the input as a
//! crash; the replay driver's process dies, so its ctest test fails).
[[noreturn]] inline void fail(const char* what, const char* file, int line) noexcept {
  std::fprintf(stderr, "zeppelin fuzz: property broken at %s:%d: %s\n", file, line, what);
  std::fflush(stderr);
  std::abort();
}

//! The exception that escaped, as a bug: every refusal of the library is a zeppelin::error,
//! so anything else (std::bad_alloc, std::out_of_range, ...) is one.
[[noreturn]] inline void fail_unexpected(const char* file, int line) noexcept {
  try {
    throw;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zeppelin fuzz: unexpected exception at %s:%d: %s\n", file, line, e.what());
  } catch (...) {
    std::fprintf(stderr, "zeppelin fuzz: unexpected non-std exception at %s:%d\n", file, line);
  }
  std::fflush(stderr);
  std::abort();
}

}  // namespace zeppelin_fuzz

//! Aborts with the condition's text unless `cond` holds.
#define ZEPPELIN_FUZZ_CHECK(cond)                                  \
  do {                                                             \
    if (!(cond)) ::zeppelin_fuzz::fail(#cond, __FILE__, __LINE__); \
  } while (false)

//! Aborts with `what` (a string literal).
#define ZEPPELIN_FUZZ_FAIL(what) ::zeppelin_fuzz::fail((what), __FILE__, __LINE__)

//! In a catch (...) block: reports the escaped exception and aborts.
#define ZEPPELIN_FUZZ_UNEXPECTED() ::zeppelin_fuzz::fail_unexpected(__FILE__, __LINE__)
