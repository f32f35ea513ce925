// zeppelin/sim/detail/event_stream.hpp
// One rank's compute stream in an event_engine run: the task holding it, and how much of that
// task's work is left at the stream's current speed.
//   in : start(task, now, full-speed seconds, speed); change_speed(now, speed) when the rank's
//        communication starts or stops (SM contention); release(now) when the task completes
//        or is suspended
//   out: run_end (when the running task will complete at the current speed),
//        work_left_at(now) (its full-speed seconds still to do), and a generation that
//        changes whenever a scheduled run_end stops being valid
// Work is tracked as full-speed seconds left at `mark`: at speed v, w seconds of work take
// w / v of wall-clock time. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>

#include <algorithm>
#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

struct compute_stream {
  static constexpr std::int32_t none = -1;

  std::int32_t running = none;  //!< the task (a task_id) holding the stream
  double run_start = 0;         //!< when `running` got the stream (start of its segment)
  double run_end = 0;           //!< when `running` completes at the current speed
  double mark = 0;              //!< when work_left and speed were last set
  double work_left = 0;         //!< full-speed seconds of `running` left at `mark`
  double speed = 1;             //!< fraction of full speed `running` runs at
  std::int32_t generation = 0;  //!< bumped when a scheduled run_end becomes stale
  std::int32_t next_in_program = 0;  //!< in_order policy: index of the next task to run
  std::int32_t unfinished = 0;       //!< compute tasks of the rank not yet completed
  double free_since = 0;             //!< when the stream last became free
  bool needs_scheduling = false;     //!< a task was released or completed: try to start one

  [[nodiscard]] bool free() const noexcept { return running == none; }

  //! Full-speed seconds `running` still has to do at `now`.
  [[nodiscard]] double work_left_at(double now) const noexcept {
    return std::max(0.0, work_left - (now - mark) * speed);
  }

  //! `task` takes the stream at `now` with `seconds` of full-speed work left, at `v`.
  void start(std::int32_t task, double now, double seconds, double v) noexcept {
    running = task;
    run_start = now;
    mark = now;
    work_left = seconds;
    speed = v;
    run_end = now + work_left / speed;
  }

  //! The running task continues at `v` from `now`; its previous run_end is stale.
  void change_speed(double now, double v) noexcept {
    work_left = work_left_at(now);
    mark = now;
    speed = v;
    run_end = now + work_left / v;
    ++generation;
  }

  //! The running task leaves the stream at `now` (completed or suspended).
  void release(double now) noexcept {
    running = none;
    free_since = now;
  }
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
