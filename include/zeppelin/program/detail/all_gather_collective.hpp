// zeppelin/program/detail/all_gather_collective.hpp
// The all-gather collective (LLaMA-3 CP) of the all-gather groups of one level, for one
// pass, written into a level_work. The gather and the reduce-scatter run as rings of
// point-to-point steps (what NCCL's ring algorithm does inside ncclAllGather and
// ncclReduceScatter), with variable buffer sizes per member.
//   in : the level's groups whose collective is all_gather, the program's shard rows, an
//        arena allocator, the wire format
//   out: per round the payloads and per member its operations.
// Buffers, per rank: the gathered K/V (two arenas) where a member's region holds the group
// buffers of all its group's origins, origin after origin; backward also the dK/dV partials
// in the same layout and dkv_in (one group buffer per member).
// Forward, position p of G: copy its shards into its own origin's place; gather step
//   k = 0..G-2 (round k) sends origin (p - k) mod G to p + 1; round G - 1 computes the
//   blocks of every origin in one launch (after the last step).
// Backward: the same gather (the K/V are gathered again); round G - 1 zeroes the partials
//   and computes every origin's blocks into them; reduce-scatter step j = 0..G-2 (round
//   G + j) sends the partial sum of origin (p - j - 1) mod G to p + 1, which adds it into its
//   own partial of that origin; after step G - 2 position p holds the complete dK/dV of
//   origin p and adds it into the rank's dK, dV.
// Rounds: G forward, 2G - 1 backward. Host code, nvcc-safe.
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
#include <numeric>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! Rounds of the all-gather collective for groups of at most `G` ranks.
[[nodiscard]] constexpr std::int32_t all_gather_rounds(std::int32_t G, pass_kind pass) noexcept {
  return pass == pass_kind::forward ? G : 2 * G - 1;
}

inline void build_all_gather(level_work& w, const std::vector<const ring_schedule*>& groups, pass_kind pass,
                             const execution_program& prog, const arena_allocator& allocate, const wire_format& wire) {
  if (groups.empty()) return;
  const bool backward = pass == pass_kind::backward;
  const level_members lm = lay_out_members(groups, prog.shard_row, prog.num_ranks(), [](const ring_schedule& s) {
    return std::accumulate(s.buffer_tokens.begin(), s.buffer_tokens.end(), token_count{0});
  });
  // dkv_in regions: one group buffer (the group's largest) per member
  const level_members in = lay_out_members(groups, prog.shard_row, prog.num_ranks(), [](const ring_schedule& s) {
    return s.buffer_tokens.empty() ? token_count{0} : *std::max_element(s.buffer_tokens.begin(), s.buffer_tokens.end());
  });
  struct slots {
    std::int32_t k = -1, v = -1, dk = -1, dv = -1, dk_in = -1, dv_in = -1;
  };
  std::vector<slots> at(static_cast<std::size_t>(prog.num_ranks()));
  std::vector<char> used(static_cast<std::size_t>(prog.num_ranks()), 0);
  for (const auto& ms : lm.of)
    for (const member& m : ms) used[static_cast<std::size_t>(m.rank)] = 1;
  for (rank_index r = 0; r < prog.num_ranks(); ++r) {
    if (!used[static_cast<std::size_t>(r)]) continue;
    const token_count rows = lm.region_rows[static_cast<std::size_t>(r)];
    slots& s = at[static_cast<std::size_t>(r)];
    s.k = allocate(r, row_kind::kv, rows);
    s.v = allocate(r, row_kind::kv, rows);
    if (backward) {
      s.dk = allocate(r, row_kind::dkv, rows);
      s.dv = allocate(r, row_kind::dkv, rows);
      s.dk_in = allocate(r, row_kind::dkv, in.region_rows[static_cast<std::size_t>(r)]);
      s.dv_in = allocate(r, row_kind::dkv, in.region_rows[static_cast<std::size_t>(r)]);
    }
  }
  const auto slot_of = [&](rank_index r) -> const slots& { return at[static_cast<std::size_t>(r)]; };
  const auto arena = [](std::int32_t a) { return buffer_ref::arena(a); };
  const std::int64_t kv_bytes = wire.row_bytes(row_kind::kv), dkv_bytes = wire.row_bytes(row_kind::dkv);

  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const ring_schedule& s = *groups[gi];
    const std::int32_t G = s.size();
    const auto wrap = [G](std::int32_t x) { return ((x % G) + G) % G; };
    // origin o's place inside a member region
    std::vector<token_count> place(static_cast<std::size_t>(G) + 1, 0);
    for (std::int32_t o = 0; o < G; ++o)
      place[static_cast<std::size_t>(o) + 1] = place[static_cast<std::size_t>(o)] + s.buffer_tokens[static_cast<std::size_t>(o)];
    const auto place_of = [&](std::int32_t o) { return place[static_cast<std::size_t>(wrap(o))]; };
    const auto rows_of = [&](std::int32_t o) { return s.buffer_tokens[static_cast<std::size_t>(wrap(o))]; };
    const token_count total = place.back();
    for (std::int32_t p = 0; p < G; ++p) {
      const member& me = lm.of[gi][static_cast<std::size_t>(p)];
      const member& next = lm.of[gi][static_cast<std::size_t>(wrap(p + 1))];
      const member& my_in = in.of[gi][static_cast<std::size_t>(p)];
      const member& next_in = in.of[gi][static_cast<std::size_t>(wrap(p + 1))];
      const rank_index r = me.rank;
      const slots& mine = slot_of(r);
      const slots& theirs = slot_of(next.rank);
      const run_list gather = gather_runs(me, me.region + place_of(p));  // one list for K and V
      auto& setup = w.at(r, 0).pre;
      setup.push_back({copy_rows{buffer_ref::tensor(tensor_kind::k), arena(mine.k), gather}, -1});
      setup.push_back({copy_rows{buffer_ref::tensor(tensor_kind::v), arena(mine.v), gather}, -1});
      for (std::int32_t k = 0; k + 1 < G; ++k) {
        const std::int32_t o = p - k;
        const token_count rows = rows_of(o);
        w.send(k, r, next.rank, {arena(mine.k), me.region + place_of(o), arena(theirs.k), next.region + place_of(o), rows, row_kind::kv},
               kv_bytes);
        w.send(k, r, next.rank, {arena(mine.v), me.region + place_of(o), arena(theirs.v), next.region + place_of(o), rows, row_kind::kv},
               kv_bytes);
      }
      // round G - 1: every origin's blocks
      round_work& compute = w.at(r, G);
      launch_request req;
      req.group = s.group;
      req.k = arena(mine.k);
      req.v = arena(mine.v);
      req.waits = G - 2;
      std::vector<attention_block> blocks;
      for (std::int32_t o = 0; o < G; ++o) append_launch_blocks(me, s.blocks(p, o), me.region + place_of(o), blocks);
      req.blocks = block_list(std::move(blocks));
      if (backward) {
        req.dk = arena(mine.dk);
        req.dv = arena(mine.dv);
        compute.pre.push_back({zero_rows{req.dk, me.region, total}, -1});
        compute.pre.push_back({zero_rows{req.dv, me.region, total}, -1});
      }
      if (!req.blocks.empty()) compute.launches.push_back(std::move(req));
      if (!backward) continue;
      // reduce-scatter: step j runs in round G + j
      for (std::int32_t j = 0; j + 1 < G; ++j) {
        const std::int32_t k = G + j;
        const std::int32_t sent = p - j - 1, received = p - j - 2;  // origins
        w.send(k, r, next.rank,
               {arena(mine.dk), me.region + place_of(sent), arena(theirs.dk_in), next_in.region, rows_of(sent), row_kind::dkv}, dkv_bytes);
        w.send(k, r, next.rank,
               {arena(mine.dv), me.region + place_of(sent), arena(theirs.dv_in), next_in.region, rows_of(sent), row_kind::dkv}, dkv_bytes);
        auto& post = w.at(r, k + 1).post;
        const row_run add{my_in.region, me.region + place_of(received), rows_of(received)};
        post.push_back({add_rows{arena(mine.dk_in), arena(mine.dk), {add}}, k});
        post.push_back({add_rows{arena(mine.dv_in), arena(mine.dv), {add}}, k});
      }
      // the complete dK/dV of origin p into the rank's dK, dV
      auto& home = w.at(r, 2 * G - 1).post;
      const run_list scatter = scatter_runs(me, me.region + place_of(p));  // one list for dK and dV
      home.push_back({add_rows{arena(mine.dk), buffer_ref::tensor(tensor_kind::dk), scatter}, -1});
      home.push_back({add_rows{arena(mine.dv), buffer_ref::tensor(tensor_kind::dv), scatter}, -1});
    }
  }
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
