// zeppelin/sim/detail/phase_builder.hpp
// Turns one micro-batch of a plan into the task DAG of a forward or a backward phase
// (sim/event_engine.hpp), layer after layer. See sim/simulate.hpp for the model; this file
// holds the per-micro-batch layout (mb_layout) and the builder. Host-only.
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
#include <zeppelin/schedule/block_mask.hpp>
#include <zeppelin/schedule/engine_queue.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>
#include <zeppelin/sim/cost_model.hpp>
#include <zeppelin/sim/detail/attention_call.hpp>
#include <zeppelin/sim/detail/proxy_legs.hpp>
#include <zeppelin/sim/event_engine.hpp>
#include <zeppelin/sim/options.hpp>
#include <zeppelin/sim/tensor_parallel.hpp>

#include <algorithm>
#include <cstdint>
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

  //! A transfer, proxy-routed when routing is on and it crosses nodes; returns its arrival.
  task_id send(rank_index src, rank_index dst, double bytes, task_tag tg, std::initializer_list<task_id> deps) {
    if (!o_.routing || bytes == 0 || t_.nics_per_node() == 1 || t_.between(src, dst) != link_class::inter_node)
      return e_.flow(src, dst, bytes, tg, deps);
    const task_id ready = deps.size() == 1 ? *deps.begin() : e_.join(deps);
    std::vector<task_id> ends;
    for (const proxy_chain& c : proxy_chains(t_, src, dst, bytes)) {
      task_tag leg = tg;
      task_id at = ready;
      if (c.send_proxy != src) {
        leg.leg = flow_leg::dispatch;
        at = e_.flow(src, c.send_proxy, c.bytes, leg, {at});
      }
      leg.leg = flow_leg::transfer;
      at = e_.flow(c.send_proxy, c.receive_proxy, c.bytes, leg, {at});
      if (c.receive_proxy != dst) {
        leg.leg = flow_leg::combine;
        at = e_.flow(c.receive_proxy, dst, c.bytes, leg, {at});
      }
      ends.push_back(at);
    }
    return e_.join(ends);
  }

  //! The remap alltoallv: to the attention layout (B -> A) or away from it (A -> B). Each
  //! transfer waits for its sender's `ready`; returns per rank the join of `ready` and its arrivals.
  std::vector<task_id> remap_flows(const std::vector<task_id>& ready, bool to_attention) {
    std::vector<std::vector<task_id>> in(R_);
    for (std::size_t r = 0; r < R_; ++r) in[r].push_back(ready[r]);
    for (const remap_transfer& x : L_.remap) {
      const rank_index from = to_attention ? x.to : x.from, to = to_attention ? x.from : x.to;
      in[static_cast<std::size_t>(to)].push_back(
          send(from, to, static_cast<double>(x.tokens) * hidden_bytes_, tag(task_kind::remap), {ready[static_cast<std::size_t>(from)]}));
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
  double kv(const ring_schedule& s, std::int64_t origin) const {
    return static_cast<double>(s.buffer_tokens[wrap(origin, s.size())]) * kv_bytes_;
  }

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
              send(rk(pos), rk(pos + 1), kv(s, pos - k), tag(task_kind::kv, s.group, static_cast<std::int32_t>(k)), {dep, own});
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
          kv_cur[i] = send(rk(pos), rk(pos - 1), kv(s, pos + k), tag(task_kind::kv, s.group, ki), {dep, kv_prev[i], dkv_prev[i]});
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
          dkv[i] = send(rk(pos), rk(pos - 1), kv(s, pos + k - 1), tag(task_kind::dkv, s.group, ki), {acc[i], kv_prev[i], dkv_prev[i]});
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
      home[i] = send(rk(pos), rk(pos - 1), kv(s, pos - 1), tag(task_kind::dkv, s.group, static_cast<std::int32_t>(G)),
                     {acc[i], kv_prev[i], dkv_prev[i]});
    }
    for (std::int64_t pos = 0; pos < G; ++pos) parts[static_cast<std::size_t>(rk(pos))].push_back(home[wrap(pos + 1, G)]);
  }

  //! Ring all-gather of K/V (G - 1 steps); returns per position the steps' arrivals.
  std::vector<std::vector<task_id>> gather(const ring_schedule& s, const std::vector<task_id>& start) {
    const std::int64_t G = s.size();
    const auto rk = [&](std::int64_t pos) { return s.ranks[wrap(pos, G)]; };
    std::vector<std::vector<task_id>> arrivals(static_cast<std::size_t>(G));
    std::vector<task_id> prev(static_cast<std::size_t>(G), no_task), cur(prev);
    for (std::int64_t k = 0; k + 1 < G; ++k) {
      for (std::int64_t pos = 0; pos < G; ++pos) {
        const task_id dep = k == 0 ? start[static_cast<std::size_t>(rk(pos))] : prev[wrap(pos - 1, G)];
        const task_id own = k == 0 ? no_task : prev[static_cast<std::size_t>(pos)];
        cur[static_cast<std::size_t>(pos)] =
            send(rk(pos), rk(pos + 1), kv(s, pos - k), tag(task_kind::kv, s.group, static_cast<std::int32_t>(k)), {dep, own});
        arrivals[wrap(pos + 1, G)].push_back(cur[static_cast<std::size_t>(pos)]);
      }
      std::swap(prev, cur);
    }
    return arrivals;
  }

  void gather_forward(const priced_ring& ring, const std::vector<task_id>& start, std::vector<std::vector<task_id>>& parts) {
    const ring_schedule& s = ring.schedule;
    auto arrivals = gather(s, start);
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
    auto arrivals = gather(s, start);  // K/V are gathered again for the backward
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
            send(rk(pos), rk(pos + 1), kv(s, pos - k - 1), tag(task_kind::dkv, s.group, static_cast<std::int32_t>(k)),
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
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
