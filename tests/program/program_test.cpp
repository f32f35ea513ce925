// tests/program/program_test.cpp
// The execution program (program/build.hpp) on seeded random plans of every partitioner,
// collective, launch and engine policy, router and remap, checked by oracles that know
// nothing of the executors (tests/program/program_support.hpp):
//   - run on token identities, every launch reads exactly the K/V of its blocks' keys, every
//     query meets its causal keys once, every dK/dV row comes home with its causal queries
//     once, and nothing reads a row nobody wrote;
//   - under the streams-and-events semantics the device engine runs (stream order plus the
//     `after` edges), every pair of operations that touch the same rows of a buffer, one of
//     them writing, is ordered: the device engine has no race;
//   - the simulator prices exactly what the program lists (its execution record);
//   - structure: every rank lists exactly the phases it has pieces in, in phase order; waves and levels;
//     determinism; bad input.
#include "program_support.hpp"
#include "support/expect_error.hpp"

#include <zeppelin/core/model.hpp>
#include <zeppelin/program.hpp>
#include <zeppelin/sim/simulate.hpp>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

using namespace zeppelin;
using namespace zeppelin_test;

namespace {

// rows of a buffer an operation reads or writes on one rank
struct row_access {
  std::pair<int, std::int32_t> buffer;  // (space, index); space 2: O / LSE (0) and dQ (1)
  token_count begin = 0, end = 0;
  bool writes = false;
};

std::vector<row_access> accesses(const execution_program& prog, pass_kind pass, std::size_t r, const program_op& op) {
  std::vector<row_access> out;
  const auto key = [](const buffer_ref& b) { return std::pair{static_cast<int>(b.where), b.index}; };
  if (const auto* c = std::get_if<copy_rows>(&op.body)) {
    for (const row_run& x : c->runs) {
      out.push_back({key(c->from), x.from_row, x.from_row + x.rows, false});
      out.push_back({key(c->to), x.to_row, x.to_row + x.rows, true});
    }
  } else if (const auto* a = std::get_if<add_rows>(&op.body)) {
    for (const row_run& x : a->runs) {
      out.push_back({key(a->from), x.from_row, x.from_row + x.rows, false});
      out.push_back({key(a->to), x.to_row, x.to_row + x.rows, true});
    }
  } else if (const auto* z = std::get_if<zero_rows>(&op.body)) {
    out.push_back({key(z->to), z->row, z->row + z->rows, true});
  } else if (const auto* l = std::get_if<run_attention>(&op.body)) {
    const program_launch& launch = prog.launches[static_cast<std::size_t>(l->launch)];
    for (const attention_block& b : launch.blocks) {
      out.push_back({key(launch.k), b.kv_row, b.kv_row + b.k.size(), false});
      out.push_back({key(launch.v), b.kv_row, b.kv_row + b.k.size(), false});
      out.push_back({{2, pass == pass_kind::forward ? 0 : 1}, b.q_row, b.q_row + b.q.size(), true});
      if (pass == pass_kind::backward) {
        out.push_back({key(launch.dk), b.kv_row, b.kv_row + b.k.size(), true});
        out.push_back({key(launch.dv), b.kv_row, b.kv_row + b.k.size(), true});
      }
    }
  } else if (const auto* e = std::get_if<exchange_phase>(&op.body)) {
    const program_phase& ph = prog.phases[static_cast<std::size_t>(e->phase)];
    for (std::size_t i = 0; i < ph.payloads.size(); ++i) {
      const payload_binding& b = ph.bindings[i];
      if (static_cast<std::size_t>(ph.payloads[i].src) == r) out.push_back({key(b.from), b.from_row, b.from_row + b.rows, false});
      if (static_cast<std::size_t>(ph.payloads[i].dst) == r) out.push_back({key(b.to), b.to_row, b.to_row + b.rows, true});
    }
  }
  return out;
}

execution_program build(const program_case& c) { return make_program(c.p, c.b, c.topo, c.options); }

}  // namespace

TEST_CASE("program: on token identities every launch reads its keys and every pair is computed once", "[program]") {
  random_generator rng(1201);
  int cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const program_case c = random_case(rng);
    const execution_program prog = build(c);
    INFO("trial " << trial << " method " << c.p.method << " ranks " << c.p.num_ranks() << " launch " << to_string(c.options.launch)
                  << " engine " << to_string(c.options.engine) << " remap " << c.options.remap.has_value());
    for (const pass_kind pass : {pass_kind::forward, pass_kind::backward}) {
      symbolic_backend backend(prog, c.p, pass);
      run_pass(prog, pass, backend, [](const program_segment& s) { return s.kind == segment_kind::attention; });
      backend.check_complete(c.b);
    }
    ++cases;
  }
  CHECK(cases == 300);
}

TEST_CASE("program: under CUDA stream semantics no two conflicting operations are unordered", "[program]") {
  random_generator rng(1202);
  std::int64_t conflicts = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const program_case c = random_case(rng);
    const execution_program prog = build(c);
    INFO("trial " << trial << " method " << c.p.method << " engine " << to_string(c.options.engine));
    for (const pass_kind pass : {pass_kind::forward, pass_kind::backward})
      for (std::size_t r = 0; r < prog.pass(pass).size(); ++r)
        for (const program_segment& seg : prog.pass(pass)[r].segments) {
          const auto hb = happens_before(seg.ops);
          std::vector<std::vector<row_access>> acc;
          for (const program_op& op : seg.ops) acc.push_back(accesses(prog, pass, r, op));
          for (std::size_t j = 0; j < seg.ops.size(); ++j)
            for (std::size_t i = 0; i < j; ++i)
              for (const row_access& x : acc[i])
                for (const row_access& y : acc[j])
                  if (x.buffer == y.buffer && (x.writes || y.writes) && x.begin < y.end && y.begin < x.end) {
                    INFO("rank " << r << " segment " << to_string(seg.kind) << " ops " << i << " -> " << j);
                    REQUIRE(hb[i][j]);
                    ++conflicts;
                  }
        }
  }
  CHECK(conflicts > 1000);  // the check met real dependencies
}

TEST_CASE("program: the simulator prices exactly the program's transfers and launches", "[program][sim]") {
  random_generator rng(1203);
  for (int trial = 0; trial < 60; ++trial) {
    program_case c = random_case(rng);
    // the model whose wire format the program was built with (fp64, as random_case sets)
    model_config m{"shape", 2, 6, 2, 1, 3, 16, 100, true, 0, 0, 8};
    c.options.wire = wire_format::for_model(m);
    sim_options o;
    o.launch = c.options.launch;
    o.engine = c.options.engine;
    o.router = c.options.router;
    o.remap = c.options.remap;
    o.record_execution = true;
    const sim_result r = simulate(c.p, c.b, c.topo, m, o);
    INFO("trial " << trial << " method " << c.p.method);
    CHECK(r.record == program_record(build(c)));
    CHECK(to_program_options(o, c.options.wire) == c.options);
  }
}

TEST_CASE("program: structure, determinism and bad input", "[program]") {
  random_generator rng(1204);
  for (int trial = 0; trial < 100; ++trial) {
    const program_case c = random_case(rng);
    const execution_program prog = build(c);
    CHECK(build(c) == prog);  // deterministic
    REQUIRE(prog.num_ranks() == c.p.num_ranks());
    CHECK(prog.streams.size() == (c.options.engine == engine_policy::prioritized ? 3u : 1u));
    for (const pass_kind pass : {pass_kind::forward, pass_kind::backward}) {
      // every rank posts exactly the phases of the pass it has pieces in, ascending, once each
      for (std::size_t r = 0; r < prog.pass(pass).size(); ++r) {
        std::vector<std::int32_t> mine, expected;
        for (const program_segment& s : prog.pass(pass)[r].segments)
          for (const program_op& op : s.ops)
            if (const auto* e = std::get_if<exchange_phase>(&op.body)) mine.push_back(e->phase);
        for (std::size_t ph = 0; ph < prog.phases.size(); ++ph) {
          const program_phase& x = prog.phases[ph];
          bool has_piece = false;
          for (const transfer& m : x.pieces) has_piece = has_piece || m.src == static_cast<rank_index>(r) || m.dst == static_cast<rank_index>(r);
          CHECK(has_piece == std::binary_search(x.ranks.begin(), x.ranks.end(), static_cast<rank_index>(r)));
          if (x.pass == pass && has_piece) expected.push_back(static_cast<std::int32_t>(ph));
        }
        CHECK(mine == expected);
        CHECK(prog.pass(pass)[r].segments.size() == prog.pass(pass)[0].segments.size());
      }
    }
    for (const program_phase& ph : prog.phases) {
      CHECK(ph.payloads.size() == ph.bindings.size());
      for (std::size_t i = 0; i < ph.payloads.size(); ++i) {
        CHECK(ph.payloads[i].payload == static_cast<std::int32_t>(i));
        CHECK(ph.payloads[i].bytes == ph.bindings[i].rows * prog.wire.row_bytes(ph.bindings[i].rows_of));
        CHECK(ph.payloads[i].src != ph.payloads[i].dst);
      }
      CHECK(ph.round < prog.levels[static_cast<std::size_t>(ph.level)].rounds[static_cast<int>(ph.pass)]);
    }
    for (const program_launch& l : prog.launches) {
      CHECK(static_cast<std::int32_t>(l.blocks.size()) <= max_wave_blocks);
      CHECK(l.round < prog.levels[static_cast<std::size_t>(l.level)].rounds[static_cast<int>(l.pass)]);
    }
    // levels: per micro-batch in the order remap_in, inter, intra, local, remap_out
    for (std::size_t i = 1; i < prog.levels.size(); ++i) {
      const auto& a = prog.levels[i - 1];
      const auto& b = prog.levels[i];
      CHECK(std::tuple(a.micro_batch, static_cast<int>(a.kind)) < std::tuple(b.micro_batch, static_cast<int>(b.kind)));
    }
  }
  const program_case c = random_case(rng);
  plan broken = c.p;
  broken.placements[0].shards.clear();
  if (c.b.total_tokens() > 0 && !c.p.placements[0].shards.empty()) CHECK_THROWS_AS(make_program(broken, c.b, c.topo), invalid_plan);
  program_options bad = c.options;
  bad.wire.kv_heads = 0;
  CHECK_THROWS_AS(make_program(c.p, c.b, c.topo, bad), invalid_argument);
}

TEST_CASE("program: fused launches never outnumber per-group ones, and fuse the groups of a level", "[program]") {
  random_generator rng(1205);
  int fused_somewhere = 0;
  for (int trial = 0; trial < 100; ++trial) {
    program_case c = random_case(rng);
    c.options.launch = launch_policy::per_group;
    const execution_program per_group = build(c);
    c.options.launch = launch_policy::fused_round;
    const execution_program fused = build(c);
    CHECK(fused.launches.size() <= per_group.launches.size());
    fused_somewhere += fused.launches.size() < per_group.launches.size();
    CHECK(fused.phases == per_group.phases);  // the transfers do not change
    // the same blocks, launched differently
    const auto blocks = [](const execution_program& x) {
      std::vector<std::tuple<rank_index, std::int32_t, std::int32_t, int, sequence_index, token_count, token_count>> out;
      for (const program_launch& l : x.launches)
        for (const attention_block& b : l.blocks) out.emplace_back(l.rank, l.level, l.round, static_cast<int>(l.pass), b.seq, b.q.begin, b.k.begin);
      std::sort(out.begin(), out.end());
      return out;
    };
    CHECK(blocks(fused) == blocks(per_group));
  }
  CHECK(fused_somewhere > 0);
}

TEST_CASE("program: a program over the size limits is refused before it is built", "[program]") {
  random_generator rng(1205);
  int refused = 0, all_to_all = 0;
  for (int trial = 0; trial < 80; ++trial) {
    program_case c = random_case(rng);
    // every other trial runs every group as all-to-all, counted G x (Ulysses degree + ring degree)
    const bool flip = trial % 2 == 1;
    if (flip)
      for (ring_group& g : c.p.groups) g.collective = collective_kind::all_to_all;
    std::int64_t member_rounds = 0;
    for (const ring_group& g : c.p.groups) {
      if (g.zone == zone_kind::local) continue;
      const auto G = static_cast<std::int64_t>(g.ranks.size());
      const std::int64_t u = flip ? detail::ulysses_degree(c.options.wire, static_cast<std::int32_t>(G)) : 0;
      member_rounds += flip ? G * (u + G / u) : G * G;
    }
    if (member_rounds == 0 || c.p.micro_batches() > 1) continue;
    INFO("trial " << trial << " method " << c.p.method << " all-to-all " << flip);
    // exactly at the limit it builds; one below, it names the limit and the pairs
    c.options.max_member_rounds = member_rounds;
    (void)make_program(c.p, c.b, c.topo, c.options);
    c.options.max_member_rounds = member_rounds - 1;
    const resource_limit e = zeppelin_test::expect_error<resource_limit>([&] { (void)make_program(c.p, c.b, c.topo, c.options); });
    CHECK(e.value("member_rounds") == static_cast<double>(member_rounds));
    CHECK(e.value("max_member_rounds") == static_cast<double>(member_rounds - 1));
    c.options.max_member_rounds = member_rounds;
    c.options.max_shard_pairs = 0;
    if (flip) {
      // the all-to-all collective makes no (query shard, key shard) pairs: no shard-pair limit
      (void)make_program(c.p, c.b, c.topo, c.options);
      ++all_to_all;
    } else {
      const resource_limit f = zeppelin_test::expect_error<resource_limit>([&] { (void)make_program(c.p, c.b, c.topo, c.options); });
      CHECK(f.value("shard_pairs") >= 1.0);
    }
    ++refused;
  }
  CHECK(refused >= 10);
  CHECK(all_to_all >= 5);
}
