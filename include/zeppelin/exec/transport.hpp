// zeppelin/exec/transport.hpp
// Moves one communication phase of the execution program on the calling rank: the phase's
// routed pieces (core/transfer.hpp), exactly as the program lists them.
//   in : the phase's payloads and pieces (the same on every rank), this rank's send span of
//        every payload it sources and receive span of every payload it gets (others empty),
//        a memory policy
//   out: every payload's receive span on its destination holds the send span of its source.
// Stages run in ascending order (stage_of: dispatch, transfer + direct, combine), each ONE
// communicator group holding this rank's pieces of the stage in list order. A piece is read
// from the payload's send span (at its offset) on the payload's source, else from where an
// earlier stage left it on this rank; it is written into the payload's receive span on the
// payload's destination, else staged on this rank for a later stage. A hop to oneself is a
// copy. Zero-byte pieces are skipped on both sides.
// The memory policy says where staged pieces live and how a rank copies bytes to itself:
// host_memory here (heap vectors, std::copy); the device engine passes device memory
// (cuda/executor/device_staging.hpp). nvcc-safe (no range-v3).
#pragma once

#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/transfer.hpp>
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

//! A memory policy of exchange_pieces usable with communicator C: stage (a movable owner of
//! bytes), allocate(c, bytes) -> stage, view(stage) -> span<byte>, copy(c, dst, src).
template <class M, class C>
concept transport_memory = requires(const M& m, C& c, typename M::stage& s, std::span<std::byte> dst,
                                    std::span<const std::byte> src) {
  { m.allocate(c, std::size_t{}) } -> std::same_as<typename M::stage>;
  { M::view(s) } -> std::same_as<std::span<std::byte>>;
  m.copy(c, dst, src);
};

//! Host memory: pieces staged in heap vectors, copies on the calling thread.
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

namespace detail {
//! Throws invalid_argument when a piece leaves its payload or a span of this rank has the
//! wrong size.
inline void check_phase(std::span<const transfer> payloads, std::span<const transfer> pieces, rank_index me,
                        std::span<const std::span<const std::byte>> send, std::span<const std::span<std::byte>> recv) {
  ZEPPELIN_EXPECTS(send.size() == payloads.size() && recv.size() == payloads.size(),
                   "exchange: one send and one receive span per payload",
                   {{"payloads", double(payloads.size())}, {"send", double(send.size())}, {"recv", double(recv.size())}});
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    const transfer& t = payloads[i];
    if (t.src == me)
      ZEPPELIN_EXPECTS(static_cast<std::int64_t>(send[i].size()) == t.bytes, "exchange: a send buffer differs from its payload",
                       {{"payload", double(i)}, {"bytes", double(t.bytes)}, {"buffer", double(send[i].size())}});
    if (t.dst == me)
      ZEPPELIN_EXPECTS(static_cast<std::int64_t>(recv[i].size()) == t.bytes, "exchange: a receive buffer differs from its payload",
                       {{"payload", double(i)}, {"bytes", double(t.bytes)}, {"buffer", double(recv[i].size())}});
  }
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const transfer& m = pieces[i];
    ZEPPELIN_EXPECTS(m.payload >= 0 && static_cast<std::size_t>(m.payload) < payloads.size() && m.offset >= 0 && m.bytes >= 0 &&
                         m.offset + m.bytes <= payloads[static_cast<std::size_t>(m.payload)].bytes,
                     "exchange: a piece leaves its payload",
                     {{"piece", double(i)}, {"payload", double(m.payload)}, {"offset", double(m.offset)}, {"bytes", double(m.bytes)}});
  }
}
}  // namespace detail

//! Runs this rank's part of a phase (see the file comment). Every rank of `c` must call it
//! with the same payloads and pieces. Throws invalid_argument on a malformed phase or a rank
//! asked to forward a piece it never received; communicator errors propagate.
template <communicator C, class Memory>
  requires transport_memory<Memory, C>
void exchange_pieces(C& c, std::span<const transfer> payloads, std::span<const transfer> pieces,
                     std::span<const std::span<const std::byte>> send, std::span<const std::span<std::byte>> recv,
                     std::string_view step, const Memory& mem = {}) {
  using stage_t = typename Memory::stage;
  const rank_index me = c.rank();
  detail::check_phase(payloads, pieces, me, send, recv);
  bool present[route_stages] = {};
  for (const transfer& m : pieces) present[stage_of(m.step)] = true;
  // pieces staged on this rank: (payload, offset) -> bytes, alive until every stage has run
  std::map<std::pair<std::int32_t, std::int64_t>, stage_t> staged;
  for (int stage = 0; stage < route_stages; ++stage) {
    if (!present[stage]) continue;
    const auto at_source = [&](const transfer& m) -> std::span<const std::byte> {
      const transfer& t = payloads[static_cast<std::size_t>(m.payload)];
      if (t.src == me)
        return send[static_cast<std::size_t>(m.payload)].subspan(static_cast<std::size_t>(m.offset), static_cast<std::size_t>(m.bytes));
      const auto it = staged.find({m.payload, m.offset});
      ZEPPELIN_EXPECTS(it != staged.end() && static_cast<std::int64_t>(Memory::view(it->second).size()) == m.bytes,
                       "exchange: a rank forwards a piece it does not hold",
                       {{"rank", double(me)}, {"payload", double(m.payload)}, {"offset", double(m.offset)}, {"stage", double(stage)}});
      return Memory::view(it->second);
    };
    const auto at_destination = [&](const transfer& m) {
      return recv[static_cast<std::size_t>(m.payload)].subspan(static_cast<std::size_t>(m.offset), static_cast<std::size_t>(m.bytes));
    };
    // staging buffers of this stage exist before anything is posted, so spans stay valid
    std::vector<std::pair<std::pair<std::int32_t, std::int64_t>, stage_t>> incoming;
    for (const transfer& m : pieces)
      if (stage_of(m.step) == stage && m.dst == me && m.src != me && m.bytes > 0 &&
          payloads[static_cast<std::size_t>(m.payload)].dst != me)
        incoming.emplace_back(std::pair{m.payload, m.offset}, mem.allocate(c, static_cast<std::size_t>(m.bytes)));
    std::size_t next_in = 0;
    c.group_start();
    for (const transfer& m : pieces) {
      if (stage_of(m.step) != stage || m.bytes == 0) continue;
      const bool home = payloads[static_cast<std::size_t>(m.payload)].dst == me;
      if (m.src == me && m.dst == me) {  // a hop to oneself: move the piece along
        const auto from = at_source(m);
        if (home) {
          mem.copy(c, at_destination(m), from);
        } else {
          stage_t copy = mem.allocate(c, from.size());
          mem.copy(c, Memory::view(copy), from);
          staged[{m.payload, m.offset}] = std::move(copy);
        }
        continue;
      }
      if (m.src == me) c.send(at_source(m), m.dst);
      if (m.dst == me) c.recv(home ? at_destination(m) : Memory::view(incoming[next_in++].second), m.src);
    }
    c.group_end(std::string(step) + " (stage " + std::to_string(stage) + ")");
    for (auto& [key, bytes] : incoming) staged[key] = std::move(bytes);
  }
}

ZEPPELIN_NAMESPACE_END
