// zeppelin/detail/indexed_min_heap.hpp
// A binary min-heap of integer ids, each at most once, ordered by (key, id): the least key
// first, ties to the lower id. That order is total, so the ids leave in one order whatever the
// heap's layout. An id's key can change in place, and any id can leave, in O(log size), since
// the heap keeps where each id sits.
//   reserve_ids(n)   ids 0 .. n - 1 may be used (grows only; new ids are not in the heap)
//   set(id, key)     inserts id with key, or moves it to its new key
//   erase(id)        removes id, which must be in the heap
//   top(), top_key() the least id and its key (the heap must not be empty)
//   empty(), size(), contains(id)
// The fair share keeps its ports in one (by share, sim/detail/fair_share.hpp), the flows in
// flight their flows (by drain time, sim/detail/event_flows.hpp). Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

class indexed_min_heap {
 public:
  void reserve_ids(std::size_t n) {
    if (at_.size() < n) at_.resize(n, -1);
  }
  [[nodiscard]] bool empty() const noexcept { return heap_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return heap_.size(); }
  [[nodiscard]] bool contains(std::int32_t id) const noexcept { return at_[index(id)] >= 0; }
  [[nodiscard]] std::int32_t top() const noexcept { return heap_.front().id; }
  [[nodiscard]] double top_key() const noexcept { return heap_.front().key; }

  void set(std::int32_t id, double key) {
    std::int32_t& at = at_[index(id)];
    if (at < 0) {
      at = static_cast<std::int32_t>(heap_.size());
      heap_.push_back({key, id});
    } else {
      heap_[index(at)].key = key;
    }
    settle(index(at));
  }

  void erase(std::int32_t id) {
    const auto i = index(at_[index(id)]);
    at_[index(id)] = -1;
    const entry last = heap_.back();
    heap_.pop_back();
    if (last.id == id) return;
    heap_[i] = last;
    settle(i);
  }

 private:
  struct entry {
    double key;
    std::int32_t id;
    [[nodiscard]] bool before(const entry& y) const noexcept { return key < y.key || (key == y.key && id < y.id); }
  };
  static std::size_t index(std::int32_t i) noexcept { return static_cast<std::size_t>(i); }
  void put(std::size_t i, const entry& e) {
    heap_[i] = e;
    at_[index(e.id)] = static_cast<std::int32_t>(i);
  }
  // entry i to its place, up or down
  void settle(std::size_t i) {
    const entry e = heap_[i];
    for (; i > 0 && e.before(heap_[(i - 1) / 2]); i = (i - 1) / 2) put(i, heap_[(i - 1) / 2]);
    for (const std::size_t n = heap_.size();;) {
      std::size_t c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && heap_[c + 1].before(heap_[c])) ++c;
      if (!heap_[c].before(e)) break;
      put(i, heap_[c]);
      i = c;
    }
    put(i, e);
  }

  std::vector<entry> heap_;
  std::vector<std::int32_t> at_;  // per id: its place in heap_ (-1: not there)
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
