// zeppelin/planner/plan_step_bound.hpp
// A lower bound on the simulated step of ONE plan: the work its busiest ranks must execute,
// at the best modelled rates, or the bytes its busiest receivers must take in, at the most
// their ports can take, whichever is larger. The cost-driven planner
// (planner/cost_driven_planner.hpp) simulates its candidates in order of this bound and stops
// when the next bound reaches the best step found, without changing its choice.
//   in : plan (on the CP view), batch, model, the view, cost model, whether the linear modules
//        run in a token-balanced layout (remapping on), and which ports bytes from other
//        nodes may enter a rank through (any NIC of its node, or its own NIC: the direct router)
//   out: seconds <= simulate(...).step_time_s for every execution of the plan of that kind
// Per micro-batch (the micro-batches run one after another), the larger of two bounds:
// Work (forward + backward + LM head):
//   - a rank's attention: the causal pairs of the queries it holds, of sequences alone on it or
//     in a ring or all-gather group (each such shard attends to every earlier key of its
//     sequence, on that rank), each set of pairs that one launch or several may compute at
//     most at the rate the tables give a launch of that set's size (sim/detail/
//     launch_set_bound.hpp: the calls of a ring member in one round can be small and slow);
//   - an all-to-all (Ulysses) group spreads its pairs over its members by heads, so only the
//     group's total is known: its busiest member carries at least the mean, over the members,
//     of (their other work) + (the group's pairs) / (members);
//   - the linear modules: the rank's tokens, or the micro-batch's mean tokens per rank when
//     remapping balances them.
//   Each pair and token is priced as step_lower_bound prices the whole batch (sim/lower_bound.hpp:
//   exact FLOPs at the tables' best rates), times the slowdown of its launch set's size (at
//   least 1), so this part is at least step_lower_bound.
//   - SM contention (sim/sm_contention.hpp): a rank's compute runs at (1 - f) of its speed
//     while it is an end of a flow in flight, which it is at least for the time B its own
//     ports take to bring its bytes in (below). With W its work, C its compute's busy time and
//     o the part of C inside those flows, C = W + f o and the pass lasts at least C + B - o
//     >= W + f B (o <= B). So a rank, and the mean of an all-to-all group, counts W + f B.
//     Only without tensor parallelism (bound_prices::comm_slowdown): a TP collective holds
//     the stream at full speed.
// Bytes in (forward, then backward; each layer the same), what the collectives must deliver
// to a member whatever the router does (program/detail/*_collective.hpp):
//   - ring and all-gather groups: the K and V rows of every other member, in each pass; in a
//     ring's backward the dK/dV accumulator of every member, its own coming home last
//     (program/detail/ring_collective.hpp), in an all-gather's the partials of every member
//     but its predecessor in the reduce-scatter (program/detail/all_gather_collective.hpp);
//   - all-to-all groups of Ulysses degree u: from the other members of its subgroup, their
//     rows of its lane's heads (forward Q, K, V; backward Q, K, V, O, dO, LSE), and from the
//     u - 1 other lanes its own rows' outputs (forward O, LSE; backward dQ, dK, dV); when the
//     group is a ring of r = G / u subgroups (USP), from its predecessor in its lane's ring its
//     lane's K/V of the r - 1 other subgroups (each pass) and the dK/dV partials of r - 1
//     subgroups (backward).
//   A byte reaches a rank through its NVLink ingress port or its NIC's receive port (the
//   simulator's ports, sim/event_engine.hpp; a proxy's last leg is an NVLink flow), so a rank
//   takes them in no faster than the two bandwidths together. And a byte from another node
//   enters a node through one of its NICs' receive ports: a ring or an all-gather relays
//   every origin's K/V member to member along every ring edge but the one into the origin, so
//   each edge from another node brings in the K/V of all members but its head; an all-to-all
//   member's rows from other nodes come in once per receiving member. The busier of the
//   receiving ranks and nodes bounds each pass; phases run one after another, so the bounds of
//   the forward and the backward add up. Under the direct router (inter_node_path::own_nic)
//   every byte takes one port: a byte from the rank's node its NVLink ingress, a byte from
//   another node the receive port of the rank's own NIC, which the GPUs mapped to that NIC
//   share; so the busiest NVLink ingress and the busiest NIC bound the pass as well (an
//   unrouted ring's edge between nodes brings all its K/V through one NIC).
// Serial (all-gather groups): a member computes its group's blocks only once it holds every
// origin's K and V, after the last gather step (program/detail/all_gather_collective.hpp),
// its first reduce-scatter step sends a partial its launch computed (and a rank posts its
// exchanges one after another, a flow starting once both ends have posted it), and its linear
// modules follow its attention (forward) or precede the gather (backward, a segment starts
// after the linear modules); so such a rank needs, one after another, the time to take in the
// gathered K/V of each pass, its pairs of the group, its linear work and the time to take in
// the backward's partials.
// The bytes part is what separates layouts whose work is equally balanced: a million one-token
// sequences on 64 GPUs cost every layout the same work, and TE CP's rings of 64 the same K/V
// pass as for long sequences. Cost: O(shards + group members). Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cost/layout_totals.hpp>
#include <zeppelin/cost/step_work.hpp>
#include <zeppelin/planner/detail/launch_set_bound.hpp>
#include <zeppelin/program/detail/all_to_all_collective.hpp>
#include <zeppelin/program/options.hpp>
#include <zeppelin/program/wire_format.hpp>
#include <zeppelin/sim/cost_model.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Whether the linear modules run in the plan's attention layout or a token-balanced one.
enum class linear_layout_kind : std::uint8_t { attention_layout, token_balanced };

//! Through which ports the bytes a rank receives from other nodes may enter it.
enum class inter_node_path : std::uint8_t {
  any_nic_of_node,  //!< any NIC of its node, relayed over NVLink by a proxy (true of every router)
  own_nic,          //!< its own NIC's receive port, and same-node bytes its NVLink ingress (the direct router)
};

//! The path a router's pieces take: the direct router sends every payload on its own path.
[[nodiscard]] inline inter_node_path inter_node_path_of(const any_router& r) noexcept {
  return std::holds_alternative<direct_router>(r.policy) ? inter_node_path::own_nic : inter_node_path::any_nic_of_node;
}

//! What one causal pair, one token and one byte into a rank cost at the best modelled rates,
//! and the batch's perfect-balance bound: the per-batch part of plan_step_bound, computed once
//! when many plans of the same batch are bounded (the cost-driven planner).
struct bound_prices {
  double per_pair = 0;      //!< seconds per causal pair, forward + backward, every layer
  double per_token = 0;     //!< seconds of linear work per token, every layer and the LM head
  double balanced = 0;      //!< step_lower_bound of the batch
  double per_byte_in = 0;   //!< seconds per byte of one layer into one rank, every layer (layers / its ports' bandwidth)
  double per_byte_into_node = 0;  //!< seconds per byte of one layer into one node from others (layers / its NICs' bandwidth)
  double per_byte_nvlink = 0;     //!< seconds per byte of one layer through one NVLink ingress port (layers / its bandwidth)
  double per_byte_nic = 0;        //!< seconds per byte of one layer through one NIC receive port (layers / its bandwidth)
  std::vector<std::int32_t> nic_of;  //!< [rank]: the view's NIC of the rank's GPU
  wire_format wire{};       //!< the model's rows: bytes per row of each kind, heads and lanes
  //! how much slower than per_pair a launch of a given size runs at least (the rate tables)
  detail::launch_slowdown slowdown{};
  //! (query shard, key shard) pairs of one level that its launch sets may pair up, O(them),
  //! about 20 ns each; a level with more, and every level when 0, prices its pairs at the
  //! best rate, O(shards)
  std::size_t max_shard_pairs = std::size_t{1} << 25;
  //! How many ranks, the busiest at the best rate (ties: the lower rank), have their launches
  //! priced by launch sets; the others keep the best rate. One costs a wide ring's bound the
  //! pairs of one member instead of all of them, and on a ring whose members are alike it is
  //! the bound of all of them: the cost-driven planner asks for it before the whole one.
  std::size_t priced_ranks = std::numeric_limits<std::size_t>::max();
  //! The compute speed a rank loses while it is the end of a flow in flight (sim/sm_contention.hpp),
  //! so at least for as long as its bytes take to come in; 0 where some of its compute tasks
  //! keep their speed then (tensor-parallel collectives), which voids the argument.
  double comm_slowdown = 0;
};

//! The prices of `b` on `view` for executions with `tensor_parallel` GPUs per CP rank (the SM
//! contention term needs 1).
[[nodiscard]] inline bound_prices bound_prices_for(const batch& b, const model_config& m, const topology& view,
                                                   const sim_cost_model& cost, std::int32_t tensor_parallel = 1) {
  const step_work work = estimate_step_work(b, m, view.gpu(), cost.attention, cost.linear);
  double total_pairs = 0;
  for (const token_count len : b.lengths()) total_pairs += static_cast<double>(causal_pairs(len));
  const double tokens = static_cast<double>(b.total_tokens());
  const double ingress = view.intra_node_link().bandwidth + view.nic_link().bandwidth;
  std::vector<std::int32_t> nic_of(static_cast<std::size_t>(view.num_ranks()));
  for (rank_index r = 0; r < view.num_ranks(); ++r) nic_of[static_cast<std::size_t>(r)] = view.nic_of(r);
  const double forward_seconds = work.attention_forward_flops / work.best_attention_forward_rate,
               backward_seconds = work.attention_backward_flops / work.best_attention_backward_rate;
  return {.per_pair = total_pairs > 0 ? (forward_seconds + backward_seconds) / total_pairs : 0.0,
          .per_token = tokens > 0 ? work.linear_flops() / work.linear_rate / tokens : 0.0,
          .balanced = work.balanced_lower_bound(view.num_ranks()),
          .per_byte_in = static_cast<double>(m.layers) / ingress,
          .per_byte_into_node = static_cast<double>(m.layers) / (view.nics_per_node() * view.nic_link().bandwidth),
          .per_byte_nvlink = static_cast<double>(m.layers) / view.intra_node_link().bandwidth,
          .per_byte_nic = static_cast<double>(m.layers) / view.nic_link().bandwidth,
          .nic_of = std::move(nic_of),
          .wire = wire_format::for_model(m),
          .slowdown = {cost.attention, forward_seconds + backward_seconds > 0 ? forward_seconds / (forward_seconds + backward_seconds) : 1.0},
          .comm_slowdown = tensor_parallel == 1 ? cost.contention.slowdown(view.gpu()) : 0.0};
}

namespace detail {

//! Bytes of one layer of one pass that the collectives must deliver to each rank in each
//! micro-batch, [micro-batch * ranks + rank] (see the file comment); a node takes in the remote
//! bytes of its ranks.
struct delivered_bytes {
  std::vector<double> local;   //!< from ranks of its node
  std::vector<double> remote;  //!< from other nodes
  //! of those, the K/V of all-gather groups (a member computes its group's blocks only after
  //! all of them arrived)
  std::vector<double> gathered_local, gathered_remote;
  //! of those, the dK/dV partials an all-gather group's reduce-scatter brings (a member posts
  //! it only after its launch)
  std::vector<double> scattered_local, scattered_remote;
  //! of those, what a member of an all-to-all group of Ulysses degree >= 2 takes in before its
  //! lane's attention (the rows of its lane's heads) and after it (its own rows' outputs of the
  //! other lanes)
  std::vector<double> lane_local, lane_remote, home_local, home_remote;
};

//! What the collectives of layout `t` must deliver, [pass] (see the file comment).
[[nodiscard]] inline std::array<delivered_bytes, 2> collective_bytes_in(const layout_totals& t, const wire_format& wire) {
  const std::size_t ranks = t.ranks;
  const std::int32_t per_node = std::max(1, t.gpus_per_node);
  const auto node_of = [&](rank_index r) { return static_cast<std::size_t>(r / per_node); };
  std::array<delivered_bytes, 2> in;
  for (delivered_bytes& d : in)
    for (std::vector<double>* v : {&d.local, &d.remote, &d.gathered_local, &d.gathered_remote, &d.scattered_local, &d.scattered_remote,
                                   &d.lane_local, &d.lane_remote, &d.home_local, &d.home_remote})
      v->assign(static_cast<std::size_t>(t.micro_batches) * ranks, 0.0);
  const auto bytes = [&](row_kind k, std::int32_t heads) { return static_cast<double>(wire.row_bytes(k, heads)); };
  std::vector<double> mine;  // [position]: tokens of the member's shards in the group
  std::vector<double> subgroup_tokens;  // [subgroup] of an all-to-all group: its members' tokens
  // the members [first, last) of a group per node: (node, their tokens, how many), by node
  struct node_share {
    std::size_t node;
    double tokens;
    std::int32_t members;
  };
  std::vector<node_share> on_node;
  const auto share_by_node = [&](const std::vector<rank_index>& members, std::int32_t first, std::int32_t last) {
    on_node.clear();
    for (std::int32_t pos = first; pos < last; ++pos)
      on_node.push_back({node_of(members[static_cast<std::size_t>(pos)]), mine[static_cast<std::size_t>(pos)], 1});
    std::sort(on_node.begin(), on_node.end(), [](const node_share& a, const node_share& b) { return a.node < b.node; });
    std::size_t out = 0;
    for (std::size_t i = 0; i < on_node.size(); ++i)
      if (out > 0 && on_node[out - 1].node == on_node[i].node) on_node[out - 1].tokens += on_node[i].tokens, ++on_node[out - 1].members;
      else on_node[out++] = on_node[i];
    on_node.resize(out);
  };
  const auto share_of = [&](std::size_t node) {
    return *std::lower_bound(on_node.begin(), on_node.end(), node, [](const node_share& a, std::size_t n) { return a.node < n; });
  };
  for (std::size_t g = 0; g < t.groups.size(); ++g) {
    const auto& members = t.groups[g].ranks;
    const auto G = static_cast<std::int32_t>(members.size());
    if (G < 2) continue;
    // what the group's collective delivers in the micro-batch of ranks [base, base + ranks), for
    // the tokens `mine` of it
    const auto deliver = [&](std::size_t base) {
      std::array<delivered_bytes, 2>& at = in;
      if (t.groups[g].collective != collective_kind::all_to_all) {
        double total = 0;
        for (const double t : mine) total += t;
        const double kv = 2 * bytes(row_kind::kv, 0), dkv = 2 * bytes(row_kind::dkv, 0);
        const bool gathered = t.groups[g].collective == collective_kind::all_gather;
        // `carried` bytes over the edge from position `from` into `to`; an all-gather member's
        // are gathered before its launch or scattered after it
        enum class when : std::uint8_t { any, before_launch, after_launch };
        const auto edge = [&](delivered_bytes& d, std::int32_t from, std::int32_t to, double carried, when w) {
          const rank_index b = members[static_cast<std::size_t>(to)];
          const bool near = node_of(members[static_cast<std::size_t>(from)]) == node_of(b);
          const std::size_t at_b = base + static_cast<std::size_t>(b);
          (near ? d.local : d.remote)[at_b] += carried;
          if (w == when::before_launch) (near ? d.gathered_local : d.gathered_remote)[at_b] += carried;
          if (w == when::after_launch) (near ? d.scattered_local : d.scattered_remote)[at_b] += carried;
        };
        const auto others_than = [&](std::int32_t pos) { return total - mine[static_cast<std::size_t>(pos)]; };
        // every edge i -> i + 1 carries every origin's K/V but its head's into the head
        // (forward; the all-gather's backward gathers again, then its reduce-scatter carries
        // every origin's partial dK/dV but its tail's); the ring's backward runs i + 1 -> i,
        // carrying the K/V and every origin's dK/dV accumulator, the head's own last
        for (std::int32_t i = 0; i < G; ++i) {
          const std::int32_t j = (i + 1) % G;
          edge(at[0], i, j, others_than(j) * kv, gathered ? when::before_launch : when::any);
          if (gathered) {
            edge(at[1], i, j, others_than(j) * kv, when::before_launch);
            edge(at[1], i, j, others_than(i) * dkv, when::after_launch);
          } else {
            edge(at[1], j, i, others_than(i) * kv + total * dkv, when::any);
          }
        }
        return;
      }
      const std::int32_t u = ulysses_degree(wire, G), r = G / u;
      const lane_heads lane = lane_of(wire, u, 0);
      const double q = bytes(row_kind::q, lane.heads), kv = bytes(row_kind::kv, lane.kv_heads), lse = bytes(row_kind::lse, lane.heads),
                   dkv = bytes(row_kind::dkv, lane.kv_heads);
      // the ring between subgroups (r > 1: USP, or whole heads when u = 1): member (i, j) takes in
      // from (i - 1, j), per pass, its lane's K/V of every other subgroup, and backward the dK/dV
      // partials of every subgroup but (i - 1)'s (the reduce-scatter)
      if (r > 1) {
        subgroup_tokens.assign(static_cast<std::size_t>(r), 0.0);
        double total = 0;
        for (std::int32_t pos = 0; pos < G; ++pos) subgroup_tokens[static_cast<std::size_t>(pos / u)] += mine[static_cast<std::size_t>(pos)];
        for (const double t : subgroup_tokens) total += t;
        for (std::int32_t pos = 0; pos < G; ++pos) {
          const std::int32_t i = pos / u, before = (i + r - 1) % r;
          const rank_index to = members[static_cast<std::size_t>(pos)], from = members[static_cast<std::size_t>(before * u + pos % u)];
          const double passed = (total - subgroup_tokens[static_cast<std::size_t>(i)]) * 2 * kv,
                       partials = (total - subgroup_tokens[static_cast<std::size_t>(before)]) * 2 * dkv;
          const bool near = node_of(from) == node_of(to);
          (near ? at[0].local : at[0].remote)[base + static_cast<std::size_t>(to)] += passed;
          (near ? at[1].local : at[1].remote)[base + static_cast<std::size_t>(to)] += passed + partials;
        }
      }
      if (u < 2) return;
      // per member: rows from the others (forward, backward per row) and outputs per other lane
      const double forward_row = q + 2 * kv, backward_row = 3 * q + 2 * kv + lse, forward_home = q + lse, backward_home = q + 2 * dkv;
      for (std::int32_t first = 0; first < G; first += u) {
        double subgroup = 0;
        for (std::int32_t pos = first; pos < first + u; ++pos) subgroup += mine[static_cast<std::size_t>(pos)];
        share_by_node(members, first, first + u);
        for (std::int32_t pos = first; pos < first + u; ++pos) {
          const rank_index member = members[static_cast<std::size_t>(pos)];
          const std::size_t r = base + static_cast<std::size_t>(member);
          const double own = mine[static_cast<std::size_t>(pos)];
          // from the subgroup's other members on its node and on other nodes: their rows, and
          // its own rows' outputs of their lanes
          const node_share here = share_of(node_of(member));
          const double near_rows = here.tokens - own, near_lanes = here.members - 1;
          const double far_rows = subgroup - here.tokens, far_lanes = u - here.members;
          const double lane_in[2][2] = {{near_rows * forward_row, far_rows * forward_row},
                                        {near_rows * backward_row, far_rows * backward_row}};
          const double home_in[2][2] = {{near_lanes * own * forward_home, far_lanes * own * forward_home},
                                        {near_lanes * own * backward_home, far_lanes * own * backward_home}};
          for (std::size_t pass = 0; pass < 2; ++pass) {
            delivered_bytes& d = at[pass];
            d.local[r] += lane_in[pass][0] + home_in[pass][0];
            d.remote[r] += lane_in[pass][1] + home_in[pass][1];
            d.lane_local[r] += lane_in[pass][0], d.lane_remote[r] += lane_in[pass][1];
            d.home_local[r] += home_in[pass][0], d.home_remote[r] += home_in[pass][1];
          }
        }
      }
    };
    for (const layout_totals::served& x : t.serves[g]) {
      mine.assign(t.member_tokens.begin() + static_cast<std::ptrdiff_t>(x.first),
                  t.member_tokens.begin() + static_cast<std::ptrdiff_t>(x.first + members.size()));
      deliver(static_cast<std::size_t>(x.micro_batch) * ranks);
    }
  }
  return in;
}

//! [micro-batch * ranks + rank]: the tokens of a rank's linear modules, from the tokens it
//! holds in the attention layout (`held`, same index): those, or the micro-batch's mean when
//! the linear modules run token-balanced.
[[nodiscard]] inline std::vector<double> linear_tokens(linear_layout_kind linear, const std::vector<double>& held, std::size_t ranks) {
  if (linear == linear_layout_kind::attention_layout || ranks == 0) return held;
  std::vector<double> out(held.size());
  for (std::size_t base = 0; base < held.size(); base += ranks) {
    double tokens = 0;
    for (std::size_t r = 0; r < ranks; ++r) tokens += held[base + r];
    std::fill_n(out.begin() + static_cast<std::ptrdiff_t>(base), ranks, tokens / static_cast<double>(ranks));
  }
  return out;
}

//! The ranks whose launches plan_step_bound prices by launch sets (bound_prices::priced_ranks):
//! a flag per rank, set for the `priced_ranks` whose attention at the best rate plus linear
//! work is largest in some micro-batch (ties: the lower rank); empty when that is every rank.
[[nodiscard]] inline std::vector<std::uint8_t> busiest_at_best_rate(const layout_totals& t, const bound_prices& prices,
                                                                    const launch_seconds& quick, const std::vector<double>& linear_held) {
  const std::size_t ranks = t.ranks;
  if (prices.priced_ranks >= ranks || prices.max_shard_pairs == 0) return {};
  std::vector<double> busiest(ranks, 0.0);
  for (std::size_t i = 0; i < quick.own.size(); ++i)
    busiest[i % ranks] = std::max(busiest[i % ranks], quick.own[i] + linear_held[i] * prices.per_token);
  std::vector<std::size_t> order(ranks);
  std::iota(order.begin(), order.end(), std::size_t{0});
  const auto first = order.begin() + static_cast<std::ptrdiff_t>(prices.priced_ranks);
  std::partial_sort(order.begin(), first, order.end(), [&](std::size_t a, std::size_t b) {
    return busiest[a] > busiest[b] || (busiest[a] == busiest[b] && a < b);
  });
  std::vector<std::uint8_t> priced(ranks, 0);
  for (auto it = order.begin(); it != first; ++it) priced[*it] = 1;
  return priced;
}


//! The bound of layout `t` with its ranks' launches taking at least `launches` and their linear
//! modules `linear_held` tokens, [micro-batch * ranks + rank] (see the file comment).
[[nodiscard]] inline double plan_step_bound(const layout_totals& t, const launch_seconds& launches, const std::vector<double>& linear_held,
                                            const bound_prices& prices, inter_node_path path) {
  const double per_pair = prices.per_pair, per_token = prices.per_token;
  const std::size_t ranks = t.ranks;
  const std::int32_t micro_batches = t.micro_batches;
  // [micro-batch * groups + group]: the pairs of an all-to-all group in a micro-batch (a group
  // may serve several, one after another)
  std::vector<double> group_pairs(static_cast<std::size_t>(micro_batches) * t.groups.size(), 0.0);
  for (std::size_t g = 0; g < t.groups.size(); ++g) {
    if (t.groups[g].collective != collective_kind::all_to_all) continue;
    for (const layout_totals::served& x : t.serves[g]) {
      double& pairs = group_pairs[static_cast<std::size_t>(x.micro_batch) * t.groups.size() + g];
      for (std::size_t i = 0; i < t.groups[g].ranks.size(); ++i) pairs += t.member_pairs[x.first + i];
    }
  }
  const std::array<detail::delivered_bytes, 2> passes = collective_bytes_in(t, prices.wire);
  // the largest sum of `bytes` over the ranks of the micro-batch at `base` that share a key (a
  // node, a NIC)
  std::vector<double> sums;
  const auto busiest_sum = [&](const std::vector<double>& bytes, std::size_t base, const auto& key_of) {
    sums.clear();
    for (std::size_t r = 0; r < ranks; ++r) {
      const auto k = static_cast<std::size_t>(key_of(r));
      if (k >= sums.size()) sums.resize(k + 1, 0.0);
      sums[k] += bytes[base + r];
    }
    return sums.empty() ? 0.0 : *std::max_element(sums.begin(), sums.end());
  };
  const std::size_t per_node = static_cast<std::size_t>(std::max(1, t.gpus_per_node));
  const auto node_of = [&](std::size_t r) { return r / per_node; };
  const auto nic_of = [&](std::size_t r) { return prices.nic_of[r]; };

  // the least time one rank's own ports take in `local` bytes from its node and `remote` from
  // others (it is the destination of a flow in flight all that time), and the least time it
  // waits for them (a node takes in its remote bytes through its NICs)
  const auto taking_in = [&](double local, double remote) {
    const double in = (local + remote) * prices.per_byte_in;
    return path == inter_node_path::own_nic ? std::max({in, local * prices.per_byte_nvlink, remote * prices.per_byte_nic}) : in;
  };
  const auto wait_for = [&](double local, double remote) { return std::max(taking_in(local, remote), remote * prices.per_byte_into_node); };

  std::vector<std::int32_t> all_to_all_groups(ranks, 0);  // [rank]: of the micro-batch, with pairs
  std::vector<double> rank_work(ranks);                   // [rank]: of the micro-batch
  double bound = 0;
  for (std::int32_t mb = 0; mb < micro_batches; ++mb) {
    const std::size_t base = static_cast<std::size_t>(mb) * ranks;
    const auto linear_work = [&](std::size_t r) { return linear_held[base + r] * per_token; };
    // per rank, its work and the speed its compute loses while its bytes come in (see the file
    // comment), once per micro-batch: the busiest rank and every all-to-all group read it
    for (std::size_t r = 0; r < ranks; ++r) {
      double receiving = 0;
      if (prices.comm_slowdown > 0)
        for (const detail::delivered_bytes& pass : passes) receiving += taking_in(pass.local[base + r], pass.remote[base + r]);
      rank_work[r] = launches.own[base + r] + linear_work(r) + prices.comm_slowdown * receiving;
    }
    double busiest = 0;
    for (const double w : rank_work) busiest = std::max(busiest, w);
    for (std::size_t g = 0; g < t.groups.size(); ++g) {
      const double pairs = group_pairs[static_cast<std::size_t>(mb) * t.groups.size() + g];
      if (pairs == 0) continue;
      const auto& members = t.groups[g].ranks;
      double others = 0;
      for (const rank_index r : members) others += rank_work[static_cast<std::size_t>(r)];
      const double size = static_cast<double>(members.size());
      busiest = std::max(busiest, (others + pairs * per_pair) / size);
    }
    double receiving = 0;  // the forward's busiest receiver (rank, node, port), then the backward's
    for (const detail::delivered_bytes& pass : passes) {
      double busiest_port = busiest_sum(pass.remote, base, node_of) * prices.per_byte_into_node;
      for (std::size_t r = base; r < base + ranks; ++r) busiest_port = std::max(busiest_port, taking_in(pass.local[r], pass.remote[r]));
      // under the direct router the GPUs mapped to one NIC share its receive port
      if (path == inter_node_path::own_nic)
        busiest_port = std::max(busiest_port, busiest_sum(pass.remote, base, nic_of) * prices.per_byte_nic);
      receiving += busiest_port;
    }
    // an all-gather member: each pass's gathered K/V in, then its group's pairs and its linear
    // work, and the backward's partials in after its launch
    double serial = 0;
    for (std::size_t r = 0; r < ranks; ++r) {
      if (launches.gathered[base + r] == 0) continue;
      double waits = 0;
      for (const detail::delivered_bytes& pass : passes)
        waits += wait_for(pass.gathered_local[base + r], pass.gathered_remote[base + r]) +
                 wait_for(pass.scattered_local[base + r], pass.scattered_remote[base + r]);
      serial = std::max(serial, waits + launches.gathered[base + r] + linear_work(r));
    }
    // an all-to-all member in no other all-to-all group of the micro-batch: per pass its lane's
    // rows in, its lane's attention, its outputs home, one after another, and its linear work
    // after (forward) or before (backward) them; the mean over the group's members of that
    // chain, their lanes splitting the group's pairs (the busiest member is at least the mean)
    std::fill(all_to_all_groups.begin(), all_to_all_groups.end(), 0);
    for (std::size_t g = 0; g < t.groups.size(); ++g)
      if (group_pairs[static_cast<std::size_t>(mb) * t.groups.size() + g] > 0)
        for (const rank_index r : t.groups[g].ranks) ++all_to_all_groups[static_cast<std::size_t>(r)];
    for (std::size_t g = 0; g < t.groups.size(); ++g) {
      const double pairs = group_pairs[static_cast<std::size_t>(mb) * t.groups.size() + g];
      const auto& members = t.groups[g].ranks;
      const auto alone = [&](rank_index r) { return all_to_all_groups[static_cast<std::size_t>(r)] == 1; };
      if (pairs == 0 || !std::all_of(members.begin(), members.end(), alone)) continue;
      double chains = 0;
      for (const rank_index member : members) {
        const auto r = static_cast<std::size_t>(member);
        chains += linear_work(r);
        for (const detail::delivered_bytes& pass : passes)
          chains += wait_for(pass.lane_local[base + r], pass.lane_remote[base + r]) + wait_for(pass.home_local[base + r], pass.home_remote[base + r]);
      }
      const double size = static_cast<double>(members.size());
      serial = std::max(serial, (chains + pairs * per_pair) / size);
    }
    bound += std::max({busiest, receiving, serial});
  }
  return std::max(bound, prices.balanced);
}

}  // namespace detail

//! Seconds no execution of a layout whose sums are `t` and whose bytes from other nodes take
//! `path` can beat, every pair at the best rate (bound_prices::max_shard_pairs is not read: the
//! launch sets need the shards), with the batch's `prices` (see the file comment).
[[nodiscard]] inline double plan_step_bound(const layout_totals& t, const bound_prices& prices, linear_layout_kind linear,
                                            inter_node_path path = inter_node_path::any_nic_of_node) {
  return detail::plan_step_bound(t, detail::best_rate_seconds(t, prices.per_pair), detail::linear_tokens(linear, t.held, t.ranks),
                                 prices, path);
}

//! Seconds no execution of `p` whose bytes from other nodes take `path` can beat, with the
//! batch's `prices` (see the file comment): the pairs of the busiest prices.priced_ranks ranks
//! priced by their launch sets where prices.max_shard_pairs allows. `p` must be a valid plan of
//! the batch on its view (core/validate.hpp).
[[nodiscard]] inline double plan_step_bound(const plan& p, const bound_prices& prices, linear_layout_kind linear,
                                            inter_node_path path = inter_node_path::any_nic_of_node) {
  const layout_totals t = layout_totals_of(p);
  const std::vector<double> linear_held = detail::linear_tokens(linear, t.held, t.ranks);
  detail::launch_seconds launches = detail::best_rate_seconds(t, prices.per_pair);
  if (prices.max_shard_pairs > 0) {
    const std::vector<std::uint8_t> priced = detail::busiest_at_best_rate(t, prices, launches, linear_held);
    launches = detail::launch_set_seconds(p, std::move(launches), prices.per_pair, prices.slowdown, prices.max_shard_pairs, priced);
  }
  return detail::plan_step_bound(t, launches, linear_held, prices, path);
}

//! plan_step_bound of one plan of `b` on `view`, for executions without tensor parallelism.
[[nodiscard]] inline double plan_step_bound(const plan& p, const batch& b, const model_config& m, const topology& view,
                                            const sim_cost_model& cost, linear_layout_kind linear,
                                            inter_node_path path = inter_node_path::any_nic_of_node) {
  return plan_step_bound(p, bound_prices_for(b, m, view, cost), linear, path);
}

ZEPPELIN_NAMESPACE_END
