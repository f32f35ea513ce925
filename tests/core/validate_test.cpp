// tests/core/validate_test.cpp
// find_violations() / validate() (core/validate.hpp). Random VALID plans (random batch and
// topology, each sequence cut into ranges over random ranks with a ring group holding
// them, capacity >= the largest load) must pass; then one mutation of each kind is applied
// to a copy and exactly that kind of violation must be reported (and thrown by validate()).
#include "../support/random_int.hpp"

#include <catch2/catch.hpp>

#include "support/sample_plan.hpp"
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/validate.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace zp = zeppelin;
using zp::violation_kind;

namespace {

const char* name(violation_kind k) {
  switch (k) {
    case violation_kind::shape_mismatch: return "shape_mismatch";
    case violation_kind::bad_capacity: return "bad_capacity";
    case violation_kind::shard_out_of_bounds: return "shard_out_of_bounds";
    case violation_kind::token_missing: return "token_missing";
    case violation_kind::token_duplicated: return "token_duplicated";
    case violation_kind::capacity_exceeded: return "capacity_exceeded";
    case violation_kind::group_id_mismatch: return "group_id_mismatch";
    case violation_kind::group_ranks_invalid: return "group_ranks_invalid";
    case violation_kind::group_zone_mismatch: return "group_zone_mismatch";
    case violation_kind::group_collective_unknown: return "group_collective_unknown";
    case violation_kind::group_unknown: return "group_unknown";
    case violation_kind::group_membership: return "group_membership";
    case violation_kind::sequence_group_inconsistent: return "sequence_group_inconsistent";
  }
  return "?";
}

}  // namespace

namespace Catch {
template <>
struct StringMaker<zp::violation_kind> {
  static std::string convert(zp::violation_kind k) { return name(k); }
};
}  // namespace Catch

namespace {

struct instance {
  zp::batch batch;
  zp::topology topology;
  zp::plan plan;
};

using zeppelin_test::pick;

zp::topology make_topology(int nodes, int gpus) {
  return zp::topology({"test", nodes, gpus, 1, {}, {100e9, 1e-6}, {10e9, 5e-6}, {"gpu", 1e15, 80e9, 3e12}});
}

zp::zone_kind zone_of(const zp::topology& t, const std::vector<zp::rank_index>& ranks) {
  if (ranks.size() == 1) return zp::zone_kind::local;
  const int node = t.node_of(ranks.front());
  for (auto r : ranks)
    if (t.node_of(r) != node) return zp::zone_kind::inter_node;
  return zp::zone_kind::intra_node;
}

// Largest token count of any (rank, micro-batch).
zp::token_count max_load(const zp::plan& p) {
  zp::token_count best = 0;
  for (const auto& pl : p.placements) {
    std::map<std::int32_t, zp::token_count> per_mb;
    for (const auto& s : pl.shards) per_mb[s.micro_batch] += s.range.size();
    for (const auto& [mb, n] : per_mb) best = std::max(best, n);
  }
  return best;
}

// A random plan that satisfies every invariant.
instance random_valid_instance(zp::random_generator& rng) {
  const int nodes = pick(rng, 1, 4), gpus = pick(rng, 1, 4);
  zp::topology t = make_topology(nodes, gpus);
  const int R = t.num_ranks();

  const auto n = static_cast<std::size_t>(pick(rng, 1, 12));
  const zp::token_count longest = rng.below(4) == 0 ? 2000 : 64;
  std::vector<zp::token_count> lengths(n);
  for (auto& len : lengths) len = rng.between(1, longest);
  zp::batch b(lengths);

  zp::plan p;
  p.method = "random";
  p.nodes = nodes;
  p.gpus_per_node = gpus;
  p.placements.resize(static_cast<std::size_t>(R));
  const int micro_batches = pick(rng, 1, 3);

  std::vector<zp::rank_index> all(static_cast<std::size_t>(R));
  std::iota(all.begin(), all.end(), 0);
  for (zp::sequence_index s = 0; s < b.size(); ++s) {
    const zp::token_count len = b.length(s);
    std::vector<zp::rank_index> ranks;
    zp::group_index group = zp::no_group;
    // sometimes reuse an existing multi-rank ring group for another sequence
    std::vector<zp::group_index> reusable;
    for (const auto& g : p.groups)
      if (g.ranks.size() >= 2) reusable.push_back(g.id);
    if (!reusable.empty() && len >= 2 && rng.below(3) == 0) {
      group = reusable[rng.below(reusable.size())];
      ranks = p.groups[static_cast<std::size_t>(group)].ranks;
      rng.shuffle(ranks.begin(), ranks.end());
      ranks.resize(static_cast<std::size_t>(rng.between(2, std::min<zp::token_count>(len, static_cast<zp::token_count>(ranks.size())))));
    } else {
      const auto k = static_cast<std::size_t>(rng.between(1, std::min<zp::token_count>({len, R, 5})));
      std::vector<zp::rank_index> order = all;
      rng.shuffle(order.begin(), order.end());
      ranks.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
      if (k >= 2 || rng.below(2) == 0) {
        group = static_cast<zp::group_index>(p.groups.size());
        p.groups.push_back({group, zone_of(t, ranks), ranks});
      }
    }
    // k - 1 distinct cut points in [1, len - 1]
    std::set<zp::token_count> cut_set;
    while (cut_set.size() + 1 < ranks.size()) cut_set.insert(rng.between(1, len - 1));
    std::vector<zp::token_count> cuts{0};
    cuts.insert(cuts.end(), cut_set.begin(), cut_set.end());
    cuts.push_back(len);
    const auto mb = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(micro_batches)));
    for (std::size_t j = 0; j < ranks.size(); ++j)
      p.placements[static_cast<std::size_t>(ranks[j])].shards.push_back({s, {cuts[j], cuts[j + 1]}, group, mb});
  }
  // unused but valid groups are allowed
  if (rng.below(4) == 0)
    p.groups.push_back({static_cast<zp::group_index>(p.groups.size()), zp::zone_kind::local,
                        {static_cast<zp::rank_index>(rng.below(static_cast<std::uint64_t>(R)))}});
  for (auto& pl : p.placements) rng.shuffle(pl.shards.begin(), pl.shards.end());
  p.capacity = max_load(p) + rng.between(0, 3);
  return {std::move(b), std::move(t), std::move(p)};
}

struct position {
  std::size_t rank, index;
};

std::vector<position> all_shards(const zp::plan& p) {
  std::vector<position> out;
  for (std::size_t r = 0; r < p.placements.size(); ++r)
    for (std::size_t i = 0; i < p.placements[r].shards.size(); ++i) out.push_back({r, i});
  return out;
}

std::vector<position> shards_of(const zp::plan& p, zp::sequence_index seq) {
  std::vector<position> out;
  for (const auto& pos : all_shards(p))
    if (p.placements[pos.rank].shards[pos.index].seq == seq) out.push_back(pos);
  return out;
}

zp::shard& at(zp::plan& p, position pos) { return p.placements[pos.rank].shards[pos.index]; }

// Sequences held by two or more ranks.
std::vector<zp::sequence_index> spread_sequences(const zp::plan& p, const zp::batch& b) {
  std::vector<zp::sequence_index> out;
  for (zp::sequence_index s = 0; s < b.size(); ++s) {
    std::set<std::size_t> ranks;
    for (const auto& pos : shards_of(p, s)) ranks.insert(pos.rank);
    if (ranks.size() >= 2) out.push_back(s);
  }
  return out;
}

template <class T>
const T& choose(zp::random_generator& rng, const std::vector<T>& v) {
  return v[static_cast<std::size_t>(rng.below(v.size()))];
}

// Every reported violation is of kind `k` (at least one is), and validate() throws it.
std::vector<zp::plan_violation> require_only(const instance& x, const zp::plan& p, violation_kind k) {
  const auto found = zp::find_violations(p, x.batch, x.topology);
  INFO("expected only " << name(k));
  REQUIRE_FALSE(found.empty());
  for (const auto& v : found) {
    INFO(v.message);
    REQUIRE(v.kind == k);
  }
  try {
    zp::validate(p, x.batch, x.topology);
    FAIL("validate() did not throw");
  } catch (const zp::invalid_plan& e) {
    REQUIRE(e.kind() == k);
    REQUIRE(std::string(e.what()).find(found.front().message) != std::string::npos);
  }
  return found;
}

enum class mutation {
  drop_shard,
  duplicate_shard,
  overlap_shards,
  shrink_capacity,
  out_of_bounds,
  wrong_shape,
  zero_capacity,
  group_id,
  group_ranks,
  zone_local_two_ranks,
  zone_intra_across_nodes,
  zone_inter_one_node,
  zone_flipped,
  unknown_collective,
  unknown_group,
  rank_not_in_group,
  split_without_group,
  mixed_groups,
  mixed_micro_batches,
  count
};

// Applies mutation `m` to a copy of x.plan and checks the report. Returns false when the
// instance is too small for the mutation (e.g. zone mismatch across nodes on one node).
bool mutate_and_check(zp::random_generator& rng, const instance& x, mutation m) {
  zp::plan p = x.plan;
  const zp::batch& b = x.batch;
  const zp::topology& t = x.topology;
  const int R = t.num_ranks(), P = t.gpus_per_node();
  const auto G = static_cast<zp::group_index>(p.groups.size());
  const auto shards = all_shards(p);
  const auto spread = spread_sequences(p, b);
  auto random_rank = [&] { return static_cast<zp::rank_index>(rng.below(static_cast<std::uint64_t>(R))); };

  switch (m) {
    case mutation::drop_shard: {
      const position pos = choose(rng, shards);
      const zp::shard s = at(p, pos);
      auto& v = p.placements[pos.rank].shards;
      v.erase(v.begin() + static_cast<std::ptrdiff_t>(pos.index));
      const auto found = require_only(x, p, violation_kind::token_missing);
      REQUIRE(found.size() == 1);
      CHECK(found[0].values.size() == 3);
      CHECK(found[0].values[0].value == s.seq);
      CHECK(found[0].values[1].value == static_cast<double>(s.range.begin));
      CHECK(found[0].values[2].value == static_cast<double>(s.range.end));
      return true;
    }
    case mutation::duplicate_shard: {
      const position pos = choose(rng, shards);
      const zp::shard s = at(p, pos);
      p.placements[pos.rank].shards.push_back(s);
      p.capacity += s.range.size();
      const auto found = require_only(x, p, violation_kind::token_duplicated);
      REQUIRE(found.size() == 1);
      CHECK(found[0].values[0].value == s.seq);
      CHECK(found[0].values[1].value == static_cast<double>(s.range.begin));
      CHECK(found[0].values[2].value == static_cast<double>(s.range.end));
      return true;
    }
    case mutation::overlap_shards: {  // grow a shard one token into its neighbour
      std::vector<position> inner;
      for (const auto& pos : shards)
        if (at(p, pos).range.end < b.length(at(p, pos).seq)) inner.push_back(pos);
      if (inner.empty()) return false;
      zp::shard& s = at(p, choose(rng, inner));
      const zp::token_count overlap_at = s.range.end;
      s.range.end += 1;
      p.capacity += 1;
      const auto found = require_only(x, p, violation_kind::token_duplicated);
      REQUIRE(found.size() == 1);
      CHECK(found[0].values[1].value == static_cast<double>(overlap_at));
      CHECK(found[0].values[2].value == static_cast<double>(overlap_at + 1));
      return true;
    }
    case mutation::shrink_capacity: {
      const zp::token_count load = max_load(p);
      if (load < 2) return false;  // capacity 0 is a different violation
      p.capacity = load - 1;
      for (const auto& v : require_only(x, p, violation_kind::capacity_exceeded)) {
        CHECK(v.values.back().value == static_cast<double>(load - 1));
        CHECK(v.values[2].value > static_cast<double>(load - 1));  // tokens
      }
      return true;
    }
    case mutation::out_of_bounds: {  // an extra shard outside its sequence
      const zp::sequence_index s = static_cast<zp::sequence_index>(rng.below(static_cast<std::uint64_t>(b.size())));
      const zp::token_count len = b.length(s);
      std::array<zp::shard, 8> bad{{
          {b.size(), {0, 1}, zp::no_group, 0},      // no such sequence
          {-1, {0, 1}, zp::no_group, 0},            // negative sequence
          {s, {len, len + 1}, zp::no_group, 0},     // past the end
          {s, {0, len + 1}, zp::no_group, 0},       // overhangs the end
          {s, {-1, 1}, zp::no_group, 0},            // negative begin
          {s, {0, 0}, zp::no_group, 0},             // empty
          {s, {1, 0}, zp::no_group, 0},             // reversed
          {s, {0, 1}, zp::no_group, -1},            // negative micro-batch
      }};
      const zp::shard extra = bad[rng.below(bad.size())];
      p.placements[static_cast<std::size_t>(random_rank())].shards.push_back(extra);
      const auto found = require_only(x, p, violation_kind::shard_out_of_bounds);
      REQUIRE(found.size() == 1);
      return true;
    }
    case mutation::wrong_shape: {
      switch (rng.below(5)) {
        case 0: p.nodes += 1; break;
        case 1: p.gpus_per_node += 1; break;
        case 2: p.placements.emplace_back(); break;
        case 3: p.placements.pop_back(); break;
        default:  // same rank count, transposed shape
          if (p.nodes == p.gpus_per_node) return false;
          std::swap(p.nodes, p.gpus_per_node);
      }
      REQUIRE(require_only(x, p, violation_kind::shape_mismatch).size() == 1);
      return true;
    }
    case mutation::zero_capacity: {
      p.capacity = rng.below(2) == 0 ? 0 : -rng.between(1, 100);
      const auto found = require_only(x, p, violation_kind::bad_capacity);
      REQUIRE(found.size() == 1);
      CHECK(found[0].values[0].value == static_cast<double>(p.capacity));
      return true;
    }
    case mutation::group_id: {
      if (G == 0) return false;
      const auto g = static_cast<std::size_t>(rng.below(static_cast<std::uint64_t>(G)));
      p.groups[g].id = rng.below(2) == 0 ? -1 : static_cast<zp::group_index>(g) + pick(rng, 1, 5);
      REQUIRE(require_only(x, p, violation_kind::group_id_mismatch).size() == 1);
      return true;
    }
    case mutation::group_ranks: {
      const auto variant = rng.below(5);
      if (variant == 0) {
        p.groups.push_back({G, zp::zone_kind::local, {}});  // empty
      } else if (variant == 1) {
        p.groups.push_back({G, zp::zone_kind::local, {static_cast<zp::rank_index>(R)}});  // out of range
      } else if (variant == 2) {
        p.groups.push_back({G, zp::zone_kind::local, {-1}});
      } else {
        if (G == 0) return false;
        auto& g = p.groups[static_cast<std::size_t>(rng.below(static_cast<std::uint64_t>(G)))];
        g.ranks.push_back(variant == 3 ? g.ranks.front() : static_cast<zp::rank_index>(R));  // repeated / out of range
      }
      REQUIRE(require_only(x, p, violation_kind::group_ranks_invalid).size() == 1);
      return true;
    }
    case mutation::zone_local_two_ranks: {
      if (R < 2) return false;
      const zp::rank_index a = random_rank();
      p.groups.push_back({G, zp::zone_kind::local, {a, static_cast<zp::rank_index>((a + 1) % R)}});
      REQUIRE(require_only(x, p, violation_kind::group_zone_mismatch).size() == 1);
      return true;
    }
    case mutation::zone_intra_across_nodes: {
      if (t.nodes() < 2) return false;
      const zp::rank_index a = random_rank();
      p.groups.push_back({G, zp::zone_kind::intra_node, {a, static_cast<zp::rank_index>((a + P) % R)}});
      REQUIRE(require_only(x, p, violation_kind::group_zone_mismatch).size() == 1);
      return true;
    }
    case mutation::zone_inter_one_node: {
      const int node = pick(rng, 0, t.nodes() - 1);
      std::vector<zp::rank_index> ranks;
      for (int g = 0; g < P; ++g)
        if (ranks.empty() || rng.below(2) == 0) ranks.push_back(t.rank_of(node, g));
      p.groups.push_back({G, zp::zone_kind::inter_node, ranks});  // one or more ranks, one node
      REQUIRE(require_only(x, p, violation_kind::group_zone_mismatch).size() == 1);
      return true;
    }
    case mutation::zone_flipped: {  // a used group gets the wrong zone
      if (G == 0) return false;
      auto& g = p.groups[static_cast<std::size_t>(rng.below(static_cast<std::uint64_t>(G)))];
      g.zone = g.zone == zp::zone_kind::intra_node ? zp::zone_kind::inter_node
               : g.zone == zp::zone_kind::inter_node
                   ? (rng.below(2) == 0 ? zp::zone_kind::intra_node : zp::zone_kind::local)
                   : (rng.below(2) == 0 ? zp::zone_kind::intra_node : zp::zone_kind::inter_node);
      REQUIRE(require_only(x, p, violation_kind::group_zone_mismatch).size() == 1);
      return true;
    }
    case mutation::unknown_collective: {  // a group names a collective outside the enum
      if (G == 0) return false;
      auto& g = p.groups[static_cast<std::size_t>(rng.below(static_cast<std::uint64_t>(G)))];
      g.collective = static_cast<zp::collective_kind>(3 + rng.below(200));  // past all_to_all
      REQUIRE(require_only(x, p, violation_kind::group_collective_unknown).size() == 1);
      return true;
    }
    case mutation::unknown_group: {  // every shard of one sequence names a missing group
      const auto s = static_cast<zp::sequence_index>(rng.below(static_cast<std::uint64_t>(b.size())));
      const zp::group_index g = rng.below(2) == 0 ? G + pick(rng, 0, 3) : -2 - pick(rng, 0, 3);
      const auto mine = shards_of(p, s);
      for (const auto& pos : mine) at(p, pos).group = g;
      const auto found = require_only(x, p, violation_kind::group_unknown);
      REQUIRE(found.size() == mine.size());
      for (const auto& v : found) CHECK(v.values[2].value == g);
      return true;
    }
    case mutation::rank_not_in_group: {
      const auto s = static_cast<zp::sequence_index>(rng.below(static_cast<std::uint64_t>(b.size())));
      const auto mine = shards_of(p, s);
      std::vector<zp::rank_index> others;
      for (zp::rank_index r = 0; r < R; ++r)
        if (std::none_of(mine.begin(), mine.end(), [&](position pos) { return pos.rank == static_cast<std::size_t>(r); }))
          others.push_back(r);
      if (others.empty()) return false;
      p.groups.push_back({G, zp::zone_kind::local, {choose(rng, others)}});
      for (const auto& pos : mine) at(p, pos).group = G;
      REQUIRE(require_only(x, p, violation_kind::group_membership).size() == mine.size());
      return true;
    }
    case mutation::split_without_group: {
      if (spread.empty()) return false;
      const auto mine = shards_of(p, choose(rng, spread));
      at(p, choose(rng, mine)).group = zp::no_group;
      REQUIRE(require_only(x, p, violation_kind::sequence_group_inconsistent).size() == 1);
      return true;
    }
    case mutation::mixed_groups: {  // an identical twin group on one shard
      if (spread.empty()) return false;
      const auto mine = shards_of(p, choose(rng, spread));
      zp::ring_group twin = p.groups[static_cast<std::size_t>(at(p, mine.front()).group)];
      twin.id = G;
      p.groups.push_back(twin);
      at(p, choose(rng, mine)).group = G;
      REQUIRE(require_only(x, p, violation_kind::sequence_group_inconsistent).size() == 1);
      return true;
    }
    case mutation::mixed_micro_batches: {
      if (spread.empty()) return false;
      const auto mine = shards_of(p, choose(rng, spread));
      zp::shard& s = at(p, choose(rng, mine));
      s.micro_batch += pick(rng, 1, 3);
      p.capacity = b.total_tokens();
      REQUIRE(require_only(x, p, violation_kind::sequence_group_inconsistent).size() == 1);
      return true;
    }
    case mutation::count: break;
  }
  return false;
}

}  // namespace

TEST_CASE("random valid plans have no violations", "[core][validate]") {
  zp::random_generator rng(401);
  for (int trial = 0; trial < 1000; ++trial) {
    const instance x = random_valid_instance(rng);
    const auto found = zp::find_violations(x.plan, x.batch, x.topology);
    if (!found.empty()) FAIL_CHECK(found.front().message);
    REQUIRE(found.empty());
    REQUIRE_NOTHROW(zp::validate(x.plan, x.batch, x.topology));
    // every token is held exactly once, so the loads add up to the batch
    zp::token_count held = 0;
    for (const auto& pl : x.plan.placements) held += pl.tokens();
    REQUIRE(held == x.batch.total_tokens());
  }
}

TEST_CASE("each kind of mutation is reported as exactly that violation", "[core][validate]") {
  zp::random_generator rng(402);
  std::array<int, static_cast<std::size_t>(mutation::count)> applied{};
  for (int trial = 0; trial < 1000; ++trial) {
    const instance x = random_valid_instance(rng);
    for (int m = 0; m < static_cast<int>(mutation::count); ++m) {
      INFO("trial " << trial << ", mutation " << m);
      if (mutate_and_check(rng, x, static_cast<mutation>(m))) ++applied[static_cast<std::size_t>(m)];
    }
  }
  // every mutation was exercised many times (the generator reaches every case)
  for (std::size_t m = 0; m < applied.size(); ++m) {
    INFO("mutation " << m);
    CHECK(applied[m] >= 100);
  }
}

TEST_CASE("a hand-built plan and its violations", "[core][validate]") {
  // 2 nodes x 2 GPUs; sequence 0 (8 tokens) on an inter-node ring of ranks 0 and 2,
  // sequence 1 (3 tokens) alone on rank 1, sequence 2 (4 tokens) on an intra-node ring
  // of ranks 2 and 3.
  const zp::topology t = make_topology(2, 2);
  const zp::batch b({8, 3, 4});
  zp::plan p = zeppelin_test::sample_plan();
  CHECK(zp::find_violations(p, b, t).empty());
  CHECK_NOTHROW(zp::validate(p, b, t));

  SECTION("capacity is per rank: rank 2 holds 6 tokens") {
    p.capacity = 5;
    const auto found = zp::find_violations(p, b, t);
    REQUIRE(found.size() == 1);
    CHECK(found[0].kind == violation_kind::capacity_exceeded);
    CHECK(found[0].values[0].value == 2.0);  // rank
    CHECK(found[0].values[2].value == 6.0);  // tokens
  }
  SECTION("capacity is per micro-batch") {
    // sequence 2 moves to micro-batch 1: rank 2 then holds 4 + 2 tokens in two passes
    p.placements[2].shards[1].micro_batch = 1;
    p.placements[3].shards[0].micro_batch = 1;
    p.capacity = 4;
    CHECK(zp::find_violations(p, b, t).empty());
    CHECK(p.micro_batches() == 2);
  }
  SECTION("an existing shard pushed past its end also leaves a gap") {
    p.placements[1].shards[0].range.end = 4;  // sequence 1 has 3 tokens
    const auto found = zp::find_violations(p, b, t);
    REQUIRE(found.size() == 2);
    CHECK(found[0].kind == violation_kind::shard_out_of_bounds);
    CHECK(found[0].values[4].value == 3.0);  // length
    CHECK(found[1].kind == violation_kind::token_missing);
    try {
      zp::validate(p, b, t);
      FAIL("no throw");
    } catch (const zp::invalid_plan& e) {
      CHECK(e.kind() == violation_kind::shard_out_of_bounds);  // the first one
      CHECK(e.value("end") == 4.0);
    }
  }
  SECTION("the shape check stops the others") {
    p.capacity = 0;
    p.placements.pop_back();
    const auto found = zp::find_violations(p, b, t);
    REQUIRE(found.size() == 1);
    CHECK(found[0].kind == violation_kind::shape_mismatch);
  }
  SECTION("several violations are listed in a fixed order") {
    p.capacity = 0;                              // bad_capacity
    p.groups[1].zone = zp::zone_kind::local;     // zone mismatch
    p.placements[0].shards.clear();              // token_missing for sequence 0
    const auto found = zp::find_violations(p, b, t);
    REQUIRE(found.size() == 3);
    CHECK(found[0].kind == violation_kind::bad_capacity);
    CHECK(found[1].kind == violation_kind::group_zone_mismatch);
    CHECK(found[2].kind == violation_kind::token_missing);
    CHECK(found[2].values[1].value == 0.0);
    CHECK(found[2].values[2].value == 4.0);
    // deterministic: the same list every time
    const auto again = zp::find_violations(p, b, t);
    REQUIRE(again.size() == found.size());
    for (std::size_t i = 0; i < found.size(); ++i) {
      CHECK(again[i].kind == found[i].kind);
      CHECK(again[i].message == found[i].message);
    }
  }
  SECTION("limit caps the list") {
    for (auto& pl : p.placements) pl.shards.clear();  // 3 sequences missing
    CHECK(zp::find_violations(p, b, t).size() == 3);
    CHECK(zp::find_violations(p, b, t, 2).size() == 2);
    CHECK(zp::find_violations(p, b, t, 1).size() == 1);
    CHECK(zp::find_violations(p, b, t, 0).empty());
  }
  SECTION("a plan for another batch is caught") {
    const zp::batch longer({8, 3, 5});
    const auto found = zp::find_violations(p, longer, t);
    REQUIRE(found.size() == 1);
    CHECK(found[0].kind == violation_kind::token_missing);
    CHECK(found[0].values[0].value == 2.0);
    const zp::batch fewer({8, 3});
    CHECK(zp::find_violations(p, fewer, t).front().kind == violation_kind::shard_out_of_bounds);
  }
}

TEST_CASE("validate does not overflow on repeated huge shards", "[core][validate]") {
  using namespace zeppelin;
  const token_count huge = max_sequence_length;  // the longest sequence a batch takes
  const batch b({huge});
  const topology t(topology_config{.nodes = 1, .gpus_per_node = 1, .nics_per_node = 1,
                                   .intra_node = {1e9, 0}, .nic = {1e9, 0}, .gpu = {"g", 1e12, 1e9, 1e9}});
  plan p{"dup", 1, 1, 10, {}, {}, {}};
  p.placements.resize(1);
  p.placements[0].shards = {{0, {0, huge}}, {0, {0, huge}}, {0, {0, huge}}};
  const auto violations = find_violations(p, b, t);
  const bool capacity = std::any_of(violations.begin(), violations.end(),
                                    [](const plan_violation& v) { return v.kind == violation_kind::capacity_exceeded; });
  const bool duplicated = std::any_of(violations.begin(), violations.end(),
                                      [](const plan_violation& v) { return v.kind == violation_kind::token_duplicated; });
  REQUIRE(capacity);
  REQUIRE(duplicated);
}
