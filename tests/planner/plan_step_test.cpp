// The step planner (planner/plan_step.hpp): its choice against brute force over every
// candidate, every composition's plans against the documents they must cover, threads and
// planning ahead against planning in line, user-written policies, the JSON, and bad input.
#include <catch2/catch.hpp>
#include <zeppelin/core/detail/json_reader.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/planner.hpp>
#include <zeppelin/step/step_plan_json.hpp>
#include <zeppelin/step/validate.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>
#include <string>
#include <vector>

#include "../support/expect_error.hpp"

namespace {

using namespace zeppelin;

// A request of `seed`'s random documents (2 .. 12 of 64 .. 6,000 tokens) on `nodes` x 4 GPUs.
step_request planner_request(std::uint64_t seed, int nodes) {
  random_generator rng(seed);
  step_request r;
  const auto n = rng.between(2, 12);
  for (std::int64_t i = 0; i < n; ++i) r.documents.push_back(rng.between(64, 6000));
  r.cluster = cluster_by_name("c", nodes, 4);
  r.model = models::llama_550m();
  r.margin_bytes = 4.0 * (1ull << 30);
  return r;
}

// Per document of `r`, the token ranges the parts' pieces cover, checked to tile it once.
void check_covers_every_token(const step_request& r, const std::vector<sequence_step_plan>& parts) {
  std::map<std::int64_t, std::vector<std::pair<token_count, token_count>>> ranges;
  for (const sequence_step_plan& part : parts) {
    REQUIRE(part.sequences.size() == part.plan.documents.size());
    validate(part.plan, r.cluster, r.model);
    for (const step_replica& rep : part.plan.replicas)
      for (const step_micro_batch& mb : rep.micro_batches)
        for (const step_piece& x : mb.pieces) {
          const std::int64_t d = part.sequences[static_cast<std::size_t>(x.document)];
          REQUIRE(part.plan.documents[static_cast<std::size_t>(x.document)] == r.documents[static_cast<std::size_t>(d)]);
          ranges[d].emplace_back(x.begin, x.end);
        }
  }
  REQUIRE(ranges.size() == r.documents.size());
  for (auto& [d, pieces] : ranges) {
    std::sort(pieces.begin(), pieces.end());
    token_count at = 0;
    for (const auto& [b, e] : pieces) {
      REQUIRE(b == at);
      at = e;
    }
    REQUIRE(at == r.documents[static_cast<std::size_t>(d)]);
  }
}

}  // namespace

TEST_CASE("plan_step keeps the fastest candidate: brute force over every candidate", "[planner]") {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const step_request r = planner_request(seed, seed % 2 == 0 ? 2 : 1);
    const std::vector<step_candidate> candidates = default_step_candidates(r);
    const step_decision d = plan_step(r, candidates, {.pricing = candidate_pricing::complete});
    REQUIRE(d.candidates.size() == candidates.size());
    const std::vector<scheme_profile> profiles = scheme_profiles_of(r);
    double best = std::numeric_limits<double>::infinity();
    std::size_t best_at = 0;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      INFO("seed " << seed << " candidate " << candidates[i].name);
      double seconds = std::numeric_limits<double>::infinity();
      try {
        const std::vector<sequence_step_plan> parts = candidates[i].plan(r, profiles);
        check_covers_every_token(r, parts);
        seconds = simulate_back_to_back(parts, r.cluster, r.model, step_planner_sim_options()).iteration_s;
      } catch (const error&) {
        REQUIRE_FALSE(d.candidates[i].planned());
      }
      REQUIRE(d.candidates[i].name == candidates[i].name);
      REQUIRE(d.candidates[i].seconds == seconds);
      if (seconds < best) best = seconds, best_at = i;
    }
    INFO("seed " << seed);
    REQUIRE(d.chosen == best_at);
    REQUIRE(d.predicted_s == best);
    for (const priced_step_candidate& c : d.candidates) REQUIRE(d.predicted_s <= c.seconds);
    REQUIRE(d.lower_bound_s > 0);
    REQUIRE(d.lower_bound_s <= d.predicted_s);
    check_covers_every_token(r, d.parts);
    // stopping the beaten simulations changes nothing but their prices
    const step_decision fast = plan_step(r, candidates);
    REQUIRE(fast.chosen == d.chosen);
    REQUIRE(fast.predicted_s == d.predicted_s);
    REQUIRE(fast.parts == d.parts);
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const priced_step_candidate& c = fast.candidates[i];
      if (c.stopped()) {
        REQUIRE(c.planned());
        REQUIRE(d.candidates[i].seconds > c.stopped_after_s);
        REQUIRE(c.stopped_after_s >= d.predicted_s);
      } else {
        REQUIRE(c.seconds == d.candidates[i].seconds);
      }
    }
  }
}

TEST_CASE("plan_step is deterministic and does not depend on its threads", "[planner]") {
  const step_request r = planner_request(11, 2);
  const step_decision one = plan_step(r);
  const step_decision again = plan_step(r);
  const step_decision three = plan_step(r, {.threads = 3});
  for (const step_decision* d : {&again, &three}) {
    REQUIRE(d->chosen == one.chosen);
    REQUIRE(d->predicted_s == one.predicted_s);
    REQUIRE(d->parts == one.parts);
    for (std::size_t i = 0; i < one.candidates.size(); ++i) REQUIRE(d->candidates[i].seconds == one.candidates[i].seconds);
  }
}

TEST_CASE("planning ahead returns what planning in line returns", "[planner]") {
  step_planning_ahead ahead;
  REQUIRE_FALSE(ahead.pending());
  zeppelin_test::expect_invalid([&] { (void)ahead.take(); });
  for (std::uint64_t seed = 21; seed <= 23; ++seed) {
    const step_request r = planner_request(seed, 1);
    ahead.prepare(r);
    REQUIRE(ahead.pending());
    zeppelin_test::expect_invalid([&] { ahead.prepare(r); });
    const step_decision inline_plan = plan_step(r);  // runs while the thread plans the same
    const step_decision prepared = ahead.take();
    REQUIRE_FALSE(ahead.pending());
    REQUIRE(prepared.chosen == inline_plan.chosen);
    REQUIRE(prepared.predicted_s == inline_plan.predicted_s);
    REQUIRE(prepared.parts == inline_plan.parts);
  }
  step_request bad = planner_request(1, 1);
  bad.documents.clear();
  ahead.prepare(bad);
  zeppelin_test::expect_invalid([&] { (void)ahead.take(); });
}

TEST_CASE("compositions across papers: Zeppelin's layouts inside Hydraulis replicas and InfiniPipe slices", "[planner]") {
  step_request r;
  r.documents = {60000, 3000, 2500, 2000, 1800, 1500, 1200, 900, 700, 500, 400, 300};
  r.cluster = cluster_by_name("c", 2, 4);
  r.model = models::llama_550m();
  r.margin_bytes = 4.0 * (1ull << 30);
  const std::vector<scheme_profile> profiles = scheme_profiles_of(r);
  for (const step_candidate& c : default_step_candidates(r)) {
    INFO(c.name);
    const std::vector<sequence_step_plan> parts = c.plan(r, profiles);
    check_covers_every_token(r, parts);
    bool hierarchical = false, sliced = false;
    for (const sequence_step_plan& part : parts)
      for (const step_replica& rep : part.plan.replicas)
        for (const step_micro_batch& mb : rep.micro_batches) {
          hierarchical = hierarchical || mb.layout.method == "hierarchical";
          for (const step_piece& x : mb.pieces) sliced = sliced || x.begin > 0;
        }
    if (c.name == "infinipipe+zeppelin") REQUIRE(hierarchical);
    if (c.name.starts_with("infinipipe")) REQUIRE(parts.front().plan.sync == gradient_sync::fully_sharded);
    if (c.name.starts_with("hydraulis")) REQUIRE(parts.front().plan.sync == gradient_sync::switching);
    if (c.name == "megatron" || c.name == "te" || c.name == "hydraulis") REQUIRE_FALSE(hierarchical);
    if (!c.name.starts_with("infinipipe")) REQUIRE_FALSE(sliced);
  }
}

namespace {

// A packer a user writes: one document per micro-batch, round robin over the first candidate's
// pipelines. It shows the stage is open: step_composition takes any step_packer.
struct one_per_micro_batch {
  [[nodiscard]] iteration_plan assign(const step_request& r, std::span<const strategy> candidates) const {
    REQUIRE_FALSE(candidates.empty());
    iteration_plan out;
    const std::vector<scheme_profile> pipelines = pipelines_of(candidates.front());
    out.pipelines.resize(pipelines.size());
    for (std::size_t j = 0; j < pipelines.size(); ++j) out.pipelines[j].profile = pipelines[j];
    std::vector<std::vector<std::vector<std::int64_t>>> mbs(pipelines.size());
    for (std::size_t i = 0; i < r.documents.size(); ++i) mbs[i % pipelines.size()].push_back({static_cast<std::int64_t>(i)});
    for (std::size_t j = 0; j < pipelines.size(); ++j) out.pipelines[j].packing = packing_of(pipelines[j], std::move(mbs[j]), r.documents);
    return out;
  }
  friend bool operator==(const one_per_micro_batch&, const one_per_micro_batch&) = default;
};
static_assert(step_packer<one_per_micro_batch>);

}  // namespace

TEST_CASE("a user's own policies compose: a fixed scheme, a packer of one's own, any partitioner", "[planner]") {
  const step_request r = planner_request(5, 2);
  const step_composition<homogeneous_strategy, one_per_micro_batch, any_partitioner, full_recompute> mine{
      .strategy = {.scheme = parallel_scheme{.tp = 2, .pp = 2, .cp = 2}},
      .packer = {},
      .layout = partitioner_by_name("per_document", {.capacity = max_sequence_length}),
      .schedule = {gpipe{}},
      .checkpoint = {},
      .replicas = {.tp_mode = tp_collectives::all_reduce, .sync = gradient_sync::all_reduce}};
  static_assert(step_planning_policy<std::remove_cvref_t<decltype(mine)>>);
  const std::vector<sequence_step_plan> parts = mine.plan(r, scheme_profiles_of(r));
  REQUIRE(parts.size() == 1);
  check_covers_every_token(r, parts);
  std::size_t micro_batches = 0;
  for (const step_replica& rep : parts.front().plan.replicas) {
    REQUIRE(rep.tp == 2);
    REQUIRE(rep.cp == 2);
    REQUIRE(rep.pp == 2);
    REQUIRE(rep.schedule.kind() == pipeline_schedule_kind::gpipe);
    for (const step_micro_batch& mb : rep.micro_batches) REQUIRE(mb.pieces.size() == 1);
    micro_batches += rep.micro_batches.size();
    for (std::size_t v = 0; v < rep.layers.size(); ++v) REQUIRE(rep.recomputed(static_cast<int>(v), 0) == rep.layers[v]);
  }
  REQUIRE(micro_batches == r.documents.size());
  zeppelin_test::expect_invalid([&] {
    homogeneous_strategy odd{.scheme = parallel_scheme{.tp = 3, .pp = 1, .cp = 1}};
    (void)odd.candidates(r, scheme_profiles_of(r));
  });
}

TEST_CASE("InfiniPipe's sequence processor packs whole documents into balanced chunks, each a micro-batch", "[planner]") {
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    const step_request r = planner_request(seed, seed % 2 == 0 ? 2 : 1);
    const std::vector<scheme_profile> profiles = scheme_profiles_of(r);
    for (const any_step_strategy& strategy : {any_step_strategy{homogeneous_strategy{}}, any_step_strategy{hydraulis_strategy{}}}) {
      const std::vector<struct strategy> candidates = strategy.candidates(r, profiles);
      const iteration_plan plan = sequence_processor_packing{}.assign(r, candidates);
      INFO("seed " << seed << " candidate " << plan.candidate);
      const std::vector<scheme_profile> pipelines = pipelines_of(candidates.at(plan.candidate));
      // the chunks of Algorithm 1 with one slice, on the kept candidate's PP
      const sequence_processor processor{.cost = chunk_cost_model::for_model(r.model, r.cluster, 1, pipelines.front().scheme.pp)};
      const chunking chunks = processor.process(r.documents, 1);
      std::multiset<std::vector<std::int64_t>> expected, got;
      for (const chunk& k : chunks.chunks) {
        std::vector<std::int64_t> mb;
        for (const chunk_slice& x : k.slices) {
          REQUIRE(x.begin == 0);
          REQUIRE(x.end == r.documents[static_cast<std::size_t>(x.sequence)]);  // never cut
          mb.push_back(x.sequence);
        }
        REQUIRE(k.tokens() <= longest_document(r));
        expected.insert(mb);
      }
      std::vector<int> seen(r.documents.size(), 0);
      REQUIRE(plan.pipelines.size() == pipelines.size());
      for (const pipeline_plan& p : plan.pipelines)
        for (const std::vector<std::int64_t>& mb : p.packing.micro_batches) {
          token_count tokens = 0;
          for (const std::int64_t d : mb) ++seen[static_cast<std::size_t>(d)], tokens += r.documents[static_cast<std::size_t>(d)];
          REQUIRE(tokens <= p.profile.max_len);
          got.insert(mb);
        }
      REQUIRE(got == expected);
      for (const int n : seen) REQUIRE(n == 1);
      // no candidate's plan is predicted faster than the kept one
      for (std::size_t c = 0; c < candidates.size(); ++c)
        if (const std::optional<iteration_plan> other = sequence_processor_packing::assign_to(r, candidates[c], c)) REQUIRE(plan.seconds <= other->seconds);
    }
  }
}

TEST_CASE("the sequence processor's packing composes with Zeppelin's layouts and is priced by plan_step", "[planner]") {
  const step_request r = planner_request(4, 2);
  std::vector<step_candidate> candidates = default_step_candidates(r);
  composed_step chunks = step_candidates::homogeneous(any_packer{original{}}, 1.0, step_candidates::zeppelin_layout(r));
  chunks.packer = {sequence_processor_packing{}};
  candidates.push_back({"chunks+zeppelin", chunks, "homogeneous; InfiniPipe's sequence processor; Zeppelin's CP layout"});
  const step_decision d = plan_step(r, candidates, {.pricing = candidate_pricing::complete});
  const priced_step_candidate& mine = d.candidates.back();
  REQUIRE(mine.name == "chunks+zeppelin");
  REQUIRE(mine.priced());
  REQUIRE(d.predicted_s <= mine.seconds);
  const std::vector<sequence_step_plan> parts = candidates.back().plan(r, scheme_profiles_of(r));
  check_covers_every_token(r, parts);
  REQUIRE(simulate_back_to_back(parts, r.cluster, r.model, step_planner_sim_options()).iteration_s == mine.seconds);
}

TEST_CASE("the step decision's JSON: versioned, every candidate, every part's step plan read back equal", "[planner]") {
  const step_request r = planner_request(3, 1);
  const step_decision d = plan_step(r);
  std::ostringstream os;
  write_step_decision_json(os, d);
  const detail::json_value doc = detail::parse_json(os.str());
  REQUIRE(doc.at("format").as_string("format") == "zeppelin.step");
  REQUIRE(doc.at("version").as_int("version") == 1);
  REQUIRE(doc.at("chosen").as_string("chosen") == d.chosen_name());
  const auto& candidates = doc.at("candidates").as_array("candidates");
  REQUIRE(candidates.size() == d.candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i) REQUIRE(candidates[i].at("name").as_string("name") == d.candidates[i].name);
  const auto& parts = doc.at("parts").as_array("parts");
  REQUIRE(parts.size() == d.parts.size());
  for (std::size_t p = 0; p < parts.size(); ++p) REQUIRE(detail::read_step_plan_json_object(parts[p].at("plan")) == d.parts[p].plan);
}

TEST_CASE("plan_step refuses bad input by name, and a step no candidate plans", "[planner]") {
  step_request r = planner_request(1, 1);
  const std::vector<step_candidate> none;
  zeppelin_test::expect_invalid([&] { (void)plan_step(r, none); });
  zeppelin_test::expect_invalid([&] { (void)plan_step(r, {.threads = 0}); });
  step_request empty = r;
  empty.documents.clear();
  zeppelin_test::expect_invalid([&] { (void)plan_step(empty); });
  step_request negative = r;
  negative.documents.push_back(0);
  const invalid_argument e = zeppelin_test::expect_invalid([&] { (void)plan_step(negative); });
  REQUIRE(e.value("length") == 0.0);
  step_request huge = r;
  huge.documents = {2'000'000'000};
  const infeasible refused = zeppelin_test::expect_error<infeasible>([&] { (void)plan_step(huge); });
  REQUIRE(std::string(refused.what()).find("no candidate composition plans this step") != std::string::npos);
}
