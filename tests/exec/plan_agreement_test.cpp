// The engines' plan check (exec/plan_agreement.hpp): ranks whose engines were built from
// different plans or programs are refused before the first round, with both fingerprints and
// the ranks named; ranks that agree run, and check only once per engine and rank.
#include <catch2/catch.hpp>

#include "plan_support.hpp"

#include <zeppelin/comm.hpp>
#include <zeppelin/exec.hpp>
#include <zeppelin/program.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using namespace zeppelin;
using namespace zeppelin_test;
using namespace std::chrono_literals;

namespace {

const attention_dims dims{.heads = 1, .kv_heads = 1, .head_dim = 2};

// A communicator that counts the plan check groups a rank runs, forwarding everything to the
// loopback communicator.
struct check_counting_comm {
  host_loopback_comm& inner;
  std::atomic<int>& checks;

  [[nodiscard]] rank_index rank() const noexcept { return inner.rank(); }
  [[nodiscard]] rank_index size() const noexcept { return inner.size(); }
  [[nodiscard]] int node_of(rank_index r) const { return inner.node_of(r); }
  [[nodiscard]] std::uint64_t world_id() const noexcept { return inner.world_id(); }
  void group_start() noexcept { inner.group_start(); }
  void send(std::span<const std::byte> b, rank_index peer) { inner.send(b, peer); }
  void recv(std::span<std::byte> b, rank_index peer) { inner.recv(b, peer); }
  void group_end(std::string_view step) {
    if (step == plan_check_step) ++checks;
    inner.group_end(step);
  }
};
static_assert(communicator<check_counting_comm>);
static_assert(identified_communicator<check_counting_comm>);

// The same count through a communicator that does not say which world it is in.
struct counting_without_world : check_counting_comm {
  std::uint64_t world_id() const = delete;
};
static_assert(communicator<counting_without_world>);
static_assert(!identified_communicator<counting_without_world>);

// one forward of `engine` on the calling rank, with buffers of its size (zeros); returns what
// the rank moved and launched
template <class C>
execution_record forward_once(const attention_engine<double>& engine, C& c) {
  const token_count n = engine.rows(c.rank());
  std::vector<double> q(static_cast<std::size_t>(n * dims.q_row())), kv(static_cast<std::size_t>(n * dims.kv_row()));
  std::vector<double> o(q.size()), lse(static_cast<std::size_t>(n * dims.heads));
  execution_record record;
  engine.forward(c, std::span<const double>(q), std::span<const double>(kv), std::span<const double>(kv), std::span<double>(o),
                 std::span<double>(lse), &record);
  return record;
}

// runs one forward per rank, rank r on engines[r], and returns the plan_mismatch the run
// must end with (the world's rank_failed nests it); `moved` counts what the ranks recorded
plan_mismatch refused(const std::vector<const attention_engine<double>*>& engines, std::atomic<std::size_t>& moved) {
  host_loopback_world world{.ranks = static_cast<rank_index>(engines.size()), .timeout = 20000ms};
  try {
    world.run([&](host_loopback_comm& c) {
      const execution_record r = forward_once(*engines[static_cast<std::size_t>(c.rank())], c);
      moved += r.transfers.size() + r.launches.size();
    });
  } catch (const rank_failed& e) {
    INFO(e.what());
    CHECK(e.step() == plan_check_step);  // the last group the failing rank passed
    try {
      std::rethrow_if_nested(e);
    } catch (const plan_mismatch& m) {
      return m;
    }
  }
  FAIL("the ranks were not refused");
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("ranks whose plans differ only in sequence order are refused before the first round", "[exec]") {
  const topology t = test_topology(1, 2);
  // (a) the batch in another order, planned by the same partitioner
  const batch b({5, 3}), swapped({3, 5});
  const plan p = even_split{.capacity = 8}.partition(b, t);
  const plan q = even_split{.capacity = 8}.partition(swapped, t);
  // (b) the same batch, each rank's shards (its buffer order) reversed
  plan reversed = p;
  for (placement& pl : reversed.placements) std::reverse(pl.shards.begin(), pl.shards.end());
  REQUIRE(fingerprint(reversed) != fingerprint(p));
  for (const auto& [other_plan, other_batch] : {std::pair<const plan*, const batch*>{&q, &swapped}, std::pair<const plan*, const batch*>{&reversed, &b}}) {
    const attention_engine<double> mine(p, b, t, dims), theirs(*other_plan, *other_batch, t, dims);
    REQUIRE(mine.identity().plan != theirs.identity().plan);
    std::atomic<std::size_t> moved{0};
    const plan_mismatch m = refused({&mine, &theirs}, moved);
    CHECK(moved == 0);  // nothing moved nor launched: refused before the first round
    CHECK(m.rank() == 0);
    CHECK(m.peer() == 1);
    CHECK(m.fingerprint() == mine.identity().plan);
    CHECK(m.peer_fingerprint() == theirs.identity().plan);
    CHECK(m.step() == plan_check_step);
    const std::string what = m.what();
    CHECK(what.find("attention engine: the ranks' engines were built from different plans (or batches)") != std::string::npos);
    CHECK(what.find("rank 0 has fingerprint " + detail::hex(mine.identity().plan)) != std::string::npos);
    CHECK(what.find("rank 1 has " + detail::hex(theirs.identity().plan)) != std::string::npos);
    CHECK(what.find("refusing to run") != std::string::npos);
  }
}

TEST_CASE("ranks with the same plan but different programs are refused and the same program built either way agrees", "[exec]") {
  const topology t = test_topology(2, 2);
  const batch b({9, 4, 6, 1});
  const plan p = make_plan(0, b, t, (b.total_tokens() + 3) / 4);
  program_options in_order, prioritized;
  prioritized.engine = engine_policy::prioritized;
  const attention_engine<double> a(p, b, t, dims, in_order), other(p, b, t, dims, prioritized);
  REQUIRE(a.identity().plan == other.identity().plan);
  REQUIRE(a.identity().program != other.identity().program);
  std::atomic<std::size_t> moved{0};
  const plan_mismatch m = refused({&a, &a, &other, &a}, moved);
  CHECK(moved == 0);
  CHECK(m.rank() == 0);
  CHECK(m.peer() == 2);
  CHECK(m.fingerprint() == a.identity().program);
  CHECK(m.peer_fingerprint() == other.identity().program);
  CHECK(std::string(m.what()).find("different execution programs") != std::string::npos);

  // an engine given the program agrees with one that built it from the plan (a rank that
  // knows no plan is compared on the program only)
  program_options w = in_order;
  w.wire = wire_format::for_shape(dims.heads, dims.kv_heads, dims.head_dim, 8);
  const attention_engine<double> given(make_program(p, b, t, w), dims);
  CHECK(given.identity().plan == 0);
  CHECK(given.identity().program == a.identity().program);
  const std::vector<const attention_engine<double>*> engines{&given, &a, &a, &given};
  host_loopback_world world{.ranks = 4, .gpus_per_node = 2, .timeout = 20000ms};
  std::atomic<std::size_t> launches{0};
  world.run([&](host_loopback_comm& c) { launches += forward_once(*engines[static_cast<std::size_t>(c.rank())], c).launches.size(); });
  CHECK(launches > 0);
}

TEST_CASE("an engine checks once per rank and world, and a copy checks again", "[exec]") {
  const topology t = test_topology(1, 3);
  const batch b({7, 2, 5});
  const plan p = make_plan(1, b, t, 5);
  const attention_engine<double> engine(p, b, t, dims);
  host_loopback_world world{.ranks = 3, .timeout = 20000ms};
  std::atomic<int> checks{0};
  world.run([&](host_loopback_comm& c) {
    check_counting_comm cc{c, checks};
    forward_once(engine, cc);
    forward_once(engine, cc);
  });
  CHECK(checks == 3);  // once per rank
  // a communicator without world_id() counts as one world for the engine's life
  world.run([&](host_loopback_comm& c) {
    counting_without_world cc{{c, checks}};
    forward_once(engine, cc);
    forward_once(engine, cc);
  });
  CHECK(checks == 6);
  world.run([&](host_loopback_comm& c) {
    counting_without_world cc{{c, checks}};
    forward_once(engine, cc);  // checked in the unidentified world already
  });
  CHECK(checks == 6);
  world.run([&](host_loopback_comm& c) {  // another run is another world: checked again
    check_counting_comm cc{c, checks};
    forward_once(engine, cc);
  });
  CHECK(checks == 9);
  const attention_engine<double> copy = engine;
  world.run([&](host_loopback_comm& c) {
    check_counting_comm cc{c, checks};
    forward_once(copy, cc);
  });
  CHECK(checks == 12);
  // one engine object per rank, as in a real job: each checks its rank
  const std::vector<attention_engine<double>> per_rank(3, engine);
  world.run([&](host_loopback_comm& c) {
    check_counting_comm cc{c, checks};
    forward_once(per_rank[static_cast<std::size_t>(c.rank())], cc);
  });
  CHECK(checks == 15);
}

TEST_CASE("an engine kept across worlds meets plan_mismatch when another rank re-planned", "[exec]") {
  const topology t = test_topology(1, 2);
  const batch b({5, 3}), next({4, 4});
  const plan p = even_split{.capacity = 8}.partition(b, t);
  const attention_engine<double> kept(p, b, t, dims);
  host_loopback_world world{.ranks = 2, .timeout = 20000ms};
  world.run([&](host_loopback_comm& c) { forward_once(kept, c); });  // both ranks checked, world 1
  // world 2: rank 0 keeps its engine, rank 1 re-planned for the next batch
  const attention_engine<double> replanned(even_split{.capacity = 8}.partition(next, t), next, t, dims);
  std::atomic<std::size_t> moved{0};
  const plan_mismatch m = refused({&kept, &replanned}, moved);
  CHECK(moved == 0);
  CHECK(m.fingerprint() == kept.identity().plan);
  CHECK(m.peer_fingerprint() == replanned.identity().plan);
}

TEST_CASE("check_plan_agreement names the reference, the differing ranks and both fingerprints", "[exec]") {
  const auto refused_with = [](std::vector<plan_identity> all) {
    try {
      check_plan_agreement("engine", std::span<const plan_identity>(all), "check");
    } catch (const plan_mismatch& m) {
      return std::make_unique<plan_mismatch>(m);
    }
    return std::unique_ptr<plan_mismatch>();
  };
  CHECK_FALSE(refused_with({{1, 7}, {1, 7}, {1, 0}}));  // rank 2 knows no plan; programs agree
  CHECK_FALSE(refused_with({{5, 0}}));
  const auto plans = refused_with({{1, 0}, {1, 7}, {1, 8}, {1, 7}, {1, 9}});
  REQUIRE(plans);
  CHECK(plans->rank() == 1);  // the first rank that knows its plan is the reference
  CHECK(plans->peer() == 2);
  CHECK(plans->fingerprint() == 7);
  CHECK(plans->peer_fingerprint() == 8);
  CHECK(plans->step() == "check");
  CHECK(std::string(plans->what()).find("rank 1 has fingerprint 0x0000000000000007, rank 2 has 0x0000000000000008; ranks 2, 4 "
                                        "differ from rank 1") != std::string::npos);
  const auto programs = refused_with({{3, 7}, {3, 7}, {3, 7}, {4, 7}});
  REQUIRE(programs);
  CHECK(programs->rank() == 0);
  CHECK(programs->peer() == 3);
  CHECK(std::string(programs->what()).find("different execution programs") != std::string::npos);
  CHECK(std::string(programs->what()).find("rank 3 differs from rank 0") != std::string::npos);
}

TEST_CASE("the program fingerprint is deterministic and sees every part of the program", "[exec]") {
  const topology t = test_topology(2, 2);
  const batch b({9, 4, 6, 1});
  const plan p = make_plan(0, b, t, 5);
  program_options o;
  o.wire = wire_format::for_shape(2, 1, 4, 2);
  o.remap = remap_objective::max_send;
  const execution_program prog = make_program(p, b, t, o);
  CHECK(fingerprint(prog) == fingerprint(make_program(p, b, t, o)));
  const std::uint64_t base = fingerprint(prog);
  std::vector<execution_program> changed(7, prog);
  changed[0].wire.head_dim += 1;
  changed[1].rows.back() += 1;
  REQUIRE(!changed[2].phases.empty());
  changed[2].phases.back().round += 1;
  REQUIRE(!changed[3].launches.empty());
  REQUIRE(!changed[3].launches.front().blocks.empty());
  std::vector<attention_block> blocks = changed[3].launches.front().blocks.items();  // lists are immutable: copies share them
  blocks.front().seq += 1;
  changed[3].launches.front().blocks = block_list(std::move(blocks));
  REQUIRE(!changed[4].passes[1].front().segments.empty());
  changed[4].passes[1].front().segments.front().micro_batch += 1;
  changed[5].streams.push_back({3});
  changed[6].linear_layout.emplace_back();
  for (std::size_t i = 0; i < changed.size(); ++i) {
    INFO("change " << i);
    CHECK(fingerprint(changed[i]) != base);
  }
}
