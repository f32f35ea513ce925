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
// when every message ending at its destination has. Host-only.
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

//! Everything about one micro-batch that does not depend on the direction.
struct mb_layout {
  std::int32_t micro_batch = 0;
  std::vector<priced_ring> rings;           //!< inter first, then intra, by group id
  std::vector<call_cost> local_cost;        //!< per rank: its one call over its local sequences
  std::vector<token_count> attention_tokens;  //!< A_r
  std::vector<token_count> linear_tokens;     //!< B_r with remap, else A_r
  std::vector<remap_transfer> remap;          //!< A -> B transfers (empty without remap)
};

inline std::int64_t priority_key(int queue, std::int64_t group, std::int64_t round) {
  return (static_cast<std::int64_t>(queue) << 40) | (group << 20) | round;
}

inline mb_layout make_mb_layout(const plan& p, const batch& b, const topology& t, const model_config& m,
                                const sim_cost_model& cost, bool remap, std::int32_t mb) {
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
        items.push_back({s.seq, s.range, causal_pairs(s.range, token_range{0, s.range.end})});
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
        for (const attention_block& blk : st.blocks) items.push_back({blk.seq, blk.q, block_pairs(blk.q, blk.k, blk.mask)});
        pr.round_cost[k].push_back(price_call(items, cost.attention, m.heads, m.head_dim));
      }
    for (const auto& layout : s.layout) {
      items.clear();
      for (const group_shard& gs : layout) items.push_back({gs.seq, gs.range, causal_pairs(gs.range, token_range{0, gs.range.end})});
      pr.gathered_cost.push_back(price_call(items, cost.attention, m.heads, m.head_dim));
    }
    L.rings.push_back(std::move(pr));
  }
  L.linear_tokens = L.attention_tokens;
  if (remap) {
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
    for (const priced_ring& ring : L_.rings) {
      if (all_gather_) gather_forward(ring, start, parts);
      else ring_forward(ring, start, parts);
    }
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
    for (const priced_ring& ring : L_.rings) {
      if (all_gather_) gather_backward(ring, start, parts);
      else ring_backward(ring, start, parts);
    }
    local_calls(start, parts, false);
    std::vector<task_id> done = finish(start, parts);
    if (o_.remap) done = remap_flows(done, /*to_attention=*/false);
    prev = std::move(done);
  }

 private:
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

  task_id attention(rank_index r, double seconds, bool forward, std::int64_t priority, std::int32_t group, std::int32_t round,
                    std::initializer_list<task_id> deps) {
    return e_.compute(r, seconds, tag(forward ? task_kind::attention_forward : task_kind::attention_backward, group, round),
                      priority, deps);
  }

  void local_calls(const std::vector<task_id>& start, std::vector<std::vector<task_id>>& parts, bool forward) {
    for (std::size_t r = 0; r < R_; ++r) {
      const call_cost& c = L_.local_cost[r];
      const double s = forward ? c.forward_s : c.backward_s;
      if (s == 0) continue;
      parts[r].push_back(attention(static_cast<rank_index>(r), s, forward, priority_key(2, 0, 0), -1, -1, {start[r]}));
    }
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

  void ring_forward(const priced_ring& ring, const std::vector<task_id>& start, std::vector<std::vector<task_id>>& parts) {
    const ring_schedule& s = ring.schedule;
    const std::int64_t G = s.size();
    const auto rk = [&](std::int64_t pos) { return s.ranks[wrap(pos, G)]; };
    std::vector<task_id> flow_prev(static_cast<std::size_t>(G), no_task), flow_cur(static_cast<std::size_t>(G), no_task);
    for (std::int64_t k = 0; k < G; ++k) {
      // K/V for round k + 1, sent while round k computes
      if (k + 1 < G)
        for (std::int64_t pos = 0; pos < G; ++pos) {
          // after the K/V arrived and after this rank's previous send (NCCL serialises a
          // rank's point-to-point groups on its communicator)
          const task_id dep = k == 0 ? start[static_cast<std::size_t>(rk(pos))] : flow_prev[wrap(pos - 1, G)];
          const task_id own = k == 0 ? no_task : flow_prev[static_cast<std::size_t>(pos)];
          flow_cur[static_cast<std::size_t>(pos)] =
              send({ring_index(ring), send_kind::forward_kv, k, pos}, tag(task_kind::kv, s.group, static_cast<std::int32_t>(k)), {dep, own});
        }
      for (std::int64_t pos = 0; pos < G; ++pos) {
        const rank_index r = rk(pos);
        const task_id arrival = k == 0 ? no_task : flow_prev[wrap(pos - 1, G)];
        parts[static_cast<std::size_t>(r)].push_back(attention(r, ring.round_cost[static_cast<std::size_t>(k)][static_cast<std::size_t>(pos)].forward_s, true,
                                                               priority_key(queue(s), s.group, k), s.group, static_cast<std::int32_t>(k),
                                                               {start[static_cast<std::size_t>(r)], arrival}));
      }
      std::swap(flow_prev, flow_cur);
    }
  }

  void ring_backward(const priced_ring& ring, const std::vector<task_id>& start, std::vector<std::vector<task_id>>& parts) {
    const ring_schedule& s = ring.schedule;
    const std::int64_t G = s.size();
    const auto rk = [&](std::int64_t pos) { return s.ranks[wrap(pos, G)]; };
    const auto n = static_cast<std::size_t>(G);
    std::vector<task_id> kv_prev(n, no_task), kv_cur(n, no_task), acc(n, no_task), dkv(n, no_task), dkv_prev(n, no_task),
        comp(n, no_task);
    for (std::int64_t k = 0; k < G; ++k) {
      const auto ki = static_cast<std::int32_t>(k);
      if (k + 1 < G)
        for (std::int64_t pos = 0; pos < G; ++pos) {
          const auto i = static_cast<std::size_t>(pos);
          const task_id dep = k == 0 ? start[static_cast<std::size_t>(rk(pos))] : kv_prev[wrap(pos + 1, G)];
          kv_cur[i] = send({ring_index(ring), send_kind::backward_kv, k, pos}, tag(task_kind::kv, s.group, ki), {dep, kv_prev[i], dkv_prev[i]});
        }
      const std::size_t fwd_round = wrap(G - k, G);
      for (std::int64_t pos = 0; pos < G; ++pos) {
        const rank_index r = rk(pos);
        const task_id arrival = k == 0 ? no_task : kv_prev[wrap(pos + 1, G)];
        comp[static_cast<std::size_t>(pos)] =
            attention(r, ring.round_cost[fwd_round][static_cast<std::size_t>(pos)].backward_s, false,
                      priority_key(queue(s), s.group, k), s.group, ki, {start[static_cast<std::size_t>(r)], arrival});
        parts[static_cast<std::size_t>(r)].push_back(comp[static_cast<std::size_t>(pos)]);
      }
      if (k >= 1)  // the dK/dV finished last round travel on (after this rank's previous sends)
        for (std::int64_t pos = 0; pos < G; ++pos) {
          const auto i = static_cast<std::size_t>(pos);
          dkv[i] = send({ring_index(ring), send_kind::backward_dkv, k, pos}, tag(task_kind::dkv, s.group, ki), {acc[i], kv_prev[i], dkv_prev[i]});
        }
      for (std::int64_t pos = 0; pos < G; ++pos)
        acc[static_cast<std::size_t>(pos)] = k == 0 ? comp[static_cast<std::size_t>(pos)]
                                                    : e_.join({comp[static_cast<std::size_t>(pos)], dkv[wrap(pos + 1, G)]});
      std::swap(kv_prev, kv_cur);
      if (k >= 1) dkv_prev = dkv;
    }
    // the last accumulators go home
    std::vector<task_id> home(n);
    for (std::int64_t pos = 0; pos < G; ++pos) {
      const auto i = static_cast<std::size_t>(pos);
      home[i] = send({ring_index(ring), send_kind::backward_home, G, pos}, tag(task_kind::dkv, s.group, static_cast<std::int32_t>(G)),
                     {acc[i], kv_prev[i], dkv_prev[i]});
    }
    for (std::int64_t pos = 0; pos < G; ++pos) parts[static_cast<std::size_t>(rk(pos))].push_back(home[wrap(pos + 1, G)]);
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

  void gather_forward(const priced_ring& ring, const std::vector<task_id>& start, std::vector<std::vector<task_id>>& parts) {
    const ring_schedule& s = ring.schedule;
    auto arrivals = gather(ring, start);
    for (std::int32_t pos = 0; pos < s.size(); ++pos) {
      const rank_index r = s.ranks[static_cast<std::size_t>(pos)];
      auto& deps = arrivals[static_cast<std::size_t>(pos)];
      deps.push_back(start[static_cast<std::size_t>(r)]);
      const task_id ready = e_.join(deps);
      parts[static_cast<std::size_t>(r)].push_back(attention(r, ring.gathered_cost[static_cast<std::size_t>(pos)].forward_s, true,
                                                             priority_key(queue(s), s.group, 0), s.group, 0, {ready}));
    }
  }

  void gather_backward(const priced_ring& ring, const std::vector<task_id>& start, std::vector<std::vector<task_id>>& parts) {
    const ring_schedule& s = ring.schedule;
    const std::int64_t G = s.size();
    const auto rk = [&](std::int64_t pos) { return s.ranks[wrap(pos, G)]; };
    auto arrivals = gather(ring, start);  // K/V are gathered again for the backward
    std::vector<task_id> comp(static_cast<std::size_t>(G));
    for (std::int64_t pos = 0; pos < G; ++pos) {
      const rank_index r = rk(pos);
      auto& deps = arrivals[static_cast<std::size_t>(pos)];
      deps.push_back(start[static_cast<std::size_t>(r)]);
      const task_id ready = e_.join(deps);
      comp[static_cast<std::size_t>(pos)] = attention(r, ring.gathered_cost[static_cast<std::size_t>(pos)].backward_s, false,
                                                      priority_key(queue(s), s.group, 0), s.group, 0, {ready});
      parts[static_cast<std::size_t>(r)].push_back(comp[static_cast<std::size_t>(pos)]);
    }
    // ring reduce-scatter of dK/dV: step k, position pos sends the partial sum of origin pos - k - 1
    std::vector<task_id> prev(static_cast<std::size_t>(G), no_task), cur(prev);
    for (std::int64_t k = 0; k + 1 < G; ++k) {
      for (std::int64_t pos = 0; pos < G; ++pos)
        cur[static_cast<std::size_t>(pos)] =
            send({ring_index(ring), send_kind::reduce_scatter, k, pos}, tag(task_kind::dkv, s.group, static_cast<std::int32_t>(k)),
                 {comp[static_cast<std::size_t>(pos)], k == 0 ? no_task : prev[wrap(pos - 1, G)],
                  k == 0 ? no_task : prev[static_cast<std::size_t>(pos)]});
      std::swap(prev, cur);
    }
    if (G > 1)
      for (std::int64_t pos = 0; pos < G; ++pos) parts[static_cast<std::size_t>(rk(pos + 1))].push_back(prev[static_cast<std::size_t>(pos)]);
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
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
