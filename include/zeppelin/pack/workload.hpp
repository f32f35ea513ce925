// zeppelin/pack/workload.hpp
// The workload of one document, WLB-LLM (Wang et al., OSDI 2025) Eq. 2's W_a(d) + W_l(d):
// attention latency, quadratic in the document length d (causal mask), plus the latency of
// everything else (GEMMs, element-wise kernels, TP / CP collectives), linear in d.
//   in : a document length d (tokens)
//   out: W(d) = quadratic d^2 + linear d, i.e. a2 d^2 + (a1 + b1) d with W_a = a2 d^2 + a1 d
//        and W_l = b1 d. No intercept: fixed costs (kernel launches, pipeline sends) are paid
//        once per micro-batch, not per document, so W(0) = 0 and a micro-batch's workload is
//        the sum of its documents'.
// Three ways to get the coefficients:
//   document_workload{}                the plain default below (units: causal attention pairs)
//   document_workload::from_profile(p) from a fitted quadratic_profile (cost/quadratic_fit.hpp),
//                                      WLB-LLM's offline profiling; p.c is dropped (see above)
//   document_workload::for_model(m, g) from the analytic stage time (cost/stage_time.hpp) of
//                                      one transformer layer's forward of model m on GPU g,
//                                      fitted with fit_quadratic_no_intercept (seconds);
//                                      unweighted least squares, so the long documents
//                                      set the fit: for LLaMA-7B on an H100 it is within
//                                      1% of the stage time from 16K tokens up, and up to
//                                      20% low at 1K-8K (launch-bound attention there)
// The default: W(d) = d (d + 1) / 2 + 24576 d, i.e. the causal (query, key) pairs of the
// document plus 24576 pair-equivalents per token. 24576 (= 24K) is LLaMA-7B's linear FLOPs
// per token over its attention FLOPs per causal pair, 2 (4 h^2 + 3 h f) / (4 h) with
// h = 4096, f = 11008, which is 24,704, rounded to 24K: attention and the rest cost the same
// at d ~ 49K tokens, attention dominates the 128K documents that cause the imbalance.
// Errors: invalid_argument for a negative or non-finite coefficient, both coefficients zero
// (every workload would be 0), or a fit whose coefficients come out negative.
// Host-only (for_model reads a model_config, which holds a string).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/micro_batch.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/layer_split.hpp>
#include <zeppelin/cost/quadratic_fit.hpp>
#include <zeppelin/cost/stage_time.hpp>

#include <array>
#include <cmath>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! W(d) = quadratic d^2 + linear d; see the file comment for the default's derivation.
struct document_workload {
  double quadratic = 0.5;      //!< a2: per token^2 (attention)
  double linear = 24576.5;     //!< a1 + b1: per token (attention's linear part and everything else)

  //! W(d) for a document of d tokens.
  [[nodiscard]] constexpr double operator()(token_count d) const noexcept {
    const auto x = static_cast<double>(d);
    return (quadratic * x + linear) * x;
  }

  //! The model with a2 = p.a and a1 + b1 = p.b; p.c (a per-micro-batch intercept) is
  //! dropped. Throws invalid_argument if the result is invalid (validate below).
  [[nodiscard]] static document_workload from_profile(const quadratic_profile& p);

  //! Fits W(d) in seconds to one transformer layer's forward time of a micro-batch holding
  //! only a document of d tokens (analytic_stage_time::for_gpu(model, gpu, tp, cp)), at
  //! d = 1K, 2K, ..., 256K, with fit_quadratic_no_intercept. Throws invalid_argument for an
  //! invalid model or GPU, or a fit with a negative coefficient.
  [[nodiscard]] static document_workload for_model(const model_config& model, const gpu_spec& gpu, int tp = 1, int cp = 1);

  friend constexpr bool operator==(const document_workload&, const document_workload&) = default;
};

//! Throws invalid_argument for a negative or non-finite coefficient or both zero.
inline void validate(const document_workload& w) {
  ZEPPELIN_EXPECTS(std::isfinite(w.quadratic) && std::isfinite(w.linear) && w.quadratic >= 0 && w.linear >= 0,
                   "workload coefficients must be finite and non-negative", {{"quadratic", w.quadratic}, {"linear", w.linear}});
  ZEPPELIN_EXPECTS(w.quadratic > 0 || w.linear > 0, "a workload model needs a positive coefficient",
                   {{"quadratic", w.quadratic}, {"linear", w.linear}});
}

inline document_workload document_workload::from_profile(const quadratic_profile& p) {
  const document_workload w{.quadratic = p.a, .linear = p.b};
  validate(w);
  return w;
}

inline document_workload document_workload::for_model(const model_config& model, const gpu_spec& gpu, int tp, int cp) {
  const analytic_stage_time time = analytic_stage_time::for_gpu(model, gpu, tp, cp);
  std::vector<profile_point> points;
  for (token_count d = token_count{1} << 10; d <= token_count{1} << 18; d *= 2)
    points.push_back({static_cast<double>(d), time.times(micro_batch{{d}, {}}, stage_slice{1, false, false}).forward});
  return from_profile(fit_quadratic_no_intercept(points));
}

ZEPPELIN_NAMESPACE_END
