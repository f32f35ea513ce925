// tests/exec/plan_support.hpp
// Plans for the executor tests, host ([exec]) and device ([gpu]) alike: a small test cluster,
// a partitioner's plan at a capacity raised until the method finds a layout, every method by
// index, and random batches with the lengths that stress the ring schedules.
// nvcc-safe (tests/gpu includes it).
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/partition.hpp>

#include <string_view>
#include <vector>

namespace zeppelin_test {

using namespace zeppelin;

//! nodes x gpus ranks, `nics` NICs per node (300 GB/s intra-node, 48 GB/s NICs).
inline topology test_topology(int nodes, int gpus, int nics = 1) {
  topology_config c;
  c.nodes = nodes;
  c.gpus_per_node = gpus;
  c.nics_per_node = nics;
  c.intra_node = {300e9, 3e-6};
  c.nic = {48e9, 10e-6};
  c.gpu = {"test", 1e15, 80e9, 3e12};
  return topology(c);
}

//! The plan of partitioner_names[method] (0 hierarchical, 1 even_split, 2 allgather,
//! 3 hybrid_dp, 4 per_document, 5 ulysses, 6 micro_batched and above), through the registry, raising the capacity until
//! the method finds a layout.
inline plan make_plan(int method, const batch& b, const topology& t, token_count capacity) {
  const auto last = static_cast<int>(partitioner_names.size()) - 1;
  const std::string_view name = partitioner_names[static_cast<std::size_t>(method < last ? method : last)];
  for (int tries = 0;; ++tries) {
    try {
      return partition(partitioner_by_name(name, {.capacity = capacity}), b, t);
    } catch (const infeasible&) {
      if (tries > 40) throw;
      capacity += capacity / 4 + 1;
    }
  }
}

//! 1 to 5 sequences: lengths 1, shorter than a group, not divisible by 2G, and longer ones.
inline batch random_lengths(random_generator& rng, rank_index ranks) {
  std::vector<token_count> lengths;
  const auto n = static_cast<int>(rng.between(1, 6));
  for (int i = 0; i < n; ++i) {
    const auto kind = rng.below(4);
    lengths.push_back(kind == 0 ? 1 : kind == 1 ? rng.between(2, ranks + 1) : rng.between(2, 12 + 2 * ranks));
  }
  return batch(lengths);
}

}  // namespace zeppelin_test
