// zeppelin/step/fingerprint.hpp
// A 64-bit FNV-1a hash of a step plan's content (step/step_plan.hpp), so every rank and
// machine that built the same step plan gets the same number. Ranks exchange it to detect
// divergent plans; step/step_plan_bytes.hpp and step/step_plan_json.hpp store it and check it.
//   in : a step plan
//   out: fingerprint(p), hashing with core/fingerprint.hpp's fnv1a_hasher (integers as
//        little-endian 8-byte words, every list length-prefixed), in order: nodes,
//        gpus_per_node, the documents, per replica tp, cp, pp, ranks, layers, tp_mode, the
//        schedule (kind, virtual stages, chains), per micro-batch its pieces (document,
//        begin, end) and fingerprint(layout) (core/fingerprint.hpp: the layout's notes
//        excluded), recompute; then sync
// Errors: none (noexcept). nvcc-safe (host-only data).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/fingerprint.hpp>
#include <zeppelin/schedule/pipeline/any_schedule.hpp>
#include <zeppelin/step/step_plan.hpp>

#include <cstdint>
#include <variant>

ZEPPELIN_NAMESPACE_BEGIN

[[nodiscard]] inline std::uint64_t fingerprint(const step_plan& p) noexcept {
  fnv1a_hasher h;
  h.add(p.nodes);
  h.add(p.gpus_per_node);
  h.add(static_cast<std::int64_t>(p.documents.size()));
  for (const token_count d : p.documents) h.add(d);
  h.add(static_cast<std::int64_t>(p.replicas.size()));
  for (const step_replica& r : p.replicas) {
    h.add(r.tp);
    h.add(r.cp);
    h.add(r.pp);
    h.add(static_cast<std::int64_t>(r.ranks.size()));
    for (const rank_index x : r.ranks) h.add(x);
    h.add(static_cast<std::int64_t>(r.layers.size()));
    for (const int n : r.layers) h.add(n);
    h.add(static_cast<std::int64_t>(r.tp_mode));
    h.add(static_cast<std::int64_t>(r.schedule.kind()));
    h.add(r.schedule.virtual_stages());
    const auto* chunked = std::get_if<chunk_one_f_one_b>(&r.schedule.policy);
    h.add(static_cast<std::int64_t>(chunked ? chunked->chains.size() : 0));
    if (chunked)
      for (const int c : chunked->chains) h.add(c);
    h.add(static_cast<std::int64_t>(r.micro_batches.size()));
    for (const step_micro_batch& mb : r.micro_batches) {
      h.add(static_cast<std::int64_t>(mb.pieces.size()));
      for (const step_piece& x : mb.pieces) {
        h.add(x.document);
        h.add(x.begin);
        h.add(x.end);
      }
      h.add(static_cast<std::int64_t>(fingerprint(mb.layout)));
    }
    h.add(static_cast<std::int64_t>(r.recompute.size()));
    for (const std::int32_t n : r.recompute) h.add(n);
  }
  h.add(static_cast<std::int64_t>(p.sync));
  return h.value();
}

ZEPPELIN_NAMESPACE_END
