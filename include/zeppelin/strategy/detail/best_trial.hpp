// zeppelin/strategy/detail/best_trial.hpp
// The best of a randomised search's trials when they run on several threads at once.
//   in : each finished trial's (value, index) and its assignment (offer); a running trial
//        takes a snapshot now and then and asks it whether its own (value, index) is beaten
//        (key::beats)
//   out: the least (value, index) offered, in that order, and its assignment
// The winner is the least pair whatever order the trials finish in, so the result does not
// depend on the threads. A snapshot is never better than the best offered so far (the best
// only improves), so a trial that its snapshot beats is beaten by a finished trial too and
// can stop without changing the winner. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>

#include <cstddef>
#include <limits>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

template <class Assignment>
class best_trial {
 public:
  struct key {
    double value = std::numeric_limits<double>::infinity();
    std::size_t index = std::numeric_limits<std::size_t>::max();
    //! Whether this key comes before (v, i), so that a trial at (v, i) cannot win.
    [[nodiscard]] bool beats(double v, std::size_t i) const noexcept { return value < v || (value == v && index < i); }
  };

  //! The best so far (a snapshot: later offers only improve on it).
  [[nodiscard]] key snapshot() const {
    const std::scoped_lock lock(mutex_);
    return best_;
  }
  //! Keeps (value, index) and `assignment` when they beat the best so far.
  void offer(double value, std::size_t index, const Assignment& assignment) {
    const std::scoped_lock lock(mutex_);
    if (best_.beats(value, index)) return;
    best_ = {value, index};
    assignment_ = assignment;
  }
  //! The winner's assignment, nullopt when nothing was offered.
  [[nodiscard]] std::optional<Assignment> take() && {
    if (best_.index == std::numeric_limits<std::size_t>::max()) return std::nullopt;
    return std::move(assignment_);
  }

 private:
  mutable std::mutex mutex_;
  key best_{};
  Assignment assignment_{};
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
