// zeppelin/pack/detail/bins.hpp
// Helpers the packers share: an iteration of N empty micro-batches, placing a document into
// a micro-batch, the attention work d^2 of a document, and the checks every pack() makes.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/pack/packing.hpp>
#include <zeppelin/pack/workload.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! N empty micro-batches.
inline packed_iteration empty_iteration(const packing_limits& limits) {
  packed_iteration it;
  it.micro_batches.resize(static_cast<std::size_t>(limits.micro_batches));
  return it;
}

//! Appends d to mb, updating tokens and workload.
inline void place(packed_micro_batch& mb, const document_ref& d, const document_workload& w) {
  mb.documents.push_back(d.index);
  mb.tokens += d.length;
  mb.workload += w(d.length);
}

//! d^2: the attention work of WLB-LLM Eq. 1 (exact in 64 bits for d <= max_sequence_length).
constexpr std::int64_t attention_work(token_count d) noexcept { return d * d; }

//! validate(limits), validate(w) and check_document for each arriving document.
inline void check_pack_input(std::span<const document_ref> arriving, const packing_limits& limits, const document_workload& w) {
  validate(limits);
  validate(w);
  for (const document_ref& d : arriving) check_document(d, limits);
}

//! Orders documents longest first, ties by lowest index.
constexpr bool longer_first(const document_ref& a, const document_ref& b) noexcept {
  return a.length != b.length ? a.length > b.length : a.index < b.index;
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
