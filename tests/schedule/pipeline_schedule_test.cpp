// tests/schedule/pipeline_schedule_test.cpp
// Pipeline schedules (schedule/pipeline/): every policy's schedule passes validate() over
// seeded random (stages, micro-batch sizes, chunks), holds exactly its in-flight bound, and
// validate() rejects broken schedules: a deadlock, a forward before its input, a mismatched
// send, a missing backward, a wrong bound.
#include <catch2/catch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/schedule/pipeline.hpp>

#include <algorithm>
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
