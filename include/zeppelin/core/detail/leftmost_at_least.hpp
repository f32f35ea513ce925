// zeppelin/core/detail/leftmost_at_least.hpp
// First fit in O(log n): values at indices 0..n-1 (appended, or changed in place), and the
// lowest index whose value is at least x.
//   in : push(value), set(i, value)
//   out: leftmost_at_least(x): the lowest i with value(i) >= x, or npos
// A segment tree of maxima over a power-of-two capacity that doubles as values are pushed.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

template <class T>
class leftmost_at_least_tree {
 public:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] T value(std::size_t i) const { return node_[capacity_ + i]; }

  void push(T v) {
    if (size_ == capacity_) grow();
    set(size_++, v);
  }
  void set(std::size_t i, T v) {
    std::size_t k = capacity_ + i;
    node_[k] = v;
    for (k /= 2; k >= 1; k /= 2) node_[k] = std::max(node_[2 * k], node_[2 * k + 1]);
  }
  //! The lowest index whose value is >= x, or npos.
  [[nodiscard]] std::size_t leftmost_at_least(T x) const noexcept {
    if (size_ == 0 || node_[1] < x) return npos;
    std::size_t k = 1;
    while (k < capacity_) k = node_[2 * k] >= x ? 2 * k : 2 * k + 1;
    return k - capacity_;
  }

 private:
  static constexpr T lowest = std::numeric_limits<T>::lowest();
  void grow() {
    const std::size_t old = capacity_;
    std::vector<T> values(node_.begin() + static_cast<std::ptrdiff_t>(old), node_.begin() + static_cast<std::ptrdiff_t>(old + size_));
    capacity_ = std::max<std::size_t>(1, 2 * old);
    node_.assign(2 * capacity_, lowest);
    std::copy(values.begin(), values.end(), node_.begin() + static_cast<std::ptrdiff_t>(capacity_));
    for (std::size_t k = capacity_ - 1; k >= 1; --k) node_[k] = std::max(node_[2 * k], node_[2 * k + 1]);
  }

  std::size_t size_ = 0, capacity_ = 0;
  std::vector<T> node_;
};

}  // namespace detail

ZEPPELIN_NAMESPACE_END
