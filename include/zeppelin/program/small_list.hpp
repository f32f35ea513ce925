// zeppelin/program/small_list.hpp
// A short list of trivially copyable values that keeps its first N items in place.
//   in : items pushed one at a time (or a braced list)
//   out: a value that reads like a const vector (size, begin, end, operator[])
// Why: every operation of an execution program lists the operations it waits for, and almost
// always one or none. A std::vector there costs one heap block per operation: for Ulysses
// over 8192 GPUs, three million blocks of four bytes. In place up to N, on the heap beyond.
// The size of a std::vector for N = 2 and 4-byte items. A value type (copies are deep).
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <utility>

ZEPPELIN_NAMESPACE_BEGIN

template <class T, std::size_t N>
class small_list {
  static_assert(std::is_trivially_copyable_v<T> && N >= 1, "small_list holds trivially copyable values, N >= 1 of them in place");

 public:
  using value_type = T;

  small_list() = default;
  small_list(std::initializer_list<T> items) {
    for (const T& x : items) push_back(x);
  }
  small_list(const small_list& other) { assign(other); }
  small_list(small_list&& other) noexcept { take(other); }
  small_list& operator=(const small_list& other) {
    if (this != &other) {
      clear();
      assign(other);
    }
    return *this;
  }
  small_list& operator=(small_list&& other) noexcept {
    if (this != &other) {
      clear();
      take(other);
    }
    return *this;
  }
  ~small_list() = default;

  void push_back(const T& x) {
    if (size_ == capacity()) grow(2 * static_cast<std::size_t>(capacity()));
    data()[size_++] = x;
  }
  //! Empties the list and gives its heap block back.
  void clear() noexcept {
    heap_.reset();
    capacity_ = N;
    size_ = 0;
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] const T* data() const noexcept { return heap_ ? heap_.get() : in_place_; }
  [[nodiscard]] const T* begin() const noexcept { return data(); }
  [[nodiscard]] const T* end() const noexcept { return data() + size_; }
  [[nodiscard]] const T& operator[](std::size_t i) const noexcept { return data()[i]; }

  friend bool operator==(const small_list& a, const small_list& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  [[nodiscard]] T* data() noexcept { return heap_ ? heap_.get() : in_place_; }
  [[nodiscard]] std::uint32_t capacity() const noexcept { return capacity_; }
  void grow(std::size_t capacity) {
    auto block = std::make_unique_for_overwrite<T[]>(capacity);
    std::copy(begin(), end(), block.get());
    heap_ = std::move(block);
    capacity_ = static_cast<std::uint32_t>(capacity);
  }
  void assign(const small_list& other) {
    if (other.size_ > N) grow(other.size_);
    std::copy(other.begin(), other.end(), data());
    size_ = other.size_;
  }
  void take(small_list& other) noexcept {
    if (other.heap_) {
      heap_ = std::move(other.heap_);
      capacity_ = other.capacity_;
    } else {
      std::copy(other.in_place_, other.in_place_ + other.size_, in_place_);
    }
    size_ = other.size_;
    other.clear();
  }

  T in_place_[N] = {};
  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = N;
  std::unique_ptr<T[]> heap_;
};

ZEPPELIN_NAMESPACE_END
