// zeppelin/cuda/executor/device_timeline.hpp
// When one rank's device work ran: a pair of timing events around each attention launch and
// each exchange the device backend enqueues in a pass (cuda/executor/device_backend.hpp).
//   in : open() and close() from the backend as it enqueues: a launch's span opens on its
//        compute stream after the waits for its dependencies (so it starts when its data is
//        there and its stream is free) and closes after its last kernel (the forward's LSE
//        merge included); an exchange's span opens on the communication stream after the
//        waits for the operations it sends and closes after its last copy
//   out: read(), once everything enqueued has completed (the caller synchronised): the spans
//        in enqueue order, in milliseconds from the first span's start (negative for a span that
//        began before it; exec/overlap.hpp: timed_span, and overlap_of() for the exposed wait
//        and hidden share)
// The events cost a record each; a pass given no timeline records none. A timeline belongs to
// one rank; reusing it for another pass appends (clear() starts over).
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/exec/overlap.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

class device_timeline {
 public:
  //! Opens a span on `s` (records its start there); returns its index for close().
  std::size_t open(timed_kind kind, std::int32_t level, std::int32_t round, std::int32_t stream, cudaStream_t s) {
    marks_.push_back({{.kind = kind, .level = level, .round = round, .stream = stream}, device::cuda_event(true), device::cuda_event(true)});
    marks_.back().start.record(s);
    return marks_.size() - 1;
  }
  //! Closes span `i` on `s` (records its stop there).
  void close(std::size_t i, cudaStream_t s) {
    ZEPPELIN_EXPECTS(i < marks_.size(), "device timeline: no such span", {{"span", double(i)}, {"spans", double(marks_.size())}});
    marks_[i].stop.record(s);
    marks_[i].closed = true;
  }
  //! The spans, in ms from the first start. Blocks until every stop event has completed.
  [[nodiscard]] std::vector<timed_span> read() const {
    std::vector<timed_span> out;
    out.reserve(marks_.size());
    for (const mark& m : marks_) {
      ZEPPELIN_EXPECTS(m.closed, "device timeline: a span was opened and never closed", {{"span", double(out.size())}});
      m.stop.synchronize();
      timed_span s = m.span;
      s.start_ms = device::cuda_event::elapsed_ms(marks_.front().start, m.start);
      s.stop_ms = device::cuda_event::elapsed_ms(marks_.front().start, m.stop);
      out.push_back(s);
    }
    return out;
  }
  void clear() noexcept { marks_.clear(); }

 private:
  struct mark {
    timed_span span;
    device::cuda_event start, stop;
    bool closed = false;
  };
  std::vector<mark> marks_;
};

ZEPPELIN_NAMESPACE_END
