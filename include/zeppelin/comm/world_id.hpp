// zeppelin/comm/world_id.hpp
// Which world a communicator belongs to, so that what was agreed in one world (the engines'
// plan check, exec/plan_agreement.hpp) is agreed again in the next.
//   next_world_id()        a process-unique id (1, 2, ...), drawn once per world a
//                          communicator joins: a loopback world's run, an NCCL communicator's
//                          construction; never reused, unlike an address
//   identified_communicator<C>
//                          C has `world_id() const` -> std::uint64_t (the library's
//                          communicators do; a sub-communicator mixes its parent's with its
//                          members)
//   world_of(c)            c.world_id(), or unidentified_world for a communicator without one
//                          (a user's own, whose world therefore counts as one for the life of
//                          the engine)
// The id is local to the process: ranks in different processes need not agree on it, since
// each compares it only with its own earlier value. nvcc-safe (host code).
#pragma once

#include <zeppelin/core/config.hpp>

#include <atomic>
#include <concepts>
#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN

//! A process-unique world id, never 0 and never reused.
[[nodiscard]] inline std::uint64_t next_world_id() noexcept {
  static std::atomic<std::uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

//! The world of every communicator without world_id(): no id next_world_id() draws.
inline constexpr std::uint64_t unidentified_world = ~std::uint64_t{0};

template <class C>
concept identified_communicator = requires(const C& c) {
  { c.world_id() } -> std::convertible_to<std::uint64_t>;
};

//! The world `c` belongs to (see the file comment).
template <class C>
[[nodiscard]] std::uint64_t world_of(const C& c) noexcept {
  if constexpr (identified_communicator<C>)
    return static_cast<std::uint64_t>(c.world_id());
  else
    return unidentified_world;
}

ZEPPELIN_NAMESPACE_END
