// Property tests of every partitioner over seeded random batches and topologies (1x1 .. 16x8,
// odd sizes): validity (coverage = token conservation, capacity, groups), determinism,
// termination, ring balance, locality, and errors that name their numbers.
#include "partition_test_support.hpp"

#include <zeppelin/core/fingerprint.hpp>

#include <catch2/catch.hpp>

using namespace zeppelin;
using namespace zeppelin_test;

namespace {

struct instance {
  topology topo;
  batch b;
  token_count capacity;
};

instance random_instance(std::uint64_t seed, token_count max_total = 1 << 16) {
  random_generator rng(seed, 7);
  const int nodes = static_cast<int>(rng.between(1, 16));
  const int gpus = static_cast<int>(rng.between(1, 8));
  const token_count total = rng.between(1, max_total);
  batch b = random_batch(rng, total);
  const token_count ranks = nodes * gpus;
  const token_count even = (total + ranks - 1) / ranks;
  static constexpr double slack[] = {0.0, 0.03, 0.15, 0.5, 2.0};
  const double s = slack[rng.below(5)];
  const token_count capacity = even + static_cast<token_count>(s * static_cast<double>(even)) + static_cast<token_count>(rng.below(3));
  return {make_topology(nodes, gpus), std::move(b), capacity};
}

template <class P>
void check_method(const P& method, const instance& in, int& planned, int& refused) {
  try {
    const plan p = method.partition(in.b, in.topo);
    INFO("method " << P::name << " nodes " << in.topo.nodes() << " gpus " << in.topo.gpus_per_node()
                   << " capacity " << in.capacity << " total " << in.b.total_tokens() << " seqs " << in.b.size());
    validate(p, in.b, in.topo);  // coverage (conservation), capacity, groups, consistency
    CHECK(p.method == P::name);
    CHECK(p.capacity == in.capacity);
    CHECK(fingerprint(method.partition(in.b, in.topo)) == fingerprint(p));  // determinism
    ++planned;
  } catch (const infeasible& e) {
    // Only the fixed-layout baselines may refuse a batch that fits N * P * L: their layout
    // needs more than L somewhere, and the exception says how much.
    REQUIRE(in.b.total_tokens() <= in.capacity * in.topo.num_ranks());
    const auto needed = e.value("tokens"), group_budget = e.value("group_budget"), length = e.value("length");
    REQUIRE((needed.has_value() || (group_budget.has_value() && length.has_value())));
    if (needed) CHECK(*needed > static_cast<double>(in.capacity));
    ++refused;
  }
}

}  // namespace

TEST_CASE("every partitioner returns valid, deterministic plans on random inputs", "[partition][property]") {
  int planned = 0, refused = 0;
  constexpr std::uint64_t trials = 1500;
  for (std::uint64_t seed = 0; seed < trials; ++seed) {
    const instance in = random_instance(seed);
    const token_count L = in.capacity;
    // hierarchical never refuses a batch that fits the cluster
    const plan h = hierarchical<>{.capacity = L}.partition(in.b, in.topo);
    validate(h, in.b, in.topo);
    int dummy = 0;
    check_method(hierarchical<>{.capacity = L}, in, planned, dummy);
    check_method(hierarchical<attention_cost_metric>{.capacity = L}, in, planned, dummy);
    REQUIRE(dummy == 0);
    check_method(even_split{.capacity = L}, in, planned, refused);
    check_method(allgather{.capacity = L}, in, planned, refused);
    check_method(per_document{.capacity = L}, in, planned, refused);
    check_method(hybrid_dp{.capacity = L}, in, planned, refused);
  }
  CHECK(planned > 5 * static_cast<int>(trials));
  WARN("plans " << planned << ", refused (layout needs more than L) " << refused);
}

TEST_CASE("zigzag ring groups are balanced within the proven bound, exactly on divisible lengths", "[partition][property]") {
  int hier_checked = 0;
  for (std::uint64_t seed = 0; seed < 600; ++seed) {
    instance in = random_instance(seed);
    in.capacity = in.capacity * 2 + 16;  // room for every layout
    const auto [h, trace] = hierarchical<>{.capacity = in.capacity}.solve(in.b, in.topo);
    if (!trace.contiguous) {
      CHECK(zigzag_balanced(h, in.b));
      ++hier_checked;
    }
    // the fixed layouts get all the room they may need (short sequences pile their single
    // chunks on the first ring positions)
    const token_count room = in.b.total_tokens();
    for (const plan& p : {even_split{.capacity = room}.partition(in.b, in.topo),
                          allgather{.capacity = room}.partition(in.b, in.topo),
                          hybrid_dp{.capacity = in.capacity}.partition(in.b, in.topo)}) {
      INFO(p.method);
      CHECK(zigzag_balanced(p, in.b));
    }
  }
  CHECK(hier_checked > 590);

  // divisible lengths: exactly equal pairs on every rank of the global ring
  random_generator rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int nodes = static_cast<int>(rng.between(1, 4)), gpus = static_cast<int>(rng.between(1, 8));
    const topology t = make_topology(nodes, gpus);
    const token_count unit = 2 * nodes * gpus;
    std::vector<token_count> lengths;
    for (int i = 0, n = static_cast<int>(rng.between(1, 6)); i < n; ++i) lengths.push_back(unit * rng.between(1, 50));
    const batch b(lengths);
    const plan p = even_split{.capacity = b.total_tokens()}.partition(b, t);
    const auto stats = compute_stats(p, b, t);
    for (const auto& r : stats.ranks) CHECK(r.causal_pairs == stats.ranks.front().causal_pairs);
    for (const auto& r : stats.ranks) CHECK(r.tokens == b.total_tokens() / t.num_ranks());
  }
}

TEST_CASE("per_document: equal pairs on the divisible part, token counts within one", "[partition][property]") {
  for (std::uint64_t seed = 0; seed < 400; ++seed) {
    instance in = random_instance(seed, 1 << 14);
    const plan p = per_document{.capacity = in.b.total_tokens()}.partition(in.b, in.topo);
    validate(p, in.b, in.topo);
    const token_count C = in.topo.num_ranks();
    for (sequence_index i = 0; i < in.b.size(); ++i) {
      const token_count body = 2 * C * (in.b.length(i) / (2 * C));
      if (body == 0) continue;
      const auto pairs = pairs_of(p, i, body);
      REQUIRE(static_cast<token_count>(pairs.size()) == C);
      for (const auto& [r, v] : pairs) CHECK(v == pairs.begin()->second);
    }
    const auto stats = compute_stats(p, in.b, in.topo);
    token_count lo = stats.ranks.front().tokens, hi = lo;
    for (const auto& r : stats.ranks) lo = std::min(lo, r.tokens), hi = std::max(hi, r.tokens);
    CHECK(hi - lo <= 1);
  }
}

TEST_CASE("hierarchical: local sequences are never split, sequences cross nodes only when they must",
          "[partition][hierarchical][property]") {
  int lowered = 0;
  for (std::uint64_t seed = 0; seed < 800; ++seed) {
    const instance in = random_instance(seed);
    const auto [p, trace] = hierarchical<>{.capacity = in.capacity}.solve(in.b, in.topo);
    validate(p, in.b, in.topo);
    if (trace.contiguous) continue;
    const token_count node_room = in.capacity * in.topo.gpus_per_node();
    CHECK(trace.inter_threshold <= node_room);
    CHECK(trace.inter_passes >= 1);
    CHECK(trace.inter_passes <= in.b.size() + 1);  // termination bound: s1 strictly decreases
    if (trace.inter_threshold < node_room) ++lowered;
    std::vector<std::vector<rank_index>> holders(static_cast<std::size_t>(in.b.size()));
    for (rank_index r = 0; r < p.num_ranks(); ++r)
      for (const shard& s : p.placements[static_cast<std::size_t>(r)].shards) holders[static_cast<std::size_t>(s.seq)].push_back(r);
    for (sequence_index i = 0; i < in.b.size(); ++i) {
      const token_count len = in.b.length(i);
      const auto& hs = holders[static_cast<std::size_t>(i)];
      const int node = trace.node_of_sequence[static_cast<std::size_t>(i)];
      bool crosses = false;
      for (const rank_index r : hs) crosses |= in.topo.node_of(r) != in.topo.node_of(hs.front());
      if (len > node_room) CHECK(crosses);                       // must cross: no node can hold it
      if (crosses) CHECK(len >= trace.inter_threshold);          // only z2 crosses nodes
      if (len < trace.inter_threshold) {                         // z01: on its node
        REQUIRE(node >= 0);
        for (const rank_index r : hs) CHECK(in.topo.node_of(r) == node);
        if (len < trace.local_threshold[static_cast<std::size_t>(node)]) CHECK(hs.size() == 1);  // z0: whole on one GPU
      } else {
        CHECK(node == -1);
      }
    }
  }
  CHECK(lowered > 0);  // the random inputs exercise the lowering path
}

TEST_CASE("bad input: clear exceptions naming the numbers, nothing returned", "[partition][errors]") {
  const topology t = make_topology(2, 4);
  const batch b({5000, 3000, 100});
  auto over = [&](auto method) {
    try {
      (void)method.partition(b, t);
      FAIL("no exception");
    } catch (const infeasible& e) {
      CHECK(e.value("total_tokens") == 8100.0);
      CHECK(e.value("nodes") == 2.0);
      CHECK(e.value("gpus_per_node") == 4.0);
      CHECK(e.value("capacity") == 1000.0);
      CHECK(std::string(e.what()).find("nodes * gpus_per_node * capacity") != std::string::npos);
    }
  };
  over(hierarchical<>{.capacity = 1000});
  over(even_split{.capacity = 1000});
  over(allgather{.capacity = 1000});
  over(per_document{.capacity = 1000});
  over(hybrid_dp{.capacity = 1000});
  CHECK_THROWS_AS(hierarchical<>{.capacity = 0}.partition(b, t), invalid_argument);
  CHECK_THROWS_AS(even_split{.capacity = -5}.partition(b, t), invalid_argument);
  CHECK_THROWS_AS((allgather{.capacity = 4096, .cp_size = 3}.partition(b, t)), invalid_argument);
  CHECK_THROWS_AS((per_document{.capacity = 4096, .cp_size = 16}.partition(b, t)), invalid_argument);
  // an empty topology cannot be built, an empty batch neither
  CHECK_THROWS_AS(make_topology(0, 8), invalid_argument);
  CHECK_THROWS_AS(make_topology(2, 0), invalid_argument);
  CHECK_THROWS_AS(batch(std::vector<token_count>{}), invalid_argument);
  // a capacity smaller than a fixed layout needs: total <= N P L, but the uneven chunks of
  // even_split put more than L on a rank; the exception names tokens and capacity, while
  // hierarchical still plans it
  const topology two = make_topology(1, 2);
  int found = 0;
  for (token_count x = 1; x < 12; ++x)
    for (token_count y = 1; y < 12; ++y) {
      const batch small({x, y});
      const token_count L = (x + y + 1) / 2;
      try {
        (void)even_split{.capacity = L}.partition(small, two);
      } catch (const infeasible& e) {
        ++found;
        CHECK(e.value("tokens").value() > static_cast<double>(L));
        CHECK(e.value("capacity").value() == static_cast<double>(L));
        CHECK(std::string(e.what()).find("capacity") != std::string::npos);
      }
      CHECK_NOTHROW(validate(hierarchical<>{.capacity = L}.partition(small, two), small, two));
    }
  CHECK(found > 0);
}
