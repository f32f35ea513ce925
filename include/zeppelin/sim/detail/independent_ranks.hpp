// zeppelin/sim/detail/independent_ranks.hpp
// The ranks of one micro-batch's pass that can be simulated apart: sets of ranks whose tasks
// never wait for one another and whose flows never share a port.
//   in : an execution program, a pass, a micro-batch, the topology, and how many tasks a
//        chunk should hold at least (the per-rank estimates of the caller)
//   out: chunks of ranks, each ascending and a union of whole components, in order of their
//        first rank; every rank of the topology is in exactly one chunk
// Two ranks are in one component when a piece of a phase of that pass and micro-batch moves
// bytes between them (a proxy leg included), or when they share a NIC (an inter-node flow of
// one would share the NIC's ports with the other's). Nothing else couples ranks in the step
// simulator: compute streams are per rank, and a flow's rate depends only on the flows of its
// own ports. So an event engine that runs one chunk alone computes, for the chunk's ranks,
// every time the engine running all ranks computes: the same arithmetic in the same order.
// Why: the engine's working set is its tasks; at thousands of GPUs a whole pass holds millions
// of them, and running a chunk at a time keeps each run's tasks in cache and its memory small.
// Components are packed in rank order until a chunk's estimated tasks reach the target, so a
// plan whose ranks all talk to one another (a global ring, remapping) is one chunk.
// O(ranks + pieces of the pass) with union-find. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/program.hpp>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! Union-find over ranks (path halving, union by smaller root: deterministic).
class rank_union {
 public:
  explicit rank_union(std::size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), rank_index{0}); }
  [[nodiscard]] rank_index root(rank_index r) {
    while (parent_[static_cast<std::size_t>(r)] != r) {
      auto& p = parent_[static_cast<std::size_t>(r)];
      p = parent_[static_cast<std::size_t>(p)];
      r = p;
    }
    return r;
  }
  void join(rank_index a, rank_index b) {
    a = root(a), b = root(b);
    if (a == b) return;
    if (b < a) std::swap(a, b);
    parent_[static_cast<std::size_t>(b)] = a;
  }

 private:
  std::vector<rank_index> parent_;
};

//! See the file comment. `tasks_of[r]`: the estimated tasks of rank r (any non-negative
//! weight); a chunk closes once its ranks' estimates reach `target_tasks`.
[[nodiscard]] inline std::vector<std::vector<rank_index>> independent_rank_chunks(const execution_program& prog, pass_kind pass,
                                                                                  std::int32_t micro_batch, const topology& t,
                                                                                  std::span<const std::size_t> tasks_of,
                                                                                  std::size_t target_tasks) {
  const auto R = static_cast<std::size_t>(t.num_ranks());
  rank_union components(R);
  for (const program_phase& ph : prog.phases) {
    if (ph.pass != pass || prog.levels[static_cast<std::size_t>(ph.level)].micro_batch != micro_batch) continue;
    for (const transfer& m : ph.pieces) components.join(m.src, m.dst);
  }
  // GPUs behind one NIC share its send and receive ports
  std::vector<rank_index> first_on_nic(static_cast<std::size_t>(t.num_nics()), -1);
  for (rank_index r = 0; r < static_cast<rank_index>(R); ++r) {
    rank_index& first = first_on_nic[static_cast<std::size_t>(t.nic_of(r))];
    if (first < 0) first = r;
    else components.join(first, r);
  }
  // components in order of their first rank (their root), packed into chunks
  std::vector<std::int32_t> chunk_of_root(R, -1);
  std::vector<std::size_t> chunk_tasks;
  std::vector<std::vector<rank_index>> chunks;
  for (rank_index r = 0; r < static_cast<rank_index>(R); ++r) {
    const rank_index root = components.root(r);
    std::int32_t& c = chunk_of_root[static_cast<std::size_t>(root)];
    if (c < 0) {  // r is its component's first rank: the open chunk takes it, or a new one
      if (chunks.empty() || chunk_tasks.back() >= target_tasks) chunks.emplace_back(), chunk_tasks.push_back(0);
      c = static_cast<std::int32_t>(chunks.size() - 1);
    }
    chunks[static_cast<std::size_t>(c)].push_back(r);
    chunk_tasks[static_cast<std::size_t>(c)] += tasks_of[static_cast<std::size_t>(r)];
  }
  return chunks;
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
