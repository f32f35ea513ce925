// examples/train_gpt/switching_slices.hpp
// What one rank holds of Hydraulis' switching (Li et al., "Hydraulis: Balancing Large
// Transformer Model Training via Co-designing Parallel Strategies and Data Assignment",
// section 5) when a step program (step/build.hpp add_switching) carries it: the mutual slices
// it sends and receives, in the element layout of mutual_slices.hpp.
//   in : the step program (its switching plan: every rank's TP shard of its stages' layers, N
//        owners of the master copy), the rank, the GPT, the rank's master copy (whole-model
//        shaped; only the elements it owns are read), the TP blocks of the element order
//        (mutual_slices.hpp), the same for every step of a job (a rank owns the same elements
//        whatever the step's strategy) and divisible by every TP degree
//   out: buffer(b) for the program's switching tensors:
//          parameters (layers l..)   as a user, its TP shard's pull segments of those layers:
//                                    NaN until received, its own master's where it owns them
//          master_parameters         as an owner, its master segments of those layers
//          gradients (layers l..)    as a user, its TP shard's push segments of its stage's
//                                    gradients (push_source), into which the other copies'
//                                    shares of the segments it reduces are added
//          master_gradients          as an owner, the reduced segments linked to it
//        pulled(shard)   the rank's TP shard of its stages' parameters, from the pull
//        gradients_into(g, ..)  the reduced gradients of the elements the rank owns (whole-model
//                        shaped, zeros elsewhere), each from the copy that reduced it
// A rank that runs no replica is an owner only.
// Errors: invalid_argument for a buffer the plan does not name, TP degrees that do not divide
// the largest one.
// Host-only.
#pragma once

#include "gpt.hpp"
#include "mutual_slices.hpp"
#include "tensor_parallel.hpp"

#include <zeppelin/core/error.hpp>
#include <zeppelin/step/build.hpp>
#include <zeppelin/step/program.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

namespace train_gpt {

template <class T>
class switching_slices {
 public:
  switching_slices(const step_program& prog, rank_index rank, const gpt_config& cfg, const gpt_params<T>& master, int tp_blocks)
      : cfg_(cfg), master_(&master), me_(static_cast<int>(rank)), users_(detail::switching_users(prog.plan, prog.model)) {
    const detail::switching_grid grid = detail::switching_grid_of(users_, prog.num_ranks());
    pull_segments_ = grid.pull_segments, push_segments_ = grid.push_segments, copies_ = grid.copies;
    for (const auto& u : users_)
      ZEPPELIN_EXPECTS(tp_blocks % u.tp == 0, "train_gpt's switching needs every TP degree to divide the model's TP blocks",
                       {{"tp", double(u.tp)}, {"tp_blocks", double(tp_blocks)}});
    layout_.emplace(cfg, tp_blocks);
    owners_ = prog.num_ranks();
    for (const auto& u : users_)
      if (u.gpu == me_) mine_.push_back(u);
  }

  //! The TP blocks of `cfg`'s element order: the largest power of two (up to 64) that splits it.
  [[nodiscard]] static int tp_blocks_of(const gpt_config& cfg) {
    int b = 1;
    while (b < 64 && cfg.heads % (2 * b) == 0 && cfg.kv_heads % (2 * b) == 0 && cfg.hidden % (2 * b) == 0 && cfg.vocab % (2 * b) == 0) b *= 2;
    return b;
  }

  [[nodiscard]] bool holds(const step_buffer& b) const noexcept {
    return b.layers > 0 && (b.tensor == step_tensor::parameters || b.tensor == step_tensor::gradients ||
                            b.tensor == step_tensor::master_parameters || b.tensor == step_tensor::master_gradients);
  }

  //! The bytes of a switching buffer (see the file comment); `stage_gradients` gives the rank's
  //! TP shard of its stages' gradients the first time a push segment is asked for.
  template <class Gradients>
  std::span<std::byte> buffer(const step_buffer& b, Gradients&& stage_gradients) {
    const auto list = layout_->tensors_of(b.layer, b.layers);
    std::vector<T>* t = nullptr;
    std::int64_t offset = b.offset;
    switch (b.tensor) {
      case step_tensor::master_parameters: {
        auto [it, fresh] = owned_.try_emplace({static_cast<int>(b.tensor), b.layer, b.layers});
        if (fresh) it->second = layout_->pack(*master_, list, owned_first(pull_segments_), owned_first(pull_segments_) + owned_count(pull_segments_), pull_segments_);
        t = &it->second;
        break;
      }
      case step_tensor::master_gradients: {
        auto [it, fresh] = owned_.try_emplace({static_cast<int>(b.tensor), b.layer, b.layers});
        if (fresh) it->second.assign(static_cast<std::size_t>(layout_->elements(list, owned_first(push_segments_), owned_first(push_segments_) + owned_count(push_segments_), push_segments_)), T(0));
        t = &it->second;
        break;
      }
      case step_tensor::parameters: t = &pull_buffer(user_of(b.layer, b.layers)); break;
      default: {  // gradients: a user's push segments, its own stage's or (a reduce) a part of them
        const detail::switching_user& u = user_containing(b.layer, b.layers);
        if (push_.empty()) build_push(stage_gradients());
        t = &push_.at(range_key(u));
        if (b.layer != u.first_layer || b.layers != u.layers) offset = within_stage(u, b) * static_cast<std::int64_t>(sizeof(T));
        break;
      }
    }
    const std::span<std::byte> bytes = std::as_writable_bytes(std::span<T>(*t));
    ZEPPELIN_EXPECTS(offset >= 0 && b.bytes >= 0 && static_cast<std::size_t>(offset + b.bytes) <= bytes.size(),
                     "train_gpt's switching: a slice outside its holder's segments",
                     {{"tensor", double(static_cast<int>(b.tensor))}, {"layer", double(b.layer)}, {"layers", double(b.layers)},
                      {"offset", double(offset)}, {"bytes", double(b.bytes)}, {"holder_bytes", double(bytes.size())}});
    return bytes.subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(b.bytes));
  }

  //! The rank's TP shard of its stages' parameters from what the pull left (norms: the rank's
  //! share, zeros elsewhere, until the TP all-reduce), shaped as shard_config(cfg, shard).
  [[nodiscard]] gpt_params<T> pulled() {
    gpt_params<T> whole = zero_params<T>(cfg_);
    int tp = 1, t = 0;
    for (const detail::switching_user& u : mine_) {
      tp = u.tp, t = u.tp_rank;
      const auto [lo, hi] = user_range(u, pull_segments_);
      layout_->unpack(std::span<const T>(pull_buffer(u)), layout_->tensors_of(u.first_layer, u.layers), lo, hi, pull_segments_, whole);
    }
    return shard_params(cfg_, whole, {tp, t});
  }

  //! The reduced gradients of the elements the rank owns into `g` (whole-model shaped; the
  //! rest left as it is); `stage_gradients` as for buffer (a rank that sent no push segment
  //! reduced and owns all of its own).
  template <class Gradients>
  void gradients_into(gpt_params<T>& g, Gradients&& stage_gradients) {
    if (push_.empty()) build_push(stage_gradients());
    const std::int64_t S = push_segments_, first = owned_first(S), count = owned_count(S);
    for (std::int64_t k = first; k < first + count; ++k) {
      const int reducer = static_cast<int>(k % copies_);
      for (const detail::switching_user& u : users_) {
        const auto [lo, hi] = user_range(u, S);
        if (u.copy != reducer || k < lo || k >= hi) continue;
        const auto list = layout_->tensors_of(u.first_layer, u.layers);
        const std::vector<T>* from = nullptr;
        std::int64_t from_first = first;
        if (u.gpu == me_) {
          from = &push_.at(range_key(u)), from_first = lo;
        } else {
          const auto it = owned_.find({static_cast<int>(step_tensor::master_gradients), u.first_layer, u.layers});
          ZEPPELIN_EXPECTS(it != owned_.end(), "train_gpt's switching: an owned segment's gradients never arrived",
                           {{"segment", double(k)}, {"first_layer", double(u.first_layer)}, {"layers", double(u.layers)}});
          from = &it->second;
        }
        const std::int64_t at = layout_->elements(list, from_first, k, S), n = layout_->elements(list, k, k + 1, S);
        layout_->unpack(std::span<const T>(*from).subspan(static_cast<std::size_t>(at), static_cast<std::size_t>(n)), list, k, k + 1, S, g);
      }
    }
  }

 private:
  using key = std::tuple<int, int, int>;  // (tensor, first layer, layers)
  [[nodiscard]] static std::pair<int, int> range_key(const detail::switching_user& u) { return {u.first_layer, u.layers}; }
  [[nodiscard]] std::int64_t owned_first(std::int64_t S) const noexcept { return me_ * (S / owners_); }
  [[nodiscard]] std::int64_t owned_count(std::int64_t S) const noexcept { return S / owners_; }
  [[nodiscard]] static std::pair<std::int64_t, std::int64_t> user_range(const detail::switching_user& u, std::int64_t S) noexcept {
    return {u.tp_rank * S / u.tp, (u.tp_rank + 1) * S / u.tp};
  }
  const detail::switching_user& user_of(int first, int layers) const {
    for (const detail::switching_user& u : mine_)
      if (u.first_layer == first && u.layers == layers) return u;
    ZEPPELIN_THROW(invalid_argument, "train_gpt's switching: the rank holds no stage of these layers",
                   {{"rank", double(me_)}, {"first_layer", double(first)}, {"layers", double(layers)}});
  }
  const detail::switching_user& user_containing(int first, int layers) const {
    for (const detail::switching_user& u : mine_)
      if (u.first_layer <= first && first + layers <= u.first_layer + u.layers) return u;
    ZEPPELIN_THROW(invalid_argument, "train_gpt's switching: the rank holds no stage of these layers",
                   {{"rank", double(me_)}, {"first_layer", double(first)}, {"layers", double(layers)}});
  }
  // A user's pull segments: NaN until received, its own master's where it owns them.
  std::vector<T>& pull_buffer(const detail::switching_user& u) {
    auto [it, fresh] = pull_.try_emplace(range_key(u));
    if (!fresh) return it->second;
    const auto list = layout_->tensors_of(u.first_layer, u.layers);
    const std::int64_t S = pull_segments_;
    const auto [lo, hi] = user_range(u, S);
    it->second.assign(static_cast<std::size_t>(layout_->elements(list, lo, hi, S)), std::numeric_limits<T>::quiet_NaN());
    const std::int64_t a = std::max(lo, owned_first(S)), b = std::min(hi, owned_first(S) + owned_count(S));
    if (a < b) {
      const std::vector<T> own = layout_->pack(*master_, list, a, b, S);
      std::copy(own.begin(), own.end(), it->second.begin() + static_cast<std::ptrdiff_t>(layout_->elements(list, lo, a, S)));
    }
    return it->second;
  }
  // The push segments of each stage of the rank from its TP shard's gradients.
  void build_push(const gpt_params<T>& shard_gradients) {
    if (mine_.empty()) return;
    const detail::switching_user& any = mine_.front();
    gpt_params<T> whole = zero_params<T>(cfg_);
    const std::vector<tensor_cut> cuts = cuts_of(cfg_, {any.tp, any.tp_rank});
    std::vector<const std::vector<T>*> parts;
    shard_gradients.for_each([&](const std::vector<T>& x) { parts.push_back(&x); });
    std::size_t k = 0;
    whole.for_each([&](std::vector<T>& x) {
      const std::vector<T>& from = *parts[k];
      for (std::size_t i = 0; i < from.size(); ++i) x[cuts[k].whole_index(i)] = from[i];
      ++k;
    });
    for (const detail::switching_user& u : mine_) {
      const auto [lo, hi] = user_range(u, push_segments_);
      push_[range_key(u)] = layout_->pack(whole, layout_->tensors_of(u.first_layer, u.layers), lo, hi, push_segments_);
    }
  }
  // The element in stage u's push segments of the part `b` names (a reduce's receive: one
  // segment of a run of u's layers, which is one run of u's tensors within that segment).
  [[nodiscard]] std::int64_t within_stage(const detail::switching_user& u, const step_buffer& b) const {
    const std::int64_t S = push_segments_;
    const auto own = layout_->tensors_of(u.first_layer, u.layers), part = layout_->tensors_of(b.layer, b.layers);
    const auto [lo, hi] = user_range(u, S);
    const std::int64_t offset = b.offset / static_cast<std::int64_t>(sizeof(T));
    for (std::int64_t k = lo; k < hi; ++k) {
      if (layout_->elements(part, lo, k, S) != offset) continue;
      std::int64_t before = 0;  // u's tensors ahead of the part's first within segment k
      for (std::size_t i = 0; i < own.size() && own[i] != part.front(); ++i) before += layout_->elements(std::span(own).subspan(i, 1), k, k + 1, S);
      return layout_->elements(own, lo, k, S) + before;
    }
    ZEPPELIN_THROW(invalid_argument, "train_gpt's switching: a reduce names no segment of the stage",
                   {{"offset", double(b.offset)}, {"first_layer", double(b.layer)}, {"layers", double(b.layers)}});
  }

  gpt_config cfg_;
  const gpt_params<T>* master_;
  int me_;
  long long owners_ = 1;
  std::vector<detail::switching_user> users_, mine_;
  std::int64_t pull_segments_ = 1, push_segments_ = 1;
  int copies_ = 1;
  std::optional<mutual_layout<T>> layout_;
  std::map<std::pair<int, int>, std::vector<T>> pull_, push_;  // per stage of the rank (first layer, layers)
  std::map<key, std::vector<T>> owned_;                         // master segments, per (tensor, first layer, layers)
};

}  // namespace train_gpt
