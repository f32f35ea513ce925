// zeppelin/core/transfer.hpp
// The one vocabulary type for moving bytes between ranks: routers read and write it, the
// execution program stores it, the executors post it and the simulator prices it.
//   transfer{src, dst, bytes}            a whole payload (one ring edge, one all-gather step,
//                                        one remap pair): payload = its own index, offset 0,
//                                        step direct
//   transfer{src, dst, bytes, payload,   a piece of payload `payload` of a phase: bytes
//            offset, step}               [offset, offset + bytes) of it go from src to dst in
//                                        route step `step` (route/proxy.hpp cuts a payload into
//                                        dispatch -> transfer -> combine hops)
// A phase is executed stage by stage (stage_of(step) ascending, one communicator group per
// stage): dispatch (0), then the inter-node transfers together with the direct pieces (1),
// then combine (2). A piece is sent from the payload's own send buffer when src is the
// payload's source, else from where an earlier stage left it; it lands in the payload's
// receive buffer when dst is the payload's destination, else it is staged on dst.
// nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>

#include <cstdint>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

//! When a piece runs (Zeppelin 3.3: dispatch to send proxies, multi-NIC transfer, combine).
enum class route_step : std::uint8_t {
  dispatch = 0,  //!< source -> send proxy, intra-node
  transfer = 1,  //!< send proxy -> receive proxy, inter-node (one NIC on each side)
  combine = 2,   //!< receive proxy -> destination, intra-node
  direct = 3,    //!< source -> destination on its own link (a payload routed as one piece)
};

[[nodiscard]] constexpr std::string_view to_string(route_step s) noexcept {
  switch (s) {
    case route_step::dispatch: return "dispatch";
    case route_step::transfer: return "transfer";
    case route_step::combine: return "combine";
    case route_step::direct: return "direct";
  }
  return "?";
}

//! Number of communicator groups a phase runs in (dispatch, transfer + direct, combine).
inline constexpr int route_stages = 3;

//! The group a piece runs in: dispatch 0, transfer and direct 1, combine 2.
[[nodiscard]] constexpr int stage_of(route_step s) noexcept {
  return s == route_step::direct ? 1 : static_cast<int>(s);
}

//! Bytes moving from one rank to another (see the file comment).
struct transfer {
  rank_index src = 0;
  rank_index dst = 0;
  std::int64_t bytes = 0;
  std::int32_t payload = 0;  //!< the whole transfer this is (part of): an index into its phase's payloads
  std::int64_t offset = 0;   //!< first byte of this piece inside the payload
  route_step step = route_step::direct;
  friend constexpr bool operator==(const transfer&, const transfer&) = default;
};

ZEPPELIN_NAMESPACE_END
