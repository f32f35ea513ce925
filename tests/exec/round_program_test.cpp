// The round program (exec/round_program.hpp) both attention engines execute: on random plans of
// every partitioner, its blocks cover every causal pair of the batch exactly once per pass,
// query rows land on the rank rows of the right tokens, its transfers move the KV each member
// computes with next round (a replay of the phases), dK/dV returns to its owner, and the
// all-gather phases connect every ordered pair of members once.
#include <catch2/catch.hpp>

#include "plan_support.hpp"

#include <zeppelin/exec/round_program.hpp>

#include <cstddef>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

using namespace zeppelin;
using namespace zeppelin_test;

namespace {

// (seq, q pos, k pos) -> times computed, over the blocks of one pass of every rank
using pair_count = std::map<std::tuple<sequence_index, token_count, token_count>, int>;

void count_pairs(const attention_block& blk, pair_count& out) {
  for (token_count q = blk.q.begin; q < blk.q.end; ++q)
    for (token_count k = blk.k.begin; k < blk.k.end; ++k)
      if (blk.mask == block_mask::full || k <= q) ++out[{blk.seq, q, k}];
}

bool every_causal_pair_once(const pair_count& pairs, const batch& b) {
  std::size_t expected = 0;
  for (sequence_index s = 0; s < b.size(); ++s)
    for (token_count q = 0; q < b.length(s); ++q)
      for (token_count k = 0; k <= q; ++k, ++expected) {
        const auto it = pairs.find({s, q, k});
        if (it == pairs.end() || it->second != 1) return false;
      }
  return pairs.size() == expected;
}

// the token (seq, position) at row `row` of rank r
std::pair<sequence_index, token_count> token_at(const plan& p, const round_program& x, rank_index r, token_count row) {
  const auto& shards = p.placements[static_cast<std::size_t>(r)].shards;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const token_count first = x.shard_row[static_cast<std::size_t>(r)][i];
    if (row >= first && row < first + shards[i].range.size()) return {shards[i].seq, shards[i].range.begin + (row - first)};
  }
  return {-1, -1};
}

}  // namespace

TEST_CASE("round program: every causal pair once per pass, query rows on the right tokens", "[exec]") {
  random_generator rng(11);
  int plans = 0;
  for (const auto& [nodes, gpus] : std::vector<std::pair<int, int>>{{1, 1}, {1, 3}, {2, 2}, {3, 2}, {2, 4}}) {
    const topology t = test_topology(nodes, gpus);
    for (int trial = 0; trial < 10; ++trial) {
      const batch b = random_lengths(rng, t.num_ranks());
      const plan p = make_plan(trial % 5, b, t, rng.below(2) ? (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks() : b.max_length());
      INFO("method " << p.method << " topology " << nodes << "x" << gpus << " micro-batches " << p.micro_batches());
      for (const kv_exchange mode : {kv_exchange::ring, kv_exchange::all_gather}) {
        const round_program x = make_round_program(p, b, mode);
        CHECK(x.all_gather == (mode == kv_exchange::all_gather));
        pair_count fwd, bwd;
        bool rows_ok = true;
        const auto check_rows = [&](rank_index r, const attention_block& blk) {
          const auto first = token_at(p, x, r, blk.q_row);
          const auto last = token_at(p, x, r, blk.q_row + blk.q.size() - 1);
          rows_ok = rows_ok && first == std::pair{blk.seq, blk.q.begin} && last == std::pair{blk.seq, blk.q.end - 1};
        };
        for (const round_level& lv : x.levels)
          for (rank_index r = 0; r < p.num_ranks(); ++r)
            for (const level_member& m : lv.members[static_cast<std::size_t>(r)]) {
              for (const member_round& st : m.forward)
                for (const attention_block& blk : st.blocks) count_pairs(blk, fwd), check_rows(r, blk);
              for (const member_round& st : m.backward)
                for (const attention_block& blk : st.blocks) count_pairs(blk, bwd), check_rows(r, blk);
            }
        for (rank_index r = 0; r < p.num_ranks(); ++r)
          for (const auto& blocks : x.local[static_cast<std::size_t>(r)])
            for (const attention_block& blk : blocks) {
              count_pairs(blk, fwd), count_pairs(blk, bwd), check_rows(r, blk);
              rows_ok = rows_ok && token_at(p, x, r, blk.kv_row) == std::pair{blk.seq, blk.k.begin};
            }
        CHECK(every_causal_pair_once(fwd, b));
        CHECK(every_causal_pair_once(bwd, b));
        CHECK(rows_ok);
        ++plans;
      }
    }
  }
  CHECK(plans == 100);
}

TEST_CASE("round program: replaying the ring phases delivers the KV every member computes with", "[exec]") {
  random_generator rng(5);
  for (const auto& [nodes, gpus] : std::vector<std::pair<int, int>>{{1, 4}, {2, 2}, {2, 4}, {4, 4}}) {
    const topology t = test_topology(nodes, gpus);
    for (int method = 0; method < 5; ++method) {
      const batch b = random_lengths(rng, t.num_ranks());
      const plan p = make_plan(method, b, t, (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks());
      const round_program x = make_round_program(p, b, kv_exchange::ring);
      INFO("method " << p.method << " topology " << nodes << "x" << gpus);
      for (const round_level& lv : x.levels) {
        CHECK(lv.forward_rounds.size() == static_cast<std::size_t>(lv.rounds));
        for (const bool backward : {false, true}) {
          // held[(rank, group)] = origin of the KV the member holds
          std::map<std::pair<rank_index, std::int32_t>, std::int32_t> held, next;
          for (rank_index r = 0; r < p.num_ranks(); ++r)
            for (const level_member& m : lv.members[static_cast<std::size_t>(r)]) held[{r, m.group}] = m.pos;
          for (std::int32_t k = 0; k < lv.rounds; ++k) {
            next = held;
            for (const round_transfer& tr : (backward ? lv.backward_rounds : lv.forward_rounds)[static_cast<std::size_t>(k)]) {
              const ring_schedule& s = x.schedules[lv.schedules[static_cast<std::size_t>(tr.group)]];
              CHECK(s.ranks[static_cast<std::size_t>(tr.src_pos)] == tr.src);
              CHECK(s.ranks[static_cast<std::size_t>(tr.dst_pos)] == tr.dst);
              CHECK(tr.tokens == s.buffer_tokens[static_cast<std::size_t>(tr.origin)]);
              if (tr.payload != round_payload::kv) continue;
              CHECK(held.at({tr.src, tr.group}) == tr.origin);  // a member sends the KV it holds
              next[{tr.dst, tr.group}] = tr.origin;
            }
            for (rank_index r = 0; r < p.num_ranks(); ++r)
              for (const level_member& m : lv.members[static_cast<std::size_t>(r)]) {
                const auto& steps = backward ? m.backward : m.forward;
                if (k >= static_cast<std::int32_t>(steps.size())) continue;
                CHECK(steps[static_cast<std::size_t>(k)].kv_origin == held.at({r, m.group}));
              }
            held = next;
          }
        }
        for (const round_transfer& tr : lv.dkv_return) {
          CHECK(tr.payload == round_payload::dkv);
          CHECK(tr.dst_pos == tr.origin);  // the complete dK/dV of a position goes to it
        }
      }
    }
  }
}

TEST_CASE("round program: all-gather phases connect every ordered pair of members once", "[exec]") {
  const topology t = test_topology(2, 4);
  const batch b({40, 9, 3});
  const plan p = make_plan(2, b, t, b.total_tokens());  // allgather: rings of every sequence
  const round_program x = make_round_program(p, b);
  REQUIRE(x.all_gather);
  for (const round_level& lv : x.levels)
    for (std::size_t gi = 0; gi < lv.schedules.size(); ++gi) {
      const ring_schedule& s = x.schedules[lv.schedules[gi]];
      std::map<std::pair<std::int32_t, std::int32_t>, int> gather, reduce;
      for (const round_transfer& tr : lv.kv_gather)
        if (tr.group == static_cast<std::int32_t>(gi)) {
          ++gather[{tr.src_pos, tr.dst_pos}];
          CHECK(tr.origin == tr.src_pos);
          CHECK(tr.tokens == s.buffer_tokens[static_cast<std::size_t>(tr.src_pos)]);
        }
      for (const round_transfer& tr : lv.dkv_reduce)
        if (tr.group == static_cast<std::int32_t>(gi)) {
          ++reduce[{tr.src_pos, tr.dst_pos}];
          CHECK(tr.origin == tr.dst_pos);
          CHECK(tr.payload == round_payload::dkv);
        }
      const auto G = static_cast<std::size_t>(s.size());
      CHECK(gather.size() == G * (G - 1));
      CHECK(reduce.size() == G * (G - 1));
      for (const auto& [pair, n] : gather) CHECK((n == 1 && pair.first != pair.second));
    }
}

TEST_CASE("bind_phase sizes every transfer and binds only the calling rank's buffers", "[exec]") {
  const topology t = test_topology(1, 4);
  const batch b({13, 6});
  const plan p = make_plan(1, b, t, b.total_tokens());
  const round_program x = make_round_program(p, b, kv_exchange::ring);
  REQUIRE(!x.levels.empty());
  const round_level& lv = x.levels.front();
  REQUIRE(lv.rounds > 1);
  std::vector<std::byte> buf(1 << 16);
  for (rank_index me = 0; me < p.num_ranks(); ++me) {
    bound_phase bp;
    int sends = 0, recvs = 0;
    bind_phase(
        bp, lv, me, std::span<const round_transfer>(lv.backward_rounds[1]), 3, 5,
        [&](const level_member& m, const round_transfer& tr) {
          CHECK(m.pos == tr.src_pos);
          ++sends;
          return std::span<const std::byte>(buf.data(), static_cast<std::size_t>(tr.tokens * (tr.payload == round_payload::kv ? 3 : 5)));
        },
        [&](const level_member& m, const round_transfer& tr) {
          CHECK(m.pos == tr.dst_pos);
          ++recvs;
          return std::span<std::byte>(buf.data(), static_cast<std::size_t>(tr.tokens * (tr.payload == round_payload::kv ? 3 : 5)));
        });
    REQUIRE(bp.all.size() == lv.backward_rounds[1].size());
    int mine_out = 0, mine_in = 0;
    for (std::size_t i = 0; i < bp.all.size(); ++i) {
      const round_transfer& tr = lv.backward_rounds[1][i];
      CHECK(bp.all[i] == transfer{tr.src, tr.dst, tr.tokens * (tr.payload == round_payload::kv ? 3 : 5)});
      CHECK(bp.send[i].empty() == (tr.src != me || tr.tokens == 0));
      CHECK(bp.recv[i].empty() == (tr.dst != me || tr.tokens == 0));
      mine_out += tr.src == me, mine_in += tr.dst == me;
    }
    CHECK(sends == mine_out);
    CHECK(recvs == mine_in);
    CHECK(mine_out == 2);  // KV and the finished dK/dV of round 0
  }
}
