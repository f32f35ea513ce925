// zeppelin/program/detail/all_to_all_collective.hpp
// The all-to-all collective (DeepSpeed-Ulysses) of the all-to-all groups of one level, for
// one pass, written into a level_work.
//   in : the level's groups whose collective is all_to_all, the program's shard rows, an
//        arena allocator, the wire format
//   out: per round the payloads and per member its operations.
// Head lanes: a group of G members splits the H query heads into G lanes of n = H / G heads;
// member j computes lane j (heads [j n, (j + 1) n)) for every token of the group. Its K/V
// heads are the ones those query heads read (query head h reads K/V head h / (H / KV)):
//   n a multiple of H / KV   kvn = n / (H / KV) K/V heads, [j kvn, (j + 1) kvn)
//   H / KV a multiple of n   one K/V head, j n / (H / KV), which several lanes share: the
//                            K/V heads are replicated (LoongTrain's answer to GQA with more
//                            ranks than K/V heads), and their dK/dV partials summed at home
// so the kernel's own GQA rule holds inside the lane. Other head counts are refused
// (lane_of throws invalid_argument naming heads, kv_heads and the group size); so is a group
// larger than the head count (hybrid Ulysses x ring is not built yet).
// Buffers, per member p of a group: lane arenas of T rows (T = the group's tokens; member
// o's tokens at rows place(o) = tokens of members before o, in its group-buffer order):
// forward Q, K, V, O, LSE; backward also dO, dQ, dK, dV. Send arenas (one region of the
// member's b_p tokens per lane) for what it packs, receive arenas (one region per lane) for
// what comes home.
// Forward, member p:
//   slot 0    pack: per lane j, heads of j from the rank's Q, K, V rows of its group shards
//             into the send region j (its own lane: straight into its lane arenas)
//   round 0   all-to-all: send region j -> member j's lane arenas at place(p)
//   round 0   clear lane O and LSE; one launch: every (query member, key member) pair's
//             blocks, over the lane arenas, lane heads
//   round 1   all-to-all back: lane O, LSE rows of member o -> member o's receive region p
//   after     unpack: receive region j -> heads of lane j of the rank's O and LSE
// Backward: the same with Q, K, V, O, dO, LSE packed in, dQ, dK, dV computed in the lane
// (cleared first) and sent home, where they are added into the rank's dQ, dK, dV.
// Rounds: 2 per pass. Bytes per member and pass: forward (b_p (G - 1) / G) x (Q + 2 KV + O +
// LSE rows), independent of G per token: the collective's whole point.
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/detail/level_work.hpp>
#include <zeppelin/program/detail/members.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/program/wire_format.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! Rounds of the all-to-all collective in either pass.
inline constexpr std::int32_t all_to_all_rounds = 2;

//! The heads of lane j of a group of `members` (see the file comment).
struct lane_heads {
  std::int32_t first = 0, heads = 0;        //!< query heads [first, first + heads)
  std::int32_t kv_first = 0, kv_heads = 0;  //!< K/V heads [kv_first, kv_first + kv_heads)
};

//! Lane j of a group of `members` under `wire`. Throws invalid_argument when the heads do not
//! split into such lanes.
[[nodiscard]] inline lane_heads lane_of(const wire_format& wire, std::int32_t members, std::int32_t j) {
  const std::int32_t H = wire.heads, ratio = wire.heads / wire.kv_heads;
  ZEPPELIN_EXPECTS(members >= 1 && members <= H && H % members == 0,
                   "all-to-all (Ulysses) collective: the group size must divide the number of query heads (a group larger "
                   "than the head count needs hybrid Ulysses x ring, which is not built yet); plan groups of a divisor of "
                   "the heads or use the ring or all-gather collective",
                   {{"heads", double(H)}, {"group_ranks", double(members)}});
  const std::int32_t n = H / members;
  ZEPPELIN_EXPECTS(n % ratio == 0 || ratio % n == 0,
                   "all-to-all (Ulysses) collective: a lane's query heads must read whole K/V heads or share one (heads per "
                   "lane a multiple or a divisor of heads / kv_heads)",
                   {{"heads", double(H)}, {"kv_heads", double(wire.kv_heads)}, {"group_ranks", double(members)}});
  if (n % ratio == 0) return {j * n, n, j * (n / ratio), n / ratio};
  return {j * n, n, (j * n) / ratio, 1};
}

inline void build_all_to_all(level_work& w, const std::vector<const ring_schedule*>& groups, pass_kind pass,
                             const execution_program& prog, const arena_allocator& allocate, const wire_format& wire) {
  if (groups.empty()) return;
  const bool backward = pass == pass_kind::backward;
  const level_members lm = lay_out_members(groups, prog.shard_row, prog.num_ranks(), [](const ring_schedule&) { return token_count{0}; });
  const auto arena = [](std::int32_t a) { return buffer_ref::arena(a); };
  const auto tensor = [](tensor_kind t) { return buffer_ref::tensor(t); };

  // what moves: a rank tensor, its row kind, and whether it goes out to the lanes (in) or
  // comes home (out)
  struct stream_of_rows {
    tensor_kind home;
    row_kind kind;
    bool kv;  // K/V heads (else query heads)
  };
  const std::vector<stream_of_rows> in =
      backward ? std::vector<stream_of_rows>{{tensor_kind::q, row_kind::q, false},   {tensor_kind::k, row_kind::kv, true},
                                             {tensor_kind::v, row_kind::kv, true},   {tensor_kind::o, row_kind::q, false},
                                             {tensor_kind::d_o, row_kind::q, false}, {tensor_kind::lse, row_kind::lse, false}}
               : std::vector<stream_of_rows>{{tensor_kind::q, row_kind::q, false}, {tensor_kind::k, row_kind::kv, true},
                                             {tensor_kind::v, row_kind::kv, true}};
  const std::vector<stream_of_rows> out =
      backward ? std::vector<stream_of_rows>{{tensor_kind::dq, row_kind::q, false},
                                             {tensor_kind::dk, row_kind::dkv, true},
                                             {tensor_kind::dv, row_kind::dkv, true}}
               : std::vector<stream_of_rows>{{tensor_kind::o, row_kind::q, false}, {tensor_kind::lse, row_kind::lse, false}};

  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const ring_schedule& s = *groups[gi];
    const std::int32_t G = s.size();
    std::vector<lane_heads> lanes;
    for (std::int32_t j = 0; j < G; ++j) lanes.push_back(lane_of(wire, G, j));
    const std::int32_t n = lanes.front().heads, kvn = lanes.front().kv_heads;
    const auto width = [&](const stream_of_rows& x) { return x.kv ? kvn : n; };
    const auto first_head = [&](const stream_of_rows& x, std::int32_t j) {
      return x.kv ? lanes[static_cast<std::size_t>(j)].kv_first : lanes[static_cast<std::size_t>(j)].first;
    };
    std::vector<token_count> place(static_cast<std::size_t>(G) + 1, 0);
    for (std::int32_t o = 0; o < G; ++o)
      place[static_cast<std::size_t>(o) + 1] = place[static_cast<std::size_t>(o)] + s.buffer_tokens[static_cast<std::size_t>(o)];
    const token_count T = place.back();
    const auto tokens_of = [&](std::int32_t o) { return s.buffer_tokens[static_cast<std::size_t>(o)]; };

    // arenas: [position][what]
    std::vector<std::vector<std::int32_t>> lane_in(static_cast<std::size_t>(G)), lane_out(static_cast<std::size_t>(G)),
        send(static_cast<std::size_t>(G)), receive(static_cast<std::size_t>(G));
    for (std::int32_t p = 0; p < G; ++p) {
      const rank_index r = s.ranks[static_cast<std::size_t>(p)];
      const token_count b = tokens_of(p);
      for (const stream_of_rows& x : in) {
        lane_in[static_cast<std::size_t>(p)].push_back(allocate(r, x.kind, T, width(x)));
        send[static_cast<std::size_t>(p)].push_back(allocate(r, x.kind, b * G, width(x)));
      }
      for (const stream_of_rows& x : out) {
        lane_out[static_cast<std::size_t>(p)].push_back(allocate(r, x.kind, T, width(x)));
        receive[static_cast<std::size_t>(p)].push_back(allocate(r, x.kind, b * G, width(x)));
      }
    }

    for (std::int32_t p = 0; p < G; ++p) {
      const member& me = lm.of[gi][static_cast<std::size_t>(p)];
      const rank_index r = me.rank;
      const token_count b = tokens_of(p);
      const auto P = static_cast<std::size_t>(p);
      // slot 0: pack every lane's heads; round 0: send them
      for (std::size_t x = 0; x < in.size(); ++x)
        for (std::int32_t j = 0; j < G; ++j) {
          const bool own = j == p;
          copy_heads pack;
          pack.from = tensor(in[x].home);
          pack.to = arena(own ? lane_in[P][x] : send[P][x]);
          pack.from_head = first_head(in[x], j);
          pack.heads = width(in[x]);
          pack.runs = gather_runs(me, own ? place[P] : j * b);
          w.at(r, 0).pre.push_back({std::move(pack), -1});
          if (!own) {
            const rank_index to = s.ranks[static_cast<std::size_t>(j)];
            w.send(0, r, to,
                   {arena(send[P][x]), j * b, arena(lane_in[static_cast<std::size_t>(j)][x]), place[P], b, in[x].kind, width(in[x])},
                   wire.row_bytes(in[x].kind, width(in[x])));
          }
        }
      // round 0: clear the lane's outputs and compute every pair of the group over the lane
      round_work& compute = w.at(r, 1);
      for (std::size_t x = 0; x < out.size(); ++x) compute.pre.push_back({zero_rows{arena(lane_out[P][x]), 0, T}, -1});
      launch_request req;
      req.group = s.group;
      req.lane = {n, kvn};
      req.q = arena(lane_in[P][0]);
      req.k = arena(lane_in[P][1]);
      req.v = arena(lane_in[P][2]);
      if (backward) {
        req.o = arena(lane_in[P][3]);
        req.d_o = arena(lane_in[P][4]);
        req.lse = arena(lane_in[P][5]);
        req.dq = arena(lane_out[P][0]);
        req.dk = arena(lane_out[P][1]);
        req.dv = arena(lane_out[P][2]);
      } else {
        req.o = arena(lane_out[P][0]);
        req.lse = arena(lane_out[P][1]);
      }
      req.waits = 0;
      for (std::int32_t qm = 0; qm < G; ++qm)
        for (std::int32_t km = 0; km < G; ++km)
          for (attention_block blk : s.blocks(qm, km)) {
            blk.q_row += place[static_cast<std::size_t>(qm)];
            blk.kv_row += place[static_cast<std::size_t>(km)];
            req.blocks.push_back(blk);
          }
      if (!req.blocks.empty()) compute.launches.push_back(std::move(req));
      // round 1: every member's rows of this lane go home
      for (std::size_t x = 0; x < out.size(); ++x)
        for (std::int32_t o = 0; o < G; ++o) {
          if (o == p) continue;
          const rank_index to = s.ranks[static_cast<std::size_t>(o)];
          w.send(1, r, to,
                 {arena(lane_out[P][x]), place[static_cast<std::size_t>(o)], arena(receive[static_cast<std::size_t>(o)][x]),
                  p * tokens_of(o), tokens_of(o), out[x].kind, width(out[x])},
                 wire.row_bytes(out[x].kind, width(out[x])));
        }
      // after round 1: unpack every lane into the rank's tensors (forward: overwrite O and
      // LSE, which only this group writes; backward: add, so that shared K/V heads sum)
      auto& home = w.at(r, 2).post;
      for (std::size_t x = 0; x < out.size(); ++x)
        for (std::int32_t j = 0; j < G; ++j) {
          const bool own = j == p;
          head_runs unpack;
          unpack.from = arena(own ? lane_out[P][x] : receive[P][x]);
          unpack.to = tensor(out[x].home);
          unpack.to_head = first_head(out[x], j);
          unpack.heads = width(out[x]);
          unpack.runs = scatter_runs(me, own ? place[P] : j * b);
          if (backward) home.push_back({add_heads{std::move(unpack)}, 1});
          else home.push_back({copy_heads{std::move(unpack)}, 1});
        }
    }
  }
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
