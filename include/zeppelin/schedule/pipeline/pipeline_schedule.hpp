// zeppelin/schedule/pipeline/pipeline_schedule.hpp
// A pipeline schedule as plain data: per stage, the ordered operations it runs.
//   in : built by a schedule policy (gpipe.hpp, one_f_one_b.hpp, interleaved.hpp,
//        chunk_one_f_one_b.hpp) from the
//        number of stages and the tokens of each micro-batch (micro-batches may differ)
//   out: pipeline_schedule::ops[stage] = forward / backward of (micro-batch, chunk) and the
//        sends and receives of activations and gradients, each naming its peer stage and the
//        micro-batch's tokens (bytes = tokens x the bytes per token of the boundary tensor,
//        which the model and layout fix: cost/pipeline_memory.hpp, step/block.hpp)
// Model chunks: with V virtual stages per stage (interleaved 1F1B), stage s holds chunks
// c = 0..V-1, the model's virtual stage c * P + s; activations flow from virtual stage v to
// v + 1 (stage s to s + 1, and from the last stage back to stage 0 between chunks).
// Communication groups: a maximal run of consecutive send/receive operations of one stage is
// ONE group, posted together and completed as a whole (ncclGroupStart/End, PyTorch's
// batch_isend_irecv; comm/communicator.hpp). Megatron-LM's send_forward_recv_backward is such
// a group. validate() (validate.hpp) proves the groups cannot deadlock.
// nvcc-safe (host-only data).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Which schedule built the ops (names as the `zeppelin pipeline` tool prints them).
enum class pipeline_schedule_kind : std::uint8_t { gpipe = 0, one_f_one_b = 1, interleaved = 2, chunk_one_f_one_b = 3 };

[[nodiscard]] constexpr std::string_view to_string(pipeline_schedule_kind k) noexcept {
  switch (k) {
    case pipeline_schedule_kind::gpipe: return "gpipe";
    case pipeline_schedule_kind::one_f_one_b: return "1f1b";
    case pipeline_schedule_kind::interleaved: return "interleaved";
    case pipeline_schedule_kind::chunk_one_f_one_b: return "chunk-1f1b";
  }
  return "?";
}

enum class pipeline_op_kind : std::uint8_t {
  forward = 0,             //!< forward of (micro_batch, chunk) on this stage
  backward = 1,            //!< backward of (micro_batch, chunk): input and weight gradients
  send_activation = 2,     //!< output of forward(micro_batch, chunk) to `peer`
  receive_activation = 3,  //!< input of forward(micro_batch, chunk) from `peer`
  send_gradient = 4,       //!< input gradient of backward(micro_batch, chunk) to `peer`
  receive_gradient = 5,    //!< output gradient for backward(micro_batch, chunk) from `peer`
};

[[nodiscard]] constexpr bool is_compute(pipeline_op_kind k) noexcept {
  return k == pipeline_op_kind::forward || k == pipeline_op_kind::backward;
}
[[nodiscard]] constexpr bool is_send(pipeline_op_kind k) noexcept {
  return k == pipeline_op_kind::send_activation || k == pipeline_op_kind::send_gradient;
}

[[nodiscard]] constexpr std::string_view to_string(pipeline_op_kind k) noexcept {
  switch (k) {
    case pipeline_op_kind::forward: return "F";
    case pipeline_op_kind::backward: return "B";
    case pipeline_op_kind::send_activation: return "send_activation";
    case pipeline_op_kind::receive_activation: return "receive_activation";
    case pipeline_op_kind::send_gradient: return "send_gradient";
    case pipeline_op_kind::receive_gradient: return "receive_gradient";
  }
  return "?";
}

//! One operation of one stage. For a send or receive, `chunk` is THIS stage's chunk whose
//! forward produced (or consumes) the tensor, and `peer` the other stage; compute ops have
//! peer == -1.
struct pipeline_op {
  pipeline_op_kind kind = pipeline_op_kind::forward;
  int micro_batch = 0;
  int chunk = 0;
  int peer = -1;
  token_count tokens = 0;  //!< tokens of the micro-batch (the boundary tensor's rows)
  friend bool operator==(const pipeline_op&, const pipeline_op&) = default;
};

struct pipeline_schedule {
  pipeline_schedule_kind kind = pipeline_schedule_kind::one_f_one_b;
  int stages = 1;
  int virtual_stages = 1;                      //!< model chunks per stage (V)
  std::vector<token_count> micro_batch_tokens; //!< in micro-batch index order
  std::vector<std::vector<pipeline_op>> ops;   //!< ops[stage], in execution order
  //! The most (micro-batch, chunk) forwards a stage holds before their backward, by stage:
  //! the schedule's promise, which validate() checks and the memory model relies on.
  std::vector<int> in_flight_bound;

  [[nodiscard]] int micro_batches() const noexcept { return static_cast<int>(micro_batch_tokens.size()); }
  //! The model's virtual stage of `chunk` on `stage`: chunk * stages + stage.
  [[nodiscard]] int virtual_stage(int stage, int chunk) const noexcept { return chunk * stages + stage; }

  friend bool operator==(const pipeline_schedule&, const pipeline_schedule&) = default;
};

ZEPPELIN_NAMESPACE_END
