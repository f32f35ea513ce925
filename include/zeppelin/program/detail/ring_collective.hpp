// zeppelin/program/detail/ring_collective.hpp
// The ring collective (TE CP "P2P", Zeppelin 3.2) of the ring groups of one level, for one
// pass, written into a level_work.
//   in : the level's groups whose collective is ring (schedule/ring_schedule.hpp), the
//        program's shard rows, an arena allocator, the wire format
//   out: per round the payloads (bound to arena rows) and per member its operations.
// Buffers, per rank of the level: K/V slots kv[0], kv[1] (two arenas each, keys and values)
// and, backward, dK/dV accumulator slots dkv[0], dkv[1] and dkv_in; a member's group buffer
// sits at its region (its group's largest buffer of rows) in each.
// Forward, position p of G, round k = 0..G-1: p holds in kv[k % 2] the K/V of origin
//   o = (p - k) mod G and computes the blocks of (p, o); for k < G - 1 it sends them to
//   p + 1, which receives them into kv[(k + 1) % 2]. Before round 0 p copies its shards' K and
//   V into kv[0].
// Backward (the reversed ring, as TE does it), round k = 0..G-1: p holds the K/V of
//   o = (p + k) mod G in kv[k % 2]; it zeroes dkv[k % 2], computes the blocks of (p, o) into
//   it, and once the round's exchange has delivered the partial dK/dV of o from p + 1 into
//   dkv_in, adds it in. The exchange of round k sends kv[k % 2] to p - 1 (k < G - 1) and, for
//   k >= 1, the accumulator finished last round, dkv[(k - 1) % 2], to p - 1's dkv_in.
//   Round G returns the last accumulator (origin p - 1) to p - 1, which adds the complete
//   dK/dV of its own shards into the rank's dK, dV.
// Rounds: G forward, G + 1 backward. Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/detail/level_work.hpp>
#include <zeppelin/program/detail/members.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/program/wire_format.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! Rounds of the ring collective for groups of at most `G` ranks.
[[nodiscard]] constexpr std::int32_t ring_rounds(std::int32_t G, pass_kind pass) noexcept {
  return pass == pass_kind::forward ? G : G + 1;
}

inline void build_ring(level_work& w, const std::vector<const ring_schedule*>& groups, pass_kind pass,
                       const execution_program& prog, const arena_allocator& allocate, const wire_format& wire) {
  if (groups.empty()) return;
  const bool backward = pass == pass_kind::backward;
  const level_members lm = lay_out_members(groups, prog.shard_row, prog.num_ranks(), [](const ring_schedule& s) {
    return s.buffer_tokens.empty() ? token_count{0} : *std::max_element(s.buffer_tokens.begin(), s.buffer_tokens.end());
  });
  // the slots of every rank with members: [rank] -> arena indices
  struct slots {
    std::int32_t k[2] = {-1, -1}, v[2] = {-1, -1}, dk[2] = {-1, -1}, dv[2] = {-1, -1}, dk_in = -1, dv_in = -1;
  };
  std::vector<slots> at(static_cast<std::size_t>(prog.num_ranks()));
  std::vector<char> used(static_cast<std::size_t>(prog.num_ranks()), 0);
  for (const auto& ms : lm.of)
    for (const member& m : ms) used[static_cast<std::size_t>(m.rank)] = 1;
  for (rank_index r = 0; r < prog.num_ranks(); ++r) {
    if (!used[static_cast<std::size_t>(r)]) continue;
    const token_count rows = lm.region_rows[static_cast<std::size_t>(r)];
    slots& s = at[static_cast<std::size_t>(r)];
    for (int x = 0; x < 2; ++x) s.k[x] = allocate(r, row_kind::kv, rows), s.v[x] = allocate(r, row_kind::kv, rows);
    if (backward) {
      for (int x = 0; x < 2; ++x) s.dk[x] = allocate(r, row_kind::dkv, rows), s.dv[x] = allocate(r, row_kind::dkv, rows);
      s.dk_in = allocate(r, row_kind::dkv, rows);
      s.dv_in = allocate(r, row_kind::dkv, rows);
    }
  }
  const auto slot_of = [&](rank_index r) -> const slots& { return at[static_cast<std::size_t>(r)]; };
  const auto arena = [](std::int32_t a) { return buffer_ref::arena(a); };
  const std::int64_t kv_bytes = wire.row_bytes(row_kind::kv), dkv_bytes = wire.row_bytes(row_kind::dkv);

  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const ring_schedule& s = *groups[gi];
    const std::int32_t G = s.size();
    const auto& ms = lm.of[gi];
    const auto wrap = [G](std::int32_t x) { return ((x % G) + G) % G; };
    const auto rows_of = [&](std::int32_t origin) { return s.buffer_tokens[static_cast<std::size_t>(wrap(origin))]; };
    for (std::int32_t p = 0; p < G; ++p) {
      const member& me = ms[static_cast<std::size_t>(p)];
      const member& next = ms[static_cast<std::size_t>(wrap(p + 1))];
      const member& prev = ms[static_cast<std::size_t>(wrap(p - 1))];
      const slots& mine = slot_of(me.rank);
      const rank_index r = me.rank;
      // before round 0: the member's K and V into kv[0] (one list of runs for both)
      const run_list gather = gather_runs(me, me.region);
      auto& setup = w.at(r, 0).pre;
      setup.push_back({copy_rows{buffer_ref::tensor(tensor_kind::k), arena(mine.k[0]), gather}, -1});
      setup.push_back({copy_rows{buffer_ref::tensor(tensor_kind::v), arena(mine.v[0]), gather}, -1});
      for (std::int32_t k = 0; k < G; ++k) {
        const int cur = k % 2, nxt = (k + 1) % 2;
        const std::int32_t origin = backward ? wrap(p + k) : wrap(p - k);
        const member& to = backward ? prev : next;
        const slots& theirs = slot_of(to.rank);
        if (k + 1 < G) {
          const token_count rows = rows_of(origin);
          w.send(k, r, to.rank, {arena(mine.k[cur]), me.region, arena(theirs.k[nxt]), to.region, rows, row_kind::kv}, kv_bytes);
          w.send(k, r, to.rank, {arena(mine.v[cur]), me.region, arena(theirs.v[nxt]), to.region, rows, row_kind::kv}, kv_bytes);
        }
        round_work& round = w.at(r, k + 1);
        launch_request req;
        req.group = s.group;
        req.k = arena(mine.k[cur]);
        req.v = arena(mine.v[cur]);
        req.waits = k - 1;
        std::vector<attention_block> blocks;
        append_launch_blocks(me, s.blocks(p, origin), me.region, blocks);
        req.blocks = block_list(std::move(blocks));
        if (backward) {
          const token_count rows = rows_of(origin);
          req.dk = arena(mine.dk[cur]);
          req.dv = arena(mine.dv[cur]);
          round.pre.push_back({zero_rows{req.dk, me.region, rows}, k - 1});
          round.pre.push_back({zero_rows{req.dv, me.region, rows}, k - 1});
          if (k >= 1) {
            // the accumulator finished last round (origin p + k - 1) goes to p - 1; the partial
            // of origin p + k arrives from p + 1 and is added once this round's exchange is done
            const token_count done = rows_of(origin - 1);
            w.send(k, r, prev.rank, {arena(mine.dk[nxt]), me.region, arena(slot_of(prev.rank).dk_in), prev.region, done, row_kind::dkv},
                   dkv_bytes);
            w.send(k, r, prev.rank, {arena(mine.dv[nxt]), me.region, arena(slot_of(prev.rank).dv_in), prev.region, done, row_kind::dkv},
                   dkv_bytes);
            round.post.push_back({add_rows{arena(mine.dk_in), req.dk, {{me.region, me.region, rows}}}, k});
            round.post.push_back({add_rows{arena(mine.dv_in), req.dv, {{me.region, me.region, rows}}}, k});
          }
        }
        if (!req.blocks.empty()) round.launches.push_back(std::move(req));
      }
      if (!backward) continue;
      // round G: the last accumulator (origin p - 1) returns to p - 1; the complete dK/dV of
      // p's own shards arrives from p + 1 and is added into the rank's dK, dV
      const int last = (G - 1) % 2;
      std::int32_t dk_home = mine.dk[last], dv_home = mine.dv[last], waits = -1;
      if (G > 1) {
        const token_count rows = rows_of(p - 1);
        w.send(G, r, prev.rank, {arena(mine.dk[last]), me.region, arena(slot_of(prev.rank).dk_in), prev.region, rows, row_kind::dkv},
               dkv_bytes);
        w.send(G, r, prev.rank, {arena(mine.dv[last]), me.region, arena(slot_of(prev.rank).dv_in), prev.region, rows, row_kind::dkv},
               dkv_bytes);
        dk_home = mine.dk_in, dv_home = mine.dv_in, waits = G;
      }
      auto& home = w.at(r, G + 1).post;
      const run_list scatter = scatter_runs(me, me.region);  // one list for dK and dV
      home.push_back({add_rows{arena(dk_home), buffer_ref::tensor(tensor_kind::dk), scatter}, waits});
      home.push_back({add_rows{arena(dv_home), buffer_ref::tensor(tensor_kind::dv), scatter}, waits});
    }
  }
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
