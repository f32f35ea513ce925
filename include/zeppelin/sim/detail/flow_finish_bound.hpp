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
// flow crossing it. Cost: O(F log F + F x runs). Host-only.
#pragma once

#include <zeppelin/core/config.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

struct bounded_flow {
  std::int32_t send_port = 0, receive_port = 0;
  double bytes = 0;    //!< > 0
  double latency = 0;  //!< after its last byte
};

//! See the file comment. 0 for no flows.
[[nodiscard]] inline double flows_finish_bound(std::span<const bounded_flow> flows, std::span<const double> capacity) {
  if (flows.empty()) return 0;
  std::vector<std::int32_t> on_port(capacity.size(), 0);
  for (const bounded_flow& f : flows) ++on_port[static_cast<std::size_t>(f.send_port)], ++on_port[static_cast<std::size_t>(f.receive_port)];
  const auto share = [&](std::int32_t p, double n) { return capacity[static_cast<std::size_t>(p)] / n; };
  // (1): every flow of the set on both its ports for as long as it runs
  std::vector<double> first(flows.size());
  for (std::size_t i = 0; i < flows.size(); ++i) {
    const bounded_flow& f = flows[i];
    first[i] = f.bytes / std::min(share(f.send_port, on_port[static_cast<std::size_t>(f.send_port)]),
                                  share(f.receive_port, on_port[static_cast<std::size_t>(f.receive_port)]));
  }
  // per port, the (1) bounds of its flows ascending, as runs (value rounded up, flows in it);
  // a port whose bounds all lie within the rounding is one run, found without sorting
  std::vector<double> low(capacity.size(), std::numeric_limits<double>::infinity()), high(capacity.size(), 0.0);
  for (std::size_t i = 0; i < flows.size(); ++i)
    for (const std::int32_t p : {flows[i].send_port, flows[i].receive_port}) {
      low[static_cast<std::size_t>(p)] = std::min(low[static_cast<std::size_t>(p)], first[i]);
      high[static_cast<std::size_t>(p)] = std::max(high[static_cast<std::size_t>(p)], first[i]);
    }
  const auto one_run = [&](std::int32_t p) { return high[static_cast<std::size_t>(p)] <= low[static_cast<std::size_t>(p)] * (1 + 1e-3); };
  std::vector<std::size_t> start(capacity.size() + 1, 0);
  for (std::size_t p = 0; p < capacity.size(); ++p)
    start[p + 1] = start[p] + (one_run(static_cast<std::int32_t>(p)) ? 0 : static_cast<std::size_t>(on_port[p]));
  std::vector<double> ends(start.back());
  std::vector<std::size_t> fill(start.begin(), start.end() - 1);
  for (std::size_t i = 0; i < flows.size(); ++i)
    for (const std::int32_t p : {flows[i].send_port, flows[i].receive_port})
      if (!one_run(p)) ends[fill[static_cast<std::size_t>(p)]++] = first[i];
  std::vector<std::pair<double, std::int32_t>> runs;  // per port in [run_start[p], run_start[p + 1])
  std::vector<std::size_t> run_start(capacity.size() + 1, 0);
  for (std::size_t p = 0; p < capacity.size(); ++p) {
    if (one_run(static_cast<std::int32_t>(p))) {
      if (on_port[p] > 0) runs.emplace_back(high[p], on_port[p]);
      run_start[p + 1] = runs.size();
      continue;
    }
    const auto b = ends.begin() + static_cast<std::ptrdiff_t>(start[p]), e = ends.begin() + static_cast<std::ptrdiff_t>(start[p + 1]);
    std::sort(b, e);
    for (auto it = b; it != e;) {
      auto last = it;
      while (last + 1 != e && *(last + 1) <= *it * (1 + 1e-3)) ++last;
      runs.emplace_back(*last, static_cast<std::int32_t>(last - it + 1));
      it = last + 1;
    }
    run_start[p + 1] = runs.size();
  }
  // (2): per flow, integrate its rate as the runs of its two ports end (a flow whose ports are
  // one run each keeps (1): no flow leaves either port before it)
  double latest = 0;
  for (std::size_t i = 0; i < flows.size(); ++i) {
    const bounded_flow& f = flows[i];
    double finish = first[i];
    if (!one_run(f.send_port) || !one_run(f.receive_port)) {
      const std::int32_t ports[2] = {f.send_port, f.receive_port};
      std::size_t at[2], stop[2];
      std::int32_t left[2];
      for (int k = 0; k < 2; ++k) {
        const auto p = static_cast<std::size_t>(ports[k]);
        at[k] = run_start[p], stop[k] = run_start[p + 1], left[k] = on_port[p];
      }
      double now = 0, done = 0;
      while (true) {
        const double rate = std::min(share(ports[0], std::max(1, left[0])), share(ports[1], std::max(1, left[1])));
        const double next = std::min(at[0] < stop[0] ? runs[at[0]].first : finish, at[1] < stop[1] ? runs[at[1]].first : finish);
        if (done + rate * (next - now) >= f.bytes || next >= finish) {
          finish = std::min(finish, now + (f.bytes - done) / rate);
          break;
        }
        done += rate * (next - now);
        now = next;
        for (int k = 0; k < 2; ++k)
          while (at[k] < stop[k] && runs[at[k]].first <= now) left[k] -= runs[at[k]++].second;
      }
    }
    latest = std::max(latest, finish + f.latency);
  }
  return latest;
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
