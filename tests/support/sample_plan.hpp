// tests/support/sample_plan.hpp
// A small hand-built plan that is valid for batch({8, 3, 4}) on 2 nodes x 2 GPUs:
//   sequence 0 (8 tokens) on an inter-node ring of ranks 0 and 2,
//   sequence 1 (3 tokens) alone on rank 1,
//   sequence 2 (4 tokens) on an intra-node ring of ranks 2 and 3; capacity 6.
// Tests mutate copies of it (validate) or pin its hash (fingerprint).
#pragma once

#include <zeppelin/core/plan.hpp>

namespace zeppelin_test {

inline zeppelin::plan sample_plan() {
  zeppelin::plan p;
  p.method = "hierarchical";
  p.nodes = 2;
  p.gpus_per_node = 2;
  p.capacity = 6;
  p.groups = {{0, zeppelin::zone_kind::inter_node, {0, 2}}, {1, zeppelin::zone_kind::intra_node, {2, 3}}};
  p.placements = {
      {{{0, {0, 4}, 0, 0}}},
      {{{1, {0, 3}, zeppelin::no_group, 0}}},
      {{{0, {4, 8}, 0, 0}, {2, {0, 2}, 1, 0}}},
      {{{2, {2, 4}, 1, 0}}},
  };
  return p;
}

}  // namespace zeppelin_test
