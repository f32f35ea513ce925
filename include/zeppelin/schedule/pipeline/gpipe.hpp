// zeppelin/schedule/pipeline/gpipe.hpp
// GPipe (Huang et al., "GPipe: Efficient Training of Giant Neural Networks using Pipeline
// Parallelism", 2019): every stage runs the forwards of all M micro-batches, then their
// backwards, both in micro-batch order (PyTorch's torch.distributed.pipelining ScheduleGPipe
// order). Every stage holds all M micro-batches' activations at the turn: in-flight bound M.
//   in : stages P, micro-batch tokens        out: pipeline_schedule (kind gpipe, V = 1)
// Errors: detail::check_pipeline_input (invalid_argument, resource_limit).
// nvcc-safe (host-only).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/schedule/pipeline/detail/assemble.hpp>
#include <zeppelin/schedule/pipeline/schedule_policy.hpp>

#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct gpipe {
  [[nodiscard]] pipeline_schedule build(int stages, std::span<const token_count> tokens) const {
    detail::check_pipeline_input(stages, 1, tokens);
    const int m = static_cast<int>(tokens.size());
    std::vector<std::vector<detail::compute_step>> order(static_cast<std::size_t>(stages));
    for (auto& o : order) {
      o.reserve(2 * static_cast<std::size_t>(m));
      for (int k = 0; k < m; ++k) o.push_back({pipeline_op_kind::forward, k, 0});
      for (int k = 0; k < m; ++k) o.push_back({pipeline_op_kind::backward, k, 0});
    }
    return detail::assemble_pipeline(pipeline_schedule_kind::gpipe, stages, 1, tokens, order,
                                     std::vector<int>(static_cast<std::size_t>(stages), m));
  }
  static constexpr bool valid_by_construction = true;
  friend bool operator==(const gpipe&, const gpipe&) = default;
};
static_assert(pipeline_schedule_policy<gpipe> && schedule_valid_by_construction<gpipe>);

ZEPPELIN_NAMESPACE_END
