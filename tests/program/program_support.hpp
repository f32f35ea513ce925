// tests/program/program_support.hpp
// Oracles for execution programs, independent of any executor:
//   random_case       a seeded plan of any partitioner on a small topology, with random
//                     program options (launches, engine, router, remap, collective flips)
//   symbolic_backend  a driver backend (program/driver.hpp) for ALL ranks that runs the
//                     program on token identities instead of numbers: K/V rows hold the
//                     (sequence, position) of their token, dK/dV rows the token and the
//                     number of (query, key) pairs accumulated into it, O rows the number of
//                     keys merged. It fails (REQUIREs) when a launch reads K/V rows that do not
//                     hold the block's keys, queries rows of other tokens, reads a row never
//                     written, or adds accumulators of different tokens; at the end every
//                     query has met exactly its causal keys once, and every key's dK/dV
//                     returned home with exactly its causal queries.
//   happens_before    the program's stream semantics (stream order, `after` edges) as a
//                     reachability relation per segment, for the hazard test.
#pragma once

#include "exec/plan_support.hpp"

#include <catch2/catch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/program.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <variant>
#include <vector>

namespace zeppelin_test {

using namespace zeppelin;

struct program_case {
  topology topo;
  batch b;
  plan p;
  program_options options;
};

//! A seeded random case: topology 1x1 .. 3x4 (1 or 2 NICs, low latencies so routing splits),
//! any partitioner, random options; sometimes every group's collective flipped.
inline program_case random_case(random_generator& rng) {
  const int nodes = static_cast<int>(rng.between(1, 3)), gpus = static_cast<int>(rng.between(1, 4));
  topology_config c = test_topology(nodes, gpus, gpus >= 2 && rng.below(2) ? 2 : 1).config();
  c.intra_node.latency = 0;
  c.nic.latency = 0;
  topology t(c);
  batch b = random_lengths(rng, t.num_ranks());
  const token_count fair = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks();
  plan p = make_plan(static_cast<int>(rng.below(5)), b, t, rng.below(2) ? fair : fair + fair / 2 + 1);
  if (rng.below(4) == 0)
    for (ring_group& g : p.groups) g.collective = g.collective == collective_kind::ring ? collective_kind::all_gather : collective_kind::ring;
  program_options o;
  o.wire = wire_format::for_shape(2, 1, 3, 8);
  o.launch = rng.below(2) ? launch_policy::fused_round : launch_policy::per_group;
  o.engine = rng.below(2) ? engine_policy::prioritized : engine_policy::in_order;
  if (rng.below(2)) o.router.policy = proxy_router{.fallback_to_direct = rng.below(2) == 0};
  if (rng.below(2)) o.remap = remap_objective::max_send;
  return {std::move(t), std::move(b), std::move(p), o};
}

//! The token at every row of every rank's attention layout: [rank][row] -> (seq, position).
inline std::vector<std::vector<std::pair<sequence_index, token_count>>> attention_tokens(const plan& p) {
  std::vector<std::vector<std::pair<sequence_index, token_count>>> out(static_cast<std::size_t>(p.num_ranks()));
  for (std::size_t r = 0; r < out.size(); ++r)
    for (const shard& s : p.placements[r].shards)
      for (token_count x = s.range.begin; x < s.range.end; ++x) out[r].push_back({s.seq, x});
  return out;
}

//! Runs a program on token identities (see the file comment); one instance per pass.
class symbolic_backend {
 public:
  struct cell {
    sequence_index seq = -1;  //!< -1: never written
    token_count pos = 0;
    std::int64_t pairs = 0;   //!< dK/dV accumulators: pairs added
  };

  symbolic_backend(const execution_program& prog, const plan& p, pass_kind pass) : prog_(prog), pass_(pass) {
    tokens_ = attention_tokens(p);
    const auto R = tokens_.size();
    for (std::size_t r = 0; r < R; ++r) ranks_.push_back(static_cast<rank_index>(r));
    arenas_.resize(R);
    for (std::size_t r = 0; r < R; ++r) {
      for (const arena& a : prog.pass(pass)[r].arenas) arenas_[r].emplace_back(static_cast<std::size_t>(a.rows));
      kv_.push_back(std::vector<cell>(tokens_[r].size()));
      for (std::size_t i = 0; i < tokens_[r].size(); ++i) kv_[r][i] = {tokens_[r][i].first, tokens_[r][i].second, 0};
      // the engines zero the rank's dK / dV accumulators before a backward pass
      dk_.push_back(std::vector<cell>(tokens_[r].size(), cell{-2, 0, 0}));
      dv_.push_back(std::vector<cell>(tokens_[r].size(), cell{-2, 0, 0}));
      keys_seen_.push_back(std::vector<std::int64_t>(tokens_[r].size(), 0));
    }
  }

  [[nodiscard]] std::span<const rank_index> ranks() const noexcept { return ranks_; }
  void begin_segment(std::size_t seg) { seg_ = seg; }
  void end_segment(std::size_t) {}

  void compute(rank_index rank, std::size_t, std::int32_t, const program_op& op) {
    const auto r = static_cast<std::size_t>(rank);
    if (const auto* c = std::get_if<copy_rows>(&op.body)) {
      for (const row_run& x : c->runs)
        for (token_count i = 0; i < x.rows; ++i) {
          const cell v = read(r, c->from, x.from_row + i);
          REQUIRE(v.seq >= 0);  // never copies a row nobody wrote
          write(r, c->to, x.to_row + i) = v;
        }
    } else if (const auto* a = std::get_if<add_rows>(&op.body)) {
      for (const row_run& x : a->runs)
        for (token_count i = 0; i < x.rows; ++i) {
          const cell v = read(r, a->from, x.from_row + i);
          cell& to = write(r, a->to, x.to_row + i);
          REQUIRE(v.seq != -1);  // never adds a row nobody wrote (a zeroed row adds nothing)
          if (v.seq == -2) {
            if (to.seq == -1) to.seq = -2;
            continue;
          }
          if (to.seq < 0) to = {v.seq, v.pos, 0};
          REQUIRE((to.seq == v.seq && to.pos == v.pos));  // one key's gradients only
          to.pairs += v.pairs;
        }
    } else if (const auto* z = std::get_if<zero_rows>(&op.body)) {
      for (token_count i = 0; i < z->rows; ++i) write(r, z->to, z->row + i) = {-2, 0, 0};  // zero: no token yet
    } else if (const auto* l = std::get_if<run_attention>(&op.body)) {
      attention(r, prog_.launches[static_cast<std::size_t>(l->launch)]);
    }
  }

  void exchange(std::int32_t phase, std::span<const rank_index>, std::span<const std::int32_t>) {
    const program_phase& ph = prog_.phases[static_cast<std::size_t>(phase)];
    REQUIRE(ph.pass == pass_);
    // the pieces deliver exactly the payloads: per payload the path ranges tile its bytes
    std::vector<std::int64_t> delivered(ph.payloads.size(), 0);
    for (const transfer& m : ph.pieces)
      if (m.dst == ph.payloads[static_cast<std::size_t>(m.payload)].dst) delivered[static_cast<std::size_t>(m.payload)] += m.bytes;
    for (std::size_t i = 0; i < ph.payloads.size(); ++i) {
      CHECK(delivered[i] == ph.payloads[i].bytes);
      const transfer& x = ph.payloads[i];
      const payload_binding& bnd = ph.bindings[i];
      CHECK(x.bytes == bnd.rows * prog_.wire.row_bytes(bnd.rows_of));
      std::vector<cell> moving;
      for (token_count j = 0; j < bnd.rows; ++j) {
        moving.push_back(read(static_cast<std::size_t>(x.src), bnd.from, bnd.from_row + j));
        REQUIRE(moving.back().seq != -1);  // sends only rows that were written (or zeroed)
      }
      for (token_count j = 0; j < bnd.rows; ++j) write(static_cast<std::size_t>(x.dst), bnd.to, bnd.to_row + j) = moving[static_cast<std::size_t>(j)];
    }
  }

  //! Forward: every query met exactly its causal keys. Backward: every key's dK/dV is home with
  //! exactly its causal queries.
  void check_complete(const batch& b) const {
    for (std::size_t r = 0; r < tokens_.size(); ++r)
      for (std::size_t i = 0; i < tokens_[r].size(); ++i) {
        const auto [seq, pos] = tokens_[r][i];
        INFO("rank " << r << " seq " << seq << " pos " << pos);
        if (pass_ == pass_kind::forward) {
          CHECK(keys_seen_[r][i] == pos + 1);
        } else {
          for (const auto* acc : {&dk_, &dv_}) {
            CHECK((*acc)[r][i].pairs == b.length(seq) - pos);
            CHECK(((*acc)[r][i].seq == seq && (*acc)[r][i].pos == pos));
          }
        }
      }
  }

 private:
  std::vector<cell>& buffer(std::size_t r, const buffer_ref& b) {
    if (b.where == buffer_ref::space::arena) return arenas_[r].at(static_cast<std::size_t>(b.index));
    if (b.is(tensor_kind::k) || b.is(tensor_kind::v)) return kv_[r];
    if (b.is(tensor_kind::dk)) return dk_[r];
    if (b.is(tensor_kind::dv)) return dv_[r];
    return remap_;  // remap tensors: not modelled here (the remap is tested on numbers)
  }
  cell read(std::size_t r, const buffer_ref& b, token_count row) {
    auto& buf = buffer(r, b);
    REQUIRE((row >= 0 && static_cast<std::size_t>(row) < buf.size()));
    return buf[static_cast<std::size_t>(row)];
  }
  cell& write(std::size_t r, const buffer_ref& b, token_count row) {
    REQUIRE_FALSE((b.is(tensor_kind::k) || b.is(tensor_kind::v)));
    auto& buf = buffer(r, b);
    REQUIRE((row >= 0 && static_cast<std::size_t>(row) < buf.size()));
    return buf[static_cast<std::size_t>(row)];
  }
  void attention(std::size_t r, const program_launch& l) {
    REQUIRE(l.rank == static_cast<rank_index>(r));
    REQUIRE(l.pass == pass_);
    REQUIRE(!l.blocks.empty());
    for (std::size_t i = 0; i < l.blocks.size(); ++i) {
      const attention_block& blk = l.blocks[i];
      if (i > 0) {  // the CSR form: ascending, disjoint query and key rows
        CHECK(l.blocks[i - 1].q_row + l.blocks[i - 1].q.size() <= blk.q_row);
        CHECK(l.blocks[i - 1].kv_row + l.blocks[i - 1].k.size() <= blk.kv_row);
      }
      CHECK(classify_block(blk.q, blk.k) == blk.mask);
      for (token_count x = 0; x < blk.q.size(); ++x) {
        const auto row = static_cast<std::size_t>(blk.q_row + x);
        REQUIRE(row < tokens_[r].size());
        REQUIRE(tokens_[r][row] == std::pair{blk.seq, blk.q.begin + x});
      }
      for (token_count y = 0; y < blk.k.size(); ++y) {
        const cell kc = read(r, l.k, blk.kv_row + y), vc = read(r, l.v, blk.kv_row + y);
        INFO("rank " << r << " launch level " << l.level << " round " << l.round << " key row " << blk.kv_row + y);
        REQUIRE((kc.seq == blk.seq && kc.pos == blk.k.begin + y));
        REQUIRE((vc.seq == blk.seq && vc.pos == blk.k.begin + y));
        // queries of the block that see this key
        const token_count key = blk.k.begin + y;
        std::int64_t seen = 0;
        for (token_count x = 0; x < blk.q.size(); ++x) seen += blk.mask == block_mask::full || key <= blk.q.begin + x;
        if (pass_ == pass_kind::backward)
          for (const buffer_ref* acc : {&l.dk, &l.dv}) {
            cell& d = write(r, *acc, blk.kv_row + y);
            REQUIRE(d.seq != -1);  // accumulators are zeroed (or hold this key) before a launch adds
            if (d.seq == -2) d = {blk.seq, key, 0};
            REQUIRE((d.seq == blk.seq && d.pos == key));
            d.pairs += seen;
          }
      }
      if (pass_ == pass_kind::forward)
        for (token_count x = 0; x < blk.q.size(); ++x) {
          std::int64_t n = 0;
          for (token_count y = 0; y < blk.k.size(); ++y) n += blk.mask == block_mask::full || blk.k.begin + y <= blk.q.begin + x;
          keys_seen_[r][static_cast<std::size_t>(blk.q_row + x)] += n;
        }
    }
  }

  const execution_program& prog_;
  pass_kind pass_;
  std::size_t seg_ = 0;
  std::vector<rank_index> ranks_;
  std::vector<std::vector<std::pair<sequence_index, token_count>>> tokens_;
  std::vector<std::vector<std::vector<cell>>> arenas_;  //!< [rank][arena][row]
  std::vector<std::vector<cell>> kv_, dk_, dv_;         //!< [rank][row]
  std::vector<std::vector<std::int64_t>> keys_seen_;    //!< forward: [rank][row] keys merged
  std::vector<cell> remap_;
};

//! hb[i][j]: op i of a segment happens before op j on the program's streams (stream order,
//! `after` edges, transitively).
inline std::vector<std::vector<char>> happens_before(const std::vector<program_op>& ops) {
  const std::size_t n = ops.size();
  std::vector<std::vector<char>> hb(n, std::vector<char>(n, 0));
  std::map<std::int32_t, std::int32_t> last;  // stream -> last op
  for (std::size_t j = 0; j < n; ++j) {
    std::vector<std::int32_t> preds(ops[j].after.begin(), ops[j].after.end());
    const auto it = last.find(ops[j].stream);
    if (it != last.end()) preds.push_back(it->second);
    for (const std::int32_t i : preds) {
      REQUIRE((i >= 0 && static_cast<std::size_t>(i) < j));
      hb[static_cast<std::size_t>(i)][j] = 1;
      for (std::size_t k = 0; k < j; ++k)
        if (hb[k][static_cast<std::size_t>(i)]) hb[k][j] = 1;
    }
    last[ops[j].stream] = static_cast<std::int32_t>(j);
  }
  return hb;
}

}  // namespace zeppelin_test
