// zeppelin/program/block_list.hpp
// The blocks of one attention launch, shareable between launches.
//   in : the blocks (schedule/ring_schedule.hpp: attention_block), moved in once
//   out: an immutable list; copies share it
// Why shared: the lanes of an all-to-all (Ulysses) subgroup compute the same blocks, each on
// its own share of the heads. A subgroup of u lanes holding whole sequences lists one block
// per sequence; for a million one-token sequences on 64 GPUs that is a block list of half a
// million entries per lane and round, which u lanes held apart would store u times over. The
// program stores it once, and the builder and the simulator do their per-list work (launch
// waves, pricing) once per list (is_shared, identity).
// A value type: == compares the blocks (lists that share compare equal at once).
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

class block_list {
 public:
  block_list() = default;
  explicit block_list(std::vector<attention_block> blocks)
      : blocks_(blocks.empty() ? nullptr : std::make_shared<const std::vector<attention_block>>(std::move(blocks))) {}

  [[nodiscard]] const std::vector<attention_block>& items() const noexcept { return blocks_ ? *blocks_ : no_blocks(); }
  [[nodiscard]] std::size_t size() const noexcept { return items().size(); }
  [[nodiscard]] bool empty() const noexcept { return items().empty(); }
  [[nodiscard]] const attention_block& operator[](std::size_t i) const noexcept { return items()[i]; }
  [[nodiscard]] auto begin() const noexcept { return items().begin(); }
  [[nodiscard]] auto end() const noexcept { return items().end(); }

  //! Whether another list (another launch, or a request the builder still holds) shares
  //! these blocks: work on them worth doing once per list rather than once per launch.
  [[nodiscard]] bool is_shared() const noexcept { return blocks_ && blocks_.use_count() > 1; }
  //! The same address for lists that share their blocks (nullptr for an empty list): a key
  //! for work done once per list, valid while one of them lives.
  [[nodiscard]] const void* identity() const noexcept { return blocks_.get(); }

  friend bool operator==(const block_list& a, const block_list& b) noexcept {
    return a.blocks_ == b.blocks_ || a.items() == b.items();
  }

 private:
  static const std::vector<attention_block>& no_blocks() noexcept {
    static const std::vector<attention_block> none;
    return none;
  }
  std::shared_ptr<const std::vector<attention_block>> blocks_;
};

ZEPPELIN_NAMESPACE_END
