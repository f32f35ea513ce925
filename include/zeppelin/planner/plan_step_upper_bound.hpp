// zeppelin/planner/plan_step_upper_bound.hpp
// An upper bound on the simulated step of a Ulysses or USP plan, from the plan alone: what lets
// the cost-driven planner (planner/cost_driven_planner.hpp) choose such a plan without simulating
// it when its upper bound is below every other candidate's lower bound (planner/plan_step_bound.hpp).
//   in : plan (on the CP view), batch, model, the view, cost model, the execution (sim_options)
//   out: seconds >= simulate(plan, batch, view, model, options, cost).step_time_s, or nothing
//        where the plan or execution is not one it covers:
//          - every rank of a micro-batch holds its tokens in at most ONE group, of two or more
//            ranks, all-to-all (Ulysses of degree u = ulysses_degree, and a ring of r = G / u
//            subgroups where u < G: USP), every sequence of a group whole in it; and whole
//            sequences alone on a rank (one shard each), which its local level computes after
//            its group's rounds;
//          - the in-order engine, no remapping, the direct router;
//          - every rank on a NIC of its own (a shared NIC carries the flows of two ranks, which
//            may be in different phases);
//          - a program make_program builds (not over program_options' default limits).
// The program of such a member (program/detail/all_to_all_collective.hpp) is a chain, per pass,
// on one in-order stream: forward, pack | all-to-all in | permute, clear O and LSE, round 0's
// launch | lane ring (the K/V of the subgroup before) | round 1's launch | ... | round r - 1's
// launch, pack home | all-to-all home | unpack, its local launch, its linear modules; the
// backward starts with its linear modules and adds, after the lanes' rings, r - 1 steps of
// reduce-scatter (the dK/dV partials), each followed by the add of what arrived. A segment
// posts each exchange after everything its stream has enqueued (program/detail/
// segment_writer.hpp) and every operation after an exchange waits for it, so no compute of a
// rank overlaps a flow of its own (no SM contention slows it); a rank posts its exchanges one
// after another and a flow starts once both ends posted it, so while an exchange's flows are in
// flight every flow on their ports belongs to it (each port belongs to one GPU). So, with
// stretch_k the most any member's compute between exchanges k - 1 and k takes and X_k a bound
// on exchange k once all its members have posted (sim/detail/flow_finish_bound.hpp), a pass
// takes at most sum_k stretch_k + sum_k X_k. Each layer takes at most that (simulate() scales
// one layer), and the micro-batches and the LM head add up as in simulate().
// Compute: each round's launches are priced exactly as the simulator prices them (the
// subgroup's blocks against the keys of the subgroup i - k, split into the program's CSR waves,
// lane heads: sim/detail/attention_call.hpp; one causal block per sequence where r = 1 or the
// rank holds it alone, all heads), and the copies that pack, permute, clear, add and unpack
// rows as the simulator prices the collective's operations (their bytes read and written at
// the memory bandwidth; the tests hold the whole bound within 0.1 - 2 % of the step). Flows: per pair and
// exchange, the bytes of the simulator's streams (sim/backend.hpp merges a stage's pieces to
// one peer by kind of rows: the forward's bundles in and O + LSE home, the backward's bundle +
// LSE in, dQ and dK/dV home as two flows; K and V around a lane's ring as one, dK and dV
// partials as one). Tightness: equal to the simulated step to five digits for Ulysses and rings
// of two subgroups on the plans measured, up to 0.9 % above it for rings of 4 and 8
// (docs/planner.md); the result carries a relative 1e-9 for rounding, as the simulator adds
// the same terms in another order.
// Cost: O(shards log shards + G^2 per group and micro-batch + the blocks of its rounds), the
// exchanges' part (most of it at 1024 GPUs) about a third with fair_share_bound::all_flows_stay.
// Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/linear_flops.hpp>
#include <zeppelin/cost/link_model.hpp>
#include <zeppelin/program/build.hpp>
#include <zeppelin/program/launch_waves.hpp>
#include <zeppelin/program/detail/all_to_all_collective.hpp>
#include <zeppelin/program/wire_format.hpp>
#include <zeppelin/schedule/block_mask.hpp>
#include <zeppelin/schedule/group_layout.hpp>
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
#include <span>
#include <utility>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

// One micro-batch's all-to-all group: its members and each one's tokens, and its sequences.
struct ulysses_group {
  group_index group = no_group;
  std::vector<rank_index> members;
  std::vector<double> own;               // [position]: the member's tokens
  std::vector<sequence_index> sequences;  // whole in the group, ascending
  //! [position]: the whole sequences the member holds alone as well (its local level, which
  //! its stream runs after the group's)
  std::vector<std::vector<sequence_index>> alone;
};

// One micro-batch: its all-to-all groups, and the ranks that hold only whole sequences alone
// (the local level: one launch each, no communication).
struct ulysses_micro_batch {
  std::vector<ulysses_group> groups;
  std::vector<std::pair<rank_index, std::vector<sequence_index>>> local;
};

// The groups and local ranks of every micro-batch, or nothing when `p` is not a plan
// upper_bound covers (see the file comment). O(shards + micro-batches x (ranks + sequences) +
// the members of the groups it finds).
inline std::optional<std::vector<ulysses_micro_batch>> ulysses_groups_of(const plan& p, const batch& b) {
  const auto R = static_cast<std::size_t>(p.num_ranks());
  const auto M = static_cast<std::size_t>(p.micro_batches());
  const auto S = static_cast<std::size_t>(b.size());
  std::vector<std::int32_t> group_of(M * R, no_group);  // [micro-batch * R + rank]
  std::vector<double> own(M * R, 0.0);                   // [micro-batch * R + rank]: its tokens in its group
  std::vector<std::vector<sequence_index>> alone(M * R);  // [micro-batch * R + rank]: whole sequences held alone
  std::vector<token_count> held(S * M, 0);                // [sequence * M + micro-batch]: tokens in its group
  std::vector<std::int32_t> sequence_group(S * M, no_group);
  for (std::size_t r = 0; r < R; ++r)
    for (const shard& s : p.placements[r].shards) {
      const auto mb = static_cast<std::size_t>(s.micro_batch);
      if (s.group == no_group) {  // a sequence alone on the rank: whole in one shard
        if (s.range.begin != 0 || s.range.end != b.length(s.seq)) return std::nullopt;
        alone[mb * R + r].push_back(s.seq);
        continue;
      }
      std::int32_t& g = group_of[mb * R + r];
      std::int32_t& sg = sequence_group[static_cast<std::size_t>(s.seq) * M + mb];
      if ((g != no_group && g != s.group) || (sg != no_group && sg != s.group)) return std::nullopt;
      g = sg = s.group;
      own[mb * R + r] += static_cast<double>(s.range.size());
      held[static_cast<std::size_t>(s.seq) * M + mb] += s.range.size();
    }
  std::vector<ulysses_micro_batch> out(M);
  std::vector<std::int32_t> slot(p.groups.size());
  std::vector<std::size_t> holders;  // [slot]: the ranks holding the group's tokens in the micro-batch
  for (std::size_t mb = 0; mb < M; ++mb) {
    std::vector<ulysses_group>& groups = out[mb].groups;
    std::fill(slot.begin(), slot.end(), -1);
    holders.clear();
    for (std::size_t r = 0; r < R; ++r) {
      const std::int32_t g = group_of[mb * R + r];
      std::vector<sequence_index>& mine = alone[mb * R + r];
      if (g == no_group) {
        if (!mine.empty()) out[mb].local.emplace_back(static_cast<rank_index>(r), std::move(mine));
        continue;
      }
      if (slot[static_cast<std::size_t>(g)] >= 0) {
        ++holders[static_cast<std::size_t>(slot[static_cast<std::size_t>(g)])];
        continue;
      }
      const ring_group& group = p.groups[static_cast<std::size_t>(g)];
      if (group.collective != collective_kind::all_to_all || group.ranks.size() < 2) return std::nullopt;
      slot[static_cast<std::size_t>(g)] = static_cast<std::int32_t>(groups.size());
      holders.push_back(1);
      ulysses_group& u = groups.emplace_back();
      u.group = g;
      u.members = group.ranks;
      u.own.assign(group.ranks.size(), 0.0);
      u.alone.resize(group.ranks.size());
      for (std::size_t x = 0; x < group.ranks.size(); ++x)
        u.alone[x] = std::move(alone[mb * R + static_cast<std::size_t>(group.ranks[x])]);
    }
    // every rank holding a group's tokens is one of its members (a shard on a rank outside its
    // group is not a plan the bound covers)
    for (std::size_t k = 0; k < groups.size(); ++k) {
      ulysses_group& u = groups[k];
      std::size_t members_holding = 0;
      for (std::size_t x = 0; x < u.members.size(); ++x) {
        const std::size_t at = mb * R + static_cast<std::size_t>(u.members[x]);
        if (group_of[at] != u.group) continue;
        u.own[x] = own[at];
        ++members_holding;
      }
      if (members_holding != holders[k]) return std::nullopt;
    }
    for (std::size_t s = 0; s < S; ++s) {  // ascending: each group's sequences sorted
      const std::int32_t g = sequence_group[s * M + mb];
      if (g == no_group) continue;
      if (held[s * M + mb] != b.length(static_cast<sequence_index>(s))) return std::nullopt;
      groups[static_cast<std::size_t>(slot[static_cast<std::size_t>(g)])].sequences.push_back(static_cast<sequence_index>(s));
    }
  }
  return out;
}

// The causal launch of whole sequences (`sequences` of `b`) with `heads` heads.
inline call_cost whole_sequences_call(const batch& b, std::span<const sequence_index> sequences, const attention_time_model& model,
                                      std::int32_t heads, std::int32_t head_dim, std::vector<call_item>& items) {
  items.clear();
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const token_count n = b.length(sequences[i]);
    items.push_back({static_cast<std::int32_t>(i), sequences[i], {0, n}, n * (n + 1) / 2});
  }
  return price_call(items, model, heads, head_dim);
}

}  // namespace detail

//! See the file comment; `shares` chooses the exchanges' bound (sim/detail/flow_finish_bound.hpp:
//! all_flows_stay is about a third of its cost and a few per cent looser). Throws what the cost
//! model's tables throw for a bad model.
[[nodiscard]] inline std::optional<double> plan_step_upper_bound(const plan& p, const batch& b, const model_config& m, const topology& view,
                                                                 const sim_cost_model& cost, const sim_options& o,
                                                                 fair_share_bound shares = fair_share_bound::done_flows_leave) {
  if (o.engine != engine_policy::in_order || o.remap || !std::holds_alternative<direct_router>(o.router.policy)) return std::nullopt;
  {
    std::vector<char> nic_used(static_cast<std::size_t>(view.num_nics()), 0);
    for (rank_index r = 0; r < view.num_ranks(); ++r)
      if (std::exchange(nic_used[static_cast<std::size_t>(view.nic_of(r))], 1)) return std::nullopt;
  }
  const wire_format wire = wire_format::for_model(m);
  const auto micro_batches = detail::ulysses_groups_of(p, b);
  if (!micro_batches) return std::nullopt;
  {  // a program make_program would refuse has no step to bound
    std::int64_t member_rounds = 0;
    for (const detail::ulysses_micro_batch& mb : *micro_batches)
      for (const detail::ulysses_group& g : mb.groups)
        member_rounds += detail::member_rounds_of(collective_kind::all_to_all, static_cast<std::int64_t>(g.members.size()), wire);
    if (member_rounds > program_options{}.max_member_rounds) return std::nullopt;
  }

  const double bandwidth = view.gpu().memory_bandwidth;
  // bytes read plus bytes written, at the memory bandwidth, as the simulator prices them
  const auto memory_seconds = [&](double bytes) { return bandwidth > 0 ? bytes / bandwidth : 0.0; };
  const auto row = [&](row_kind k, std::int32_t heads) { return static_cast<double>(wire.row_bytes(k, heads)); };
  const double linear_flops = linear_forward_flops_per_token(m), head_flops = lm_head_flops_per_token(m) + lm_head_backward_flops_per_token(m);
  const double Q = row(row_kind::q, 0), L = row(row_kind::lse, 0);
  // a rank's linear modules (forward; the backward's are twice that) and its TP collectives
  const auto linear_of = [&](double tokens) { return cost.linear.seconds(tokens * linear_flops, view.gpu()); };
  const auto linear_backward_of = [&](double tokens) { return cost.linear.seconds(2 * tokens * linear_flops, view.gpu()); };
  const auto tp_of = [&](double tokens) {
    return o.tensor_parallel > 1 ? tensor_parallel_collectives_per_layer *
                                       tensor_parallel_collective_seconds(static_cast<token_count>(tokens), m, view, o.tensor_parallel)
                                 : 0.0;
  };
  // the event engine's ports (cost/link_model.hpp's ports_of) and their capacities
  const std::vector<double> capacity = detail::port_capacities(view);
  std::vector<detail::bounded_flow> flows;
  detail::flow_bound_scratch flow_scratch;
  std::vector<detail::link_endpoint> ends;  // [position]: a group's members, for their flows' ports
  // a pair of positions of a group and its flow's ports and latency (bytes 0), found once per group
  struct exchange_pair {
    std::int32_t from = 0, to = 0;
    detail::bounded_flow flow;
  };
  std::vector<exchange_pair> pairs;
  std::vector<detail::call_item> items;
  // a rank's local level: one launch of the whole sequences it holds alone, every head
  struct local_level {
    detail::call_cost call;
    double tokens = 0;
  };
  const auto local_level_of = [&](const std::vector<sequence_index>& sequences) {
    local_level out;
    for (const sequence_index s : sequences) out.tokens += static_cast<double>(b.length(s));
    if (!sequences.empty()) out.call = detail::whole_sequences_call(b, sequences, cost.attention, wire.heads, wire.head_dim, items);
    return out;
  };
  const auto pair_of = [&](std::int32_t from, std::int32_t to) {
    const detail::link_endpoint &a = ends[static_cast<std::size_t>(from)], &b = ends[static_cast<std::size_t>(to)];
    const detail::flow_ports ports = detail::ports_between(a, b, view);
    return exchange_pair{from, to,
                         {static_cast<std::int32_t>(ports.first), static_cast<std::int32_t>(ports.second), 0,
                          link_model::latency(detail::link_between(a, b), view)}};
  };
  // one exchange of the pairs [first, last): pair x's flows carry pair_bytes(x.from, x.to), each
  // one that moves bytes
  const auto exchange_bound = [&](std::size_t first, std::size_t last, auto&& pair_bytes) {
    flows.resize(std::max(flows.size(), 2 * (last - first)));  // at most two flows per pair
    std::size_t n = 0;
    for (std::size_t k = first; k < last; ++k)
      for (const double bytes : pair_bytes(pairs[k].from, pairs[k].to))
        if (bytes > 0) flows[n] = pairs[k].flow, flows[n++].bytes = bytes;
    return detail::flows_finish_bound(std::span(flows.data(), n), capacity, shares, flow_scratch);
  };

  double step = 0;
  for (std::size_t mb = 0; mb < micro_batches->size(); ++mb) {
    const detail::ulysses_micro_batch& micro_batch = (*micro_batches)[mb];
    double forward = 0, backward = 0, head = 0;
    for (const detail::ulysses_group& g : micro_batch.groups) {
      const auto G = static_cast<std::int32_t>(g.members.size());
      const std::int32_t u = detail::ulysses_degree(wire, G), r = G / u;
      const detail::lane_heads lane = detail::lane_of(wire, u, 0);
      const double q = row(row_kind::q, lane.heads), kv = row(row_kind::kv, lane.kv_heads), lse = row(row_kind::lse, lane.heads),
                   dkv = row(row_kind::dkv, lane.kv_heads);
      // every lane's K/V heads (replicated where lanes share a K/V head), packed or summed at home
      const double lanes_kv = row(row_kind::kv, u * lane.kv_heads), lanes_dkv = row(row_kind::dkv, u * lane.kv_heads);
      const auto own = [&](std::int32_t p) { return g.own[static_cast<std::size_t>(p)]; };
      const auto sub = [&](std::int32_t i) { return ((i % r) + r) % r; };
      ends.clear();
      for (const rank_index member : g.members) ends.push_back(detail::link_endpoint_of(member, view));
      // its exchanges' pairs: every two members of a subgroup (the all-to-alls), then every
      // member and its lane's member in the next subgroup (the lanes' rings, r > 1)
      pairs.clear();
      for (std::int32_t first = 0; first < G; first += u)
        for (std::int32_t from = first; from < first + u; ++from)
          for (std::int32_t to = first; to < first + u; ++to)
            if (from != to) pairs.push_back(pair_of(from, to));
      const std::size_t ring_pairs = pairs.size();
      for (std::int32_t from = 0; from < G && r > 1; ++from) pairs.push_back(pair_of(from, sub(from / u + 1) * u + from % u));
      std::vector<double> S(static_cast<std::size_t>(r), 0.0);  // [subgroup]: its tokens
      for (std::int32_t p = 0; p < G; ++p) S[static_cast<std::size_t>(p / u)] += own(p);
      double total = 0;
      for (const double t : S) total += t;
      const auto tokens_of = [&](std::int32_t i) { return S[static_cast<std::size_t>(sub(i))]; };

      // [subgroup][round]: the launch of its lanes against the keys of subgroup i - round, as
      // the program builds it (program/detail/all_to_all_collective.hpp) and the simulator prices it
      std::vector<std::vector<detail::call_cost>> launch(static_cast<std::size_t>(r));
      if (r == 1) {
        launch[0].push_back(detail::whole_sequences_call(b, g.sequences, cost.attention, lane.heads, wire.head_dim, items));
      } else {
        const group_layout layout = make_group_layout(p, b, g.group, static_cast<std::int32_t>(mb));
        std::vector<token_count> place(static_cast<std::size_t>(G) + 1, 0);
        for (std::int32_t x = 0; x < G; ++x) place[static_cast<std::size_t>(x) + 1] = place[static_cast<std::size_t>(x)] + layout.buffer_tokens[static_cast<std::size_t>(x)];
        const std::vector<sequence_index> shared = detail::shared_sequences(layout, u);
        std::vector<detail::subgroup_rows> subgroups;
        for (std::int32_t i = 0; i < r; ++i) subgroups.push_back(detail::subgroup_rows_of(layout, i * u, u, shared));
        for (std::int32_t i = 0; i < r; ++i)
          for (std::int32_t k = 0; k < r; ++k) {
            const std::int32_t origin = sub(i - k);
            const block_list blocks = detail::subgroup_blocks(subgroups[static_cast<std::size_t>(i)], subgroups[static_cast<std::size_t>(origin)],
                                                              place[static_cast<std::size_t>(origin * u)]);
            // the program splits a round's blocks into CSR waves, one launch each
            detail::call_cost round{};
            for (const std::vector<attention_block>& wave : make_launch_waves(blocks.items())) {
              items.clear();
              for (std::size_t x = 0; x < wave.size(); ++x)
                items.push_back({static_cast<std::int32_t>(x), wave[x].seq, wave[x].q, block_pairs(wave[x].q, wave[x].k, wave[x].mask)});
              const detail::call_cost c = detail::price_call(items, cost.attention, lane.heads, wire.head_dim);
              round.forward_s += c.forward_s;
              round.backward_s += c.backward_s;
            }
            launch[static_cast<std::size_t>(i)].push_back(round);
          }
      }

      // the exchanges of each pass, in order (see the file comment): the all-to-all in, the
      // lanes' rings (K/V), backward their reduce-scatter (dK/dV partials), the all-to-all home
      using two = std::array<double, 2>;
      const auto all_to_all = [&](auto&& pair_bytes) { return exchange_bound(0, ring_pairs, pair_bytes); };
      // member (i, j) sends member (i + 1, j) the rows of subgroup `passed(i)`, `per_row` bytes each
      const auto lane_ring = [&](auto&& passed, double per_row) {
        return exchange_bound(ring_pairs, pairs.size(),
                              [&](std::int32_t from, std::int32_t) { return std::array<double, 1>{tokens_of(passed(from / u)) * per_row}; });
      };
      double forward_exchanges = all_to_all([&](std::int32_t from, std::int32_t) { return two{own(from) * (q + 2 * kv), 0}; }) +
                                 all_to_all([&](std::int32_t, std::int32_t to) { return two{own(to) * (q + lse), 0}; });
      double backward_exchanges = all_to_all([&](std::int32_t from, std::int32_t) { return two{own(from) * (3 * q + 2 * kv + lse), 0}; }) +
                                  all_to_all([&](std::int32_t, std::int32_t to) { return two{own(to) * q, own(to) * 2 * dkv}; });
      for (std::int32_t k = 1; k < r; ++k) {
        const double ring = lane_ring([&](std::int32_t i) { return i - k + 1; }, 2 * kv);
        forward_exchanges += ring;
        backward_exchanges += ring;
      }
      for (std::int32_t t = 0; t + 1 < r; ++t) backward_exchanges += lane_ring([&](std::int32_t i) { return i - t - 1; }, 2 * dkv);

      // per member, the compute between its exchanges, longest first summed over the
      // stretches: forward pack | permute in, clear O and LSE, round 0 | round k | ... the last
      // round, O and LSE back to member-major | unpack, linear; backward linear, pack | permute
      // in, clear dQ and the dK/dV partials (every subgroup's rows), round 0 | ... | the last
      // round | add the received partials | ... dQ, dK, dV back | add home. A copy reads and
      // writes its rows, a clear writes them, an add reads two and writes one.
      std::vector<double> forward_stretch(static_cast<std::size_t>(r) + 2, 0.0), backward_stretch(2 * static_cast<std::size_t>(r) + 1, 0.0);
      const auto longest = [](std::vector<double>& stretch, std::size_t at, double seconds) { stretch[at] = std::max(stretch[at], seconds); };
      for (std::int32_t x = 0; x < G; ++x) {
        const std::int32_t i = x / u;
        const double mine = own(x), Si = tokens_of(i);
        const auto& rounds = launch[static_cast<std::size_t>(i)];
        // its sequences alone, launched after the group's work; its linear modules take both
        const local_level local = local_level_of(g.alone[static_cast<std::size_t>(x)]);
        const double linear_tokens = mine + local.tokens;
        const double tp = tp_of(linear_tokens);
        // forward
        longest(forward_stretch, 0, memory_seconds(2 * mine * (Q + 2 * lanes_kv)));
        for (std::int32_t k = 0; k < r; ++k) {
          double seconds = rounds[static_cast<std::size_t>(k)].forward_s;
          if (k == 0) seconds += memory_seconds(2 * Si * (q + 2 * kv) + Si * (q + lse));
          if (k == r - 1) seconds += memory_seconds(2 * Si * (q + lse));
          longest(forward_stretch, static_cast<std::size_t>(k) + 1, seconds);
        }
        longest(forward_stretch, static_cast<std::size_t>(r) + 1,
                memory_seconds(2 * mine * (Q + L)) + local.call.forward_s + linear_of(linear_tokens) + tp);
        // backward
        longest(backward_stretch, 0, linear_backward_of(linear_tokens) + tp + memory_seconds(2 * mine * (3 * Q + 2 * lanes_kv + L)));
        for (std::int32_t k = 0; k < r; ++k) {
          double seconds = rounds[static_cast<std::size_t>(k)].backward_s;
          if (k == 0) seconds += memory_seconds(2 * Si * (3 * q + 2 * kv + lse) + Si * q + total * 2 * dkv);
          if (r == 1) seconds += memory_seconds(2 * Si * (q + 2 * dkv));
          longest(backward_stretch, static_cast<std::size_t>(k) + 1, seconds);
        }
        for (std::int32_t t = 0; t + 1 < r; ++t) {
          double seconds = memory_seconds(3 * tokens_of(i - t - 2) * 2 * dkv);
          if (t + 2 == r) seconds += memory_seconds(2 * Si * (q + 2 * dkv));
          longest(backward_stretch, static_cast<std::size_t>(r + t) + 1, seconds);
        }
        longest(backward_stretch, 2 * static_cast<std::size_t>(r), memory_seconds(3 * mine * (Q + 2 * lanes_dkv)) + local.call.backward_s);
        head = std::max(head, cost.linear.seconds(linear_tokens * head_flops, view.gpu()));
      }
      double forward_compute = 0, backward_compute = 0;
      for (const double x : forward_stretch) forward_compute += x;
      for (const double x : backward_stretch) backward_compute += x;
      forward = std::max(forward, forward_compute + forward_exchanges);
      backward = std::max(backward, backward_compute + backward_exchanges);
    }
    // a rank holding only whole sequences alone: one launch of them, no communication
    for (const auto& [rank, sequences] : micro_batch.local) {
      const local_level local = local_level_of(sequences);
      const double tp = tp_of(local.tokens);
      forward = std::max(forward, local.call.forward_s + linear_of(local.tokens) + tp);
      backward = std::max(backward, linear_backward_of(local.tokens) + tp + local.call.backward_s);
      head = std::max(head, cost.linear.seconds(local.tokens * head_flops, view.gpu()));
    }
    step += static_cast<double>(m.layers) * (forward + backward) + head;
  }
  // the simulator sums the same terms in another order: a relative 1e-9 covers the rounding
  return step * (1 + 1e-9);
}

ZEPPELIN_NAMESPACE_END
