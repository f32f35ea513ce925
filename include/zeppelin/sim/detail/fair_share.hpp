// zeppelin/sim/detail/fair_share.hpp
// Max-min fair rates of concurrent flows over capacitated ports (progressive filling).
//   in : per port its capacity (bytes/s); a set of flows, each occupying two ports
//   out: per flow a rate (bytes/s) such that no port is over capacity and no flow can get
//        more without taking from a flow with a smaller or equal rate
// Progressive filling, one port at a time: the port with the smallest fair share left
// (capacity left / unfrozen users; ties by port index) saturates and fixes the rates of its
// unfrozen flows; their other ports lose that rate and one user, and move in an indexed
// min-heap of the ports (detail/indexed_min_heap.hpp: one entry each, its key the port's
// current share), so ports are visited in saturation order without stale entries.
// O((F + P) log P) for F flows on P ports; the scratch lives in the caller (no allocation
// per call once warm). The rates of flows whose port sets are disconnected do not depend on
// each other, so callers re-share only the component that changed (event_flows.hpp).
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/detail/indexed_min_heap.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
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

    const auto share_of = [&](std::size_t p) { return left_[p] / users_[p]; };
    // every touched port with unfrozen users, keyed by its current share, moved in place when
    // a frozen flow leaves it
    ports_.reserve_ids(capacity.size());
    for (const std::int32_t p : touched_) ports_.set(p, share_of(static_cast<std::size_t>(p)));
    while (!ports_.empty()) {
      const std::int32_t p = ports_.top();
      const auto q = static_cast<std::size_t>(p);
      const double share = ports_.top_key();
      ports_.erase(p);
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
          if (x == p) continue;  // x holds this flow unfrozen until now, so it is in the heap
          if (users_[y] == 0) {
            ports_.erase(x);
          } else {
            ports_.set(x, share_of(y));
          }
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
  indexed_min_heap ports_;  // ports with unfrozen flows, by (share, port)
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
