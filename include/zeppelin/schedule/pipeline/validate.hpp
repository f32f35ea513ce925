// zeppelin/schedule/pipeline/validate.hpp
// Proof that a pipeline schedule is complete, correctly ordered and cannot deadlock.
//   in : a pipeline_schedule (any source: the policies here, a user's own, a file)
//   out: pipeline_check: per stage the most forwards held before their backward; or
//        invalid_argument naming the stage, op index, micro-batch and chunk of the first
//        violation of:
//   - shape: one op list per stage, micro-batch and chunk indices in range, each op's tokens
//     those of its micro-batch, a send/receive's peer the stage of the neighbouring virtual
//     stage, compute ops without a peer;
//   - completeness: every (micro-batch, chunk) one forward and one backward on every stage;
//   - order: F(v, k) only once its activation from F(v - 1, k) has arrived, B(v, k) only
//     after F(v, k) and once its gradient from B(v + 1, k) has arrived, a send only after the
//     compute op that produces it;
//   - matching: the n-th send from stage a to stage b matches the n-th receive b posts from
//     a (NCCL's rule): same micro-batch, tokens and tensor, from virtual stage v to v +- 1;
//   - progress: executing the stages with rendezvous communication (a group completes only
//     when every one of its operations' partners has been posted; see
//     pipeline_schedule.hpp for groups) finishes every stage: no deadlock;
//   - memory: no stage ever holds more forwards than schedule.in_flight_bound[stage].
// Cost: O(ops) time, O(stages x micro-batches x chunks) memory.
// nvcc-safe (host-only).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/schedule/pipeline/pipeline_schedule.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct pipeline_check {
  std::vector<int> max_in_flight;  //!< per stage: most (micro-batch, chunk) forwards awaiting backward
};

namespace detail {

class pipeline_checker {
 public:
  explicit pipeline_checker(const pipeline_schedule& s) : s_(s) {}

  pipeline_check run() {
    check_shape();
    const std::size_t P = static_cast<std::size_t>(s_.stages);
    const std::size_t units = static_cast<std::size_t>(s_.micro_batches()) * static_cast<std::size_t>(s_.virtual_stages);
    state_.assign(P * units, 0);
    sends_.resize(P * P);
    receives_.resize(P * P);
    position_.assign(P, 0);
    group_end_.assign(P, npos);
    group_slots_.assign(P, {});
    in_flight_.assign(P, 0);
    result_.max_in_flight.assign(P, 0);
    std::vector<int> ready;  // a FIFO of stages to advance: ready[next..]
    std::vector<char> queued(P, 1);
    for (int p = 0; p < s_.stages; ++p) ready.push_back(p);
    for (std::size_t next = 0; next < ready.size(); ++next) {
      const int p = ready[next];
      queued[static_cast<std::size_t>(p)] = 0;
      advance(p);
      for (const int peer : woken_)
        if (!queued[static_cast<std::size_t>(peer)]) queued[static_cast<std::size_t>(peer)] = 1, ready.push_back(peer);
    }
    for (int p = 0; p < s_.stages; ++p) {
      const auto& ops = stage_ops(p);
      if (position_[static_cast<std::size_t>(p)] < ops.size()) fail_deadlock(p);
    }
    for (int p = 0; p < s_.stages; ++p)
      for (std::size_t u = 0; u < units; ++u)
        if ((state_[static_cast<std::size_t>(p) * units + u] & backward_done) == 0)
          ZEPPELIN_THROW(invalid_argument, "a (micro-batch, chunk) never runs its backward on a stage",
                         {{"stage", double(p)}, {"micro_batch", double(u / std::size_t(s_.virtual_stages))},
                          {"chunk", double(u % std::size_t(s_.virtual_stages))}});
    return result_;
  }

 private:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  // per (stage, micro-batch, chunk) flags
  static constexpr std::uint8_t forward_done = 1, backward_done = 2, activation_in = 4, gradient_in = 8;

  struct posted {
    const pipeline_op* op;
    int stage;
  };

  const std::vector<pipeline_op>& stage_ops(int p) const { return s_.ops[static_cast<std::size_t>(p)]; }
  std::uint8_t& flags(int p, const pipeline_op& op) {
    const std::size_t units = static_cast<std::size_t>(s_.micro_batches()) * static_cast<std::size_t>(s_.virtual_stages);
    return state_[static_cast<std::size_t>(p) * units + static_cast<std::size_t>(op.micro_batch) * std::size_t(s_.virtual_stages) +
                  static_cast<std::size_t>(op.chunk)];
  }
  [[noreturn]] void fail(const char* what, int p, std::size_t i) const {
    const pipeline_op& op = stage_ops(p)[i];
    ZEPPELIN_THROW(invalid_argument, std::string("invalid pipeline schedule: ") + what + " (" + std::string(to_string(op.kind)) + ")",
                   {{"stage", double(p)}, {"op", double(i)}, {"micro_batch", double(op.micro_batch)}, {"chunk", double(op.chunk)}});
  }
  [[noreturn]] void fail_deadlock(int p) const {
    fail("deadlock: the stage's communication group can never complete", p, position_[static_cast<std::size_t>(p)]);
  }

  void check_shape() const {
    ZEPPELIN_EXPECTS(s_.stages >= 1 && s_.virtual_stages >= 1 && s_.micro_batches() >= 1,
                     "a pipeline schedule needs stages, chunks and micro-batches",
                     {{"stages", double(s_.stages)}, {"virtual_stages", double(s_.virtual_stages)},
                      {"micro_batches", double(s_.micro_batches())}});
    ZEPPELIN_EXPECTS(s_.ops.size() == static_cast<std::size_t>(s_.stages) && s_.in_flight_bound.size() == s_.ops.size(),
                     "a pipeline schedule needs one op list and one in-flight bound per stage",
                     {{"stages", double(s_.stages)}, {"op_lists", double(s_.ops.size())},
                      {"bounds", double(s_.in_flight_bound.size())}});
    const int last_virtual = s_.stages * s_.virtual_stages - 1;
    for (int p = 0; p < s_.stages; ++p) {
      const auto& ops = stage_ops(p);
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const pipeline_op& op = ops[i];
        if (op.micro_batch < 0 || op.micro_batch >= s_.micro_batches() || op.chunk < 0 || op.chunk >= s_.virtual_stages)
          fail("micro-batch or chunk index out of range", p, i);
        if (op.tokens != s_.micro_batch_tokens[static_cast<std::size_t>(op.micro_batch)])
          fail("an op's tokens differ from its micro-batch's", p, i);
        const int v = s_.virtual_stage(p, op.chunk);
        int expected_peer = -1;
        switch (op.kind) {
          case pipeline_op_kind::forward:
          case pipeline_op_kind::backward: break;
          case pipeline_op_kind::send_activation:
          case pipeline_op_kind::receive_gradient:
            if (v == last_virtual) fail("the last virtual stage has no next stage to talk to", p, i);
            expected_peer = (v + 1) % s_.stages;
            break;
          case pipeline_op_kind::receive_activation:
          case pipeline_op_kind::send_gradient:
            if (v == 0) fail("the first virtual stage has no previous stage to talk to", p, i);
            expected_peer = (v - 1) % s_.stages;
            break;
          default: fail("unknown op kind", p, i);
        }
        if (op.peer != expected_peer) fail("a send or receive names the wrong peer stage", p, i);
      }
    }
  }

  // Runs stage p as far as it can; woken_ lists the stages whose posted groups it added to.
  void advance(int p) {
    woken_.clear();
    const auto& ops = stage_ops(p);
    std::size_t& i = position_[static_cast<std::size_t>(p)];
    const int last_virtual = s_.stages * s_.virtual_stages - 1;
    while (i < ops.size()) {
      const pipeline_op& op = ops[i];
      if (is_compute(op.kind)) {
        std::uint8_t& f = flags(p, op);
        const int v = s_.virtual_stage(p, op.chunk);
        int& held = in_flight_[static_cast<std::size_t>(p)];
        if (op.kind == pipeline_op_kind::forward) {
          if (f & forward_done) fail("a second forward of the same (micro-batch, chunk)", p, i);
          if (v > 0 && !(f & activation_in)) fail("forward before its input activation was received", p, i);
          f |= forward_done;
          ++held;
          int& peak = result_.max_in_flight[static_cast<std::size_t>(p)];
          peak = std::max(peak, held);
          if (held > s_.in_flight_bound[static_cast<std::size_t>(p)]) fail("more forwards in flight than the schedule's bound", p, i);
        } else {
          if (f & backward_done) fail("a second backward of the same (micro-batch, chunk)", p, i);
          if (!(f & forward_done)) fail("backward before its forward", p, i);
          if (v < last_virtual && !(f & gradient_in)) fail("backward before its output gradient was received", p, i);
          f |= backward_done;
          --held;
        }
        ++i;
        continue;
      }
      std::size_t& end = group_end_[static_cast<std::size_t>(p)];
      auto& slots = group_slots_[static_cast<std::size_t>(p)];
      if (end == npos) {  // post the group
        end = i;
        slots.clear();
        while (end < ops.size() && !is_compute(ops[end].kind)) {
          slots.push_back(post(p, end));
          woken_.push_back(ops[end].peer);
          ++end;
        }
      }
      for (const slot& sl : slots)
        if ((sl.send ? receives_ : sends_)[sl.pair].size() <= sl.index) return;
      for (std::size_t j = i; j < end; ++j) {
        if (ops[j].kind == pipeline_op_kind::receive_activation) flags(p, ops[j]) |= activation_in;
        if (ops[j].kind == pipeline_op_kind::receive_gradient) flags(p, ops[j]) |= gradient_in;
      }
      i = end;
      end = npos;
    }
  }

  std::size_t pair(int from, int to) const { return static_cast<std::size_t>(from) * std::size_t(s_.stages) + std::size_t(to); }

  // Where a posted op sits: its ordered pair's FIFO (sends_ or receives_) and its index there.
  struct slot {
    std::size_t pair;
    std::size_t index;
    bool send;
  };

  slot post(int p, std::size_t i) {
    const pipeline_op& op = stage_ops(p)[i];
    if (op.kind == pipeline_op_kind::send_activation && !(flags(p, op) & forward_done))
      fail("an activation sent before its forward ran", p, i);
    if (op.kind == pipeline_op_kind::send_gradient && !(flags(p, op) & backward_done))
      fail("a gradient sent before its backward ran", p, i);
    auto& mine = is_send(op.kind) ? sends_[pair(p, op.peer)] : receives_[pair(op.peer, p)];
    auto& theirs = is_send(op.kind) ? receives_[pair(p, op.peer)] : sends_[pair(op.peer, p)];
    mine.push_back({&op, p});
    const std::size_t n = mine.size() - 1;
    if (n < theirs.size()) check_match(is_send(op.kind) ? mine[n] : theirs[n], is_send(op.kind) ? theirs[n] : mine[n], p, i);
    return {is_send(op.kind) ? pair(p, op.peer) : pair(op.peer, p), n, is_send(op.kind)};
  }

  void check_match(const posted& send, const posted& receive, int p, std::size_t i) const {
    const bool activation = send.op->kind == pipeline_op_kind::send_activation;
    const pipeline_op_kind expected = activation ? pipeline_op_kind::receive_activation : pipeline_op_kind::receive_gradient;
    const int from = s_.virtual_stage(send.stage, send.op->chunk), to = s_.virtual_stage(receive.stage, receive.op->chunk);
    if (receive.op->kind != expected || send.op->micro_batch != receive.op->micro_batch || send.op->tokens != receive.op->tokens ||
        to != from + (activation ? 1 : -1))
      fail("the n-th send between two stages does not match the n-th receive", p, i);
  }

  const pipeline_schedule& s_;
  std::vector<std::uint8_t> state_;
  std::vector<std::vector<posted>> sends_, receives_;
  std::vector<int> woken_;
  std::vector<std::size_t> position_, group_end_;
  std::vector<std::vector<slot>> group_slots_;
  std::vector<int> in_flight_;
  pipeline_check result_;
};

}  // namespace detail

//! Checks `s` (see the file comment); throws invalid_argument at the first violation.
[[nodiscard]] inline pipeline_check validate(const pipeline_schedule& s) { return detail::pipeline_checker(s).run(); }

ZEPPELIN_NAMESPACE_END
