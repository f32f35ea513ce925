// tests/exec/ulysses_test.cpp
// The all-to-all collective of the execution program (program/detail/all_to_all_collective.hpp:
// DeepSpeed-Ulysses, and Ulysses x ring where the heads do not split over a whole group) on
// the host engine and the simulator:
//   - Ulysses plans (partition/ulysses.hpp) of groups of 2 to 8 ranks, MHA, GQA and MQA (K/V
//     heads replicated when a lane has fewer query heads than a K/V head serves), groups
//     larger than the heads or not dividing them (Ulysses x ring), every launch and engine
//     policy, with and without the remap: O, LSE, dQ, dK, dV equal the dense reference, and
//     the engine executed exactly what the program lists;
//   - ring, all-gather and all-to-all groups in one program give the dense reference;
//   - the bytes each rank sends are the all-to-all's (Q, K, V, O, LSE out and home), one
//     payload per peer and bundle of tensors;
//   - the simulator prices exactly the program's transfers and launches;
//   - the degrees: the largest Ulysses degree whose lanes exist, the rest a ring;
//   - each member packs and unpacks each tensor with at most three head operations.
#include <catch2/catch.hpp>

#include "exec_test_support.hpp"
#include "plan_support.hpp"

#include <zeppelin/core/model.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/sim/simulate.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

using namespace zeppelin;
using namespace zeppelin_test;

namespace {

// heads and K/V heads: lanes for every group of 1, 2, 4 and 8 ranks (8 heads), replicated K/V
// heads (8/2, 8/1, 4/1), and Ulysses x ring for groups of 8 over 4 or 2 heads, of 3, 6 or 8
// over 6 heads
struct head_shape {
  std::int32_t heads, kv_heads;
};
constexpr head_shape shapes[] = {{8, 8}, {8, 2}, {8, 1}, {8, 4}, {4, 1}, {2, 2}, {6, 3}, {6, 2}};

// the ranks of a plan's all-to-all groups, the largest
std::int32_t largest_group(const plan& p) {
  std::size_t most = 0;
  for (const ring_group& g : p.groups) most = std::max(most, g.ranks.size());
  return static_cast<std::int32_t>(most);
}

}  // namespace

TEST_CASE("ulysses: the all-to-all collective equals the dense reference (fp64, MHA, GQA, MQA)", "[exec][ulysses]") {
  const std::vector<std::pair<int, int>> topologies{{1, 2}, {1, 4}, {2, 2}, {2, 4}, {1, 8}, {4, 2}, {1, 3}, {2, 3}};
  random_generator rng(4242);
  int cases = 0, replicated = 0, hybrid = 0;
  for (const auto& [nodes, gpus] : topologies) {
    const topology t = test_topology(nodes, gpus);
    for (int trial = 0; trial < 8; ++trial) {
      const batch b = random_lengths(rng, t.num_ranks());
      const head_shape hs = shapes[rng.below(std::size(shapes))];
      const attention_dims dims{.heads = hs.heads, .kv_heads = hs.kv_heads, .head_dim = 2};
      // groups of 1, 2, 3, 4 or all ranks
      std::vector<std::int32_t> sizes{0};
      for (const std::int32_t g : {1, 2, 3, 4})
        if (t.num_ranks() % g == 0 && g < t.num_ranks()) sizes.push_back(g);
      const std::int32_t cp = sizes[rng.below(sizes.size())];
      const token_count fair = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks();
      plan p;
      for (token_count capacity = fair;; capacity += capacity / 4 + 1) {
        try {
          p = ulysses{.capacity = capacity, .cp_size = cp}.partition(b, t);
          break;
        } catch (const infeasible&) {
        }
      }
      program_options o;
      o.launch = rng.below(2) ? launch_policy::fused_round : launch_policy::per_group;
      o.engine = rng.below(2) ? engine_policy::prioritized : engine_policy::in_order;
      if (rng.below(2)) o.remap = remap_objective::max_send;
      const auto data = make_problem<double>(b, dims, rng());
      INFO("topology " << nodes << "x" << gpus << " cp " << cp << " heads " << dims.heads << "/" << dims.kv_heads << " lengths "
                       << b.lengths().size());
      execution_record record;
      const run_errors e = run_distributed<double>(p, b, t, data, o, &record);
      CHECK(e.out < 1e-10);
      CHECK(e.lse < 1e-10);
      CHECK(e.grad < 1e-10);
      CHECK(e.remap < 1e-10);
      CHECK(e.remap_round_trip_exact);
      program_options w = o;
      w.wire = wire_format::for_shape(dims.heads, dims.kv_heads, dims.head_dim, 8);
      const execution_program prog = make_program(p, b, t, w);
      CHECK(record == run_distributed_record(prog));
      bool lanes = false;
      for (const program_launch& l : prog.launches) lanes = lanes || !l.lane.whole();
      CHECK(lanes == (largest_group(p) > 1));
      const std::int32_t G = largest_group(p), u = detail::ulysses_degree(w.wire, G);
      if (u > hs.kv_heads) ++replicated;
      if (u < G) ++hybrid;
      ++cases;
    }
  }
  CHECK(cases == 64);
  CHECK(replicated > 5);  // lanes sharing a K/V head were met
  CHECK(hybrid > 5);      // and Ulysses x ring
}

TEST_CASE("ulysses: ring, all-gather and all-to-all groups in one program (fp64)", "[exec][ulysses]") {
  random_generator rng(4343);
  int with_all_to_all = 0;
  for (const auto& [nodes, gpus] : std::vector<std::pair<int, int>>{{1, 4}, {2, 2}, {2, 4}, {3, 2}}) {
    const topology t = test_topology(nodes, gpus);
    for (int trial = 0; trial < 6; ++trial) {
      const batch b = random_lengths(rng, t.num_ranks());
      const attention_dims dims{.heads = 8, .kv_heads = 2, .head_dim = 2};
      plan p = make_plan(0, b, t, (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks());  // hierarchical: groups of any size
      // every group whose size divides the heads runs all-to-all, the others alternate
      int i = 0;
      for (ring_group& g : p.groups) {
        const auto G = static_cast<std::int32_t>(g.ranks.size());
        if (G > 1 && dims.heads % G == 0) g.collective = collective_kind::all_to_all, ++with_all_to_all;
        else g.collective = i++ % 2 ? collective_kind::all_gather : collective_kind::ring;
      }
      const auto data = make_problem<double>(b, dims, rng());
      INFO("topology " << nodes << "x" << gpus << " groups " << p.groups.size());
      const run_errors e = run_distributed<double>(p, b, t, data, program_options{});
      CHECK(e.out < 1e-10);
      CHECK(e.lse < 1e-10);
      CHECK(e.grad < 1e-10);
    }
  }
  CHECK(with_all_to_all > 5);
}

TEST_CASE("ulysses: every rank sends Q, K, V to the lanes and gets O, LSE home", "[exec][ulysses]") {
  // one group of G ranks, H heads, KV heads, fp32 (4-byte elements and accumulators)
  for (const auto& [G, H, KV] : std::vector<std::tuple<int, int, int>>{{4, 8, 8}, {4, 8, 2}, {8, 8, 2}, {2, 4, 1}}) {
    const topology t = test_topology(1, G);
    const batch b({1000, 301, 7});
    const plan p = ulysses{.capacity = 2000}.partition(b, t);
    program_options o;
    o.wire = wire_format::for_shape(H, KV, 16, 4);
    const execution_program prog = make_program(p, b, t, o);
    const std::int64_t n = H / G, ratio = H / KV, kvn = n % ratio == 0 ? n / ratio : 1;
    // bytes of one token of one lane: forward out Q + K + V, home O + LSE; backward out Q, K,
    // V, O, dO, LSE, home dQ (element bytes) and dK, dV (accumulator bytes; 4 here)
    const std::int64_t q = n * 16 * 4, kv = kvn * 16 * 4, lse = n * 4;
    std::map<std::pair<int, rank_index>, std::int64_t> sent;  // (pass, rank) -> bytes
    for (const program_phase& ph : prog.phases)
      for (const transfer& x : ph.payloads) sent[{static_cast<int>(ph.pass), x.src}] += x.bytes;
    for (rank_index r = 0; r < G; ++r) {
      const token_count mine = prog.rows[static_cast<std::size_t>(r)], others = b.total_tokens() - mine;
      INFO("G " << G << " heads " << H << "/" << KV << " rank " << r);
      CHECK(sent[{0, r}] == (G - 1) * mine * (q + 2 * kv) + others * (q + lse));
      CHECK(sent[{1, r}] == (G - 1) * mine * (3 * q + 2 * kv + lse) + others * (q + 2 * kv));
    }
  }
}

TEST_CASE("ulysses: one payload per peer and bundle: Q, K, V (O, dO) together, dK and dV together", "[exec][ulysses]") {
  // plain Ulysses (u = G): round 0 sends each of the G - 1 peers one payload per bundle going
  // out (forward: Q K V; backward: Q K V O dO, and LSE), the last round one per bundle coming
  // home (forward: O, and LSE; backward: dQ, and dK dV), each of the bundle's bytes
  for (const auto& [G, H, KV] : std::vector<std::tuple<int, int, int>>{{4, 8, 8}, {4, 8, 2}, {8, 8, 2}, {2, 4, 1}}) {
    const topology t = test_topology(1, G);
    const batch b({1000, 301, 7});
    const plan p = ulysses{.capacity = 2000}.partition(b, t);
    program_options o;
    o.wire = wire_format::for_shape(H, KV, 16, 2);
    const execution_program prog = make_program(p, b, t, o);
    REQUIRE(detail::ulysses_degree(o.wire, G) == G);
    const std::int64_t n = H / G, ratio = H / KV, kvn = n % ratio == 0 ? n / ratio : 1;
    const std::int64_t q = n * 16 * 2, kv = kvn * 16 * 2, lse = n * 4, dkv = kvn * 16 * 4;
    // (pass, first round or last) -> the bytes per row of each payload a rank sends, sorted
    std::map<std::pair<int, bool>, std::vector<std::int64_t>> expected{
        {{0, true}, {q + 2 * kv}}, {{0, false}, {lse, q}}, {{1, true}, {lse, 3 * q + 2 * kv}}, {{1, false}, {q, 2 * dkv}}};
    for (const program_phase& ph : prog.phases) {
      const int pass = static_cast<int>(ph.pass);
      const bool out = ph.round == 0;
      REQUIRE(ph.payloads.size() == ph.bindings.size());
      for (rank_index r = 0; r < G; ++r) {
        std::map<rank_index, std::vector<std::int64_t>> to_peer;  // per peer: bytes per row of each payload
        for (std::size_t i = 0; i < ph.payloads.size(); ++i)
          if (ph.payloads[i].src == r) to_peer[ph.payloads[i].dst].push_back(ph.payloads[i].bytes / ph.bindings[i].rows);
        INFO("G " << G << " heads " << H << "/" << KV << " pass " << pass << " round " << ph.round << " rank " << r);
        CHECK(static_cast<int>(to_peer.size()) == G - 1);
        for (auto& [peer, row_bytes] : to_peer) {
          std::sort(row_bytes.begin(), row_bytes.end());
          CHECK(row_bytes == expected[{pass, out}]);
        }
      }
    }
  }
}

TEST_CASE("ulysses: the simulator prices exactly the program's transfers and launches", "[exec][ulysses][sim]") {
  random_generator rng(4444);
  for (int trial = 0; trial < 12; ++trial) {
    const topology t = test_topology(1 + static_cast<int>(rng.below(2)), 4);
    const batch b = random_lengths(rng, t.num_ranks());
    const plan p = make_plan(5, b, t, b.total_tokens());
    REQUIRE(p.method == "ulysses");
    const model_config m{"shape", 2, 16, 8, 2, 2, 16, 100, true, 0, 0, 2};
    sim_options o;
    o.record_execution = true;
    const sim_result r = simulate(p, b, t, m, o);
    program_options w = to_program_options(o, wire_format::for_model(m));
    CHECK(r.record == program_record(make_program(p, b, t, w)));
    CHECK(r.step_time_s > 0);
    std::int64_t pairs = 0;
    for (const token_count len : b.lengths()) pairs += causal_pairs(len);
    CHECK(r.attention_pairs == pairs);  // G lanes of H / G heads: every pair once per head
  }
}

TEST_CASE("ulysses: the degrees are the largest Ulysses degree with lanes, and a ring", "[exec][ulysses]") {
  const auto degree = [](std::int32_t heads, std::int32_t kv_heads, std::int32_t G) {
    return detail::ulysses_degree(wire_format::for_shape(heads, kv_heads, 4, 2), G);
  };
  CHECK(degree(32, 8, 8) == 8);    // 4 query heads per lane, one K/V head
  CHECK(degree(32, 8, 32) == 32);  // one query head per lane, K/V heads replicated 4 times
  CHECK(degree(32, 8, 64) == 32);  // 64 ranks: Ulysses 32 x ring 2
  CHECK(degree(8, 8, 3) == 1);     // 3 does not divide 8: a ring of 3 over whole heads
  CHECK(degree(8, 8, 6) == 2);     // Ulysses 2 x ring 3
  CHECK(degree(12, 4, 3) == 1);    // 4 heads per lane would straddle K/V heads of 3
  CHECK(degree(12, 4, 6) == 2);    // 6 or 3 lanes would straddle K/V heads: Ulysses 2 x ring 3
  const wire_format w = wire_format::for_shape(8, 2, 4, 2);
  CHECK(detail::all_to_all_rounds(w, 8, pass_kind::forward) == 2);   // Ulysses 8: in and out
  CHECK(detail::all_to_all_rounds(w, 8, pass_kind::backward) == 2);
  CHECK(detail::all_to_all_rounds(w, 16, pass_kind::forward) == 3);  // Ulysses 8 x ring 2
  CHECK(detail::all_to_all_rounds(w, 16, pass_kind::backward) == 4);
  CHECK_THROWS_WITH(detail::lane_of(w, 3, 0), Catch::Contains("do not split") && Catch::Contains("lanes"));
}

TEST_CASE("ulysses: a subgroup's lanes share one block list, and sequences held whole keep their rows", "[exec][ulysses]") {
  // one group of G ranks over G heads (Ulysses G) or G / 2 (Ulysses G / 2 x ring 2); 257
  // one-token sequences, each held whole by one rank, dealt over the ranks by the zigzag split
  random_generator rng(4545);
  for (const auto& [G, H] : std::vector<std::pair<int, int>>{{4, 4}, {8, 8}, {4, 2}, {8, 4}}) {
    const topology t = test_topology(1, G);
    const batch b(std::vector<token_count>(257, 1));
    const plan p = ulysses{.capacity = b.total_tokens()}.partition(b, t);
    REQUIRE(p.groups.size() == 1);
    program_options o;
    o.wire = wire_format::for_shape(H, H, 4, 4);
    const execution_program prog = make_program(p, b, t, o);
    const std::int32_t u = detail::ulysses_degree(o.wire, G);
    INFO("G " << G << " heads " << H << " Ulysses degree " << u);
    // per pass and round: the lanes' launches and the distinct lists they hold
    std::map<std::tuple<int, std::int32_t, std::int32_t>, std::vector<const void*>> lists;
    for (const program_launch& l : prog.launches) {
      REQUIRE_FALSE(l.lane.whole());
      lists[{static_cast<int>(l.pass), l.level, l.round}].push_back(l.blocks.identity());
    }
    for (auto& [at, ids] : lists) {
      std::sort(ids.begin(), ids.end());
      const auto distinct = std::unique(ids.begin(), ids.end()) - ids.begin();
      CHECK(static_cast<std::int32_t>(ids.size()) == G);  // every lane computes in the rounds of its own keys
      CHECK(distinct == G / u);                           // one list per subgroup
    }
    // the permutations between member-major and sequence-major rows: one run per member
    std::int64_t permutations = 0;
    for (const auto& pass : prog.passes)
      for (const rank_pass& rp : pass)
        for (const program_segment& seg : rp.segments)
          for (const program_op& op : seg.ops)
            if (const auto* c = std::get_if<copy_rows>(&op.body); c && c->from.where == buffer_ref::space::arena &&
                                                                   c->to.where == buffer_ref::space::arena) {
              CHECK(static_cast<std::int32_t>(c->runs.size()) <= u);
              ++permutations;
            }
    CHECK(permutations > 0);
    // and the sharing changes nothing the engine computes
    const auto data = make_problem<double>(b, attention_dims{.heads = H, .kv_heads = H, .head_dim = 2}, rng());
    const run_errors e = run_distributed<double>(p, b, t, data, program_options{});
    CHECK(e.out < 1e-10);
    CHECK(e.lse < 1e-10);
    CHECK(e.grad < 1e-10);
  }
}

TEST_CASE("ulysses: sequences several subgroups hold come first, in one order in every subgroup", "[exec][ulysses]") {
  // Ulysses u x ring r: a ring round computes one subgroup's queries against another's keys;
  // listing the sequences both hold in the same order on both sides keeps that round's blocks
  // ascending in query and key rows alike, so they make as few launch waves as one subgroup's
  random_generator rng(4646);
  int with_shared = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int G = trial % 2 ? 8 : 6;
    const topology t = test_topology(1, G);
    const batch b = random_lengths(rng, t.num_ranks());
    const plan p = ulysses{.capacity = b.total_tokens()}.partition(b, t);
    REQUIRE(p.groups.size() == 1);
    const wire_format wire = wire_format::for_shape(G / 2, 1, 4, 2);  // Ulysses G / 2 x ring 2
    const std::int32_t u = detail::ulysses_degree(wire, G);
    REQUIRE(u == G / 2);
    const group_layout layout = make_group_layout(p, b, 0);
    const std::vector<sequence_index> shared = detail::shared_sequences(layout, u);
    CHECK(std::is_sorted(shared.begin(), shared.end()));
    with_shared += !shared.empty();
    for (std::int32_t i = 0; i < G / u; ++i) {
      INFO("trial " << trial << " subgroup " << i);
      const detail::subgroup_rows rows = detail::subgroup_rows_of(layout, i * u, u, shared);
      // the shared sequences' runs first, by sequence; every other sequence after them
      std::size_t k = 0;
      for (; k < rows.runs.size() && std::binary_search(shared.begin(), shared.end(), rows.runs[k].seq); ++k)
        if (k > 0) CHECK(rows.runs[k - 1].seq <= rows.runs[k].seq);
      for (; k < rows.runs.size(); ++k) CHECK_FALSE(std::binary_search(shared.begin(), shared.end(), rows.runs[k].seq));
      // rows: every token of the subgroup once, runs back to back
      token_count row = 0;
      for (const group_shard& run : rows.runs) {
        CHECK(run.row == row);
        row += run.range.size();
      }
      token_count permuted = 0;
      for (const row_run& x : rows.permute) permuted += x.rows;
      CHECK(permuted == row);
    }
  }
  CHECK(with_shared > 10);  // sequences across both subgroups were met
}

TEST_CASE("ulysses: a member packs and unpacks each tensor with at most three head operations", "[exec][ulysses]") {
  // per rank, pass and rank tensor a head operation reads (pack) or writes (unpack): at most
  // three operations (the lanes before the rank's own, its own, the lanes after), which
  // together move each of the u lanes exactly once, each lane's heads once
  for (const auto& [G, H, KV] : std::vector<std::tuple<int, int, int>>{{4, 8, 8}, {8, 8, 2}, {8, 4, 1}, {6, 6, 3}, {2, 2, 2}}) {
    const topology t = test_topology(1, G);
    const batch b({900, 301, 7, 40});
    const plan p = ulysses{.capacity = 2000}.partition(b, t);
    program_options o;
    o.wire = wire_format::for_shape(H, KV, 4, 4);
    const execution_program prog = make_program(p, b, t, o);
    const std::int32_t u = detail::ulysses_degree(o.wire, G);
    INFO("G " << G << " heads " << H << "/" << KV << " Ulysses degree " << u);
    REQUIRE(u > 1);
    for (int pass = 0; pass < 2; ++pass)
      for (rank_index r = 0; r < G; ++r) {
        std::map<std::int32_t, std::pair<int, std::vector<std::int32_t>>> by_tensor;  // tensor -> (ops, heads moved)
        for (const program_segment& seg : prog.passes[pass][static_cast<std::size_t>(r)].segments)
          for (const program_op& op : seg.ops) {
            const head_runs* h = nullptr;
            if (const auto* c = std::get_if<copy_heads>(&op.body)) h = c;
            if (const auto* a = std::get_if<add_heads>(&op.body)) h = a;
            if (!h) continue;
            // between arenas: a tensor's heads of a bundle to or from its lane arena (below)
            if (h->from.where == buffer_ref::space::arena && h->to.where == buffer_ref::space::arena) {
              CHECK(h->moves.size() == 1);
              continue;
            }
            const bool pack = h->from.where == buffer_ref::space::tensor;
            const buffer_ref& tensor = pack ? h->from : h->to;
            REQUIRE(tensor.where == buffer_ref::space::tensor);
            auto& [ops, heads] = by_tensor[tensor.index];
            ++ops;
            for (const head_move& m : h->moves)
              for (std::int32_t x = 0; x < h->heads; ++x) heads.push_back((pack ? m.from_head : m.to_head) + x);
          }
        CHECK(by_tensor.size() == (pass == 0 ? 5u : 9u));  // fwd Q K V out, O LSE home; bwd Q K V O dO LSE out, dQ dK dV home
        for (auto& [tensor, moved] : by_tensor) {
          auto& [ops, heads] = moved;
          INFO("pass " << pass << " rank " << r << " tensor " << tensor);
          CHECK(ops <= 3);
          CHECK(static_cast<std::int32_t>(heads.size()) % u == 0);
          // K/V tensors (k, v, dk, dv): each K/V head once per lane that reads it; query tensors: each head once
          std::sort(heads.begin(), heads.end());
          const bool kv = tensor == static_cast<std::int32_t>(tensor_kind::k) || tensor == static_cast<std::int32_t>(tensor_kind::v) ||
                          tensor == static_cast<std::int32_t>(tensor_kind::dk) || tensor == static_cast<std::int32_t>(tensor_kind::dv);
          // every head of the tensor, each as often as the others: once (query tensors), or
          // once per lane that reads it (K/V heads replicated when lanes outnumber them)
          const std::int32_t all = kv ? KV : H;
          REQUIRE(static_cast<std::int32_t>(heads.size()) % all == 0);
          const std::int32_t times = static_cast<std::int32_t>(heads.size()) / all;
          if (!kv) CHECK(times == 1);
          for (std::int32_t h = 0; h < all; ++h)
            CHECK(std::count(heads.begin(), heads.end(), h) == times);
        }
      }
    // and the engine still computes the dense reference
    random_generator rng(4646);
    const auto data = make_problem<double>(b, attention_dims{.heads = H, .kv_heads = KV, .head_dim = 2}, rng());
    const run_errors e = run_distributed<double>(p, b, t, data, program_options{});
    CHECK(e.out < 1e-10);
    CHECK(e.lse < 1e-10);
    CHECK(e.grad < 1e-10);
  }
}
