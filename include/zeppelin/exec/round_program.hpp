// zeppelin/exec/round_program.hpp
// The round program of the attention engines: the plan's ring schedules unrolled ONCE, on the
// host, into the ordered phases every rank executes and the work each rank does in them. The
// host engine (exec/attention_engine.hpp) and the CUDA engine (cuda/executor/attention_engine.hpp)
// both execute it; they differ only in buffers (host vectors / device memory) and in how a
// phase overlaps with the compute.
//   in : plan and batch (the same on every rank), how KV is exchanged (kv_exchange)
//   out: round_program, plain data:
//        rows[r], shard_row[r][i]   the rank's buffers: its shards concatenated in placement order
//        schedules                  one ring_schedule per (group of zone intra/inter, micro-batch)
//        levels                     in execution order: (micro-batch, inter before intra); each
//                                   holds its schedules (by group id), its phases (the SAME
//                                   transfer list on every rank) and, per rank, its members
//        local[r][mb]               the blocks of rank r's local queue (sequences it holds alone)
// Phases of a level, transfers in the order the engines post them (group order, then ring
// position; in a backward round a position's KV before its dK/dV):
//   ring        forward_rounds[k]: KV(origin) along the ring (schedule forward[k][p].send_kv);
//               backward_rounds[k]: KV and the finished dK/dV accumulator along the reversed
//               ring (backward[k][p].send_kv, send_dkv); dkv_return: the last accumulators home
//   all-gather  kv_gather: every member's KV to every other member (source, then destination
//               position); dkv_reduce: every partial dK/dV of origin d to its owner d
// A member (a rank's position in one group of the level) lists, per round, the origin of the
// KV it holds and its blocks with query rows ALREADY in the rank's rows (key rows stay in the
// held group buffer), and the row runs that gather its KV group buffer / scatter its dK/dV.
// The all-gather executes every round's forward blocks in both passes (its members hold every
// origin). nvcc-safe (no range-v3); host code.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/exec/transport.hpp>
#include <zeppelin/schedule/engine_queue.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! How a ring group's KV reaches its members.
enum class kv_exchange : std::uint8_t {
  automatic = 0,   //!< all_gather for plans of method "allgather", ring otherwise
  ring = 1,        //!< G rounds of point-to-point KV passing (TE CP "P2P")
  all_gather = 2,  //!< one all-gather of KV, one reduce of dK/dV (LLaMA-3 CP)
};

//! What a phase transfer carries: a KV group buffer or a dK/dV (accumulator) group buffer.
enum class round_payload : std::uint8_t { kv = 0, dkv = 1 };

//! One transfer of a phase: `tokens` rows of the group buffer of ring position `origin`.
struct round_transfer {
  std::int32_t group = 0;    //!< index into round_level::schedules
  std::int32_t src_pos = 0;  //!< ring position of the sender
  std::int32_t dst_pos = 0;  //!< ring position of the receiver
  rank_index src = 0;
  rank_index dst = 0;
  std::int32_t origin = 0;   //!< position whose KV / dK/dV the buffer belongs to
  token_count tokens = 0;
  round_payload payload = round_payload::kv;
  friend constexpr bool operator==(const round_transfer&, const round_transfer&) = default;
};

//! Rows [buffer_row, buffer_row + rows) of a group buffer are the rank's rows
//! [rank_row, rank_row + rows) (one shard).
struct row_run {
  token_count rank_row = 0;
  token_count buffer_row = 0;
  token_count rows = 0;
  friend constexpr bool operator==(const row_run&, const row_run&) = default;
};

//! What a member computes in one round.
struct member_round {
  std::int32_t kv_origin = 0;  //!< ring position whose KV (and, backward, dK/dV accumulator) is held
  token_count kv_rows = 0;     //!< rows of that group buffer
  bool receives_dkv = false;   //!< backward: the partial dK/dV of kv_origin arrives in this round's phase
  std::vector<attention_block> blocks;  //!< q_row in the RANK's rows, kv_row in the held buffer
  friend bool operator==(const member_round&, const member_round&) = default;
};

//! A rank's position in one group of a level.
struct level_member {
  std::int32_t group = 0;        //!< index into round_level::schedules
  std::int32_t pos = 0;          //!< ring position
  std::int32_t size = 1;         //!< ring size G
  token_count own_rows = 0;      //!< rows of its own group buffer
  token_count max_rows = 0;      //!< rows of the group's largest buffer
  std::vector<row_run> shards;   //!< its group buffer in the rank's rows
  std::vector<member_round> forward, backward;  //!< [round] (backward: ring exchange only)
  friend bool operator==(const level_member&, const level_member&) = default;
};

//! The groups of one zone of one micro-batch, advancing round by round together.
struct round_level {
  std::int32_t micro_batch = 0;
  zone_kind zone = zone_kind::local;
  std::int32_t rounds = 0;                  //!< the largest ring of the level
  std::vector<std::size_t> schedules;       //!< into round_program::schedules, by group id
  std::vector<std::vector<round_transfer>> forward_rounds, backward_rounds;  //!< ring: [round]
  std::vector<round_transfer> dkv_return;   //!< ring
  std::vector<round_transfer> kv_gather, dkv_reduce;  //!< all-gather
  std::vector<std::vector<level_member>> members;     //!< [rank]

  //! The member of rank r in group `group`, or nullptr.
  [[nodiscard]] const level_member* member(rank_index r, std::int32_t group) const noexcept {
    for (const level_member& m : members[static_cast<std::size_t>(r)])
      if (m.group == group) return &m;
    return nullptr;
  }
  friend bool operator==(const round_level&, const round_level&) = default;
};

//! Every phase and every block of both attention passes of a plan (see the file comment).
struct round_program {
  bool all_gather = false;
  std::int32_t micro_batches = 1;
  std::vector<token_count> rows;                    //!< [rank]
  std::vector<std::vector<token_count>> shard_row;  //!< [rank][shard]
  std::vector<ring_schedule> schedules;
  std::vector<round_level> levels;
  std::vector<std::vector<std::vector<attention_block>>> local;  //!< [rank][micro-batch]
  friend bool operator==(const round_program&, const round_program&) = default;
};

//! The label of a level's phases in communicator errors: "<pass> micro-batch <mb> <zone> queue".
[[nodiscard]] inline std::string level_label(const round_level& lv, bool backward) {
  return std::string(backward ? "backward" : "forward") + " micro-batch " + std::to_string(lv.micro_batch) + " " +
         std::string(to_string(lv.zone)) + " queue";
}

//! The round program of `p` over `b`. Throws invalid_argument when a shard does not fit the
//! batch or a ring schedule rejects the plan (schedule/ring_schedule.hpp).
[[nodiscard]] inline round_program make_round_program(const plan& p, const batch& b,
                                                      kv_exchange exchange = kv_exchange::automatic) {
  using std::size_t;
  round_program out;
  out.all_gather = exchange == kv_exchange::all_gather || (exchange == kv_exchange::automatic && p.method == "allgather");
  out.micro_batches = std::max(1, p.micro_batches());
  const auto R = static_cast<size_t>(p.num_ranks());
  out.shard_row.resize(R);
  out.rows.assign(R, 0);
  for (size_t r = 0; r < R; ++r)
    for (const shard& s : p.placements[r].shards) {
      ZEPPELIN_EXPECTS(s.seq >= 0 && s.seq < b.size() && s.range.begin >= 0 && s.range.end <= b.length(s.seq) &&
                           !s.range.empty(),
                       "attention engine: a shard does not fit the batch",
                       {{"rank", double(r)}, {"seq", double(s.seq)}, {"begin", double(s.range.begin)},
                        {"end", double(s.range.end)}});
      out.shard_row[r].push_back(out.rows[r]);
      out.rows[r] += s.range.size();
    }

  // one schedule per (group of zone intra/inter, micro-batch) that has shards
  std::vector<std::pair<std::int32_t, group_index>> keys;
  for (const auto& pl : p.placements)
    for (const shard& s : pl.shards)
      if (s.group != no_group && p.groups.at(static_cast<size_t>(s.group)).zone != zone_kind::local)
        keys.emplace_back(s.micro_batch, s.group);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  for (const auto& [mb, g] : keys) out.schedules.push_back(make_ring_schedule(p, b, g, mb));

  // levels: (micro-batch, inter before intra), schedules by group id
  std::vector<size_t> order(out.schedules.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const auto& a = out.schedules[x];
    const auto& c = out.schedules[y];
    return std::tuple(a.micro_batch, queue_order(a.zone), a.group) < std::tuple(c.micro_batch, queue_order(c.zone), c.group);
  });
  for (const size_t i : order) {
    const auto& s = out.schedules[i];
    if (out.levels.empty() || out.levels.back().micro_batch != s.micro_batch || out.levels.back().zone != s.zone) {
      out.levels.emplace_back();
      out.levels.back().micro_batch = s.micro_batch;
      out.levels.back().zone = s.zone;
      out.levels.back().members.resize(R);
    }
    out.levels.back().schedules.push_back(i);
    out.levels.back().rounds = std::max(out.levels.back().rounds, s.rounds());
  }

  const auto position_of = [](const ring_schedule& s, rank_index r) {
    for (std::int32_t q = 0; q < s.size(); ++q)
      if (s.ranks[static_cast<size_t>(q)] == r) return q;
    ZEPPELIN_THROW(invalid_argument, "round program: a ring transfer leaves its group", {{"rank", double(r)}});
  };
  for (round_level& lv : out.levels) {
    lv.forward_rounds.resize(static_cast<size_t>(lv.rounds));
    lv.backward_rounds.resize(static_cast<size_t>(lv.rounds));
    for (size_t gi = 0; gi < lv.schedules.size(); ++gi) {
      const ring_schedule& s = out.schedules[lv.schedules[gi]];
      const auto group = static_cast<std::int32_t>(gi);
      const auto add = [&](std::vector<round_transfer>& phase, std::int32_t pos, const ring_transfer& x, round_payload what) {
        if (x.active())
          phase.push_back({group, pos, position_of(s, x.peer), s.ranks[static_cast<size_t>(pos)], x.peer, x.origin, x.tokens, what});
      };
      for (std::int32_t k = 0; k < s.rounds(); ++k)
        for (std::int32_t q = 0; q < s.size(); ++q) {
          const auto& fs = s.forward[static_cast<size_t>(k)][static_cast<size_t>(q)];
          const auto& bs = s.backward[static_cast<size_t>(k)][static_cast<size_t>(q)];
          add(lv.forward_rounds[static_cast<size_t>(k)], q, fs.send_kv, round_payload::kv);
          add(lv.backward_rounds[static_cast<size_t>(k)], q, bs.send_kv, round_payload::kv);
          add(lv.backward_rounds[static_cast<size_t>(k)], q, bs.send_dkv, round_payload::dkv);
        }
      for (std::int32_t q = 0; q < s.size(); ++q) add(lv.dkv_return, q, s.dkv_home[static_cast<size_t>(q)].send_dkv, round_payload::dkv);
      for (std::int32_t q = 0; q < s.size(); ++q)
        for (std::int32_t d = 0; d < s.size(); ++d)
          if (d != q) {
            const rank_index src = s.ranks[static_cast<size_t>(q)], dst = s.ranks[static_cast<size_t>(d)];
            lv.kv_gather.push_back({group, q, d, src, dst, q, s.buffer_tokens[static_cast<size_t>(q)], round_payload::kv});
            lv.dkv_reduce.push_back({group, q, d, src, dst, d, s.buffer_tokens[static_cast<size_t>(d)], round_payload::dkv});
          }

      // the members: blocks with query rows in the rank's rows
      for (std::int32_t pos = 0; pos < s.size(); ++pos) {
        const rank_index r = s.ranks[static_cast<size_t>(pos)];
        level_member m;
        m.group = group;
        m.pos = pos;
        m.size = s.size();
        m.own_rows = s.buffer_tokens[static_cast<size_t>(pos)];
        m.max_rows = *std::max_element(s.buffer_tokens.begin(), s.buffer_tokens.end());
        for (const group_shard& g : s.layout[static_cast<size_t>(pos)])
          m.shards.push_back({out.shard_row[static_cast<size_t>(r)][static_cast<size_t>(g.shard)], g.row, g.range.size()});
        const auto rank_rows = [&](std::vector<attention_block> blocks) {
          for (attention_block& blk : blocks) {
            const auto it = std::find_if(m.shards.begin(), m.shards.end(), [&](const row_run& x) {
              return blk.q_row >= x.buffer_row && blk.q_row < x.buffer_row + x.rows;
            });
            ZEPPELIN_EXPECTS(it != m.shards.end(), "round program: a block row outside the group buffer",
                             {{"row", double(blk.q_row)}, {"rows", double(m.own_rows)}});
            blk.q_row = it->rank_row + (blk.q_row - it->buffer_row);
          }
          return blocks;
        };
        for (std::int32_t k = 0; k < s.rounds(); ++k) {
          const auto& fs = s.forward[static_cast<size_t>(k)][static_cast<size_t>(pos)];
          const auto& bs = s.backward[static_cast<size_t>(k)][static_cast<size_t>(pos)];
          m.forward.push_back({fs.kv_origin, s.buffer_tokens[static_cast<size_t>(fs.kv_origin)], false, rank_rows(fs.blocks)});
          m.backward.push_back(
              {bs.kv_origin, s.buffer_tokens[static_cast<size_t>(bs.kv_origin)], bs.recv_dkv.active(), rank_rows(bs.blocks)});
        }
        lv.members[static_cast<size_t>(r)].push_back(std::move(m));
      }
    }
  }

  // local queues: every block of the sequences a rank holds alone, per micro-batch, task order
  out.local.resize(R);
  for (size_t r = 0; r < R; ++r) {
    out.local[r].resize(static_cast<size_t>(out.micro_batches));
    const auto& shards = p.placements[r].shards;
    for (const engine_task& task : make_engine_queue(p, static_cast<rank_index>(r)).tasks) {
      if (task.zone != zone_kind::local) continue;
      auto& blocks = out.local[r].at(static_cast<size_t>(task.micro_batch));
      for (const std::int32_t qi : task.shards)
        for (const std::int32_t ki : task.shards) {
          const shard& qs = shards[static_cast<size_t>(qi)];
          const shard& ks = shards[static_cast<size_t>(ki)];
          append_blocks(group_shard{qs.seq, qs.range, qi, out.shard_row[r][static_cast<size_t>(qi)]},
                        group_shard{ks.seq, ks.range, ki, out.shard_row[r][static_cast<size_t>(ki)]}, blocks);
        }
    }
  }
  return out;
}

//! One phase bound to the calling rank's buffers: the transfer list a transport takes
//! (exec/transport.hpp) and this rank's send / receive spans.
struct bound_phase {
  std::vector<transfer> all;
  std::vector<std::span<const std::byte>> send;
  std::vector<std::span<std::byte>> recv;
};

//! Binds `phase` of level `lv` for rank `me`: transfer i moves tokens * kv_token_bytes (KV)
//! or tokens * dkv_token_bytes (dK/dV) bytes; send_of(member, transfer) gives the payload when
//! this rank sends it, recv_of(member, transfer) the destination when it receives it (member:
//! this rank's level_member of the transfer's group). Spans of other ranks' transfers are empty.
template <class SendOf, class RecvOf>
void bind_phase(bound_phase& out, const round_level& lv, rank_index me, std::span<const round_transfer> phase,
                std::int64_t kv_token_bytes, std::int64_t dkv_token_bytes, SendOf&& send_of, RecvOf&& recv_of) {
  out.all.clear(), out.send.clear(), out.recv.clear();
  for (const round_transfer& x : phase) {
    const std::int64_t per_token = x.payload == round_payload::kv ? kv_token_bytes : dkv_token_bytes;
    out.all.push_back({x.src, x.dst, x.tokens * per_token});
    const level_member* m = x.src == me || x.dst == me ? lv.member(me, x.group) : nullptr;
    out.send.push_back(m && x.src == me ? std::span<const std::byte>(send_of(*m, x)) : std::span<const std::byte>{});
    out.recv.push_back(m && x.dst == me ? std::span<std::byte>(recv_of(*m, x)) : std::span<std::byte>{});
  }
}

ZEPPELIN_NAMESPACE_END
