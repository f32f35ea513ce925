// zeppelin/program/remap_program.hpp
// The execution program of one stand-alone remap: a dispatch from a data loader's layout
// (exec/relayout.hpp), a solver's remap, or their inverse (remap/layout.hpp), so the
// engines move it with the same backends and driver as the attention layer.
//   in : a relayout_plan x (identical on every rank), the wire format and the kind of row moved
//   out: an execution program with one level, one forward segment per rank (remap_out) of
//        source rows x.ranks[r].source_tokens -> target rows x.ranks[r].target_tokens:
//        pack, keep, one phase (a direct payload per sender and receiver pair), unpack
//        (program/detail/remap_level.hpp).
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/transfer.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/detail/level_work.hpp>
#include <zeppelin/program/detail/remap_level.hpp>
#include <zeppelin/program/detail/segment_writer.hpp>
#include <zeppelin/program/options.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/remap/layout.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

[[nodiscard]] inline execution_program make_remap_program(const relayout_plan& x, const wire_format& wire, row_kind rows_of) {
  wire.check();
  execution_program out;
  out.wire = wire;
  const auto R = x.ranks.size();
  out.rows.assign(R, 0);
  out.shard_row.assign(R, {});
  out.streams = {{0}};
  out.levels.push_back({0, level_kind::remap_out, {1, 0}});
  auto& ranks = out.passes[static_cast<int>(pass_kind::forward)];
  ranks.assign(R, rank_pass{});
  out.passes[static_cast<int>(pass_kind::backward)].assign(R, rank_pass{});
  const detail::arena_allocator allocate{[&](rank_index r, const arena& a) {
    auto& arenas = ranks[static_cast<std::size_t>(r)].arenas;
    arenas.push_back(a);
    return static_cast<std::int32_t>(arenas.size() - 1);
  }};
  detail::level_work w(0, 0, 1, static_cast<rank_index>(R));
  const std::vector<detail::offset_map> identity(R);
  detail::build_remap(w, x, identity, identity, rows_of, wire.row_bytes(rows_of), allocate);
  std::vector<program_segment*> segs;
  for (std::size_t r = 0; r < R; ++r) {
    ranks[r].segments.push_back({segment_kind::remap_out, 0, {}, x.ranks[r].source_tokens, x.ranks[r].target_tokens, rows_of});
    segs.push_back(&ranks[r].segments.back());
  }
  // direct: each payload is its own piece
  const auto direct = [](std::span<const transfer> payloads) { return std::vector<transfer>(payloads.begin(), payloads.end()); };
  detail::segment_writer writer(out, pass_kind::forward, launch_policy::per_group, std::move(segs), direct);
  writer.setup(w);
  writer.round(w, 0);
  return out;
}

ZEPPELIN_NAMESPACE_END
