// examples/train_gpt/pipeline_stage.hpp
// train_gpt's model cut into pipeline stages, each stage a context-parallel group.
//   split_documents   a step's documents cut into micro-batches of whole documents
//   stage_layers      the layers of one virtual stage (balanced, earlier ones take the rest)
//   gpt_stage         the stage model (pipeline_stage_model, exec/pipeline_runner.hpp) of one
//                     rank: the virtual stages its stage runs (one, or V interleaved), each
//                     micro-batch's rows dispatched on first use, the layers' forwards and
//                     backwards through the library's attention engine on the stage's group,
//                     the embedding on the first virtual stage and the head and loss on the
//                     last; the boundary tensors are the hidden states [rows][dim] of the
//                     rank's rows in the micro-batch's linear layout, which every stage shares
// Layout of the world: stage s holds ranks s * R .. s * R + R - 1 (R = the plan's ranks), and
// rank r of every stage forms one pipeline (stage ranks r, R + r, ...). All stages run the
// same plan of a micro-batch, so stage s's rank r and stage s + 1's rank r hold the same rows.
// Gradients accumulate over the micro-batches in the rank's gpt_params, each row's loss
// gradient scaled by `loss_scale` (1 / the step's targets), so their sum is the gradient of
// the whole step's mean loss, as without a pipeline.
#pragma once

#include "step.hpp"

#include <zeppelin/checkpoint/any_checkpoint_policy.hpp>
#include <zeppelin/exec/pipeline_runner.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace train_gpt {

//! The documents of `s` in order, cut into at most `count` micro-batches of whole documents:
//! a cut falls where the running token count first reaches the next equal share, and every
//! micro-batch keeps at least one document.
inline std::vector<step_batch> split_documents(const step_batch& s, int count) {
  const batch& b = s.lengths;
  const int parts = std::max(1, std::min(count, b.size()));
  std::vector<step_batch> out;
  std::vector<token_count> lengths;
  std::vector<std::int64_t> tokens;
  token_count done = 0;
  for (sequence_index q = 0; q < b.size(); ++q) {
    lengths.push_back(b.length(q));
    tokens.insert(tokens.end(), s.tokens.begin() + b.offset(q), s.tokens.begin() + b.offset(q) + b.length(q));
    done += b.length(q);
    const int made = static_cast<int>(out.size());
    const bool share_reached = done * parts >= b.total_tokens() * (made + 1);
    const bool must_leave_rest = b.size() - 1 - q == parts - 1 - made;  // one document left per part still to make
    if (made + 1 < parts && (share_reached || must_leave_rest)) {
      out.push_back({batch(std::move(lengths)), std::move(tokens)});
      lengths.clear(), tokens.clear();
    }
  }
  out.push_back({batch(std::move(lengths)), std::move(tokens)});
  return out;
}

//! Layers [first, second) of virtual stage v of `virtual_stages` over `layers`.
inline std::pair<int, int> stage_layers(int layers, int virtual_stages, int v) {
  return {v * layers / virtual_stages, (v + 1) * layers / virtual_stages};
}

template <class T, communicator C>
class gpt_stage {
 public:
  using value_type = T;

  //! `cp`: the stage's group (the plan's ranks); `steps`: the micro-batches' plans; `w`, `g`:
  //! the rank's parameters and its gradient accumulator.
  gpt_stage(C& cp, const gpt_config& cfg, const std::vector<planned_step<T>>& steps, const gpt_params<T>& w, gpt_params<T>& g,
            const any_checkpoint_policy& recompute, int stage, int stages, int chunks, double loss_scale)
      : cp_(&cp), cfg_(&cfg), steps_(&steps), w_(&w), g_(&g), recompute_(&recompute), stage_(stage), stages_(stages),
        chunks_(chunks), loss_scale_(loss_scale), rows_(steps.size()), caches_(steps.size() * static_cast<std::size_t>(chunks)),
        recomputed_(caches_.size(), 0), heads_(steps.size()) {}

  [[nodiscard]] std::size_t activation_elements(int k) const {
    const planned_step<T>& s = (*steps_)[static_cast<std::size_t>(k)];
    return static_cast<std::size_t>(s.dispatch.ranks[static_cast<std::size_t>(cp_->rank())].target_tokens) *
           static_cast<std::size_t>(cfg_->dim);
  }

  void forward(int k, int chunk, std::span<const T> in, std::span<T> out) {
    const int v = chunk * stages_ + stage_;
    const linear_rows& r = rows(k);
    const host_attention<T, C> attention{*cp_, *cfg_, (*steps_)[static_cast<std::size_t>(k)], r};
    std::vector<T> x = v == 0 ? embed(*cfg_, *w_, r) : std::vector<T>(in.begin(), in.end());
    const auto [first, end] = stage_layers(cfg_->layers, stages_ * chunks_, v);
    const int recomputed =
        std::clamp(recompute_->recomputed_layers({.stage = stage_, .chunk = chunk, .micro_batch = k, .layers = end - first}), 0, end - first);
    std::vector<layer_cache<T>>& caches = cache(k, chunk);
    caches.assign(static_cast<std::size_t>(end - first), {});
    recomputed_[slot(k, chunk)] = recomputed;
    for (int l = first; l < end; ++l) {
      layer_cache<T>& c = caches[static_cast<std::size_t>(l - first)];
      c.x = x;
      x = layer_forward(attention, *cfg_, r, w_->layers[static_cast<std::size_t>(l)], c);
      if (l - first < recomputed) {  // keep the input only
        layer_cache<T> input_only;
        input_only.x = std::move(c.x);
        c = std::move(input_only);
      }
    }
    double held = 0;
    for (const auto& per_chunk : caches_)
      for (const auto& c : per_chunk) held += cached_values(c);
    peak_kept_ = std::max(peak_kept_, held);
    if (v == stages_ * chunks_ - 1) loss_ += head_forward(*cfg_, *w_, r, std::move(x), heads_[static_cast<std::size_t>(k)], loss_scale_);
    else std::copy(x.begin(), x.end(), out.begin());
  }

  void backward(int k, int chunk, std::span<const T> output_gradient, std::span<T> input_gradient) {
    const int v = chunk * stages_ + stage_;
    const linear_rows& r = rows(k);
    const host_attention<T, C> attention{*cp_, *cfg_, (*steps_)[static_cast<std::size_t>(k)], r};
    std::vector<T> dx = v == stages_ * chunks_ - 1 ? head_backward(*cfg_, *w_, *g_, r, heads_[static_cast<std::size_t>(k)])
                                                   : std::vector<T>(output_gradient.begin(), output_gradient.end());
    const auto [first, end] = stage_layers(cfg_->layers, stages_ * chunks_, v);
    std::vector<layer_cache<T>>& caches = cache(k, chunk);
    const int recomputed = recomputed_[slot(k, chunk)];
    for (int l = end - 1; l >= first; --l) {
      const auto li = static_cast<std::size_t>(l);
      layer_cache<T>& c = caches[static_cast<std::size_t>(l - first)];
      if (l - first < recomputed) (void)layer_forward(attention, *cfg_, r, w_->layers[li], c);  // the same values, bit for bit
      dx = layer_backward(attention, *cfg_, r, w_->layers[li], g_->layers[li], c, dx);
    }
    caches.clear();
    if (v == 0) embed_backward(*cfg_, *g_, r, dx);
    else std::copy(dx.begin(), dx.end(), input_gradient.begin());
  }

  //! The summed cross-entropy of the rank's rows over the micro-batches (on the last virtual
  //! stage; else 0). Only the gradients carry loss_scale.
  [[nodiscard]] double loss() const noexcept { return loss_; }
  //! The most activation values the rank held in layer caches at once.
  [[nodiscard]] double peak_kept() const noexcept { return peak_kept_; }

 private:
  // micro-batch k's rows, dispatched by the first forward of k on this stage (a collective of
  // the stage's group: every rank of the stage runs the same schedule)
  const linear_rows& rows(int k) {
    std::optional<linear_rows>& r = rows_[static_cast<std::size_t>(k)];
    if (!r) r = dispatch_rows(*cp_, (*steps_)[static_cast<std::size_t>(k)]);
    return *r;
  }
  [[nodiscard]] std::size_t slot(int k, int chunk) const {
    return static_cast<std::size_t>(k) * static_cast<std::size_t>(chunks_) + static_cast<std::size_t>(chunk);
  }
  std::vector<layer_cache<T>>& cache(int k, int chunk) { return caches_[slot(k, chunk)]; }

  C* cp_;
  const gpt_config* cfg_;
  const std::vector<planned_step<T>>* steps_;
  const gpt_params<T>* w_;
  gpt_params<T>* g_;
  const any_checkpoint_policy* recompute_;
  int stage_, stages_, chunks_;
  double loss_scale_;
  std::vector<std::optional<linear_rows>> rows_;
  std::vector<std::vector<layer_cache<T>>> caches_;  //!< [slot(micro-batch, chunk)][layer of the virtual stage]
  std::vector<int> recomputed_;                      //!< [slot]: its first layers that keep only their input
  std::vector<head_cache<T>> heads_;
  double loss_ = 0, peak_kept_ = 0;
};

}  // namespace train_gpt
