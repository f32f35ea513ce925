// step/fingerprint.hpp, step/step_plan_bytes.hpp and step/step_plan_json.hpp: the 200 seeded
// random step plans (every schedule, degree, gradient sync, heterogeneous replicas, sliced
// documents, recomputation, every partitioner's layouts) survive to_bytes /
// step_plan_from_bytes and write_step_plan_json / read_step_plan_json unchanged and write the
// same bytes and text again; the fingerprint changes with any single field; flipped,
// truncated or foreign bytes, unknown versions and enum values, and edited JSON are refused
// with the reason (and the offset, or the member and replica).
#include <zeppelin/core/random.hpp>
#include <zeppelin/step/fingerprint.hpp>
#include <zeppelin/step/step_plan_bytes.hpp>
#include <zeppelin/step/step_plan_json.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/expect_error.hpp"
#include "support/random_step_plan.hpp"

using namespace zeppelin;

namespace {

std::string json_of(const step_plan& p) {
  std::ostringstream os;
  write_step_plan_json(os, p);
  return os.str();
}

// `bytes` with the last 8 replaced by the FNV-1a checksum of the rest (the file comment's
// layout), so that a change to the body reaches the reader's other checks.
std::vector<std::byte> resealed(std::vector<std::byte> bytes) {
  bytes.resize(bytes.size() - 8);
  std::uint64_t sum = 0xCBF29CE484222325ull;
  for (const std::byte b : bytes) sum = (sum ^ static_cast<std::uint64_t>(b)) * 0x100000001B3ull;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<std::byte>((sum >> (8 * i)) & 0xff));
  return bytes;
}

// The offset of replica 0's tp_mode byte (the layout of step/step_plan_bytes.hpp).
std::size_t first_tp_mode_offset(const step_plan& p) {
  const step_replica& r = p.replicas.front();
  return 4 + 4 + 4 + 4 + 8 + 8 * p.documents.size() + 8 + 3 * 4 + 8 + 4 * r.ranks.size() + 8 + 4 * r.layers.size();
}

std::string message_of(const std::function<void()>& f) { return zeppelin_test::expect_invalid(f).what(); }

// The first seed's plan whose replica 0 runs a schedule of `kind` (with chunk-1f1b, a chain of
// several slices).
step_plan plan_with(pipeline_schedule_kind kind) {
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    step_plan p = zeppelin_test::random_step_plan(seed).plan;
    if (p.replicas.front().schedule.kind() != kind) continue;
    if (kind == pipeline_schedule_kind::chunk_one_f_one_b &&
        std::get<chunk_one_f_one_b>(p.replicas.front().schedule.policy).chains.size() == p.replicas.front().micro_batches.size())
      continue;  // one with a chain of several slices
    return p;
  }
  FAIL("no seed up to 200 gives a step plan of this schedule kind");
  return {};
}

}  // namespace

TEST_CASE("step plan bytes and JSON: 200 random step plans round-trip exactly", "[step][format]") {
  int kinds[4] = {0, 0, 0, 0};
  int syncs[4] = {0, 0, 0, 0};
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const zeppelin_test::random_step_case c = zeppelin_test::random_step_plan(seed);
    const step_plan& p = c.plan;
    CAPTURE(c.description);
    ++syncs[static_cast<int>(p.sync)];
    for (const step_replica& r : p.replicas) ++kinds[static_cast<int>(r.schedule.kind())];

    const std::vector<std::byte> bytes = to_bytes(p);
    const step_plan from_bytes = step_plan_from_bytes(bytes);
    CHECK(from_bytes == p);
    CHECK(fingerprint(from_bytes) == fingerprint(p));
    CHECK(to_bytes(from_bytes) == bytes);  // deterministic

    const std::string text = json_of(p);
    CHECK(text.find('\n') == text.size() - 1);  // one line
    const step_plan from_json = read_step_plan_json(text);
    CHECK(from_json == p);
    CHECK(json_of(from_json) == text);
  }
  for (const int n : kinds) CHECK(n > 0);  // every schedule and sync was exercised
  for (const int n : syncs) CHECK(n > 0);

  const step_plan empty{};
  CHECK(step_plan_from_bytes(to_bytes(empty)) == empty);
  const step_plan bare{.nodes = 1, .gpus_per_node = 2, .documents = {}, .replicas = {}, .sync = gradient_sync::switching};
  CHECK(read_step_plan_json(json_of(bare)) == bare);
}

TEST_CASE("step plan bytes and JSON: layout notes, any bytes in them, survive", "[step][format]") {
  step_plan p = zeppelin_test::random_step_plan(3).plan;
  p.replicas.back().micro_batches.back().layout.notes.push_back(
      {note_kind::other, "a note with \"quotes\", a backslash \\, bytes \xff\x01 and a tab\t", {0}, {{"x", 0.1}, {"y", -2.5e300}}});
  CHECK(step_plan_from_bytes(to_bytes(p)) == p);
  CHECK(read_step_plan_json(json_of(p)) == p);
}

TEST_CASE("step plan fingerprint: any single field changes it", "[step][format]") {
  const std::vector<std::pair<const char*, std::function<void(step_plan&)>>> mutations = {
      {"nodes", [](step_plan& p) { ++p.nodes; }},
      {"gpus_per_node", [](step_plan& p) { ++p.gpus_per_node; }},
      {"a document's length", [](step_plan& p) { ++p.documents.back(); }},
      {"one more document", [](step_plan& p) { p.documents.push_back(1); }},
      {"sync", [](step_plan& p) { p.sync = p.sync == gradient_sync::switching ? gradient_sync::all_reduce : gradient_sync::switching; }},
      {"tp", [](step_plan& p) { ++p.replicas.front().tp; }},
      {"cp", [](step_plan& p) { ++p.replicas.back().cp; }},
      {"pp", [](step_plan& p) { ++p.replicas.front().pp; }},
      {"a rank", [](step_plan& p) { ++p.replicas.back().ranks.back(); }},
      {"a virtual stage's layers", [](step_plan& p) { ++p.replicas.front().layers.front(); }},
      {"tp_mode",
       [](step_plan& p) {
         tp_collectives& m = p.replicas.front().tp_mode;
         m = m == tp_collectives::all_reduce ? tp_collectives::sequence_parallel : tp_collectives::all_reduce;
       }},
      {"schedule kind",
       [](step_plan& p) {
         any_pipeline_schedule& s = p.replicas.front().schedule;
         s = s.kind() == pipeline_schedule_kind::gpipe ? any_pipeline_schedule{one_f_one_b{}} : any_pipeline_schedule{gpipe{}};
       }},
      {"chunk-1f1b rather than 1f1b",
       [](step_plan& p) {
         any_pipeline_schedule& s = p.replicas.front().schedule;
         s = s.kind() == pipeline_schedule_kind::one_f_one_b ? any_pipeline_schedule{chunk_one_f_one_b{}} : any_pipeline_schedule{one_f_one_b{}};
       }},
      {"virtual stages",
       [](step_plan& p) {
         any_pipeline_schedule& s = p.replicas.front().schedule;
         const auto* i = std::get_if<interleaved_one_f_one_b>(&s.policy);
         s = {interleaved_one_f_one_b{.virtual_stages = i ? i->virtual_stages + 1 : 2}};
       }},
      {"chains",
       [](step_plan& p) {
         any_pipeline_schedule& s = p.replicas.front().schedule;
         const auto* c = std::get_if<chunk_one_f_one_b>(&s.policy);
         std::vector<int> chains = c ? c->chains : std::vector<int>{};
         if (chains.size() >= 2) chains.front() += chains[1], chains.erase(chains.begin() + 1);
         else chains = {1, 1};
         s = {chunk_one_f_one_b{.chains = chains}};
       }},
      {"a piece's document", [](step_plan& p) { ++p.replicas.front().micro_batches.front().pieces.front().document; }},
      {"a piece's begin", [](step_plan& p) { ++p.replicas.back().micro_batches.back().pieces.back().begin; }},
      {"a piece's end", [](step_plan& p) { ++p.replicas.front().micro_batches.back().pieces.front().end; }},
      {"one more piece", [](step_plan& p) { p.replicas.front().micro_batches.front().pieces.push_back({0, 0, 1}); }},
      {"the layout's capacity", [](step_plan& p) { ++p.replicas.front().micro_batches.front().layout.capacity; }},
      {"the layout's method", [](step_plan& p) { p.replicas.back().micro_batches.front().layout.method += "x"; }},
      {"a layout shard",
       [](step_plan& p) {
         for (placement& pl : p.replicas.front().micro_batches.back().layout.placements)
           if (!pl.shards.empty()) return void(++pl.shards.front().range.end);
       }},
      {"one more micro-batch", [](step_plan& p) { p.replicas.back().micro_batches.push_back(p.replicas.back().micro_batches.front()); }},
      {"a recompute count", [](step_plan& p) { ++p.replicas.back().recompute.front(); }},
      {"one more replica", [](step_plan& p) { p.replicas.push_back(p.replicas.front()); }},
  };
  std::vector<step_plan> plans;
  for (const pipeline_schedule_kind k : pipeline_schedule_kinds) plans.push_back(plan_with(k));
  for (std::uint64_t seed = 1; seed <= 6; ++seed) plans.push_back(zeppelin_test::random_step_plan(seed).plan);
  for (const step_plan& p : plans) {
    CAPTURE(to_string(p.replicas.front().schedule.kind()), p.replicas.size(), to_string(p.sync));
    const std::uint64_t f = fingerprint(p);
    CHECK(fingerprint(p) == f);  // a function of the content
    for (const auto& [name, mutate] : mutations) {
      CAPTURE(name);
      step_plan q = p;
      mutate(q);
      REQUIRE(q != p);
      CHECK(fingerprint(q) != f);
    }
    step_plan noted = p;  // the layouts' notes are for people: outside the fingerprint, as for plans
    noted.replicas.front().micro_batches.front().layout.notes.push_back({note_kind::other, "a note", {}, {}});
    CHECK(fingerprint(noted) == f);
  }
}

TEST_CASE("step plan bytes: corrupted, truncated or foreign bytes are refused with the reason", "[step][format]") {
  const step_plan p = plan_with(pipeline_schedule_kind::gpipe);
  const std::vector<std::byte> bytes = to_bytes(p);

  // any flipped byte: the checksum
  random_generator rng(17, 3);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::byte> bad = bytes;
    const std::size_t at = rng.below(bad.size());
    bad[at] ^= static_cast<std::byte>(1 + rng.below(255));
    CAPTURE(at);
    CHECK_THAT(message_of([&] { (void)step_plan_from_bytes(bad); }), Catch::Contains("checksum does not match"));
  }
  // truncated, extended
  for (const std::size_t cut : {std::size_t{0}, std::size_t{3}, std::size_t{8}, bytes.size() / 2, bytes.size() - 1}) {
    CAPTURE(cut);
    CHECK_THROWS_AS(step_plan_from_bytes(std::span<const std::byte>(bytes).first(cut)), invalid_argument);
  }
  CHECK_THAT(message_of([&] { (void)step_plan_from_bytes(std::span<const std::byte>(bytes).first(4)); }), Catch::Contains("too short"));
  std::vector<std::byte> cut = bytes;  // truncated but sealed: the reader names what it was reading
  cut.resize(bytes.size() / 2);
  const invalid_argument truncated = zeppelin_test::expect_invalid([&] { (void)step_plan_from_bytes(resealed(cut)); });
  CHECK_THAT(std::string(truncated.what()), Catch::Contains("step plan bytes:"));
  CHECK(truncated.value("offset").has_value());
  std::vector<std::byte> longer = bytes;
  longer.insert(longer.end() - 8, std::byte{0});
  CHECK_THAT(message_of([&] { (void)step_plan_from_bytes(resealed(longer)); }), Catch::Contains("bytes left after the step plan"));

  // a plan's bytes, or another magic
  CHECK_THAT(message_of([&] { (void)step_plan_from_bytes(to_bytes(p.replicas.front().micro_batches.front().layout)); }),
             Catch::Contains("magic \"ZSTP\""));
  std::vector<std::byte> magic = bytes;
  magic[1] = std::byte{'X'};
  CHECK_THAT(message_of([&] { (void)step_plan_from_bytes(resealed(magic)); }), Catch::Contains("magic \"ZSTP\""));

  // a well-formed stream of another version names the version
  std::vector<std::byte> other = bytes;
  other[4] = std::byte{2};
  const invalid_argument version = zeppelin_test::expect_invalid([&] { (void)step_plan_from_bytes(resealed(other)); });
  CHECK_THAT(std::string(version.what()), Catch::Contains("unsupported format version"));
  CHECK(version.value("version") == 2.0);

  // unknown enum values, sealed again: the reader names the offset
  const std::size_t sync_at = bytes.size() - 8 - 8 - 1;
  std::vector<std::byte> sync = bytes;
  sync[sync_at] = std::byte{4};
  const invalid_argument bad_sync = zeppelin_test::expect_invalid([&] { (void)step_plan_from_bytes(resealed(sync)); });
  CHECK_THAT(std::string(bad_sync.what()), Catch::Contains("gradient sync is not one the library knows"));
  CHECK(bad_sync.value("offset") == double(sync_at));
  CHECK(bad_sync.value("sync") == 4.0);

  const std::size_t mode_at = first_tp_mode_offset(p);
  REQUIRE(bytes[mode_at] == static_cast<std::byte>(p.replicas.front().tp_mode));
  std::vector<std::byte> mode = bytes;
  mode[mode_at] = std::byte{2};
  const invalid_argument bad_mode = zeppelin_test::expect_invalid([&] { (void)step_plan_from_bytes(resealed(mode)); });
  CHECK_THAT(std::string(bad_mode.what()), Catch::Contains("TP mode is not one the library knows"));
  CHECK(bad_mode.value("offset") == double(mode_at));

  REQUIRE(bytes[mode_at + 1] == std::byte{0});  // gpipe
  std::vector<std::byte> kind = bytes;
  kind[mode_at + 1] = std::byte{4};
  const invalid_argument bad_kind = zeppelin_test::expect_invalid([&] { (void)step_plan_from_bytes(resealed(kind)); });
  CHECK_THAT(std::string(bad_kind.what()), Catch::Contains("pipeline schedule kind is not one the library knows"));
  CHECK(bad_kind.value("offset") == double(mode_at + 1));

  std::vector<std::byte> stages = bytes;  // virtual stages 2 on GPipe
  REQUIRE(stages[mode_at + 2] == std::byte{1});
  stages[mode_at + 2] = std::byte{2};
  CHECK_THAT(message_of([&] { (void)step_plan_from_bytes(resealed(stages)); }), Catch::Contains("interleaved schedule only"));

  // a changed number, sealed again: the fingerprint
  std::vector<std::byte> nodes = bytes;
  nodes[8] ^= std::byte{4};
  CHECK_THAT(message_of([&] { (void)step_plan_from_bytes(resealed(nodes)); }), Catch::Contains("fingerprint does not match"));

  // an oversized count
  std::vector<std::byte> count = bytes;
  count[16 + 7] = std::byte{0x10};  // the documents' count
  CHECK_THAT(message_of([&] { (void)step_plan_from_bytes(resealed(count)); }), Catch::Contains("count of documents exceeds the bytes left"));
}

TEST_CASE("step plan JSON: edited, foreign or malformed JSON is refused with the reason", "[step][format]") {
  using zeppelin_test::expect_invalid;
  const step_plan p = plan_with(pipeline_schedule_kind::chunk_one_f_one_b);
  const std::string text = json_of(p);
  const auto replaced = [&](std::string_view from, std::string_view to) {
    std::string s = text;
    const std::size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };

  // the fingerprint
  const std::string hex = detail::fingerprint_hex(fingerprint(p));
  std::string wrong = hex;
  wrong[0] = wrong[0] == '0' ? '1' : '0';
  CHECK_THAT(message_of([&] { (void)read_step_plan_json(replaced(hex, wrong)); }),
             Catch::Contains("step plan JSON: the fingerprint written (" + wrong + ") is not the step plan's (" + hex + ")"));
  // a document one token longer: the fingerprint
  CHECK_THAT(message_of([&] { (void)read_step_plan_json(replaced("\"documents\":[", "\"documents\":[1")); }), Catch::Contains("fingerprint"));

  // enum names
  const std::string sync = "\"sync\":\"" + std::string(to_string(p.sync)) + "\"";
  CHECK_THAT(message_of([&] { (void)read_step_plan_json(replaced(sync, "\"sync\":\"ring\"")); }),
             Catch::Contains("unknown sync \"ring\" (valid: all_reduce, sharded_optimizer, fully_sharded, switching)"));
  CHECK_THAT(message_of([&] { (void)read_step_plan_json(replaced("\"kind\":\"chunk-1f1b\"", "\"kind\":\"zb-v\"")); }),
             Catch::Contains("in replicas[0]: unknown schedule kind \"zb-v\""));
  const std::string mode = "\"tp_mode\":\"" + std::string(to_string(p.replicas.front().tp_mode)) + "\"";
  CHECK_THAT(message_of([&] { (void)read_step_plan_json(replaced(mode, "\"tp_mode\":\"none\"")); }), Catch::Contains("unknown tp_mode \"none\""));

  // format, version, types and ranges
  CHECK_THAT(message_of([&] { (void)read_step_plan_json(replaced("zeppelin.step_plan", "zeppelin.plan")); }),
             Catch::Contains("\"format\" must be \"zeppelin.step_plan\""));
  CHECK(expect_invalid([&] { (void)read_step_plan_json(replaced("\"version\":1", "\"version\":2")); }).value("version") == 2.0);
  CHECK_THAT(message_of([&] { (void)read_step_plan_json(replaced("\"nodes\":", "\"nodes\":-")); }), Catch::Contains("\"nodes\" is out of range"));
  CHECK_THAT(message_of([&] { (void)read_step_plan_json(replaced("\"tp\":", "\"tp\":\"1\",\"x\":")); }),
             Catch::Contains("in replicas[0]: JSON: \"tp\" must be an integer"));
  CHECK_THAT(message_of([&] { (void)read_step_plan_json(replaced("\"virtual_stages\":1", "\"virtual_stages\":2")); }),
             Catch::Contains("\"schedule.virtual_stages\" other than 1 apply to the interleaved schedule only"));
  std::string chains = json_of(plan_with(pipeline_schedule_kind::gpipe));
  chains.replace(chains.find("\"chains\":[]"), 11, "\"chains\":[1]");
  CHECK_THAT(message_of([&] { (void)read_step_plan_json(chains); }), Catch::Contains("\"schedule.chains\" apply to the chunk-1f1b schedule only"));
  const invalid_argument document = expect_invalid([&] { (void)read_step_plan_json(replaced("\"document\":", "\"document\":1000")); });
  CHECK_THAT(std::string(document.what()), Catch::Contains("\"pieces[].document\" is out of range"));
  CHECK(document.value("replica") == 0.0);
  CHECK(document.value("max") == double(p.documents.size() - 1));

  // an embedded layout, edited: the layout's own checks, naming where it is
  const std::size_t second = text.find("},{\"pieces\":", text.find("\"micro_batches\":[{"));  // replica 0's micro-batch 1
  REQUIRE(second != std::string::npos);
  const std::size_t layout = text.find("\"layout\":", second);
  std::string moved = text;  // a shard of micro-batch 1's layout moved by one token
  moved.insert(moved.find("\"end\":", layout) + 6, "1");
  const invalid_argument in_layout = expect_invalid([&] { (void)read_step_plan_json(moved); });
  CHECK_THAT(std::string(in_layout.what()), Catch::Contains("step plan JSON: in replicas[0].micro_batches[1].layout: plan JSON: the fingerprint"));
  CHECK(in_layout.value("replica") == 0.0);
  CHECK(in_layout.value("micro_batch") == 1.0);
  std::string format = text;
  format.replace(format.find("zeppelin.plan", layout), 13, "zeppelin.plax");
  CHECK_THAT(message_of([&] { (void)read_step_plan_json(format); }),
             Catch::Contains("in replicas[0].micro_batches[1].layout: plan JSON: \"format\" must be \"zeppelin.plan\""));

  // malformed JSON names the offset
  CHECK_THAT(message_of([&] { (void)read_step_plan_json(text.substr(0, text.size() / 2)); }), Catch::Contains("JSON: expected"));
  CHECK(expect_invalid([&] { (void)read_step_plan_json(text + "x"); }).value("offset") == static_cast<double>(text.size()));
  CHECK_THAT(message_of([] { (void)read_step_plan_json("[1,2]"); }), Catch::Contains("must be an object"));
}

TEST_CASE("step plan JSON: a flipped byte is refused or changes nothing but a layout's notes", "[step][format]") {
  step_plan p = plan_with(pipeline_schedule_kind::interleaved);
  p.replicas.front().micro_batches.front().layout.notes.push_back({note_kind::other, "a note", {0}, {{"share", 0.5}}});
  const std::string text = json_of(p);
  random_generator rng(23, 4);
  int refused = 0;
  const int trials = 2000;
  for (int trial = 0; trial < trials; ++trial) {
    std::string bad = text;
    const std::size_t at = rng.below(bad.size());
    bad[at] = static_cast<char>(bad[at] ^ static_cast<char>(1 + rng.below(127)));
    CAPTURE(at, bad.substr(at > 20 ? at - 20 : 0, 40));
    step_plan read;
    try {
      read = read_step_plan_json(bad);
    } catch (const invalid_argument&) {
      ++refused;
      continue;
    }
    for (std::size_t r = 0; r < read.replicas.size() && r < p.replicas.size(); ++r)
      for (std::size_t k = 0; k < read.replicas[r].micro_batches.size() && k < p.replicas[r].micro_batches.size(); ++k)
        read.replicas[r].micro_batches[k].layout.notes = p.replicas[r].micro_batches[k].layout.notes;
    CHECK(read == p);
  }
  CHECK(refused > trials * 3 / 4);  // nearly every byte is guarded
}
