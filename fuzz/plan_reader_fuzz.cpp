// fuzz/plan_reader_fuzz.cpp
// Fuzz target: the plan readers (core/plan_bytes.hpp, core/plan_json.hpp) on raw bytes and on
// forged plans, and what follows a read plan's indices: rank_view_of, find_violations and
// make_program.
// Input layout (fuzz_input.hpp; little-endian; missing bytes read as 0):
//   byte  mode       mod 3: 0 the rest is plan bytes, 1 the rest is plan JSON text,
//                    2 a forged plan, decoded as below and written with to_bytes and
//                    write_plan_json, so its checksum and fingerprint are right
//   forged plan:
//   byte  nodes      mod 5;  byte gpus  mod 5
//   byte  extra      mod 3, minus 1: placements beyond (or short of) nodes x gpus
//   per placement:   byte shards (mod 4); per shard: byte flags, then
//                    seq      (flags bit 0: raw int32, else byte mod 6)
//                    begin    byte;  end: begin + byte mod 9 (flags bit 1: raw int64 each)
//                    group    (flags bit 2: raw int32, else byte mod (groups + 1) - 1)
//                    micro    (flags bit 3: raw int32, else byte mod 3)
//   byte  groups     mod 4, decoded before the placements; per group: byte flags, then
//                    id (flags bit 0: raw int32, else its index), zone and collective (byte each,
//                    mod 3), members (byte mod 5), each (flags bit 1: raw int32, else byte
//                    mod (ranks + 1))
// Properties:
//   - a reader either returns or throws zeppelin::error; nothing else escapes, nothing
//     crashes, no sanitizer report;
//   - a plan a reader returns writes back to the same plan; micro_batches() lies in
//     [1, shards + 1]; rank_view_of every rank returns or throws zeppelin::error, and the
//     views' tokens add up to the plan's;
//   - find_violations on the plan and the batch its shards imply never crashes; a plan it
//     finds valid builds its execution program (or refuses it with zeppelin::error).
#include "fuzz_input.hpp"
#include "fuzz_topology.hpp"

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/plan_bytes.hpp>
#include <zeppelin/core/plan_json.hpp>
#include <zeppelin/core/rank_view.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/validate.hpp>
#include <zeppelin/program/build.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace zeppelin;

plan forge(zeppelin_fuzz::fuzz_input& in) {
  plan p;
  p.method = "forged";
  p.nodes = in.byte() % 5;
  p.gpus_per_node = in.byte() % 5;
  p.capacity = 1 + in.byte();
  const int ranks = std::max(0, p.nodes * p.gpus_per_node + in.byte() % 3 - 1);
  p.groups.resize(in.byte() % 4);
  for (std::size_t g = 0; g < p.groups.size(); ++g) {
    ring_group& x = p.groups[g];
    const std::uint8_t flags = in.byte();
    x.id = (flags & 1u) ? in.i32() : static_cast<group_index>(g);
    x.zone = static_cast<zone_kind>(in.byte() % 3);
    x.collective = static_cast<collective_kind>(in.byte() % 3);
    x.ranks.resize(in.byte() % 5);
    for (rank_index& r : x.ranks) r = (flags & 2u) ? in.i32() : static_cast<rank_index>(in.byte() % (ranks + 1));
  }
  p.placements.resize(static_cast<std::size_t>(ranks));
  for (placement& pl : p.placements) {
    pl.shards.resize(in.byte() % 4);
    for (shard& s : pl.shards) {
      const std::uint8_t flags = in.byte();
      s.seq = (flags & 1u) ? in.i32() : static_cast<sequence_index>(in.byte() % 6);
      s.range.begin = (flags & 2u) ? in.i64() : in.byte();
      s.range.end = (flags & 2u) ? in.i64() : s.range.begin + in.byte() % 9;
      s.group = (flags & 4u) ? in.i32() : static_cast<group_index>(in.byte() % (p.groups.size() + 1)) - 1;
      s.micro_batch = (flags & 8u) ? in.i32() : static_cast<std::int32_t>(in.byte() % 3);
    }
  }
  return p;
}

// The batch a plan's shards imply: sequence i as long as its furthest shard end; none when a
// shard's sequence or range is out of what a small batch can hold.
std::optional<batch> implied_batch(const plan& p) {
  std::vector<token_count> lengths;
  for (const placement& pl : p.placements)
    for (const shard& s : pl.shards) {
      if (s.seq < 0 || s.seq >= 64 || s.range.end < 1 || s.range.end > 4096) return std::nullopt;
      if (lengths.size() <= static_cast<std::size_t>(s.seq)) lengths.resize(static_cast<std::size_t>(s.seq) + 1, 1);
      lengths[static_cast<std::size_t>(s.seq)] = std::max(lengths[static_cast<std::size_t>(s.seq)], s.range.end);
    }
  if (lengths.empty()) return std::nullopt;
  return batch(lengths);
}

// What may follow a plan that a reader returned (the properties in the file comment). The
// readers checked its indices, so its ranges lie in [0, max_sequence_length] and their sums
// fit.
void follow(const plan& p) {
  std::int64_t shards = 0;
  token_count tokens = 0;
  for (const placement& pl : p.placements) {
    shards += static_cast<std::int64_t>(pl.shards.size());
    for (const shard& s : pl.shards) tokens += s.range.size();
  }
  ZEPPELIN_FUZZ_CHECK(p.micro_batches() >= 1 && p.micro_batches() <= shards + 1);
  token_count viewed = 0;
  for (rank_index r = 0; r < p.num_ranks(); ++r) try {
      const rank_view v = rank_view_of(p, r);
      for (const token_count t : v.tokens_per_micro_batch) viewed += t;
    } catch (const zeppelin::error&) {
      return;  // a shard in a group that does not list its rank: refused by name
    } catch (...) {
      ZEPPELIN_FUZZ_UNEXPECTED();
    }
  ZEPPELIN_FUZZ_CHECK(viewed == tokens);
  if (p.nodes < 1 || p.gpus_per_node < 1) return;
  const std::optional<batch> b = implied_batch(p);
  if (!b) return;
  try {
    const topology t = zeppelin_fuzz::small_topology(p.nodes, p.gpus_per_node);
    if (!find_violations(p, *b, t).empty()) return;
    (void)make_program(p, *b, t);
  } catch (const zeppelin::error&) {
    // refused: a resource limit, or a topology the library does not build
  } catch (...) {
    ZEPPELIN_FUZZ_UNEXPECTED();
  }
}

void read_bytes(std::span<const std::byte> bytes) {
  std::optional<plan> p;
  try {
    p.emplace(plan_from_bytes(bytes));
  } catch (const zeppelin::error&) {
    return;
  } catch (...) {
    ZEPPELIN_FUZZ_UNEXPECTED();
  }
  ZEPPELIN_FUZZ_CHECK(plan_from_bytes(to_bytes(*p)) == *p);
  follow(*p);
}

void read_json(std::string_view text) {
  std::optional<plan_document> d;
  try {
    d.emplace(read_plan_json(text));
  } catch (const zeppelin::error&) {
    return;
  } catch (...) {
    ZEPPELIN_FUZZ_UNEXPECTED();
  }
  std::ostringstream out;
  write_plan_json(out, d->layout);
  ZEPPELIN_FUZZ_CHECK(read_plan_json(out.str()).layout == d->layout);
  follow(d->layout);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 8192) return 0;  // small plans reach every check; long inputs only slow the search
  zeppelin_fuzz::fuzz_input in(data, size);
  switch (in.byte() % 3) {
    case 0: {
      const std::string_view rest = in.rest();
      read_bytes(std::as_bytes(std::span<const char>(rest.data(), rest.size())));
      break;
    }
    case 1: read_json(in.rest()); break;
    default: {
      const plan p = forge(in);
      read_bytes(to_bytes(p));
      std::ostringstream out;
      write_plan_json(out, p);
      read_json(out.str());
    }
  }
  return 0;
}
