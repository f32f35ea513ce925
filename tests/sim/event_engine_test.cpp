// Hand-computed cases of the discrete-event core: streams, policies, shared ports, accounting.
#include <catch2/catch.hpp>

#include <zeppelin/core/fingerprint.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/sim/event_engine.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

using namespace zeppelin;

namespace {
// 2 nodes x 2 GPUs, ONE NIC per node shared by both GPUs: 10 B/s NIC, 100 B/s NVLink, no latency.
topology tiny(double latency = 0) {
  return topology({"tiny", 2, 2, 1, {0, 0}, {100, latency}, {10, latency}, {"G", 1e12, 1e9, 1e12}});
}
task_tag compute_tag() { return {task_kind::attention_forward}; }
task_tag flow_tag() { return {task_kind::kv}; }
}  // namespace

TEST_CASE("a dependency chain of compute and flow adds up", "[sim][engine]") {
  const topology t = tiny(0.5);
  event_engine e(t);
  const task_id a = e.compute(0, 2.0, compute_tag(), 0, {});
  const task_id f = e.flow(0, 2, 30.0, flow_tag(), {a});     // inter-node: 30 / 10 + 0.5 latency
  const task_id b = e.compute(2, 1.0, compute_tag(), 0, {f});
  const engine_run r = e.run();
  CHECK(r.end[static_cast<std::size_t>(a)] == Approx(2.0));
  CHECK(r.start[static_cast<std::size_t>(f)] == Approx(2.0));
  CHECK(r.end[static_cast<std::size_t>(f)] == Approx(5.5));
  CHECK(r.end[static_cast<std::size_t>(b)] == Approx(6.5));
  CHECK(r.makespan == Approx(6.5));
  CHECK(r.inter_node_bytes == Approx(30.0));
  // rank 2 waited 5.5 s with work pending: stalled; rank 0 had nothing left after 2 s: idle
  CHECK(r.ranks[2].stalled == Approx(5.5));
  CHECK(r.ranks[0].idle == Approx(4.5));
  CHECK(r.ranks[1].idle == Approx(6.5));
  for (const auto& a2 : r.ranks) CHECK(a2.busy_total() + a2.stalled + a2.idle == Approx(r.makespan));
}

TEST_CASE("two GPUs on one NIC share it max-min fairly", "[sim][engine]") {
  const topology t = tiny();
  event_engine e(t);
  const task_id f0 = e.flow(0, 2, 10.0, flow_tag(), {});  // both leave through node 0's only NIC
  const task_id f1 = e.flow(1, 3, 30.0, flow_tag(), {});
  const engine_run r = e.run();
  // 5 B/s each until f0 finishes at 2 s (10 B), then f1 alone at 10 B/s: 20 B left -> 4 s
  CHECK(r.end[static_cast<std::size_t>(f0)] == Approx(2.0));
  CHECK(r.end[static_cast<std::size_t>(f1)] == Approx(4.0));
  CHECK(r.max_port_utilization <= 1.0 + 1e-9);
  CHECK(r.max_port_utilization == Approx(1.0));
}

TEST_CASE("intra-node flows do not touch the NIC", "[sim][engine]") {
  const topology t = tiny();
  event_engine e(t);
  const task_id inter = e.flow(0, 2, 10.0, flow_tag(), {});
  const task_id intra = e.flow(0, 1, 100.0, flow_tag(), {});
  const task_id local = e.flow(1, 1, 100.0, flow_tag(), {});
  const engine_run r = e.run();
  CHECK(r.end[static_cast<std::size_t>(inter)] == Approx(1.0));
  CHECK(r.end[static_cast<std::size_t>(intra)] == Approx(1.0));
  CHECK(r.end[static_cast<std::size_t>(local)] == 0.0);
  CHECK(r.intra_node_bytes == Approx(100.0));
}

TEST_CASE("stream policies: in order, priority, preemptive priority", "[sim][engine]") {
  const topology t = tiny();
  auto build = [&](stream_policy p) {
    event_engine e(t, p);
    const task_id f = e.flow(1, 0, 10.0, flow_tag(), {});         // arrives at 0.1 s (NVLink)
    const task_id hi = e.compute(0, 1.0, compute_tag(), 0, {f});  // added first, waits for f
    const task_id lo = e.compute(0, 2.0, compute_tag(), 5, {});   // ready at once
    const engine_run r = e.run();
    return std::make_tuple(r, hi, lo);
  };
  SECTION("in order: the ready task waits for its turn") {
    const auto [r, hi, lo] = build(stream_policy::in_order);
    CHECK(r.end[static_cast<std::size_t>(hi)] == Approx(1.1));
    CHECK(r.end[static_cast<std::size_t>(lo)] == Approx(3.1));
    CHECK(r.ranks[0].stalled == Approx(0.1));
  }
  SECTION("priority: the ready task runs, the urgent one waits for it") {
    const auto [r, hi, lo] = build(stream_policy::priority);
    CHECK(r.end[static_cast<std::size_t>(lo)] == Approx(2.0));
    CHECK(r.end[static_cast<std::size_t>(hi)] == Approx(3.0));
    CHECK(r.ranks[0].stalled == 0.0);
  }
  SECTION("preemptive: the urgent task suspends the running one") {
    const auto [r, hi, lo] = build(stream_policy::preemptive_priority);
    CHECK(r.end[static_cast<std::size_t>(hi)] == Approx(1.1));
    CHECK(r.end[static_cast<std::size_t>(lo)] == Approx(3.0));
    CHECK(std::count_if(r.segments.begin(), r.segments.end(), [&](const compute_segment& s) { return s.task == lo; }) == 2);
    CHECK(r.ranks[0].busy_total() == Approx(3.0));
  }
}

TEST_CASE("engine rejects bad tasks", "[sim][engine]") {
  const topology t = tiny();
  event_engine e(t);
  CHECK_THROWS_AS(e.compute(4, 1.0, compute_tag(), 0, {}), invalid_argument);
  CHECK_THROWS_AS(e.compute(0, -1.0, compute_tag(), 0, {}), invalid_argument);
  CHECK_THROWS_AS(e.compute(0, 1.0, flow_tag(), 0, {}), invalid_argument);
  CHECK_THROWS_AS(e.flow(0, 1, -2.0, flow_tag(), {}), invalid_argument);
  CHECK_THROWS_AS(e.join({3}), invalid_argument);
}

TEST_CASE("SM contention: compute slows while its rank communicates", "[sim][engine][contention]") {
  const topology t = tiny();
  SECTION("a 2 s task overlapping a 1 s flow for 1 s at f = 0.25 ends at 2.25 s") {
    event_engine e(t, stream_policy::in_order, {}, 0.25);
    const task_id c = e.compute(0, 2.0, compute_tag(), 0, {});
    const task_id f = e.flow(0, 1, 100.0, flow_tag(), {});  // NVLink 100 B/s: [0, 1]
    const task_id other = e.compute(2, 2.0, compute_tag(), 0, {});  // rank 2 does not communicate
    const engine_run r = e.run();
    CHECK(r.end[static_cast<std::size_t>(f)] == Approx(1.0));
    // 0.75 s of work in the first second, 1.25 s at full speed after it
    CHECK(r.end[static_cast<std::size_t>(c)] == Approx(2.25));
    CHECK(r.end[static_cast<std::size_t>(other)] == Approx(2.0));
    CHECK(r.ranks[0].busy_total() == Approx(2.25));
  }
  SECTION("the receiving end slows too, and a flow that starts mid-task slows the rest of it") {
    event_engine e(t, stream_policy::in_order, {}, 0.5);
    const task_id c = e.compute(1, 3.0, compute_tag(), 0, {});
    const task_id a = e.compute(0, 1.0, compute_tag(), 0, {});
    const task_id f = e.flow(0, 1, 100.0, flow_tag(), {a});  // [1, 2], rank 1 receives
    const engine_run r = e.run();
    CHECK(r.end[static_cast<std::size_t>(f)] == Approx(2.0));
    // rank 1: 1 s of work by t = 1, 0.5 s during [1, 2], 1.5 s after: ends at 3.5
    CHECK(r.end[static_cast<std::size_t>(c)] == Approx(3.5));
    CHECK(r.end[static_cast<std::size_t>(a)] == Approx(1.0));
  }
  SECTION("a TP collective is communication itself and keeps its speed; link latency counts as in flight") {
    event_engine e(t, stream_policy::in_order, {}, 0.5);
    const task_id tp = e.compute(0, 1.0, {task_kind::tensor_parallel}, 0, {});
    const task_id c = e.compute(0, 1.0, compute_tag(), 0, {tp});
    const task_id f = e.flow(0, 2, 20.0, flow_tag(), {});  // NIC 10 B/s: [0, 2]
    const engine_run r = e.run();
    CHECK(r.end[static_cast<std::size_t>(tp)] == Approx(1.0));
    CHECK(r.end[static_cast<std::size_t>(f)] == Approx(2.0));
    CHECK(r.end[static_cast<std::size_t>(c)] == Approx(2.5));  // 0.5 s of work in [1, 2], 0.5 s after
  }
  SECTION("preempted work resumes with what is left in full-speed seconds") {
    event_engine e(t, stream_policy::preemptive_priority, {}, 0.5);
    const task_id lo = e.compute(0, 2.0, compute_tag(), 5, {});
    const task_id f = e.flow(1, 0, 100.0, flow_tag(), {});         // [0, 1] into rank 0
    const task_id hi = e.compute(0, 1.0, compute_tag(), 0, {f});    // preempts at 1
    const engine_run r = e.run();
    // lo: 0.5 s of work in [0, 1]; hi: [1, 2]; lo's 1.5 s left: [2, 3.5]
    CHECK(r.end[static_cast<std::size_t>(hi)] == Approx(2.0));
    CHECK(r.end[static_cast<std::size_t>(lo)] == Approx(3.5));
  }
  CHECK_THROWS_AS(event_engine(t, stream_policy::in_order, {}, 1.0), invalid_argument);
  CHECK_THROWS_AS(event_engine(t, stream_policy::in_order, {}, -0.1), invalid_argument);
}

TEST_CASE("a flow shorter than the clock's resolution still completes", "[sim][engine]") {
  // 1 byte at 1e30 B/s after 1 s of compute: now + bytes / rate == now in double precision;
  // the engine must still drain the flow instead of looping at a standstill
  const topology t({"fast", 1, 2, 1, {}, {1e30, 0}, {1e30, 0}, {"G", 1e12, 1e9, 1e12}});
  event_engine e(t);
  const task_id a = e.compute(0, 1.0, compute_tag(), 0, {});
  const task_id f = e.flow(0, 1, 1.0, flow_tag(), {a});
  const task_id b = e.compute(1, 1.0, compute_tag(), 0, {f});
  const engine_run r = e.run();
  CHECK(r.end[static_cast<std::size_t>(f)] == Approx(1.0));
  CHECK(r.end[static_cast<std::size_t>(b)] == Approx(2.0));
  CHECK(r.intra_node_bytes == 1.0);
}

TEST_CASE("a delay ends its seconds after its dependencies, and wait_for adds one named later", "[sim][engine]") {
  const topology t = tiny(0.5);
  event_engine e(t);
  const task_id barrier = e.join({});
  const task_id d = e.delay(3.0, {task_kind::parameter_sync}, {barrier});
  const task_id a = e.compute(0, 2.0, compute_tag(), 0, {});
  const task_id f = e.flow(1, 2, 10.0, flow_tag(), {});  // inter-node: 10 / 10 + 0.5 latency
  e.wait_for(barrier, a);                                // added after the barrier
  e.wait_for(barrier, f);
  const task_id b = e.compute(3, 1.0, compute_tag(), 0, {d});
  const task_id zero = e.delay(0.0, {task_kind::parameter_sync}, {a});
  const engine_run r = e.run();
  CHECK(r.end[static_cast<std::size_t>(barrier)] == Approx(2.0));  // the later of 2 s and 1.5 s
  CHECK(r.start[static_cast<std::size_t>(d)] == Approx(2.0));
  CHECK(r.end[static_cast<std::size_t>(d)] == Approx(5.0));
  CHECK(r.start[static_cast<std::size_t>(b)] == Approx(5.0));
  CHECK(r.end[static_cast<std::size_t>(zero)] == Approx(2.0));
  CHECK(r.makespan == Approx(6.0));
  CHECK(r.flows.size() == 1);  // a delay is no flow
  // a delay holds no stream: rank 3 was stalled, waiting for it
  CHECK(r.ranks[3].stalled == Approx(5.0));
}

TEST_CASE("delays and late dependencies are checked, and a cycle through wait_for is reported", "[sim][engine]") {
  const topology t = tiny();
  event_engine e(t);
  CHECK_THROWS_AS(e.delay(-1.0, {task_kind::join}, {}), invalid_argument);
  CHECK_THROWS_AS(e.delay(std::numeric_limits<double>::infinity(), {task_kind::join}, {}), invalid_argument);
  const task_id a = e.join({});
  const task_id b = e.delay(1.0, {task_kind::join}, {a});
  CHECK_THROWS_AS(e.wait_for(a, 7), invalid_argument);
  CHECK_THROWS_AS(e.wait_for(a, a), invalid_argument);
  e.wait_for(a, b);  // a waits for b, which waits for a
  CHECK_THROWS_AS(e.run(), invalid_argument);
}

namespace {
// Golden runs: seeded random DAGs whose every output bit is pinned, so a refactor of the
// engine that changes any start, end, segment, flow or accounting figure fails here.
// The expected hashes were recorded from the engine as it was (x86-64, GCC 12, SSE2 doubles);
// they are a behaviour lock, not hand-derived truths. Where the compiler may fuse a * b + c
// into one FMA instruction (-march with FMA, aarch64: GCC and Clang then contract by default)
// the last bits differ, so there the test only checks that two runs agree.
#if defined(__FMA__) || defined(__FP_FAST_FMA) || defined(__ARM_FEATURE_FMA)
constexpr bool golden_hashes_apply = false;
#else
constexpr bool golden_hashes_apply = true;
#endif

//! Every figure of a run, in order, as bit patterns.
std::uint64_t hash_of(const engine_run& r) {
  fnv1a_hasher h;
  const auto add = [&h](double x) { h.add(std::bit_cast<std::int64_t>(x)); };
  add(r.makespan);
  for (std::size_t i = 0; i < r.start.size(); ++i) add(r.start[i]), add(r.end[i]);
  for (const compute_segment& s : r.segments) h.add(s.task), h.add(s.rank), add(s.start), add(s.end);
  for (const flow_record& f : r.flows) {
    h.add(f.task), h.add(f.source), h.add(f.destination), add(f.bytes);
    h.add(static_cast<std::int64_t>(f.link)), add(f.start), add(f.end);
  }
  for (const stream_accounting& a : r.ranks) {
    for (const double b : a.busy) add(b);
    add(a.stalled), add(a.idle);
  }
  add(r.intra_node_bytes), add(r.inter_node_bytes), add(r.max_port_utilization);
  return h.value();
}

// 2 nodes x 4 GPUs, 2 NICs per node (GPUs 0-1 and 2-3 share one), with latencies.
topology golden_topology() {
  return topology({"golden", 2, 4, 2, {}, {2e11, 2e-6}, {2.5e10, 8e-6}, {"G", 1e15, 8e10, 3e12}});
}

//! A random DAG of `tasks` tasks: compute of every compute kind with priorities 0..3 on any
//! rank (some of zero time), flows between any two ranks (same rank, intra- and inter-node;
//! some empty), and joins; each task waits for up to 3 earlier ones, mostly recent ones.
engine_run run_random_dag(std::uint64_t seed, stream_policy policy, double comm_slowdown, int tasks) {
  const topology t = golden_topology();
  random_generator rng(seed);
  const auto pick = [&rng](int n) { return static_cast<int>(rng.below(static_cast<std::uint64_t>(n))); };  // in [0, n)
  event_engine e(t, policy, {}, comm_slowdown);
  std::vector<task_id> deps;
  for (int i = 0; i < tasks; ++i) {
    deps.clear();
    const int count = i == 0 ? 0 : pick(4);
    for (int k = 0; k < count; ++k) {
      const int roll = pick(8);
      if (roll == 0) deps.push_back(no_task);       // ignored
      else if (roll == 1) deps.push_back(pick(i));  // anywhere before
      else deps.push_back(i - 1 - pick(std::min(i, 12)));
    }
    const int what = pick(20);
    if (what < 11) {
      const rank_index rank = pick(t.num_ranks());
      const double seconds = pick(10) == 0 ? 0.0 : 1e-4 + 9e-4 * rng.uniform();
      const task_tag tag{static_cast<task_kind>(pick(5))};
      e.compute(rank, seconds, tag, pick(4), deps);
    } else if (what < 18) {
      const rank_index source = pick(t.num_ranks()), destination = pick(t.num_ranks());
      const double bytes = pick(12) == 0 ? 0.0 : 1e5 + 4e7 * rng.uniform();
      const task_tag tag{static_cast<task_kind>(static_cast<int>(task_kind::kv) + pick(3))};
      e.flow(source, destination, bytes, tag, deps);
    } else {
      e.join(deps);
    }
  }
  return e.run();
}

struct golden_case {
  std::uint64_t seed;
  stream_policy policy;
  double comm_slowdown;
  std::uint64_t hash;
};
}  // namespace

TEST_CASE("golden: random DAGs run bit-identically to the recorded engine", "[sim][engine][golden]") {
  // recorded when a re-shared component kept its flows in the order a walk over its ports
  // meets them and left the drain times of flows whose rate did not change
  // (sim/detail/event_flows.hpp); against the engine that sorted them by start and moved every
  // drain time, start and end times of 2000-task DAGs agree within 5e-14 relative (and that
  // engine within 5e-8 of the one that re-shared every flow on every event)
  const golden_case cases[] = {
      {1, stream_policy::in_order, 0.0, 0xe95472324b332fbbull},
      {1, stream_policy::priority, 0.0, 0x9dee0a72a65752cdull},
      {1, stream_policy::preemptive_priority, 0.0, 0x5819a6be377b5643ull},
      {1, stream_policy::in_order, 0.3, 0xed058b4c8bb058c3ull},
      {1, stream_policy::priority, 0.3, 0x332d5052b2622758ull},
      {1, stream_policy::preemptive_priority, 0.3, 0x68dbbd8c1db8f3c2ull},
      {7, stream_policy::in_order, 0.0, 0xc62522184af3511dull},
      {7, stream_policy::priority, 0.0, 0x70c147143674829cull},
      {7, stream_policy::preemptive_priority, 0.0, 0x2baeafaf86fe5804ull},
      {7, stream_policy::in_order, 0.3, 0x4465424e22199f0aull},
      {7, stream_policy::priority, 0.3, 0x238ced4e8ec94f43ull},
      {7, stream_policy::preemptive_priority, 0.3, 0xdd2ec532539c06aull},
      {42, stream_policy::in_order, 0.0, 0xfb00f1b0698e5b3eull},
      {42, stream_policy::priority, 0.0, 0xc3c7dfc83780c636ull},
      {42, stream_policy::preemptive_priority, 0.0, 0x2880ed4611aaedc8ull},
      {42, stream_policy::in_order, 0.3, 0x4645cbc32af435d1ull},
      {42, stream_policy::priority, 0.3, 0x4ef9f4e1b2f4b5c0ull},
      {42, stream_policy::preemptive_priority, 0.3, 0x3db37ad6ab5a4d53ull},
  };
  if (!golden_hashes_apply) WARN("FMA contraction possible: checking run-to-run determinism only");
  for (const golden_case& c : cases) {
    const engine_run r = run_random_dag(c.seed, c.policy, c.comm_slowdown, 400);
    const std::uint64_t h = hash_of(r);
    CAPTURE(c.seed, static_cast<int>(c.policy), c.comm_slowdown, r.makespan);
    if (golden_hashes_apply) CHECK(h == c.hash);
    else CHECK(h == hash_of(run_random_dag(c.seed, c.policy, c.comm_slowdown, 400)));
  }
}
