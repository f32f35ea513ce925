// zeppelin/program/detail/all_to_all_collective.hpp
// The all-to-all collective of the all-to-all groups of one level, for one pass, written into
// a level_work: DeepSpeed-Ulysses, and hybrid Ulysses x ring (USP) for a group whose size the
// heads do not allow.
//   in : the layouts of the level's groups whose collective is all_to_all
//        (schedule/group_layout.hpp: no (position, origin) blocks, which this collective never
//        reads), the program's shard rows, an arena allocator, the wire format
//   out: per round the payloads and per member its operations.
// Degrees: a group of G members runs Ulysses of degree u = ulysses_degree(wire, G), the
// largest divisor of G whose head lanes exist (below), and a ring of degree r = G / u over
// its subgroups of u consecutive members (members i u .. i u + u - 1 form subgroup i; inside
// a node when the group's ranks are). r = 1 is plain Ulysses; u = 1 (heads that split into no
// lane) a ring of whole heads.
// Head lanes: subgroup member j computes lane j, query heads [j n, (j + 1) n) with n = H / u,
// for every token of its subgroup. Its K/V heads are the ones those query heads read (query
// head h reads K/V head h / (H / KV)):
//   n a multiple of H / KV   kvn = n / (H / KV) K/V heads, [j kvn, (j + 1) kvn)
//   H / KV a multiple of n   one K/V head, j n / (H / KV), shared by several lanes: the K/V
//                            heads are replicated (LoongTrain's answer to GQA with more ranks
//                            than K/V heads) and their dK/dV partials summed at home
// so the kernel's own GQA rule holds inside the lane.
// Bundles: the tensors of one direction travel together, one payload per peer whose rows hold
// each tensor's lane heads one after another (stream_bundle): Q, K, V (backward also O, dO)
// in one, dK and dV in one, LSE alone (its rows are one accumulator per head), dQ and the
// forward's O alone: one all-to-all of packed Q, K, V (as USP's yunchang does with
// use_pack_qkv), not one per tensor; half the payloads, a third of the forward's sends out.
// Rows: the all-to-all moves member-major rows (a subgroup's members in order, each its
// group buffer: one contiguous payload per pair and bundle); attention runs on sequence-major rows (the
// subgroup's tokens sequence after sequence, in position order: subgroup_rows_of), so a
// sequence a subgroup holds whole is one causal block and one launch per lane and round
// covers the subgroup, as DeepSpeed-Ulysses' one varlen call does. Per member: staged
// (member-major) arenas of its subgroup's rows that the all-to-all fills and empties; lane
// (sequence-major) Q, O, LSE (backward dO, dQ) arenas of its subgroup's rows and K, V
// (backward dK, dV partials) arenas of every row of the group, subgroup i's region from row
// place(i u), place(o) = the tokens of the members before o; per bundle, send arenas (a
// region of its own rows per lane) for what it packs; receive arenas (a region per lane) for
// what comes home. A copy between staged (bundle) and lane (tensor) arenas permutes the rows
// after the all-to-all in and before the one home (copy_rows for a bundle of one tensor, else
// copy_heads of the tensor's heads); a subgroup's members share its permutation (a run_list).
// Forward, member (i, j), rounds 0 .. r:
//   slot 0      pack: per tensor (Q, K, V), every lane's heads of its rows into the lane's
//               send region of its bundle, its own lane's into its staged arena: one
//               copy_heads per span of lanes (lane_spans), not one per lane
//   round 0     all-to-all inside the subgroup; then permute to sequence-major, clear lane
//               O and LSE and compute the subgroup's queries against its own keys (one
//               launch, lane heads)
//   round k     (1 <= k < r) send the K/V of subgroup (i - k + 1) mod r to member (i + 1, j);
//               compute against the K/V of subgroup (i - k) mod r just received (LSE merge)
//   round r     permute back to member-major; all-to-all back: O and LSE rows of member o of
//               the subgroup -> o's receive region j; after it, unpack into the heads of
//               lane j of the rank's O and LSE
// Backward, rounds 0 .. 2r - 1: rounds 0 .. r - 1 as the forward, with Q, K, V, O, dO, LSE
// packed, dQ, dK, dV cleared first and the launches adding into dQ and into the dK/dV
// partial of the subgroup whose keys they read; rounds r .. 2r - 2 reduce-scatter the
// partials over the ring (step t sends the partial of subgroup (i - t - 1) mod r to
// (i + 1, j), which adds it into its own: the all-gather collective's order, deterministic);
// round 2r - 1 sends dQ and the complete dK/dV of subgroup i home, where they are added into
// the rank's dQ, dK, dV.
// Bytes per member: the all-to-all moves (u - 1) / u of its rows, whatever u; the ring moves
// the lane's K/V (and dK/dV partials) of the other r - 1 subgroups.
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/detail/level_work.hpp>
#include <zeppelin/program/detail/members.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/program/wire_format.hpp>
#include <zeppelin/schedule/group_layout.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! The heads of one lane (see the file comment).
struct lane_heads {
  std::int32_t first = 0, heads = 0;        //!< query heads [first, first + heads)
  std::int32_t kv_first = 0, kv_heads = 0;  //!< K/V heads [kv_first, kv_first + kv_heads)
};

//! Whether `wire`'s heads split into u lanes (u divides the heads, and a lane's query heads
//! read whole K/V heads or share one).
[[nodiscard]] constexpr bool has_lanes(const wire_format& wire, std::int32_t u) noexcept {
  if (u < 1 || wire.heads % u != 0) return false;
  const std::int32_t n = wire.heads / u, ratio = wire.heads / wire.kv_heads;
  return n % ratio == 0 || ratio % n == 0;
}

//! The Ulysses degree of a group of G members: the largest divisor of G with lanes (1 at least).
[[nodiscard]] constexpr std::int32_t ulysses_degree(const wire_format& wire, std::int32_t G) noexcept {
  for (std::int32_t u = G; u > 1; --u)
    if (G % u == 0 && has_lanes(wire, u)) return u;
  return 1;
}

//! Lane j of u lanes. Throws invalid_argument unless has_lanes(wire, u) and 0 <= j < u.
[[nodiscard]] inline lane_heads lane_of(const wire_format& wire, std::int32_t u, std::int32_t j) {
  ZEPPELIN_EXPECTS(has_lanes(wire, u) && j >= 0 && j < u, "all-to-all collective: the heads do not split into these lanes",
                   {{"heads", double(wire.heads)}, {"kv_heads", double(wire.kv_heads)}, {"lanes", double(u)}, {"lane", double(j)}});
  const std::int32_t n = wire.heads / u, ratio = wire.heads / wire.kv_heads;
  if (n % ratio == 0) return {j * n, n, j * (n / ratio), n / ratio};
  return {j * n, n, (j * n) / ratio, 1};
}

//! Rounds of the all-to-all collective of a group of G members in `pass`.
[[nodiscard]] constexpr std::int32_t all_to_all_rounds(const wire_format& wire, std::int32_t G, pass_kind pass) noexcept {
  const std::int32_t r = G / ulysses_degree(wire, G);
  return pass == pass_kind::forward ? r + 1 : 2 * r;
}

//! Subgroup i's tokens as attention computes them: sequence after sequence, each in position
//! order ("sequence-major"), so the subgroup's part of a sequence is one run and a lane
//! computes it with one causal block (plus full blocks to the runs of other subgroups). Order
//! of the sequences: first those that other subgroups of the group hold too, by sequence, so
//! that every subgroup lists them in the same order and a ring round's blocks (queries here,
//! keys there) ascend on both sides and make one launch wave; then the others in the
//! member-major order of their first tokens, so a sequence one member holds whole keeps its
//! place, and a subgroup of whole sequences permutes with one run per member, not one per
//! sequence.
struct subgroup_rows {
  std::vector<group_shard> runs;             //!< maximal runs of one sequence, sequence-major; row: sequence-major
  std::vector<std::size_t> runs_by_sequence;  //!< indices into runs, by (sequence, position)
  std::vector<row_run> permute;               //!< member-major rows (members in order, each its group buffer) -> sequence-major
};

//! `shared`: the sequences other subgroups hold too, ascending.
[[nodiscard]] inline subgroup_rows subgroup_rows_of(const group_layout& s, std::int32_t first, std::int32_t members,
                                                    const std::vector<sequence_index>& shared) {
  struct piece {
    sequence_index seq;
    token_range range;
    token_count member_major;
    token_count place = 0;  //!< where the sequence goes: shared ones first, by sequence; then the member-major row of its first piece
  };
  std::vector<piece> pieces;
  token_count base = 0;
  for (std::int32_t o = first; o < first + members; ++o) {
    for (const group_shard& gs : s.layout[static_cast<std::size_t>(o)]) pieces.push_back({gs.seq, gs.range, base + gs.row});
    base += s.buffer_tokens[static_cast<std::size_t>(o)];
  }
  std::sort(pieces.begin(), pieces.end(), [](const piece& a, const piece& b) {
    return a.seq != b.seq ? a.seq < b.seq : a.range.begin < b.range.begin;
  });
  const auto shared_rank = [&](sequence_index q) -> token_count {
    const auto it = std::lower_bound(shared.begin(), shared.end(), q);
    return it != shared.end() && *it == q ? static_cast<token_count>(it - shared.begin()) : -1;
  };
  const auto shared_count = static_cast<token_count>(shared.size());
  for (std::size_t a = 0, b = 0; a < pieces.size(); a = b) {
    token_count first_row = pieces[a].member_major;
    for (b = a; b < pieces.size() && pieces[b].seq == pieces[a].seq; ++b) first_row = std::min(first_row, pieces[b].member_major);
    const token_count rank = shared_rank(pieces[a].seq);
    for (std::size_t c = a; c < b; ++c) pieces[c].place = rank >= 0 ? rank : shared_count + first_row;
  }
  // stable: a sequence's pieces stay in position order
  std::stable_sort(pieces.begin(), pieces.end(), [](const piece& a, const piece& b) { return a.place < b.place; });
  subgroup_rows out;
  token_count row = 0;
  for (const piece& x : pieces) {
    append_run(out.permute, {x.member_major, row, x.range.size()});
    if (!out.runs.empty() && out.runs.back().seq == x.seq && out.runs.back().range.end == x.range.begin) out.runs.back().range.end = x.range.end;
    else out.runs.push_back({x.seq, x.range, -1, row});
    row += x.range.size();
  }
  out.runs_by_sequence.resize(out.runs.size());
  for (std::size_t i = 0; i < out.runs.size(); ++i) out.runs_by_sequence[i] = i;
  // a sequence's runs are adjacent and in position order: sorting by sequence keeps that
  std::stable_sort(out.runs_by_sequence.begin(), out.runs_by_sequence.end(),
                   [&](std::size_t a, std::size_t b) { return out.runs[a].seq < out.runs[b].seq; });
  return out;
}

//! The sequences that more than one subgroup of u consecutive members of `s` holds, ascending.
[[nodiscard]] inline std::vector<sequence_index> shared_sequences(const group_layout& s, std::int32_t u) {
  std::vector<std::pair<sequence_index, std::int32_t>> held;  // (sequence, subgroup)
  for (std::int32_t o = 0; o < s.size(); ++o)
    for (const group_shard& gs : s.layout[static_cast<std::size_t>(o)]) held.emplace_back(gs.seq, o / u);
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  std::vector<sequence_index> out;
  for (std::size_t i = 1; i < held.size(); ++i)
    if (held[i].first == held[i - 1].first && (out.empty() || out.back() != held[i].first)) out.push_back(held[i].first);
  return out;
}

//! The blocks of subgroup `queries`' runs against the runs of the same sequences in subgroup
//! `keys`, whose key rows start at `key_base`: what every lane of the subgroup computes in one
//! round, in query row order (a launch wave's order, so one wave is this very list).
//! O(runs log runs).
[[nodiscard]] inline block_list subgroup_blocks(const subgroup_rows& queries, const subgroup_rows& keys, token_count key_base) {
  std::vector<attention_block> blocks;
  const std::vector<std::size_t>& ks = keys.runs_by_sequence;
  for (const group_shard& q : queries.runs) {
    auto d = std::lower_bound(ks.begin(), ks.end(), q.seq, [&](std::size_t i, sequence_index s) { return keys.runs[i].seq < s; });
    for (; d != ks.end() && keys.runs[*d].seq == q.seq; ++d) {
      group_shard key = keys.runs[*d];
      key.row += key_base;
      append_blocks(q, key, blocks);
    }
  }
  return block_list(std::move(blocks));
}

//! Lanes [first, last) of a member's u lanes that one pack or unpack operation moves: the
//! lanes before its own lane j (send / receive regions), j itself (its staged arenas), the
//! lanes after j. In lane order, so that unpacks adding into shared K/V heads sum in lane
//! order. Empty spans are left out.
struct lane_span {
  std::int32_t first = 0, last = 0;
  bool own = false;
};
[[nodiscard]] inline std::vector<lane_span> lane_spans(std::int32_t u, std::int32_t j) {
  std::vector<lane_span> out;
  if (j > 0) out.push_back({0, j, false});
  out.push_back({j, j + 1, true});
  if (j + 1 < u) out.push_back({j + 1, u, false});
  return out;
}

//! `runs` with `offset` added to their destination rows.
[[nodiscard]] inline std::vector<row_run> shifted(std::vector<row_run> runs, token_count offset) {
  for (row_run& r : runs) r.to_row += offset;
  return runs;
}
//! `runs` from `to` back to `from`.
[[nodiscard]] inline std::vector<row_run> inverted(std::vector<row_run> runs) {
  for (row_run& r : runs) std::swap(r.from_row, r.to_row);
  return runs;
}

//! What moves: a rank tensor, its row kind, whether it holds K/V heads (else query heads)
//! and whether its lane arena holds the whole group's rows (K/V) or the subgroup's (queries).
struct stream_of_rows {
  tensor_kind home;
  row_kind kind;
  bool kv;
};

//! The streams of one direction that travel together: one payload per peer, whose rows hold
//! each stream's heads one after another (`offsets`, in stream order). Rows of one element
//! size share a bundle: Q, K, V, O, dO (the element type; the bundle's row kind is q) and
//! dK, dV (accumulators, dkv); LSE (one accumulator per head) travels alone. One payload
//! instead of one per tensor: fewer sends per peer, as a fused QKV all-to-all does.
struct stream_bundle {
  row_kind kind = row_kind::q;
  std::vector<std::size_t> streams;    //!< indices into the direction's streams, ascending
  std::vector<std::int32_t> offsets;   //!< per stream of the bundle: its first head in a row
  std::int32_t heads = 0;              //!< heads of a row: the streams' widths summed
};

//! Bundles of `streams`, whose widths (heads per row) are `width(x)`, in order of their first
//! stream; bundle_of[x] names the bundle of stream x and slot_of[x] its place there.
struct stream_bundles {
  std::vector<stream_bundle> bundles;
  std::vector<std::size_t> bundle_of, slot_of;
  //! Stream x's first head in a row of its bundle.
  [[nodiscard]] std::int32_t head_of(std::size_t x) const { return bundles[bundle_of[x]].offsets[slot_of[x]]; }
  //! Whether stream x travels alone (its bundle's rows are its own rows).
  [[nodiscard]] bool alone(std::size_t x) const { return bundles[bundle_of[x]].streams.size() == 1; }
};
template <class Width>
[[nodiscard]] stream_bundles bundle_streams(const std::vector<stream_of_rows>& streams, Width&& width) {
  const auto bundle_kind = [](row_kind k) { return k == row_kind::kv ? row_kind::q : k; };  // K/V rows travel with query rows
  stream_bundles out;
  for (std::size_t x = 0; x < streams.size(); ++x) {
    const row_kind kind = bundle_kind(streams[x].kind);
    auto it = std::find_if(out.bundles.begin(), out.bundles.end(), [&](const stream_bundle& b) { return b.kind == kind; });
    if (it == out.bundles.end()) it = out.bundles.insert(out.bundles.end(), stream_bundle{kind, {}, {}, 0});
    out.bundle_of.push_back(static_cast<std::size_t>(it - out.bundles.begin()));
    out.slot_of.push_back(it->streams.size());
    it->streams.push_back(x);
    it->offsets.push_back(it->heads);
    it->heads += width(streams[x]);
  }
  return out;
}

inline void build_all_to_all(level_work& w, const std::vector<const group_layout*>& groups, pass_kind pass,
                             const execution_program& prog, const arena_allocator& allocate, const wire_format& wire) {
  if (groups.empty()) return;
  const bool backward = pass == pass_kind::backward;
  const level_members lm = lay_out_members(groups, prog.shard_row, prog.num_ranks(), [](const group_layout&) { return token_count{0}; });
  const auto arena = [](std::int32_t a) { return buffer_ref::arena(a); };
  const auto tensor = [](tensor_kind t) { return buffer_ref::tensor(t); };

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
    const group_layout& s = *groups[gi];
    const std::int32_t G = s.size(), u = ulysses_degree(wire, G), r = G / u;
    std::vector<lane_heads> lanes;
    for (std::int32_t j = 0; j < u; ++j) lanes.push_back(lane_of(wire, u, j));
    const std::int32_t n = lanes.front().heads, kvn = lanes.front().kv_heads;
    const auto width = [&](const stream_of_rows& x) { return x.kv ? kvn : n; };
    const auto first_head = [&](const stream_of_rows& x, std::int32_t j) {
      return x.kv ? lanes[static_cast<std::size_t>(j)].kv_first : lanes[static_cast<std::size_t>(j)].first;
    };
    const stream_bundles in_bundles = bundle_streams(in, width), out_bundles = bundle_streams(out, width);
    const auto at = [](std::int32_t x) { return static_cast<std::size_t>(x); };
    std::vector<token_count> place(at(G) + 1, 0);
    for (std::int32_t o = 0; o < G; ++o) place[at(o) + 1] = place[at(o)] + s.buffer_tokens[at(o)];
    const auto tokens_of = [&](std::int32_t o) { return s.buffer_tokens[at(o)]; };
    const auto sub = [&](std::int32_t i) { return ((i % r) + r) % r; };                       // subgroup index mod r
    const auto sub_rows = [&](std::int32_t i) { return place[at(i * u + u)] - place[at(i * u)]; };
    // the row of member o's first token in its subgroup's member-major rows (the all-to-all's)
    const auto member_row = [&](std::int32_t o) { return place[at(o)] - place[at(o / u * u)]; };
    token_count largest_sub = 0;
    for (std::int32_t i = 0; i < r; ++i) largest_sub = std::max(largest_sub, sub_rows(i));
    std::vector<subgroup_rows> subgroups;
    const std::vector<sequence_index> shared = shared_sequences(s, u);
    for (std::int32_t i = 0; i < r; ++i) subgroups.push_back(subgroup_rows_of(s, i * u, u, shared));
    // [subgroup][round k]: its queries against the keys of subgroup i - k, shared by its u lanes
    std::vector<std::vector<block_list>> round_blocks(at(r));
    for (std::int32_t i = 0; i < r; ++i)
      for (std::int32_t k = 0; k < r; ++k) {
        const std::int32_t origin = sub(i - k);
        round_blocks[at(i)].push_back(subgroup_blocks(subgroups[at(i)], subgroups[at(origin)], place[at(origin * u)]));
      }
    // member-major -> sequence-major rows of a lane arena of subgroup i (K/V arenas hold every
    // subgroup, subgroup i from row place(i u)), and back: one list per subgroup and direction,
    // shared by its members' copies ([0] query arenas, [1] K/V arenas)
    struct subgroup_permutes {
      run_list in[2], home[2];
    };
    std::vector<subgroup_permutes> permutes(at(r));
    for (std::int32_t i = 0; i < r; ++i)
      for (const bool kv : {false, true}) {
        std::vector<row_run> runs = shifted(subgroups[at(i)].permute, kv ? place[at(i * u)] : 0);
        permutes[at(i)].home[kv] = inverted(runs);
        permutes[at(i)].in[kv] = std::move(runs);
      }

    // arenas: lane arenas [position][stream], sequence-major; staged, send and receive arenas
    // [position][bundle], member-major
    std::vector<std::vector<std::int32_t>> lane_in(at(G)), lane_out(at(G)), staged_in(at(G)), staged_out(at(G)), send(at(G)),
        receive(at(G)), partial_in(at(G));
    for (std::int32_t p = 0; p < G; ++p) {
      const rank_index rank = s.ranks[at(p)];
      const token_count b = tokens_of(p), mine = sub_rows(p / u);
      for (const stream_of_rows& x : in) lane_in[at(p)].push_back(allocate(rank, x.kind, x.kv ? place.back() : mine, width(x)));
      for (const stream_bundle& x : in_bundles.bundles) {
        staged_in[at(p)].push_back(allocate(rank, x.kind, mine, x.heads));
        send[at(p)].push_back(allocate(rank, x.kind, b * u, x.heads));
      }
      for (const stream_of_rows& x : out) {
        lane_out[at(p)].push_back(allocate(rank, x.kind, x.kv ? place.back() : mine, width(x)));
        if (x.kv && r > 1) partial_in[at(p)].push_back(allocate(rank, x.kind, largest_sub, width(x)));
      }
      for (const stream_bundle& x : out_bundles.bundles) {
        staged_out[at(p)].push_back(allocate(rank, x.kind, mine, x.heads));
        receive[at(p)].push_back(allocate(rank, x.kind, b * u, x.heads));
      }
    }
    // rows between a bundle arena and a stream's own arena: the whole row when the bundle
    // holds that stream alone, else the stream's heads of it (`move` names where they start)
    const auto between = [](bool alone, buffer_ref from, buffer_ref to, head_move move, std::int32_t heads, const run_list& runs) -> op_body {
      if (alone) return copy_rows{from, to, runs};
      copy_heads c;
      c.from = from, c.to = to, c.heads = heads, c.moves = {move}, c.runs = runs;
      return c;
    };

    for (std::int32_t p = 0; p < G; ++p) {
      const member& me = lm.of[gi][at(p)];
      const rank_index rank = me.rank;
      const std::int32_t i = p / u, j = p % u, next = sub(i + 1) * u + j;
      const token_count b = tokens_of(p);
      const auto P = at(p);
      // slot 0: pack every lane's heads of each tensor into its bundle (lanes before j, j into
      // the staged arena, lanes after j: three operations per tensor); round 0: the
      // all-to-all inside the subgroup, one payload per bundle and peer
      const run_list gather = gather_runs(me, 0), scatter = scatter_runs(me, 0);  // shared by every pack / unpack
      for (std::size_t x = 0; x < in.size(); ++x) {
        const std::size_t bx = in_bundles.bundle_of[x];
        for (const lane_span& ls : lane_spans(u, j)) {
          copy_heads pack;
          pack.from = tensor(in[x].home);
          pack.to = arena(ls.own ? staged_in[P][bx] : send[P][bx]);
          pack.heads = width(in[x]);
          for (std::int32_t l = ls.first; l < ls.last; ++l)
            pack.moves.push_back({first_head(in[x], l), in_bundles.head_of(x), 0, ls.own ? member_row(p) : l * b});
          pack.runs = gather;
          w.at(rank, 0).pre.push_back({std::move(pack), -1});
        }
      }
      for (std::size_t bx = 0; bx < in_bundles.bundles.size(); ++bx) {
        const stream_bundle& x = in_bundles.bundles[bx];
        for (std::int32_t l = 0; l < u; ++l)
          if (l != j)
            w.send(0, rank, s.ranks[at(i * u + l)],
                   {arena(send[P][bx]), l * b, arena(staged_in[at(i * u + l)][bx]), member_row(p), b, x.kind, x.heads},
                   wire.row_bytes(x.kind, x.heads));
      }
      // rounds 0 .. r - 1: the subgroup's queries against the keys of subgroup i - k
      for (std::int32_t k = 0; k < r; ++k) {
        if (k > 0)  // the K/V of subgroup i - k + 1 on to the next member of the lane's ring
          for (std::size_t x = 1; x <= 2; ++x) {
            const std::int32_t passed = sub(i - k + 1);
            const token_count row = place[at(passed * u)];
            w.send(k, rank, s.ranks[at(next)], {arena(lane_in[P][x]), row, arena(lane_in[at(next)][x]), row, sub_rows(passed), in[x].kind, kvn},
                   wire.row_bytes(in[x].kind, kvn));
          }
        round_work& compute = w.at(rank, k + 1);
        if (k == 0) {
          // what the all-to-all delivered, each tensor into its lane arena, sequence-major; the
          // outputs cleared
          for (std::size_t x = 0; x < in.size(); ++x) {
            const std::size_t bx = in_bundles.bundle_of[x];
            compute.pre.push_back({between(in_bundles.alone(x), arena(staged_in[P][bx]), arena(lane_in[P][x]),
                                           {in_bundles.head_of(x), 0, 0, 0}, width(in[x]), permutes[at(i)].in[in[x].kv]),
                                   0});
          }
          for (std::size_t x = 0; x < out.size(); ++x)
            compute.pre.push_back({zero_rows{arena(lane_out[P][x]), 0, out[x].kv ? place.back() : sub_rows(i)}, -1});
        }
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
        req.waits = k;
        req.blocks = round_blocks[at(i)][at(k)];
        if (!req.blocks.empty()) compute.launches.push_back(std::move(req));
      }
      // backward, rounds r .. 2r - 2: reduce-scatter the dK/dV partials over the lane's ring
      std::int32_t home_round = r;
      if (backward) {
        for (std::int32_t t = 0; t + 1 < r; ++t) {
          const std::int32_t k = r + t, sent = sub(i - t - 1), received = sub(i - t - 2);
          for (std::size_t x = 1; x <= 2; ++x) {
            w.send(k, rank, s.ranks[at(next)],
                   {arena(lane_out[P][x]), place[at(sent * u)], arena(partial_in[at(next)][x - 1]), 0, sub_rows(sent), out[x].kind, kvn},
                   wire.row_bytes(out[x].kind, kvn));
            w.at(rank, k + 1).post.push_back(
                {add_rows{arena(partial_in[P][x - 1]), arena(lane_out[P][x]), {{0, place[at(received * u)], sub_rows(received)}}}, k});
          }
        }
        home_round = 2 * r - 1;
      }
      // the last round: every subgroup member's rows of this lane go home, member-major again,
      // one payload per bundle and peer
      for (std::size_t x = 0; x < out.size(); ++x) {
        const std::size_t bx = out_bundles.bundle_of[x];
        w.at(rank, home_round)
            .post.push_back({between(out_bundles.alone(x), arena(lane_out[P][x]), arena(staged_out[P][bx]),
                                     {0, out_bundles.head_of(x), 0, 0}, width(out[x]), permutes[at(i)].home[out[x].kv]),
                             home_round - 1});
      }
      for (std::size_t bx = 0; bx < out_bundles.bundles.size(); ++bx) {
        const stream_bundle& x = out_bundles.bundles[bx];
        for (std::int32_t o = i * u; o < i * u + u; ++o) {
          if (o == p) continue;
          w.send(home_round, rank, s.ranks[at(o)],
                 {arena(staged_out[P][bx]), member_row(o), arena(receive[at(o)][bx]), j * tokens_of(o), tokens_of(o), x.kind, x.heads},
                 wire.row_bytes(x.kind, x.heads));
        }
      }
      // after it: unpack every lane into the rank's tensors (forward: overwrite O and LSE,
      // which only this group writes; backward: add, so that shared K/V heads sum)
      auto& home = w.at(rank, home_round + 1).post;
      for (std::size_t x = 0; x < out.size(); ++x) {
        const std::size_t bx = out_bundles.bundle_of[x];
        for (const lane_span& ls : lane_spans(u, j)) {
          head_runs unpack;
          unpack.from = arena(ls.own ? staged_out[P][bx] : receive[P][bx]);
          unpack.to = tensor(out[x].home);
          unpack.heads = width(out[x]);
          for (std::int32_t l = ls.first; l < ls.last; ++l)
            unpack.moves.push_back({out_bundles.head_of(x), first_head(out[x], l), ls.own ? member_row(p) : l * b, 0});
          unpack.runs = scatter;
          if (backward) home.push_back({add_heads{std::move(unpack)}, home_round});
          else home.push_back({copy_heads{std::move(unpack)}, home_round});
        }
      }
    }
  }
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
