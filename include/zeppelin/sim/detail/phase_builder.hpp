// zeppelin/sim/detail/phase_builder.hpp
// Turns one micro-batch of a plan into the task DAG of a forward or a backward phase
// (sim/event_engine.hpp), layer after layer. See sim/simulate.hpp for the model; this file
// holds the per-micro-batch layout (mb_layout) and the builder.
// Routing: every transfer of a phase is a ring_edge (route/message.hpp) of a routing round:
//   round k of the rings  the K/V (and, backward, dK/dV) sends of ring round k of EVERY ring
//                         group, or step k of the all-gather; the last dK/dV going home is
//                         round G of its group (groups start together with the layer, so
//                         these sends are posted at about the same time);
//   reduce-scatter step k (all-gather backward), remap to / from the attention layout.
// Each round goes through the router of sim_options (its proxy_router when routing is on,
// else direct_router) once per phase (layers are identical); the messages of an edge become
// engine flows: a direct message after the edge's dependencies, and per routed piece
// dispatch -> transfer -> combine (a transfer waits for the dispatch that filled its send
// proxy, a combine for the transfer that reached its receive proxy). The edge has arrived
// when every message ending at its destination has.
// Launches (sim_options::launch): per_group builds the ring groups one after another; round
// k of group g on position p is one compute task, after that group's K/V arrived, priced
// over its own blocks. fused_round builds the groups of one queue (inter-node, then
// intra-node) round by round together; round k of the queue on rank r is ONE compute task
// over the blocks of round k of every group of the queue r belongs to (mb_layout::queues
// prices it), after all their K/V arrived; backward, its end is each group's "block done"
// for the dK/dV that follow. The transfers are the same under both. Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cost/linear_flops.hpp>
#include <zeppelin/cost/link_model.hpp>
#include <zeppelin/cost/transfer_bytes.hpp>
#include <zeppelin/remap/exact.hpp>
#include <zeppelin/remap/problem.hpp>
#include <zeppelin/route/direct.hpp>
#include <zeppelin/route/message.hpp>
#include <zeppelin/route/proxy.hpp>
#include <zeppelin/schedule/block_mask.hpp>
#include <zeppelin/schedule/engine_queue.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>
#include <zeppelin/sim/cost_model.hpp>
#include <zeppelin/sim/detail/attention_call.hpp>
#include <zeppelin/sim/event_engine.hpp>
#include <zeppelin/sim/options.hpp>
#include <zeppelin/sim/tensor_parallel.hpp>

#include <algorithm>
#include <cmath>
#include <compare>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! A ring group of one micro-batch with its schedule and the price of every call.
struct priced_ring {
  ring_schedule schedule;
  std::vector<std::vector<call_cost>> round_cost;  //!< [forward round k][position]
  std::vector<call_cost> gathered_cost;            //!< all-gather: one call per position
};

//! The ring groups of one queue and, under launch_policy::fused_round, the price of every
//! fused launch (the union of the blocks of round k of the rank's groups in the queue).
struct queue_rings {
  int queue = 0;                                  //!< queue_order of the groups' zone
  std::size_t first = 0, last = 0;                //!< mb_layout::rings[first, last)
  std::int64_t rounds = 0;                        //!< the most rounds of its groups
  std::vector<std::vector<call_cost>> forward;    //!< [round k][rank]: forward round k (fused_round)
  std::vector<std::vector<call_cost>> backward;   //!< [round k][rank]: backward round k (fused_round)
  std::vector<call_cost> gathered;                //!< [rank]: all-gather, every group's K/V (fused_round)
};

//! Everything about one micro-batch that does not depend on the direction.
struct mb_layout {
  std::int32_t micro_batch = 0;
  std::vector<priced_ring> rings;           //!< inter first, then intra, by group id
  std::vector<queue_rings> queues;          //!< the rings by queue, in queue order
  std::vector<call_cost> local_cost;        //!< per rank: its one call over its local sequences
  std::vector<token_count> attention_tokens;  //!< A_r
  std::vector<token_count> linear_tokens;     //!< B_r with remap, else A_r
  std::vector<remap_transfer> remap;          //!< A -> B transfers (empty without remap)
};

inline std::int64_t priority_key(int queue, std::int64_t group, std::int64_t round) {
  return (static_cast<std::int64_t>(queue) << 40) | (group << 20) | round;
}

//! The fused launches of queue `q` (launch_policy::fused_round): per round k and rank, the
//! blocks of round k of every group of the queue the rank is a member of, each group a part
//! of its own (its blocks keep their tile padding); backward round k holds the blocks of
//! forward round (G - k) mod G of each group (schedule/ring_schedule.hpp).
inline void price_fused(queue_rings& q, const std::vector<priced_ring>& rings, std::size_t R, const sim_cost_model& cost,
                        const model_config& m) {
  std::vector<std::vector<call_item>> per_rank(R);
  const auto price_all = [&](std::vector<call_cost>& out) {
    out.assign(R, {});
    for (std::size_t r = 0; r < R; ++r) {
      out[r] = price_call(per_rank[r], cost.attention, m.heads, m.head_dim);
      per_rank[r].clear();
    }
  };
  const auto add_blocks = [&](std::size_t i, std::int64_t pos, const std::vector<attention_block>& blocks) {
    const ring_schedule& s = rings[i].schedule;
    auto& out = per_rank[static_cast<std::size_t>(s.ranks[static_cast<std::size_t>(pos)])];
    for (const attention_block& blk : blocks)
      out.push_back({static_cast<std::int32_t>(i), blk.seq, blk.q, block_pairs(blk.q, blk.k, blk.mask)});
  };
  q.forward.resize(static_cast<std::size_t>(q.rounds));
  q.backward.resize(static_cast<std::size_t>(q.rounds));
  for (std::int64_t k = 0; k < q.rounds; ++k) {
    for (std::size_t i = q.first; i < q.last; ++i) {
      const ring_schedule& s = rings[i].schedule;
      if (k < s.size())
        for (std::int64_t pos = 0; pos < s.size(); ++pos)
          add_blocks(i, pos, s.forward[static_cast<std::size_t>(k)][static_cast<std::size_t>(pos)].blocks);
    }
    price_all(q.forward[static_cast<std::size_t>(k)]);
    for (std::size_t i = q.first; i < q.last; ++i) {
      const ring_schedule& s = rings[i].schedule;
      const std::int64_t G = s.size();
      if (k < G)
        for (std::int64_t pos = 0; pos < G; ++pos)
          add_blocks(i, pos, s.forward[static_cast<std::size_t>((G - k) % G)][static_cast<std::size_t>(pos)].blocks);
    }
    price_all(q.backward[static_cast<std::size_t>(k)]);
  }
  for (std::size_t i = q.first; i < q.last; ++i) {
    const ring_schedule& s = rings[i].schedule;
    for (std::size_t pos = 0; pos < s.layout.size(); ++pos)
      for (const group_shard& gs : s.layout[pos])
        per_rank[static_cast<std::size_t>(s.ranks[pos])].push_back(
            {static_cast<std::int32_t>(i), gs.seq, gs.range, causal_pairs(gs.range, token_range{0, gs.range.end})});
  }
  price_all(q.gathered);
}

inline mb_layout make_mb_layout(const plan& p, const batch& b, const topology& t, const model_config& m,
                                const sim_cost_model& cost, const sim_options& o, std::int32_t mb) {
  const auto R = static_cast<std::size_t>(p.num_ranks());
  mb_layout L;
  L.micro_batch = mb;
  L.attention_tokens.assign(R, 0);
  L.local_cost.assign(R, {});
  std::set<std::pair<int, group_index>> groups;  // (queue order, id)
  std::vector<call_item> items;
  for (std::size_t r = 0; r < R; ++r) {
    items.clear();
    for (const shard& s : p.placements[r].shards) {
      if (s.micro_batch != mb) continue;
      L.attention_tokens[r] += s.range.size();
      const bool ring = s.group != no_group && p.groups[static_cast<std::size_t>(s.group)].ranks.size() > 1;
      if (ring) {
        groups.insert({queue_order(p.groups[static_cast<std::size_t>(s.group)].zone), s.group});
      } else {
        items.push_back({0, s.seq, s.range, causal_pairs(s.range, token_range{0, s.range.end})});
      }
    }
    L.local_cost[r] = price_call(items, cost.attention, m.heads, m.head_dim);
  }
  for (const auto& [queue, g] : groups) {
    priced_ring pr{make_ring_schedule(p, b, g, mb), {}, {}};
    const ring_schedule& s = pr.schedule;
    pr.round_cost.resize(s.forward.size());
    for (std::size_t k = 0; k < s.forward.size(); ++k)
      for (const forward_step& st : s.forward[k]) {
        items.clear();
        for (const attention_block& blk : st.blocks) items.push_back({0, blk.seq, blk.q, block_pairs(blk.q, blk.k, blk.mask)});
        pr.round_cost[k].push_back(price_call(items, cost.attention, m.heads, m.head_dim));
      }
    for (const auto& layout : s.layout) {
      items.clear();
      for (const group_shard& gs : layout)
        items.push_back({0, gs.seq, gs.range, causal_pairs(gs.range, token_range{0, gs.range.end})});
      pr.gathered_cost.push_back(price_call(items, cost.attention, m.heads, m.head_dim));
    }
    if (L.queues.empty() || L.queues.back().queue != queue)
      L.queues.push_back({queue, L.rings.size(), L.rings.size(), 0, {}, {}, {}});
    L.queues.back().last = L.rings.size() + 1;
    L.queues.back().rounds = std::max<std::int64_t>(L.queues.back().rounds, s.size());
    L.rings.push_back(std::move(pr));
  }
  if (o.launch == launch_policy::fused_round)
    for (queue_rings& q : L.queues) price_fused(q, L.rings, R, cost, m);
  L.linear_tokens = L.attention_tokens;
  if (o.remap) {
    const remap_problem problem =
        make_remap_problem(L.attention_tokens, t.gpus_per_node(), link_model::inverse_bandwidth(link_class::intra_node, t),
                           link_model::inverse_bandwidth(link_class::inter_node, t));
    L.remap = exact_remap{}.solve(problem).transfers;
    L.linear_tokens = problem.target;
  }
  return L;
}

//! Adds the tasks of one layer of one direction to an engine.
class phase_builder {
 public:
  phase_builder(event_engine& e, const topology& t, const model_config& m, const sim_cost_model& cost,
                const sim_options& o, const mb_layout& L, bool all_gather)
      : e_(e), t_(t), m_(m), cost_(cost), o_(o), L_(L), all_gather_(all_gather), R_(static_cast<std::size_t>(t.num_ranks())),
        kv_bytes_(kv_bytes_per_token(m)), hidden_bytes_(hidden_bytes_per_token(m)),
        linear_fwd_flops_(linear_forward_flops_per_token(m)) {}

  //! One forward layer after `prev` (per rank, the task the layer waits for); updates prev.
  void forward_layer(std::int32_t layer, std::vector<task_id>& prev) {
    layer_ = layer;
    if (routed_forward_ != 1) route_phase(true);
    std::vector<task_id> start = prev;
    if (o_.remap) start = remap_flows(prev, /*to_attention=*/true);
    std::vector<std::vector<task_id>> parts(R_);
    for_each_launch_set([&](const queue_rings* fused, std::span<const priced_ring> rings) {
      if (all_gather_) gather_forward(fused, rings, start, parts);
      else ring_forward(fused, rings, start, parts);
    });
    local_calls(start, parts, true);
    std::vector<task_id> done = finish(start, parts);
    if (o_.remap) done = remap_flows(done, /*to_attention=*/false);
    for (std::size_t r = 0; r < R_; ++r) prev[r] = linear(static_cast<rank_index>(r), done[r], true);
  }

  //! One backward layer after `prev`; updates prev.
  void backward_layer(std::int32_t layer, std::vector<task_id>& prev) {
    layer_ = layer;
    if (routed_forward_ != 0) route_phase(false);
    std::vector<task_id> start(R_);
    for (std::size_t r = 0; r < R_; ++r) start[r] = linear(static_cast<rank_index>(r), prev[r], false);
    if (o_.remap) start = remap_flows(start, /*to_attention=*/true);
    std::vector<std::vector<task_id>> parts(R_);
    for_each_launch_set([&](const queue_rings* fused, std::span<const priced_ring> rings) {
      if (all_gather_) gather_backward(fused, rings, start, parts);
      else ring_backward(fused, rings, start, parts);
    });
    local_calls(start, parts, false);
    std::vector<task_id> done = finish(start, parts);
    if (o_.remap) done = remap_flows(done, /*to_attention=*/false);
    prev = std::move(done);
  }

  //! What the attention tasks added so far compute.
  struct launch_stats {
    double launches = 0;      //!< compute tasks with work (kernel launches)
    double flops = 0;         //!< executed FLOPs, forward + backward, tile padding included
    std::int64_t pairs = 0;   //!< (query, key) pairs per head, every task
  };
  [[nodiscard]] const launch_stats& stats() const noexcept { return stats_; }

 private:
  //! Calls f(fused, rings) per set of rings built together: under fused_round one call per
  //! queue (fused = its queue_rings), under per_group one per ring (fused = nullptr).
  template <class F>
  void for_each_launch_set(F&& f) const {
    for (const queue_rings& q : L_.queues) {
      const std::span<const priced_ring> all(L_.rings.data() + q.first, q.last - q.first);
      if (o_.launch == launch_policy::fused_round) f(&q, all);
      else
        for (std::size_t i = 0; i < all.size(); ++i) f(nullptr, all.subspan(i, 1));
    }
  }

  task_tag tag(task_kind k, std::int32_t group = -1, std::int32_t round = -1, flow_leg leg = flow_leg::direct) const {
    return {k, leg, group, round, layer_, L_.micro_batch};
  }

  //! What a transfer of the phase carries (see the file comment).
  enum class send_kind : std::uint8_t {
    forward_kv,      //!< ring forward: K/V for round k + 1, pos -> pos + 1
    backward_kv,     //!< ring backward: K/V for round k + 1, pos -> pos - 1
    backward_dkv,    //!< ring backward: dK/dV finished in round k - 1, pos -> pos - 1
    backward_home,   //!< ring backward: the last dK/dV back to their owner (round G)
    gather,          //!< all-gather step k, pos -> pos + 1
    reduce_scatter,  //!< reduce-scatter step k of dK/dV, pos -> pos + 1
    remap_in,        //!< remap transfer `pos` to the attention layout (B -> A)
    remap_out,       //!< remap transfer `pos` away from it (A -> B)
  };
  struct send_key {
    std::int32_t ring = -1;  //!< index into mb_layout::rings, -1 for remap
    send_kind kind = send_kind::forward_kv;
    std::int64_t round = 0;
    std::int64_t pos = 0;
    friend auto operator<=>(const send_key&, const send_key&) = default;
  };
  struct routed_edge {
    ring_edge edge;
    std::vector<route_message> messages;  //!< by step: dispatch, transfer, combine (or one direct)
  };

  //! The edge a ring send stands for.
  ring_edge ring_edge_of(const ring_schedule& s, send_kind kind, std::int64_t k, std::int64_t pos) const {
    const std::int64_t G = s.size();
    const auto rk = [&](std::int64_t x) { return s.ranks[wrap(x, G)]; };
    const auto bytes = [&](std::int64_t origin) {
      return static_cast<std::int64_t>(std::llround(static_cast<double>(s.buffer_tokens[wrap(origin, G)]) * kv_bytes_));
    };
    switch (kind) {
      case send_kind::forward_kv:
      case send_kind::gather: return {rk(pos), rk(pos + 1), bytes(pos - k)};
      case send_kind::reduce_scatter: return {rk(pos), rk(pos + 1), bytes(pos - k - 1)};
      case send_kind::backward_kv: return {rk(pos), rk(pos - 1), bytes(pos + k)};
      case send_kind::backward_dkv: return {rk(pos), rk(pos - 1), bytes(pos + k - 1)};
      case send_kind::backward_home: return {rk(pos), rk(pos - 1), bytes(pos - 1)};
      case send_kind::remap_in:
      case send_kind::remap_out: break;
    }
    return {};
  }

  //! Routes every transfer of a phase (forward or backward), round by round.
  void route_phase(bool forward) {
    routes_.clear();
    // (stage, round) -> the sends of one routing round; stage 0 rings, 1 reduce-scatter, 2 / 3 remap
    std::map<std::pair<int, std::int64_t>, std::vector<std::pair<send_key, ring_edge>>> rounds;
    for (std::size_t i = 0; i < L_.rings.size(); ++i) {
      const ring_schedule& s = L_.rings[i].schedule;
      const std::int64_t G = s.size();
      const auto each = [&](int stage, send_kind kind, std::int64_t first, std::int64_t last) {  // rounds [first, last)
        for (std::int64_t k = first; k < last; ++k)
          for (std::int64_t pos = 0; pos < G; ++pos)
            rounds[{stage, k}].push_back({send_key{static_cast<std::int32_t>(i), kind, k, pos}, ring_edge_of(s, kind, k, pos)});
      };
      if (all_gather_) {
        each(0, send_kind::gather, 0, G - 1);
        if (!forward) each(1, send_kind::reduce_scatter, 0, G - 1);
      } else if (forward) {
        each(0, send_kind::forward_kv, 0, G - 1);
      } else {
        each(0, send_kind::backward_kv, 0, G - 1);
        each(0, send_kind::backward_dkv, 1, G);
        each(0, send_kind::backward_home, G, G + 1);
      }
    }
    if (o_.remap)
      for (std::size_t x = 0; x < L_.remap.size(); ++x) {
        const remap_transfer& r = L_.remap[x];
        const auto bytes = static_cast<std::int64_t>(std::llround(static_cast<double>(r.tokens) * hidden_bytes_));
        const auto pos = static_cast<std::int64_t>(x);
        rounds[{2, 0}].push_back({send_key{-1, send_kind::remap_in, 0, pos}, ring_edge{r.to, r.from, bytes}});
        rounds[{3, 0}].push_back({send_key{-1, send_kind::remap_out, 0, pos}, ring_edge{r.from, r.to, bytes}});
      }
    std::vector<ring_edge> edges;
    std::vector<routed_edge*> slot;
    for (const auto& [round, sends] : rounds) {
      edges.clear();
      for (const auto& send : sends) edges.push_back(send.second);
      const std::vector<route_message> messages = o_.routing ? o_.proxy.route(edges, t_) : direct_router{}.route(edges, t_);
      slot.assign(sends.size(), nullptr);
      for (std::size_t e = 0; e < sends.size(); ++e) {
        routed_edge& r = routes_[sends[e].first];
        r.edge = sends[e].second;
        slot[e] = &r;
      }
      for (const route_message& m : messages) slot[static_cast<std::size_t>(m.edge)]->messages.push_back(m);
    }
    routed_forward_ = forward ? 1 : 0;
  }

  static flow_leg leg_of(route_step s) {
    switch (s) {
      case route_step::dispatch: return flow_leg::dispatch;
      case route_step::transfer: return flow_leg::transfer;
      case route_step::combine: return flow_leg::combine;
      case route_step::direct: break;
    }
    return flow_leg::direct;
  }

  //! The flows of send `key` after `deps` (see the file comment); returns its arrival.
  task_id send(const send_key& key, task_tag tg, std::initializer_list<task_id> deps) {
    const routed_edge& r = routes_.at(key);
    const std::vector<route_message>& ms = r.messages;
    if (ms.empty()) return e_.join(deps);  // nothing to move
    if (ms.size() == 1 && ms.front().step == route_step::direct)
      return e_.flow(ms.front().src, ms.front().dst, static_cast<double>(ms.front().bytes), tg, deps);
    const task_id ready = e_.join(deps);
    std::vector<task_id> id(ms.size(), no_task), arrived, after;
    for (std::size_t i = 0; i < ms.size(); ++i) {
      const route_message& m = ms[i];
      after.clear();
      const route_step feeder = m.step == route_step::transfer  ? route_step::dispatch
                                : m.step == route_step::combine ? route_step::transfer
                                                                : route_step::direct;
      if (feeder != route_step::direct)
        for (std::size_t j = 0; j < i; ++j)
          if (ms[j].step == feeder && ms[j].dst == m.src) after.push_back(id[j]);
      if (after.empty()) after.push_back(ready);
      task_tag leg = tg;
      leg.leg = leg_of(m.step);
      id[i] = e_.flow(m.src, m.dst, static_cast<double>(m.bytes), leg, after);
      if (m.dst == r.edge.dst) arrived.push_back(id[i]);
    }
    return arrived.size() == 1 ? arrived.front() : e_.join(arrived);
  }

  //! The remap alltoallv: to the attention layout (B -> A) or away from it (A -> B). Each
  //! transfer waits for its sender's `ready`; returns per rank the join of `ready` and its arrivals.
  std::vector<task_id> remap_flows(const std::vector<task_id>& ready, bool to_attention) {
    std::vector<std::vector<task_id>> in(R_);
    for (std::size_t r = 0; r < R_; ++r) in[r].push_back(ready[r]);
    for (std::size_t i = 0; i < L_.remap.size(); ++i) {
      const remap_transfer& x = L_.remap[i];
      const rank_index from = to_attention ? x.to : x.from, to = to_attention ? x.from : x.to;
      const send_key key{-1, to_attention ? send_kind::remap_in : send_kind::remap_out, 0, static_cast<std::int64_t>(i)};
      in[static_cast<std::size_t>(to)].push_back(send(key, tag(task_kind::remap), {ready[static_cast<std::size_t>(from)]}));
    }
    std::vector<task_id> out(R_);
    for (std::size_t r = 0; r < R_; ++r) out[r] = in[r].size() == 1 ? in[r].front() : e_.join(in[r]);
    return out;
  }

  std::vector<task_id> finish(const std::vector<task_id>& start, std::vector<std::vector<task_id>>& parts) {
    std::vector<task_id> done(R_);
    for (std::size_t r = 0; r < R_; ++r) {
      if (parts[r].empty()) done[r] = start[r];
      else {
        parts[r].push_back(start[r]);
        done[r] = e_.join(parts[r]);
      }
    }
    return done;
  }

  //! One attention launch priced `c` (its forward or backward part).
  task_id attention(rank_index r, const call_cost& c, bool forward, std::int64_t priority, std::int32_t group, std::int32_t round,
                    std::span<const task_id> deps) {
    if (c.flops > 0) {
      stats_.launches += 1;
      stats_.flops += forward ? c.flops : attention_backward_ratio * c.flops;
      stats_.pairs += c.pairs;
    }
    return e_.compute(r, forward ? c.forward_s : c.backward_s,
                      tag(forward ? task_kind::attention_forward : task_kind::attention_backward, group, round), priority, deps);
  }
  task_id attention(rank_index r, const call_cost& c, bool forward, std::int64_t priority, std::int32_t group, std::int32_t round,
                    std::initializer_list<task_id> deps) {
    return attention(r, c, forward, priority, group, round, std::span<const task_id>(deps.begin(), deps.size()));
  }

  void local_calls(const std::vector<task_id>& start, std::vector<std::vector<task_id>>& parts, bool forward) {
    for (std::size_t r = 0; r < R_; ++r) {
      const call_cost& c = L_.local_cost[r];
      if ((forward ? c.forward_s : c.backward_s) == 0) continue;
      parts[r].push_back(attention(static_cast<rank_index>(r), c, forward, priority_key(2, 0, 0), -1, -1, {start[r]}));
    }
  }

  //! The fused launches of round k of a queue (launch_policy::fused_round): collects, per
  //! member rank, `start` and the arrival of every group's K/V (arrival(i, pos), no_task in
  //! round 0), then adds one task per member rank, lowest rank first. Returns per rank its
  //! task (no_task for ranks outside every group still running in round k).
  template <class Arrival>
  std::vector<task_id>& fused_round(const queue_rings& q, std::span<const priced_ring> rings, std::int64_t k, bool forward,
                                    const std::vector<task_id>& start, std::vector<std::vector<task_id>>& parts,
                                    Arrival&& arrival) {
    deps_.resize(R_);
    group_.assign(R_, -1);
    for (std::size_t i = 0; i < rings.size(); ++i) {
      const ring_schedule& s = rings[i].schedule;
      if (k >= s.size()) continue;
      for (std::int64_t pos = 0; pos < s.size(); ++pos) {
        const auto r = static_cast<std::size_t>(s.ranks[static_cast<std::size_t>(pos)]);
        if (group_[r] < 0) {
          group_[r] = s.group;  // groups ascend within a queue: the lowest one labels the launch
          deps_[r].assign(1, start[r]);
        }
        deps_[r].push_back(arrival(i, pos));
      }
    }
    launch_.assign(R_, no_task);
    const auto& cost = forward ? q.forward[static_cast<std::size_t>(k)] : q.backward[static_cast<std::size_t>(k)];
    for (std::size_t r = 0; r < R_; ++r) {
      if (group_[r] < 0) continue;
      launch_[r] = attention(static_cast<rank_index>(r), cost[r], forward, priority_key(q.queue, 0, k), group_[r],
                             static_cast<std::int32_t>(k), deps_[r]);
      parts[r].push_back(launch_[r]);
    }
    return launch_;
  }

  task_id linear(rank_index r, task_id after, bool forward) {
    const auto i = static_cast<std::size_t>(r);
    const double flops = static_cast<double>(L_.linear_tokens[i]) * linear_fwd_flops_ * (forward ? 1.0 : 2.0);
    task_id last = e_.compute(r, cost_.linear.seconds(flops, t_.gpu()),
                              tag(forward ? task_kind::linear_forward : task_kind::linear_backward), priority_key(3, 0, 0), {after});
    if (o_.tensor_parallel > 1) {
      const double s = tensor_parallel_collectives_per_layer *
                       tensor_parallel_collective_seconds(L_.linear_tokens[i], m_, t_, o_.tensor_parallel);
      last = e_.compute(r, s, tag(task_kind::tensor_parallel), priority_key(3, 0, 1), {last});
    }
    return last;
  }

  static std::size_t wrap(std::int64_t x, std::int64_t G) { return static_cast<std::size_t>(((x % G) + G) % G); }
  int queue(const ring_schedule& s) const { return queue_order(s.zone); }
  std::int32_t ring_index(const priced_ring& ring) const { return static_cast<std::int32_t>(&ring - L_.rings.data()); }

  //! The rings of `rings` forward, round by round together: per_group (fused == nullptr, one
  //! ring) one task per position and round, fused_round one per member rank and round.
  void ring_forward(const queue_rings* fused, std::span<const priced_ring> rings, const std::vector<task_id>& start,
                    std::vector<std::vector<task_id>>& parts) {
    struct state {
      std::vector<task_id> prev, cur;  // per position: arrival of the K/V sent in the previous / this round
    };
    std::vector<state> st(rings.size());
    std::int64_t rounds = 0;
    for (std::size_t i = 0; i < rings.size(); ++i) {
      const auto n = static_cast<std::size_t>(rings[i].schedule.size());
      st[i].prev.assign(n, no_task);
      st[i].cur.assign(n, no_task);
      rounds = std::max<std::int64_t>(rounds, rings[i].schedule.size());
    }
    for (std::int64_t k = 0; k < rounds; ++k) {
      for (std::size_t i = 0; i < rings.size(); ++i) {
        const ring_schedule& s = rings[i].schedule;
        const std::int64_t G = s.size();
        if (k + 1 >= G) continue;
        // K/V for round k + 1, sent while round k computes
        for (std::int64_t pos = 0; pos < G; ++pos) {
          // after the K/V arrived and after this rank's previous send (NCCL serialises a
          // rank's point-to-point groups on its communicator)
          const task_id dep =
              k == 0 ? start[static_cast<std::size_t>(s.ranks[static_cast<std::size_t>(pos)])] : st[i].prev[wrap(pos - 1, G)];
          const task_id own = k == 0 ? no_task : st[i].prev[static_cast<std::size_t>(pos)];
          st[i].cur[static_cast<std::size_t>(pos)] = send({ring_index(rings[i]), send_kind::forward_kv, k, pos},
                                                          tag(task_kind::kv, s.group, static_cast<std::int32_t>(k)), {dep, own});
        }
      }
      if (fused) {
        fused_round(*fused, rings, k, true, start, parts, [&](std::size_t i, std::int64_t pos) {
          return k == 0 ? no_task : st[i].prev[wrap(pos - 1, rings[i].schedule.size())];
        });
      } else {
        const priced_ring& ring = rings.front();
        const ring_schedule& s = ring.schedule;
        const std::int64_t G = s.size();
        for (std::int64_t pos = 0; pos < G; ++pos) {
          const rank_index r = s.ranks[static_cast<std::size_t>(pos)];
          const task_id arrival = k == 0 ? no_task : st.front().prev[wrap(pos - 1, G)];
          parts[static_cast<std::size_t>(r)].push_back(
              attention(r, ring.round_cost[static_cast<std::size_t>(k)][static_cast<std::size_t>(pos)], true,
                        priority_key(queue(s), s.group, k), s.group, static_cast<std::int32_t>(k),
                        {start[static_cast<std::size_t>(r)], arrival}));
        }
      }
      for (state& x : st) std::swap(x.prev, x.cur);
    }
  }

  //! The rings of `rings` backward, round by round together (see ring_forward).
  void ring_backward(const queue_rings* fused, std::span<const priced_ring> rings, const std::vector<task_id>& start,
                     std::vector<std::vector<task_id>>& parts) {
    struct state {
      std::vector<task_id> kv_prev, kv_cur, acc, dkv, dkv_prev, comp;  // per position
    };
    std::vector<state> st(rings.size());
    std::int64_t rounds = 0;
    for (std::size_t i = 0; i < rings.size(); ++i) {
      const auto n = static_cast<std::size_t>(rings[i].schedule.size());
      for (auto* v : {&st[i].kv_prev, &st[i].kv_cur, &st[i].acc, &st[i].dkv, &st[i].dkv_prev, &st[i].comp}) v->assign(n, no_task);
      rounds = std::max<std::int64_t>(rounds, rings[i].schedule.size());
    }
    for (std::int64_t k = 0; k < rounds; ++k) {
      const auto ki = static_cast<std::int32_t>(k);
      for (std::size_t i = 0; i < rings.size(); ++i) {
        const ring_schedule& s = rings[i].schedule;
        const std::int64_t G = s.size();
        if (k + 1 >= G) continue;
        state& x = st[i];
        for (std::int64_t pos = 0; pos < G; ++pos) {
          const auto p = static_cast<std::size_t>(pos);
          const task_id dep = k == 0 ? start[static_cast<std::size_t>(s.ranks[p])] : x.kv_prev[wrap(pos + 1, G)];
          x.kv_cur[p] = send({ring_index(rings[i]), send_kind::backward_kv, k, pos}, tag(task_kind::kv, s.group, ki),
                             {dep, x.kv_prev[p], x.dkv_prev[p]});
        }
      }
      if (fused) {
        const auto arrival = [&](std::size_t i, std::int64_t pos) {
          return k == 0 ? no_task : st[i].kv_prev[wrap(pos + 1, rings[i].schedule.size())];
        };
        const std::vector<task_id>& launch = fused_round(*fused, rings, k, false, start, parts, arrival);
        for (std::size_t i = 0; i < rings.size(); ++i) {
          const ring_schedule& s = rings[i].schedule;
          if (k < s.size())
            for (std::size_t p = 0; p < static_cast<std::size_t>(s.size()); ++p)
              st[i].comp[p] = launch[static_cast<std::size_t>(s.ranks[p])];
        }
      } else {
        const priced_ring& ring = rings.front();
        const ring_schedule& s = ring.schedule;
        const std::int64_t G = s.size();
        const std::size_t fwd_round = wrap(G - k, G);
        for (std::int64_t pos = 0; pos < G; ++pos) {
          const auto p = static_cast<std::size_t>(pos);
          const rank_index r = s.ranks[p];
          const task_id arrival = k == 0 ? no_task : st.front().kv_prev[wrap(pos + 1, G)];
          st.front().comp[p] = attention(r, ring.round_cost[fwd_round][p], false, priority_key(queue(s), s.group, k), s.group, ki,
                                         {start[static_cast<std::size_t>(r)], arrival});
          parts[static_cast<std::size_t>(r)].push_back(st.front().comp[p]);
        }
      }
      for (std::size_t i = 0; i < rings.size(); ++i) {
        const ring_schedule& s = rings[i].schedule;
        const std::int64_t G = s.size();
        if (k >= G) continue;
        state& x = st[i];
        if (k >= 1)  // the dK/dV finished last round travel on (after this rank's previous sends)
          for (std::int64_t pos = 0; pos < G; ++pos) {
            const auto p = static_cast<std::size_t>(pos);
            x.dkv[p] = send({ring_index(rings[i]), send_kind::backward_dkv, k, pos}, tag(task_kind::dkv, s.group, ki),
                            {x.acc[p], x.kv_prev[p], x.dkv_prev[p]});
          }
        for (std::int64_t pos = 0; pos < G; ++pos) {
          const auto p = static_cast<std::size_t>(pos);
          x.acc[p] = k == 0 ? x.comp[p] : e_.join({x.comp[p], x.dkv[wrap(pos + 1, G)]});
        }
        std::swap(x.kv_prev, x.kv_cur);
        if (k >= 1) x.dkv_prev = x.dkv;
        if (k + 1 == G) {  // the last accumulators go home
          std::vector<task_id> home(static_cast<std::size_t>(G));
          for (std::int64_t pos = 0; pos < G; ++pos) {
            const auto p = static_cast<std::size_t>(pos);
            home[p] = send({ring_index(rings[i]), send_kind::backward_home, G, pos},
                           tag(task_kind::dkv, s.group, static_cast<std::int32_t>(G)), {x.acc[p], x.kv_prev[p], x.dkv_prev[p]});
          }
          for (std::int64_t pos = 0; pos < G; ++pos)
            parts[static_cast<std::size_t>(s.ranks[static_cast<std::size_t>(pos)])].push_back(home[wrap(pos + 1, G)]);
        }
      }
    }
  }

  //! Ring all-gather of K/V (G - 1 steps); returns per position the steps' arrivals.
  std::vector<std::vector<task_id>> gather(const priced_ring& ring, const std::vector<task_id>& start) {
    const ring_schedule& s = ring.schedule;
    const std::int64_t G = s.size();
    const auto rk = [&](std::int64_t pos) { return s.ranks[wrap(pos, G)]; };
    std::vector<std::vector<task_id>> arrivals(static_cast<std::size_t>(G));
    std::vector<task_id> prev(static_cast<std::size_t>(G), no_task), cur(prev);
    for (std::int64_t k = 0; k + 1 < G; ++k) {
      for (std::int64_t pos = 0; pos < G; ++pos) {
        const task_id dep = k == 0 ? start[static_cast<std::size_t>(rk(pos))] : prev[wrap(pos - 1, G)];
        const task_id own = k == 0 ? no_task : prev[static_cast<std::size_t>(pos)];
        cur[static_cast<std::size_t>(pos)] =
            send({ring_index(ring), send_kind::gather, k, pos}, tag(task_kind::kv, s.group, static_cast<std::int32_t>(k)), {dep, own});
        arrivals[wrap(pos + 1, G)].push_back(cur[static_cast<std::size_t>(pos)]);
      }
      std::swap(prev, cur);
    }
    return arrivals;
  }

  //! The gathered calls of `rings`: per_group one per position after its group's gather,
  //! fused_round one per member rank after the gathers of all its groups. Returns per ring and
  //! position the task that computed there.
  std::vector<std::vector<task_id>> gathered_calls(const queue_rings* fused, std::span<const priced_ring> rings, bool forward,
                                                   const std::vector<task_id>& start, std::vector<std::vector<task_id>>& parts) {
    std::vector<std::vector<std::vector<task_id>>> arrivals;
    for (const priced_ring& ring : rings) arrivals.push_back(gather(ring, start));
    std::vector<std::vector<task_id>> comp(rings.size());
    if (fused) {
      std::vector<std::vector<task_id>> deps(R_);
      std::vector<std::int32_t> group(R_, -1);
      for (std::size_t i = 0; i < rings.size(); ++i) {
        const ring_schedule& s = rings[i].schedule;
        for (std::size_t p = 0; p < static_cast<std::size_t>(s.size()); ++p) {
          const auto r = static_cast<std::size_t>(s.ranks[p]);
          if (group[r] < 0) group[r] = s.group, deps[r].push_back(start[r]);
          deps[r].insert(deps[r].end(), arrivals[i][p].begin(), arrivals[i][p].end());
        }
      }
      std::vector<task_id> launch(R_, no_task);
      for (std::size_t r = 0; r < R_; ++r) {
        if (group[r] < 0) continue;
        const task_id ready = e_.join(deps[r]);
        launch[r] = attention(static_cast<rank_index>(r), fused->gathered[r], forward, priority_key(fused->queue, 0, 0), group[r],
                              0, {ready});
        parts[r].push_back(launch[r]);
      }
      for (std::size_t i = 0; i < rings.size(); ++i)
        for (const rank_index r : rings[i].schedule.ranks) comp[i].push_back(launch[static_cast<std::size_t>(r)]);
      return comp;
    }
    const priced_ring& ring = rings.front();
    const ring_schedule& s = ring.schedule;
    for (std::size_t p = 0; p < static_cast<std::size_t>(s.size()); ++p) {
      const rank_index r = s.ranks[p];
      auto& deps = arrivals.front()[p];
      deps.push_back(start[static_cast<std::size_t>(r)]);
      const task_id ready = e_.join(deps);
      comp.front().push_back(
          attention(r, ring.gathered_cost[p], forward, priority_key(queue(s), s.group, 0), s.group, 0, {ready}));
      parts[static_cast<std::size_t>(r)].push_back(comp.front().back());
    }
    return comp;
  }

  void gather_forward(const queue_rings* fused, std::span<const priced_ring> rings, const std::vector<task_id>& start,
                      std::vector<std::vector<task_id>>& parts) {
    (void)gathered_calls(fused, rings, true, start, parts);
  }

  void gather_backward(const queue_rings* fused, std::span<const priced_ring> rings, const std::vector<task_id>& start,
                       std::vector<std::vector<task_id>>& parts) {
    const std::vector<std::vector<task_id>> comp = gathered_calls(fused, rings, false, start, parts);  // K/V are gathered again
    for (std::size_t i = 0; i < rings.size(); ++i) {
      const ring_schedule& s = rings[i].schedule;
      const std::int64_t G = s.size();
      const auto rk = [&](std::int64_t pos) { return s.ranks[wrap(pos, G)]; };
      // ring reduce-scatter of dK/dV: step k, position pos sends the partial sum of origin pos - k - 1
      std::vector<task_id> prev(static_cast<std::size_t>(G), no_task), cur(prev);
      for (std::int64_t k = 0; k + 1 < G; ++k) {
        for (std::int64_t pos = 0; pos < G; ++pos)
          cur[static_cast<std::size_t>(pos)] =
              send({ring_index(rings[i]), send_kind::reduce_scatter, k, pos}, tag(task_kind::dkv, s.group, static_cast<std::int32_t>(k)),
                   {comp[i][static_cast<std::size_t>(pos)], k == 0 ? no_task : prev[wrap(pos - 1, G)],
                    k == 0 ? no_task : prev[static_cast<std::size_t>(pos)]});
        std::swap(prev, cur);
      }
      if (G > 1)
        for (std::int64_t pos = 0; pos < G; ++pos) parts[static_cast<std::size_t>(rk(pos + 1))].push_back(prev[static_cast<std::size_t>(pos)]);
    }
  }

  event_engine& e_;
  const topology& t_;
  const model_config& m_;
  const sim_cost_model& cost_;
  const sim_options& o_;
  const mb_layout& L_;
  bool all_gather_;
  std::size_t R_;
  double kv_bytes_, hidden_bytes_, linear_fwd_flops_;
  std::int32_t layer_ = 0;
  std::map<send_key, routed_edge> routes_;  //!< every send of the phase with its messages
  int routed_forward_ = -1;                 //!< direction routes_ was built for (1 forward, 0 backward)
  launch_stats stats_{};
  std::vector<std::vector<task_id>> deps_;  //!< fused_round scratch: per rank, what its launch waits for
  std::vector<std::int32_t> group_;         //!< fused_round scratch: per rank, the launch's label (-1: no launch)
  std::vector<task_id> launch_;             //!< fused_round: per rank, the launch of the round
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
