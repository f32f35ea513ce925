// zeppelin/core/batch.hpp
// A global batch of variable-length sequences: the input of every planner.
// In:  sequence lengths (tokens, 1 .. max_sequence_length) and optional user ids (unique;
//      default 0..n-1).
// Out: lengths, ids, totals and CSR offsets (cu_seqlens, n + 1 entries, cu[0] = 0).
// nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! User-visible identifier of a sequence (document id, dataset index, ...).
using sequence_id = std::int64_t;

//! The longest sequence a batch takes: the largest n whose n (n + 1) is exact in 64 bits, so
//! every causal pair count of it (cost/causal_pairs.hpp) is exact. A batch's pairs together,
//! sum n (n + 1) / 2, must fit 64 bits as well: then every sum over a subset of them does.
inline constexpr std::int64_t max_sequence_length = 3'037'000'499;

class batch {
 public:
  //! Throws invalid_argument for an empty batch, a length <= 0, a token total that
  //! overflows token_count, a size mismatch between lengths and ids, or duplicate ids.
  explicit batch(std::vector<token_count> lengths) : batch(std::move(lengths), {}) {}

  batch(std::vector<token_count> lengths, std::vector<sequence_id> ids)
      : lengths_(std::move(lengths)), ids_(std::move(ids)) {
    ZEPPELIN_EXPECTS(!lengths_.empty(), "a batch needs at least one sequence", {});
    ZEPPELIN_EXPECTS(lengths_.size() <= static_cast<std::size_t>(std::numeric_limits<sequence_index>::max()),
                     "too many sequences in one batch", {{"sequences", static_cast<double>(lengths_.size())}});
    if (ids_.empty()) {
      ids_.resize(lengths_.size());
      for (std::size_t i = 0; i < ids_.size(); ++i) ids_[i] = static_cast<sequence_id>(i);
    }
    ZEPPELIN_EXPECTS(ids_.size() == lengths_.size(), "one id per sequence is required",
                     {{"lengths", static_cast<double>(lengths_.size())}, {"ids", static_cast<double>(ids_.size())}});
    cu_seqlens_.resize(lengths_.size() + 1);
    cu_seqlens_[0] = 0;
    for (std::size_t i = 0; i < lengths_.size(); ++i) {
      const token_count len = lengths_[i];
      ZEPPELIN_EXPECTS(len > 0 && len <= max_sequence_length,
                       "sequence lengths must be positive and at most max_sequence_length (3037000499: longer "
                       "sequences have causal pair counts past 64 bits)",
                       {{"sequence", static_cast<double>(i)}, {"length", static_cast<double>(len)}});
      const std::int64_t pairs = len % 2 == 0 ? len / 2 * (len + 1) : (len + 1) / 2 * len;
      ZEPPELIN_EXPECTS(pairs_ <= std::numeric_limits<std::int64_t>::max() - pairs,
                       "the batch's causal pairs (sum of n (n + 1) / 2) overflow 64 bits",
                       {{"sequence", static_cast<double>(i)}, {"length", static_cast<double>(len)}});
      pairs_ += pairs;
      ZEPPELIN_EXPECTS(cu_seqlens_[i] <= std::numeric_limits<token_count>::max() - len,
                       "the batch's token total overflows", {{"sequence", static_cast<double>(i)}});
      cu_seqlens_[i + 1] = cu_seqlens_[i] + len;
      max_length_ = std::max(max_length_, len);
    }
    std::vector<sequence_id> sorted = ids_;
    std::sort(sorted.begin(), sorted.end());
    const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    ZEPPELIN_EXPECTS(dup == sorted.end(), "sequence ids must be unique",
                     {{"id", dup == sorted.end() ? 0.0 : static_cast<double>(*dup)}});
  }

  //! Number of sequences.
  [[nodiscard]] sequence_index size() const noexcept { return static_cast<sequence_index>(lengths_.size()); }
  [[nodiscard]] token_count length(sequence_index i) const { return lengths_.at(static_cast<std::size_t>(i)); }
  [[nodiscard]] sequence_id id(sequence_index i) const { return ids_.at(static_cast<std::size_t>(i)); }
  [[nodiscard]] std::span<const token_count> lengths() const noexcept { return lengths_; }
  [[nodiscard]] std::span<const sequence_id> ids() const noexcept { return ids_; }
  //! Offset of sequence i in the packed token stream (cu_seqlens[i]).
  [[nodiscard]] token_count offset(sequence_index i) const { return cu_seqlens_.at(static_cast<std::size_t>(i)); }
  //! CSR offsets of the packed stream: size() + 1 entries, first 0, last total_tokens().
  [[nodiscard]] std::span<const token_count> cu_seqlens() const noexcept { return cu_seqlens_; }
  [[nodiscard]] token_count total_tokens() const noexcept { return cu_seqlens_.back(); }
  [[nodiscard]] token_count max_length() const noexcept { return max_length_; }
  //! Causal (query, key) pairs of all sequences: sum n (n + 1) / 2, exact.
  [[nodiscard]] std::int64_t total_pairs() const noexcept { return pairs_; }

  //! cu_seqlens converted to a narrower type (e.g. int32 for kernels); throws
  //! invalid_argument if the total does not fit.
  template <class Int>
  [[nodiscard]] std::vector<Int> cu_seqlens_as() const {
    ZEPPELIN_EXPECTS(std::cmp_less_equal(total_tokens(), std::numeric_limits<Int>::max()),
                     "the token total does not fit the offset type", {{"total_tokens", static_cast<double>(total_tokens())}});
    return std::vector<Int>(cu_seqlens_.begin(), cu_seqlens_.end());
  }

  friend bool operator==(const batch& a, const batch& b) {
    return a.lengths_ == b.lengths_ && a.ids_ == b.ids_;
  }

 private:
  std::vector<token_count> lengths_;
  std::vector<sequence_id> ids_;
  std::vector<token_count> cu_seqlens_;
  token_count max_length_ = 0;
  std::int64_t pairs_ = 0;
};

ZEPPELIN_NAMESPACE_END
