// Capacities and lengths near the limits: every partitioner plans correctly or refuses with a
// clear error, never overflows (capacity x GPUs per node, capacity x CP group size, the
// ceil-divisions by the capacity), at every capacity up to the largest int64.
#include "partition_test_support.hpp"

#include <zeppelin/core/validate.hpp>
#include <zeppelin/partition/registry.hpp>

#include <catch2/catch.hpp>

#include <limits>
#include <string>

using namespace zeppelin;
using namespace zeppelin_test;

TEST_CASE("every partitioner plans at capacities up to INT64_MAX", "[partition][limits]") {
  constexpr token_count top = std::numeric_limits<token_count>::max();
  random_generator rng(13);
  int plans = 0;
  for (const auto& [nodes, gpus] : {std::pair{3, 8}, std::pair{2, 4}, std::pair{1, 1}}) {
    const topology t = make_topology(nodes, gpus);
    for (const token_count capacity : {top, top / 3, token_count{1} << 62, (token_count{1} << 62) + 1}) {
      for (int trial = 0; trial < 3; ++trial) {
        std::vector<token_count> lengths;
        for (int i = 0, n = static_cast<int>(rng.between(1, 12)); i < n; ++i)
          lengths.push_back(trial == 2 && i == 0 ? max_sequence_length : rng.between(1, 30'000));
        const batch b(lengths);
        for (const std::string_view name : partitioner_names) {
          INFO(name << " on " << nodes << "x" << gpus << " capacity " << capacity << " trial " << trial);
          const partitioner_settings s{.capacity = capacity, .cp_size = gpus, .metric = attention_cost_metric{}};
          const plan p = partition(partitioner_by_name(name, s), b, t);
          CHECK(find_violations(p, b, t).empty());
          for (const plan_note& note : p.notes) CHECK(note.kind != note_kind::contiguous_fallback);
          ++plans;
        }
      }
    }
  }
  CHECK(plans == 3 * 4 * 3 * static_cast<int>(partitioner_names.size()));
}

TEST_CASE("the reproducers of overflowing capacity products", "[partition][limits]") {
  // 3 x 8 GPUs at a capacity whose node room (8 L) overflowed: it segfaulted in the room loop
  const batch b({90'718'909, 3'000'000'000, 28});
  const plan p = hierarchical<>{.capacity = 6'990'718'424'049'071'899}.partition(b, make_topology(3, 8));
  CHECK(find_violations(p, b, make_topology(3, 8)).empty());
  // 2^62 on 2 x 4 planned a 23K-token batch with a false note
  const batch small({12'000, 9'000, 2'000});
  const plan q = hierarchical<>{.capacity = token_count{1} << 62}.partition(small, make_topology(2, 4));
  CHECK(q.notes.empty());
  // allgather's CP group budget (capacity x cp_size) read as negative: a false "infeasible"
  const plan r = allgather{.capacity = token_count{1} << 62, .cp_size = 4}.partition(small, make_topology(2, 4));
  CHECK(find_violations(r, small, make_topology(2, 4)).empty());
}
