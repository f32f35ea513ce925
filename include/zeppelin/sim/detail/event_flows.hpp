// zeppelin/sim/detail/event_flows.hpp
// The flows of an event_engine run that are moving bytes: each crosses two capacitated ports
// (a sending and a receiving one) and gets a max-min fair rate (fair_share.hpp), re-shared
// whenever a flow starts or drains.
//   in : per port its capacity (bytes/s); add(task, ports, bytes) when a flow is released;
//        share_ports_if_changed(now) after adds and drains; advance(next) to move the clock
//   out: when the next flow drains (next_drain), which ones drained at `next` (advance's
//        result, in the order they were added), and the largest port utilisation seen
// A drained flow has delivered its last byte; its link latency is the caller's business.
// Scale: max-min rates decompose over the connected components of the flow / port graph, so
// only the components that a start or a drain touched are re-shared; a flow's bytes left are
// kept at the time of its last rate change and its drain time sits in an indexed min-heap of
// the flows in flight (a new rate moves the flow's entry; no stale entries pile up). An event
// costs O(C log F) for the C flows of the changed components among F in flight, not
// O(all flows in flight), so thousands of independent rings stay cheap.
// A flow drains once at most 1e-9 of its bytes are left (the clock's resolution late in a
// long phase), so a tiny flow can never stall time. Deterministic: components are solved in
// port order, each component's flows in the order a walk over its ports meets them, and
// drains reported in add order. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/detail/indexed_min_heap.hpp>
#include <zeppelin/sim/detail/fair_share.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

class flows_in_flight {
 public:
  //! `port_capacity[p]`: bytes/s of port p; add()'s ports index into it.
  explicit flows_in_flight(std::vector<double> port_capacity)
      : on_port_(port_capacity.size()), port_dirty_(port_capacity.size(), 0), port_load_(port_capacity.size(), 0.0) {
    fair_.capacity = std::move(port_capacity);
  }

  //! A flow of task `task` starts moving `bytes` (> 0) through `send_port` and `receive_port`
  //! at time `now`.
  void add(std::int32_t task, std::int32_t send_port, std::int32_t receive_port, double bytes, double now) {
    std::int32_t f;
    if (free_.empty()) {
      f = static_cast<std::int32_t>(flows_.size());
      flows_.emplace_back();
      drains_.reserve_ids(flows_.size());
    } else {
      f = free_.back();
      free_.pop_back();
    }
    flow& x = flows_[static_cast<std::size_t>(f)];
    x = {task, send_port, receive_port, bytes, bytes, 0.0, now, next_order_++, true};
    for (const std::int32_t p : {send_port, receive_port}) {
      on_port_[static_cast<std::size_t>(p)].push_back(f);
      mark(p);
    }
  }

  //! Re-shares the components touched by a start or a drain since the last call (else the
  //! rates still hold), and records the busiest port's utilisation.
  void share_ports_if_changed(double now) {
    if (dirty_.empty()) return;
    std::sort(dirty_.begin(), dirty_.end());
    for (const std::int32_t p : dirty_) port_dirty_[static_cast<std::size_t>(p)] = 0;
    for (const std::int32_t p : dirty_) {
      if (visited_port(p)) continue;
      collect_component(p);
      if (!members_.empty()) reshare(now);
    }
    for (const std::int32_t p : seen_ports_) port_seen_[static_cast<std::size_t>(p)] = 0;
    seen_ports_.clear();
    dirty_.clear();
  }

  //! When the next flow drains at the current rates (infinity when none moves).
  //! Needs share_ports_if_changed() since the last add() or advance().
  [[nodiscard]] double next_drain() const {
    return drains_.empty() ? std::numeric_limits<double>::infinity() : drains_.top_key();
  }

  //! Removes the flows that drain by `next` (<= next_drain()); returns their tasks in the order
  //! they were added (valid until the next call).
  const std::vector<std::int32_t>& advance(double next) {
    drained_.clear();
    drained_order_.clear();
    while (!drains_.empty() && drains_.top_key() <= next) {
      const std::int32_t f = drains_.top();
      drains_.erase(f);
      flow& x = flows_[static_cast<std::size_t>(f)];
      drained_order_.push_back({x.order, x.task});
      x.alive = false;
      for (const std::int32_t p : {x.send_port, x.receive_port}) {
        auto& list = on_port_[static_cast<std::size_t>(p)];
        list.erase(std::find(list.begin(), list.end(), f));
        mark(p);
      }
      free_.push_back(f);
    }
    std::sort(drained_order_.begin(), drained_order_.end());
    for (const auto& [order, task] : drained_order_) drained_.push_back(task);
    return drained_;
  }

  //! The largest (sum of rates / capacity) any port has carried so far (<= 1).
  [[nodiscard]] double max_port_utilization() const noexcept { return max_port_utilization_; }

 private:
  struct flow {
    std::int32_t task = -1, send_port = -1, receive_port = -1;
    double bytes = 0;  // the flow's size (its drain tolerance scales with it)
    double left = 0;   // bytes not yet delivered at time `since`
    double rate = 0;   // bytes/s since `since`
    double since = 0;
    std::int64_t order = 0;  // add order: drains at one time are reported in it
    bool alive = false;
  };

  void mark(std::int32_t p) {
    auto& d = port_dirty_[static_cast<std::size_t>(p)];
    if (!d) d = 1, dirty_.push_back(p);
  }

  bool visited_port(std::int32_t p) {
    if (port_seen_.size() != on_port_.size()) port_seen_.assign(on_port_.size(), 0);
    return port_seen_[static_cast<std::size_t>(p)] != 0;
  }

  // members_: the flows of the component of port p in the order a walk from p meets them
  // (its ports marked seen). The walk follows each port's flows in the order they started,
  // so the order depends only on the run, not on which slots the flows reuse. Not sorted:
  // the switching of 1,024 GPUs is one component of 10^5 flows re-shared at every drain,
  // and sorting it cost as much as solving it.
  void collect_component(std::int32_t p) {
    members_.clear();
    stack_.assign(1, p);
    port_seen_[static_cast<std::size_t>(p)] = 1;
    seen_ports_.push_back(p);
    while (!stack_.empty()) {
      const std::int32_t q = stack_.back();
      stack_.pop_back();
      for (const std::int32_t f : on_port_[static_cast<std::size_t>(q)]) {
        const flow& x = flows_[static_cast<std::size_t>(f)];
        if (x.send_port == q) members_.push_back(f);  // each flow once: from its send port
        for (const std::int32_t r : {x.send_port, x.receive_port})
          if (!port_seen_[static_cast<std::size_t>(r)]) {
            port_seen_[static_cast<std::size_t>(r)] = 1;
            seen_ports_.push_back(r);
            stack_.push_back(r);
          }
      }
    }
  }

  // new rates for members_ from now on; their drain times move
  void reshare(double now) {
    send_.clear();
    receive_.clear();
    for (const std::int32_t f : members_) {
      const flow& x = flows_[static_cast<std::size_t>(f)];
      send_.push_back(x.send_port);
      receive_.push_back(x.receive_port);
    }
    fair_.solve(send_, receive_, rate_);
    for (std::size_t i = 0; i < members_.size(); ++i) {
      flow& x = flows_[static_cast<std::size_t>(members_[i])];
      if (rate_[i] == x.rate) continue;  // its drain time stands (most of a large component's)
      x.left = std::max(0.0, x.left - x.rate * (now - x.since));
      x.since = now;
      x.rate = rate_[i];
      drains_.set(members_[i], x.rate > 0 ? now + std::max(0.0, x.left - 1e-9 * x.bytes) / x.rate
                                            : std::numeric_limits<double>::infinity());
    }
    record_port_utilization();
  }

  // Sums the rates on the component's ports and keeps the largest load / capacity.
  void record_port_utilization() {
    for (const std::int32_t f : members_) {
      const flow& x = flows_[static_cast<std::size_t>(f)];
      port_load_[static_cast<std::size_t>(x.send_port)] = port_load_[static_cast<std::size_t>(x.receive_port)] = 0;
    }
    for (const std::int32_t f : members_) {
      const flow& x = flows_[static_cast<std::size_t>(f)];
      port_load_[static_cast<std::size_t>(x.send_port)] += x.rate;
      port_load_[static_cast<std::size_t>(x.receive_port)] += x.rate;
    }
    for (const std::int32_t f : members_) {
      const flow& x = flows_[static_cast<std::size_t>(f)];
      for (const std::int32_t p : {x.send_port, x.receive_port})
        max_port_utilization_ = std::max(max_port_utilization_, port_load_[static_cast<std::size_t>(p)] /
                                                                   fair_.capacity[static_cast<std::size_t>(p)]);
    }
  }

  fair_share_state fair_;
  std::vector<flow> flows_;  // slots; dead ones are reused through free_
  std::vector<std::int32_t> free_;
  std::vector<std::vector<std::int32_t>> on_port_;  // per port: the flows crossing it
  std::vector<char> port_dirty_, port_seen_;
  std::vector<std::int32_t> dirty_, seen_ports_, stack_, members_;
  std::vector<std::int32_t> send_, receive_;
  std::vector<double> rate_;
  indexed_min_heap drains_;  // the flows in flight by (drain time, flow index): at one time, index order
  std::vector<double> port_load_;  // scratch of record_port_utilization, per port
  std::vector<std::int32_t> drained_;
  std::vector<std::pair<std::int64_t, std::int32_t>> drained_order_;
  std::int64_t next_order_ = 0;
  double max_port_utilization_ = 0;
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
