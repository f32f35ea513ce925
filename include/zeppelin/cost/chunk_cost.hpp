// zeppelin/cost/chunk_cost.hpp
// InfiniPipe's cost model of a chunk (Wang et al., "InfiniPipe: Elastic Pipeline Parallelism
// for Efficient Variable-Length Long-Context LLM Training", section 3.1) on N = d_s x d_p
// GPUs: Ulysses sequence parallelism of degree d_s (with ZeRO-3) inside a stage, d_p
// pipeline stages.
//   in : a chunk {C, S} (core/chunk.hpp; a slice [begin, end) carries its own context begin),
//        and for memory the lengths of the step's sequences (to tell a split chunk)
//   out: seconds of one stage's forward or backward of the chunk, bytes of its activations
//   T_comp (Eq. 1) = (1/N) sum over slices (a1 (end^2 - begin^2) + a2 (end - begin)) + b1/d_p
//        which is the paper's a1 ((C + s0)^2 - C^2) + a2 s0 for the cut slice s0 and
//        a1 s^2 + a2 s for every whole sequence (begin = 0); (a1, a2, b1) per pass;
//   T_a2a (Eq. 3, the GQA form of the paper's later revision; D_kv = D gives Eq. 3)
//        = (e (D + D_kv) sum s / (d_s B) + 2 beta) 2L/d_p, the four all-to-alls of every
//        layer (Q and O of width D, K and V of width D_kv), the same in both passes;
//   T_tot (Eq. 4) = T_comp + T_a2a, and at least L/d_p x the pass's layer floor: the
//        ZeRO-3 collectives of a layer's parameters, which a small chunk cannot hide;
//   M_act (Eq. 5) = (M_token/N) sum s + (1 - I_k) (2 e L D_kv / N) sum s, where I_k = 0 only
//        for a split chunk (a slice that is not its sequence's tail): its dK/dV live until
//        its own backward; batched and hybrid chunks have I_k = 1.
// Above its floor, T_tot is a per-chunk constant plus one marginal term per slice
// (fixed_seconds + sum slice_seconds), so a packer adds a slice's marginal time to a chunk
// without counting b1 and the all-to-all latency again.
// Errors: invalid_argument (validate) for d_s or d_p < 1, layers < 1, a width < 1, a
// negative or non-finite coefficient, element bytes or activation bytes, or a bandwidth that
// is not positive (infinity is allowed: no all-to-all).
// Host-only (model_config holds a string); nvcc-safe as a header.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/parallel_layout.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/attention_flops.hpp>
#include <zeppelin/cost/attention_time_model.hpp>
#include <zeppelin/cost/linear_flops.hpp>
#include <zeppelin/cost/linear_time_model.hpp>
#include <zeppelin/cost/pipeline_memory.hpp>
#include <zeppelin/cost/quadratic_fit.hpp>
#include <zeppelin/core/chunk.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

ZEPPELIN_NAMESPACE_BEGIN

//! The coefficients of Eq. 1 for one pass, for the whole model on one GPU: seconds per
//! token^2 (attention), per token (GEMMs and the rest), per chunk (fixed costs).
struct chunk_compute_coefficients {
  double a1 = 0;  //!< seconds per token^2
  double a2 = 0;  //!< seconds per token
  double b1 = 0;  //!< seconds per chunk; a stage pays b1 / d_p
  //! Seconds one layer of the pass takes at least whatever the chunk: ZeRO-3's collectives
  //! of one layer's parameters, which the compute of the layer before hides only when it is
  //! longer (the all-gather; in the backward also the gradients' reduce-scatter on the same
  //! links). 0: none (no ZeRO-3 traffic, or a profile that includes it).
  double layer_floor = 0;
  friend constexpr bool operator==(const chunk_compute_coefficients&, const chunk_compute_coefficients&) = default;

  //! The coefficients behind a profile fitted on ONE stage (d_s GPUs, L/d_p layers) with
  //! fit_quadratic over single-sequence chunks (cost/quadratic_fit.hpp), a l^2 + b l + c:
  //! a1 = a N, a2 = b N, b1 = c d_p. Profile with the all-to-alls excluded, or set
  //! chunk_cost_model::all_to_all to no_all_to_all() so they are not counted twice.
  [[nodiscard]] static constexpr chunk_compute_coefficients from_stage_profile(const quadratic_profile& p, int d_s, int d_p) noexcept {
    const double n = static_cast<double>(d_s) * d_p;
    return {p.a * n, p.b * n, p.c * d_p};
  }
};

//! The all-to-all link of Eq. 3: no all-to-all at all (d_s = 1, or folded into a profile).
[[nodiscard]] inline link_spec no_all_to_all() noexcept { return {std::numeric_limits<double>::infinity(), 0.0}; }

//! Whether `size` consecutive GPUs of `topo` make a group the cost models price: a divisor
//! of a node's GPUs (inside one node) or whole nodes.
[[nodiscard]] inline bool node_aligned_group(const topology& topo, int size) noexcept {
  const int g = topo.gpus_per_node();
  return size >= 1 && (size <= g ? g % size == 0 : size % g == 0);
}

//! The all-to-all link of Eq. 3 for a Ulysses group of d_s consecutive GPUs of `topo` (one
//! node, or whole nodes): each GPU keeps 1/d_s of its data and sends the rest, (g - 1)/d_s
//! of it over NVLink to its node's other GPUs and (d_s - g)/d_s through its NIC (shared by
//! the GPUs mapped to it) to the other nodes, both at once, g = min(d_s, GPUs per node).
//! Returned as the per-GPU bandwidth B of Eq. 3 (seconds = e D sum s / (d_s B)) and the
//! slower path's latency; no all-to-all for d_s = 1. Throws invalid_argument for d_s < 1 or
//! a group that is neither inside one node nor whole nodes.
[[nodiscard]] inline link_spec ulysses_all_to_all_link(const topology& topo, int sp_degree) {
  const int g = topo.gpus_per_node();
  ZEPPELIN_EXPECTS(node_aligned_group(topo, sp_degree),
                   "a Ulysses group is a divisor of a node's GPUs or whole nodes", {{"sp_degree", double(sp_degree)}, {"gpus_per_node", double(g)}});
  if (sp_degree == 1) return no_all_to_all();
  const double d = sp_degree, inside = std::min(sp_degree, g);
  const double intra = (inside - 1) / d / topo.intra_node_link().bandwidth;
  double inter = 0;
  if (sp_degree > g) {
    int sharing = 1;
    for (int nic = 0; nic < topo.nics_per_node(); ++nic) sharing = std::max(sharing, topo.gpus_sharing_nic(nic));
    inter = (d - g) / d / (topo.nic_link().bandwidth / sharing);
  }
  const double per_byte = std::max(intra, inter);  // seconds per byte of a GPU's data
  return {1 / per_byte, inter > intra ? topo.nic_link().latency : topo.intra_node_link().latency};
}

//! Seconds per byte of gathered data that one GPU spends in a ring all-gather (or
//! reduce-scatter) over a ZeRO-3 group of `group` consecutive GPUs of `topo` (a divisor of
//! a node's GPUs, or whole nodes): (g - 1) / g x max(1 / NVLink, 1 / (k NIC)), k the NICs of
//! a node, since NCCL runs one ring channel per NIC so that a node's inter-node edges spread
//! over all of them (the rings sim/detail/collective_rings.hpp runs on the event engine).
//! 0 for a group of one. Throws invalid_argument for a group that is neither inside one
//! node nor whole nodes.
[[nodiscard]] inline double zero3_ring_seconds_per_byte(const topology& topo, int group) {
  const int g = topo.gpus_per_node();
  ZEPPELIN_EXPECTS(node_aligned_group(topo, group),
                   "a ZeRO-3 group is a divisor of a node's GPUs or whole nodes", {{"group", double(group)}, {"gpus_per_node", double(g)}});
  if (group == 1) return 0;
  double per_byte = 1 / topo.intra_node_link().bandwidth;
  if (group > g) per_byte = std::max(per_byte, 1 / (topo.nics_per_node() * topo.nic_link().bandwidth));
  return per_byte * (group - 1) / group;
}

struct chunk_cost_model;
inline void validate(const chunk_cost_model& m);

//! InfiniPipe's chunk cost model (section 3.1); see the file header for the formulas.
struct chunk_cost_model {
  int d_s = 1;                 //!< Ulysses SP degree (GPUs of one stage)
  int d_p = 1;                 //!< pipeline stages
  int layers = 1;              //!< L
  double element_bytes = 2;    //!< e (bf16)
  std::int64_t hidden = 1;     //!< D: width of Q and of the attention output
  std::int64_t kv_hidden = 1;  //!< D_kv: width of K and of V (D for MHA)
  chunk_compute_coefficients forward{};
  chunk_compute_coefficients backward{};
  //! B_a2a(d_s): effective bytes per second of one GPU in the all-to-all (volume / d_s of
  //! a GPU's tokens per second), beta_a2a(d_s): the latency of one all-to-all.
  link_spec all_to_all = no_all_to_all();
  double token_activation_bytes = 0;  //!< M_token: activation bytes per token, whole model

  //! N = d_s d_p.
  [[nodiscard]] double gpus() const noexcept { return static_cast<double>(d_s) * d_p; }

  //! Defaults from the model's shape and the GPU's achieved throughput (no profile):
  //!  - a1, a2: FLOPs per token^2 and per token (attention_flops.hpp, linear_flops.hpp; the
  //!    causal pairs of [b, e) are (e^2 - b^2)/2 + (e - b)/2, the LM head left out as on a
  //!    middle stage) over the long-sequence FlashAttention-2 rate of attention_time_model::
  //!    for_gpu(gpu) (its largest profiled row count, e.g. 345 / 262 TFLOP/s forward /
  //!    backward on H100) and the GEMM efficiency of linear_time_model (0.58 of peak);
  //!  - b1 = 0: kernel launches are asynchronous and the parameter gathers are prefetched
  //!    behind the compute of the layer before, so no fixed cost per chunk is known without a
  //!    profile (fit one with from_stage_profile);
  //!  - layer_floor: ZeRO-3 over the d_s GPUs of a stage: one layer's bf16 parameters through
  //!    zero3_ring_seconds_per_byte(topo, d_s) in the forward, twice that in the backward (the
  //!    gather of the next layer and the reduce-scatter of this one's gradients share the
  //!    links): a chunk too small to hide them takes this long per layer;
  //!  - all-to-all: ulysses_all_to_all_link(topo, d_s): NVLink inside a node, the NIC
  //!    share across nodes, none when d_s = 1;
  //!  - M_token: pipeline_memory_model's bytes per token and layer without TP times L.
  //! The GPU is the topology's. Throws invalid_argument for an invalid model or GPU peak,
  //! d_s, d_p < 1, or a Ulysses group that is neither inside a node nor whole nodes.
  [[nodiscard]] static chunk_cost_model for_model(const model_config& model, const topology& topo, int d_s, int d_p) {
    validate(model);
    ZEPPELIN_EXPECTS(d_s >= 1 && d_p >= 1, "SP and PP degrees must be at least 1", {{"d_s", double(d_s)}, {"d_p", double(d_p)}});
    const gpu_spec& gpu = topo.gpu();
    const attention_time_model attention = attention_time_model::for_gpu(gpu);
    const linear_time_model linear{};
    const double l = model.layers;
    // Per token^2 of [b, e): half a causal pair; the other half is linear in e - b.
    const double pair_fwd = attention_forward_flops(1, model) / 2 / attention.forward.points().back().flops_per_second;
    const double pair_bwd = attention_backward_flops(1, model) / 2 / attention.backward.points().back().flops_per_second;
    chunk_cost_model c;
    c.d_s = d_s;
    c.d_p = d_p;
    c.layers = model.layers;
    c.element_bytes = model.bytes_per_element;
    c.hidden = model.hidden;
    c.kv_hidden = model.kv_width();
    const memory_settings states{.zero_stage = 3};
    const double gather = pipeline_memory_model{model, parallel_layout{}, states}.parameters(stage_slice{1, false, false}) *
                          states.parameter_bytes * zero3_ring_seconds_per_byte(topo, d_s);
    c.forward = {l * pair_fwd, l * (pair_fwd + linear.seconds(linear_forward_flops_per_token(model), gpu)), 0.0, gather};
    c.backward = {l * pair_bwd, l * (pair_bwd + linear.seconds(linear_backward_flops_per_token(model), gpu)), 0.0, 2 * gather};
    c.all_to_all = ulysses_all_to_all_link(topo, d_s);
    c.token_activation_bytes = l * pipeline_memory_model{model, parallel_layout{}, memory_settings{}}.activation_bytes_per_token_layer();
    validate(c);
    return c;
  }

  //! T_comp of `c` in the pass priced by `pass` (forward or backward), Eq. 1.
  [[nodiscard]] double compute_seconds(const chunk_compute_coefficients& pass, const chunk& c) const {
    double t = pass.b1 / d_p;
    for (const chunk_slice& s : c.slices) t += slice_compute_seconds(pass, s);
    return t;
  }

  //! T_a2a of `c`, Eq. 3 (GQA form).
  [[nodiscard]] double all_to_all_seconds(const chunk& c) const { return all_to_all_fixed_seconds() + all_to_all_token_seconds(c.tokens()); }

  //! T_comp + T_a2a of `c` (Eq. 4 as the paper writes it): the chunk's own work, without
  //! the layer floor, for a simulator that runs ZeRO-3's collectives itself.
  [[nodiscard]] double busy_seconds(const chunk_compute_coefficients& pass, const chunk& c) const {
    return compute_seconds(pass, c) + all_to_all_seconds(c);
  }

  //! T_tot of `c` in the pass priced by `pass`: busy_seconds, and at least the pass's layer
  //! floor on each of the stage's L / d_p layers: e.g. seconds(m.backward, c).
  [[nodiscard]] double seconds(const chunk_compute_coefficients& pass, const chunk& c) const {
    return std::max(busy_seconds(pass, c), pass.layer_floor * layers / d_p);
  }

  //! The per-chunk part of T_tot: b1 / d_p + 2 beta 2L / d_p.
  [[nodiscard]] double fixed_seconds(const chunk_compute_coefficients& pass) const noexcept {
    return pass.b1 / d_p + all_to_all_fixed_seconds();
  }

  //! The marginal part of T_tot that slice `s` adds to any chunk (its context is s.begin):
  //! T_tot(chunk) = fixed_seconds + sum over its slices of slice_seconds.
  [[nodiscard]] double slice_seconds(const chunk_compute_coefficients& pass, const chunk_slice& s) const {
    return slice_compute_seconds(pass, s) + all_to_all_token_seconds(s.tokens());
  }

  //! M_act of `c`, Eq. 5, with I_k = 0 only for a split chunk. `lengths`: the sequences'
  //! lengths (chunk.hpp kind_of).
  [[nodiscard]] double activation_bytes(const chunk& c, std::span<const token_count> lengths) const {
    const double tokens = static_cast<double>(c.tokens());
    const double dkv = kind_of(c, lengths) == chunk_kind::split ? 2 * element_bytes * layers * static_cast<double>(kv_hidden) : 0.0;
    return (token_activation_bytes + dkv) * tokens / gpus();
  }

  //! T_a2a's latency part for one stage: 2 beta x 2L / d_p.
  [[nodiscard]] double all_to_all_fixed_seconds() const noexcept { return 2 * all_to_all.latency * 2 * layers / d_p; }
  //! T_a2a's bandwidth part for `tokens` tokens on one stage: e (D + D_kv) tokens / (d_s B) x 2L / d_p.
  [[nodiscard]] double all_to_all_token_seconds(token_count tokens) const noexcept {
    const double bytes = element_bytes * static_cast<double>(hidden + kv_hidden) * static_cast<double>(tokens);
    return bytes / (d_s * all_to_all.bandwidth) * 2 * layers / d_p;
  }

  friend bool operator==(const chunk_cost_model&, const chunk_cost_model&) = default;

 private:
  [[nodiscard]] double slice_compute_seconds(const chunk_compute_coefficients& pass, const chunk_slice& s) const {
    const double b = static_cast<double>(s.begin), e = static_cast<double>(s.end);
    return (pass.a1 * (e - b) * (e + b) + pass.a2 * (e - b)) / gpus();
  }
};

//! Throws invalid_argument for d_s or d_p < 1, layers < 1, hidden or kv_hidden < 1, element
//! bytes not finite and positive, a negative or non-finite coefficient or activation bytes,
//! a bandwidth that is not positive (+infinity allowed) or a latency not finite and >= 0.
inline void validate(const chunk_cost_model& m) {
  ZEPPELIN_EXPECTS(m.d_s >= 1 && m.d_p >= 1, "SP and PP degrees must be at least 1", {{"d_s", double(m.d_s)}, {"d_p", double(m.d_p)}});
  ZEPPELIN_EXPECTS(m.layers >= 1 && m.hidden >= 1 && m.kv_hidden >= 1, "layers and widths must be positive",
                   {{"layers", double(m.layers)}, {"hidden", double(m.hidden)}, {"kv_hidden", double(m.kv_hidden)}});
  ZEPPELIN_EXPECTS(std::isfinite(m.element_bytes) && m.element_bytes > 0, "element bytes must be finite and positive",
                   {{"element_bytes", m.element_bytes}});
  const auto ok = [](double v) { return std::isfinite(v) && v >= 0; };
  for (const chunk_compute_coefficients& p : {m.forward, m.backward})
    ZEPPELIN_EXPECTS(ok(p.a1) && ok(p.a2) && ok(p.b1) && ok(p.layer_floor), "compute coefficients must be finite and non-negative",
                     {{"a1", p.a1}, {"a2", p.a2}, {"b1", p.b1}, {"layer_floor", p.layer_floor}});
  ZEPPELIN_EXPECTS(m.all_to_all.bandwidth > 0 && ok(m.all_to_all.latency),
                   "the all-to-all bandwidth must be positive (infinity: none) and its latency finite and non-negative",
                   {{"bandwidth", m.all_to_all.bandwidth}, {"latency", m.all_to_all.latency}});
  ZEPPELIN_EXPECTS(ok(m.token_activation_bytes), "activation bytes per token must be finite and non-negative",
                   {{"token_activation_bytes", m.token_activation_bytes}});
}

ZEPPELIN_NAMESPACE_END
