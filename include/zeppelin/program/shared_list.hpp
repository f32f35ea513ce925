// zeppelin/program/shared_list.hpp
// An immutable list that the operations of an execution program can share.
//   in : the items, moved in once (a vector or a braced list)
//   out: a value that reads like a const vector; copies share the items
// Why: the builder gives many operations the same list. The lanes of an all-to-all (Ulysses)
// subgroup compute the same attention blocks (block_list, program/block_list.hpp), and its
// members permute their rows with the same row runs (run_list, program/program.hpp): for
// Ulysses over 1024 GPUs on a GitHub batch that is 33M row runs held apart, about 800 MB,
// and under a million held once. Work done per list (launch waves, pricing) can be done once
// per list: is_shared says another holder exists, identity() names the list.
// A value type: == compares the items (lists that share compare equal at once).
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

template <class T>
class shared_list {
 public:
  using value_type = T;

  shared_list() = default;
  //! Takes the items (implicit: an operation's list is written as the vector it was built in).
  shared_list(std::vector<T> items)  // NOLINT(google-explicit-constructor)
      : items_(items.empty() ? nullptr : std::make_shared<const std::vector<T>>(std::move(items))) {}
  shared_list(std::initializer_list<T> items) : shared_list(std::vector<T>(items)) {}

  [[nodiscard]] const std::vector<T>& items() const noexcept { return items_ ? *items_ : none(); }
  [[nodiscard]] std::size_t size() const noexcept { return items().size(); }
  [[nodiscard]] bool empty() const noexcept { return items().empty(); }
  [[nodiscard]] const T& operator[](std::size_t i) const noexcept { return items()[i]; }
  [[nodiscard]] const T& front() const noexcept { return items().front(); }
  [[nodiscard]] const T& back() const noexcept { return items().back(); }
  [[nodiscard]] auto begin() const noexcept { return items().begin(); }
  [[nodiscard]] auto end() const noexcept { return items().end(); }

  //! Whether another list (another operation, or a list the builder still holds) shares these
  //! items: work on them worth doing once per list rather than once per holder.
  [[nodiscard]] bool is_shared() const noexcept { return items_ && items_.use_count() > 1; }
  //! The same address for lists that share their items (nullptr for an empty list): a key for
  //! work done once per list, valid while one of them lives.
  [[nodiscard]] const void* identity() const noexcept { return items_.get(); }

  friend bool operator==(const shared_list& a, const shared_list& b) noexcept {
    return a.items_ == b.items_ || a.items() == b.items();
  }

 private:
  static const std::vector<T>& none() noexcept {
    static const std::vector<T> empty;
    return empty;
  }
  std::shared_ptr<const std::vector<T>> items_;
};

ZEPPELIN_NAMESPACE_END
