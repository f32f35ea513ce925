// tests/schedule/pipeline_schedule_test.cpp
// Pipeline schedules (schedule/pipeline/): every policy's schedule passes validate() over
// seeded random (stages, micro-batch sizes, chunks), holds exactly its in-flight bound, and
// validate() rejects broken schedules: a deadlock, a forward before its input, a mismatched
// send, a missing backward, a wrong bound.
#include <catch2/catch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/schedule/pipeline.hpp>

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

using namespace zeppelin;

namespace {
std::vector<token_count> random_tokens(random_generator& g, int m) {
  std::vector<token_count> t(static_cast<std::size_t>(m));
  for (auto& x : t) x = g.between(1, 70000);
  return t;
}

std::vector<pipeline_op> computes(const std::vector<pipeline_op>& ops) {
  std::vector<pipeline_op> out;
  for (const auto& op : ops)
    if (is_compute(op.kind)) out.push_back(op);
  return out;
}

std::string message_of(const pipeline_schedule& s) {
  try {
    (void)validate(s);
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}
}  // namespace

TEST_CASE("every policy's schedule is valid and holds exactly its in-flight bound", "[schedule][pipeline]") {
  random_generator g(20261123);
  for (int trial = 0; trial < 400; ++trial) {
    const int P = static_cast<int>(g.between(1, 9));
    const int M = static_cast<int>(g.between(1, 26));
    const int V = static_cast<int>(g.between(1, 4));
    const auto tokens = random_tokens(g, M);
    CAPTURE(P, M, V);
    const pipeline_schedule schedules[] = {gpipe{}.build(P, tokens), one_f_one_b{}.build(P, tokens),
                                           interleaved_one_f_one_b{.virtual_stages = V}.build(P, tokens)};
    for (const auto& s : schedules) {
      CAPTURE(to_string(s.kind));
      const pipeline_check c = validate(s);
      REQUIRE(c.max_in_flight == s.in_flight_bound);
      for (int p = 0; p < P; ++p) {
        const auto bound = s.in_flight_bound[static_cast<std::size_t>(p)];
        switch (s.kind) {
          case pipeline_schedule_kind::gpipe: REQUIRE(bound == M); break;
          case pipeline_schedule_kind::one_f_one_b: REQUIRE(bound == std::min(M, P - p)); break;
          case pipeline_schedule_kind::interleaved:
            REQUIRE(bound <= M * V);
            if (V == 1) REQUIRE(bound == std::min(M, P - p));
            break;
          case pipeline_schedule_kind::chunk_one_f_one_b: FAIL("not built here"); break;
        }
        // 2 M V compute ops per stage, in the tokens of their micro-batch
        const auto c_ops = computes(s.ops[static_cast<std::size_t>(p)]);
        REQUIRE(c_ops.size() == 2u * static_cast<std::size_t>(M * s.virtual_stages));
      }
    }
  }
}

TEST_CASE("1F1B holds fewer micro-batches than GPipe and interleaving more than 1F1B", "[schedule][pipeline]") {
  const std::vector<token_count> tokens(16, 4096);
  const auto f = one_f_one_b{}.build(4, tokens), gp = gpipe{}.build(4, tokens),
             il = interleaved_one_f_one_b{.virtual_stages = 2}.build(4, tokens);
  CHECK(f.in_flight_bound == std::vector<int>{4, 3, 2, 1});
  CHECK(gp.in_flight_bound == std::vector<int>{16, 16, 16, 16});
  // Megatron-LM: warm-up (P - 1 - p) * 2 + (V - 1) * P, plus the steady-state forward
  CHECK(il.in_flight_bound == std::vector<int>{11, 9, 7, 5});
}

TEST_CASE("1F1B's op order on a small pipeline is PipeDream-flush's", "[schedule][pipeline]") {
  const std::vector<token_count> tokens{100, 200, 300, 400};
  const auto s = one_f_one_b{}.build(2, tokens);
  const auto names = [](const std::vector<pipeline_op>& ops) {
    std::string out;
    for (const auto& op : ops) {
      if (!out.empty()) out += ' ';
      out += std::string(to_string(op.kind)) + std::to_string(op.micro_batch);
    }
    return out;
  };
  CHECK(names(computes(s.ops[0])) == "F0 F1 B0 F2 B1 F3 B2 B3");
  CHECK(names(computes(s.ops[1])) == "F0 B0 F1 B1 F2 B2 F3 B3");
  for (const auto& op : s.ops[1])
    if (!is_compute(op.kind)) CHECK(op.tokens == tokens[static_cast<std::size_t>(op.micro_batch)]);
}

TEST_CASE("a send joins the group right after its producer when its consumer waits for it", "[schedule][pipeline]") {
  // GPipe on 2 stages: stage 1 waits for each activation, so stage 0 sends it before its next
  // forward (placing it after that forward would stall stage 1 for a whole forward)
  const std::vector<token_count> tokens{100, 100, 100};
  for (const pipeline_schedule& s : {gpipe{}.build(2, tokens), one_f_one_b{}.build(2, tokens)}) {
    const std::vector<pipeline_op>& ops = s.ops[0];
    for (std::size_t i = 0; i + 1 < ops.size(); ++i) {
      if (ops[i].kind != pipeline_op_kind::forward) continue;
      CAPTURE(to_string(s.kind), i);
      REQUIRE(ops[i + 1].kind == pipeline_op_kind::send_activation);
      REQUIRE(ops[i + 1].micro_batch == ops[i].micro_batch);
    }
  }
}

TEST_CASE("validate rejects a deadlock, a forward before its input and mismatched sends", "[schedule][pipeline]") {
  const std::vector<token_count> tokens{10, 20};
  const auto op = [&](pipeline_op_kind k, int mb, int peer) { return pipeline_op{k, mb, 0, peer, tokens[static_cast<std::size_t>(mb)]}; };
  using K = pipeline_op_kind;
  pipeline_schedule s = one_f_one_b{}.build(2, tokens);
  REQUIRE(message_of(s) == "accepted");

  SECTION("a cycle of communication groups deadlocks (each send posted right after its forward)") {
    // stage 0 waits for gradient 0 before sending activation 1; stage 1 needs activation 1
    // before it runs backward 0 and sends gradient 0.
    s.ops[0] = {op(K::forward, 0, -1), op(K::send_activation, 0, 1), op(K::forward, 1, -1), op(K::receive_gradient, 0, 1),
                op(K::backward, 0, -1), op(K::send_activation, 1, 1), op(K::receive_gradient, 1, 1), op(K::backward, 1, -1)};
    s.ops[1] = {op(K::receive_activation, 0, 0), op(K::forward, 0, -1), op(K::receive_activation, 1, 0), op(K::forward, 1, -1),
                op(K::backward, 0, -1), op(K::send_gradient, 0, 0), op(K::backward, 1, -1), op(K::send_gradient, 1, 0)};
    s.in_flight_bound = {2, 2};
    CHECK_THAT(message_of(s), Catch::Contains("deadlock"));
  }
  SECTION("the same ops with the sends grouped complete") {
    s.ops[0] = {op(K::forward, 0, -1), op(K::send_activation, 0, 1), op(K::forward, 1, -1), op(K::send_activation, 1, 1),
                op(K::receive_gradient, 0, 1), op(K::backward, 0, -1), op(K::receive_gradient, 1, 1), op(K::backward, 1, -1)};
    s.ops[1] = {op(K::receive_activation, 0, 0), op(K::forward, 0, -1), op(K::receive_activation, 1, 0), op(K::forward, 1, -1),
                op(K::backward, 0, -1), op(K::send_gradient, 0, 0), op(K::backward, 1, -1), op(K::send_gradient, 1, 0)};
    s.in_flight_bound = {2, 2};
    CHECK(message_of(s) == "accepted");
  }
  SECTION("a forward whose input never arrived") {
    auto& ops = s.ops[1];
    ops.erase(std::find_if(ops.begin(), ops.end(), [](const pipeline_op& o) { return o.kind == K::receive_activation; }));
    CHECK_THAT(message_of(s), Catch::Contains("forward before its input activation"));
  }
  SECTION("sends that do not match the receives in order") {
    for (auto& o : s.ops[1])
      if (o.kind == K::receive_activation) o.micro_batch = 1 - o.micro_batch, o.tokens = tokens[static_cast<std::size_t>(o.micro_batch)];
    CHECK_THAT(message_of(s), Catch::Contains("does not match"));
  }
  SECTION("a missing backward") {
    auto& ops = s.ops[0];
    ops.erase(std::find_if(ops.begin(), ops.end(), [](const pipeline_op& o) { return o.kind == K::backward; }) );
    CHECK_THAT(message_of(s), Catch::Contains("backward"));
  }
  SECTION("a bound the schedule exceeds") {
    s.in_flight_bound = {1, 1};
    CHECK_THAT(message_of(s), Catch::Contains("in flight"));
  }
  SECTION("wrong tokens and peers") {
    s.ops[0][0].tokens = 11;
    CHECK_THAT(message_of(s), Catch::Contains("tokens"));
  }
}

TEST_CASE("schedule policies reject bad input with the value", "[schedule][pipeline]") {
  const std::vector<token_count> ok{5, 6};
  CHECK_THROWS_WITH(one_f_one_b{}.build(0, ok), Catch::Contains("at least one stage"));
  CHECK_THROWS_WITH(gpipe{}.build(2, std::vector<token_count>{}), Catch::Contains("at least one micro-batch"));
  CHECK_THROWS_WITH(gpipe{}.build(2, std::vector<token_count>{5, 0}), Catch::Contains("at least one token"));
  CHECK_THROWS_WITH(interleaved_one_f_one_b{.virtual_stages = 0}.build(2, ok), Catch::Contains("model chunk"));
  CHECK_THROWS_AS(one_f_one_b{}.build(1 << 20, std::vector<token_count>(100, 1)), resource_limit);
}

TEST_CASE("schedules chosen at run time by name build the same schedules", "[schedule][pipeline]") {
  const std::vector<token_count> tokens{3, 1, 4, 1, 5};
  CHECK(make_pipeline_schedule(pipeline_schedule_kind_by_name("gpipe")).build(3, tokens) == gpipe{}.build(3, tokens));
  CHECK(make_pipeline_schedule(pipeline_schedule_kind_by_name("1f1b")).build(3, tokens) == one_f_one_b{}.build(3, tokens));
  CHECK(make_pipeline_schedule(pipeline_schedule_kind_by_name("interleaved"), 3).build(3, tokens) ==
        interleaved_one_f_one_b{.virtual_stages = 3}.build(3, tokens));
  CHECK_THROWS_WITH(pipeline_schedule_kind_by_name("zb"), Catch::Contains("unknown pipeline schedule 'zb'") && Catch::Contains("1f1b"));
  CHECK_THROWS_WITH(make_pipeline_schedule(pipeline_schedule_kind::gpipe, 2), Catch::Contains("interleaved schedule only"));
}

namespace {
// Exhaustive oracle for validate(): explores EVERY interleaving of the stages under NCCL's
// rendezvous rules (post a whole group; a posted op is matched once its partner is posted; a
// group completes when all its ops are matched; a forward needs its activation received, a
// backward its forward and its gradient, a send the op that produced it) and says whether
// some interleaving runs every op, with matched pairs agreeing and the in-flight bound kept.
class brute_force_runner {
 public:
  explicit brute_force_runner(const pipeline_schedule& s) : s_(s) {}
  bool completes() {
    std::vector<std::size_t> pos(static_cast<std::size_t>(s_.stages), 0);
    std::vector<char> posted(static_cast<std::size_t>(s_.stages), 0);
    return explore(pos, posted);
  }

 private:
  struct replay {
    bool ok = true;
    std::vector<std::vector<const pipeline_op*>> sends, receives;  // per ordered pair, posted order
    std::vector<std::set<std::tuple<int, int, int>>> done;          // per stage: (kind, mb, chunk)
  };
  // Rebuild what has happened from the positions (every op before pos ran; the head group is
  // posted when posted[p]).
  replay state(const std::vector<std::size_t>& pos, const std::vector<char>& posted) const {
    replay r;
    const auto P = static_cast<std::size_t>(s_.stages);
    r.sends.resize(P * P);
    r.receives.resize(P * P);
    r.done.resize(P);
    for (std::size_t p = 0; p < P; ++p) {
      const auto& ops = s_.ops[p];
      std::size_t end = pos[p];
      if (posted[p])
        while (end < ops.size() && !is_compute(ops[end].kind)) ++end;
      for (std::size_t i = 0; i < end; ++i) {
        const pipeline_op& op = ops[i];
        if (is_compute(op.kind)) {
          if (i < pos[p]) r.done[p].insert({static_cast<int>(op.kind), op.micro_batch, op.chunk});
        } else if (is_send(op.kind)) {
          r.sends[p * P + static_cast<std::size_t>(op.peer)].push_back(&op);
        } else {
          r.receives[static_cast<std::size_t>(op.peer) * P + p].push_back(&op);
        }
      }
    }
    return r;
  }
  bool matched(const replay& r, int p, std::size_t i) const {
    const pipeline_op& op = s_.ops[static_cast<std::size_t>(p)][i];
    const auto P = static_cast<std::size_t>(s_.stages);
    const auto& mine = is_send(op.kind) ? r.sends[static_cast<std::size_t>(p) * P + static_cast<std::size_t>(op.peer)]
                                        : r.receives[static_cast<std::size_t>(op.peer) * P + static_cast<std::size_t>(p)];
    const auto& theirs = is_send(op.kind) ? r.receives[static_cast<std::size_t>(p) * P + static_cast<std::size_t>(op.peer)]
                                          : r.sends[static_cast<std::size_t>(op.peer) * P + static_cast<std::size_t>(p)];
    const auto n = static_cast<std::size_t>(std::find(mine.begin(), mine.end(), &op) - mine.begin());
    return n < theirs.size();
  }
  bool pairs_agree(const replay& r) const {
    const auto P = static_cast<std::size_t>(s_.stages);
    for (std::size_t a = 0; a < P; ++a)
      for (std::size_t b = 0; b < P; ++b) {
        const auto& snd = r.sends[a * P + b];
        const auto& rcv = r.receives[a * P + b];
        for (std::size_t n = 0; n < std::min(snd.size(), rcv.size()); ++n) {
          const bool act = snd[n]->kind == pipeline_op_kind::send_activation;
          const int from = s_.virtual_stage(static_cast<int>(a), snd[n]->chunk), to = s_.virtual_stage(static_cast<int>(b), rcv[n]->chunk);
          if (rcv[n]->kind != (act ? pipeline_op_kind::receive_activation : pipeline_op_kind::receive_gradient) ||
              rcv[n]->micro_batch != snd[n]->micro_batch || to != from + (act ? 1 : -1))
            return false;
        }
      }
    return true;
  }
  bool received(const replay& r, int p, pipeline_op_kind kind, int mb, int chunk, std::size_t before) const {
    const auto& ops = s_.ops[static_cast<std::size_t>(p)];
    for (std::size_t i = 0; i < before; ++i)
      if (ops[i].kind == kind && ops[i].micro_batch == mb && ops[i].chunk == chunk) return true;
    (void)r;
    return false;
  }
  bool explore(std::vector<std::size_t>& pos, std::vector<char>& posted) {
    const auto key = std::make_pair(pos, posted);
    if (!seen_.insert(key).second) return false;
    const replay r = state(pos, posted);
    if (!pairs_agree(r)) return false;
    bool all_done = true;
    const int last_virtual = s_.stages * s_.virtual_stages - 1;
    for (int p = 0; p < s_.stages; ++p) {
      const auto& ops = s_.ops[static_cast<std::size_t>(p)];
      std::size_t& i = pos[static_cast<std::size_t>(p)];
      if (i == ops.size()) continue;
      all_done = false;
      const pipeline_op& op = ops[i];
      const std::size_t at = i;
      if (is_compute(op.kind)) {
        const int v = s_.virtual_stage(p, op.chunk);
        const auto& done = r.done[static_cast<std::size_t>(p)];
        const int kind = static_cast<int>(op.kind);
        bool ok = !done.count({kind, op.micro_batch, op.chunk});
        if (op.kind == pipeline_op_kind::forward) {
          ok = ok && (v == 0 || received(r, p, pipeline_op_kind::receive_activation, op.micro_batch, op.chunk, i));
          int held = 1;
          for (const auto& [k, mb, c] : done) held += k == 0 ? 1 : -1;
          ok = ok && held <= s_.in_flight_bound[static_cast<std::size_t>(p)];
        } else {
          ok = ok && done.count({0, op.micro_batch, op.chunk}) &&
               (v == last_virtual || received(r, p, pipeline_op_kind::receive_gradient, op.micro_batch, op.chunk, i));
        }
        if (ok) {
          ++i;
          if (explore(pos, posted)) return true;
          i = at;
        }
        continue;
      }
      char& g = posted[static_cast<std::size_t>(p)];
      if (!g) {
        std::size_t end = i;
        bool producers_ran = true;
        for (; end < ops.size() && !is_compute(ops[end].kind); ++end)
          if (is_send(ops[end].kind))
            producers_ran = producers_ran && r.done[static_cast<std::size_t>(p)].count(
                                                 {ops[end].kind == pipeline_op_kind::send_activation ? 0 : 1, ops[end].micro_batch,
                                                  ops[end].chunk});
        if (!producers_ran) continue;
        g = 1;
        if (explore(pos, posted)) return true;
        g = 0;
        continue;
      }
      std::size_t end = i;
      bool all_matched = true;
      for (; end < ops.size() && !is_compute(ops[end].kind); ++end) all_matched = all_matched && matched(r, p, end);
      if (all_matched) {
        i = end;
        g = 0;
        if (explore(pos, posted)) return true;
        i = at;
        g = 1;
      }
    }
    return all_done && pairs_agree(r);
  }

  const pipeline_schedule& s_;
  std::set<std::pair<std::vector<std::size_t>, std::vector<char>>> seen_;
};
}  // namespace

TEST_CASE("validate agrees with an exhaustive search over every interleaving on tiny schedules", "[schedule][pipeline]") {
  random_generator g(4242);
  int accepted = 0, rejected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int P = static_cast<int>(g.between(1, 3)), M = static_cast<int>(g.between(1, 3));
    const int V = P == 1 ? static_cast<int>(g.between(1, 2)) : 1;
    const std::vector<token_count> tokens(static_cast<std::size_t>(M), 16);
    pipeline_schedule s = trial % 2 ? one_f_one_b{}.build(P, tokens) : interleaved_one_f_one_b{.virtual_stages = V}.build(P, tokens);
    // perturb: swap two adjacent ops of a random stage a few times, sometimes tighten a bound
    const int swaps = static_cast<int>(g.between(0, 3));
    for (int k = 0; k < swaps; ++k) {
      auto& ops = s.ops[static_cast<std::size_t>(g.between(0, P - 1))];
      if (ops.size() < 2) continue;
      const auto at = static_cast<std::size_t>(g.between(0, static_cast<std::int64_t>(ops.size()) - 2));
      std::swap(ops[at], ops[at + 1]);
    }
    if (g.between(0, 5) == 0) s.in_flight_bound[0] = std::max(1, s.in_flight_bound[0] - 1);
    bool valid = true;
    try {
      (void)validate(s);
    } catch (const invalid_argument&) {
      valid = false;
    }
    CAPTURE(trial, P, M, V, swaps);
    CHECK(valid == brute_force_runner(s).completes());
    (valid ? accepted : rejected) += 1;
  }
  CHECK(accepted > 50);
  CHECK(rejected > 50);
}
