// zeppelin/cost/adaptive_cp_sharding.hpp
// WLB-LLM's adaptive CP sharding: per micro-batch, its per-document (padding-free) or the
// per-sequence sharding, whichever makes the CP group's slowest rank faster under the
// kernel tile model; and the
// three shardings as one run-time value (any_cp_sharding, cp_sharding_by_name).
//   in : the micro-batch's documents, CP degree; the attention time model (tile and
//        throughput tables), query heads and head dim it prices with
//   out: cp_segments of the chosen sharding (cost/cp_sharding.hpp); choose() says which
// Per-document sharding balances every document's pairs exactly but cuts short documents
// into chunks below one tile (padded rows cost as much as real ones); per-sequence sharding
// keeps segments long but balances only the packed sequence, not each document's pairs.
// The slowest rank's forward + backward varlen time (cost/varlen_attention_time.hpp)
// decides; a tie keeps per-document. A pure function of its inputs: every CP rank computes
// the same choice. Host-only (std::variant); nvcc-safe as a header.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/cost/attention_time_model.hpp>
#include <zeppelin/cost/cp_sharding.hpp>
#include <zeppelin/cost/varlen_attention_time.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

ZEPPELIN_NAMESPACE_BEGIN

//! Which sharding adaptive_sharding chose: padding_free_sharding or per_sequence_sharding.
enum class cp_sharding_kind : std::uint8_t { per_document = 0, per_sequence = 1 };

struct adaptive_sharding {
  attention_time_model attention = attention_time_model::h100_fa2();
  int heads = 32;     //!< query heads of one CP rank (after TP)
  int head_dim = 128;

  //! The slowest rank's forward + backward attention seconds under `s`.
  [[nodiscard]] double slowest_rank_seconds(const cp_segments& s) const {
    double slowest = 0;
    for (const auto& rank : s)
      slowest = std::max(slowest, varlen_forward_seconds(attention, rank, heads, head_dim) +
                                      varlen_backward_seconds(attention, rank, heads, head_dim));
    return slowest;
  }
  [[nodiscard]] cp_sharding_kind choose(std::span<const token_count> documents, int cp) const {
    const double doc = slowest_rank_seconds(padding_free_sharding{}.segments(documents, cp));
    const double seq = slowest_rank_seconds(per_sequence_sharding{}.segments(documents, cp));
    return seq < doc ? cp_sharding_kind::per_sequence : cp_sharding_kind::per_document;
  }
  [[nodiscard]] cp_segments segments(std::span<const token_count> documents, int cp) const {
    cp_segments doc = padding_free_sharding{}.segments(documents, cp);
    cp_segments seq = per_sequence_sharding{}.segments(documents, cp);
    return slowest_rank_seconds(seq) < slowest_rank_seconds(doc) ? seq : doc;
  }
  friend bool operator==(const adaptive_sharding&, const adaptive_sharding&) = default;
};
static_assert(cp_sharding<adaptive_sharding>);

//! One of the shardings, chosen at run time (a command line: cp_sharding_by_name).
struct any_cp_sharding {
  std::variant<per_document_sharding, padding_free_sharding, per_sequence_sharding, adaptive_sharding> sharding;
  [[nodiscard]] cp_segments segments(std::span<const token_count> documents, int cp) const {
    return std::visit([&](const auto& s) { return s.segments(documents, cp); }, sharding);
  }
  friend bool operator==(const any_cp_sharding&, const any_cp_sharding&) = default;
};
static_assert(cp_sharding<any_cp_sharding>);

//! The sharding called `name`: "per_document", "padding_free", "per_sequence", or "adaptive"
//! (configured as `adaptive`). Throws invalid_argument listing the valid names for another.
[[nodiscard]] inline any_cp_sharding cp_sharding_by_name(std::string_view name, const adaptive_sharding& adaptive = {}) {
  if (name == "per_document") return {per_document_sharding{}};
  if (name == "padding_free") return {padding_free_sharding{}};
  if (name == "per_sequence") return {per_sequence_sharding{}};
  if (name == "adaptive") return {adaptive};
  ZEPPELIN_THROW(invalid_argument, "unknown CP sharding '" + std::string(name) + "' (valid: per_document, padding_free, per_sequence, adaptive)", {});
}

ZEPPELIN_NAMESPACE_END
