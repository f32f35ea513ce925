// micro_batched<P> (partition/micro_batched.hpp) on seeded random batches larger than the
// cluster: valid plans, every sequence whole in one micro-batch, parts within one sequence of
// each other, the fewest micro-batches the dealing allows (k - 1 parts are refused by the inner
// partitioner), the inner plan itself when one pass fits, determinism, and bad input.
#include "partition_test_support.hpp"
#include "support/expect_error.hpp"

#include <zeppelin/core/validate.hpp>
#include <zeppelin/partition/micro_batched.hpp>
#include <zeppelin/partition/registry.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

using namespace zeppelin;
using namespace zeppelin_test;

namespace {

using hierarchical_batches = micro_batched<hierarchical<attention_cost_metric>>;

// tokens of every micro-batch of p, and the micro-batch of every sequence (-1: none; -2: several)
struct micro_batch_view {
  std::map<std::int32_t, token_count> tokens;
  std::vector<std::int32_t> of_sequence;
};

micro_batch_view view_of(const plan& p, const batch& b) {
  micro_batch_view v;
  v.of_sequence.assign(static_cast<std::size_t>(b.size()), -1);
  for (const placement& pl : p.placements)
    for (const shard& s : pl.shards) {
      v.tokens[s.micro_batch] += s.range.size();
      std::int32_t& mb = v.of_sequence[static_cast<std::size_t>(s.seq)];
      mb = mb == -1 || mb == s.micro_batch ? s.micro_batch : -2;
    }
  return v;
}

}  // namespace

TEST_CASE("micro_batched plans batches larger than the cluster in the fewest micro-batches", "[partition][micro_batched]") {
  random_generator rng(4242);
  int multi = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const int nodes = static_cast<int>(rng.between(1, 3)), gpus = static_cast<int>(rng.between(1, 4));
    const topology t = make_topology(nodes, gpus);
    const batch b = random_batch(rng, rng.between(1, 40'000));
    // a capacity that leaves room for 1 .. 6 passes of the batch
    const token_count room_target = std::max<token_count>(b.max_length(), b.total_tokens() / static_cast<token_count>(rng.between(1, 6)));
    const token_count capacity = std::max<token_count>(1, (room_target + t.num_ranks() - 1) / t.num_ranks());
    const hierarchical_batches p{capacity, {}, 0};
    INFO("trial " << trial << " " << nodes << "x" << gpus << " sequences " << b.size() << " total " << b.total_tokens() << " capacity "
                  << capacity);
    const plan out = p.partition(b, t);
    CHECK(out.method == "micro_batched");
    CHECK(find_violations(out, b, t).empty());
    const std::int32_t k = out.micro_batches();
    const token_count room = capacity * t.num_ranks();
    CHECK(k >= (b.total_tokens() + room - 1) / room);
    const micro_batch_view v = view_of(out, b);
    CHECK(std::none_of(v.of_sequence.begin(), v.of_sequence.end(), [](std::int32_t mb) { return mb < 0; }));
    CHECK(static_cast<std::int32_t>(v.tokens.size()) == k);  // no micro-batch is empty
    token_count most = 0, least = b.total_tokens();
    for (const auto& [mb, tokens] : v.tokens) {
      CHECK(tokens <= room);
      most = std::max(most, tokens), least = std::min(least, tokens);
    }
    CHECK(most - least <= b.max_length());  // the dealing keeps parts within one sequence
    CHECK(p.partition(b, t) == out);         // deterministic
    if (k == 1) {
      // one pass fits: the inner partitioner's own plan
      plan inner = hierarchical<attention_cost_metric>{capacity, {}}.partition(b, t);
      inner.method = out.method;
      CHECK(inner == out);
      continue;
    }
    ++multi;
    const auto note = std::find_if(out.notes.begin(), out.notes.end(), [](const plan_note& n) { return n.kind == note_kind::extra_micro_batches; });
    REQUIRE(note != out.notes.end());
    CHECK(note->values.front().value == static_cast<double>(k));
    // the fewest: one part fewer does not plan (the search steps by one for its first tries)
    const token_count lower = (b.total_tokens() + room - 1) / room;
    if (k > lower && k <= lower + 4) {
      bool refused = false;
      for (const auto& part : detail::deal_into_parts(b, k - 1)) {
        std::vector<token_count> lengths;
        for (const sequence_index s : part) lengths.push_back(b.length(s));
        try {
          (void)hierarchical<attention_cost_metric>{capacity, {}}.partition(batch(lengths), t);
        } catch (const infeasible&) {
          refused = true;
        }
      }
      CHECK(refused);
    }
  }
  CHECK(multi >= 40);
}

TEST_CASE("micro_batched honours a least number of micro-batches, one per sequence at most", "[partition][micro_batched]") {
  const topology t = make_topology(2, 2);
  const batch b({300, 200, 100, 50, 50});
  for (std::int32_t asked = 1; asked <= 7; ++asked) {
    INFO("asked " << asked);
    const plan p = hierarchical_batches{1000, {}, asked}.partition(b, t);
    CHECK(find_violations(p, b, t).empty());
    CHECK(p.micro_batches() == std::min(asked, b.size()));
  }
  // the registry builds it from the settings
  const plan r = partition(partitioner_by_name("micro_batched", {.capacity = 1000, .micro_batches = 3}), b, t);
  CHECK(r == hierarchical_batches{1000, {}, 3}.partition(b, t));
}

TEST_CASE("micro_batched refuses bad input with the numbers", "[partition][micro_batched]") {
  const topology t = make_topology(1, 2);
  const infeasible e = expect_error<infeasible>([&] { (void)hierarchical_batches{10, {}, 0}.partition(batch({5, 21}), t); });
  CHECK(e.value("max_length") == 21);
  CHECK(e.value("room") == 20);
  const invalid_argument c = expect_error<invalid_argument>([&] { (void)hierarchical_batches{0, {}, 0}.partition(batch({5}), t); });
  CHECK(c.value("capacity") == 0);
  const invalid_argument m = expect_error<invalid_argument>([&] { (void)hierarchical_batches{10, {}, -1}.partition(batch({5}), t); });
  CHECK(m.value("micro_batches") == -1);
}
