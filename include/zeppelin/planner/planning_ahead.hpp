// zeppelin/planner/planning_ahead.hpp
// Planning iteration N+1 on a host thread while iteration N trains, as Hydraulis and
// InfiniPipe overlap their planners with training: the plan is ready when the step needs it.
//   step_planning_ahead(candidates_of, options)
//     candidates_of: request -> candidates (default: default_step_candidates)
//   prepare(request)  starts plan_step (planner/plan_step.hpp) for `request` on its own thread
//                     and returns at once; one plan in flight at a time
//   take()            waits for the plan prepared last and returns it (what plan_step
//                     returned for that request, bit for bit: the same function on the
//                     same inputs), or rethrows what it threw
//   pending()         whether a plan was prepared and not yet taken
// Errors: invalid_argument for prepare while a plan is pending, take with none. The
// destructor waits for a plan in flight. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/planner/plan_step.hpp>
#include <zeppelin/planner/step_candidate.hpp>
#include <zeppelin/planner/step_request.hpp>

#include <functional>
#include <future>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

class step_planning_ahead {
 public:
  using candidate_source = std::function<std::vector<step_candidate>(const step_request&)>;

  explicit step_planning_ahead(candidate_source candidates_of = default_step_candidates, step_planner_options options = {})
      : candidates_of_(std::move(candidates_of)), options_(std::move(options)) {}

  step_planning_ahead(const step_planning_ahead&) = delete;
  step_planning_ahead& operator=(const step_planning_ahead&) = delete;
  ~step_planning_ahead() {
    if (next_.valid()) next_.wait();
  }

  //! Starts planning `request` (see the file comment).
  void prepare(step_request request) {
    ZEPPELIN_EXPECTS(!next_.valid(), "a step plan is already being prepared: take() it first", {});
    next_ = std::async(std::launch::async, [this, r = std::move(request)] {
      const std::vector<step_candidate> candidates = candidates_of_(r);
      return plan_step(r, candidates, options_);
    });
  }

  //! The plan prepared last (see the file comment).
  [[nodiscard]] step_decision take() {
    ZEPPELIN_EXPECTS(next_.valid(), "no step plan is being prepared: prepare() one first", {});
    return next_.get();
  }

  [[nodiscard]] bool pending() const noexcept { return next_.valid(); }

 private:
  candidate_source candidates_of_;
  step_planner_options options_;
  std::future<step_decision> next_;
};

ZEPPELIN_NAMESPACE_END
