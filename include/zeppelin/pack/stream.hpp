// zeppelin/pack/stream.hpp
// Drives a packer over a stream of documents, iteration by iteration, as a data loader would.
//   in : a packer, the documents' lengths in stream (file) order, packing_limits, options
//   out: packing_run: the emitted iterations, the documents never emitted (pending), and
//        per document the iteration it arrived in and its delay (iterations it waited)
// Arrivals: the stream is cut, in order, into global batches of at most
// options.tokens_per_iteration tokens (0: N x L_max); a document that does not fit the
// remaining budget of a batch starts the next one (a document longer than the budget is a
// batch of its own). Batch t arrives at iteration t: pack() is called once per batch. Then
// with stream_end::flush the packer's flush() emits what it still holds as iterations
// B, B + 1, ... (B = number of batches); with stream_end::keep_pending it is left out and
// listed in `pending`.
// Delay of a document = the iteration it is emitted in - the iteration it arrived in;
// -1 for a pending one. mean_token_delay weights it by tokens (WLB-LLM reports 0.5
// iterations per token on average).
// Conservation: emitted + pending = the input, each index exactly once; a packer that
// breaks it (drops, duplicates or invents a document, or emits an iteration without exactly
// N micro-batches or with a micro-batch over L_max) makes pack_stream throw zeppelin::error (a packer bug, not bad input).
// Errors: invalid_argument for N < 1, L < 1, a document longer than L_max (naming its index,
// length and L), a negative tokens_per_iteration; whatever the packer throws.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/pack/packer.hpp>
#include <zeppelin/pack/packing.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! What happens to the documents a packer still holds when the stream ends.
enum class stream_end {
  flush,         //!< the packer's flush() emits them as further iterations
  keep_pending,  //!< they stay unemitted, listed in packing_run::pending
};

//! Options of pack_stream, e.g. {.at_end = stream_end::keep_pending}.
struct stream_options {
  stream_end at_end = stream_end::flush;
  //! Tokens arriving per iteration (the global batch); 0 means N x L_max.
  token_count tokens_per_iteration = 0;
};

//! The result of pack_stream.
struct packing_run {
  std::vector<packed_iteration> iterations;  //!< in training order
  std::vector<std::int64_t> pending;         //!< never emitted (keep_pending only), ascending
  std::vector<std::int64_t> arrived_in;      //!< per document: the iteration it arrived in
  std::vector<std::int64_t> delay;           //!< per document: emitted - arrived, or -1 if pending
};

//! Token-weighted mean delay (iterations) of the emitted documents; 0 if none.
[[nodiscard]] inline double mean_token_delay(const packing_run& run, std::span<const token_count> lengths) {
  ZEPPELIN_EXPECTS(lengths.size() == run.delay.size(), "the lengths do not match the run",
                   {{"lengths", double(lengths.size())}, {"documents", double(run.delay.size())}});
  double tokens = 0;
  double weighted = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (run.delay[i] < 0) continue;
    tokens += static_cast<double>(lengths[i]);
    weighted += static_cast<double>(lengths[i]) * static_cast<double>(run.delay[i]);
  }
  return tokens > 0 ? weighted / tokens : 0.0;
}

//! The global batches of a stream: consecutive index ranges [first, last) of `lengths`, each
//! holding at most `budget` tokens, a document that does not fit the rest of a batch
//! starting the next (a document longer than the budget is a batch of its own).
[[nodiscard]] inline std::vector<std::pair<std::size_t, std::size_t>> arrival_batches(std::span<const token_count> lengths, token_count budget) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  token_count used = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (out.empty() || lengths[i] > budget - used) out.emplace_back(i, i), used = 0;
    out.back().second = i + 1;
    used += lengths[i];
  }
  return out;
}

//! Feeds `lengths` to `p` batch by batch (see the file comment) and records the result.
template <packer P>
[[nodiscard]] packing_run pack_stream(const P& p, std::span<const token_count> lengths, const packing_limits& limits,
                                      const stream_options& options = {}) {
  validate(limits);
  ZEPPELIN_EXPECTS(options.tokens_per_iteration >= 0, "tokens per iteration cannot be negative",
                   {{"tokens_per_iteration", double(options.tokens_per_iteration)}});
  for (std::size_t i = 0; i < lengths.size(); ++i) check_document({static_cast<std::int64_t>(i), lengths[i]}, limits);
  token_count budget = options.tokens_per_iteration;
  if (budget == 0)
    budget = limits.max_tokens > std::numeric_limits<token_count>::max() / limits.micro_batches
                 ? std::numeric_limits<token_count>::max()
                 : limits.max_tokens * limits.micro_batches;

  packing_run run;
  run.arrived_in.assign(lengths.size(), -1);
  run.delay.assign(lengths.size(), -1);
  const auto record = [&](packed_iteration&& it) {
    const auto now = static_cast<std::int64_t>(run.iterations.size());
    if (it.micro_batches.size() != static_cast<std::size_t>(limits.micro_batches))
      ZEPPELIN_THROW(error, "a packer emitted an iteration without exactly N micro-batches",
                     {{"iteration", double(now)}, {"micro_batches", double(it.micro_batches.size())}, {"N", double(limits.micro_batches)}});
    for (const packed_micro_batch& mb : it.micro_batches) {
      token_count tokens = 0;
      for (const std::int64_t i : mb.documents) {
        const bool known = i >= 0 && static_cast<std::size_t>(i) < lengths.size() && run.arrived_in[static_cast<std::size_t>(i)] >= 0;
        if (!known || run.delay[static_cast<std::size_t>(i)] >= 0)
          ZEPPELIN_THROW(error, "a packer emitted a document that has not arrived or was already emitted",
                         {{"iteration", double(now)}, {"index", double(i)}});
        run.delay[static_cast<std::size_t>(i)] = now - run.arrived_in[static_cast<std::size_t>(i)];
        tokens += lengths[static_cast<std::size_t>(i)];
      }
      if (tokens != mb.tokens || tokens > limits.max_tokens)
        ZEPPELIN_THROW(error, "a packer emitted a micro-batch over L or with a wrong token count",
                       {{"iteration", double(now)}, {"tokens", double(tokens)}, {"reported", double(mb.tokens)}, {"L", double(limits.max_tokens)}});
    }
    run.iterations.push_back(std::move(it));
  };

  typename P::state state{};
  std::vector<document_ref> arriving;
  for (const auto& [first, last] : arrival_batches(lengths, budget)) {
    const auto now = static_cast<std::int64_t>(run.iterations.size());
    arriving.clear();
    for (std::size_t i = first; i < last; ++i) {
      arriving.push_back({static_cast<std::int64_t>(i), lengths[i]});
      run.arrived_in[i] = now;
    }
    record(p.pack(state, arriving, limits));
  }
  if (options.at_end == stream_end::flush)
    for (packed_iteration& it : p.flush(state, limits)) record(std::move(it));
  for (std::size_t i = 0; i < lengths.size(); ++i)
    if (run.delay[i] < 0) run.pending.push_back(static_cast<std::int64_t>(i));
  return run;
}

ZEPPELIN_NAMESPACE_END
