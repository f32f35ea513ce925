// zeppelin/sim/detail/fair_share.hpp
// Max-min fair rates of concurrent flows over capacitated ports (progressive filling).
//   in : per port its capacity (bytes/s); a set of flows, each occupying two ports
//   out: per flow a rate (bytes/s) such that no port is over capacity and no flow can get
//        more without taking from a flow with a smaller or equal rate
// Progressive filling, one port at a time: the port with the smallest fair share left
// (capacity left / unfrozen users; ties by port index) saturates and fixes the rates of its
// unfrozen flows; their other ports lose that rate and one user. A port's share never drops
// when a flow at the current minimum leaves it ((c - s) / (u - 1) >= c / u when c / u >= s),
// so a min-heap with lazily dropped stale entries visits ports in saturation order.
// O((F + P) log P) for F flows on P ports; the scratch lives in the caller (no allocation
// per call once warm). The rates of flows whose port sets are disconnected do not depend on
// each other, so callers re-share only the component that changed (event_flows.hpp).
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

struct fair_share_state {
  std::vector<double> capacity;  //!< per port

  //! rates[i] for the flows whose ports are (a[i], b[i]); `rates` is resized.
  void solve(const std::vector<std::int32_t>& a, const std::vector<std::int32_t>& b, std::vector<double>& rates) {
    const std::size_t n = a.size();
    rates.assign(n, 0.0);
    frozen_.assign(n, 0);
    if (left_.size() != capacity.size()) {
      left_.assign(capacity.size(), 0.0);
      users_.assign(capacity.size(), 0);
      first_.assign(capacity.size() + 1, 0);
    }
    touched_.clear();
    for (std::size_t i = 0; i < n; ++i)
      for (const std::int32_t p : {a[i], b[i]}) {
        auto& u = users_[static_cast<std::size_t>(p)];
        if (u == 0) touched_.push_back(p), left_[static_cast<std::size_t>(p)] = capacity[static_cast<std::size_t>(p)];
        ++u;
      }
    // the flows of every touched port (CSR over the touched ports, in port order)
    std::sort(touched_.begin(), touched_.end());
    slot_.resize(touched_.size() + 1);
    std::size_t at = 0;
    for (std::size_t j = 0; j < touched_.size(); ++j) {
      const auto p = static_cast<std::size_t>(touched_[j]);
      first_[p] = static_cast<std::int32_t>(j);
      slot_[j] = at;
      at += static_cast<std::size_t>(users_[p]);
    }
    slot_[touched_.size()] = at;
    flows_of_.resize(at);
    fill_.assign(touched_.size(), 0);
    for (std::size_t i = 0; i < n; ++i)
      for (const std::int32_t p : {a[i], b[i]}) {
        const auto j = static_cast<std::size_t>(first_[static_cast<std::size_t>(p)]);
        flows_of_[slot_[j] + fill_[j]++] = static_cast<std::int32_t>(i);
      }

    const auto share_of = [&](std::int32_t p) {
      return left_[static_cast<std::size_t>(p)] / users_[static_cast<std::size_t>(p)];
    };
    const auto push = [&](std::int32_t p) {
      heap_.push_back({share_of(p), p});
      std::push_heap(heap_.begin(), heap_.end(), std::greater<>{});
    };
    heap_.clear();
    for (const std::int32_t p : touched_) push(p);
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>{});
      const auto [share, p] = heap_.back();
      heap_.pop_back();
      const auto q = static_cast<std::size_t>(p);
      if (users_[q] == 0 || share != share_of(p)) continue;  // saturated, or a newer entry stands
      const auto j = static_cast<std::size_t>(first_[q]);
      for (std::size_t k = slot_[j]; k < slot_[j + 1]; ++k) {
        const auto i = static_cast<std::size_t>(flows_of_[k]);
        if (frozen_[i]) continue;
        frozen_[i] = 1;
        rates[i] = share;
        for (const std::int32_t x : {a[i], b[i]}) {
          const auto y = static_cast<std::size_t>(x);
          left_[y] = std::max(0.0, left_[y] - share);
          --users_[y];
          if (x != p && users_[y] > 0) push(x);
        }
      }
    }
    for (const std::int32_t p : touched_) users_[static_cast<std::size_t>(p)] = 0;
  }

 private:
  std::vector<double> left_;          // per port: capacity not yet given out
  std::vector<std::int32_t> users_;   // per port: unfrozen flows
  std::vector<std::int32_t> first_;   // per port: its index in touched_
  std::vector<std::int32_t> touched_;  // ports used by the current flows, ascending
  std::vector<std::size_t> slot_;     // per touched port: first entry in flows_of_
  std::vector<std::size_t> fill_;
  std::vector<std::int32_t> flows_of_;
  std::vector<char> frozen_;
  std::vector<std::pair<double, std::int32_t>> heap_;  // min-heap of (share, port); stale entries skipped
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
