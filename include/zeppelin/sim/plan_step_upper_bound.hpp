// zeppelin/sim/plan_step_upper_bound.hpp
// An upper bound on the simulated step of a Ulysses plan, from the plan alone: what lets the
// cost-driven planner (sim/cost_driven_planner.hpp) choose such a plan without simulating it
// when its upper bound is below every other candidate's lower bound (sim/plan_step_bound.hpp).
//   in : plan (on the CP view), batch, model, the view, cost model, the execution (sim_options)
//   out: seconds >= simulate(plan, batch, view, model, options, cost).step_time_s, or nothing
//        where the plan or execution is not one it covers:
//          - every rank of a micro-batch with tokens holds them in ONE group of two or more
//            ranks, all-to-all, of Ulysses degree its size (no USP ring, no sequence alone on a
//            rank), and every sequence of a group is whole in it;
//          - the in-order engine, no remapping, the direct router;
//          - every rank on a NIC of its own (a shared NIC carries the flows of two ranks, which
//            may be in different phases);
//          - a program make_program builds (not over program_options' default limits).
// The program of such a member (program/detail/all_to_all_collective.hpp) is a chain, per pass:
// compute (pack) -> all-to-all in -> compute (unpack, attention of its lane, pack) -> all-to-all
// home -> compute (unpack), the linear modules before (backward) or after (forward) it, on one
// in-order stream. Every compute operation after an exchange waits for it, and a member posts
// its next exchange only when its last one, every flow it sends or receives, has arrived: no
// compute of a rank overlaps a flow of its own (so no SM contention slows it), and while an
// exchange's flows are in flight no flow of another exchange crosses their ports (each port
// belongs to one GPU). So, with stretch_k the most any member's compute before exchange k
// takes and X_k a bound on the exchange once all its members have posted
// (sim/detail/flow_finish_bound.hpp), a pass takes at most sum_k stretch_k + sum_k X_k.
// Each layer takes at most that (simulate() scales one layer), and the micro-batches and the
// LM head add up as in simulate().
// Compute: the lane's launch is priced exactly as the simulator prices it (one causal block per
// sequence, the lane's heads: sim/detail/attention_call.hpp), and the copies that pack, unpack
// and clear rows as the simulator prices the collective's operations (their bytes read and
// written at the memory bandwidth; a test checks the sums against the built program). Flows: per pair and exchange, the
// bytes of the simulator's streams (sim/backend.hpp merges a stage's pieces to one peer by kind
// of rows: the forward's bundles in and O + LSE home, the backward's bundle + LSE in, dQ and
// dK/dV home as two flows). Tightness: equal to the simulated step to five digits on the
// plans measured (docs/planner.md); the result carries a relative 1e-9 for rounding, as the
// simulator adds the same terms in another order.
// Cost: O(shards + G^2 per group and micro-batch). Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/linear_flops.hpp>
#include <zeppelin/cost/link_model.hpp>
#include <zeppelin/program/build.hpp>
#include <zeppelin/program/detail/all_to_all_collective.hpp>
#include <zeppelin/program/wire_format.hpp>
#include <zeppelin/sim/cost_model.hpp>
#include <zeppelin/sim/detail/attention_call.hpp>
#include <zeppelin/sim/detail/flow_finish_bound.hpp>
#include <zeppelin/sim/options.hpp>
#include <zeppelin/sim/tensor_parallel.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

// One micro-batch's all-to-all group: its members and each one's tokens, and its sequences.
struct ulysses_group {
  std::vector<rank_index> members;
  std::vector<double> own;               // [position]: the member's tokens
  std::vector<sequence_index> sequences;  // whole in the group, ascending
};

// The groups of every micro-batch, or nothing when `p` is not a plan upper_bound covers
// (see the file comment).
inline std::optional<std::vector<std::vector<ulysses_group>>> ulysses_groups_of(const plan& p, const batch& b,
                                                                                 const wire_format& wire) {
  const auto R = static_cast<std::size_t>(p.num_ranks());
  const auto M = static_cast<std::size_t>(p.micro_batches());
  std::vector<std::int32_t> group_of(M * R, no_group);  // [micro-batch * R + rank]
  std::vector<token_count> held(b.size() * M, 0);       // [sequence * M + micro-batch]: tokens in its group
  std::vector<std::int32_t> sequence_group(b.size() * M, no_group);
  for (std::size_t r = 0; r < R; ++r)
    for (const shard& s : p.placements[r].shards) {
      if (s.group == no_group) return std::nullopt;
      const auto mb = static_cast<std::size_t>(s.micro_batch);
      std::int32_t& g = group_of[mb * R + r];
      std::int32_t& sg = sequence_group[static_cast<std::size_t>(s.seq) * M + mb];
      if ((g != no_group && g != s.group) || (sg != no_group && sg != s.group)) return std::nullopt;
      g = sg = s.group;
      held[static_cast<std::size_t>(s.seq) * M + mb] += s.range.size();
    }
  std::vector<std::vector<ulysses_group>> out(M);
  std::vector<std::int32_t> slot(p.groups.size());
  for (std::size_t mb = 0; mb < M; ++mb) {
    std::fill(slot.begin(), slot.end(), -1);
    for (std::size_t r = 0; r < R; ++r) {
      const std::int32_t g = group_of[mb * R + r];
      if (g == no_group || slot[static_cast<std::size_t>(g)] >= 0) continue;
      const ring_group& group = p.groups[static_cast<std::size_t>(g)];
      const auto G = static_cast<std::int32_t>(group.ranks.size());
      if (group.collective != collective_kind::all_to_all || G < 2 || ulysses_degree(wire, G) != G) return std::nullopt;
      slot[static_cast<std::size_t>(g)] = static_cast<std::int32_t>(out[mb].size());
      ulysses_group& u = out[mb].emplace_back();
      u.members = group.ranks;
      u.own.assign(group.ranks.size(), 0.0);
    }
    for (std::size_t r = 0; r < R; ++r)
      for (const shard& s : p.placements[r].shards) {
        if (static_cast<std::size_t>(s.micro_batch) != mb) continue;
        ulysses_group& u = out[mb][static_cast<std::size_t>(slot[static_cast<std::size_t>(s.group)])];
        const auto at = std::find(u.members.begin(), u.members.end(), static_cast<rank_index>(r));
        if (at == u.members.end()) return std::nullopt;  // a shard on a rank outside its group
        u.own[static_cast<std::size_t>(at - u.members.begin())] += static_cast<double>(s.range.size());
        if (std::find(u.sequences.begin(), u.sequences.end(), s.seq) == u.sequences.end()) u.sequences.push_back(s.seq);
      }
    for (ulysses_group& u : out[mb]) {
      std::sort(u.sequences.begin(), u.sequences.end());
      for (const sequence_index s : u.sequences)
        if (held[static_cast<std::size_t>(s) * M + mb] != b.length(s)) return std::nullopt;
    }
  }
  return out;
}

}  // namespace detail

//! See the file comment. Throws what the cost model's tables throw for a bad model.
[[nodiscard]] inline std::optional<double> plan_step_upper_bound(const plan& p, const batch& b, const model_config& m, const topology& view,
                                                                 const sim_cost_model& cost, const sim_options& o) {
  if (o.engine != engine_policy::in_order || o.remap || !std::holds_alternative<direct_router>(o.router.policy)) return std::nullopt;
  {
    std::vector<char> nic_used(static_cast<std::size_t>(view.num_nics()), 0);
    for (rank_index r = 0; r < view.num_ranks(); ++r)
      if (std::exchange(nic_used[static_cast<std::size_t>(view.nic_of(r))], 1)) return std::nullopt;
  }
  const wire_format wire = wire_format::for_model(m);
  const auto groups = detail::ulysses_groups_of(p, b, wire);
  if (!groups) return std::nullopt;
  {  // a program make_program would refuse has no step to bound
    std::int64_t member_rounds = 0;
    for (const auto& micro_batch : *groups)
      for (const detail::ulysses_group& g : micro_batch)
        member_rounds += detail::member_rounds_of(collective_kind::all_to_all, static_cast<std::int64_t>(g.members.size()), wire);
    if (member_rounds > program_options{}.max_member_rounds) return std::nullopt;
  }

  const double bandwidth = view.gpu().memory_bandwidth;
  // bytes read plus bytes written, at the memory bandwidth, as the simulator prices them
  const auto memory_seconds = [&](double bytes) { return bandwidth > 0 ? bytes / bandwidth : 0.0; };
  const auto row = [&](row_kind k, std::int32_t heads) { return static_cast<double>(wire.row_bytes(k, heads)); };
  const double linear_flops = linear_forward_flops_per_token(m), head_flops = lm_head_flops_per_token(m) + lm_head_backward_flops_per_token(m);
  // the event engine's ports (cost/link_model.hpp's ports_of) and their capacities
  const std::vector<double> capacity = detail::port_capacities(view);
  std::vector<detail::bounded_flow> flows, pairs;  // pairs[i * G + o]: the ports and latency of i -> o
  std::vector<detail::call_item> items;
  double step = 0;
  for (const std::vector<detail::ulysses_group>& micro_batch : *groups) {
    double forward = 0, backward = 0, head = 0;
    for (const detail::ulysses_group& g : micro_batch) {
      const auto G = static_cast<std::int32_t>(g.members.size());
      const detail::lane_heads lane = detail::lane_of(wire, G, 0);
      const double q = row(row_kind::q, lane.heads), kv = row(row_kind::kv, lane.kv_heads), lse = row(row_kind::lse, lane.heads),
                   dkv = row(row_kind::dkv, lane.kv_heads);
      const double Q = row(row_kind::q, 0), L = row(row_kind::lse, 0);
      // every lane's K/V heads (replicated where lanes share a K/V head), packed or summed at home
      const double lanes_kv = row(row_kind::kv, G * lane.kv_heads), lanes_dkv = row(row_kind::dkv, G * lane.kv_heads);
      double S = 0;
      for (const double t : g.own) S += t;
      items.clear();
      for (std::size_t i = 0; i < g.sequences.size(); ++i) {
        const token_count n = b.length(g.sequences[i]);
        items.push_back({static_cast<std::int32_t>(i), g.sequences[i], {0, n}, n * (n + 1) / 2});
      }
      const detail::call_cost lane_launch = detail::price_call(items, cost.attention, lane.heads, wire.head_dim);

      // the flows of one exchange, (i -> o) for i != o: bytes of the pair, per kind of rows
      pairs.assign(static_cast<std::size_t>(G) * static_cast<std::size_t>(G), {});
      for (std::int32_t i = 0; i < G; ++i)
        for (std::int32_t o = 0; o < G; ++o) {
          if (i == o) continue;
          const link_flow pair{g.members[static_cast<std::size_t>(i)], g.members[static_cast<std::size_t>(o)], 1};
          const detail::flow_ports ports = detail::ports_of(pair, view);
          pairs[static_cast<std::size_t>(i * G + o)] = {static_cast<std::int32_t>(ports.first), static_cast<std::int32_t>(ports.second), 0,
                                                        link_model::latency(view.between(pair.source, pair.destination), view)};
        }
      const auto exchange = [&](auto&& pair_bytes) {
        flows.clear();
        for (std::int32_t i = 0; i < G; ++i)
          for (std::int32_t o = 0; o < G; ++o) {
            if (i == o) continue;
            for (const double bytes : pair_bytes(i, o))
              if (bytes > 0) {
                detail::bounded_flow& f = flows.emplace_back(pairs[static_cast<std::size_t>(i * G + o)]);
                f.bytes = bytes;
              }
          }
        return detail::flows_finish_bound(flows, capacity);
      };
      const auto own = [&](std::int32_t i) { return g.own[static_cast<std::size_t>(i)]; };
      using two = std::array<double, 2>;
      const double in_forward = exchange([&](std::int32_t i, std::int32_t) { return two{own(i) * (q + 2 * kv), 0}; });
      const double home_forward = exchange([&](std::int32_t, std::int32_t o) { return two{own(o) * (q + lse), 0}; });
      const double in_backward = exchange([&](std::int32_t i, std::int32_t) { return two{own(i) * (3 * q + 2 * kv + lse), 0}; });
      const double home_backward = exchange([&](std::int32_t, std::int32_t o) { return two{own(o) * q, own(o) * 2 * dkv}; });

      // the most any member's compute takes before, between and after the exchanges
      double stretch[2][3] = {{0, 0, 0}, {0, 0, 0}};
      for (std::int32_t i = 0; i < G; ++i) {
        const double mine = own(i);
        const double linear = cost.linear.seconds(mine * linear_flops, view.gpu());
        const double tp = o.tensor_parallel > 1 ? tensor_parallel_collectives_per_layer *
                                                      tensor_parallel_collective_seconds(static_cast<token_count>(mine), m, view, o.tensor_parallel)
                                                : 0.0;
        // forward: pack Q, K, V (every lane's heads); unpack the lane's rows, clear and fill
        // its O and LSE, pack them home; unpack every lane's O and LSE. Backward: pack Q, K, V,
        // O, dO, LSE; unpack, clear dQ and the dK/dV partials, pack them home; add every lane's
        // dQ, dK, dV. A copy reads and writes its rows, a clear writes them, an add reads two.
        const double f[3] = {memory_seconds(2 * mine * (Q + 2 * lanes_kv)),
                             memory_seconds(2 * S * (q + 2 * kv) + 3 * S * (q + lse)) + lane_launch.forward_s,
                             memory_seconds(2 * mine * (Q + L)) + linear + tp};
        const double bw[3] = {cost.linear.seconds(2 * mine * linear_flops, view.gpu()) + tp +
                                  memory_seconds(2 * mine * (3 * Q + 2 * lanes_kv + L)),
                              memory_seconds(2 * S * (3 * q + 2 * kv + lse) + 3 * S * (q + 2 * dkv)) + lane_launch.backward_s,
                              memory_seconds(3 * mine * (Q + 2 * lanes_dkv))};
        for (int k = 0; k < 3; ++k) stretch[0][k] = std::max(stretch[0][k], f[k]), stretch[1][k] = std::max(stretch[1][k], bw[k]);
        head = std::max(head, cost.linear.seconds(mine * head_flops, view.gpu()));
      }
      forward = std::max(forward, stretch[0][0] + in_forward + stretch[0][1] + home_forward + stretch[0][2]);
      backward = std::max(backward, stretch[1][0] + in_backward + stretch[1][1] + home_backward + stretch[1][2]);
    }
    step += static_cast<double>(m.layers) * (forward + backward) + head;
  }
  // the simulator sums the same terms in another order: a relative 1e-9 covers the rounding
  return step * (1 + 1e-9);
}

ZEPPELIN_NAMESPACE_END
