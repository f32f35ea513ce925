// zeppelin/cuda/token_runs.hpp
// Token runs: the plan of a gather / scatter of token rows between two packed layouts.
//   token_run{src, dst, length}   copy rows src .. src+length of the source tensor to rows
//                                 dst .. dst+length of the destination (units: tokens)
//   gather_runs(src_starts, segments)   segment i = (sequence s, token range r) of a layout whose
//       sequence s starts at row src_starts[s] (e.g. cu_seqlens); the destination packs the
//       segments back to back in list order (dispatch: batch layout -> rank-local buffer)
//   scatter_runs(dst_starts, segments)  the inverse (remap back: packed buffer -> batch layout)
// Adjacent runs that continue each other in both tensors are fused, so a plan made of many
// small consecutive ranges costs one copy. Host code, nvcc-safe (std::vector only).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

//! One contiguous run of token rows (all in tokens).
struct token_run {
  std::int64_t src = 0;
  std::int64_t dst = 0;
  std::int64_t length = 0;
  friend constexpr bool operator==(const token_run&, const token_run&) = default;
};

//! A token range of one sequence.
struct sequence_segment {
  sequence_index seq = 0;
  token_range range;
};

namespace detail {
inline void append_run(std::vector<token_run>& runs, token_run run) {
  if (run.length == 0) return;
  if (!runs.empty()) {
    token_run& last = runs.back();
    if (last.src + last.length == run.src && last.dst + last.length == run.dst) {
      last.length += run.length;
      return;
    }
  }
  runs.push_back(run);
}

inline std::vector<token_run> segment_runs(std::span<const std::int64_t> starts, std::span<const sequence_segment> segments,
                                           bool gather) {
  std::vector<token_run> runs;
  runs.reserve(segments.size());
  std::int64_t packed = 0;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const auto& seg = segments[i];
    ZEPPELIN_EXPECTS(seg.seq >= 0 && static_cast<std::size_t>(seg.seq) < starts.size(), "segment names an unknown sequence",
                     {{"segment", double(i)}, {"seq", double(seg.seq)}, {"sequences", double(starts.size())}});
    ZEPPELIN_EXPECTS(seg.range.begin >= 0 && seg.range.end >= seg.range.begin, "segment range is not a valid range",
                     {{"segment", double(i)}, {"begin", double(seg.range.begin)}, {"end", double(seg.range.end)}});
    const std::int64_t laid_out = starts[static_cast<std::size_t>(seg.seq)] + seg.range.begin;
    const std::int64_t length = seg.range.size();
    append_run(runs, gather ? token_run{laid_out, packed, length} : token_run{packed, laid_out, length});
    packed += length;
  }
  return runs;
}
}  // namespace detail

//! Runs that gather `segments` (in list order) out of a layout where sequence s starts at row
//! starts[s]. Throws invalid_argument for an unknown sequence or a reversed range.
[[nodiscard]] inline std::vector<token_run> gather_runs(std::span<const std::int64_t> starts,
                                                        std::span<const sequence_segment> segments) {
  return detail::segment_runs(starts, segments, true);
}

//! Runs that scatter a packed buffer of `segments` (in list order) into a layout where
//! sequence s starts at row starts[s].
[[nodiscard]] inline std::vector<token_run> scatter_runs(std::span<const std::int64_t> starts,
                                                         std::span<const sequence_segment> segments) {
  return detail::segment_runs(starts, segments, false);
}

//! Tokens moved by `runs`, and the longest run (sizes the vectorised kernel's grid).
[[nodiscard]] inline std::int64_t total_tokens(std::span<const token_run> runs) noexcept {
  std::int64_t sum = 0;
  for (const auto& r : runs) sum += r.length;
  return sum;
}
[[nodiscard]] inline std::int64_t longest_run(std::span<const token_run> runs) noexcept {
  std::int64_t longest = 0;
  for (const auto& r : runs) longest = r.length > longest ? r.length : longest;
  return longest;
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
