// examples/train_gpt/mutual_slices.hpp
// train_gpt's GPT in the element layout of Hydraulis' switching (the library's
// strategy/switching_layout.hpp): which elements of which tensor a mutual slice names, so that
// a rank can pack what it sends and unpack what it receives.
//   mutual_layout(cfg, blocks)  the whole model's tensors in parameter_tensors order (the
//        embedding; per layer Wq, Wk, Wv, Wo, W1, W2, norm1, norm2; the LM head, the final norm),
//        each in its TP-block order: the elements of TP block b of `blocks` (tensor_parallel.hpp
//        cuts_of) at [b E / blocks, (b + 1) E / blocks), so that TP shard t of any T dividing
//        `blocks` holds one contiguous range, [t E / T, (t + 1) E / T); a norm (every TP rank's
//        whole) in its own order
//   tensors_of(first, layers)   the tensors (indices) of a stage of those layers
//   pack / unpack               segments [a, b) of S of those tensors, segment-major (each
//        segment of each tensor in turn), from or into the whole model's tensors
// In and out: whole-model gpt_params (gpt.hpp), a holder's segment range, S.
// Errors: invalid_argument when `blocks` does not split the model (check_tensor_parallel).
// Host-only.
#pragma once

#include "gpt.hpp"
#include "tensor_parallel.hpp"

#include <zeppelin/strategy/switching_layout.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace train_gpt {

template <class T>
class mutual_layout {
 public:
  mutual_layout(const gpt_config& cfg, int blocks) : cfg_(cfg) {
    check_tensor_parallel(cfg, blocks);
    // gpt_params::for_each order: embed, per layer norm1 wq wk wv wo norm2 w1 w2, norm_final, lm_head
    std::vector<std::vector<tensor_cut>> cuts;
    for (int b = 0; b < blocks; ++b) cuts.push_back(cuts_of(cfg, {blocks, b}));
    const std::size_t per_layer = 8, L = static_cast<std::size_t>(cfg.layers);
    std::vector<std::size_t> order{0};  // for_each indices in the switching's order
    for (std::size_t l = 0; l < L; ++l) {
      const std::size_t at = 1 + l * per_layer;
      order.insert(order.end(), {at + 1, at + 2, at + 3, at + 4, at + 6, at + 7, at + 0, at + 5});
    }
    order.insert(order.end(), {1 + L * per_layer + 1, 1 + L * per_layer});
    std::vector<std::size_t> sizes;
    zero_params<T>(cfg).for_each([&](const std::vector<T>& x) { sizes.push_back(x.size()); });
    for (const std::size_t k : order) {
      tensor t;
      t.index = k;
      const std::size_t E = sizes[k];
      t.whole_of.resize(E);
      if (cuts[0][k].cut == tensor_cut::kind::whole) {
        for (std::size_t i = 0; i < E; ++i) t.whole_of[i] = i;
      } else {
        const std::size_t per_block = E / static_cast<std::size_t>(blocks);
        for (std::size_t b = 0; b < static_cast<std::size_t>(blocks); ++b)
          for (std::size_t i = 0; i < per_block; ++i) t.whole_of[b * per_block + i] = cuts[b][k].whole_index(i);
      }
      tensors_.push_back(std::move(t));
    }
  }

  //! The tensors of a stage holding layers [first, first + layers), in the switching's order.
  [[nodiscard]] std::vector<std::size_t> tensors_of(int first, int layers) const {
    std::vector<std::size_t> out;
    if (first == 0) out.push_back(0);
    for (int l = first; l < first + layers; ++l)
      for (std::size_t i = 0; i < 8; ++i) out.push_back(1 + static_cast<std::size_t>(l) * 8 + i);
    if (first + layers == cfg_.layers) out.insert(out.end(), {tensors_.size() - 2, tensors_.size() - 1});
    return out;
  }

  //! Segments [a, b) of S of `tensors` of the whole model `w`, segment-major.
  [[nodiscard]] std::vector<T> pack(const gpt_params<T>& w, std::span<const std::size_t> tensors, std::int64_t a, std::int64_t b,
                                    std::int64_t S) const {
    const std::vector<const std::vector<T>*> all = views(w);
    std::vector<T> out;
    for_each_element(tensors, a, b, S, [&](std::size_t k, std::size_t canonical) {
      out.push_back((*all[tensors_[k].index])[tensors_[k].whole_of[canonical]]);
    });
    return out;
  }

  //! Writes `from` (segments [a, b) of S of `tensors`, segment-major) into the whole model `w`.
  void unpack(std::span<const T> from, std::span<const std::size_t> tensors, std::int64_t a, std::int64_t b, std::int64_t S,
              gpt_params<T>& w) const {
    std::vector<std::vector<T>*> all;
    w.for_each([&](std::vector<T>& x) { all.push_back(&x); });
    std::size_t i = 0;
    for_each_element(tensors, a, b, S, [&](std::size_t k, std::size_t canonical) {
      (*all[tensors_[k].index])[tensors_[k].whole_of[canonical]] = from[i++];
    });
  }

  //! Elements of segments [a, b) of S of `tensors`.
  [[nodiscard]] std::int64_t elements(std::span<const std::size_t> tensors, std::int64_t a, std::int64_t b, std::int64_t S) const {
    std::vector<std::int64_t> sizes;
    for (const std::size_t k : tensors) sizes.push_back(static_cast<std::int64_t>(tensors_[k].whole_of.size()));
    return zeppelin::slice_elements(sizes, a, b, S);
  }

 private:
  struct tensor {
    std::size_t index = 0;                 // in gpt_params::for_each order
    std::vector<std::size_t> whole_of;     // per TP-block-order element: its element in the tensor
  };

  static std::vector<const std::vector<T>*> views(const gpt_params<T>& w) {
    std::vector<const std::vector<T>*> out;
    w.for_each([&](const std::vector<T>& x) { out.push_back(&x); });
    return out;
  }
  // f(tensor, its TP-block-order element) for segments [a, b) of `tensors`, segment-major.
  template <class F>
  void for_each_element(std::span<const std::size_t> tensors, std::int64_t a, std::int64_t b, std::int64_t S, F&& f) const {
    for (std::int64_t j = a; j < b; ++j)
      for (const std::size_t k : tensors) {
        const auto E = static_cast<std::int64_t>(tensors_[k].whole_of.size());
        for (std::int64_t e = zeppelin::segment_begin(E, j, S); e < zeppelin::segment_begin(E, j + 1, S); ++e) f(k, static_cast<std::size_t>(e));
      }
  }

  gpt_config cfg_;
  std::vector<tensor> tensors_;
};

}  // namespace train_gpt
