// zeppelin/program/detail/level_work.hpp
// What the collectives of one level produce before the engine policy orders it into
// segments (program/build.hpp).
//   in : the collectives' payloads (per round), launch requests and other operations (per
//        rank and round), each naming the round whose exchange it must wait for
//   out: level_work: per round the phase (or none), per rank and slot (slot 0 = before the
//        first round, slot k + 1 = round k) the operations in three groups: `pre` (zeroing
//        accumulators), the launches, `post` (adding received accumulators, storing dK/dV).
// An exchange is not listed: every rank of the round's phase posts it first, on the communication
// stream, after everything its level's compute stream has enqueued so far (so the buffers it
// overwrites are no longer read); the launches of round k then wait for the exchange of
// round k - 1, which delivered the K/V they read. Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/block_list.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! An operation of a level, waiting for the exchange of round `waits` of its level (-1: none).
struct level_op {
  op_body body;
  std::int32_t waits = -1;
};

//! Blocks one member computes in one round, over the buffers it holds.
struct launch_request {
  std::int32_t group = 0;  //!< the member's group (per_group launches never mix groups)
  buffer_ref k{}, v{}, dk{}, dv{};
  //! the query side (program_launch): the rank's tensors unless a collective moves queries
  buffer_ref q = buffer_ref::tensor(tensor_kind::q), o = buffer_ref::tensor(tensor_kind::o), lse = buffer_ref::tensor(tensor_kind::lse),
             d_o = buffer_ref::tensor(tensor_kind::d_o), dq = buffer_ref::tensor(tensor_kind::dq);
  head_lane lane{};
  block_list blocks;  //!< query rows in q, key rows in k / v
  std::int32_t waits = -1;
};

struct round_work {
  std::vector<level_op> pre;
  std::vector<launch_request> launches;
  std::vector<level_op> post;
};

struct level_work {
  std::int32_t level = 0;   //!< index into execution_program::levels
  std::int32_t stream = 0;  //!< its compute stream
  std::int32_t rounds = 0;
  std::vector<std::vector<payload_binding>> bindings;  //!< [round]
  std::vector<std::vector<transfer>> payloads;         //!< [round], parallel to bindings
  //! [rank][slot], each rank's list only as long as its last slot with work: a rank of a
  //! small group costs its own rounds, not the level's
  std::vector<std::vector<round_work>> work;

  level_work(std::int32_t level_index, std::int32_t compute_stream, std::int32_t round_count, rank_index ranks)
      : level(level_index), stream(compute_stream), rounds(round_count),
        bindings(static_cast<std::size_t>(round_count)), payloads(static_cast<std::size_t>(round_count)),
        work(static_cast<std::size_t>(ranks)) {}

  //! Slot 0: before the first round; slot k + 1: round k (0 <= slot <= rounds).
  round_work& at(rank_index r, std::int32_t slot) {
    auto& slots = work[static_cast<std::size_t>(r)];
    if (slots.empty()) with_work_.push_back(r), sorted_ = false;
    if (static_cast<std::size_t>(slot) >= slots.size()) slots.resize(static_cast<std::size_t>(slot) + 1);
    return slots[static_cast<std::size_t>(slot)];
  }
  //! The work of rank r in `slot`, or nullptr when it has none there.
  round_work* find(rank_index r, std::int32_t slot) {
    auto& slots = work[static_cast<std::size_t>(r)];
    return static_cast<std::size_t>(slot) < slots.size() ? &slots[static_cast<std::size_t>(slot)] : nullptr;
  }
  //! The ranks with any work in the level, ascending.
  const std::vector<rank_index>& ranks_with_work() {
    if (!sorted_) std::sort(with_work_.begin(), with_work_.end()), sorted_ = true;
    return with_work_;
  }
  //! Adds a payload of `rows` rows from `src` to `dst` to round k (nothing for zero rows).
  void send(std::int32_t k, rank_index src, rank_index dst, const payload_binding& b, std::int64_t row_bytes) {
    // row_bytes: of b.rows_of with b.heads heads
    if (b.rows <= 0) return;
    auto& list = payloads[static_cast<std::size_t>(k)];
    list.push_back({src, dst, b.rows * row_bytes, static_cast<std::int32_t>(list.size()), 0, route_step::direct});
    bindings[static_cast<std::size_t>(k)].push_back(b);
  }

 private:
  std::vector<rank_index> with_work_;
  bool sorted_ = true;
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
