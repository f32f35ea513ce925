// zeppelin/pack/packer.hpp
// The packer concept: documents arriving iteration by iteration -> the N micro-batches of
// each training iteration (pack/packing.hpp).
//   typename P::state   what the packer carries across iterations (WLB-LLM's outlier queues
//                       and carried-over documents, a greedy packer's window); an empty
//                       struct for a stateless packer. Default-constructed at the start of a
//                       stream; one state per stream.
//   p.pack(state, arriving, limits) -> packed_iteration
//                       this iteration's documents: exactly limits.micro_batches
//                       micro-batches, each of at most limits.max_tokens tokens, holding
//                       documents that arrived now or earlier (a packer may hold documents
//                       back in its state, never drop or duplicate them)
//   p.flush(state, limits) -> std::vector<packed_iteration>
//                       at the end of data: what is still queued or carried, as further
//                       iterations of the same shape, leaving the state empty
// Conservation: over a stream, the documents emitted by pack and flush are the documents
// that arrived, each exactly once. Determinism: the same documents in the same order give
// the same iterations bit for bit (ties go to the lowest index).
// Models: original, fixed_greedy, fixed_exact, wlb (pack/*.hpp, one each); any_packer picks
// one at run time; pack_stream (pack/stream.hpp) drives one over a stream.
// Errors (every model): invalid_argument for N < 1, L < 1 (validate(packing_limits)) and
// for an arriving document longer than L or shorter than 1 token (check_document).
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/pack/packing.hpp>

#include <concepts>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! A packing policy: a small regular value type (configuration in its members) with a
//! default-constructible per-stream state; see the file comment for the contract.
template <class P>
concept packer = std::regular<P> && std::default_initializable<typename P::state> &&
                 requires(const P& p, typename P::state& s, std::span<const document_ref> arriving,
                          const packing_limits& limits) {
                   { p.pack(s, arriving, limits) } -> std::same_as<packed_iteration>;
                   { p.flush(s, limits) } -> std::same_as<std::vector<packed_iteration>>;
                 };

ZEPPELIN_NAMESPACE_END
