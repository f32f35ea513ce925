// Pinned plans of the hierarchical partitioner: fingerprints of its plans (and of its trace
// and notes) on seeded random batches, for both node allocations and several metrics. The
// values were recorded from the solver before it was split into allocation policies; a
// refactor must keep them. An intended change to the partitioner's decisions updates them
// (and says why in its commit). Lengths are drawn with integer draws only, so the batches
// are the same on every platform.
#include "partition_test_support.hpp"

#include <zeppelin/core/fingerprint.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <string_view>
#include <vector>

using namespace zeppelin;
using namespace zeppelin_test;

namespace {

struct golden_case {
  batch b;
  topology t;
  token_count capacity;
};

// 60 cases: 1-8 nodes of 1-8 GPUs, skewed lengths (a nested draw makes short sequences
// common and long ones rare), capacity from exact fill (L = ceil(T / R)) to 50 % slack.
std::vector<golden_case> golden_cases() {
  std::vector<golden_case> out;
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    random_generator rng(seed, 1234);
    const int nodes = static_cast<int>(rng.between(1, 8)), gpus = static_cast<int>(rng.between(1, 8));
    const topology t = make_topology(nodes, gpus);
    const token_count total = rng.between(1, 4096 * static_cast<token_count>(t.num_ranks()));
    const token_count top = rng.between(1, total);
    std::vector<token_count> lengths;
    for (token_count left = total; left > 0;) {
      const token_count l = std::min(left, rng.between(1, rng.between(1, top)));
      lengths.push_back(l);
      left -= l;
    }
    const batch b(lengths);
    const token_count even = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks();
    static constexpr token_count slack_permille[] = {0, 0, 30, 125, 500};
    const token_count L = even + even * slack_permille[rng.below(5)] / 1000;
    out.push_back({b, t, L});
  }
  return out;
}

// One number per method over all cases: every plan's fingerprint, its notes and the trace.
// `make(L)` builds the partitioner for capacity L.
template <class Make>
std::uint64_t golden_hash(Make make) {
  fnv1a_hasher h;
  for (const golden_case& c : golden_cases()) {
    const auto [p, trace] = make(c.capacity).solve(c.b, c.t);
    h.add(static_cast<std::int64_t>(fingerprint(p)));
    for (const plan_note& n : p.notes) h.add(std::string_view(n.text));
    h.add(trace.inter_threshold);
    h.add(trace.inter_passes);
    h.add(trace.proportional);
    h.add(trace.contiguous);
    h.add(trace.streamed);
    for (const token_count v : trace.local_threshold) h.add(v);
    for (const std::int32_t v : trace.node_of_sequence) h.add(v);
    for (const sequence_index v : trace.inter_spilled) h.add(v);
    h.add(-1);
    for (const sequence_index v : trace.intra_spilled) h.add(v);
  }
  return h.value();
}

template <class Metric, class Allocation>
std::uint64_t golden(const Metric& metric) {
  return golden_hash([&](token_count L) { return hierarchical<Metric, Allocation>{.capacity = L, .metric = metric}; });
}

}  // namespace

TEST_CASE("hierarchical: plans pinned by fingerprint, both allocations, several metrics",
          "[partition][hierarchical][golden]") {
  const attention_cost_metric linear{.linear_pairs_per_token = 3000};
  const cost_model_metric<> cm{};
  struct row {
    const char* what;
    std::uint64_t got, want;
  };
  const row rows[] = {
      {"tokens / by tokens", golden<token_metric, token_allocation>({}), 0xe2d15573744e9ecf},
      {"attention / by tokens", golden<attention_cost_metric, token_allocation>({}), 0xc4cf747cdaade65},
      {"attention+linear / by tokens", golden<attention_cost_metric, token_allocation>(linear), 0xaab31978b5fc2fee},
      {"cost model / by tokens", golden<cost_model_metric<>, token_allocation>(cm), 0xf024256c87ebaa08},
      {"tokens / by metric", golden<token_metric, metric_allocation>({}), 0x3efca882e19cb5d9},
      {"attention / by metric", golden<attention_cost_metric, metric_allocation>({}), 0x4077cbfe68483a36},
      {"attention+linear / by metric", golden<attention_cost_metric, metric_allocation>(linear), 0xd28976805dd3ec35},
      {"cost model / by metric", golden<cost_model_metric<>, metric_allocation>(cm), 0x5cd17a392ee2d2c4},
  };
  for (const row& r : rows) {
    INFO(r.what << ": 0x" << std::hex << r.got);
    CHECK(r.got == r.want);
  }
}
