// core/plan_bytes.hpp: every partitioner's plans on seeded batches survive to_bytes /
// plan_from_bytes unchanged (notes included); any flipped byte, truncation, extension, wrong
// magic or version is refused with a clear error.
#include <zeppelin/core/plan_bytes.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/datasets.hpp>
#include <zeppelin/data/sampler.hpp>
#include <zeppelin/partition.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <vector>

using namespace zeppelin;

namespace {

std::vector<plan> sample_plans() {
  std::vector<plan> plans;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const topology t = cluster_by_name(seed == 2 ? "a" : "c", 2, 4);
    const batch b = sample_batch(seed == 3 ? datasets::arxiv() : datasets::github(), 8 * 4096, seed);
    for (const std::string_view name : partitioner_names) {
      const partitioner_settings settings{.capacity = balanced_capacity(b, t), .cp_size = 0, .metric = {}};
      plans.push_back(partition(partitioner_by_name(name, settings), b, t));
    }
  }
  plans.back().notes.push_back({note_kind::other, "a note, with bytes \xff\x01 of any value", {3, 1}, {{"x", 0.1}, {"y", -2.5e300}}});
  return plans;
}

}  // namespace

TEST_CASE("plan bytes: every partitioner's plans round-trip exactly", "[core][plan_bytes]") {
  for (const plan& p : sample_plans()) {
    CAPTURE(p.method);
    const std::vector<std::byte> bytes = to_bytes(p);
    const plan back = plan_from_bytes(bytes);
    CHECK(back == p);
    CHECK(fingerprint(back) == fingerprint(p));
    CHECK(to_bytes(back) == bytes);  // deterministic
  }
  const plan empty{};
  CHECK(plan_from_bytes(to_bytes(empty)) == empty);
}

TEST_CASE("plan bytes: corrupted, truncated or foreign bytes are refused", "[core][plan_bytes]") {
  const plan p = sample_plans().back();
  const std::vector<std::byte> bytes = to_bytes(p);
  random_generator rng(5, 1);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::byte> bad = bytes;
    const std::size_t at = rng.below(bad.size());
    bad[at] ^= static_cast<std::byte>(1 + rng.below(255));
    CAPTURE(at);
    CHECK_THROWS_AS(plan_from_bytes(bad), invalid_argument);
  }
  for (const std::size_t cut : {std::size_t{0}, std::size_t{3}, std::size_t{8}, bytes.size() / 2, bytes.size() - 1}) {
    CAPTURE(cut);
    CHECK_THROWS_AS(plan_from_bytes(std::span<const std::byte>(bytes).first(cut)), invalid_argument);
  }
  std::vector<std::byte> longer = bytes;
  longer.push_back(std::byte{0});
  CHECK_THROWS_AS(plan_from_bytes(longer), invalid_argument);

  // a well-formed stream of another version names the version
  std::vector<std::byte> other = bytes;
  other[4] = std::byte{1};  // version 1: text-only notes
  other.resize(other.size() - 8);
  std::uint64_t sum = 0xCBF29CE484222325ull;
  for (const std::byte b : other) sum = (sum ^ static_cast<std::uint64_t>(b)) * 0x100000001B3ull;
  for (int i = 0; i < 8; ++i) other.push_back(static_cast<std::byte>((sum >> (8 * i)) & 0xff));
  CHECK_THROWS_WITH(plan_from_bytes(other), Catch::Contains("unsupported format version"));
  CHECK_THROWS_WITH(plan_from_bytes(std::vector<std::byte>(16, std::byte{0})), Catch::Contains("checksum"));
}
