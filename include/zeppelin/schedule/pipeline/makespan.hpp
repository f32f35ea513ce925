// zeppelin/schedule/pipeline/makespan.hpp
// The compute-only makespan of a pipeline schedule: when the last operation ends if every
// stage runs its compute operations in the schedule's order and communication takes no time.
//   in : a pipeline schedule (schedule/pipeline/pipeline_schedule.hpp) and the seconds of each
//        forward and backward, forward_seconds(stage, micro_batch, chunk) and
//        backward_seconds(stage, micro_batch, chunk) (recomputation included)
//   out: the makespan in seconds
// Dependencies: a stage's operations one after another; the forward of (micro-batch, virtual
// stage v) after that of v - 1; its backward after the backward of v + 1, or, on the last
// virtual stage, after its own forward. Chunk-level 1F1B's slice dependencies are in its
// per-stage order (schedule/pipeline/chunk_one_f_one_b.hpp), so they need no edge here. The
// planners use it as the exact price of a schedule without communication; the step simulator
// (sim/simulate_step.hpp) adds the sends, collectives and gradient sync of a step program.
// Errors: invalid_argument when the schedule cannot run (an operation waits for one that
// never runs: a schedule that did not pass validate()), or a duration is negative or not
// finite. Cost: O(operations x stages) at worst (a pass over the stages runs at least one
// operation). Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/schedule/pipeline/pipeline_schedule.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

template <class ForwardSeconds, class BackwardSeconds>
[[nodiscard]] double pipeline_makespan(const pipeline_schedule& s, ForwardSeconds&& forward_seconds, BackwardSeconds&& backward_seconds) {
  const int P = s.stages, V = s.virtual_stages, M = s.micro_batches();
  constexpr double unknown = -1;
  // finish times by (virtual stage, micro-batch)
  std::vector<double> forward_done(static_cast<std::size_t>(P) * V * M, unknown), backward_done(forward_done.size(), unknown);
  const auto at = [M](int v, int mb) { return static_cast<std::size_t>(v) * static_cast<std::size_t>(M) + static_cast<std::size_t>(mb); };
  std::vector<std::size_t> next(static_cast<std::size_t>(P), 0);
  std::vector<double> free_at(static_cast<std::size_t>(P), 0);
  double makespan = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int p = 0; p < P; ++p) {
      const auto& ops = s.ops[static_cast<std::size_t>(p)];
      auto& i = next[static_cast<std::size_t>(p)];
      for (; i < ops.size(); ++i) {
        const pipeline_op& op = ops[i];
        if (!is_compute(op.kind)) continue;
        const int v = s.virtual_stage(p, op.chunk), last = P * V - 1;
        const bool forward = op.kind == pipeline_op_kind::forward;
        const double ready = forward ? (v > 0 ? forward_done[at(v - 1, op.micro_batch)] : 0.0)
                                     : (v < last ? backward_done[at(v + 1, op.micro_batch)] : forward_done[at(v, op.micro_batch)]);
        if (ready == unknown) break;  // waits for another stage
        const double seconds = forward ? forward_seconds(p, op.micro_batch, op.chunk) : backward_seconds(p, op.micro_batch, op.chunk);
        ZEPPELIN_EXPECTS(std::isfinite(seconds) && seconds >= 0, "pipeline makespan: a duration must be finite and non-negative",
                         {{"stage", double(p)}, {"micro_batch", double(op.micro_batch)}, {"seconds", seconds}});
        double& free = free_at[static_cast<std::size_t>(p)];
        free = std::max(free, ready) + seconds;
        (forward ? forward_done : backward_done)[at(v, op.micro_batch)] = free;
        makespan = std::max(makespan, free);
        progress = true;
      }
    }
  }
  for (int p = 0; p < P; ++p)
    ZEPPELIN_EXPECTS(next[static_cast<std::size_t>(p)] == s.ops[static_cast<std::size_t>(p)].size(),
                     "pipeline makespan: the schedule cannot run (an operation waits for one that never runs)",
                     {{"stage", double(p)}, {"operation", double(next[static_cast<std::size_t>(p)])}});
  return makespan;
}

ZEPPELIN_NAMESPACE_END
