// core/plan_json.hpp and its reader core/detail/json_reader.hpp: every partitioner's plans on
// seeded batches survive write_plan_json / read_plan_json unchanged, with their lengths, and
// print the same text again; any flipped byte either is refused with invalid_argument or
// leaves the plan unchanged but for its notes (the fingerprint guards the rest); foreign formats, versions and
// malformed JSON are refused with the member or the byte offset.
#include <zeppelin/core/plan_json.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/datasets.hpp>
#include <zeppelin/data/sampler.hpp>
#include <zeppelin/partition.hpp>

#include <catch2/catch.hpp>

#include "support/expect_error.hpp"

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using namespace zeppelin;

namespace {

std::vector<std::pair<plan, batch>> sample_plans_and_batches() {
  std::vector<std::pair<plan, batch>> plans;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const topology t = cluster_by_name(seed == 2 ? "a" : "c", 2, 4);
    const batch b = sample_batch(seed == 3 ? datasets::arxiv() : datasets::github(), 8 * 4096, seed);
    for (const std::string_view name : partitioner_names) {
      const partitioner_settings settings{.capacity = balanced_capacity(b, t), .cp_size = 0, .metric = {}};
      plans.emplace_back(partition(partitioner_by_name(name, settings), b, t), b);
    }
  }
  plans.back().first.notes.push_back({note_kind::other, "a note with \"quotes\", a backslash \\, a tab\t and \x01", {2, 5}, {{"share", 0.1}, {"ranks", 7}}});
  return plans;
}

std::string json_of(const plan& p, const batch* b) {
  std::ostringstream os;
  write_plan_json(os, p, b);
  return os.str();
}

}  // namespace

TEST_CASE("plan JSON: every partitioner's plans round-trip exactly, with their lengths", "[core][plan_json]") {
  for (const auto& [p, b] : sample_plans_and_batches()) {
    CAPTURE(p.method);
    const std::string text = json_of(p, &b);
    const plan_document back = read_plan_json(text);
    CHECK(back.layout == p);
    CHECK(back.lengths == std::vector<token_count>(b.lengths().begin(), b.lengths().end()));
    CHECK(json_of(back.layout, &b) == text);  // deterministic, and the same text again
    const plan_document without = read_plan_json(json_of(p, nullptr));
    CHECK(without.layout == p);
    CHECK(without.lengths.empty());
  }
  const plan empty{.method = "none", .nodes = 1, .gpus_per_node = 1, .capacity = 0, .placements = {placement{}}, .groups = {}, .notes = {}};
  CHECK(read_plan_json(json_of(empty, nullptr)).layout == empty);
}

TEST_CASE("plan JSON: a flipped byte is refused or changes nothing the plan holds but its notes", "[core][plan_json]") {
  const auto plans = sample_plans_and_batches();
  const plan& p = plans.back().first;
  const std::string text = json_of(p, &plans.back().second);
  random_generator rng(11, 2);
  int refused = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bad = text;
    const std::size_t at = rng.below(bad.size());
    bad[at] = static_cast<char>(bad[at] ^ static_cast<char>(1 + rng.below(127)));
    CAPTURE(at, bad.substr(at > 20 ? at - 20 : 0, 40));
    plan read;
    try {
      read = read_plan_json(bad).layout;
    } catch (const invalid_argument&) {
      ++refused;
      continue;
    }
    read.notes = p.notes;  // notes are for people and outside the fingerprint: an edit there is allowed
    CHECK(read == p);
  }
  CHECK(refused > 1500);  // nearly every byte is guarded
}

TEST_CASE("plan JSON: foreign formats, versions and malformed JSON are refused with the reason", "[core][plan_json]") {
  using zeppelin_test::expect_invalid;
  const auto plans = sample_plans_and_batches();
  const std::string text = json_of(plans.front().first, &plans.front().second);
  const auto message = [](auto&& f) { return std::string(expect_invalid(f).what()); };
  CHECK_THAT(message([] { (void)read_plan_json(R"({"format":"zeppelin.remap","version":1})"); }),
             Catch::Contains("\"format\" must be \"zeppelin.plan\""));
  std::string v2 = text;
  v2.replace(v2.find("\"version\":1"), 11, "\"version\":2");
  CHECK(expect_invalid([&] { (void)read_plan_json(v2); }).value("version") == 2.0);
  CHECK_THAT(message([] { (void)read_plan_json("[1,2]"); }), Catch::Contains("must be an object"));
  CHECK_THAT(message([&] { (void)read_plan_json(text.substr(0, text.size() / 2)); }), Catch::Contains("JSON: expected"));
  CHECK(expect_invalid([&] { (void)read_plan_json(text + "x"); }).value("offset") == static_cast<double>(text.size()));
  std::string moved = text;  // a shard moved by one token: the fingerprint no longer matches
  const auto end = moved.find("\"end\":");
  moved.insert(end + 6, "1");
  CHECK_THAT(message([&] { (void)read_plan_json(moved); }), Catch::Contains("fingerprint"));
}

TEST_CASE("JSON reader: strict RFC 8259, bounded depth, exact integers", "[core][plan_json]") {
  using detail::parse_json;
  using zeppelin_test::expect_invalid;
  const detail::json_value v = parse_json(R"( {"a": [1, -2, 3.5, true, false, null], "s": "x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"} )");
  const auto& a = v.at("a").as_array("a");
  REQUIRE(a.size() == 6);
  CHECK(a[0].as_int("a0") == 1);
  CHECK(a[1].as_int("a1") == -2);
  CHECK(std::get<double>(a[2].v) == 3.5);
  CHECK(a[5].is_null());
  CHECK(v.at("s").as_string("s") == "x\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(parse_json("9223372036854775807").as_int("max") == INT64_MAX);
  CHECK(parse_json("-9223372036854775808").as_int("min") == INT64_MIN);
  for (const char* bad : {"9223372036854775808", "01", "1.", ".5", "1e", "+1", "tru", "[1,]", "{\"a\":1,}", "{\"a\" 1}",
                          "\"\\x\"", "\"\\ud800\"", "\"\\udc00\"", "\"a\nb\"", "{\"a\":1,\"a\":2}", "", "[1] [2]", "1e999"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_json(bad), invalid_argument);
  }
  const std::string deep = std::string(65, '[') + std::string(65, ']');
  CHECK_THAT(std::string(expect_invalid([&] { (void)parse_json(deep); }).what()), Catch::Contains("64 levels"));
  const std::string ok = std::string(64, '[') + std::string(64, ']');
  CHECK_NOTHROW(parse_json(ok));
  CHECK_THAT(std::string(expect_invalid([&] { (void)parse_json(R"({"a":"x"})").at("a").as_int("a"); }).what()),
             Catch::Contains("\"a\" must be an integer"));
}
