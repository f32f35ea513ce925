// zeppelin/pack/original.hpp
// WLB-LLM's "original packing" baseline (Wang et al., OSDI 2025, Table 2): the data loader's
// fixed-length windows, documents in arrival order.
//   in : the documents arriving this iteration, after those carried from earlier ones
//   out: N micro-batches filled one after another in arrival order: a document goes into the
//        current micro-batch while it fits (tokens <= L), otherwise the next micro-batch
//        starts with it; when all N are full the rest (in order) waits for the next
//        iteration.
// Documents are never split: the data loader of the paper truncates a document that crosses
// the window's end (its tail is lost to training); here the document starts the next window
// instead, so every token is trained on and conservation holds. The unused tail of a window
// is padding.
// Errors: invalid_argument for N < 1, L < 1, or a document longer than L (check_document).
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/pack/detail/bins.hpp>
#include <zeppelin/pack/packer.hpp>
#include <zeppelin/pack/packing.hpp>
#include <zeppelin/pack/workload.hpp>

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Arrival-order fixed-length windows (the unbalanced baseline).
struct original {
  document_workload workload{};  //!< fills packed_micro_batch::workload (reporting only)

  struct state {
    std::vector<document_ref> carried;  //!< in arrival order
  };

  [[nodiscard]] packed_iteration pack(state& s, std::span<const document_ref> arriving, const packing_limits& limits) const {
    detail::check_pack_input(arriving, limits, workload);
    std::vector<document_ref> docs = std::move(s.carried);
    s.carried.clear();
    docs.insert(docs.end(), arriving.begin(), arriving.end());
    packed_iteration it = detail::empty_iteration(limits);
    std::size_t j = 0;
    for (std::size_t k = 0; k < docs.size(); ++k) {
      while (j < it.micro_batches.size() && it.micro_batches[j].tokens + docs[k].length > limits.max_tokens) ++j;
      if (j == it.micro_batches.size()) {
        s.carried.assign(docs.begin() + static_cast<std::ptrdiff_t>(k), docs.end());
        break;
      }
      detail::place(it.micro_batches[j], docs[k], workload);
    }
    return it;
  }

  [[nodiscard]] std::vector<packed_iteration> flush(state& s, const packing_limits& limits) const {
    validate(limits);
    for (const document_ref& d : s.carried) check_document(d, limits);  // limits may have changed
    std::vector<packed_iteration> out;
    while (!s.carried.empty()) out.push_back(pack(s, {}, limits));
    return out;
  }

  friend bool operator==(const original&, const original&) = default;
};
static_assert(packer<original>);

ZEPPELIN_NAMESPACE_END
