// zeppelin/partition/micro_batched.hpp
// Any partitioner over micro-batches: when the batch does not fit the cluster in one pass (more
// tokens than N * P * L, or a layout the inner partitioner cannot fit), its sequences are
// dealt into the fewest micro-batches that the inner partitioner plans, each planned on the
// whole cluster and run one after another (shard::micro_batch).
//   in : batch, topology, capacity L (per GPU and micro-batch; it overrides inner.capacity),
//        the inner partitioner, micro_batches (0: the fewest that plan; k: at least k, and at
//        most one per sequence)
//   out: the plan: for k micro-batches, micro-batch i is inner's plan of the i-th part of the
//        batch, its sequences, groups and notes renumbered into the whole batch's; groups of
//        different micro-batches stay distinct. One micro-batch: inner's plan itself.
//        plan.method is `name`; a note (extra_micro_batches) says how many were needed.
// Dealing: k starts at max(micro_batches, ceil(total / (N P L)), 1); sequences by length
// descending (ties: index) each go to the part with the fewest tokens so far (ties: the lowest
// part), which keeps every part within one sequence of total / k; a part lists its sequences
// in batch order. When the inner partitioner finds a part infeasible, k grows: by one for
// the first four tries, then doubling, up to the number of sequences (one per part), so the
// search tries O(log S) values of k.
// Throws invalid_argument (capacity <= 0, micro_batches < 0, an empty topology) and infeasible
// for a sequence that alone exceeds N * P * L, or when no k plans (the inner partitioner's
// last refusal). Deterministic. Cost: per k tried, O(S log k) to deal and the inner
// partitioner on every part. Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/partition/detail/plan_builder.hpp>
#include <zeppelin/partition/partitioner.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

//! The parts of `b` for k micro-batches (see the file comment): [part] -> sequence indices, ascending.
[[nodiscard]] inline std::vector<std::vector<sequence_index>> deal_into_parts(const batch& b, std::int32_t k) {
  std::vector<std::vector<sequence_index>> parts(static_cast<std::size_t>(k));
  // (tokens, part), the lightest part on top, ties to the lowest part: O(S log k)
  using load = std::pair<token_count, std::int32_t>;
  std::priority_queue<load, std::vector<load>, std::greater<>> lightest;
  for (std::int32_t i = 0; i < k; ++i) lightest.push({0, i});
  for (const sequence_index s : by_length_descending(b)) {
    auto [tokens, part] = lightest.top();
    lightest.pop();
    parts[static_cast<std::size_t>(part)].push_back(s);
    lightest.push({tokens + b.length(s), part});
  }
  for (auto& part : parts) std::sort(part.begin(), part.end());
  return parts;
}

}  // namespace detail

template <partitioner Inner>
struct micro_batched {
  static constexpr std::string_view name = "micro_batched";
  //! Tokens a GPU may hold per micro-batch (L); the inner partitioner plans with it.
  token_count capacity = 4096;
  Inner inner{};
  //! At least this many micro-batches (0: the fewest that plan).
  std::int32_t micro_batches = 0;

  [[nodiscard]] plan partition(const batch& b, const topology& t) const {
    ZEPPELIN_EXPECTS(capacity > 0, "micro_batched: the token capacity per GPU must be positive", {{"capacity", detail::dbl(capacity)}});
    ZEPPELIN_EXPECTS(micro_batches >= 0, "micro_batched: the number of micro-batches must be 0 (the fewest) or positive",
                     {{"micro_batches", detail::dbl(micro_batches)}});
    ZEPPELIN_EXPECTS(t.num_ranks() >= 1, "micro_batched: the topology has no GPU", {{"nodes", detail::dbl(t.nodes())}});
    const token_count room = detail::cluster_room(t, capacity);
    if (b.max_length() > room)
      ZEPPELIN_THROW(infeasible, "micro_batched: a sequence is longer than nodes * gpus_per_node * capacity, so no micro-batch holds it",
                     {{"max_length", detail::dbl(b.max_length())}, {"room", detail::dbl(room)}, {"capacity", detail::dbl(capacity)}});
    const Inner in = one_pass();
    const std::int32_t most = b.size();  // a batch holds at least one sequence
    std::int32_t k = first_try(b, room);
    std::optional<infeasible> refusal;
    for (int tries = 0;; ++tries) {
      try {
        if (k == 1) {
          plan p = in.partition(b, t);
          p.method = std::string(name);
          return p;
        }
        return merged(b, detail::deal_into_parts(b, k), in, t);
      } catch (const infeasible& e) {
        refusal = e;
      }
      if (k == most) throw *refusal;
      k = tries < 4 ? k + 1 : (k <= most / 2 ? 2 * k : most);
    }
  }

  //! The partitioner of one pass: the inner one at this capacity.
  [[nodiscard]] Inner one_pass() const {
    Inner in = inner;
    in.capacity = capacity;
    return in;
  }

  //! Whether partition(b, t) starts with one pass, one_pass()'s plan of the whole batch, which it
  //! returns unless one_pass() refuses the batch. False where partition(b, t) throws.
  [[nodiscard]] bool starts_in_one_pass(const batch& b, const topology& t) const {
    if (capacity <= 0 || micro_batches < 0 || t.num_ranks() < 1) return false;
    const token_count room = detail::cluster_room(t, capacity);
    return b.max_length() <= room && first_try(b, room) == 1;
  }

  friend bool operator==(const micro_batched&, const micro_batched&) = default;

 private:
  //! The micro-batches the search starts at (see the file comment), `room` the cluster's tokens
  //! per micro-batch.
  [[nodiscard]] std::int32_t first_try(const batch& b, token_count room) const {
    const std::int32_t most = b.size();
    const token_count needed = b.total_tokens() / room + (b.total_tokens() % room != 0);
    return std::min(most, std::max<std::int32_t>({1, micro_batches, static_cast<std::int32_t>(std::min<token_count>(needed, most))}));
  }

  //! Plans every part with `in` and renumbers the parts' plans into one.
  [[nodiscard]] plan merged(const batch& b, const std::vector<std::vector<sequence_index>>& parts, const Inner& in,
                            const topology& t) const {
    plan out;
    out.method = std::string(name);
    out.nodes = t.nodes();
    out.gpus_per_node = t.gpus_per_node();
    out.capacity = capacity;
    out.placements.resize(static_cast<std::size_t>(t.num_ranks()));
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const std::vector<sequence_index>& seqs = parts[i];
      std::vector<token_count> lengths;
      for (const sequence_index s : seqs) lengths.push_back(b.length(s));
      const plan p = in.partition(batch(std::move(lengths)), t);
      const auto first_group = static_cast<group_index>(out.groups.size());
      for (ring_group g : p.groups) {
        g.id += first_group;
        out.groups.push_back(std::move(g));
      }
      for (std::size_t r = 0; r < p.placements.size(); ++r)
        for (shard sh : p.placements[r].shards) {
          sh.seq = seqs[static_cast<std::size_t>(sh.seq)];
          if (sh.group != no_group) sh.group += first_group;
          sh.micro_batch = static_cast<std::int32_t>(i);
          out.placements[r].shards.push_back(sh);
        }
      for (plan_note n : p.notes) {
        for (sequence_index& s : n.sequences) s = seqs[static_cast<std::size_t>(s)];
        std::sort(n.sequences.begin(), n.sequences.end());
        n.values.push_back({"micro_batch", static_cast<double>(i)});
        out.notes.push_back(std::move(n));
      }
    }
    out.notes.push_back({note_kind::extra_micro_batches,
                         "the batch was planned as " + std::to_string(parts.size()) +
                             " micro-batches, run one after another, each within the capacity",
                         {},
                         {{"micro_batches", static_cast<double>(parts.size())},
                          {"total_tokens", detail::dbl(b.total_tokens())},
                          {"room", detail::dbl(detail::cluster_room(t, capacity))}}});
    return out;
  }
};

ZEPPELIN_NAMESPACE_END
