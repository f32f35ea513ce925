// zeppelin/core/validate.hpp
// Checks a plan against its batch and topology.
// In:  plan, batch, topology.
// Out: find_violations() lists every broken invariant (up to a limit), in a fixed order;
//      validate() throws invalid_plan for the first one.
// Invariants:
//   shape        plan.nodes/gpus_per_node match the topology; one placement per rank;
//                capacity > 0
//   shards       seq in [0, batch.size()), 0 <= begin < end <= length, micro_batch >= 0
//   coverage     every token of every sequence is held exactly once (no gap, no overlap)
//   capacity     tokens per (rank, micro-batch) <= capacity
//   groups       groups[g].id == g; ranks non-empty, in range, distinct; zone agrees with
//                the ranks (local: one rank; intra: >= 2 ranks on one node; inter: >= 2 nodes);
//                collective is ring or all_gather
//   membership   a shard's group exists and contains the rank holding the shard
//   consistency  a sequence held by several ranks has a group on every shard, the same one,
//                and all of its shards in one micro-batch
// nvcc-safe.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/detail/counting_sort.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

enum class violation_kind : std::uint8_t {
  shape_mismatch,
  bad_capacity,
  shard_out_of_bounds,
  token_missing,
  token_duplicated,
  capacity_exceeded,
  group_id_mismatch,
  group_ranks_invalid,
  group_zone_mismatch,
  group_collective_unknown,
  group_unknown,
  group_membership,
  sequence_group_inconsistent,
};

struct plan_violation {
  violation_kind kind;
  std::string message;
  std::vector<named_value> values;
};

//! Thrown by validate(); kind() says which invariant broke.
class invalid_plan : public error {
 public:
  explicit invalid_plan(const plan_violation& v, const char* file, int line)
      : error(v.message, v.values, file, line), kind_(v.kind) {}
  [[nodiscard]] violation_kind kind() const noexcept { return kind_; }

 private:
  violation_kind kind_;
};

namespace detail {
inline double num(std::int64_t v) { return static_cast<double>(v); }
}  // namespace detail

//! Every violation of the invariants above, at most `limit` of them.
[[nodiscard]] inline std::vector<plan_violation> find_violations(const plan& p, const batch& b, const topology& t,
                                                                 std::size_t limit = 64) {
  using detail::num;
  std::vector<plan_violation> out;
  auto report = [&](violation_kind k, std::string msg, std::vector<named_value> values) {
    if (out.size() < limit) out.push_back({k, std::move(msg), std::move(values)});
  };

  if (p.nodes != t.nodes() || p.gpus_per_node != t.gpus_per_node() || p.num_ranks() != t.num_ranks()) {
    report(violation_kind::shape_mismatch, "plan shape differs from the topology",
           {{"plan_nodes", num(p.nodes)}, {"plan_gpus_per_node", num(p.gpus_per_node)},
            {"placements", num(p.num_ranks())}, {"nodes", num(t.nodes())}, {"gpus_per_node", num(t.gpus_per_node())}});
    return out;  // every later check indexes ranks through the topology
  }
  if (p.capacity <= 0) report(violation_kind::bad_capacity, "plan capacity must be positive", {{"capacity", num(p.capacity)}});

  // groups
  const auto ngroups = static_cast<group_index>(p.groups.size());
  // each group's ranks, sorted: membership by binary search (a shard of a group of G ranks
  // costs log G, not G: a global ring over thousands of GPUs has millions of shards)
  std::vector<std::vector<rank_index>> sorted_ranks(p.groups.size());
  for (group_index g = 0; g < ngroups; ++g) {
    const ring_group& grp = p.groups[static_cast<std::size_t>(g)];
    if (grp.id != g) report(violation_kind::group_id_mismatch, "groups[g].id must equal g", {{"g", num(g)}, {"id", num(grp.id)}});
    std::vector<rank_index>& sorted = sorted_ranks[static_cast<std::size_t>(g)];
    sorted = grp.ranks;
    std::sort(sorted.begin(), sorted.end());
    const bool in_range = !sorted.empty() && sorted.front() >= 0 && sorted.back() < t.num_ranks();
    if (!in_range || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      report(violation_kind::group_ranks_invalid, "group ranks must be non-empty, distinct and in range",
             {{"group", num(g)}, {"size", num(static_cast<std::int64_t>(grp.ranks.size()))}});
      continue;
    }
    const int first_node = t.node_of(sorted.front());
    const bool one_node = std::all_of(sorted.begin(), sorted.end(), [&](rank_index r) { return t.node_of(r) == first_node; });
    const bool ok = grp.zone == zone_kind::local        ? sorted.size() == 1
                    : grp.zone == zone_kind::intra_node ? sorted.size() >= 2 && one_node
                                                        : !one_node;
    if (!ok)
      report(violation_kind::group_zone_mismatch, "group zone does not match its ranks",
             {{"group", num(g)}, {"zone", num(static_cast<int>(grp.zone))}, {"size", num(static_cast<std::int64_t>(sorted.size()))}});
    if (grp.collective != collective_kind::ring && grp.collective != collective_kind::all_gather &&
        grp.collective != collective_kind::all_to_all)
      report(violation_kind::group_collective_unknown, "group collective must be ring, all_gather or all_to_all",
             {{"group", num(g)}, {"collective", num(static_cast<int>(grp.collective))}});
  }
  auto group_has = [&](group_index g, rank_index r) {
    const auto& rs = sorted_ranks[static_cast<std::size_t>(g)];
    return std::binary_search(rs.begin(), rs.end(), r);
  };

  // shards, capacity, per-sequence bookkeeping: each sequence's flags and lowest and highest
  // rank, and its shards' ranges in one flat list grouped by sequence afterwards (a million
  // one-token sequences must not cost two allocations each)
  struct seq_info {
    group_index group = no_group;
    bool ungrouped = false, mixed_groups = false, mixed_micro_batches = false;
    std::int32_t micro_batch = -1;
    rank_index lowest = std::numeric_limits<rank_index>::max(), highest = -1;  //!< of its ranks
  };
  struct held_range {
    sequence_index seq = 0;
    token_range range{};
  };
  std::vector<seq_info> seqs(static_cast<std::size_t>(b.size()));
  std::vector<held_range> held_ranges;
  for (rank_index r = 0; r < p.num_ranks(); ++r) {
    std::map<std::int32_t, token_count> per_micro_batch;
    for (const shard& s : p.placements[static_cast<std::size_t>(r)].shards) {
      if (s.seq < 0 || s.seq >= b.size() || s.range.begin < 0 || s.range.begin >= s.range.end ||
          s.range.end > b.length(s.seq) || s.micro_batch < 0) {
        report(violation_kind::shard_out_of_bounds, "shard outside its sequence",
               {{"rank", num(r)}, {"seq", num(s.seq)}, {"begin", num(s.range.begin)}, {"end", num(s.range.end)},
                {"length", s.seq >= 0 && s.seq < b.size() ? num(b.length(s.seq)) : -1.0}, {"micro_batch", num(s.micro_batch)}});
        continue;
      }
      // Saturating: a malformed plan may repeat huge shards; the sum must not overflow.
      token_count& held = per_micro_batch[s.micro_batch];
      held = held > std::numeric_limits<token_count>::max() - s.range.size() ? std::numeric_limits<token_count>::max()
                                                                              : held + s.range.size();
      if (s.group != no_group) {
        if (s.group < 0 || s.group >= ngroups)
          report(violation_kind::group_unknown, "shard names a group that does not exist", {{"rank", num(r)}, {"seq", num(s.seq)}, {"group", num(s.group)}});
        else if (!group_has(s.group, r))
          report(violation_kind::group_membership, "shard's rank is not in its group", {{"rank", num(r)}, {"seq", num(s.seq)}, {"group", num(s.group)}});
      }
      seq_info& info = seqs[static_cast<std::size_t>(s.seq)];
      held_ranges.push_back({s.seq, s.range});
      info.lowest = std::min(info.lowest, r);
      info.highest = std::max(info.highest, r);
      if (s.group == no_group) info.ungrouped = true;
      else if (info.group == no_group) info.group = s.group;
      else if (info.group != s.group) info.mixed_groups = true;
      if (info.micro_batch < 0) info.micro_batch = s.micro_batch;
      else if (info.micro_batch != s.micro_batch) info.mixed_micro_batches = true;
    }
    for (const auto& [mb, tokens] : per_micro_batch)
      if (tokens > p.capacity && p.capacity > 0)
        report(violation_kind::capacity_exceeded, "rank holds more tokens than its capacity",
               {{"rank", num(r)}, {"micro_batch", num(mb)}, {"tokens", num(tokens)}, {"capacity", num(p.capacity)}});
  }

  // the ranges grouped by sequence: sequence i's are [first[i], first[i + 1])
  std::vector<std::size_t> first;
  {
    std::vector<held_range> scratch;
    detail::stable_counting_sort(
        held_ranges, seqs.size(), [](const held_range& h) { return static_cast<std::size_t>(h.seq); }, scratch, first);
  }
  for (sequence_index i = 0; i < b.size(); ++i) {
    const seq_info& info = seqs[static_cast<std::size_t>(i)];
    const auto mine = std::span(held_ranges).subspan(first[static_cast<std::size_t>(i)],
                                                     first[static_cast<std::size_t>(i) + 1] - first[static_cast<std::size_t>(i)]);
    std::sort(mine.begin(), mine.end(), [](const held_range& x, const held_range& y) {
      return x.range.begin != y.range.begin ? x.range.begin < y.range.begin : x.range.end < y.range.end;
    });
    token_count covered = 0;  // tokens [0, covered) are held
    for (const held_range& h : mine) {
      const token_range& rg = h.range;
      if (rg.begin > covered)
        report(violation_kind::token_missing, "tokens of a sequence are held by no rank",
               {{"seq", num(i)}, {"begin", num(covered)}, {"end", num(rg.begin)}});
      else if (rg.begin < covered)
        report(violation_kind::token_duplicated, "tokens of a sequence are held twice",
               {{"seq", num(i)}, {"begin", num(rg.begin)}, {"end", num(std::min(covered, rg.end))}});
      covered = std::max(covered, rg.end);
    }
    if (covered < b.length(i))
      report(violation_kind::token_missing, "tokens of a sequence are held by no rank",
             {{"seq", num(i)}, {"begin", num(covered)}, {"end", num(b.length(i))}});

    const bool spread = info.highest > info.lowest;
    if (spread && (info.ungrouped || info.mixed_groups))
      report(violation_kind::sequence_group_inconsistent, "a sequence on several ranks needs one group on every shard",
             {{"seq", num(i)}});
    if (info.mixed_micro_batches)
      report(violation_kind::sequence_group_inconsistent, "a sequence's shards must share one micro-batch", {{"seq", num(i)}});
  }
  return out;
}

//! Throws invalid_plan (with kind()) for the first violation of find_violations().
inline void validate(const plan& p, const batch& b, const topology& t) {
  const auto violations = find_violations(p, b, t, 1);
  if (!violations.empty()) throw invalid_plan(violations.front(), __FILE__, __LINE__);
}

ZEPPELIN_NAMESPACE_END
