// zeppelin/program/build.hpp
// make_program: a plan -> its execution program (program/program.hpp), once per plan.
//   in : the plan (validated against the batch and topology), the batch, the topology (the
//        router and the remap's link costs read it), program_options (program/options.hpp)
//   out: the execution program every engine and the simulator run.
// Levels, per micro-batch: [remap_in], inter-node rings, intra-node rings, local sequences,
// [remap_out] (empty ones left out; a micro-batch that is already token-balanced is not
// remapped: its linear layout is its attention layout). Every ring group (zone intra or inter) with shards in
// the micro-batch joins its zone's level with its own collective (core/plan.hpp):
// program/detail/ring_collective.hpp, program/detail/all_gather_collective.hpp or
// program/detail/all_to_all_collective.hpp (Ulysses, and Ulysses x ring where the heads
// do not split over the whole group); the
// local level is program/detail/local_level.hpp; the remaps program/detail/remap_level.hpp
// (forward: Q, K, V in and O out; backward: dO in and dQ, dK, dV out).
// Order of a micro-batch's attention segment (options.engine):
//   in_order     one compute stream: the inter level (all rounds), the intra level, local
//   prioritized  streams 0 (inter), 1 (intra), 2 (local) with priorities 0 > 1 > 2; the
//                local launches first (they fill the rings' gaps), then the two ring levels
//                round by round (inter round k, intra round k, ...), so the one
//                communication stream serves both
// Every phase is routed by options.router over the topology.
// Throws invalid_plan when the plan fails validate(p, b, t), invalid_argument for a bad wire
// format, resource_limit when its groups exceed program_options::max_member_rounds or
// max_shard_pairs.
// Cost: O(G^2 + S log S + B log B) per ring or all-gather group of G ranks, S shards and B
// blocks (the G^2 is the ring itself: G rounds on G members), O(G (u + G / u) + S log S) per
// all-to-all group of Ulysses degree u, plus the launches; a rank's part is as long as its own
// groups.
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/validate.hpp>
#include <zeppelin/program/detail/all_gather_collective.hpp>
#include <zeppelin/program/detail/all_to_all_collective.hpp>
#include <zeppelin/program/detail/level_work.hpp>
#include <zeppelin/program/detail/local_level.hpp>
#include <zeppelin/program/detail/members.hpp>
#include <zeppelin/program/detail/remap_level.hpp>
#include <zeppelin/program/detail/ring_collective.hpp>
#include <zeppelin/program/detail/segment_writer.hpp>
#include <zeppelin/program/options.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/remap/exact.hpp>
#include <zeppelin/remap/layout.hpp>
#include <zeppelin/schedule/engine_queue.hpp>
#include <zeppelin/schedule/group_layout.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

//! The groups of one zone (inter or intra) of a micro-batch, by group id: the ring and
//! all-gather groups with their (position, origin) blocks, the all-to-all groups with their
//! layouts only (their collective computes on subgroups, schedule/group_layout.hpp).
struct zone_groups {
  std::vector<ring_schedule> paired;
  std::vector<group_layout> all_to_all;
  [[nodiscard]] bool empty() const noexcept { return paired.empty() && all_to_all.empty(); }
};

//! What one micro-batch runs, independent of the pass.
struct micro_batch_work {
  std::int32_t micro_batch = 0;
  zone_groups inter, intra;
  std::vector<block_list> local;  //!< [rank], both passes
  std::optional<relayout_plan> remap;                       //!< attention -> token-balanced layout
  std::int32_t remap_in = -1, inter_level = -1, intra_level = -1, local_level = -1, remap_out = -1;  //!< level indices
};

//! Rounds of the collective of a group of `G` ranks running `c` in `pass` (the all-to-all's
//! depend on the heads).
inline std::int32_t collective_rounds(collective_kind c, std::int32_t G, pass_kind pass, const wire_format& wire) {
  switch (c) {
    case collective_kind::ring: break;
    case collective_kind::all_gather: return all_gather_rounds(G, pass);
    case collective_kind::all_to_all: return all_to_all_rounds(wire, G, pass);
  }
  return ring_rounds(G, pass);
}

//! Rounds of a ring level of `groups` in `pass`.
inline std::int32_t level_rounds(const zone_groups& groups, pass_kind pass, const wire_format& wire) {
  std::int32_t rounds = 0;
  for (const ring_schedule& s : groups.paired) rounds = std::max(rounds, collective_rounds(s.collective, s.size(), pass, wire));
  for (const group_layout& s : groups.all_to_all) rounds = std::max(rounds, collective_rounds(s.collective, s.size(), pass, wire));
  return rounds;
}

//! The level_work of a ring level (its ring, all-gather and all-to-all groups).
inline level_work ring_level(const zone_groups& groups, std::int32_t level, std::int32_t stream, pass_kind pass,
                             const execution_program& prog, const arena_allocator& allocate, const wire_format& wire) {
  level_work w(level, stream, level_rounds(groups, pass, wire), prog.num_ranks());
  std::vector<const ring_schedule*> ring, all_gather;
  for (const ring_schedule& s : groups.paired) (s.collective == collective_kind::all_gather ? all_gather : ring).push_back(&s);
  std::vector<const group_layout*> all_to_all;
  for (const group_layout& s : groups.all_to_all) all_to_all.push_back(&s);
  build_ring(w, ring, pass, prog, allocate, wire);
  build_all_gather(w, all_gather, pass, prog, allocate, wire);
  build_all_to_all(w, all_to_all, pass, prog, allocate, wire);
  return w;
}

//! (position, round) pairs a group of G ranks running `c` holds in a pass, up to a constant:
//! a ring or all-gather member meets every other member's K/V (G x G); an all-to-all member
//! (Ulysses degree u, ring degree G / u) runs u all-to-all peers and G / u ring rounds.
[[nodiscard]] inline std::int64_t member_rounds_of(collective_kind c, std::int64_t G, const wire_format& wire) {
  if (c != collective_kind::all_to_all) return G * G;
  const std::int64_t u = ulysses_degree(wire, static_cast<std::int32_t>(G));
  return G * (u + G / u);
}

//! The (query shard, key shard) pairs of one sequence that the ring and all-gather groups of
//! `p` make, summed: over (group, micro-batch, sequence), its shards in the group squared (the
//! all-to-all collective computes on subgroups and makes no such pairs).
[[nodiscard]] inline std::int64_t shard_pairs_of(const plan& p) {
  std::vector<std::tuple<group_index, std::int32_t, sequence_index>> keys;
  for (const auto& pl : p.placements)
    for (const shard& s : pl.shards)
      if (s.group != no_group && p.groups[static_cast<std::size_t>(s.group)].zone != zone_kind::local &&
          p.groups[static_cast<std::size_t>(s.group)].collective != collective_kind::all_to_all)
        keys.emplace_back(s.group, s.micro_batch, s.seq);
  std::sort(keys.begin(), keys.end());
  std::int64_t shard_pairs = 0;
  for (std::size_t i = 0, j = 0; i < keys.size(); i = j) {
    while (j < keys.size() && keys[j] == keys[i]) ++j;
    shard_pairs += static_cast<std::int64_t>(j - i) * static_cast<std::int64_t>(j - i);
  }
  return shard_pairs;
}

//! Throws resource_limit, before anything is built, when the groups of `p` run more
//! (position, round) pairs per pass than o.max_member_rounds (member_rounds_of, summed) or the
//! ring and all-gather groups pair more shards of one sequence than o.max_shard_pairs (sum
//! over a group's sequences of their shards in it squared: each pair makes up to three
//! attention blocks, held by the schedule and by the launches; the all-to-all collective
//! computes on subgroups and makes no such pairs).
inline void refuse_oversized_program(const plan& p, const std::vector<std::set<group_index>>& groups_of, const program_options& o) {
  std::int64_t member_rounds = 0, largest = 0;
  group_index largest_group = no_group;
  for (const auto& groups : groups_of)
    for (const group_index g : groups) {
      const ring_group& grp = p.groups[static_cast<std::size_t>(g)];
      const auto G = static_cast<std::int64_t>(grp.ranks.size());
      member_rounds += member_rounds_of(grp.collective, G, o.wire);
      if (G > largest) largest = G, largest_group = g;
    }
  if (member_rounds > o.max_member_rounds)
    ZEPPELIN_THROW(resource_limit,
                   "execution program too large: its groups run more (position, round) pairs per pass than "
                   "program_options::max_member_rounds allows (a ring or all-gather group of G ranks runs G x G, an "
                   "all-to-all group G x (Ulysses degree + ring degree)); plan smaller groups (more tokens per GPU, fewer "
                   "GPUs per sequence) or raise the limit",
                   {{"member_rounds", double(member_rounds)},
                    {"max_member_rounds", double(o.max_member_rounds)},
                    {"largest_group", double(largest_group)},
                    {"largest_group_ranks", double(largest)}});
  const std::int64_t shard_pairs = shard_pairs_of(p);
  if (shard_pairs > o.max_shard_pairs)
    ZEPPELIN_THROW(resource_limit,
                   "execution program too large: the shards of its ring and all-gather groups form more (query shard, key "
                   "shard) pairs of one sequence than program_options::max_shard_pairs allows (a sequence cut into n shards "
                   "of a group pairs n x n); plan fewer shards per sequence (more tokens per GPU, smaller groups) or raise "
                   "the limit",
                   {{"shard_pairs", double(shard_pairs)}, {"max_shard_pairs", double(o.max_shard_pairs)}});
}

}  // namespace detail

//! The execution program of `p` over `b` on `t` (see the file comment).
[[nodiscard]] inline execution_program make_program(const plan& p, const batch& b, const topology& t, const program_options& o = {}) {
  using std::size_t;
  validate(p, b, t);
  o.wire.check();
  execution_program out;
  out.wire = o.wire;
  out.micro_batches = std::max(1, p.micro_batches());
  const auto R = static_cast<size_t>(p.num_ranks());
  out.rows.assign(R, 0);
  out.shard_row.resize(R);
  for (size_t r = 0; r < R; ++r)
    for (const shard& s : p.placements[r].shards) {
      out.shard_row[r].push_back(out.rows[r]);
      out.rows[r] += s.range.size();
    }
  const detail::phase_router route = [&](const shared_list<transfer>& payloads) { return o.router.route(payloads, t); };
  const bool prioritized = o.engine == engine_policy::prioritized;
  out.streams = prioritized ? std::vector<program_stream>{{0}, {1}, {2}} : std::vector<program_stream>{{0}};
  const std::int32_t inter_stream = 0, intra_stream = prioritized ? 1 : 0, local_stream = prioritized ? 2 : 0;

  // the work of every micro-batch, and its levels
  std::vector<std::set<group_index>> groups_of(static_cast<size_t>(out.micro_batches));
  for (const auto& pl : p.placements)
    for (const shard& s : pl.shards)
      if (s.group != no_group && p.groups[static_cast<size_t>(s.group)].zone != zone_kind::local)
        groups_of[static_cast<size_t>(s.micro_batch)].insert(s.group);
  detail::refuse_oversized_program(p, groups_of, o);
  std::vector<engine_queue> queues = make_engine_queues(p);
  std::vector<detail::micro_batch_work> mbs(static_cast<size_t>(out.micro_batches));
  const auto add_level = [&](std::int32_t mb, level_kind kind) {
    out.levels.push_back({mb, kind, {0, 0}});
    return static_cast<std::int32_t>(out.levels.size() - 1);
  };
  for (std::int32_t mb = 0; mb < out.micro_batches; ++mb) {
    auto& m = mbs[static_cast<size_t>(mb)];
    m.micro_batch = mb;
    for (const group_index g : groups_of[static_cast<size_t>(mb)]) {
      group_layout layout = make_group_layout(p, b, g, mb);
      detail::zone_groups& zone = layout.zone == zone_kind::inter_node ? m.inter : m.intra;
      if (layout.collective == collective_kind::all_to_all) zone.all_to_all.push_back(std::move(layout));
      else zone.paired.push_back(make_ring_schedule(std::move(layout)));
    }
    m.local = detail::local_blocks(p, out, queues, mb);
    if (o.remap) {
      // a micro-batch that is already token-balanced moves nothing and keeps its layout
      const remap_problem problem = make_remap_problem(p, t, static_cast<double>(o.wire.row_bytes(row_kind::q)), mb);
      const remap_matrix matrix = exact_remap{*o.remap}.solve(problem);
      out.linear_layout.resize(static_cast<size_t>(out.micro_batches));
      if (!matrix.entries.empty()) {
        m.remap = make_remap_plan(p, matrix, mb);
        out.linear_layout[static_cast<size_t>(mb)] = m.remap->target;
        m.remap_in = add_level(mb, level_kind::remap_in);
      }
    }
    if (!m.inter.empty()) m.inter_level = add_level(mb, level_kind::inter_node);
    if (!m.intra.empty()) m.intra_level = add_level(mb, level_kind::intra_node);
    if (std::any_of(m.local.begin(), m.local.end(), [](const auto& x) { return !x.empty(); })) m.local_level = add_level(mb, level_kind::local);
    if (m.remap) m.remap_out = add_level(mb, level_kind::remap_out);
  }

  for (const pass_kind pass : {pass_kind::forward, pass_kind::backward}) {
    auto& ranks = out.passes[static_cast<int>(pass)];
    ranks.assign(R, rank_pass{});
    // segments are written through pointers: no reallocation while a pass is built
    for (auto& rp : ranks) rp.segments.reserve(static_cast<size_t>(out.micro_batches) * 3);
    const detail::arena_allocator allocate{[&](rank_index r, const arena& a) {
      auto& arenas = ranks[static_cast<size_t>(r)].arenas;
      arenas.push_back(a);
      return static_cast<std::int32_t>(arenas.size() - 1);
    }};
    const auto new_segment = [&](segment_kind kind, std::int32_t mb) {
      std::vector<program_segment*> segs;
      for (auto& rp : ranks) {
        rp.segments.push_back({kind, mb, {}, 0, 0, row_kind::q});
        segs.push_back(&rp.segments.back());
      }
      return segs;
    };
    const auto set_rounds = [&](const detail::level_work& w) {
      out.levels[static_cast<size_t>(w.level)].rounds[static_cast<int>(pass)] = w.rounds;
    };
    // a remap segment moving y; `from_attention` maps the attention layout's side
    const auto run_remap = [&](const relayout_plan& y, segment_kind kind, std::int32_t mb, std::int32_t level, row_kind rows_of) {
      const bool from_attention = kind == segment_kind::remap_out;
      std::vector<detail::offset_map> attention(R), identity(R);
      for (size_t r = 0; r < R; ++r) attention[r] = detail::micro_batch_rows(p, out, static_cast<rank_index>(r), mb);
      detail::level_work w(level, 0, 1, p.num_ranks());
      detail::build_remap(w, y, from_attention ? attention : identity, from_attention ? identity : attention, rows_of,
                          o.wire.row_bytes(rows_of), allocate);
      set_rounds(w);
      auto segs = new_segment(kind, mb);
      for (size_t r = 0; r < R; ++r) {
        segs[r]->rows_of = rows_of;
        segs[r]->source_rows = from_attention ? out.rows[r] : y.ranks[r].source_tokens;
        segs[r]->target_rows = from_attention ? y.ranks[r].target_tokens : out.rows[r];
      }
      detail::segment_writer writer(out, pass, o.launch, std::move(segs), route);
      writer.setup(w);
      writer.round(w, 0);
    };
    const bool forward = pass == pass_kind::forward;
    for (auto& m : mbs) {
      if (m.remap) run_remap(inverse(*m.remap), segment_kind::remap_in, m.micro_batch, m.remap_in, forward ? row_kind::qkv : row_kind::q);
      std::optional<detail::level_work> inter, intra, local;
      if (m.inter_level >= 0) inter = detail::ring_level(m.inter, m.inter_level, inter_stream, pass, out, allocate, o.wire);
      if (m.intra_level >= 0) intra = detail::ring_level(m.intra, m.intra_level, intra_stream, pass, out, allocate, o.wire);
      if (m.local_level >= 0) {
        local.emplace(m.local_level, local_stream, 1, p.num_ranks());
        detail::build_local(*local, m.local, pass);
      }
      for (auto* w : {&inter, &intra, &local})
        if (*w) set_rounds(**w);
      detail::segment_writer writer(out, pass, o.launch, new_segment(segment_kind::attention, m.micro_batch), route);
      const auto whole = [&](std::optional<detail::level_work>& w) {
        if (!w) return;
        writer.setup(*w);
        for (std::int32_t k = 0; k < w->rounds; ++k) writer.round(*w, k);
      };
      if (!prioritized) {
        whole(inter), whole(intra), whole(local);
      } else {
        whole(local);
        if (inter) writer.setup(*inter);
        if (intra) writer.setup(*intra);
        const std::int32_t rounds = std::max(inter ? inter->rounds : 0, intra ? intra->rounds : 0);
        for (std::int32_t k = 0; k < rounds; ++k)
          for (auto* w : {&inter, &intra})
            if (*w && k < (*w)->rounds) writer.round(**w, k);
      }
      if (m.remap) run_remap(*m.remap, segment_kind::remap_out, m.micro_batch, m.remap_out, forward ? row_kind::q : row_kind::qkv);
    }
  }
  return out;
}

ZEPPELIN_NAMESPACE_END
