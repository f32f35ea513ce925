// zeppelin/core/fingerprint.hpp
// A 64-bit FNV-1a hash of a plan's content (method, shape, capacity, every shard and group,
// in order; notes excluded), fixed byte order and widths, so every rank and machine that
// built the same plan gets the same number. Ranks exchange it to detect divergent plans.
// nvcc-safe.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/plan.hpp>

#include <cstdint>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

//! Incremental FNV-1a (64-bit). Integers are fed as little-endian 8-byte words.
class fnv1a_hasher {
 public:
  constexpr void add_bytes(std::string_view bytes) noexcept {
    for (unsigned char c : bytes) {
      state_ ^= c;
      state_ *= 0x100000001B3ull;
    }
  }
  constexpr void add(std::int64_t value) noexcept {
    auto v = static_cast<std::uint64_t>(value);
    for (int i = 0; i < 8; ++i) {
      state_ ^= (v >> (8 * i)) & 0xFFu;
      state_ *= 0x100000001B3ull;
    }
  }
  //! Strings are length-prefixed so ("ab","c") and ("a","bc") differ.
  constexpr void add(std::string_view text) noexcept {
    add(static_cast<std::int64_t>(text.size()));
    add_bytes(text);
  }
  [[nodiscard]] constexpr std::uint64_t value() const noexcept { return state_; }

 private:
  std::uint64_t state_ = 0xCBF29CE484222325ull;
};

[[nodiscard]] inline std::uint64_t fingerprint(const plan& p) noexcept {
  fnv1a_hasher h;
  h.add(std::string_view(p.method));
  h.add(p.nodes);
  h.add(p.gpus_per_node);
  h.add(p.capacity);
  h.add(static_cast<std::int64_t>(p.placements.size()));
  for (const auto& pl : p.placements) {
    h.add(static_cast<std::int64_t>(pl.shards.size()));
    for (const auto& s : pl.shards) {
      h.add(s.seq);
      h.add(s.range.begin);
      h.add(s.range.end);
      h.add(s.group);
      h.add(s.micro_batch);
    }
  }
  h.add(static_cast<std::int64_t>(p.groups.size()));
  for (const auto& g : p.groups) {
    h.add(g.id);
    h.add(static_cast<std::int64_t>(g.zone));
    h.add(static_cast<std::int64_t>(g.collective));
    h.add(static_cast<std::int64_t>(g.ranks.size()));
    for (auto r : g.ranks) h.add(r);
  }
  return h.value();
}

//! Hash of a batch's lengths and ids: lets ranks check they plan the same input.
[[nodiscard]] inline std::uint64_t fingerprint(const batch& b) noexcept {
  fnv1a_hasher h;
  h.add(static_cast<std::int64_t>(b.size()));
  for (sequence_index i = 0; i < b.size(); ++i) {
    h.add(b.lengths()[static_cast<std::size_t>(i)]);
    h.add(b.ids()[static_cast<std::size_t>(i)]);
  }
  return h.value();
}

ZEPPELIN_NAMESPACE_END
