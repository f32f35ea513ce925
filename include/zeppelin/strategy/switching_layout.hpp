// zeppelin/strategy/switching_layout.hpp
// Hydraulis' mutual slices (strategy/switching.hpp) in whole elements: what a slice_transfer
// moves, and where it sits on either end, when the parameters are real tensors.
//   parameter_tensors(model, first_layer, layers)  the full (before TP) element counts of the
//        tensors of a stage holding those layers, in the order every holder lays them out:
//        [with layer 0 the embedding, vocab x hidden], per layer the Q, K, V and O
//        projections, the MLP's matrices (up, [gate,] down; each expert's with MoE), then the
//        tensors every TP rank holds whole (the two norms, the MoE router); [with the last
//        layer the LM head, hidden x vocab, and the final norm]. They add up to
//        pipeline_memory_model::parameters at TP 1.
//   segment_begin(E, k, S)  the element where segment k of S of a tensor of E elements begins,
//        floor(E k / S): the segments of a tensor differ by at most one element
//   slice_elements(tensors, a, b, S)  the elements of segments [a, b) of every tensor
// A holder lays the slices it holds out segment-major: for each of its segments in order, that
// segment of each tensor in order. Segments [a, b) of a holder whose first segment is `first`
// are the slice_elements(tensors, a, b, S) elements from slice_elements(tensors, first, a, S)
// on. TP rank t of T holds segments [t S / T, (t + 1) S / T) of every tensor: with T dividing
// S and E, elements [E t / T, E (t + 1) / T) of the tensor in an order where each TP shard is
// contiguous (a trainer orders a split tensor by its finest TP blocks; a tensor every TP rank
// holds whole is moved by each in its share and made whole by the TP ranks themselves).
// Host-only, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>

#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The full element counts of the tensors of layers [first_layer, first_layer + layers), with
//! the embedding and the LM head where they belong (see the file comment).
[[nodiscard]] inline std::vector<std::int64_t> parameter_tensors(const model_config& m, int first_layer, int layers) {
  ZEPPELIN_EXPECTS(first_layer >= 0 && layers >= 1 && first_layer + layers <= m.layers, "parameter tensors of layers outside the model",
                   {{"first_layer", double(first_layer)}, {"layers", double(layers)}, {"model_layers", double(m.layers)}});
  const std::int64_t h = m.hidden, f = m.ffn_hidden, v = m.vocab, q = m.q_width(), kv = m.kv_width();
  std::vector<std::int64_t> out;
  if (first_layer == 0) out.push_back(v * h);
  for (int l = first_layer; l < first_layer + layers; ++l) {
    out.insert(out.end(), {h * q, h * kv, h * kv, q * h});
    for (int e = 0; e < (m.is_moe() ? m.experts : 1); ++e) {
      out.push_back(h * f);
      if (m.gated_mlp) out.push_back(h * f);
      out.push_back(f * h);
    }
    out.insert(out.end(), {h, h});
    if (m.is_moe()) out.push_back(h * m.experts);
  }
  if (first_layer + layers == m.layers) out.insert(out.end(), {h * v, h});
  return out;
}

//! floor(E k / S), without overflow: where segment k of S of E elements begins.
[[nodiscard]] constexpr std::int64_t segment_begin(std::int64_t elements, std::int64_t k, std::int64_t segments) noexcept {
  return elements / segments * k + elements % segments * k / segments;
}

//! Elements of segments [a, b) of every tensor of `tensors`, cut into `segments` each.
[[nodiscard]] inline std::int64_t slice_elements(std::span<const std::int64_t> tensors, std::int64_t a, std::int64_t b, std::int64_t segments) {
  std::int64_t n = 0;
  for (const std::int64_t e : tensors) n += segment_begin(e, b, segments) - segment_begin(e, a, segments);
  return n;
}

ZEPPELIN_NAMESPACE_END
