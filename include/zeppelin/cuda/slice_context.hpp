// zeppelin/cuda/slice_context.hpp
// The device counterpart of exec/slice_context.hpp: what a sliced document's earlier slices
// leave on a rank for its later slices, and a later slice's attention to it, in device memory.
//   slice_context               per (document, layer) the K/V rows kept from the document's
//                               earlier slices, in the order kept (keep: a slice's rows,
//                               appended by device-to-device copies on a stream), and their
//                               dK/dV added up over the later slices (add_gradient: a prefix
//                               of the kept rows) for the earlier slices' backward (gradient);
//                               release frees an entry, stream-ordered
//   context_attention_forward   a slice's query rows against a context of context_rows K/V rows
//                               that all precede them (a full-mask block: queries at positions
//                               m .. m + rows, keys 0 .. m), merged into the slice's fp32 O and
//                               its LSE by LSE: one attention_forward launch into fp32 scratch,
//                               then one lse_merge
//   context_attention_backward  with the slice's GLOBAL O, dO and LSE, ADDS the context's share
//                               into dQ and into the context rows' dK/dV (fp32 accumulators):
//                               attention_backward_preprocess (delta = rowsum(dO * O), unless
//                               the caller passes the delta it already has), then one
//                               attention_backward launch
// Layouts (attention_params.hpp, as the device engine's ring rounds use them): Q, dO, global O
// [rows][heads][head_dim] and K, V [rows][kv_heads][head_dim] in `type` (bf16 | fp16); the
// slice's O accumulator and dQ [rows][heads][head_dim] fp32; the context's dK, dV and the kept
// gradient [rows][kv_heads][head_dim] fp32; LSE and delta [heads][lse_stride] fp32, natural
// log (lse_stride 0 = rows). head_dim 64 or 128. The kernels' vector accesses want Q, K, V, O,
// dO 16-byte aligned and dQ, dK, dV 8-byte aligned; the kept rows come from the library's pool
// (cuda/memory_pool.hpp) and are.
// Streams: every call enqueues its work on the stream it is given and returns without waiting.
// keep reallocates an entry to its new size (the kept rows and gradient copied on the stream,
// the old buffers freed there after the copies), so pointers from keys, values and gradient hold
// until the next keep or release of that entry, and every use of them must be ordered before
// the work that call enqueues on its stream. An entry's buffers are freed on the stream of release, or, when the
// context is destroyed, on the stream of the last call that wrote them. Scratch (the partial O
// and LSE, delta, the block's 32-byte CSR arrays) comes from the pool on the call's stream and
// is freed there. The CSR arrays are copied from host memory, so these calls cannot be captured
// into a CUDA graph.
// Errors: invalid_argument, naming the values, for dims without a kernel, an unknown dtype,
// negative or too large row counts (the kernels take blocks under 2^30 rows), an LSE stride
// below the rows, null or misaligned pointers with work to do, a kept entry that does not
// exist, or a gradient of more rows than are kept (then, as a guard, the kernels' own
// device::validate); cuda_error when a CUDA call fails. Nothing is enqueued and no entry is
// changed when an argument is refused.
// Requires zeppelin::kernels (attention, lse_merge, row_ops). nvcc-safe; host code.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/cuda/attention.hpp>
#include <zeppelin/cuda/attention_params.hpp>
#include <zeppelin/cuda/dtype.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/executor/row_ops.hpp>
#include <zeppelin/cuda/lse_merge.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/exec/attention_kernel.hpp>
#include <zeppelin/schedule/block_mask.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <utility>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

namespace detail {

//! Throws invalid_argument unless `dims` and `type` have a kernel.
inline void check_context_dims(const attention_dims& dims, dtype type) {
  zeppelin::validate(dims);
  ZEPPELIN_EXPECTS(is_supported_head_dim(dims.head_dim) && dims.heads <= max_grid_yz,
                   "device slice context: no attention kernel for this head dim (64, 128) or too many heads",
                   {{"head_dim", double(dims.head_dim)}, {"heads", double(dims.heads)}});
  ZEPPELIN_EXPECTS(type == dtype::bf16 || type == dtype::fp16, "device slice context: unknown dtype (bf16 or fp16)",
                   {{"dtype", double(static_cast<int>(type))}});
}

}  // namespace detail

//! The kept K/V rows of sliced documents on one rank, and their accumulated dK/dV (see the
//! file comment). Move-only; an entry's buffers are freed when it is released or the context
//! destroyed.
class slice_context {
 public:
  //! Rows of `dims.kv_heads` x `dims.head_dim` elements of `type`. Throws invalid_argument for
  //! dims without a kernel or an unknown dtype.
  slice_context(const attention_dims& dims, dtype type) : dims_(dims), type_(type) { detail::check_context_dims(dims, type); }
  slice_context(const slice_context&) = delete;
  slice_context& operator=(const slice_context&) = delete;
  slice_context(slice_context&&) = default;
  slice_context& operator=(slice_context&&) = default;
  ~slice_context() = default;

  [[nodiscard]] const attention_dims& dims() const noexcept { return dims_; }
  [[nodiscard]] dtype type() const noexcept { return type_; }

  //! Appends `rows` rows of K and V (device pointers, [rows][kv_heads][head_dim] in type()) to
  //! the kept context of (document, layer), on `stream`; their gradient starts at zero.
  void keep(std::int64_t document, std::int32_t layer, const void* k, const void* v, std::int64_t rows, cudaStream_t stream) {
    ZEPPELIN_EXPECTS(rows >= 0 && (rows == 0 || (k != nullptr && v != nullptr)),
                     "device slice context: keep takes a non-negative row count and K and V device pointers",
                     {{"rows", double(rows)}, {"k_is_null", double(k == nullptr)}, {"v_is_null", double(v == nullptr)},
                      {"document", double(document)}, {"layer", double(layer)}});
    const auto it = kept_.find({document, layer});
    const std::int64_t old_rows = it == kept_.end() ? 0 : it->second.rows, total = old_rows + rows;
    ZEPPELIN_EXPECTS(total < detail::max_block_length,
                     "device slice context: the kept rows of one entry must stay under 2^30 (a kernel block)",
                     {{"kept", double(old_rows)}, {"rows", double(rows)}, {"document", double(document)}, {"layer", double(layer)}});
    if (rows == 0) {
      kept_.try_emplace({document, layer});
      return;
    }
    entry grown;
    grown.rows = total;
    grown.k = device_memory(element_bytes(total), stream);
    grown.v = device_memory(element_bytes(total), stream);
    grown.dk = device_memory(gradient_bytes(total), stream);
    grown.dv = device_memory(gradient_bytes(total), stream);
    const std::size_t old_elements = element_bytes(old_rows), old_gradient = gradient_bytes(old_rows);
    if (old_rows > 0) {
      const entry& old = it->second;
      ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(grown.k.get(), old.k.get(), old_elements, cudaMemcpyDeviceToDevice, stream));
      ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(grown.v.get(), old.v.get(), old_elements, cudaMemcpyDeviceToDevice, stream));
      ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(grown.dk.get(), old.dk.get(), old_gradient, cudaMemcpyDeviceToDevice, stream));
      ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(grown.dv.get(), old.dv.get(), old_gradient, cudaMemcpyDeviceToDevice, stream));
    }
    ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(grown.k.as<std::byte>() + old_elements, k, element_bytes(rows), cudaMemcpyDeviceToDevice, stream));
    ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(grown.v.as<std::byte>() + old_elements, v, element_bytes(rows), cudaMemcpyDeviceToDevice, stream));
    ZEPPELIN_CUDA_CHECK(cudaMemsetAsync(grown.dk.as<std::byte>() + old_gradient, 0, gradient_bytes(rows), stream));
    ZEPPELIN_CUDA_CHECK(cudaMemsetAsync(grown.dv.as<std::byte>() + old_gradient, 0, gradient_bytes(rows), stream));
    if (it == kept_.end()) {
      kept_.emplace(std::pair{document, layer}, std::move(grown));
    } else {
      it->second.free_on(stream);  // after the copies above
      it->second = std::move(grown);
    }
  }

  //! Rows kept for (document, layer); 0 when none.
  [[nodiscard]] std::int64_t rows(std::int64_t document, std::int32_t layer) const {
    const auto it = kept_.find({document, layer});
    return it == kept_.end() ? 0 : it->second.rows;
  }
  //! The kept K rows of (document, layer): device memory, [rows][kv_heads][head_dim] in type()
  //! (nullptr when none are kept yet).
  [[nodiscard]] const void* keys(std::int64_t document, std::int32_t layer) const { return find(document, layer).k.get(); }
  //! The kept V rows, as keys().
  [[nodiscard]] const void* values(std::int64_t document, std::int32_t layer) const { return find(document, layer).v.get(); }

  //! Adds a later slice's dK and dV (device fp32, [rows][kv_heads][head_dim]) of the first
  //! `rows` kept rows of (document, layer), on `stream`: a slice's context is the rows kept
  //! before it, a prefix of what is kept by the time it runs backward.
  void add_gradient(std::int64_t document, std::int32_t layer, const float* dk, const float* dv, std::int64_t rows, cudaStream_t stream) {
    entry& e = find(document, layer);
    ZEPPELIN_EXPECTS(rows >= 0 && rows <= e.rows && (rows == 0 || (dk != nullptr && dv != nullptr)),
                     "device slice context: a gradient must be of at most the kept rows, from dK and dV device pointers",
                     {{"rows", double(rows)}, {"kept", double(e.rows)}, {"dk_is_null", double(dk == nullptr)},
                      {"dv_is_null", double(dv == nullptr)}, {"document", double(document)}, {"layer", double(layer)}});
    if (rows == 0) return;
    const std::int64_t n = rows * dims_.kv_row();
    ZEPPELIN_CUDA_CHECK(add_f32(e.dk.as<float>(), dk, n, stream));
    ZEPPELIN_CUDA_CHECK(add_f32(e.dv.as<float>(), dv, n, stream));
    e.free_on(stream);
  }
  //! The dK (first) and dV (second) the later slices added for the kept rows of (document,
  //! layer): device fp32, [rows][kv_heads][head_dim] (nullptr when none are kept yet).
  [[nodiscard]] std::pair<const float*, const float*> gradient(std::int64_t document, std::int32_t layer) const {
    const entry& e = find(document, layer);
    return {e.dk.as<float>(), e.dv.as<float>()};
  }

  //! Forgets (document, layer), once its earliest slice's backward has read the gradient: its
  //! buffers are freed on `stream`, which must be ordered after every use of them. No-op when
  //! nothing is kept for it.
  void release(std::int64_t document, std::int32_t layer, cudaStream_t stream) {
    const auto it = kept_.find({document, layer});
    if (it == kept_.end()) return;
    it->second.free_on(stream);
    kept_.erase(it);
  }

 private:
  struct entry {
    device_memory k, v, dk, dv;
    std::int64_t rows = 0;
    void free_on(cudaStream_t s) noexcept {
      for (device_memory* m : {&k, &v, &dk, &dv}) m->free_on(s);
    }
  };
  [[nodiscard]] std::size_t element_bytes(std::int64_t rows) const noexcept {
    return static_cast<std::size_t>(rows * dims_.kv_row()) * size_of(type_);
  }
  [[nodiscard]] std::size_t gradient_bytes(std::int64_t rows) const noexcept {
    return static_cast<std::size_t>(rows * dims_.kv_row()) * sizeof(float);
  }
  // The kept entry of (document, layer).
  [[nodiscard]] const entry& find(std::int64_t document, std::int32_t layer) const {
    const auto it = kept_.find({document, layer});
    ZEPPELIN_EXPECTS(it != kept_.end(), "device slice context: nothing kept for this document and layer",
                     {{"document", double(document)}, {"layer", double(layer)}});
    return it->second;
  }
  [[nodiscard]] entry& find(std::int64_t document, std::int32_t layer) {
    return const_cast<entry&>(std::as_const(*this).find(document, layer));
  }

  attention_dims dims_;
  dtype type_;
  std::map<std::pair<std::int64_t, std::int32_t>, entry> kept_;
};

//! A slice's query rows and its context, forward (see the file comment).
struct context_forward_args {
  const void* q = nullptr;  //!< [rows][heads][head_dim], the type
  const void* k = nullptr;  //!< [context_rows][kv_heads][head_dim], the type
  const void* v = nullptr;  //!< [context_rows][kv_heads][head_dim], the type
  float* o = nullptr;       //!< [rows][heads][head_dim] fp32: the slice's O so far, merged into
  float* lse = nullptr;     //!< [heads][lse_stride]: the slice's LSE so far, merged into
  std::int64_t rows = 0;          //!< query rows
  std::int64_t context_rows = 0;  //!< context rows (all before the queries)
  std::int64_t lse_stride = 0;    //!< 0 = rows
};

//! A slice's query rows and its context, backward (see the file comment).
struct context_backward_args {
  const void* q = nullptr;      //!< [rows][heads][head_dim], the type
  const void* k = nullptr;      //!< [context_rows][kv_heads][head_dim], the type
  const void* v = nullptr;      //!< [context_rows][kv_heads][head_dim], the type
  const void* o = nullptr;      //!< [rows][heads][head_dim], the type: the GLOBAL O (read only when delta is null)
  const void* d_o = nullptr;    //!< [rows][heads][head_dim], the type: the gradient of the global O
  const float* lse = nullptr;   //!< [heads][lse_stride]: the GLOBAL LSE
  const float* delta = nullptr; //!< [heads][lse_stride]: rowsum(dO * O) of the global O; nullptr = computed here
  float* dq = nullptr;          //!< [rows][heads][head_dim] fp32, added to
  float* dk = nullptr;          //!< [context_rows][kv_heads][head_dim] fp32, added to
  float* dv = nullptr;          //!< [context_rows][kv_heads][head_dim] fp32, added to
  std::int64_t rows = 0;
  std::int64_t context_rows = 0;
  std::int64_t lse_stride = 0;  //!< 0 = rows
};

namespace detail {

//! A device pointer of a context attention call, its name and the alignment the kernels need.
struct context_pointer {
  const char* name;
  const void* address;
  std::uintptr_t alignment;
};

//! Throws invalid_argument naming the first null or misaligned pointer.
inline void check_context_pointers(std::initializer_list<context_pointer> pointers) {
  for (const context_pointer& p : pointers) {
    ZEPPELIN_EXPECTS(p.address != nullptr, "device context attention: a device pointer is null", {{p.name, 0.0}});
    const std::uintptr_t misalignment = reinterpret_cast<std::uintptr_t>(p.address) % p.alignment;
    ZEPPELIN_EXPECTS(misalignment == 0, "device context attention: a device pointer is not aligned as the kernels need",
                     {{p.name, double(misalignment)}, {"alignment", double(p.alignment)}});
  }
}

inline void check_context_rows(const attention_dims& dims, dtype type, std::int64_t rows, std::int64_t context_rows,
                               std::int64_t lse_stride) {
  check_context_dims(dims, type);
  ZEPPELIN_EXPECTS(rows >= 0 && context_rows >= 0 && rows < max_block_length && context_rows < max_block_length,
                   "device context attention: query and context row counts must be in [0, 2^30)",
                   {{"rows", double(rows)}, {"context_rows", double(context_rows)}});
  ZEPPELIN_EXPECTS(lse_stride == 0 || lse_stride >= rows, "device context attention: the LSE stride must be 0 (= rows) or at least rows",
                   {{"lse_stride", double(lse_stride)}, {"rows", double(rows)}});
}

//! The CSR arrays of the one full-mask block, in device memory from the pool on `stream`.
class context_block_csr {
 public:
  context_block_csr(std::int64_t rows, std::int64_t context_rows, cudaStream_t stream) : memory_(sizeof(arrays), stream) {
    const arrays host{{0, static_cast<std::int32_t>(rows)}, {0, static_cast<std::int32_t>(context_rows)}, context_rows, 0};
    // pageable source: the copy has read it when cudaMemcpyAsync returns
    ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(memory_.get(), &host, sizeof(arrays), cudaMemcpyHostToDevice, stream));
  }
  //! Queries rows [0, rows) at positions context_rows + i, keys [0, context_rows) at j, full mask.
  void describe(attention_blocks& b) const noexcept {
    const std::byte* base = memory_.as<const std::byte>();
    b.cu_seqlens_q = reinterpret_cast<const std::int32_t*>(base + offsetof(arrays, cu_q));
    b.cu_seqlens_k = reinterpret_cast<const std::int32_t*>(base + offsetof(arrays, cu_k));
    b.q_offset = reinterpret_cast<const std::int64_t*>(base + offsetof(arrays, q_offset));
    b.k_offset = reinterpret_cast<const std::int64_t*>(base + offsetof(arrays, k_offset));
    b.masks = nullptr;
    b.mask = block_mask::full;
    b.num_blocks = 1;
  }

 private:
  struct arrays {
    std::int32_t cu_q[2];
    std::int32_t cu_k[2];
    std::int64_t q_offset;
    std::int64_t k_offset;
  };
  device_memory memory_;
};

//! The inputs and the block list a forward or backward launch of the context shares.
inline void context_blocks(attention_blocks& b, const attention_dims& dims, dtype type, const void* q, const void* k, const void* v,
                           std::int64_t rows, const context_block_csr& csr) {
  b.q = q, b.k = k, b.v = v;
  csr.describe(b);
  b.heads = dims.heads, b.kv_heads = dims.kv_heads, b.head_dim = dims.head_dim;
  b.total_q = rows;
  b.softmax_scale = static_cast<float>(dims.softmax_scale());
  b.type = type;
}

}  // namespace detail

//! Merges the attention of the query rows over the context into the slice's fp32 O and LSE, on
//! `stream` (see the file comment). No-op when rows or context_rows is 0.
inline void context_attention_forward(const attention_dims& dims, dtype type, const context_forward_args& a, cudaStream_t stream) {
  detail::check_context_rows(dims, type, a.rows, a.context_rows, a.lse_stride);
  if (a.rows == 0 || a.context_rows == 0) return;
  detail::check_context_pointers({{"q", a.q, 16}, {"k", a.k, 16}, {"v", a.v, 16}, {"o", a.o, 16}, {"lse", a.lse, alignof(float)}});
  const auto q_elements = static_cast<std::size_t>(a.rows * dims.q_row());
  const detail::context_block_csr csr(a.rows, a.context_rows, stream);
  device_memory part_o(q_elements * sizeof(float), stream), part_lse(static_cast<std::size_t>(a.rows) * dims.heads * sizeof(float), stream);
  attention_forward_params p;
  detail::context_blocks(p, dims, type, a.q, a.k, a.v, a.rows, csr);
  p.o_f32 = part_o.as<float>();
  p.lse = part_lse.as<float>();
  p.lse_stride = a.rows;
  p.max_seqlen_q = static_cast<std::int32_t>(a.rows);
  validate(p);
  ZEPPELIN_CUDA_CHECK(attention_forward(p, stream));
  lse_merge_params m;
  m.o_acc = a.o;
  m.lse_acc = a.lse;
  m.o_part = p.o_f32;
  m.lse_part = p.lse;
  m.rows = a.rows;
  m.heads = dims.heads;
  m.head_dim = dims.head_dim;
  m.lse_acc_stride = a.lse_stride != 0 ? a.lse_stride : a.rows;
  m.lse_part_stride = a.rows;
  m.part_type = partial_type::fp32;
  validate(m);
  ZEPPELIN_CUDA_CHECK(lse_merge(m, stream));
}  // the scratch is freed on `stream`, after the merge

//! Adds the context's share of the gradient into dq and into the context rows' dk, dv, on
//! `stream` (see the file comment). No-op when rows or context_rows is 0.
inline void context_attention_backward(const attention_dims& dims, dtype type, const context_backward_args& a, cudaStream_t stream) {
  detail::check_context_rows(dims, type, a.rows, a.context_rows, a.lse_stride);
  if (a.rows == 0 || a.context_rows == 0) return;
  detail::check_context_pointers({{"q", a.q, 16}, {"k", a.k, 16}, {"v", a.v, 16}, {"d_o", a.d_o, 16}, {"lse", a.lse, alignof(float)},
                                  {"dq", a.dq, 8}, {"dk", a.dk, 8}, {"dv", a.dv, 8}});
  if (a.delta == nullptr)
    detail::check_context_pointers({{"o", a.o, 16}});
  else
    detail::check_context_pointers({{"delta", a.delta, alignof(float)}});
  const std::int64_t stride = a.lse_stride != 0 ? a.lse_stride : a.rows;
  const detail::context_block_csr csr(a.rows, a.context_rows, stream);
  device_memory delta;
  const float* row_terms = a.delta;
  if (row_terms == nullptr) {
    delta = device_memory(static_cast<std::size_t>((dims.heads - 1) * stride + a.rows) * sizeof(float), stream);
    attention_preprocess_params pp;
    pp.o = a.o;
    pp.dout = a.d_o;
    pp.delta = delta.as<float>();
    pp.rows = a.rows;
    pp.heads = dims.heads;
    pp.head_dim = dims.head_dim;
    pp.delta_stride = stride;
    pp.type = type;
    validate(pp);
    ZEPPELIN_CUDA_CHECK(attention_backward_preprocess(pp, stream));
    row_terms = delta.as<float>();
  }
  attention_backward_params p;
  detail::context_blocks(p, dims, type, a.q, a.k, a.v, a.rows, csr);
  p.lse_stride = stride;
  p.dout = a.d_o;
  p.lse = a.lse;
  p.delta = row_terms;
  p.dq_accum = a.dq;
  p.dk_accum = a.dk;
  p.dv_accum = a.dv;
  p.max_seqlen_k = static_cast<std::int32_t>(a.context_rows);
  validate(p);
  ZEPPELIN_CUDA_CHECK(attention_backward(p, stream));
}  // the scratch is freed on `stream`, after the backward

}  // namespace device
ZEPPELIN_NAMESPACE_END
