// zeppelin/core/plan_bytes.hpp
// A plan as bytes and back, so that one rank plans (the cost-driven planner takes
// milliseconds to seconds) and broadcasts the result over whatever channel the trainer has
// (NCCL, torch.distributed, MPI, a file).
//   to_bytes(plan)      -> std::vector<std::byte>
//   plan_from_bytes(b)  -> plan, equal (operator==) to the one written, or invalid_argument
// Layout, every integer little-endian whatever the host:
//   "ZPLN" | u32 format version (2) | str method | i32 nodes | i32 gpus_per_node | i64 capacity
//   | u64 ranks, per rank: u64 shards, per shard: i32 seq, i64 begin, i64 end, i32 group,
//     i32 micro_batch
//   | u64 groups, per group: i32 id, u8 zone, u8 collective, u64 members, i32 each
//   | u64 notes, per note: u8 kind, str text, u64 sequences, i32 each, u64 values, per value:
//     str name, f64 value (IEEE 754 bits)
//   | u64 fingerprint(plan) (core/fingerprint.hpp) | u64 checksum
// where str is a u64 byte count and the bytes, and the checksum the FNV-1a hash of every byte
// before it (the fingerprint leaves the notes out). The reader checks the checksum, every count
// against the bytes left, every enum against its values, and the fingerprint against the plan
// it read; it names the offset and what it expected. It does not validate the plan against a batch and topology
// (core/validate.hpp does). nvcc-safe (host code).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/fingerprint.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/plan_indices.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The format version to_bytes writes and plan_from_bytes reads.
//! Version 2 (0.2): structured notes (kind, sequences, values); version 1 had text only.
inline constexpr std::uint32_t plan_bytes_version = 2;

namespace detail {
inline std::uint64_t checksum(std::span<const std::byte> bytes) noexcept {
  fnv1a_hasher h;
  for (const std::byte b : bytes) h.add_bytes(std::string_view(reinterpret_cast<const char*>(&b), 1));
  return h.value();
}

class plan_writer {
 public:
  template <class U>
  void unsigned_value(U v) {
    for (std::size_t i = 0; i < sizeof(U); ++i) out.push_back(static_cast<std::byte>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff));
  }
  void i32(std::int32_t v) { unsigned_value(static_cast<std::uint32_t>(v)); }
  void i64(std::int64_t v) { unsigned_value(static_cast<std::uint64_t>(v)); }
  void text(const std::string& s) {
    unsigned_value(static_cast<std::uint64_t>(s.size()));
    for (const char c : s) out.push_back(static_cast<std::byte>(c));
  }
  std::vector<std::byte> out;
};

class plan_reader {
 public:
  //! `format` starts every message ("plan bytes"; formats that embed plans name themselves).
  explicit plan_reader(std::span<const std::byte> bytes, std::string_view format = "plan bytes") : in_(bytes), format_(format) {}

  template <class U>
  U unsigned_value(const char* what) {
    need(sizeof(U), what);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i) v |= static_cast<std::uint64_t>(in_[at_ + i]) << (8 * i);
    at_ += sizeof(U);
    return static_cast<U>(v);
  }
  std::int32_t i32(const char* what) { return static_cast<std::int32_t>(unsigned_value<std::uint32_t>(what)); }
  std::int64_t i64(const char* what) { return static_cast<std::int64_t>(unsigned_value<std::uint64_t>(what)); }
  //! A count of items of at least `item_bytes` bytes each, checked against the bytes left.
  std::size_t count(std::size_t item_bytes, const char* what) {
    const std::uint64_t n = unsigned_value<std::uint64_t>(what);
    ZEPPELIN_EXPECTS(item_bytes == 0 || n <= (in_.size() - at_) / item_bytes,
                     std::string(format_) + ": the count of " + what + " exceeds the bytes left",
                     {{"offset", double(at_)}, {"count", double(n)}, {"bytes_left", double(in_.size() - at_)}});
    return static_cast<std::size_t>(n);
  }
  std::string text(const char* what) {
    const std::size_t n = count(1, what);
    std::string s(n, '\0');
    for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(in_[at_ + i]);
    at_ += n;
    return s;
  }
  [[nodiscard]] std::size_t offset() const noexcept { return at_; }
  [[nodiscard]] std::size_t left() const noexcept { return in_.size() - at_; }
  [[nodiscard]] std::string_view format() const noexcept { return format_; }

 private:
  void need(std::size_t n, const char* what) {
    ZEPPELIN_EXPECTS(in_.size() - at_ >= n, std::string(format_) + ": truncated while reading " + what,
                     {{"offset", double(at_)}, {"needed", double(n)}, {"bytes_left", double(in_.size() - at_)}});
  }
  std::span<const std::byte> in_;
  std::size_t at_ = 0;
  std::string_view format_;
};

// The plan's fields, from method to notes (the file comment's layout between the version and
// the fingerprint): what to_bytes writes and formats that embed a plan write too.
inline void write_plan_fields(plan_writer& w, const plan& p) {
  w.text(p.method);
  w.i32(p.nodes);
  w.i32(p.gpus_per_node);
  w.i64(p.capacity);
  w.unsigned_value(static_cast<std::uint64_t>(p.placements.size()));
  for (const placement& pl : p.placements) {
    w.unsigned_value(static_cast<std::uint64_t>(pl.shards.size()));
    for (const shard& s : pl.shards) {
      w.i32(s.seq);
      w.i64(s.range.begin);
      w.i64(s.range.end);
      w.i32(s.group);
      w.i32(s.micro_batch);
    }
  }
  w.unsigned_value(static_cast<std::uint64_t>(p.groups.size()));
  for (const ring_group& g : p.groups) {
    w.i32(g.id);
    w.unsigned_value(static_cast<std::uint8_t>(g.zone));
    w.unsigned_value(static_cast<std::uint8_t>(g.collective));
    w.unsigned_value(static_cast<std::uint64_t>(g.ranks.size()));
    for (const rank_index r : g.ranks) w.i32(r);
  }
  w.unsigned_value(static_cast<std::uint64_t>(p.notes.size()));
  for (const plan_note& n : p.notes) {
    w.unsigned_value(static_cast<std::uint8_t>(n.kind));
    w.text(n.text);
    w.unsigned_value(static_cast<std::uint64_t>(n.sequences.size()));
    for (const sequence_index q : n.sequences) w.i32(q);
    w.unsigned_value(static_cast<std::uint64_t>(n.values.size()));
    for (const note_value& v : n.values) {
      w.text(v.name);
      w.unsigned_value(std::bit_cast<std::uint64_t>(v.value));
    }
  }
}

// The fields write_plan_fields wrote, every count and enum checked (see plan_from_bytes).
inline plan read_plan_fields(plan_reader& r) {
  plan p;
  p.method = r.text("method");
  p.nodes = r.i32("nodes");
  p.gpus_per_node = r.i32("gpus_per_node");
  p.capacity = r.i64("capacity");
  p.placements.resize(r.count(8, "ranks"));
  for (placement& pl : p.placements) {
    pl.shards.resize(r.count(28, "shards"));
    for (shard& s : pl.shards) {
      s.seq = r.i32("shard seq");
      s.range.begin = r.i64("shard begin");
      s.range.end = r.i64("shard end");
      s.group = r.i32("shard group");
      s.micro_batch = r.i32("shard micro_batch");
    }
  }
  p.groups.resize(r.count(14, "groups"));
  for (ring_group& g : p.groups) {
    g.id = r.i32("group id");
    const std::size_t at = r.offset();
    const auto zone = r.unsigned_value<std::uint8_t>("group zone");
    const auto collective = r.unsigned_value<std::uint8_t>("group collective");
    ZEPPELIN_EXPECTS(zone <= static_cast<std::uint8_t>(zone_kind::inter_node) && collective <= static_cast<std::uint8_t>(collective_kind::all_to_all),
                     std::string(r.format()) + ": a group's zone or collective is not one the library knows",
                     {{"offset", double(at)}, {"zone", double(zone)}, {"collective", double(collective)}});
    g.zone = static_cast<zone_kind>(zone);
    g.collective = static_cast<collective_kind>(collective);
    g.ranks.resize(r.count(4, "group members"));
    for (rank_index& m : g.ranks) m = r.i32("group member");
  }
  p.notes.resize(r.count(25, "notes"));
  for (plan_note& n : p.notes) {
    const std::size_t at = r.offset();
    const auto kind = r.unsigned_value<std::uint8_t>("note kind");
    ZEPPELIN_EXPECTS(kind <= static_cast<std::uint8_t>(note_kind::other), std::string(r.format()) + ": a note's kind is not one the library knows",
                     {{"offset", double(at)}, {"kind", double(kind)}});
    n.kind = static_cast<note_kind>(kind);
    n.text = r.text("note text");
    n.sequences.resize(r.count(4, "note sequences"));
    for (sequence_index& q : n.sequences) q = r.i32("note sequence");
    n.values.resize(r.count(16, "note values"));
    for (note_value& v : n.values) {
      v.name = r.text("note value name");
      v.value = std::bit_cast<double>(r.unsigned_value<std::uint64_t>("note value"));
    }
  }
  check_plan_indices(p, r.format());
  return p;
}
}  // namespace detail

//! `p` in the layout of the file comment.
[[nodiscard]] inline std::vector<std::byte> to_bytes(const plan& p) {
  detail::plan_writer w;
  for (const char c : {'Z', 'P', 'L', 'N'}) w.out.push_back(static_cast<std::byte>(c));
  w.unsigned_value(plan_bytes_version);
  detail::write_plan_fields(w, p);
  w.unsigned_value(fingerprint(p));
  w.unsigned_value(detail::checksum(w.out));
  return std::move(w.out);
}

//! The plan `bytes` hold (see the file comment). Throws invalid_argument naming the offset
//! for a wrong checksum, magic or version, truncated or oversized counts, an unknown zone or collective,
//! trailing bytes, or a fingerprint that does not match the plan read.
[[nodiscard]] inline plan plan_from_bytes(std::span<const std::byte> bytes) {
  ZEPPELIN_EXPECTS(bytes.size() >= 8, "plan bytes: too short to hold a plan", {{"bytes", double(bytes.size())}});
  const std::span<const std::byte> body = bytes.first(bytes.size() - 8);
  detail::plan_reader trailer(bytes.last(8));
  const std::uint64_t sum = trailer.unsigned_value<std::uint64_t>("checksum");
  ZEPPELIN_EXPECTS(sum == detail::checksum(body), "plan bytes: the checksum does not match (corrupted or truncated bytes)",
                   {{"bytes", double(bytes.size())}});
  detail::plan_reader r(body);
  const bool magic = r.left() >= 4 && bytes[0] == std::byte{'Z'} && bytes[1] == std::byte{'P'} && bytes[2] == std::byte{'L'} &&
                     bytes[3] == std::byte{'N'};
  ZEPPELIN_EXPECTS(magic, "plan bytes: these bytes do not start with a plan's magic \"ZPLN\"", {{"bytes", double(bytes.size())}});
  (void)r.unsigned_value<std::uint32_t>("magic");
  const std::uint32_t version = r.unsigned_value<std::uint32_t>("version");
  ZEPPELIN_EXPECTS(version == plan_bytes_version, "plan bytes: unsupported format version",
                   {{"version", double(version)}, {"supported", double(plan_bytes_version)}});
  plan p = detail::read_plan_fields(r);
  const std::uint64_t stored = r.unsigned_value<std::uint64_t>("fingerprint");
  ZEPPELIN_EXPECTS(r.left() == 0, "plan bytes: bytes left after the plan", {{"offset", double(r.offset())}, {"bytes_left", double(r.left())}});
  const std::uint64_t computed = fingerprint(p);
  ZEPPELIN_EXPECTS(stored == computed, "plan bytes: the fingerprint does not match the plan read (corrupted bytes?)",
                   {{"stored", double(stored)}, {"computed", double(computed)}});
  return p;
}

ZEPPELIN_NAMESPACE_END
