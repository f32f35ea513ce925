// exec/overlap.hpp: the exposed wait and hidden share of a rank's timed spans.
#include <catch2/catch.hpp>

#include <zeppelin/core/random.hpp>
#include <zeppelin/exec/overlap.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

using namespace zeppelin;
using Catch::Matchers::WithinAbs;

TEST_CASE("overlap_of: exposed wait is the idle time between launches of each stream", "[exec][overlap]") {
  random_generator rng(2024);
  for (int trial = 0; trial < 200; ++trial) {
    // per stream a chain of launches with known idle gaps (zero for some), exchanges beside them;
    // the streams' spans interleaved at random, each stream's in its own order
    const auto streams = static_cast<std::int32_t>(rng.between(1, 3));
    std::vector<std::vector<timed_span>> chains(static_cast<std::size_t>(streams));
    double launch_ms = 0, exposed_ms = 0, exchange_ms = 0;
    std::map<std::int32_t, double> exposed_in_round;  // launch i of a chain is in round i
    for (std::int32_t s = 0; s < streams; ++s) {
      double clock = rng.uniform();
      const auto n = rng.between(1, 6);
      for (std::int64_t i = 0; i < n; ++i) {
        if (i > 0) {
          const double gap = rng.below(3) == 0 ? 0.0 : rng.uniform();
          clock += gap, exposed_ms += gap;
          exposed_in_round[static_cast<std::int32_t>(i)] += gap;
        }
        const double d = 0.1 + rng.uniform();
        chains[static_cast<std::size_t>(s)].push_back({.kind = timed_kind::launch, .round = static_cast<std::int32_t>(i), .stream = s,
                                                       .start_ms = clock, .stop_ms = clock + d});
        clock += d, launch_ms += d;
      }
    }
    std::vector<timed_span> exchanges;
    for (std::int64_t i = rng.between(0, 4); i > 0; --i) {
      const double start = 5 * rng.uniform(), d = rng.uniform();
      exchanges.push_back({.kind = timed_kind::exchange, .stream = -1, .start_ms = start, .stop_ms = start + d});
      exchange_ms += d;
    }
    chains.push_back(exchanges);
    std::vector<timed_span> spans;
    std::vector<std::size_t> next(chains.size(), 0);
    for (;;) {
      std::vector<std::size_t> open;
      for (std::size_t c = 0; c < chains.size(); ++c)
        if (next[c] < chains[c].size()) open.push_back(c);
      if (open.empty()) break;
      const std::size_t c = open[rng.below(open.size())];
      spans.push_back(chains[c][next[c]++]);
    }
    const overlap_figures f = overlap_of(spans);
    CHECK_THAT(f.launch_ms, WithinAbs(launch_ms, 1e-9));
    CHECK_THAT(f.exposed_ms, WithinAbs(exposed_ms, 1e-9));
    CHECK_THAT(f.exchange_ms, WithinAbs(exchange_ms, 1e-9));
    const double hidden = exchange_ms > 0 ? std::clamp(1 - exposed_ms / exchange_ms, 0.0, 1.0) : 1.0;
    CHECK_THAT(f.hidden(), WithinAbs(hidden, 1e-9));
    // per round: a launch's idle time in its own round (the exchanges are all in round 0)
    for (const auto& [round, r] : overlap_per_round(spans)) {
      CAPTURE(trial, round);
      CHECK_THAT(r.exposed_ms, WithinAbs(exposed_in_round[round], 1e-9));
      CHECK(r.launch_ms > 0);
    }
  }
}

TEST_CASE("overlap_of: no exchanges is fully hidden and a wait longer than the exchanges none", "[exec][overlap]") {
  const std::vector<timed_span> alone{{.kind = timed_kind::launch, .start_ms = 0, .stop_ms = 1},
                                      {.kind = timed_kind::launch, .start_ms = 3, .stop_ms = 4}};
  CHECK(overlap_of(alone).exposed_ms == 2);
  CHECK(overlap_of(alone).hidden() == 1);
  std::vector<timed_span> waited = alone;
  waited.push_back({.kind = timed_kind::exchange, .stream = -1, .start_ms = 1, .stop_ms = 2.5});
  CHECK(overlap_of(waited).exchange_ms == 1.5);
  CHECK(overlap_of(waited).hidden() == 0);
  // launches on two streams back to back: nothing exposed, the exchange fully hidden
  const std::vector<timed_span> two{{.kind = timed_kind::launch, .stream = 0, .start_ms = 0, .stop_ms = 2},
                                    {.kind = timed_kind::launch, .stream = 1, .start_ms = 0, .stop_ms = 1},
                                    {.kind = timed_kind::exchange, .stream = -1, .start_ms = 0, .stop_ms = 1},
                                    {.kind = timed_kind::launch, .stream = 1, .start_ms = 1, .stop_ms = 2},
                                    {.kind = timed_kind::launch, .stream = 0, .start_ms = 2, .stop_ms = 3}};
  CHECK(overlap_of(two).exposed_ms == 0);
  CHECK(overlap_of(two).hidden() == 1);
}
