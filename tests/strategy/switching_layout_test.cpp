// tests/strategy/switching_layout_test.cpp
// The mutual slices in whole elements (strategy/switching_layout.hpp) as the step program
// carries them (step/build.hpp add_switching): the parameter tensors add up to the memory
// model's parameters; segments tile each tensor; on heterogeneous plans of random pipelines,
// every user's pull buffer is tiled exactly (the slices it receives and the segments it owns,
// no gap, no overlap), every push reduce lands inside its reducer's segments, and every owner
// receives each (segment, tensor) of its master range at most once.
#include <catch2/catch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/pipeline_memory.hpp>
#include <zeppelin/step/build.hpp>
#include <zeppelin/strategy/iteration_step_plan.hpp>
#include <zeppelin/strategy/switching_layout.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <tuple>
#include <utility>
#include <vector>

#include "helpers.hpp"

using namespace zeppelin;

namespace switching_layout_test {

// An iteration plan of `schemes` (tp, pp, cp), each pipeline one micro-batch of one sequence.
iteration_plan plan_of_schemes(const std::vector<parallel_scheme>& schemes) {
  iteration_plan plan;
  std::int64_t sequence = 0;
  for (const parallel_scheme& s : schemes) {
    scheme_profile p = strategy_test::profile(s.tp, s.pp, 64000, 1e-9, 1e-4, 0.01);
    p.scheme.cp = s.cp;
    pipeline_plan pl{p, {sequence}, {}};
    pl.packing.micro_batches = {{sequence}};
    plan.pipelines.push_back(std::move(pl));
    ++sequence;
  }
  return plan;
}

}  // namespace switching_layout_test

TEST_CASE("switching layout: the parameter tensors add up to the memory model's parameters, segments tile them", "[strategy]") {
  for (const model_config& m : {models::llama_550m(), models::llama_7b(), models::moe_8x550m(), models::llama3_8b()}) {
    const pipeline_memory_model full{m, {}, {}};
    for (const int first : {0, 1, m.layers / 2})
      for (const int layers : {1, m.layers - first}) {
        if (first + layers > m.layers) continue;
        const std::vector<std::int64_t> t = parameter_tensors(m, first, layers);
        const double sum = static_cast<double>(std::accumulate(t.begin(), t.end(), std::int64_t{0}));
        CAPTURE(m.name, first, layers);
        CHECK(sum == full.parameters({layers, first == 0, first + layers == m.layers}));
        for (const std::int64_t S : {1, 3, 16, 96}) {
          CHECK(slice_elements(t, 0, S, S) == static_cast<std::int64_t>(sum));
          std::int64_t tiled = 0;
          for (std::int64_t k = 0; k < S; ++k) tiled += slice_elements(t, k, k + 1, S);
          CHECK(tiled == static_cast<std::int64_t>(sum));
        }
      }
  }
}

TEST_CASE("switching layout: the program's pulls tile every user's segments, pushes land inside their holders", "[strategy][step]") {
  const model_config m = models::llama_550m();
  random_generator rng(23);
  const std::vector<parallel_scheme> menu = {{1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 1}, {2, 1, 2}, {4, 1, 1}};
  for (int trial = 0; trial < 12; ++trial) {
    std::vector<parallel_scheme> schemes;
    long long gpus = 0;
    while (gpus < 4 || (gpus < 16 && rng.below(3) != 0)) {
      const parallel_scheme s = menu[rng.below(menu.size())];
      if (gpus + s.gpus() > 16) break;
      schemes.push_back(s), gpus += s.gpus();
    }
    const topology cluster = clusters::hydraulis_a800_ib(static_cast<int>((gpus + 7) / 8));
    std::vector<token_count> lengths(schemes.size(), 4096);
    const step_plan p = step_plan_of(switching_layout_test::plan_of_schemes(schemes), lengths, cluster, m);
    const step_program prog = make_step_program(p, cluster, m, hydraulis_program_options());
    const std::int64_t eb = prog.options.parameter_bytes;
    // per (rank, first layer, layers): the byte ranges pulls write
    std::map<std::tuple<rank_index, int, int>, std::vector<std::pair<std::int64_t, std::int64_t>>> pulled;
    // per (owner, tensor index, segment... ): links received, as (rank, first layer, layers, offset)
    std::map<std::tuple<rank_index, int, int, std::int64_t>, int> linked;
    for (const step_transfer& x : prog.transfers) {
      if (x.from.tensor == step_tensor::master_parameters) pulled[{x.dst, x.to.layer, x.to.layers}].push_back({x.to.offset, x.to.offset + x.bytes});
      if (x.to.tensor == step_tensor::master_gradients) ++linked[{x.dst, x.to.layer, x.to.layers, x.to.offset}];
    }
    const std::vector<detail::switching_user> users = detail::switching_users(p, m);
    const detail::switching_grid grid = detail::switching_grid_of(users, prog.num_ranks());
    const std::int64_t S = grid.pull_segments, N = prog.num_ranks();
    CAPTURE(trial, gpus, schemes.size());
    for (const detail::switching_user& u : users) {
      const std::vector<std::int64_t> t = parameter_tensors(m, u.first_layer, u.layers);
      const std::int64_t lo = u.tp_rank * S / u.tp, hi = (u.tp_rank + 1) * S / u.tp;
      auto ranges = pulled[{u.gpu, u.first_layer, u.layers}];
      const std::int64_t own_lo = std::max(lo, u.gpu * (S / N)), own_hi = std::min(hi, (u.gpu + 1) * (S / N));
      if (own_lo < own_hi) ranges.push_back({slice_elements(t, lo, own_lo, S) * eb, slice_elements(t, lo, own_hi, S) * eb});
      std::sort(ranges.begin(), ranges.end());
      std::int64_t at = 0;
      for (const auto& [a, b] : ranges) {
        CHECK(a == at);  // no gap, no overlap
        at = b;
      }
      CHECK(at == slice_elements(t, lo, hi, S) * eb);
    }
    for (const auto& [where, count] : linked) CHECK(count == 1);
  }
}
