// zeppelin/exec/transport.hpp
// How the executors move one communication phase (a ring round of every group of a queue,
// an all-gather, a dK/dV return): a list of logical transfers, identical on every rank, and
// a transport policy that carries them.
//   in : transfers[i] = {src, dst, bytes} (the same list, in the same order, on every rank);
//        send[i] = the payload on rank src, recv[i] = its destination on rank dst (spans of
//        transfers that do not touch this rank are ignored)
//   out: every recv[i] on its dst rank holds send[i] of its src rank.
// Models:
//   direct_transport          every transfer is one send/receive; the phase is ONE group.
//   routed execution          execute_routed(): any multi-hop plan of routed_message pieces
//                             (e.g. Zeppelin's proxy routing: dispatch to send proxies,
//                             transfer between proxies, combine at the destination), one
//                             group per step, pieces staged at intermediate ranks.
// Zero-byte transfers and messages are skipped on both sides (both know the sizes).
// Both are written once over a memory policy (detail::host_memory here; the device transports
// of cuda/executor/device_transport.hpp pass device memory): how a rank copies bytes it moves
// to itself and where it stages the pieces it forwards.
// nvcc-safe (no range-v3).
#pragma once

#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! One logical payload of a phase.
struct transfer {
  rank_index src = 0;
  rank_index dst = 0;
  std::int64_t bytes = 0;
  friend constexpr bool operator==(const transfer&, const transfer&) = default;
};

//! One hop of a piece of a transfer: bytes [offset, offset + bytes) of transfers[transfer]
//! go from src to dst in step `step` (steps run in ascending order, one group each).
struct routed_message {
  std::int32_t transfer = 0;
  std::int64_t offset = 0;
  std::int64_t bytes = 0;
  rank_index src = 0;
  rank_index dst = 0;
  std::int32_t step = 0;
  friend constexpr bool operator==(const routed_message&, const routed_message&) = default;
};

//! A transport policy for communicator C.
template <class Tp, class C>
concept transport_for = communicator<C> && requires(const Tp& t, C& c, std::span<const transfer> all,
                                                    std::span<const std::span<const std::byte>> send,
                                                    std::span<const std::span<std::byte>> recv, std::string_view step) {
  t.exchange(c, all, send, recv, step);
};

namespace detail {
inline void check_phase(std::span<const transfer> all, std::size_t send, std::size_t recv, rank_index me,
                        std::span<const std::span<const std::byte>> s, std::span<const std::span<std::byte>> r) {
  ZEPPELIN_EXPECTS(send == all.size() && recv == all.size(), "transport: one send and one receive span per transfer",
                   {{"transfers", double(all.size())}, {"send", double(send)}, {"recv", double(recv)}});
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& t = all[i];
    ZEPPELIN_EXPECTS(t.bytes >= 0, "transport: negative transfer size", {{"transfer", double(i)}, {"bytes", double(t.bytes)}});
    if (t.src == me)
      ZEPPELIN_EXPECTS(static_cast<std::int64_t>(s[i].size()) == t.bytes, "transport: send buffer size differs from the transfer",
                       {{"transfer", double(i)}, {"bytes", double(t.bytes)}, {"buffer", double(s[i].size())}});
    if (t.dst == me)
      ZEPPELIN_EXPECTS(static_cast<std::int64_t>(r[i].size()) == t.bytes,
                       "transport: receive buffer size differs from the transfer",
                       {{"transfer", double(i)}, {"bytes", double(t.bytes)}, {"buffer", double(r[i].size())}});
  }
}

//! The host memory policy of the transports: copies on the calling thread, pieces staged
//! in heap vectors. A memory policy provides stage (a movable owner of bytes),
//! allocate(c, bytes) -> stage, view(stage) -> span<byte>, copy(c, dst, src).
struct host_memory {
  using stage = std::vector<std::byte>;
  template <class C>
  [[nodiscard]] stage allocate(C&, std::size_t bytes) const {
    return stage(bytes);
  }
  [[nodiscard]] static std::span<std::byte> view(stage& s) noexcept { return s; }
  template <class C>
  void copy(C&, std::span<std::byte> dst, std::span<const std::byte> src) const {
    std::copy(src.begin(), src.end(), dst.begin());
  }
};

//! direct_transport's phase over memory policy `mem`: one group, a self-transfer copied.
template <communicator C, class Memory>
void exchange_direct(C& c, std::span<const transfer> all, std::span<const std::span<const std::byte>> send,
                     std::span<const std::span<std::byte>> recv, std::string_view step, const Memory& mem) {
  const rank_index me = c.rank();
  check_phase(all, send.size(), recv.size(), me, send, recv);
  c.group_start();
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& t = all[i];
    if (t.bytes == 0) continue;
    if (t.src == me && t.dst == me) {
      mem.copy(c, recv[i], send[i]);
      continue;
    }
    if (t.src == me) c.send(send[i], t.dst);
    if (t.dst == me) c.recv(recv[i], t.src);
  }
  c.group_end(step);
}

//! execute_routed over memory policy `mem` (see execute_routed).
template <communicator C, class Memory>
void exchange_routed(C& c, std::span<const transfer> all, std::span<const routed_message> messages,
                     std::span<const std::span<const std::byte>> send, std::span<const std::span<std::byte>> recv,
                     std::string_view step, const Memory& mem) {
  using stage_t = typename Memory::stage;
  const rank_index me = c.rank();
  check_phase(all, send.size(), recv.size(), me, send, recv);
  std::vector<std::int32_t> steps;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    ZEPPELIN_EXPECTS(m.transfer >= 0 && static_cast<std::size_t>(m.transfer) < all.size() && m.offset >= 0 && m.bytes >= 0 &&
                         m.offset + m.bytes <= all[static_cast<std::size_t>(m.transfer)].bytes,
                     "routed transport: a message leaves its transfer",
                     {{"message", double(i)}, {"transfer", double(m.transfer)}, {"offset", double(m.offset)},
                      {"bytes", double(m.bytes)}});
    steps.push_back(m.step);
  }
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  // pieces staged on this rank: (transfer, offset) -> bytes (released at return, after every
  // group that reads them)
  std::map<std::pair<std::int32_t, std::int64_t>, stage_t> stage;
  for (const std::int32_t s : steps) {
    // receive buffers of this step are created before posting, so spans stay valid
    std::vector<std::pair<std::pair<std::int32_t, std::int64_t>, stage_t>> incoming;
    for (const auto& m : messages)
      if (m.step == s && m.dst == me && m.src != me && m.bytes > 0 && all[static_cast<std::size_t>(m.transfer)].dst != me)
        incoming.emplace_back(std::pair{m.transfer, m.offset}, mem.allocate(c, static_cast<std::size_t>(m.bytes)));
    std::size_t next_in = 0;
    const auto source_of = [&](const routed_message& m) -> std::span<const std::byte> {
      const auto& t = all[static_cast<std::size_t>(m.transfer)];
      if (t.src == me)
        return send[static_cast<std::size_t>(m.transfer)].subspan(static_cast<std::size_t>(m.offset), static_cast<std::size_t>(m.bytes));
      const auto it = stage.find({m.transfer, m.offset});
      ZEPPELIN_EXPECTS(it != stage.end() && static_cast<std::int64_t>(Memory::view(it->second).size()) == m.bytes,
                       "routed transport: a rank forwards a piece it does not hold",
                       {{"rank", double(me)}, {"transfer", double(m.transfer)}, {"offset", double(m.offset)}, {"step", double(s)}});
      return Memory::view(it->second);
    };
    c.group_start();
    for (const auto& m : messages) {
      if (m.step != s || m.bytes == 0) continue;
      const auto& t = all[static_cast<std::size_t>(m.transfer)];
      const auto at_destination = [&] {
        return recv[static_cast<std::size_t>(m.transfer)].subspan(static_cast<std::size_t>(m.offset), static_cast<std::size_t>(m.bytes));
      };
      if (m.src == me && m.dst == me) {  // a hop to oneself: move the piece along
        if (t.dst == me && t.src != me && !stage.contains({m.transfer, m.offset})) continue;  // already delivered
        const auto from = source_of(m);
        if (t.dst == me) {
          mem.copy(c, at_destination(), from);
        } else {
          stage_t copy = mem.allocate(c, from.size());
          mem.copy(c, Memory::view(copy), from);
          stage[{m.transfer, m.offset}] = std::move(copy);
        }
        continue;
      }
      if (m.src == me) c.send(source_of(m), m.dst);
      if (m.dst == me) c.recv(t.dst == me ? at_destination() : Memory::view(incoming[next_in++].second), m.src);
    }
    c.group_end(std::string(step) + " (route step " + std::to_string(s) + ")");
    for (auto& [key, bytes] : incoming) stage[key] = std::move(bytes);
  }
}
}  // namespace detail

//! A memory policy of the transports usable with communicator C (see detail::host_memory).
template <class M, class C>
concept transport_memory = requires(const M& m, C& c, typename M::stage& s, std::span<std::byte> dst,
                                    std::span<const std::byte> src) {
  { m.allocate(c, std::size_t{}) } -> std::same_as<typename M::stage>;
  { M::view(s) } -> std::same_as<std::span<std::byte>>;
  m.copy(c, dst, src);
};

//! Every transfer as one point-to-point message, all in one group; self-transfers copied with
//! Memory (host: direct_transport; device: device_direct_transport).
template <class Memory>
struct basic_direct_transport {
  template <communicator C>
    requires transport_memory<Memory, C>
  void exchange(C& c, std::span<const transfer> all, std::span<const std::span<const std::byte>> send,
                std::span<const std::span<std::byte>> recv, std::string_view step) const {
    detail::exchange_direct(c, all, send, recv, step, Memory{});
  }
  friend constexpr bool operator==(const basic_direct_transport&, const basic_direct_transport&) = default;
};

//! Every transfer as one point-to-point message, all in one group.
using direct_transport = basic_direct_transport<detail::host_memory>;
static_assert(std::regular<direct_transport>);

//! Executes a routed plan of `all`: for every step (ascending), one group holding this rank's
//! messages of that step in list order. A piece is read from send[transfer] on the transfer's
//! source (when it is the message's src) or from the stage of an earlier hop; it is written to
//! recv[transfer] when the message reaches the transfer's destination, else staged. Throws
//! invalid_argument when a message leaves its transfer, or when a rank must forward a piece
//! it never received (a malformed route).
template <communicator C>
void execute_routed(C& c, std::span<const transfer> all, std::span<const routed_message> messages,
                    std::span<const std::span<const std::byte>> send, std::span<const std::span<std::byte>> recv,
                    std::string_view step) {
  detail::exchange_routed(c, all, messages, send, recv, step, detail::host_memory{});
}

ZEPPELIN_NAMESPACE_END
