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
    // The instances fit (L >= ceil(T / R)): no method may refuse one (the remainder dealer
    // keeps the flat layouts within one token of the average).
    INFO(e.what());
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
  CHECK(planned == 6 * static_cast<int>(trials));
  CHECK(refused == 0);
}

TEST_CASE("zigzag ring groups are balanced within the proven bound, exactly on divisible lengths", "[partition][property]") {
  int hier_checked = 0;
  for (std::uint64_t seed = 0; seed < 600; ++seed) {
    instance in = random_instance(seed);
    in.capacity = in.capacity * 2 + 16;  // room for every layout
    const auto [h, trace] = hierarchical<>{.capacity = in.capacity}.solve(in.b, in.topo);
    if (!trace.contiguous) {
      CHECK(fragments_balanced(h, in.b));
      ++hier_checked;
    }
    // the flat layouts at their tightest capacity: their rotated zigzag keeps the bound
    const token_count room = (in.b.total_tokens() + in.topo.num_ranks() - 1) / in.topo.num_ranks();
    for (const plan& p : {even_split{.capacity = room}.partition(in.b, in.topo),
                          allgather{.capacity = room}.partition(in.b, in.topo),
                          hybrid_dp{.capacity = in.capacity}.partition(in.b, in.topo)}) {
      INFO(p.method);
      CHECK(zigzag_balanced(p, in.b));
    }
  }
  CHECK(hier_checked == 600);

  // divisible lengths: exactly equal pairs on every rank of the global ring
  random_generator rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int nodes = static_cast<int>(rng.between(1, 4)), gpus = static_cast<int>(rng.between(1, 8));
    const topology t = make_topology(nodes, gpus);
    const token_count unit = 2 * nodes * gpus;
    std::vector<token_count> lengths;
    for (int i = 0, n = static_cast<int>(rng.between(1, 6)); i < n; ++i) lengths.push_back(unit * rng.between(1, 50));
    const batch b(lengths);
    const plan p = even_split{.capacity = b.total_tokens() / t.num_ranks()}.partition(b, t);  // exact fill
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
  int spilled = 0;
  for (std::uint64_t seed = 0; seed < 800; ++seed) {
    const instance in = random_instance(seed);
    const auto [p, trace] = hierarchical<>{.capacity = in.capacity}.solve(in.b, in.topo);
    validate(p, in.b, in.topo);
    REQUIRE_FALSE(trace.contiguous);
    const token_count node_room = in.capacity * in.topo.gpus_per_node();
    CHECK(trace.inter_threshold == node_room);  // no restart: s1 = P L
    CHECK(trace.inter_passes == 1);
    spilled += !trace.inter_spilled.empty();
    std::vector<std::vector<rank_index>> holders(static_cast<std::size_t>(in.b.size()));
    for (rank_index r = 0; r < p.num_ranks(); ++r)
      for (const shard& s : p.placements[static_cast<std::size_t>(r)].shards) holders[static_cast<std::size_t>(s.seq)].push_back(r);
    for (sequence_index i = 0; i < in.b.size(); ++i) {
      const token_count len = in.b.length(i);
      const auto& hs = holders[static_cast<std::size_t>(i)];
      const int node = trace.node_of_sequence[static_cast<std::size_t>(i)];
      bool crosses = false;
      for (const rank_index r : hs) crosses |= in.topo.node_of(r) != in.topo.node_of(hs.front());
      const bool inter_split = std::binary_search(trace.inter_spilled.begin(), trace.inter_spilled.end(), i);
      const bool intra_split = std::binary_search(trace.intra_spilled.begin(), trace.intra_spilled.end(), i);
      if (len > node_room) CHECK(crosses);                             // must cross: no node can hold it
      if (crosses) CHECK((len >= trace.inter_threshold || inter_split));  // only z2 and spills cross nodes
      if (len < trace.inter_threshold && !inter_split) {              // z01: on its node
        REQUIRE(node >= 0);
        for (const rank_index r : hs) CHECK(in.topo.node_of(r) == node);
        if (len < trace.local_threshold[static_cast<std::size_t>(node)] && !intra_split)
          CHECK(hs.size() == 1);  // z0: whole on one GPU unless split to fit
      } else {
        CHECK(node == -1);
      }
    }
  }
  CHECK(spilled > 0);  // the random inputs exercise the inter-node spill
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
  // the tightest capacity, ceil(T / R): every method plans every small batch (before the
  // remainder dealer, even_split refused e.g. {1, 1} on 2 GPUs at L = 1: both single
  // chunks on position 0), one token below it every method refuses
  const topology two = make_topology(1, 2);
  for (token_count x = 1; x < 12; ++x)
    for (token_count y = 1; y < 12; ++y) {
      const batch small({x, y});
      const token_count L = (x + y + 1) / 2;
      CHECK_NOTHROW(validate(even_split{.capacity = L}.partition(small, two), small, two));
      CHECK_NOTHROW(validate(allgather{.capacity = L}.partition(small, two), small, two));
      CHECK_NOTHROW(validate(hierarchical<>{.capacity = L}.partition(small, two), small, two));
      if (L > 1) CHECK_THROWS_AS(even_split{.capacity = L - 1}.partition(small, two), infeasible);
    }
}
