// zeppelin/schedule/pipeline/detail/assemble.hpp
// The shared back half of every schedule policy: from each stage's order of forwards and
// backwards to the full op lists with their sends and receives.
//   in : stages P, chunks per stage V, micro-batch tokens, per stage the compute order
//   out: a pipeline_schedule in which
//        - the receive of a compute op's input (activation of virtual stage v - 1 for a
//          forward, gradient of v + 1 for a backward) is posted just before it;
//        - the matching send is posted by the producing stage in the communication group it
//          is in when the consumer is about to run, on a reference timeline: every stage
//          runs its order as soon as inputs allow, a forward taking 1 and a backward 2 units.
// Why the timeline: with NCCL a send completes only once its receive is posted (rendezvous),
// and a group only once all its operations have. Posting each send right after its forward
// deadlocks interleaved schedules whose receiver is still several steps away (two stages each
// wait for the other's later group; the tests keep such a case). Placed by the timeline,
// every group's partners are posted by the time the timeline reaches the group, so the
// stages finish for any order that can run at all with unbounded buffers; and the n-th send
// on an ordered pair of stages matches the n-th receive, because both follow the timeline,
// even when activations and gradients share the pair (two stages, interleaved).
// Also check_pipeline_input(): the input checks every policy shares.
// nvcc-safe (host-only).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/schedule/pipeline/pipeline_schedule.hpp>

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! One forward or backward in a stage's compute order.
struct compute_step {
  pipeline_op_kind kind = pipeline_op_kind::forward;
  int micro_batch = 0;
  int chunk = 0;
};

//! The most micro-batches x chunks x stages a schedule may hold (each becomes up to 4 ops).
inline constexpr long long max_pipeline_units = 1ll << 26;

//! Throws invalid_argument for stages or virtual_stages < 1, no micro-batches, or a
//! micro-batch of fewer than 1 token; resource_limit when stages x micro-batches x chunks
//! exceeds max_pipeline_units.
inline void check_pipeline_input(int stages, int virtual_stages, std::span<const token_count> tokens) {
  ZEPPELIN_EXPECTS(stages >= 1, "a pipeline needs at least one stage", {{"stages", double(stages)}});
  ZEPPELIN_EXPECTS(virtual_stages >= 1, "a pipeline stage holds at least one model chunk",
                   {{"virtual_stages", double(virtual_stages)}});
  ZEPPELIN_EXPECTS(!tokens.empty(), "a pipeline schedule needs at least one micro-batch", {});
  for (std::size_t k = 0; k < tokens.size(); ++k)
    ZEPPELIN_EXPECTS(tokens[k] >= 1, "every micro-batch needs at least one token",
                     {{"micro_batch", double(k)}, {"tokens", double(tokens[k])}});
  const long long units = static_cast<long long>(stages) * virtual_stages * static_cast<long long>(tokens.size());
  if (units > max_pipeline_units)
    ZEPPELIN_THROW(resource_limit, "the pipeline schedule would hold too many (stage, micro-batch, chunk) units",
                   {{"stages", double(stages)}, {"virtual_stages", double(virtual_stages)},
                    {"micro_batches", double(tokens.size())}, {"limit", double(max_pipeline_units)}});
}

//! Start of every compute op on the reference timeline (forward 1, backward 2 units), per
//! stage in its order. Throws logic_error-like invalid_argument when the orders can never run
//! (a cycle between stages): the policies never build such orders.
inline std::vector<std::vector<std::int64_t>> reference_timeline(int stages, int virtual_stages, int micro_batches,
                                                                 const std::vector<std::vector<compute_step>>& order) {
  const std::size_t units = static_cast<std::size_t>(micro_batches) * static_cast<std::size_t>(virtual_stages);
  const int last_virtual = stages * virtual_stages - 1;
  // end time of forward / backward of (virtual stage, micro-batch); -1 = not run yet
  std::vector<std::int64_t> forward_end(static_cast<std::size_t>(stages) * units, -1), backward_end = forward_end;
  const auto at = [&](int v, int mb) { return static_cast<std::size_t>(v) * static_cast<std::size_t>(micro_batches) + static_cast<std::size_t>(mb); };
  std::vector<std::vector<std::int64_t>> start(static_cast<std::size_t>(stages));
  std::vector<std::size_t> next(static_cast<std::size_t>(stages), 0);
  std::vector<std::int64_t> free_at(static_cast<std::size_t>(stages), 0);
  std::size_t remaining = 0;
  for (const auto& o : order) remaining += o.size();
  while (remaining > 0) {
    bool progressed = false;
    for (int p = 0; p < stages; ++p) {
      const auto& o = order[static_cast<std::size_t>(p)];
      auto& i = next[static_cast<std::size_t>(p)];
      while (i < o.size()) {
        const compute_step& c = o[i];
        const int v = c.chunk * stages + p;
        std::int64_t ready = free_at[static_cast<std::size_t>(p)];
        if (c.kind == pipeline_op_kind::forward) {
          if (v > 0) {
            const std::int64_t in = forward_end[at(v - 1, c.micro_batch)];
            if (in < 0) break;
            ready = std::max(ready, in);
          }
        } else {
          if (v < last_virtual) {
            const std::int64_t in = backward_end[at(v + 1, c.micro_batch)];
            if (in < 0) break;
            ready = std::max(ready, in);
          }
          ready = std::max(ready, forward_end[at(v, c.micro_batch)]);
        }
        start[static_cast<std::size_t>(p)].push_back(ready);
        const std::int64_t end = ready + (c.kind == pipeline_op_kind::forward ? 1 : 2);
        (c.kind == pipeline_op_kind::forward ? forward_end : backward_end)[at(v, c.micro_batch)] = end;
        free_at[static_cast<std::size_t>(p)] = end;
        ++i, --remaining, progressed = true;
      }
    }
    ZEPPELIN_EXPECTS(progressed, "the stages' compute orders wait on each other (no schedule can run them)", {});
  }
  return start;
}

inline pipeline_schedule assemble_pipeline(pipeline_schedule_kind kind, int stages, int virtual_stages,
                                           std::span<const token_count> tokens,
                                           const std::vector<std::vector<compute_step>>& order,
                                           std::vector<int> in_flight_bound) {
  pipeline_schedule s;
  s.kind = kind;
  s.stages = stages;
  s.virtual_stages = virtual_stages;
  s.micro_batch_tokens.assign(tokens.begin(), tokens.end());
  s.in_flight_bound = std::move(in_flight_bound);
  s.ops.resize(static_cast<std::size_t>(stages));
  const int m = static_cast<int>(tokens.size());
  const int last_virtual = stages * virtual_stages - 1;
  const auto start = reference_timeline(stages, virtual_stages, m, order);
  // A compute op's place on the timeline: (start, stage, index) orders all of them.
  struct place {
    std::int64_t start;
    int stage;
    std::size_t index;
    auto operator<=>(const place&) const = default;
  };
  // Where each (virtual stage, micro-batch)'s forward and backward sit in their stage's order.
  const std::size_t units = static_cast<std::size_t>(m) * static_cast<std::size_t>(virtual_stages);
  std::vector<std::size_t> forward_index(static_cast<std::size_t>(stages) * units), backward_index = forward_index;
  const auto at = [&](int v, int mb) { return static_cast<std::size_t>(v) * static_cast<std::size_t>(m) + static_cast<std::size_t>(mb); };
  for (int p = 0; p < stages; ++p) {
    const auto& o = order[static_cast<std::size_t>(p)];
    for (std::size_t i = 0; i < o.size(); ++i)
      (o[i].kind == pipeline_op_kind::forward ? forward_index : backward_index)[at(o[i].chunk * stages + p, o[i].micro_batch)] = i;
  }
  // Per stage: each send with the group it joins (before compute g; g == size: the trailing
  // group) and its consumer's place, bucketed by group (counting sort), then the op list.
  struct pending_send {
    std::size_t group;
    place consumer;
    pipeline_op op;
  };
  std::vector<pending_send> sends, bucketed;
  std::vector<std::size_t> group_begin;
  for (int p = 0; p < stages; ++p) {
    const auto& o = order[static_cast<std::size_t>(p)];
    const auto& mine = start[static_cast<std::size_t>(p)];
    sends.clear();
    for (std::size_t i = 0; i < o.size(); ++i) {
      const compute_step& c = o[i];
      const int v = c.chunk * stages + p;
      const bool forward = c.kind == pipeline_op_kind::forward;
      if (forward ? v == last_virtual : v == 0) continue;
      const int to_v = forward ? v + 1 : v - 1;
      const int q = to_v % stages;
      const std::size_t j = (forward ? forward_index : backward_index)[at(to_v, c.micro_batch)];
      const place consumer{start[static_cast<std::size_t>(q)][j], q, j};
      // the group stage p is in when the consumer is about to run: before p's first compute
      // that starts no earlier than the consumer (never before i + 1: the producer ran first).
      // A compute of p starting at the consumer's very time comes after the send: p is free
      // then and the consumer waits for nothing else, so the send must not wait for it.
      // starts along a stage only grow; the group is usually a step or two away: gallop, then bisect
      std::size_t lo = i + 1, hi = lo, step = 1;
      while (hi < mine.size() && mine[hi] < consumer.start) lo = hi + 1, hi += step, step *= 2;
      hi = std::min(hi, mine.size());
      while (lo < hi) {
        const std::size_t mid = lo + (hi - lo) / 2;
        if (mine[mid] < consumer.start) lo = mid + 1;
        else hi = mid;
      }
      sends.push_back({lo, consumer,
                       {forward ? pipeline_op_kind::send_activation : pipeline_op_kind::send_gradient, c.micro_batch, c.chunk, q,
                        tokens[static_cast<std::size_t>(c.micro_batch)]}});
    }
    group_begin.assign(o.size() + 2, 0);
    for (const pending_send& x : sends) ++group_begin[x.group + 1];
    for (std::size_t g = 1; g < group_begin.size(); ++g) group_begin[g] += group_begin[g - 1];
    bucketed.resize(sends.size());
    {
      std::vector<std::size_t> fill(group_begin.begin(), group_begin.end() - 1);
      for (const pending_send& x : sends) bucketed[fill[x.group]++] = x;
    }
    auto& ops = s.ops[static_cast<std::size_t>(p)];
    ops.reserve(o.size() + sends.size() * 2);
    const int down = (p + 1) % stages, up = (p + stages - 1) % stages;
    for (std::size_t i = 0; i <= o.size(); ++i) {
      const auto first = bucketed.begin() + static_cast<std::ptrdiff_t>(group_begin[i]);
      const auto last = bucketed.begin() + static_cast<std::ptrdiff_t>(group_begin[i + 1]);
      std::sort(first, last, [](const pending_send& a, const pending_send& b) { return a.consumer < b.consumer; });
      for (auto x = first; x != last; ++x) ops.push_back(x->op);
      if (i == o.size()) break;
      const compute_step& c = o[i];
      const int v = c.chunk * stages + p;
      const token_count t = tokens[static_cast<std::size_t>(c.micro_batch)];
      if (c.kind == pipeline_op_kind::forward && v > 0) ops.push_back({pipeline_op_kind::receive_activation, c.micro_batch, c.chunk, up, t});
      if (c.kind == pipeline_op_kind::backward && v < last_virtual)
        ops.push_back({pipeline_op_kind::receive_gradient, c.micro_batch, c.chunk, down, t});
      ops.push_back({c.kind, c.micro_batch, c.chunk, -1, t});
    }
  }
  return s;
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
