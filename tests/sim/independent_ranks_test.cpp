// Simulating independent ranks apart (sim/detail/independent_ranks.hpp, simulate's chunks):
// the chunks cover every rank once, never split a piece or a NIC, and the step a chunked
// simulation computes, on one thread or several, is the one simulating every rank in one
// engine computes, bit for bit.
#include <catch2/catch.hpp>

#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/datasets.hpp>
#include <zeppelin/data/sampler.hpp>
#include <zeppelin/planner.hpp>
#include <zeppelin/sim.hpp>
#include <zeppelin/sim/detail/independent_ranks.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

using namespace zeppelin;

namespace {

batch random_batch(std::uint64_t seed, token_count total) {
  random_generator rng(seed, 11);
  const char* names[] = {"arxiv", "github", "prolong64k"};
  return sample_batch(dataset_by_name(names[rng.below(3)]), total, rng);
}

// cluster C (a NIC per GPU) and cluster A (two GPUs per NIC), two and four nodes
topology topology_of(std::uint64_t seed) {
  const int nodes = seed % 2 == 0 ? 2 : 4;
  return seed % 3 == 0 ? clusters::cluster_a(nodes) : clusters::cluster_c(nodes);
}

// f(seed, topology, batch, candidate) over seeded batches of 4K tokens per GPU and every
// candidate of the cost-driven planner
template <class F>
void for_each_case(F&& f) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const topology t = topology_of(seed);
    const batch b = random_batch(seed, 8 * 4096 * t.nodes());
    for (const method_spec& spec : cost_driven_candidates) {
      CAPTURE(seed, spec.name);
      f(seed, t, b, spec);
    }
  }
}

}  // namespace

TEST_CASE("independent rank chunks: every rank once, ascending, no piece or NIC between chunks", "[sim][chunks]") {
  const model_config m = models::llama_3b();
  for_each_case([&](std::uint64_t, const topology& t, const batch& b, const method_spec& spec) {
    method_setup setup;
    const plan p = partition_for(spec, b, t, method_capacity(setup), setup.metric, &m);
    const execution_program prog =
        make_program(p, b, t, to_program_options(options_for(spec, setup), wire_format::for_model(m)));
    for (const pass_kind pass : {pass_kind::forward, pass_kind::backward})
      for (std::int32_t mb = 0; mb < prog.micro_batches; ++mb) {
        const auto R = static_cast<std::size_t>(t.num_ranks());
        const std::vector<std::size_t> weight(R, 3);
        for (const std::size_t target : {std::size_t{1}, std::size_t{10}, std::numeric_limits<std::size_t>::max()}) {
          const auto chunks = detail::independent_rank_chunks(prog, pass, mb, t, weight, target);
          std::vector<int> chunk_of(R, -1);
          for (std::size_t c = 0; c < chunks.size(); ++c) {
            REQUIRE_FALSE(chunks[c].empty());
            CHECK(std::is_sorted(chunks[c].begin(), chunks[c].end()));
            for (const rank_index r : chunks[c]) {
              CHECK(chunk_of[static_cast<std::size_t>(r)] == -1);
              chunk_of[static_cast<std::size_t>(r)] = static_cast<int>(c);
            }
          }
          CHECK(std::count(chunk_of.begin(), chunk_of.end(), -1) == 0);
          for (const program_phase& ph : prog.phases)
            if (ph.pass == pass && prog.levels[static_cast<std::size_t>(ph.level)].micro_batch == mb)
              for (const transfer& x : ph.pieces)
                CHECK(chunk_of[static_cast<std::size_t>(x.src)] == chunk_of[static_cast<std::size_t>(x.dst)]);
          for (rank_index r = 1; r < t.num_ranks(); ++r)
            if (t.nic_of(r) == t.nic_of(r - 1)) CHECK(chunk_of[static_cast<std::size_t>(r)] == chunk_of[static_cast<std::size_t>(r - 1)]);
          if (target == std::numeric_limits<std::size_t>::max()) CHECK(chunks.size() == 1);
        }
      }
  });
}

TEST_CASE("a chunked simulation computes the step of one engine over every rank, bit for bit", "[sim][chunks]") {
  const model_config m = models::llama_3b();
  std::size_t split = 0;  // simulations whose passes really ran in more than one engine
  for_each_case([&](std::uint64_t seed, const topology& t, const batch& b, const method_spec& spec) {
    method_setup setup;
    setup.chained_layers = seed % 2 == 0 ? 1 : 2;
    const plan p = partition_for(spec, b, t, method_capacity(setup), setup.metric, &m);
    sim_options whole = options_for(spec, setup), apart = whole;
    whole.tasks_per_engine = std::numeric_limits<std::size_t>::max();
    apart.tasks_per_engine = 1;  // every set of ranks that exchange bytes in its own engine
    const sim_cost_model cost = sim_cost_model::for_topology(t);
    apart.threads = seed % 2 == 0 ? 3 : 1;  // chunks on threads: still combined in rank order
    const sim_result one = simulate(p, b, t, m, whole, cost), chunked = simulate(p, b, t, m, apart, cost);
    CHECK(chunked.step_time_s == one.step_time_s);
    CHECK(chunked.forward_s == one.forward_s);
    CHECK(chunked.backward_s == one.backward_s);
    CHECK(chunked.attention_pairs == one.attention_pairs);
    CHECK(chunked.attention_launches == one.attention_launches);
    CHECK(chunked.max_port_utilization == one.max_port_utilization);
    // sums over ranks, added in another order: equal to rounding
    CHECK(chunked.cross_node_bytes == Approx(one.cross_node_bytes).epsilon(1e-12));
    CHECK(chunked.intra_node_bytes == Approx(one.intra_node_bytes).epsilon(1e-12));
    CHECK(chunked.attention_flops == Approx(one.attention_flops).epsilon(1e-12));
    REQUIRE(chunked.ranks.size() == one.ranks.size());
    for (std::size_t r = 0; r < one.ranks.size(); ++r) {
      CHECK(chunked.ranks[r].attention_s == one.ranks[r].attention_s);
      CHECK(chunked.ranks[r].linear_s == one.ranks[r].linear_s);
      CHECK(chunked.ranks[r].exposed_comm_s == one.ranks[r].exposed_comm_s);
      CHECK(chunked.ranks[r].idle_s == Approx(one.ranks[r].idle_s).margin(1e-12 * one.step_time_s));
    }
    const execution_program prog = make_program(p, b, t, to_program_options(apart, wire_format::for_model(m)));
    const std::vector<std::size_t> weight(static_cast<std::size_t>(t.num_ranks()), 1);
    if (detail::independent_rank_chunks(prog, pass_kind::backward, 0, t, weight, 1).size() > 1) ++split;
  });
  CHECK(split > 10);  // the property is tested on plans that really split
}

TEST_CASE("tasks_per_engine and threads must be positive", "[sim][chunks]") {
  const topology t = clusters::cluster_c(1);
  const batch b(std::vector<token_count>{4096, 2048});
  const model_config m = models::llama_3b();
  const method_spec& spec = method_by_name("te_cp");
  method_setup setup;
  const plan p = partition_for(spec, b, t, method_capacity(setup), setup.metric, &m);
  sim_options o = options_for(spec, setup);
  o.tasks_per_engine = 0;
  CHECK_THROWS_WITH(simulate(p, b, t, m, o), Catch::Contains("tasks_per_engine"));
  o.tasks_per_engine = 1;
  o.threads = 0;
  CHECK_THROWS_WITH(simulate(p, b, t, m, o), Catch::Contains("threads"));
}
