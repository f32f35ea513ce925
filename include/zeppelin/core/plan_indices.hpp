// zeppelin/core/plan_indices.hpp
// The indices of a plan that code follows, checked before anything indexes with them.
//   in : a plan: read from bytes or JSON (the readers call this), or built by hand
//   out: nothing, or invalid_argument naming the first index out of range and what was expected:
//        shape       nodes >= 0, gpus_per_node >= 0, nodes x gpus_per_node == placements
//        groups      groups[g].id == g; every member in [0, ranks)
//        shards      a shard's group is no_group or in [0, groups); its micro_batch in
//                    [0, shards of the plan), so micro_batches() neither overflows nor asks for
//                    more per-micro-batch storage than the plan has shards; its range
//                    0 <= begin <= end <= max_sequence_length, so sizes and their sums fit
// Unlike validate (core/validate.hpp) it needs no batch or topology: it makes a plan safe to
// walk (rank_view_of, the execution program, the fingerprint), not correct. A plan whose
// checksum and fingerprint were recomputed after an edit passes the readers' integrity checks;
// this is what stops it. O(plan size). nvcc-safe (host code).
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

//! Checks the indices of `p` (see the file comment); `source` starts every message
//! ("plan bytes", "plan JSON", "rank view").
inline void check_plan_indices(const plan& p, std::string_view source) {
  const std::string where(source);
  const auto ranks = static_cast<std::int64_t>(p.placements.size());
  ZEPPELIN_EXPECTS(p.nodes >= 0 && p.gpus_per_node >= 0 && std::int64_t{p.nodes} * p.gpus_per_node == ranks,
                   where + ": the plan must hold one placement per rank (nodes x gpus_per_node)",
                   {{"nodes", double(p.nodes)}, {"gpus_per_node", double(p.gpus_per_node)}, {"placements", double(ranks)}});
  const auto groups = static_cast<std::int64_t>(p.groups.size());
  for (std::int64_t g = 0; g < groups; ++g) {
    const ring_group& x = p.groups[static_cast<std::size_t>(g)];
    ZEPPELIN_EXPECTS(x.id == g, where + ": a group's id must be its index in the plan's groups",
                     {{"index", double(g)}, {"id", double(x.id)}});
    for (const rank_index r : x.ranks)
      ZEPPELIN_EXPECTS(r >= 0 && r < ranks, where + ": a group lists a rank the plan does not have",
                       {{"group", double(g)}, {"rank", double(r)}, {"ranks", double(ranks)}});
  }
  std::int64_t shards = 0;
  for (const placement& pl : p.placements) shards += static_cast<std::int64_t>(pl.shards.size());
  for (std::int64_t r = 0; r < ranks; ++r)
    for (const shard& s : p.placements[static_cast<std::size_t>(r)].shards) {
      ZEPPELIN_EXPECTS(s.group == no_group || (s.group >= 0 && s.group < groups),
                       where + ": a shard names a group the plan does not have (expected none or 0 .. groups - 1)",
                       {{"rank", double(r)}, {"seq", double(s.seq)}, {"group", double(s.group)}, {"groups", double(groups)}});
      ZEPPELIN_EXPECTS(s.range.begin >= 0 && s.range.begin <= s.range.end && s.range.end <= max_sequence_length,
                       where + ": a shard's token range is out of order or out of range (expected 0 <= begin <= end <= " +
                           std::to_string(max_sequence_length) + ")",
                       {{"rank", double(r)}, {"seq", double(s.seq)}, {"begin", double(s.range.begin)}, {"end", double(s.range.end)}});
      ZEPPELIN_EXPECTS(s.micro_batch >= 0 && s.micro_batch < shards,
                       where + ": a shard's micro-batch is out of range (expected 0 .. the plan's shard count - 1)",
                       {{"rank", double(r)}, {"seq", double(s.seq)}, {"micro_batch", double(s.micro_batch)}, {"shards", double(shards)}});
    }
}

ZEPPELIN_NAMESPACE_END
