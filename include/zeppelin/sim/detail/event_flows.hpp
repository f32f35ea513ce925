// zeppelin/sim/detail/event_flows.hpp
// The flows of an event_engine run that are moving bytes: each crosses two capacitated ports
// (a sending and a receiving one) and gets a max-min fair rate (fair_share.hpp), re-shared
// whenever a flow starts or drains.
//   in : per port its capacity (bytes/s); add(task, ports, bytes) when a flow is released;
//        advance(now, next) to move the clock from `now` to `next`
//   out: when the next flow drains (next_drain), which ones drained at `next` (advance's
//        result, in the order they were added), and the largest port utilisation seen
// A drained flow has delivered its last byte; its link latency is the caller's business.
// Flows are kept in the order they were added, so rates and drains are deterministic.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
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
  explicit flows_in_flight(std::vector<double> port_capacity) : port_load_(port_capacity.size(), 0.0) {
    fair_.capacity = std::move(port_capacity);
  }

  //! A flow of task `task` starts moving `bytes` (> 0) through `send_port` and `receive_port`.
  void add(std::int32_t task, std::int32_t send_port, std::int32_t receive_port, double bytes) {
    task_.push_back(task);
    send_port_.push_back(send_port);
    receive_port_.push_back(receive_port);
    bytes_.push_back(bytes);
    left_.push_back(bytes);
    ports_changed_ = true;
  }

  //! Re-shares the ports when a flow started or drained since the last call (else the rates
  //! still hold), and records the busiest port's utilisation.
  void share_ports_if_changed() {
    if (!ports_changed_) return;
    fair_.solve(send_port_, receive_port_, rate_);
    record_port_utilization();
    ports_changed_ = false;
  }

  //! When the first flow drains at the current rates (infinity when none moves).
  //! Needs share_ports_if_changed() since the last add() or advance().
  [[nodiscard]] double next_drain(double now) const {
    double next = std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < task_.size(); ++k) next = std::min(next, now + left_[k] / rate_[k]);
    return next;
  }

  //! Moves every flow's bytes from `now` to `next` (<= next_drain(now)) and removes the flows
  //! that drain by `next`; returns their tasks (valid until the next call).
  const std::vector<std::int32_t>& advance(double now, double next) {
    const double dt = next - now;
    drained_.clear();
    std::size_t keep = 0;
    for (std::size_t k = 0; k < task_.size(); ++k) {
      // the flow that set `next` drains even when dt is below the clock's resolution at `now`
      // (a tiny flow late in a phase: now + dt == now), else time would never advance
      if (left_[k] <= rate_[k] * dt * (1 + 1e-12) + 1e-9 * bytes_[k] || now + left_[k] / rate_[k] <= next) {
        drained_.push_back(task_[k]);
        continue;
      }
      task_[keep] = task_[k];
      send_port_[keep] = send_port_[k];
      receive_port_[keep] = receive_port_[k];
      bytes_[keep] = bytes_[k];
      left_[keep] = left_[k] - rate_[k] * dt;
      rate_[keep] = rate_[k];
      ++keep;
    }
    task_.resize(keep);
    send_port_.resize(keep);
    receive_port_.resize(keep);
    bytes_.resize(keep);
    left_.resize(keep);
    rate_.resize(keep);
    if (!drained_.empty()) ports_changed_ = true;
    return drained_;
  }

  //! The largest (sum of rates / capacity) any port has carried so far (<= 1).
  [[nodiscard]] double max_port_utilization() const noexcept { return max_port_utilization_; }

 private:
  // Sums the rates on every port in use and keeps the largest load / capacity.
  void record_port_utilization() {
    const std::size_t n = task_.size();
    for (std::size_t k = 0; k < n; ++k)
      port_load_[static_cast<std::size_t>(send_port_[k])] = port_load_[static_cast<std::size_t>(receive_port_[k])] = 0;
    for (std::size_t k = 0; k < n; ++k) {
      port_load_[static_cast<std::size_t>(send_port_[k])] += rate_[k];
      port_load_[static_cast<std::size_t>(receive_port_[k])] += rate_[k];
    }
    for (std::size_t k = 0; k < n; ++k)
      for (const std::int32_t p : {send_port_[k], receive_port_[k]})
        max_port_utilization_ = std::max(max_port_utilization_, port_load_[static_cast<std::size_t>(p)] /
                                                                   fair_.capacity[static_cast<std::size_t>(p)]);
  }

  fair_share_state fair_;
  // one entry per flow moving bytes, in the order they were added
  std::vector<std::int32_t> task_, send_port_, receive_port_;
  std::vector<double> bytes_;  // the flow's size (its drain tolerance scales with it)
  std::vector<double> left_;   // bytes not yet delivered
  std::vector<double> rate_;   // bytes/s, from the last share_ports_if_changed()
  bool ports_changed_ = false;
  std::vector<double> port_load_;  // scratch of record_port_utilization, per port
  std::vector<std::int32_t> drained_;
  double max_port_utilization_ = 0;
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
