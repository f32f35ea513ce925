// zeppelin/exec/overlap.hpp
// How much of one rank's communication its compute hid, read off when its work ran.
//   in : the timed spans of one rank's pass, in the order they were enqueued: its attention
//        launches, each on one of its compute streams, and its exchanges on the communication
//        stream, with start and stop in milliseconds on one clock (device_timeline::read(),
//        cuda/executor/device_timeline.hpp, or a host clock)
//   out: idle_before(): per span, its stream's idle time just before it; overlap_per_round():
//        the figures below per round; overlap_of(): the launches' busy time, the exchanges'
//        time in flight, and the exposed wait: over each compute stream, the idle time between
//        consecutive launches (the next start minus the previous stop, where positive). A
//        launch that needs an exchange's data starts late by the part of the exchange the
//        compute before it did not cover, so the exposed wait is the communication left
//        unhidden, plus whatever else ran between the launches on that stream, plus the host's
//        enqueueing where it fell behind the device.
//        hidden() = 1 - exposed / exchange time, clamped to [0, 1] (1 without exchanges).
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

enum class timed_kind : std::uint8_t { launch, exchange };

//! One timed piece of a rank's pass: a launch (stream >= 0: the program's compute stream) or an
//! exchange (stream -1: the communication stream), in milliseconds from an origin.
struct timed_span {
  timed_kind kind = timed_kind::launch;
  std::int32_t level = 0;
  std::int32_t round = 0;
  std::int32_t stream = 0;
  double start_ms = 0;
  double stop_ms = 0;
  [[nodiscard]] double duration_ms() const noexcept { return stop_ms - start_ms; }
};

struct overlap_figures {
  double launch_ms = 0;    //!< the launches' summed durations
  double exchange_ms = 0;  //!< the exchanges' summed durations (posted to done)
  double exposed_ms = 0;   //!< idle time between consecutive launches of a stream, summed
  [[nodiscard]] double hidden() const noexcept {
    return exchange_ms > 0 ? std::clamp(1.0 - exposed_ms / exchange_ms, 0.0, 1.0) : 1.0;
  }
};

//! Per span, the idle time of its compute stream just before it: its start minus the stop of
//! the launch before it on that stream, where positive; 0 for a stream's first launch and for
//! exchanges.
[[nodiscard]] inline std::vector<double> idle_before(std::span<const timed_span> spans) {
  std::vector<double> idle(spans.size(), 0.0);
  std::map<std::int32_t, double> last_stop;  // per compute stream: the previous launch's stop
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const timed_span& s = spans[i];
    if (s.kind == timed_kind::exchange) continue;
    const auto [it, first] = last_stop.try_emplace(s.stream, s.stop_ms);
    if (first) continue;
    idle[i] = std::max(0.0, s.start_ms - it->second);
    it->second = s.stop_ms;
  }
  return idle;
}

//! The overlap figures of one rank's spans per round (a launch's idle time counts in its
//! round), ascending by round.
[[nodiscard]] inline std::map<std::int32_t, overlap_figures> overlap_per_round(std::span<const timed_span> spans) {
  std::map<std::int32_t, overlap_figures> out;
  const std::vector<double> idle = idle_before(spans);
  for (std::size_t i = 0; i < spans.size(); ++i) {
    overlap_figures& f = out[spans[i].round];
    (spans[i].kind == timed_kind::exchange ? f.exchange_ms : f.launch_ms) += spans[i].duration_ms();
    f.exposed_ms += idle[i];
  }
  return out;
}

//! The overlap figures of one rank's spans (see the file comment): the rounds' summed.
[[nodiscard]] inline overlap_figures overlap_of(std::span<const timed_span> spans) {
  overlap_figures total;
  for (const auto& [round, f] : overlap_per_round(spans)) {
    total.launch_ms += f.launch_ms;
    total.exchange_ms += f.exchange_ms;
    total.exposed_ms += f.exposed_ms;
  }
  return total;
}

ZEPPELIN_NAMESPACE_END
