// tests/sim/flexsp_step_test.cpp
// The FlexSP-like baseline (sim/flexsp_step.hpp): every sequence in exactly one group; a
// micro-batch's groups are disjoint aligned blocks of the cluster; a group's degree is the
// smallest at which its sequence fits and its sequences fit together; on free links the step
// is within two layers per micro-batch and pass of the sum of their slowest groups (the groups
// advance layer by layer together, a layer's gather waiting for them all); real links only
// add ZeRO-3's time; deterministic; errors name the value.
#include <catch2/catch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/sim/flexsp_step.hpp>

#include <algorithm>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;

namespace {
constexpr double gib = double(1ull << 30);

topology with_free_links(const topology& t) {
  topology_config c = t.config();
  c.intra_node = {1e30, 0};
  c.nic = {1e30, 0};
  return topology(c);
}
}  // namespace

TEST_CASE("FlexSP-like step: groups, degrees, memory and the lock-step time", "[sim][flexsp]") {
  random_generator g(53);
  for (int trial = 0; trial < 24; ++trial) {
    const model_config model = trial % 2 == 0 ? models::gpt_7b() : models::gpt_13b();
    const topology topo = clusters::infinipipe_a800_ib(trial % 3 == 0 ? 2 : 4);
    // every fourth trial tight on memory: short sequences need groups of several GPUs, whose
    // layers compute faster than their parameters cross the group
    const double usable = static_cast<double>(trial % 4 == 3 ? g.between(14, 18) : g.between(40, 72)) * gib;
    std::vector<token_count> lengths(static_cast<std::size_t>(g.between(1, 120)));
    for (auto& l : lengths) l = g.below(10) == 0 ? g.between(32768, 200000) : g.between(16, 8192);
    CAPTURE(trial, model.name, topo.num_ranks(), usable, lengths.size());
    const flexsp_step_result r = simulate_flexsp_step(lengths, model, with_free_links(topo), usable);
    const double budget = stage_budgets(model, usable, topo.num_ranks(), 1).front();
    std::vector<int> seen(lengths.size(), 0);
    double lockstep = 0;
    for (const std::vector<flexsp_group>& batch : r.micro_batches) {
      REQUIRE(!batch.empty());
      std::vector<int> used(static_cast<std::size_t>(topo.num_ranks()), 0);
      double slowest_forward = 0, slowest_backward = 0;
      for (const flexsp_group& grp : batch) {
        REQUIRE(grp.degree >= 1);
        REQUIRE(grp.first_gpu % grp.degree == 0);
        REQUIRE(grp.first_gpu + grp.degree <= topo.num_ranks());
        for (int k = 0; k < grp.degree; ++k) REQUIRE(++used[static_cast<std::size_t>(grp.first_gpu + k)] == 1);
        REQUIRE(!grp.sequences.empty());
        const chunk_cost_model cost = chunk_cost_model::for_model(model, topo, grp.degree, 1);
        chunk packed{0, {}};
        double bytes = 0;
        for (const std::int64_t s : grp.sequences) {
          ++seen[static_cast<std::size_t>(s)];
          const chunk whole{0, {{s, 0, lengths[static_cast<std::size_t>(s)]}}};
          packed.slices.push_back(whole.slices.front());
          bytes += cost.activation_bytes(whole, lengths);
          if (grp.recompute) continue;
          REQUIRE(cost.activation_bytes(whole, lengths) <= budget);
          // the smallest degree: half of it does not fit (or is no Ulysses group)
          if (grp.degree > 1) {
            const chunk_cost_model half = chunk_cost_model::for_model(model, topo, grp.degree / 2, 1);
            REQUIRE(half.activation_bytes(whole, lengths) > budget);
          }
        }
        if (grp.recompute) {
          REQUIRE(grp.degree == topo.num_ranks());
          REQUIRE(grp.sequences.size() == 1);
        } else {
          REQUIRE(bytes <= budget * (1 + 1e-12));
        }
        // on free links the costs are the cost model's without its ZeRO-3 floor
        const chunk_cost_model free_cost = chunk_cost_model::for_model(model, with_free_links(topo), grp.degree, 1);
        slowest_forward = std::max(slowest_forward, free_cost.seconds(free_cost.forward, packed));
        slowest_backward = std::max(slowest_backward, free_cost.seconds(free_cost.backward, packed) +
                                                          (grp.recompute ? free_cost.compute_seconds(free_cost.forward, packed) : 0.0));
      }
      lockstep += slowest_forward + slowest_backward;
    }
    for (const int n : seen) REQUIRE(n == 1);
    // a layer's gather needs every group done with the layer two back, so a group runs at
    // most a layer ahead of the slowest, and a pass starts in the last two layers of the one
    // before: between the lock-step sum less two layers of each pass, and that sum
    REQUIRE(r.iteration_s <= lockstep * (1 + 1e-12));
    REQUIRE(r.iteration_s >= lockstep * (model.layers - 2) / model.layers);
    // real links: ZeRO-3's gathers over the whole cluster can only add time
    const flexsp_step_result real = simulate_flexsp_step(lengths, model, topo, usable);
    REQUIRE(real.micro_batches.size() == r.micro_batches.size());
    // the compute streams run the groups' own work, not the cost model's ZeRO-3 floor (the
    // gathers are flows here): their busy time is the sum of Eq. 4 over the groups
    double busy = 0, expected_busy = 0;
    for (const stream_accounting& a : real.run.ranks) busy += a.busy_total();
    for (const std::vector<flexsp_group>& batch : real.micro_batches)
      for (const flexsp_group& grp : batch) {
        const chunk_cost_model cost = chunk_cost_model::for_model(model, topo, grp.degree, 1);
        chunk packed{0, {}};
        for (const std::int64_t s : grp.sequences) packed.slices.push_back({s, 0, lengths[static_cast<std::size_t>(s)]});
        expected_busy += cost.busy_seconds(cost.forward, packed) + cost.busy_seconds(cost.backward, packed) +
                         (grp.recompute ? cost.compute_seconds(cost.forward, packed) : 0.0);
      }
    REQUIRE(busy == Approx(expected_busy).epsilon(1e-9));
    REQUIRE(real.iteration_s >= r.iteration_s * (1 - 1e-12));
    REQUIRE(simulate_flexsp_step(lengths, model, topo, usable).iteration_s == real.iteration_s);
  }
}

TEST_CASE("FlexSP-like step: errors name the value", "[sim][flexsp]") {
  const model_config model = models::gpt_7b();
  const topology topo = clusters::infinipipe_a800_ib(2);
  zeppelin_test::expect_invalid([&] { (void)simulate_flexsp_step({}, model, topo, 40 * gib); });
  const std::vector<token_count> zero{100, 0};
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)simulate_flexsp_step(zero, model, topo, 40 * gib); }).value("index") == 1);
  const std::vector<token_count> one{100};
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)simulate_flexsp_step(one, model, topo, -1); }).value("usable_bytes") == -1);
}
