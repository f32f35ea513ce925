// zeppelin/step/step_plan_bytes.hpp
// A step plan (step/step_plan.hpp) as bytes and back, so that one rank plans the iteration
// and broadcasts it over whatever channel the trainer has (NCCL, torch.distributed, MPI, a
// file), as core/plan_bytes.hpp does for one CP layout.
//   to_bytes(step_plan)       -> std::vector<std::byte>
//   step_plan_from_bytes(b)   -> step_plan, equal (operator==) to the one written, or
//                                invalid_argument
// Layout, every integer little-endian whatever the host:
//   "ZSTP" | u32 format version (1) | i32 nodes | i32 gpus_per_node | u64 documents, i64 each
//   | u64 replicas, per replica: i32 tp, i32 cp, i32 pp | u64 ranks, i32 each | u64 layers,
//     i32 each | u8 tp_mode | u8 schedule kind, i32 virtual stages (1 but for interleaved),
//     u64 chains (0 but for chunk-1f1b), i32 each | u64 micro-batches, per micro-batch:
//     u64 pieces, per piece: i64 document, i64 begin, i64 end; its layout as
//     core/plan_bytes.hpp lays a plan out between the version and the fingerprint (method
//     to notes) | u64 recompute, i32 each
//   | u8 sync | u64 fingerprint(step plan) (step/fingerprint.hpp) | u64 checksum
// where the checksum is the FNV-1a hash of every byte before it (the fingerprint leaves the
// layouts' notes out; the checksum covers them). The reader checks the checksum, every count
// against the bytes left, every enum (tp_mode, schedule kind, sync, and the layouts' zones,
// collectives and note kinds) against its values, virtual stages and chains against the
// schedule kind, and the fingerprint against the plan it read; it names the offset and what
// it expected. It does not validate the plan against a cluster and model (step/validate.hpp
// does).
// Errors: invalid_argument, "step plan bytes: ..." naming the offset. nvcc-safe (host code).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan_bytes.hpp>
#include <zeppelin/schedule/pipeline/any_schedule.hpp>
#include <zeppelin/step/fingerprint.hpp>
#include <zeppelin/step/step_plan.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The format version to_bytes(step_plan) writes and step_plan_from_bytes reads.
inline constexpr std::uint32_t step_plan_bytes_version = 1;

//! `p` in the layout of the file comment.
[[nodiscard]] inline std::vector<std::byte> to_bytes(const step_plan& p) {
  detail::plan_writer w;
  for (const char c : {'Z', 'S', 'T', 'P'}) w.out.push_back(static_cast<std::byte>(c));
  w.unsigned_value(step_plan_bytes_version);
  w.i32(p.nodes);
  w.i32(p.gpus_per_node);
  w.unsigned_value(static_cast<std::uint64_t>(p.documents.size()));
  for (const token_count d : p.documents) w.i64(d);
  w.unsigned_value(static_cast<std::uint64_t>(p.replicas.size()));
  for (const step_replica& r : p.replicas) {
    w.i32(r.tp);
    w.i32(r.cp);
    w.i32(r.pp);
    w.unsigned_value(static_cast<std::uint64_t>(r.ranks.size()));
    for (const rank_index x : r.ranks) w.i32(x);
    w.unsigned_value(static_cast<std::uint64_t>(r.layers.size()));
    for (const int n : r.layers) w.i32(n);
    w.unsigned_value(static_cast<std::uint8_t>(r.tp_mode));
    w.unsigned_value(static_cast<std::uint8_t>(r.schedule.kind()));
    w.i32(r.schedule.virtual_stages());
    const auto* chunked = std::get_if<chunk_one_f_one_b>(&r.schedule.policy);
    w.unsigned_value(static_cast<std::uint64_t>(chunked ? chunked->chains.size() : 0));
    if (chunked)
      for (const int c : chunked->chains) w.i32(c);
    w.unsigned_value(static_cast<std::uint64_t>(r.micro_batches.size()));
    for (const step_micro_batch& mb : r.micro_batches) {
      w.unsigned_value(static_cast<std::uint64_t>(mb.pieces.size()));
      for (const step_piece& x : mb.pieces) {
        w.i64(x.document);
        w.i64(x.begin);
        w.i64(x.end);
      }
      detail::write_plan_fields(w, mb.layout);
    }
    w.unsigned_value(static_cast<std::uint64_t>(r.recompute.size()));
    for (const std::int32_t n : r.recompute) w.i32(n);
  }
  w.unsigned_value(static_cast<std::uint8_t>(p.sync));
  w.unsigned_value(fingerprint(p));
  w.unsigned_value(detail::checksum(w.out));
  return std::move(w.out);
}

//! The step plan `bytes` hold (see the file comment). Throws invalid_argument naming the
//! offset for a wrong checksum, magic or version, truncated or oversized counts, an unknown
//! TP mode, schedule kind, sync, zone, collective or note kind, virtual stages or chains on a
//! schedule that has none, trailing bytes, or a fingerprint that does not match the plan read.
[[nodiscard]] inline step_plan step_plan_from_bytes(std::span<const std::byte> bytes) {
  ZEPPELIN_EXPECTS(bytes.size() >= 8, "step plan bytes: too short to hold a step plan", {{"bytes", double(bytes.size())}});
  const std::span<const std::byte> body = bytes.first(bytes.size() - 8);
  detail::plan_reader trailer(bytes.last(8), "step plan bytes");
  const std::uint64_t sum = trailer.unsigned_value<std::uint64_t>("checksum");
  ZEPPELIN_EXPECTS(sum == detail::checksum(body), "step plan bytes: the checksum does not match (corrupted or truncated bytes)",
                   {{"bytes", double(bytes.size())}});
  detail::plan_reader r(body, "step plan bytes");
  const bool magic = r.left() >= 4 && bytes[0] == std::byte{'Z'} && bytes[1] == std::byte{'S'} && bytes[2] == std::byte{'T'} &&
                     bytes[3] == std::byte{'P'};
  ZEPPELIN_EXPECTS(magic, "step plan bytes: these bytes do not start with a step plan's magic \"ZSTP\"", {{"bytes", double(bytes.size())}});
  (void)r.unsigned_value<std::uint32_t>("magic");
  const std::uint32_t version = r.unsigned_value<std::uint32_t>("version");
  ZEPPELIN_EXPECTS(version == step_plan_bytes_version, "step plan bytes: unsupported format version",
                   {{"version", double(version)}, {"supported", double(step_plan_bytes_version)}});
  step_plan p;
  p.nodes = r.i32("nodes");
  p.gpus_per_node = r.i32("gpus_per_node");
  p.documents.resize(r.count(8, "documents"));
  for (token_count& d : p.documents) d = r.i64("document length");
  // a replica: 3 degrees, 4 counts, 2 enum bytes, virtual stages; a micro-batch: its pieces'
  // count and its layout's method, nodes, gpus_per_node, capacity and 3 counts
  p.replicas.resize(r.count(58, "replicas"));
  for (step_replica& x : p.replicas) {
    x.tp = r.i32("replica tp");
    x.cp = r.i32("replica cp");
    x.pp = r.i32("replica pp");
    x.ranks.resize(r.count(4, "replica ranks"));
    for (rank_index& rank : x.ranks) rank = r.i32("replica rank");
    x.layers.resize(r.count(4, "replica layers"));
    for (int& n : x.layers) n = r.i32("replica layers of a virtual stage");
    std::size_t at = r.offset();
    const auto mode = r.unsigned_value<std::uint8_t>("replica tp_mode");
    ZEPPELIN_EXPECTS(mode <= static_cast<std::uint8_t>(tp_collectives::sequence_parallel),
                     "step plan bytes: a replica's TP mode is not one the library knows", {{"offset", double(at)}, {"tp_mode", double(mode)}});
    x.tp_mode = static_cast<tp_collectives>(mode);
    at = r.offset();
    const auto kind = r.unsigned_value<std::uint8_t>("schedule kind");
    ZEPPELIN_EXPECTS(kind <= static_cast<std::uint8_t>(pipeline_schedule_kind::chunk_one_f_one_b),
                     "step plan bytes: a replica's pipeline schedule kind is not one the library knows",
                     {{"offset", double(at)}, {"kind", double(kind)}});
    at = r.offset();
    const std::int32_t virtual_stages = r.i32("schedule virtual stages");
    ZEPPELIN_EXPECTS(kind == static_cast<std::uint8_t>(pipeline_schedule_kind::interleaved) || virtual_stages == 1,
                     "step plan bytes: virtual stages other than 1 apply to the interleaved schedule only",
                     {{"offset", double(at)}, {"kind", double(kind)}, {"virtual_stages", double(virtual_stages)}});
    at = r.offset();
    std::vector<int> chains(r.count(4, "schedule chains"));
    for (int& c : chains) c = r.i32("schedule chain");
    ZEPPELIN_EXPECTS(kind == static_cast<std::uint8_t>(pipeline_schedule_kind::chunk_one_f_one_b) || chains.empty(),
                     "step plan bytes: chains apply to the chunk-level 1F1B schedule only",
                     {{"offset", double(at)}, {"kind", double(kind)}, {"chains", double(chains.size())}});
    switch (static_cast<pipeline_schedule_kind>(kind)) {
      case pipeline_schedule_kind::gpipe: x.schedule = {gpipe{}}; break;
      case pipeline_schedule_kind::one_f_one_b: x.schedule = {one_f_one_b{}}; break;
      case pipeline_schedule_kind::interleaved: x.schedule = {interleaved_one_f_one_b{.virtual_stages = virtual_stages}}; break;
      case pipeline_schedule_kind::chunk_one_f_one_b: x.schedule = {chunk_one_f_one_b{.chains = std::move(chains)}}; break;
    }
    x.micro_batches.resize(r.count(56, "micro-batches"));
    for (step_micro_batch& mb : x.micro_batches) {
      mb.pieces.resize(r.count(24, "pieces"));
      for (step_piece& piece : mb.pieces) {
        piece.document = r.i64("piece document");
        piece.begin = r.i64("piece begin");
        piece.end = r.i64("piece end");
      }
      mb.layout = detail::read_plan_fields(r);
    }
    x.recompute.resize(r.count(4, "recompute counts"));
    for (std::int32_t& n : x.recompute) n = r.i32("recompute count");
  }
  const std::size_t at = r.offset();
  const auto sync = r.unsigned_value<std::uint8_t>("sync");
  ZEPPELIN_EXPECTS(sync <= static_cast<std::uint8_t>(gradient_sync::switching), "step plan bytes: the gradient sync is not one the library knows",
                   {{"offset", double(at)}, {"sync", double(sync)}});
  p.sync = static_cast<gradient_sync>(sync);
  const std::uint64_t stored = r.unsigned_value<std::uint64_t>("fingerprint");
  ZEPPELIN_EXPECTS(r.left() == 0, "step plan bytes: bytes left after the step plan",
                   {{"offset", double(r.offset())}, {"bytes_left", double(r.left())}});
  const std::uint64_t computed = fingerprint(p);
  ZEPPELIN_EXPECTS(stored == computed, "step plan bytes: the fingerprint does not match the step plan read (corrupted bytes?)",
                   {{"stored", double(stored)}, {"computed", double(computed)}});
  return p;
}

ZEPPELIN_NAMESPACE_END
