// zeppelin/exec/pipeline_runner.hpp
// Runs ONE stage of a pipeline schedule on a communicator: the one interpreter of
// schedule/pipeline/ ops on real ranks (the simulator prices the same ops).
//   in : a pipeline_schedule (schedule/pipeline/pipeline_schedule.hpp), the stage this rank
//        runs, the user's stage model (pipeline_stage_model below), a communicator
//        (comm/communicator.hpp) and the rank of every stage (empty: stage s on rank s)
//   out: the model's forwards and backwards called in the schedule's order with the tensors
//        received from the neighbouring stages; returns pipeline_stage_stats
// The walk: a forward or backward op calls the model; each maximal run of send/receive ops is
// posted as ONE group (group_start, the sends and receives in op order, group_end labelled
// "pipeline stage S group G", G counting the stage's groups from 0).
// Boundary tensors: the activation leaving virtual stage v for v + 1 and the gradient going
// back have model.activation_elements(micro_batch) elements of the model's value_type. The
// runner owns them, keyed by (micro-batch, chunk): an outgoing tensor lives from the compute
// op that writes it to the group that sends it, an incoming one from the group that receives
// it to the compute op that reads it; so the runner's memory follows the schedule's in-flight
// window. What a forward keeps for its backward (activations, or only its input when it
// recomputes) is the model's business. On the first virtual stage forward gets an empty input
// and backward an empty input gradient (nothing goes back); on the last virtual stage forward
// gets an empty output and backward an empty output gradient (the model computes the loss
// and its gradient itself).
// Errors (invalid_argument, thrown before any communication): a stage out of range; a
// schedule validate() rejects (schedule/pipeline/validate.hpp; run once per call, O(ops));
// a stage-rank list of the wrong size, with a rank outside the communicator or a rank twice;
// a communicator whose rank() is not the stage's rank. Communicator failures (comm_timeout,
// comm_mismatch: e.g. two stages disagreeing on activation_elements) and model exceptions
// propagate unchanged.
// Host buffers (std::vector): suits host communicators. nvcc-safe (host-only).
#pragma once

#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/schedule/pipeline/pipeline_schedule.hpp>
#include <zeppelin/schedule/pipeline/validate.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! What the user supplies for the chunks of one pipeline stage. `value_type` is the element
//! type of the boundary tensors (double in tests, float or a bf16 type in real use).
//!   activation_elements(k)           elements of micro-batch k's boundary tensor (the same
//!                                    between every pair of virtual stages)
//!   forward(k, c, input, output)     chunk c's forward of micro-batch k: reads input (empty on
//!                                    the first virtual stage), writes output (empty on the last)
//!   backward(k, c, output_gradient, input_gradient)
//!                                    chunk c's backward: reads the gradient of its output
//!                                    (empty on the last virtual stage), writes the gradient of
//!                                    its input (empty on the first)
template <class M>
concept pipeline_stage_model =
    std::is_trivially_copyable_v<typename M::value_type> &&
    requires(M& m, const M& cm, int micro_batch, int chunk, std::span<const typename M::value_type> in,
             std::span<typename M::value_type> out) {
      { cm.activation_elements(micro_batch) } -> std::convertible_to<std::size_t>;
      m.forward(micro_batch, chunk, in, out);
      m.backward(micro_batch, chunk, in, out);
    };

//! What one run_pipeline_stage call did on its stage.
struct pipeline_stage_stats {
  int forwards = 0;
  int backwards = 0;
  int groups = 0;                        //!< communication groups posted
  int peak_in_flight = 0;                //!< most (micro-batch, chunk) forwards awaiting backward
  int peak_buffers = 0;                  //!< most boundary tensors the runner held at once
  std::size_t peak_buffer_elements = 0;  //!< most elements the runner held at once
  std::size_t elements_sent = 0;
  std::size_t elements_received = 0;
  friend bool operator==(const pipeline_stage_stats&, const pipeline_stage_stats&) = default;
};

namespace detail {

// The runner's boundary tensors of one stage: four slots per (micro-batch, chunk).
template <class T>
class pipeline_buffers {
 public:
  enum slot_kind : std::size_t { activation_in = 0, activation_out = 1, gradient_in = 2, gradient_out = 3 };

  pipeline_buffers(int micro_batches, int chunks, pipeline_stage_stats& stats)
      : chunks_(static_cast<std::size_t>(chunks)),
        slots_(4 * static_cast<std::size_t>(micro_batches) * static_cast<std::size_t>(chunks)),
        stats_(stats) {}

  std::vector<T>& allocate(slot_kind kind, int micro_batch, int chunk, std::size_t elements) {
    std::optional<std::vector<T>>& s = at(kind, micro_batch, chunk);
    ZEPPELIN_EXPECTS(!s, "a pipeline boundary tensor is produced twice",
                     {{"micro_batch", double(micro_batch)}, {"chunk", double(chunk)}});
    s.emplace(elements);
    ++live_;
    live_elements_ += elements;
    stats_.peak_buffers = std::max(stats_.peak_buffers, live_);
    stats_.peak_buffer_elements = std::max(stats_.peak_buffer_elements, live_elements_);
    return *s;
  }
  std::vector<T>& get(slot_kind kind, int micro_batch, int chunk) {
    std::optional<std::vector<T>>& s = at(kind, micro_batch, chunk);
    ZEPPELIN_EXPECTS(s.has_value(), "a pipeline boundary tensor is used before it exists",
                     {{"micro_batch", double(micro_batch)}, {"chunk", double(chunk)}});
    return *s;
  }
  void release(slot_kind kind, int micro_batch, int chunk) {
    std::optional<std::vector<T>>& s = at(kind, micro_batch, chunk);
    if (!s) return;
    --live_;
    live_elements_ -= s->size();
    s.reset();
  }

 private:
  std::optional<std::vector<T>>& at(slot_kind kind, int micro_batch, int chunk) {
    return slots_[(static_cast<std::size_t>(micro_batch) * chunks_ + static_cast<std::size_t>(chunk)) * 4 + kind];
  }

  std::size_t chunks_;
  std::vector<std::optional<std::vector<T>>> slots_;
  pipeline_stage_stats& stats_;
  int live_ = 0;
  std::size_t live_elements_ = 0;
};

}  // namespace detail

//! Runs stage `stage` of `schedule` on this rank (see the file comment): calls the model's
//! forwards and backwards in the schedule's order and exchanges the boundary tensors with the
//! neighbouring stages, one communication group per maximal run of send/receive ops.
//! `stage_ranks[s]` is the rank running stage s (empty: rank s); comm.rank() must be
//! stage_ranks[stage]. Every stage's rank calls this with the same schedule and stage_ranks.
//! Throws invalid_argument (before any communication) for a stage out of range, a schedule
//! validate() rejects, or a bad stage_ranks.
template <communicator C, pipeline_stage_model M>
pipeline_stage_stats run_pipeline_stage(const pipeline_schedule& schedule, int stage, M& model, C& comm,
                                        std::span<const rank_index> stage_ranks = {}) {
  using T = typename M::value_type;
  using buffers = detail::pipeline_buffers<T>;
  ZEPPELIN_EXPECTS(stage >= 0 && stage < schedule.stages, "the pipeline stage is out of range",
                   {{"stage", double(stage)}, {"stages", double(schedule.stages)}});
  (void)validate(schedule);
  const rank_index ranks = static_cast<rank_index>(comm.size());
  const auto rank_of = [&](int s) { return stage_ranks.empty() ? static_cast<rank_index>(s) : stage_ranks[static_cast<std::size_t>(s)]; };
  if (stage_ranks.empty()) {
    ZEPPELIN_EXPECTS(schedule.stages <= ranks, "the pipeline has more stages than the communicator has ranks",
                     {{"stages", double(schedule.stages)}, {"ranks", double(ranks)}});
  } else {
    ZEPPELIN_EXPECTS(stage_ranks.size() == static_cast<std::size_t>(schedule.stages), "stage_ranks needs one rank per pipeline stage",
                     {{"stages", double(schedule.stages)}, {"stage_ranks", double(stage_ranks.size())}});
    for (int s = 0; s < schedule.stages; ++s) {
      const rank_index r = rank_of(s);
      ZEPPELIN_EXPECTS(r >= 0 && r < ranks, "a pipeline stage's rank is outside the communicator",
                       {{"stage", double(s)}, {"rank", double(r)}, {"ranks", double(ranks)}});
      for (int t = 0; t < s; ++t)
        ZEPPELIN_EXPECTS(rank_of(t) != r, "two pipeline stages on one rank",
                         {{"stage", double(t)}, {"other_stage", double(s)}, {"rank", double(r)}});
    }
  }
  ZEPPELIN_EXPECTS(static_cast<rank_index>(comm.rank()) == rank_of(stage), "this rank does not run the pipeline stage",
                   {{"stage", double(stage)}, {"stage_rank", double(rank_of(stage))}, {"rank", double(comm.rank())}});

  pipeline_stage_stats stats;
  buffers held(schedule.micro_batches(), schedule.virtual_stages, stats);
  const int last_virtual = schedule.stages * schedule.virtual_stages - 1;
  const std::vector<pipeline_op>& ops = schedule.ops[static_cast<std::size_t>(stage)];
  int in_flight = 0;
  const auto slot_of = [](pipeline_op_kind k) {
    switch (k) {
      case pipeline_op_kind::send_activation: return buffers::activation_out;
      case pipeline_op_kind::receive_activation: return buffers::activation_in;
      case pipeline_op_kind::send_gradient: return buffers::gradient_out;
      default: return buffers::gradient_in;
    }
  };
  for (std::size_t i = 0; i < ops.size();) {
    const pipeline_op& op = ops[i];
    const int v = schedule.virtual_stage(stage, op.chunk);
    if (op.kind == pipeline_op_kind::forward) {
      std::span<const T> input;
      if (v > 0) input = held.get(buffers::activation_in, op.micro_batch, op.chunk);
      std::span<T> output;
      if (v < last_virtual) output = held.allocate(buffers::activation_out, op.micro_batch, op.chunk, model.activation_elements(op.micro_batch));
      model.forward(op.micro_batch, op.chunk, input, output);
      held.release(buffers::activation_in, op.micro_batch, op.chunk);
      ++stats.forwards;
      stats.peak_in_flight = std::max(stats.peak_in_flight, ++in_flight);
      ++i;
      continue;
    }
    if (op.kind == pipeline_op_kind::backward) {
      std::span<const T> output_gradient;
      if (v < last_virtual) output_gradient = held.get(buffers::gradient_in, op.micro_batch, op.chunk);
      std::span<T> input_gradient;
      if (v > 0) input_gradient = held.allocate(buffers::gradient_out, op.micro_batch, op.chunk, model.activation_elements(op.micro_batch));
      model.backward(op.micro_batch, op.chunk, output_gradient, input_gradient);
      held.release(buffers::gradient_in, op.micro_batch, op.chunk);
      ++stats.backwards;
      --in_flight;
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < ops.size() && !is_compute(ops[end].kind)) ++end;
    // receive buffers first: nothing that can throw happens inside the group but the posting
    for (std::size_t j = i; j < end; ++j)
      if (!is_send(ops[j].kind)) held.allocate(slot_of(ops[j].kind), ops[j].micro_batch, ops[j].chunk, model.activation_elements(ops[j].micro_batch));
    const std::string step = "pipeline stage " + std::to_string(stage) + " group " + std::to_string(stats.groups);
    comm.group_start();
    for (std::size_t j = i; j < end; ++j) {
      const pipeline_op& x = ops[j];
      std::vector<T>& data = held.get(slot_of(x.kind), x.micro_batch, x.chunk);
      if (is_send(x.kind)) {
        send_elements(comm, std::span<const T>(data), rank_of(x.peer));
        stats.elements_sent += data.size();
      } else {
        recv_elements(comm, std::span<T>(data), rank_of(x.peer));
        stats.elements_received += data.size();
      }
    }
    comm.group_end(step);
    for (std::size_t j = i; j < end; ++j)
      if (is_send(ops[j].kind)) held.release(slot_of(ops[j].kind), ops[j].micro_batch, ops[j].chunk);
    ++stats.groups;
    i = end;
  }
  return stats;
}

ZEPPELIN_NAMESPACE_END
