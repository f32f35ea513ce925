// tests/core/fingerprint_test.cpp
// fingerprint(plan), fingerprint(batch) and fnv1a_hasher (core/fingerprint.hpp): the
// published FNV-1a vectors, the documented byte encoding (checked against an independent
// serialiser), equal inputs -> equal hashes, every single-field change -> a different hash,
// notes ignored, and golden values that must not drift between machines or releases.
#include "../support/random_int.hpp"

#include <catch2/catch.hpp>

#include "support/sample_plan.hpp"
#include <zeppelin/core/fingerprint.hpp>
#include <zeppelin/core/random.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace zp = zeppelin;

namespace {

// FNV-1a 64 over a byte string, straight from the definition (offset basis, prime).
std::uint64_t fnv1a(const std::string& bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// The documented encoding: integers as little-endian 8-byte words, strings length-prefixed.
void put(std::string& out, std::int64_t v) {
  const auto u = static_cast<std::uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xffu));
}
void put(std::string& out, const std::string& s) {
  put(out, static_cast<std::int64_t>(s.size()));
  out += s;
}

std::string encode(const zp::plan& p) {
  std::string out;
  put(out, p.method);
  put(out, p.nodes);
  put(out, p.gpus_per_node);
  put(out, p.capacity);
  put(out, static_cast<std::int64_t>(p.placements.size()));
  for (const auto& pl : p.placements) {
    put(out, static_cast<std::int64_t>(pl.shards.size()));
    for (const auto& s : pl.shards) {
      put(out, s.seq);
      put(out, s.range.begin);
      put(out, s.range.end);
      put(out, s.group);
      put(out, s.micro_batch);
    }
  }
  put(out, static_cast<std::int64_t>(p.groups.size()));
  for (const auto& g : p.groups) {
    put(out, g.id);
    put(out, static_cast<std::int64_t>(g.zone));
    put(out, static_cast<std::int64_t>(g.collective));
    put(out, static_cast<std::int64_t>(g.ranks.size()));
    for (auto r : g.ranks) put(out, r);
  }
  return out;
}

using zeppelin_test::pick;

zp::shard random_shard(zp::random_generator& rng) {
  const zp::token_count begin = rng.between(0, 1 << 20);
  return {static_cast<zp::sequence_index>(pick(rng, 0, 50)), {begin, begin + rng.between(1, 1 << 16)},
          static_cast<zp::group_index>(pick(rng, -1, 10)), static_cast<std::int32_t>(pick(rng, 0, 3))};
}

// Arbitrary (not necessarily valid) plan content: the fingerprint hashes whatever it gets.
zp::plan random_plan(zp::random_generator& rng) {
  static const char* methods[] = {"hierarchical", "even_split", "allgather", "hybrid_dp", "per_document", ""};
  zp::plan p;
  p.method = methods[rng.below(6)];
  p.nodes = pick(rng, 1, 8);
  p.gpus_per_node = pick(rng, 1, 8);
  p.capacity = rng.between(1, 1 << 20);
  p.placements.resize(static_cast<std::size_t>(pick(rng, 0, 6)));
  for (auto& pl : p.placements) {
    pl.shards.resize(static_cast<std::size_t>(pick(rng, 0, 5)));
    for (auto& s : pl.shards) s = random_shard(rng);
  }
  p.groups.resize(static_cast<std::size_t>(pick(rng, 0, 4)));
  for (std::size_t g = 0; g < p.groups.size(); ++g) {
    p.groups[g].id = static_cast<zp::group_index>(g);
    p.groups[g].zone = static_cast<zp::zone_kind>(rng.below(3));
    p.groups[g].ranks.resize(static_cast<std::size_t>(pick(rng, 0, 5)));
    for (auto& r : p.groups[g].ranks) r = pick(rng, 0, 63);
  }
  if (rng.below(2) == 0) p.notes.push_back({zp::note_kind::other, "fallback taken", {}, {}});
  return p;
}

template <class Int>
Int nonzero_delta(zp::random_generator& rng) {
  const auto d = static_cast<Int>(rng.between(1, 1000));
  return rng.below(2) == 0 ? d : static_cast<Int>(-d);
}

// Changes exactly one field (or adds/removes one element) of the plan. Returns false if the
// plan has nothing of that kind to change.
bool mutate_one(zp::random_generator& rng, zp::plan& p, int kind) {
  auto random_index = [&](std::size_t n) { return static_cast<std::size_t>(rng.below(n)); };
  std::vector<zp::placement*> with_shards;
  for (auto& pl : p.placements)
    if (!pl.shards.empty()) with_shards.push_back(&pl);
  switch (kind) {
    case 0: p.method += static_cast<char>('a' + rng.below(26)); return true;
    case 1:
      if (p.method.empty()) return false;
      p.method.back() = static_cast<char>(p.method.back() ^ (1 << rng.below(7)));
      return true;
    case 2: p.nodes += nonzero_delta<int>(rng); return true;
    case 3: p.gpus_per_node += nonzero_delta<int>(rng); return true;
    case 4: p.capacity += nonzero_delta<zp::token_count>(rng) << rng.below(30); return true;
    case 5: p.placements.emplace_back(); return true;
    case 6:
      if (p.placements.empty()) return false;
      p.placements.erase(p.placements.begin() + static_cast<std::ptrdiff_t>(random_index(p.placements.size())));
      return true;
    case 7: case 8: case 9: case 10: case 11: {  // one field of one shard
      if (with_shards.empty()) return false;
      auto& shards = with_shards[random_index(with_shards.size())]->shards;
      zp::shard& s = shards[random_index(shards.size())];
      if (kind == 7) s.seq += nonzero_delta<std::int32_t>(rng);
      if (kind == 8) s.range.begin += nonzero_delta<zp::token_count>(rng);
      if (kind == 9) s.range.end += nonzero_delta<zp::token_count>(rng) << rng.below(40);
      if (kind == 10) s.group += nonzero_delta<std::int32_t>(rng);
      if (kind == 11) s.micro_batch += nonzero_delta<std::int32_t>(rng);
      return true;
    }
    case 12: {  // insert a shard anywhere
      if (p.placements.empty()) return false;
      auto& shards = p.placements[random_index(p.placements.size())].shards;
      shards.insert(shards.begin() + static_cast<std::ptrdiff_t>(random_index(shards.size() + 1)), random_shard(rng));
      return true;
    }
    case 13: {  // remove a shard
      if (with_shards.empty()) return false;
      auto& shards = with_shards[random_index(with_shards.size())]->shards;
      shards.erase(shards.begin() + static_cast<std::ptrdiff_t>(random_index(shards.size())));
      return true;
    }
    case 14: {  // swap two different shards of a rank (storage order matters)
      for (auto* pl : with_shards)
        for (std::size_t i = 1; i < pl->shards.size(); ++i)
          if (!(pl->shards[i] == pl->shards[0])) {
            std::swap(pl->shards[0], pl->shards[i]);
            return true;
          }
      return false;
    }
    case 15: {  // move a shard to the next rank
      if (p.placements.size() < 2 || with_shards.empty()) return false;
      for (std::size_t r = 0; r + 1 < p.placements.size(); ++r)
        if (!p.placements[r].shards.empty()) {
          p.placements[r + 1].shards.insert(p.placements[r + 1].shards.begin(), p.placements[r].shards.back());
          p.placements[r].shards.pop_back();
          return true;
        }
      return false;
    }
    case 16: case 17: {  // a group's id, zone or collective
      if (p.groups.empty()) return false;
      auto& g = p.groups[random_index(p.groups.size())];
      if (kind == 16) g.id += nonzero_delta<std::int32_t>(rng);
      else if (rng.below(2) == 0) g.zone = static_cast<zp::zone_kind>((static_cast<int>(g.zone) + pick(rng, 1, 2)) % 3);
      else g.collective = g.collective == zp::collective_kind::ring ? zp::collective_kind::all_gather : zp::collective_kind::ring;
      return true;
    }
    case 18: case 19: case 20: {  // a group's ranks: add one, change one, drop one
      if (p.groups.empty()) return false;
      auto& ranks = p.groups[random_index(p.groups.size())].ranks;
      if (kind == 18) {
        ranks.insert(ranks.begin() + static_cast<std::ptrdiff_t>(random_index(ranks.size() + 1)), pick(rng, 0, 63));
        return true;
      }
      if (ranks.empty()) return false;
      const std::size_t i = random_index(ranks.size());
      if (kind == 19) ranks[i] += nonzero_delta<std::int32_t>(rng);
      else ranks.erase(ranks.begin() + static_cast<std::ptrdiff_t>(i));
      return true;
    }
    case 21: {  // ring order matters: rotate a group's ranks
      for (auto& g : p.groups)
        for (std::size_t i = 1; i < g.ranks.size(); ++i)
          if (g.ranks[i] != g.ranks[0]) {
            std::swap(g.ranks[0], g.ranks[i]);
            return true;
          }
      return false;
    }
    case 22: {
      zp::ring_group g{static_cast<zp::group_index>(p.groups.size()), zp::zone_kind::local, {0}};
      p.groups.push_back(g);
      return true;
    }
    case 23:
      if (p.groups.empty()) return false;
      p.groups.pop_back();
      return true;
    default: return false;
  }
}
constexpr int mutation_kinds = 24;

using zeppelin_test::sample_plan;

}  // namespace

static_assert([] {
  zp::fnv1a_hasher h;
  h.add_bytes("a");
  return h.value() == 0xaf63dc4c8601ec8cull;
}());

TEST_CASE("fnv1a_hasher matches the published FNV-1a 64 vectors", "[core][fingerprint]") {
  zp::fnv1a_hasher empty;
  CHECK(empty.value() == 0xcbf29ce484222325ull);  // offset basis
  zp::fnv1a_hasher a;
  a.add_bytes("a");
  CHECK(a.value() == 0xaf63dc4c8601ec8cull);
  zp::fnv1a_hasher foobar;
  foobar.add_bytes("foo");
  foobar.add_bytes("bar");  // incremental
  CHECK(foobar.value() == 0x85944171f73967e8ull);
  CHECK(fnv1a("foobar") == 0x85944171f73967e8ull);  // the oracle agrees
}

TEST_CASE("fnv1a_hasher encodes integers little-endian and strings length-prefixed", "[core][fingerprint]") {
  zp::fnv1a_hasher words;
  words.add(std::int64_t{0x0102030405060708});
  words.add(std::int64_t{-1});
  std::string bytes;
  put(bytes, 0x0102030405060708);
  put(bytes, -1);
  CHECK(bytes.substr(0, 8) == std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8));
  CHECK(words.value() == fnv1a(bytes));

  zp::fnv1a_hasher ab_c, a_bc;
  ab_c.add(std::string_view("ab"));
  ab_c.add(std::string_view("c"));
  a_bc.add(std::string_view("a"));
  a_bc.add(std::string_view("bc"));
  CHECK(ab_c.value() != a_bc.value());
}

TEST_CASE("fingerprint(plan) hashes the documented encoding", "[core][fingerprint]") {
  zp::random_generator rng(501);
  for (int trial = 0; trial < 500; ++trial) {
    const zp::plan p = random_plan(rng);
    REQUIRE(zp::fingerprint(p) == fnv1a(encode(p)));
  }
}

TEST_CASE("equal plans have equal fingerprints and notes do not count", "[core][fingerprint]") {
  zp::random_generator a(502), b(502);
  for (int trial = 0; trial < 200; ++trial) {
    const zp::plan p = random_plan(a);
    zp::plan q = random_plan(b);  // built independently from the same draws
    REQUIRE(p == q);
    REQUIRE(zp::fingerprint(p) == zp::fingerprint(q));
    q.notes.push_back({zp::note_kind::other, "a different note", {}, {}});
    REQUIRE(zp::fingerprint(p) == zp::fingerprint(q));
  }
}

TEST_CASE("any single-field change changes the fingerprint", "[core][fingerprint]") {
  zp::random_generator rng(503);
  std::vector<int> applied(mutation_kinds, 0);
  for (int trial = 0; trial < 400; ++trial) {
    const zp::plan original = random_plan(rng);
    const std::uint64_t before = zp::fingerprint(original);
    for (int kind = 0; kind < mutation_kinds; ++kind) {
      zp::plan changed = original;
      if (!mutate_one(rng, changed, kind)) continue;
      INFO("trial " << trial << ", mutation " << kind);
      REQUIRE_FALSE(changed == original);
      REQUIRE(zp::fingerprint(changed) != before);
      ++applied[static_cast<std::size_t>(kind)];
    }
  }
  for (int kind = 0; kind < mutation_kinds; ++kind) {
    INFO("mutation " << kind);
    CHECK(applied[static_cast<std::size_t>(kind)] >= 50);
  }
}

TEST_CASE("distinct plans get distinct fingerprints", "[core][fingerprint]") {
  zp::random_generator rng(504);
  std::set<std::uint64_t> seen;
  const int n = 5000;
  for (int i = 0; i < n; ++i) {
    zp::plan p = random_plan(rng);
    p.capacity = i;  // makes every plan distinct
    seen.insert(zp::fingerprint(p));
  }
  CHECK(seen.size() == static_cast<std::size_t>(n));
}

TEST_CASE("golden plan fingerprint", "[core][fingerprint]") {
  // Computed once; a change means ranks built by different versions would disagree.
  const zp::plan p = sample_plan();
  CHECK(zp::fingerprint(p) == fnv1a(encode(p)));
  CHECK(zp::fingerprint(p) == 0xd8f402965d69a9acull);
  CHECK(zp::fingerprint(zp::plan{}) == 0xa09d945a1cd8d6e5ull);
}

TEST_CASE("fingerprint(batch) tracks lengths ids and order", "[core][fingerprint]") {
  const zp::batch b({1, 2, 3});
  CHECK(zp::fingerprint(b) == zp::fingerprint(zp::batch({1, 2, 3})));
  CHECK(zp::fingerprint(b) == zp::fingerprint(zp::batch({1, 2, 3}, {0, 1, 2})));
  // golden, and the documented encoding: size, then (length, id) per sequence
  std::string bytes;
  put(bytes, 3);
  for (std::int64_t i = 0; i < 3; ++i) {
    put(bytes, i + 1);
    put(bytes, i);
  }
  CHECK(zp::fingerprint(b) == fnv1a(bytes));
  CHECK(zp::fingerprint(b) == 0x6beeb862f43c0245ull);

  zp::random_generator rng(505);
  for (int trial = 0; trial < 300; ++trial) {
    const auto n = static_cast<std::size_t>(pick(rng, 1, 40));
    std::vector<zp::token_count> lengths(n);
    for (auto& len : lengths) len = rng.between(1, 1 << 20);
    std::vector<zp::sequence_id> ids(n);
    for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<zp::sequence_id>(i) * 3 + 100;
    const zp::batch base(lengths, ids);
    const std::uint64_t h = zp::fingerprint(base);
    REQUIRE(zp::fingerprint(zp::batch(lengths, ids)) == h);

    const auto i = static_cast<std::size_t>(rng.below(n));
    auto l2 = lengths;
    l2[i] = l2[i] == 1 ? 2 : l2[i] - 1;
    REQUIRE(zp::fingerprint(zp::batch(l2, ids)) != h);
    auto i2 = ids;
    i2[i] += 1;  // ids are 3 apart: still unique
    REQUIRE(zp::fingerprint(zp::batch(lengths, i2)) != h);
    if (n >= 2) {
      auto swapped = ids;  // the same sequences, listed in another order
      auto swapped_lengths = lengths;
      std::swap(swapped.front(), swapped.back());
      std::swap(swapped_lengths.front(), swapped_lengths.back());
      REQUIRE(zp::fingerprint(zp::batch(swapped_lengths, swapped)) != h);
      auto dropped = lengths;
      dropped.pop_back();
      auto dropped_ids = ids;
      dropped_ids.pop_back();
      REQUIRE(zp::fingerprint(zp::batch(dropped, dropped_ids)) != h);
    }
  }
}
