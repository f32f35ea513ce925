// examples/quickstart/main.cpp
// The README's API example, compiled and run by ctest so it cannot drift: plan a sampled
// batch with Zeppelin's hierarchical partitioner, check and fingerprint the plan, build a
// ring group's schedule and the remap to the token-balanced layout, price the step, let the
// cost-driven planner choose the fastest layout and execution, and let the step planner
// choose the whole iteration's composition.
// Out: one line per stage on stdout; exit status 0.
#include <zeppelin/zeppelin.hpp>

#include <cstddef>
#include <cstdio>
#include <vector>

int main() {
  using namespace zeppelin;

  // A 128K-token batch drawn from the GitHub length mix of Zeppelin's Table 2.
  const batch b = sample_batch(datasets::github(), 128 * 1024, /*seed=*/1);
  const topology cluster = clusters::cluster_c(/*nodes=*/4);  // 4 x 8 H200, one 400G NIC per GPU
  const model_config model = models::llama_7b();

  // Plan: which token ranges of which sequence live on which GPU, in which ring group.
  const plan p = hierarchical<>{.capacity = 4608}.partition(b, cluster);
  validate(p, b, cluster);  // throws invalid_plan naming the broken invariant
  std::printf("plan %016llx: %zu ring groups\n", static_cast<unsigned long long>(fingerprint(p)), p.groups.size());
  const std::vector<std::byte> wire = to_bytes(p);  // plan on one rank, broadcast, plan_from_bytes(wire)
  if (plan_from_bytes(wire) != p) return 1;

  // The rounds of ring group 0: per rank, the blocks (query x key ranges, mask) and peers.
  const ring_schedule ring = make_ring_schedule(p, b, /*group=*/0);
  std::printf("group 0: %d ranks, %d forward rounds\n", ring.size(), ring.rounds());

  // Remap to equal tokens per GPU for the linear modules (exact min-max solver, priced in
  // seconds on this cluster's links for one hidden state per token) and back.
  const double bytes = hidden_bytes_per_token(model);
  const relayout_plan to_linear = plan_remap(p, cluster, bytes, exact_remap{});
  const relayout_plan back = inverse(to_linear);
  const remap_costs cost = evaluate(make_remap_problem(p, cluster, bytes), to_linear.matrix);
  std::printf("remap moves %lld tokens (%lld across nodes), busiest sender %.3f ms; inverse has %zu ranks\n",
              static_cast<long long>(cost.moved_tokens), static_cast<long long>(cost.inter_node_tokens), cost.max_send * 1e3,
              back.ranks.size());

  // Price one forward + backward step of this plan with Zeppelin's execution (proxy routing,
  // prioritized engine, remapping) against the perfect-balance bound.
  const method_run run = run_method("zeppelin_paper", b, cluster, model);
  std::printf("simulated step %.1f ms, %.0f tokens/s, efficiency %.2f\n", run.result.step_time_s * 1e3,
              run.result.tokens_per_s, run.result.efficiency);

  // Or let the planner choose the layout and execution by cost: it prices Zeppelin's layout,
  // Ulysses', the rings' and the other baselines' with the simulator and keeps the fastest.
  const cost_driven_choice choice = plan_by_cost(b, cluster, model);
  std::printf("cost-driven planner: %s, step %.1f ms, efficiency %.2f\n", choice.chosen.candidate.c_str(),
              choice.chosen.result.step_time_s * 1e3, choice.chosen.result.efficiency);

  // Plan the whole iteration: each paper's composition (packing, pipelines, CP layouts,
  // schedule, recomputation) and their mixes, priced on the step simulator.
  const step_decision step = plan_step({.documents = {b.lengths().begin(), b.lengths().end()}, .cluster = cluster, .model = model});
  std::printf("step planner: %s, iteration %.1f ms, efficiency %.2f, %zu candidates priced\n", step.chosen_name().c_str(),
              step.predicted_s * 1e3, step.efficiency(), step.candidates.size());
  return 0;
}
