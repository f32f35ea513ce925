// check_plan_indices (core/plan_indices.hpp): forged plans, whose checksum and fingerprint are
// right, are refused by both readers and by rank_view_of with a message naming the index,
// before anything indexes with it.
#include "support/sample_plan.hpp"

#include <zeppelin/core/plan_bytes.hpp>
#include <zeppelin/core/plan_indices.hpp>
#include <zeppelin/core/plan_json.hpp>
#include <zeppelin/core/rank_view.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <sstream>
#include <string>

using namespace zeppelin;

namespace {

// A valid two-rank plan: one sequence of 8 tokens split over a ring group of both ranks.
plan two_rank_ring() {
  plan p;
  p.method = "forged";
  p.nodes = 1;
  p.gpus_per_node = 2;
  p.capacity = 8;
  p.placements = {{{{0, {0, 4}, 0, 0}}}, {{{0, {4, 8}, 0, 0}}}};
  p.groups = {{0, zone_kind::intra_node, {0, 1}, collective_kind::ring}};
  return p;
}

std::string json_of(const plan& p) {
  std::ostringstream out;
  write_plan_json(out, p);
  return out.str();
}

// Both readers and rank_view_of refuse `p` with a message containing `what`.
void check_refused(const plan& p, const std::string& what) {
  const auto message_of = [](const std::function<void()>& call) -> std::string {
    try {
      call();
    } catch (const invalid_argument& e) {
      return e.what();
    }
    return "(accepted)";
  };
  CAPTURE(what);
  CHECK_THAT(message_of([&] { (void)plan_from_bytes(to_bytes(p)); }), Catch::Contains("plan bytes: " + what));
  // the JSON reader refuses some of these as it reads the field (its own words), the rest here
  CHECK_THAT(message_of([&] { (void)read_plan_json(json_of(p)); }), Catch::StartsWith("plan JSON: "));
  CHECK_THAT(message_of([&] { (void)rank_view_of(p, 0); }), Catch::Contains("rank view: " + what));
}

}  // namespace

TEST_CASE("plan indices: a valid plan passes and reads back", "[core][plan_indices]") {
  const plan p = two_rank_ring();
  CHECK_NOTHROW(check_plan_indices(p, "test"));
  CHECK(plan_from_bytes(to_bytes(p)) == p);
  CHECK(read_plan_json(json_of(p)).layout == p);
  CHECK(rank_view_of(p, 1).groups.at(0).previous == 0);
  CHECK_NOTHROW(check_plan_indices(zeppelin_test::sample_plan(), "sample"));  // every partitioner's: plan_bytes_test
}

TEST_CASE("plan indices: forged plans are refused before anything indexes with them", "[core][plan_indices]") {
  SECTION("a group's id is not its index (rank_view_of read groups[id])") {
    plan p = two_rank_ring();
    p.groups[0].id = 5;
    check_refused(p, "a group's id must be its index");
  }
  SECTION("a shard's micro-batch is INT_MAX (micro_batches() overflowed)") {
    plan p = two_rank_ring();
    p.placements[0].shards[0].micro_batch = std::numeric_limits<std::int32_t>::max();
    check_refused(p, "a shard's micro-batch is out of range");
  }
  SECTION("a shard's micro-batch is negative") {
    plan p = two_rank_ring();
    p.placements[1].shards[0].micro_batch = -1;
    check_refused(p, "a shard's micro-batch is out of range");
  }
  SECTION("a shard names a group the plan does not have") {
    plan p = two_rank_ring();
    p.placements[1].shards[0].group = 3;
    check_refused(p, "a shard names a group the plan does not have");
  }
  SECTION("a shard's range is reversed or past the longest sequence (size() overflowed)") {
    plan p = two_rank_ring();
    p.placements[0].shards[0].range = {std::numeric_limits<token_count>::min() + 1, std::numeric_limits<token_count>::max()};
    check_refused(p, "a shard's token range is out of order or out of range");
    p.placements[0].shards[0].range = {4, 2};
    check_refused(p, "a shard's token range is out of order or out of range");
  }
  SECTION("a group lists a rank the plan does not have") {
    plan p = two_rank_ring();
    p.groups[0].ranks[1] = 7;
    check_refused(p, "a group lists a rank the plan does not have");
  }
  SECTION("placements do not match nodes x gpus_per_node") {
    plan p = two_rank_ring();
    p.gpus_per_node = 3;
    CHECK_THROWS_WITH(plan_from_bytes(to_bytes(p)), Catch::Contains("one placement per rank"));
    CHECK_THROWS_WITH(rank_view_of(p, 0), Catch::Contains("one placement per rank"));
  }
}
