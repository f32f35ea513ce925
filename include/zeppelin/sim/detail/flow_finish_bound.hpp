// zeppelin/sim/detail/flow_finish_bound.hpp
// An upper bound on when the last of a set of flows arrives under the event engine's
// max-min fair sharing (sim/detail/event_flows.hpp), without running it.
//   in : the flows (send port, receive port, bytes > 0, link latency) and every port's
//        capacity (bytes/s); every flow has started by time 0, and while any of them is in
//        flight no other flow crosses their ports
//   out: seconds after 0 by which every flow has delivered its last byte and its latency has
//        passed
// Why it holds. Under max-min fairness every flow in flight has a bottleneck port that is
// saturated and on which no flow runs faster, so its rate is at least min over its two ports p
// of capacity(p) / n_p(t), n_p(t) the flows on p still in flight. (1) With n_p(t) <= N_p, all
// the set's flows on p, flow f finishes by U_f = bytes_f x max_p N_p / capacity(p). (2) Flows
// done by t no longer count: n_p(t) <= #{g on p : U_g > t}, so f has delivered at least the
// integral of min_p capacity(p) / #{g on p : U_g > t} since 0, and finishes when that reaches
// its bytes. (2) is what makes the bound tight for an all-to-all whose pairs send a small and a
// large flow (Ulysses' backward outputs: dQ and dK/dV): the small ones leave the count once
// they are done, and the large ones finish when the port's bytes have passed, as they do in the
// engine. Values U_g on one port are rounded up into runs within 1e-3 of each other (a larger
// U_g keeps (2) true), so a port costs O(its distinct finishing times), not O(its flows), per
// flow crossing it. Cost: O(F log F + F x runs); (1) alone (fair_share_bound::all_flows_stay),
// O(F + ports), with no sort, is a few per cent looser where flows differ in size (a Ulysses
// step's all-to-alls at 4M tokens over 1024 GPUs: 1.4 %). Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/detail/counting_sort.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
//! Which fair shares an upper bound on flows' finishing times counts: every flow of the set on
//! its ports until the last is done ((1) of flow_finish_bound.hpp), or the flows still in
//! flight ((2): tighter, and dearer).
enum class fair_share_bound : std::uint8_t {
  all_flows_stay,
  done_flows_leave,
};

namespace detail {

struct bounded_flow {
  std::int32_t send_port = 0, receive_port = 0;
  double bytes = 0;    //!< > 0
  double latency = 0;  //!< after its last byte
};

//! Seconds per byte of each of `flows` flows sharing a port of `capacity` bytes/s.
[[nodiscard]] inline double shared_seconds_per_byte(std::int32_t flows, double capacity) {
  return static_cast<double>(std::max(1, flows)) / capacity;
}

//! (1) of the file comment for flow `f`: its ports' capacities shared by `on_send` and
//! `on_receive` flows, the lesser share for all of its bytes.
[[nodiscard]] inline double staying_finish(const bounded_flow& f, std::span<const double> capacity, std::int32_t on_send,
                                           std::int32_t on_receive) {
  return f.bytes * std::max(shared_seconds_per_byte(on_send, capacity[static_cast<std::size_t>(f.send_port)]),
                            shared_seconds_per_byte(on_receive, capacity[static_cast<std::size_t>(f.receive_port)]));
}

//! flows_finish_bound where `capacity` lists only ports the flows cross (a port's work below is
//! O(1) even when no flow crosses it).
[[nodiscard]] inline double dense_flows_finish_bound(std::span<const bounded_flow> flows, std::span<const double> capacity) {
  if (flows.empty()) return 0;
  // (port, flow) for both ports of every flow, grouped by port: [on[p], on[p + 1]) are p's flows
  std::vector<std::pair<std::int32_t, std::int32_t>> crossing, scratch;
  std::vector<std::size_t> on;
  crossing.reserve(2 * flows.size());
  for (std::size_t i = 0; i < flows.size(); ++i)
    for (const std::int32_t p : {flows[i].send_port, flows[i].receive_port}) crossing.emplace_back(p, static_cast<std::int32_t>(i));
  stable_counting_sort(crossing, capacity.size(), [](const auto& x) { return static_cast<std::size_t>(x.first); }, scratch, on);
  const auto flows_on = [&](std::int32_t p) { return static_cast<std::int32_t>(on[static_cast<std::size_t>(p) + 1] - on[static_cast<std::size_t>(p)]); };
  const auto share = [&](std::int32_t p, std::int32_t n) { return capacity[static_cast<std::size_t>(p)] / std::max(1, n); };
  // (1): every flow of the set on both its ports for as long as it runs
  std::vector<double> first(flows.size());
  for (std::size_t i = 0; i < flows.size(); ++i) {
    const bounded_flow& f = flows[i];
    first[i] = staying_finish(f, capacity, flows_on(f.send_port), flows_on(f.receive_port));
  }
  // per port, the (1) bounds of its flows ascending, as runs (value rounded up, flows in it)
  std::vector<std::pair<double, std::int32_t>> runs;  // port p's in [run_start[p], run_start[p + 1])
  std::vector<std::size_t> run_start(capacity.size() + 1, 0);
  std::vector<double> ends;
  for (std::size_t p = 0; p < capacity.size(); ++p) {
    ends.clear();
    for (std::size_t k = on[p]; k < on[p + 1]; ++k) ends.push_back(first[static_cast<std::size_t>(crossing[k].second)]);
    if (!std::is_sorted(ends.begin(), ends.end())) std::sort(ends.begin(), ends.end());  // often equal: an all-to-all's
    for (auto it = ends.begin(); it != ends.end();) {
      auto last = it;
      while (last + 1 != ends.end() && *(last + 1) <= *it * (1 + 1e-3)) ++last;
      runs.emplace_back(*last, static_cast<std::int32_t>(last - it + 1));
      it = last + 1;
    }
    run_start[p + 1] = runs.size();
  }
  // (2): per flow, integrate its rate as the runs of its two ports end (where each port is one
  // run, no flow leaves it before this one: (1) stands)
  const auto one_run = [&](std::int32_t p) { return run_start[static_cast<std::size_t>(p) + 1] - run_start[static_cast<std::size_t>(p)] == 1; };
  double latest = 0;
  for (std::size_t i = 0; i < flows.size(); ++i) {
    const bounded_flow& f = flows[i];
    if (one_run(f.send_port) && one_run(f.receive_port)) {
      latest = std::max(latest, first[i] + f.latency);
      continue;
    }
    const std::int32_t ports[2] = {f.send_port, f.receive_port};
    std::size_t at[2], stop[2];
    std::int32_t left[2];
    for (int k = 0; k < 2; ++k) {
      const auto p = static_cast<std::size_t>(ports[k]);
      at[k] = run_start[p], stop[k] = run_start[p + 1], left[k] = flows_on(ports[k]);
    }
    double now = 0, done = 0, finish = first[i];
    while (true) {
      const double rate = std::min(share(ports[0], left[0]), share(ports[1], left[1]));
      const double next = std::min(at[0] < stop[0] ? runs[at[0]].first : finish, at[1] < stop[1] ? runs[at[1]].first : finish);
      if (next >= finish || done + rate * (next - now) >= f.bytes) {
        finish = std::min(finish, now + (f.bytes - done) / rate);
        break;
      }
      done += rate * (next - now);
      now = next;
      for (int k = 0; k < 2; ++k)
        while (at[k] < stop[k] && runs[at[k]].first <= now) left[k] -= runs[at[k]++].second;
    }
    latest = std::max(latest, finish + f.latency);
  }
  return latest;
}

//! What flows_finish_bound may keep between calls: per port, a count that is zero between calls
//! and the seconds per byte of a flow on it (a caller bounding many small exchanges on a large
//! topology spares touching every port each time).
struct flow_bound_scratch {
  std::vector<std::int32_t> on;
  std::vector<double> per_byte;
  std::vector<std::int32_t> touched;
};

//! (1) of the file comment alone: every flow at its ports' capacity shared by all the set's flows
//! on them, O(flows) (and O(ports) the first time `scratch` sees the topology).
[[nodiscard]] inline double staying_flows_finish_bound(std::span<const bounded_flow> flows, std::span<const double> capacity,
                                                       flow_bound_scratch& scratch) {
  std::vector<std::int32_t>& on = scratch.on;  // [port]: the set's flows on it
  if (on.size() < capacity.size()) on.assign(capacity.size(), 0), scratch.per_byte.resize(capacity.size());
  scratch.touched.clear();
  for (const bounded_flow& f : flows)
    for (const std::int32_t p : {f.send_port, f.receive_port})
      if (on[static_cast<std::size_t>(p)]++ == 0) scratch.touched.push_back(p);
  for (const std::int32_t p : scratch.touched)  // as staying_finish prices them: never below flows_finish_bound's
    scratch.per_byte[static_cast<std::size_t>(p)] = shared_seconds_per_byte(on[static_cast<std::size_t>(p)], capacity[static_cast<std::size_t>(p)]);
  double latest = 0;
  for (const bounded_flow& f : flows)
    latest = std::max(latest, f.bytes * std::max(scratch.per_byte[static_cast<std::size_t>(f.send_port)],
                                                 scratch.per_byte[static_cast<std::size_t>(f.receive_port)]) +
                                  f.latency);
  for (const std::int32_t p : scratch.touched) on[static_cast<std::size_t>(p)] = 0;
  return latest;
}

//! See the file comment. 0 for no flows. When the topology has many more ports than the flows
//! cross, those are numbered densely first (ascending, so the result is the same): a small
//! exchange on a large topology costs O(F log F), not O(the topology's ports).
[[nodiscard]] inline double flows_finish_bound(std::span<const bounded_flow> flows, std::span<const double> capacity, fair_share_bound shares,
                                               flow_bound_scratch& scratch) {
  if (flows.empty()) return 0;
  if (shares == fair_share_bound::all_flows_stay) return staying_flows_finish_bound(flows, capacity, scratch);
  if (capacity.size() <= 8 * flows.size()) return dense_flows_finish_bound(flows, capacity);
  std::vector<std::int32_t> ports;
  ports.reserve(2 * flows.size());
  for (const bounded_flow& f : flows) ports.push_back(f.send_port), ports.push_back(f.receive_port);
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  const auto dense = [&](std::int32_t p) {
    return static_cast<std::int32_t>(std::lower_bound(ports.begin(), ports.end(), p) - ports.begin());
  };
  std::vector<bounded_flow> renumbered(flows.begin(), flows.end());
  for (bounded_flow& f : renumbered) f.send_port = dense(f.send_port), f.receive_port = dense(f.receive_port);
  std::vector<double> dense_capacity(ports.size());
  for (std::size_t i = 0; i < ports.size(); ++i) dense_capacity[i] = capacity[static_cast<std::size_t>(ports[i])];
  return dense_flows_finish_bound(renumbered, dense_capacity);
}

//! flows_finish_bound with scratch of its own.
[[nodiscard]] inline double flows_finish_bound(std::span<const bounded_flow> flows, std::span<const double> capacity,
                                               fair_share_bound shares = fair_share_bound::done_flows_leave) {
  flow_bound_scratch scratch;
  return flows_finish_bound(flows, capacity, shares, scratch);
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
