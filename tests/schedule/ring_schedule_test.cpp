// tests/schedule/ring_schedule_test.cpp
// make_ring_schedule (schedule/ring_schedule.hpp, over make_group_layout of
// schedule/group_layout.hpp) on zigzag layouts (even and uneven chunks,
// one or several sequences, as TE's global ring) and on random layouts (random cuts, random
// owners, shuffled placement order). Brute force over every (q, k) position pair: every causal
// pair of every sequence is computed exactly once over the (position, origin) pairs, and
// nothing else; blocks are well-formed and point at the right rows. The collectives that move
// K/V and dK/dV between positions are checked in tests/program.
#include "../support/subscript.hpp"

#include <catch2/catch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>
#include <zeppelin/schedule/zigzag.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <vector>

using namespace zeppelin;

namespace {

using zeppelin_test::at;

struct fixture {
  plan p;
  batch b;
  group_index g = 0;
};

// A plan of `ranks` ranks; group 0 = `ring` (ring order); a decoy group 1 on the other ranks
// (or the same ones) holding an extra sequence, so the builder must filter by group.
plan empty_plan(rank_index ranks, const std::vector<rank_index>& ring) {
  plan p;
  p.method = "test";
  p.nodes = 1;
  p.gpus_per_node = ranks;
  p.capacity = 1 << 30;
  p.placements.resize(at(ranks));
  p.groups.push_back({0, ring.size() > 1 ? zone_kind::intra_node : zone_kind::local, ring});
  return p;
}

std::vector<rank_index> random_ring(random_generator& rng, rank_index ranks, std::int32_t G) {
  std::vector<rank_index> all(at(ranks));
  std::iota(all.begin(), all.end(), 0);
  rng.shuffle(all.begin(), all.end());
  all.resize(at(G));
  return all;
}

// zigzag layout of every sequence over the ring; `merge_middle` stores the adjacent chunks of
// position G-1 as one shard.
fixture zigzag_fixture(const std::vector<token_count>& lengths, std::int32_t G, rank_index ranks,
                       const std::vector<rank_index>& ring, bool merge_middle) {
  fixture f{empty_plan(ranks, ring), batch(lengths), 0};
  for (sequence_index s = 0; s < f.b.size(); ++s)
    for (std::int32_t i = 0; i < G; ++i) {
      const zigzag_pair z = zigzag_chunks(f.b.length(s), G, i);
      auto& shards = f.p.placements[at(ring[at(i)])].shards;
      if (merge_middle && i == G - 1 && !(z.head.empty() && z.tail.empty())) {
        shards.push_back({s, {z.head.begin, z.tail.end}, 0, 0});
        continue;
      }
      if (!z.head.empty()) shards.push_back({s, z.head, 0, 0});
      if (!z.tail.empty()) shards.push_back({s, z.tail, 0, 0});
    }
  return f;
}

// random cuts, random owners in the ring, shuffled placement order
fixture random_fixture(random_generator& rng, const std::vector<token_count>& lengths, rank_index ranks,
                       const std::vector<rank_index>& ring) {
  fixture f{empty_plan(ranks, ring), batch(lengths), 0};
  for (sequence_index s = 0; s < f.b.size(); ++s) {
    token_count begin = 0;
    while (begin < f.b.length(s)) {
      const token_count end = std::min(f.b.length(s), begin + rng.between(1, 1 + f.b.length(s) / 2));
      const rank_index owner = ring[at(static_cast<std::int64_t>(rng.below(ring.size())))];
      f.p.placements[at(owner)].shards.push_back({s, {begin, end}, 0, 0});
      begin = end;
    }
  }
  for (auto& pl : f.p.placements) rng.shuffle(pl.shards.begin(), pl.shards.end());
  return f;
}

// a decoy: another group, another sequence, other micro-batch shards: all must be ignored
void add_decoys(fixture& f, rank_index ranks) {
  std::vector<token_count> lengths(f.b.lengths().begin(), f.b.lengths().end());
  lengths.push_back(9);
  f.b = batch(lengths);
  const sequence_index extra = f.b.size() - 1;
  f.p.groups.push_back({1, zone_kind::local, {ranks - 1}});
  f.p.placements[at(ranks - 1)].shards.insert(f.p.placements[at(ranks - 1)].shards.begin(), shard{extra, {0, 9}, 1, 0});
}

// the row of `pos` inside the buffer `layout`: the slot holding [range) of seq at that row
bool maps_to(const std::vector<group_shard>& layout, sequence_index seq, token_range range, token_count row) {
  for (const group_shard& sl : layout)
    if (sl.seq == seq && sl.range.begin <= range.begin && range.end <= sl.range.end)
      return row == sl.row + (range.begin - sl.range.begin);
  return false;
}

// every structural property of a schedule
void check_schedule(const fixture& f, const ring_schedule& s) {
  const plan& p = f.p;
  const ring_group& grp = p.groups[at(f.g)];
  const auto G = static_cast<std::int32_t>(grp.ranks.size());
  const auto wrap = [G](std::int64_t x) { return static_cast<std::int32_t>(((x % G) + G) % G); };
  REQUIRE(s.size() == G);
  REQUIRE(s.rounds() == G);
  REQUIRE(s.ranks == grp.ranks);
  REQUIRE(s.collective == grp.collective);

  // layout: exactly the rank's shards of the group, in placement order, rows packed
  for (std::int32_t r = 0; r < G; ++r) {
    const auto& shards = p.placements[at(grp.ranks[at(r)])].shards;
    token_count row = 0;
    std::size_t next = 0;
    for (std::size_t i = 0; i < shards.size(); ++i) {
      if (shards[i].group != f.g) continue;
      REQUIRE(next < s.layout[at(r)].size());
      const group_shard& sl = s.layout[at(r)][next++];
      REQUIRE(sl.shard == static_cast<std::int32_t>(i));
      REQUIRE(sl.seq == shards[i].seq);
      REQUIRE(sl.range == shards[i].range);
      REQUIRE(sl.row == row);
      row += sl.range.size();
    }
    REQUIRE(next == s.layout[at(r)].size());
    REQUIRE(s.buffer_tokens[at(r)] == row);
  }

  // exact cover of the causal pairs, by brute force over positions
  std::map<sequence_index, std::vector<int>> hits;  // seq -> L*L counters
  for (const auto& grp_shards : s.layout)
    for (const group_shard& sl : grp_shards) hits[sl.seq].assign(at(f.b.length(sl.seq) * f.b.length(sl.seq)), 0);
  for (std::int32_t k = 0; k < G; ++k)
    for (std::int32_t r = 0; r < G; ++r) {
      const forward_step st = s.step(k, r);
      REQUIRE(st.position == r);
      REQUIRE(st.rank == grp.ranks[at(r)]);
      REQUIRE(st.kv_origin == wrap(r - k));
      std::int64_t pairs = 0;
      for (const attention_block& blk : st.blocks) {
        REQUIRE(!blk.q.empty());
        REQUIRE(!blk.k.empty());
        REQUIRE(blk.mask != block_mask::none);
        if (blk.mask == block_mask::causal) REQUIRE(blk.q == blk.k);
        if (blk.mask == block_mask::full) REQUIRE(blk.k.end - 1 <= blk.q.begin);
        REQUIRE(classify_block(blk.q, blk.k) == blk.mask);
        REQUIRE(maps_to(s.layout[at(r)], blk.seq, blk.q, blk.q_row));
        REQUIRE(maps_to(s.layout[at(st.kv_origin)], blk.seq, blk.k, blk.kv_row));
        const token_count L = f.b.length(blk.seq);
        auto& h = hits[blk.seq];
        for (token_count x = blk.q.begin; x < blk.q.end; ++x)
          for (token_count y = blk.k.begin; y < blk.k.end; ++y)
            if (blk.mask == block_mask::full || y <= x) ++h[at(x * L + y)];
        pairs += block_pairs(blk.q, blk.k, blk.mask);
      }
      REQUIRE(step_pairs(st) == pairs);
    }
  for (const auto& [seq, h] : hits) {
    const token_count L = f.b.length(seq);
    for (token_count x = 0; x < L; ++x)
      for (token_count y = 0; y < L; ++y) {
        INFO("seq " << seq << " q " << x << " k " << y);
        REQUIRE(h[at(x * L + y)] == (y <= x ? 1 : 0));
      }
  }

  // blocks(p, o) is round (p - o) mod G at p; per origin, the keys' pairs add up to the batch's
  std::int64_t by_origin = 0;
  for (std::int32_t r = 0; r < G; ++r)
    for (std::int32_t o = 0; o < G; ++o) {
      const forward_step st = s.step(wrap(r - o), r);
      REQUIRE(st.kv_origin == o);
      REQUIRE(s.blocks(r, o).data() == st.blocks.data());
      REQUIRE(s.blocks(r, o).size() == st.blocks.size());
      for (const attention_block& blk : s.blocks(r, o)) by_origin += block_pairs(blk.q, blk.k, blk.mask);
    }
  std::int64_t total = 0;
  for (const auto& [seq, h] : hits) total += causal_pairs(f.b.length(seq));
  REQUIRE(by_origin == total);
}

// check_schedule on group 0's schedule, and the layout alone (what the all-to-all collective
// builds): it is the schedule's layout, it holds every shard of the group, and the blocks over
// it are the schedule's
void check_schedule_and_layout(const fixture& f) {
  const ring_schedule s = make_ring_schedule(f.p, f.b, 0);
  check_schedule(f, s);
  const group_layout layout = make_group_layout(f.p, f.b, 0);
  CHECK(layout == static_cast<const group_layout&>(s));
  std::size_t shards = 0;
  for (const placement& pl : f.p.placements)
    shards += static_cast<std::size_t>(std::count_if(pl.shards.begin(), pl.shards.end(), [](const shard& x) { return x.group == 0; }));
  CHECK(layout.shard_count() == shards);
  CHECK(make_ring_schedule(layout) == s);
}

}  // namespace

TEST_CASE("ring schedule covers every causal pair once on zigzag layouts", "[schedule][ring]") {
  random_generator rng(31, 1);
  for (int t = 0; t < 150; ++t) {
    const auto G = static_cast<std::int32_t>(rng.between(1, 6));
    const rank_index ranks = G + static_cast<rank_index>(rng.between(0, 2));
    const auto nseq = rng.between(1, 3);
    std::vector<token_count> lengths;
    for (std::int64_t j = 0; j < nseq; ++j) lengths.push_back(rng.between(1, 30));  // includes L < 2G and L = 1
    fixture f = zigzag_fixture(lengths, G, ranks, random_ring(rng, ranks, G), rng.below(2) == 1);
    if (ranks > G && rng.below(2) == 1) add_decoys(f, ranks);
    INFO("t=" << t << " G=" << G);
    check_schedule_and_layout(f);
  }
}

TEST_CASE("ring schedule covers every causal pair once on arbitrary layouts", "[schedule][ring]") {
  random_generator rng(32, 2);
  for (int t = 0; t < 150; ++t) {
    const auto G = static_cast<std::int32_t>(rng.between(1, 5));
    const rank_index ranks = G + static_cast<rank_index>(rng.between(0, 2));
    const auto nseq = rng.between(1, 3);
    std::vector<token_count> lengths;
    for (std::int64_t j = 0; j < nseq; ++j) lengths.push_back(rng.between(1, 24));
    fixture f = random_fixture(rng, lengths, ranks, random_ring(rng, ranks, G));
    if (ranks > G) add_decoys(f, ranks);
    INFO("t=" << t << " G=" << G);
    check_schedule_and_layout(f);
  }
}

TEST_CASE("ring schedule reproduces TE's causal / lower / upper table on zigzag", "[schedule][ring]") {
  random_generator rng(33, 3);
  for (int t = 0; t < 100; ++t) {
    const auto G = static_cast<std::int32_t>(rng.between(2, 8));
    const token_count L = t % 2 == 0 ? 2 * G * rng.between(1, 20) : rng.between(2 * G, 400);  // even and uneven chunks
    std::vector<rank_index> ring(at(G));
    std::iota(ring.begin(), ring.end(), 0);
    const fixture f = zigzag_fixture({L}, G, G, ring, false);
    const ring_schedule s = make_ring_schedule(f.p, f.b, 0);
    for (std::int32_t k = 0; k < G; ++k)
      for (std::int32_t r = 0; r < G; ++r) {
        const forward_step st = s.step(k, r);
        const zigzag_pair mine = zigzag_chunks(L, G, r), theirs = zigzag_chunks(L, G, st.kv_origin);
        INFO("L=" << L << " G=" << G << " k=" << k << " r=" << r);
        std::vector<attention_block> expected;
        const auto blk = [&](token_range q, token_range kk, block_mask m, token_count q_row, token_count kv_row) {
          expected.push_back({0, q, kk, m, q_row, kv_row});
        };
        const token_count head_q = 0, tail_q = mine.head.size(), head_k = 0, tail_k = theirs.head.size();
        // a one-token diagonal is exactly a full block: the schedule names it so
        const auto diagonal = [](token_range c) { return c.size() == 1 ? block_mask::full : block_mask::causal; };
        if (k == 0) {  // causal on the local chunks
          blk(mine.head, mine.head, diagonal(mine.head), head_q, head_k);
          blk(mine.tail, mine.head, block_mask::full, tail_q, head_k);
          blk(mine.tail, mine.tail, diagonal(mine.tail), tail_q, tail_k);
        } else if (k <= r) {  // lower: Q_local x head chunk of the KV, full
          blk(mine.head, theirs.head, block_mask::full, head_q, head_k);
          blk(mine.tail, theirs.head, block_mask::full, tail_q, head_k);
        } else {  // upper: tail chunk of Q x KV, full
          blk(mine.tail, theirs.head, block_mask::full, tail_q, head_k);
          blk(mine.tail, theirs.tail, block_mask::full, tail_q, tail_k);
        }
        REQUIRE(std::vector<attention_block>(st.blocks.begin(), st.blocks.end()) == expected);
      }
    // the group buffer of a position is its zigzag pair
    for (std::int32_t r = 0; r < G; ++r)
      REQUIRE(s.buffer_tokens[at(r)] == zigzag_chunks(L, G, r).head.size() + zigzag_chunks(L, G, r).tail.size());
  }
}

TEST_CASE("ring schedule of a single rank has one round", "[schedule][ring]") {
  const fixture f = zigzag_fixture({7, 3}, 1, 2, {1}, false);
  const ring_schedule s = make_ring_schedule(f.p, f.b, 0);
  REQUIRE(s.rounds() == 1);
  CHECK(step_pairs(s.step(0, 0)) == causal_pairs(7) + causal_pairs(3));
  check_schedule(f, s);
}

TEST_CASE("ring schedule stores only the pairs that compute", "[schedule][ring]") {
  // a global ring of 512 ranks holding 4096 one-token sequences: every sequence sits on one
  // position, so only the diagonal pairs (p, p) compute; G^2 steps are never materialised
  constexpr std::int32_t G = 512;
  std::vector<rank_index> ring(at(G));
  std::iota(ring.begin(), ring.end(), 0);
  fixture f{empty_plan(G, ring), batch(std::vector<token_count>(8 * G, 1)), 0};
  for (sequence_index s = 0; s < f.b.size(); ++s)
    f.p.placements[at(s % G)].shards.push_back({s, {0, 1}, 0});
  const ring_schedule s = make_ring_schedule(f.p, f.b, 0);
  REQUIRE(s.pair_key.size() == static_cast<std::size_t>(G));
  REQUIRE(s.block_count() == static_cast<std::size_t>(8 * G));
  for (std::int32_t r = 0; r < G; r += 37) {
    CHECK(s.blocks(r, r).size() == 8);
    CHECK(s.blocks(r, (r + 1) % G).empty());
    CHECK(s.step(1, r).blocks.empty());
  }
  check_schedule(f, s);
}

TEST_CASE("ring schedule rejects bad plans with the offending numbers", "[schedule][ring]") {
  std::vector<rank_index> ring{0, 1, 2};
  SECTION("unknown group") {
    const fixture f = zigzag_fixture({12}, 3, 3, ring, false);
    try {
      (void)make_ring_schedule(f.p, f.b, 4);
      FAIL("no throw");
    } catch (const invalid_argument& e) {
      CHECK(e.value("group") == 4.0);
    }
    CHECK_THROWS_AS(make_ring_schedule(f.p, f.b, -1), invalid_argument);
  }
  SECTION("shard on a rank outside the group") {
    fixture f = zigzag_fixture({12}, 3, 4, ring, false);
    f.p.placements[3].shards.push_back(f.p.placements[0].shards.back());
    f.p.placements[0].shards.pop_back();
    try {
      (void)make_ring_schedule(f.p, f.b, 0);
      FAIL("no throw");
    } catch (const invalid_argument& e) {
      CHECK(e.value("rank") == 3.0);
    }
  }
  SECTION("shards that do not tile the sequence") {
    fixture f = zigzag_fixture({12}, 3, 3, ring, false);
    f.p.placements[1].shards.pop_back();  // a hole
    CHECK_THROWS_AS(make_ring_schedule(f.p, f.b, 0), invalid_argument);
    fixture d = zigzag_fixture({12}, 3, 3, ring, false);
    d.p.placements[2].shards.push_back(d.p.placements[0].shards.front());  // a token held twice
    CHECK_THROWS_AS(make_ring_schedule(d.p, d.b, 0), invalid_argument);
  }
  SECTION("repeated rank in the ring") {
    fixture f = zigzag_fixture({12}, 3, 3, ring, false);
    f.p.groups[0].ranks = {0, 1, 1};
    CHECK_THROWS_AS(make_ring_schedule(f.p, f.b, 0), invalid_argument);
  }
  SECTION("shard outside its sequence") {
    fixture f = zigzag_fixture({12}, 3, 3, ring, false);
    f.p.placements[0].shards.front().range.end = 13;
    CHECK_THROWS_AS(make_ring_schedule(f.p, f.b, 0), invalid_argument);
  }
}

TEST_CASE("ring schedule reads only the requested micro-batch", "[schedule][ring]") {
  fixture f = zigzag_fixture({10, 6}, 2, 2, {0, 1}, false);
  for (auto& pl : f.p.placements)
    for (auto& sh : pl.shards) sh.micro_batch = sh.seq;  // sequence 1 runs in micro-batch 1
  const ring_schedule s0 = make_ring_schedule(f.p, f.b, 0, 0), s1 = make_ring_schedule(f.p, f.b, 0, 1);
  std::int64_t p0 = 0, p1 = 0;
  for (std::int32_t k = 0; k < s0.rounds(); ++k)
    for (std::int32_t r = 0; r < s0.size(); ++r) p0 += step_pairs(s0.step(k, r)), p1 += step_pairs(s1.step(k, r));
  CHECK(p0 == causal_pairs(10));
  CHECK(p1 == causal_pairs(6));
  CHECK(s1.micro_batch == 1);
}

TEST_CASE("append_blocks splits any pair of ranges into exact square-causal and full blocks", "[schedule][ring]") {
  // shards of one tiling never overlap partially; append_blocks is also public, so check it on all
  // small range pairs, partial overlaps included
  int checked = 0;
  for (token_count qb = 0; qb <= 6; ++qb)
    for (token_count qe = qb + 1; qe <= 7; ++qe)
      for (token_count kb = 0; kb <= 6; ++kb)
        for (token_count ke = kb + 1; ke <= 7; ++ke) {
          const group_shard q{0, {qb, qe}, 0, 100}, k{0, {kb, ke}, 1, 200};
          std::vector<attention_block> blocks;
          const std::int64_t pairs = append_blocks(q, k, blocks);
          INFO("q=[" << qb << "," << qe << ") k=[" << kb << "," << ke << ")");
          REQUIRE(pairs == causal_pairs(q.range, k.range));
          int hits[7][7] = {};
          for (const attention_block& blk : blocks) {
            REQUIRE(blk.mask != block_mask::none);
            if (blk.mask == block_mask::causal) REQUIRE(blk.q == blk.k);
            REQUIRE(classify_block(blk.q, blk.k) == blk.mask);
            REQUIRE((q.range.begin <= blk.q.begin && blk.q.end <= q.range.end));
            REQUIRE((k.range.begin <= blk.k.begin && blk.k.end <= k.range.end));
            REQUIRE(blk.q_row == 100 + blk.q.begin - qb);
            REQUIRE(blk.kv_row == 200 + blk.k.begin - kb);
            for (token_count x = blk.q.begin; x < blk.q.end; ++x)
              for (token_count y = blk.k.begin; y < blk.k.end; ++y)
                if (blk.mask == block_mask::full || y <= x) ++hits[x][y];
          }
          for (token_count x = 0; x < 7; ++x)
            for (token_count y = 0; y < 7; ++y) {
              const bool inside = qb <= x && x < qe && kb <= y && y < ke && y <= x;
              REQUIRE(hits[x][y] == (inside ? 1 : 0));
            }
          ++checked;
        }
  CHECK(checked == 28 * 28);
  std::vector<attention_block> none;
  CHECK(append_blocks({0, {0, 4}, 0, 0}, {1, {0, 4}, 0, 0}, none) == 0);  // other sequence
  CHECK(none.empty());
}
