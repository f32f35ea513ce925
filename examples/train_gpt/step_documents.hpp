// examples/train_gpt/step_documents.hpp
// What each training system trains in a step: per data-parallel replica, its micro-batches'
// documents (token ids), formed from the documents the loader draws for the step.
//   training_system::zeppelin  the step's documents cut into --dp equal token shares of whole
//                              documents, each share into M micro-batches the same way
//                              (step.hpp split_documents); each micro-batch is then planned by
//                              --method (Zeppelin's cost-driven planner by default)
//   training_system::wlb       WLB-LLM (Wang et al., "WLB-LLM: Workload-Balanced 4D Parallelism
//                              for Large Language Model Training", OSDI 2025): the loader's
//                              documents enter the library's WLB-LLM packer (pack/wlb.hpp:
//                              two outlier delay queues, variable-length micro-batches balanced by
//                              workload), which forms N = M x DP micro-batches per step and
//                              carries documents over steps; the non-empty ones are cut into DP
//                              consecutive runs (pack/packed_stream.hpp replicas_of); each is laid
//                              out per document (K/V all-gathered, Llama-3 style) or per sequence
//                              (ring), whichever attention the library prices faster
//                              (planner/cheapest_layout.hpp)
// The WLB-LLM packer's context window is the larger of the longest document the loader draws
// (--max-length) and a micro-batch's share of the step's tokens, as WLB-LLM draws N context
// windows of tokens per iteration; a micro-batch holds up to 1.5 of it (the library's
// packing_methods::wlb_4d).
// The one-rank reference trains the same documents each step (merged: one micro-batch of all).
// Errors: invalid_argument when a step's documents do not give every replica a micro-batch
// (naming the step, the micro-batches and --dp), and what the packer throws (a document
// longer than its L_max).
#pragma once

#include "corpus.hpp"
#include "options.hpp"
#include "step.hpp"

#include <zeppelin/core/error.hpp>
#include <zeppelin/pack/packed_stream.hpp>
#include <zeppelin/pack/packing_methods.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace train_gpt {

//! One step's documents: [replica][micro-batch].
using step_documents = std::vector<std::vector<step_batch>>;

//! The documents of `docs` (token ids each) as one step_batch, in order.
inline step_batch batch_of(std::span<const std::vector<std::int64_t>> docs) {
  std::vector<token_count> lengths;
  std::vector<std::int64_t> tokens;
  for (const std::vector<std::int64_t>& d : docs) {
    lengths.push_back(static_cast<token_count>(d.size()));
    tokens.insert(tokens.end(), d.begin(), d.end());
  }
  return {zeppelin::batch(std::move(lengths)), std::move(tokens)};
}

//! The documents of `sb`, one token vector each.
inline std::vector<std::vector<std::int64_t>> documents_of(const step_batch& sb) {
  std::vector<std::vector<std::int64_t>> out;
  const zeppelin::batch& b = sb.lengths;
  for (sequence_index q = 0; q < b.size(); ++q)
    out.emplace_back(sb.tokens.begin() + b.offset(q), sb.tokens.begin() + b.offset(q) + b.length(q));
  return out;
}

//! Zeppelin's step: `sb` in `dp` equal token shares, each in `micro_batches` micro-batches.
inline step_documents equal_shares(const step_batch& sb, int dp, int micro_batches) {
  std::vector<step_batch> shares = split_documents(sb, dp);
  ZEPPELIN_EXPECTS(static_cast<int>(shares.size()) == dp, "a step has fewer documents than data-parallel replicas",
                   {{"documents", double(sb.lengths.size())}, {"dp", double(dp)}});
  step_documents out;
  for (const step_batch& share : shares) out.push_back(split_documents(share, micro_batches));
  return out;
}

//! WLB-LLM's packing of the loader's documents, step by step (see the file comment).
class wlb_packing {
 public:
  //! `target`: the model, GPU and TP x CP x PP x DP the packer's workload and the adaptive
  //! layout price; N = micro_batches x dp micro-batches per step of about `tokens` tokens.
  wlb_packing(const packing_target& target, int micro_batches, std::int64_t tokens, token_count longest_document)
      : dp_(target.layout.dp) {
    const int n = micro_batches * dp_;
    const token_count context = std::max(longest_document, (tokens + n - 1) / n);
    method_ = packing_methods::wlb_4d(target, context, 1.5, collective_kind::all_gather);
    limits_ = {.micro_batches = n, .max_tokens = max_tokens_of(method_, context)};
  }

  //! The CP layout policy every micro-batch is laid out by.
  [[nodiscard]] const any_cp_layout& layout() const noexcept { return method_.layout; }

  //! Step `step`'s micro-batches from the documents of `arriving` and those carried over.
  step_documents next(std::int64_t step, const step_batch& arriving) {
    std::vector<document_ref> refs;
    for (std::vector<std::int64_t>& d : documents_of(arriving)) {
      refs.push_back({static_cast<std::int64_t>(documents_.size()), static_cast<token_count>(d.size())});
      lengths_.push_back(static_cast<token_count>(d.size()));
      documents_.push_back(std::move(d));
    }
    const packed_iteration it = method_.packer.pack(state_, refs, limits_);
    const auto replicas = replicas_of(it, lengths_, dp_);
    ZEPPELIN_EXPECTS(static_cast<int>(replicas.size()) == dp_,
                     "WLB-LLM's packer gave a step fewer micro-batches with documents than data-parallel replicas "
                     "(draw more --tokens per step)",
                     {{"step", double(step)}, {"micro_batches", double(replicas.size())}, {"dp", double(dp_)}});
    step_documents out;
    for (const auto& replica : replicas) {
      std::vector<step_batch>& mine = out.emplace_back();
      for (const auto& pieces : replica) {
        std::vector<std::vector<std::int64_t>> docs;
        for (const step_piece& x : pieces) docs.push_back(std::move(documents_[static_cast<std::size_t>(x.document)]));
        mine.push_back(batch_of(docs));
      }
    }
    return out;
  }

 private:
  int dp_;
  packing_method method_;
  packing_limits limits_;
  any_packer::state state_;
  std::vector<token_count> lengths_;                // every document drawn so far, by index
  std::vector<std::vector<std::int64_t>> documents_;  // their tokens, until packed
};

//! The step's documents as one micro-batch of one replica (the one-rank reference's).
inline step_documents merged(const step_documents& s) {
  std::vector<std::vector<std::int64_t>> docs;
  for (const std::vector<step_batch>& replica : s)
    for (const step_batch& mb : replica)
      for (std::vector<std::int64_t>& d : documents_of(mb)) docs.push_back(std::move(d));
  return {{batch_of(docs)}};
}

}  // namespace train_gpt
