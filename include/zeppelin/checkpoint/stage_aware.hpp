// zeppelin/checkpoint/stage_aware.hpp
// Stage-aware chunk-level adaptive checkpointing (Wang et al., "InfiniPipe: Elastic Pipeline
// Parallelism for Efficient Variable-Length Long-Context LLM Training", section 3.3.3,
// Eqs. 15-20), solved exactly.
//   in : stage_aware_problem: d_p stages, at most L / d_p recomputed layers per (stage,
//        chunk), per chunk in forward order its backward position f2b[k], the bytes I[k] it
//        keeps on a stage GPU without recomputation and the bytes F[k] each recomputed layer
//        frees there, the budget G - M_ms(p) per stage, and N_P (chunks of the longest
//        sequence). stage_aware_chunks derives I and F from chunks (core/chunk.hpp).
//   out: stage_aware_plan: the diagonal counts C (n + d_p - 1 integers in [0, L / d_p]),
//        ckpt(p, k) = C[f2b[k] + d_p - 1 - p] for 0-based stage p, sum C, the proven lower
//        bound and the search nodes; stage_aware_recompute answers checkpoint_policy
//        queries from a plan.
// The model. Recomputing a chunk on one stage opens a bubble that propagates to every
// stage; the chunks on the same diagonal of the backward grid can recompute inside it for
// free, so (Eq. 16) ckpt(p, k) is tied along diagonals and the recompute time is
// F^ x sum C (Eq. 17). A stage holds the activations of the chunks whose forward ran and
// whose backward has not: with w = min(n, d_p - p + N_P) (0-based p: d_p - 1 - p + N_P),
// its windows are, for j = 0..n-w, the chunks among the first w + j forwards that are not
// among the first j backwards. Every window must fit (Eq. 20):
//     sum_{k in window} (I[k] - F[k] ckpt(p, k)) <= G - M_ms(p).
// The solver minimises sum C under these constraints (checkpoint/detail/covering_ip.hpp:
// branch and bound with Lagrangian-dual bounds from a dual simplex, bound propagation and
// c-MIR cuts in every node's box, exact; see there and docs/stage-aware-checkpointing.md,
// which also lists instances whose gap the search cannot close within the node limit). A
// window is met when its bytes exceed the budget by at most 1e-12 of (its kept bytes +
// |budget|), a float rounding margin.
// Errors: invalid_argument for a bad problem (naming the value); infeasible when even
// C = L / d_p everywhere leaves a window over budget (naming the stage, the window j and
// the bytes over); resource_limit when the search passes options.max_nodes
// (solve_stage_aware_checkpointing; best_stage_aware_checkpointing then returns the best
// plan found with its lower bound instead).
// Deterministic. Host-only.
#pragma once

#include <zeppelin/checkpoint/checkpoint_policy.hpp>
#include <zeppelin/checkpoint/detail/covering_ip.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/core/chunk.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/cost/layer_split.hpp>
#include <zeppelin/cost/pipeline_memory.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! One chunk of the pipeline, in forward order (bytes are per GPU of a stage).
struct stage_aware_chunk {
  std::int64_t backward_position = 0;  //!< f2b[k]: 0-based position in the backward order
  double kept_bytes = 0;               //!< I[k]: activation bytes kept with no recomputation
  double freed_bytes_per_layer = 0;    //!< F[k] > 0: bytes one recomputed layer frees
  friend bool operator==(const stage_aware_chunk&, const stage_aware_chunk&) = default;
};

//! The program of Eq. 20 for one 1F1B pipeline.
struct stage_aware_problem {
  int stages = 1;                 //!< d_p
  int max_layers = 0;             //!< L / d_p: the most layers a (stage, chunk) recomputes
  std::int64_t prefill_chunks = 1;  //!< N_P: chunks of the pipeline's longest sequence
  std::vector<double> budget_bytes;  //!< per 0-based stage: G - M_ms(p), activation bytes
  std::vector<stage_aware_chunk> chunks;  //!< in forward order
  friend bool operator==(const stage_aware_problem&, const stage_aware_problem&) = default;
};

//! Throws invalid_argument unless: stages >= 1; max_layers >= 0; prefill_chunks >= 1; one
//! finite budget per stage; at least one chunk; every kept_bytes finite and >= 0, every
//! freed_bytes_per_layer finite and > 0; the backward positions a permutation of 0..n-1.
inline void validate(const stage_aware_problem& p) {
  ZEPPELIN_EXPECTS(p.stages >= 1, "stage-aware checkpointing needs at least one stage", {{"stages", double(p.stages)}});
  ZEPPELIN_EXPECTS(p.max_layers >= 0, "the layers a stage may recompute cannot be negative", {{"max_layers", double(p.max_layers)}});
  ZEPPELIN_EXPECTS(p.prefill_chunks >= 1, "the prefill count N_P must be at least 1", {{"prefill_chunks", double(p.prefill_chunks)}});
  ZEPPELIN_EXPECTS(p.budget_bytes.size() == static_cast<std::size_t>(p.stages), "one budget per stage",
                   {{"budgets", double(p.budget_bytes.size())}, {"stages", double(p.stages)}});
  for (std::size_t s = 0; s < p.budget_bytes.size(); ++s)
    ZEPPELIN_EXPECTS(std::isfinite(p.budget_bytes[s]), "a stage budget must be finite", {{"stage", double(s)}, {"budget_bytes", p.budget_bytes[s]}});
  ZEPPELIN_EXPECTS(!p.chunks.empty(), "stage-aware checkpointing needs at least one chunk", {});
  const std::size_t n = p.chunks.size();
  std::vector<char> seen(n, 0);
  for (std::size_t k = 0; k < n; ++k) {
    const stage_aware_chunk& c = p.chunks[k];
    ZEPPELIN_EXPECTS(std::isfinite(c.kept_bytes) && c.kept_bytes >= 0, "a chunk's kept bytes must be finite and non-negative",
                     {{"chunk", double(k)}, {"kept_bytes", c.kept_bytes}});
    ZEPPELIN_EXPECTS(std::isfinite(c.freed_bytes_per_layer) && c.freed_bytes_per_layer > 0,
                     "a chunk's bytes freed per recomputed layer must be finite and positive",
                     {{"chunk", double(k)}, {"freed_bytes_per_layer", c.freed_bytes_per_layer}});
    ZEPPELIN_EXPECTS(c.backward_position >= 0 && static_cast<std::size_t>(c.backward_position) < n &&
                         !seen[static_cast<std::size_t>(c.backward_position)],
                     "backward positions must be a permutation of 0..chunks-1",
                     {{"chunk", double(k)}, {"backward_position", double(c.backward_position)}, {"chunks", double(n)}});
    seen[static_cast<std::size_t>(c.backward_position)] = 1;
  }
}

//! Index into C of the diagonal that (0-based stage, chunk) lies on: f2b[k] + d_p - 1 - stage.
[[nodiscard]] inline std::int64_t diagonal_of(const stage_aware_problem& p, int stage, std::int64_t chunk) {
  return p.chunks[static_cast<std::size_t>(chunk)].backward_position + p.stages - 1 - stage;
}

//! One chunks window W_p(t) of Eq. 8.
struct checkpoint_window {
  int stage = 0;                     //!< 0-based stage
  std::int64_t step = 0;             //!< j: backward passes already finished
  std::vector<std::int64_t> chunks;  //!< forward indices of the chunks it holds, ascending
  friend bool operator==(const checkpoint_window&, const checkpoint_window&) = default;
};

//! Every window of every stage (stage-major, then j), as in the file comment. Step j + 1's
//! window is step j's without the chunk of backward position j and with forward w + j when
//! its backward comes later, so a stage costs O(n + the sizes of its windows), not O(n^2).
[[nodiscard]] inline std::vector<checkpoint_window> stage_aware_windows(const stage_aware_problem& p) {
  validate(p);
  const auto n = static_cast<std::int64_t>(p.chunks.size());
  std::vector<std::int64_t> forward_of(static_cast<std::size_t>(n));  // backward position -> forward index
  for (std::int64_t k = 0; k < n; ++k) forward_of[static_cast<std::size_t>(p.chunks[static_cast<std::size_t>(k)].backward_position)] = k;
  std::vector<checkpoint_window> out;
  for (int stage = 0; stage < p.stages; ++stage) {
    const std::int64_t w = std::min(n, p.stages - 1 - stage + p.prefill_chunks);
    std::vector<std::int64_t> held(static_cast<std::size_t>(w));  // window j = 0: the first w forwards
    std::iota(held.begin(), held.end(), std::int64_t{0});
    for (std::int64_t j = 0;; ++j) {
      out.push_back({stage, j, held});
      if (j == n - w) break;
      // held stays ascending: the forward added is larger than every forward held
      const std::int64_t done = forward_of[static_cast<std::size_t>(j)];
      if (const auto at = std::lower_bound(held.begin(), held.end(), done); at != held.end() && *at == done) held.erase(at);
      if (p.chunks[static_cast<std::size_t>(w + j)].backward_position > j) held.push_back(w + j);
    }
  }
  return out;
}

//! The modelled activation bytes of `window` when diagonal i recomputes
//! diagonal_layers[i] layers: sum (I[k] - F[k] ckpt(stage, k)).
[[nodiscard]] inline double window_bytes(const stage_aware_problem& p, std::span<const int> diagonal_layers, const checkpoint_window& window) {
  ZEPPELIN_EXPECTS(diagonal_layers.size() == p.chunks.size() + static_cast<std::size_t>(p.stages) - 1, "one count per diagonal (n + d_p - 1)",
                   {{"counts", double(diagonal_layers.size())}, {"diagonals", double(p.chunks.size() + static_cast<std::size_t>(p.stages) - 1)}});
  double bytes = 0;
  for (const std::int64_t k : window.chunks) {
    const stage_aware_chunk& c = p.chunks[static_cast<std::size_t>(k)];
    bytes += c.kept_bytes - c.freed_bytes_per_layer * diagonal_layers[static_cast<std::size_t>(diagonal_of(p, window.stage, k))];
  }
  return bytes;
}

namespace detail {
// The float margin a window may pass its budget by (file comment).
[[nodiscard]] inline double window_margin(const stage_aware_problem& p, const checkpoint_window& window) {
  double kept = 0;
  for (const std::int64_t k : window.chunks) kept += p.chunks[static_cast<std::size_t>(k)].kept_bytes;
  return 1e-12 * (kept + std::abs(p.budget_bytes[static_cast<std::size_t>(window.stage)]));
}
}  // namespace detail

//! True when every window of `p` fits its stage's budget with these diagonal counts.
[[nodiscard]] inline bool fits(const stage_aware_problem& p, std::span<const int> diagonal_layers) {
  for (const checkpoint_window& window : stage_aware_windows(p))
    if (window_bytes(p, diagonal_layers, window) > p.budget_bytes[static_cast<std::size_t>(window.stage)] + detail::window_margin(p, window))
      return false;
  return true;
}

//! Model and layout numbers of the memory terms (Alg. 2, lines 3-5; Eqs. 5, 9, 10).
struct infinipipe_memory {
  //! M_token: activation bytes one token keeps over all L layers without parallelism or
  //! recomputation (e.g. model.layers x pipeline_memory_model{model, {}}
  //! .activation_bytes_per_token_layer(), cost/pipeline_memory.hpp).
  double token_bytes = 0;
  double element_bytes = 2;  //!< e: bytes per activation element (bf16: 2)
  int hidden = 0;            //!< D: model width
  int layers = 0;            //!< L
  int sp_degree = 1;         //!< d_s: Ulysses SP degree
  int pp_degree = 1;         //!< d_p: pipeline stages
  friend bool operator==(const infinipipe_memory&, const infinipipe_memory&) = default;
};

//! The memory numbers of `model` on d_s x d_p GPUs: M_token = L x the activation bytes one
//! token keeps per layer without parallelism or recomputation (cost/pipeline_memory.hpp).
[[nodiscard]] inline infinipipe_memory infinipipe_memory_of(const model_config& model, int sp_degree, int pp_degree) {
  const pipeline_memory_model per_layer{model, {}, {}};
  return {.token_bytes = model.layers * per_layer.activation_bytes_per_token_layer(),
          .element_bytes = double(model.bytes_per_element),
          .hidden = model.hidden,
          .layers = model.layers,
          .sp_degree = sp_degree,
          .pp_degree = pp_degree};
}

//! G - M_ms(p) per stage: `usable_bytes` of one GPU minus the model states of the stage's
//! GPUs, parameters, gradients and optimizer states sharded by ZeRO-3 over the d_s GPUs of
//! the stage (split_model's layers per stage; cost/pipeline_memory.hpp's byte counts).
[[nodiscard]] inline std::vector<double> stage_budgets(const model_config& model, double usable_bytes, int sp_degree, int pp_degree) {
  const pipeline_memory_model states{model, {.tp = 1, .cp = 1, .pp = pp_degree, .dp = sp_degree}, {.zero_stage = 3}};
  std::vector<double> out;
  for (const stage_slice& slice : split_model(model, pp_degree)) out.push_back(usable_bytes - states.model_state_bytes(slice));
  return out;
}

//! Per chunk (forward order) of one pipeline: I[k] = (M_token/N) S + (1 - I_k)(2 e L D/N) S
//! and F[k] = (M_token/(L d_s) - e D w[k]/d_s) S, with S the chunk's tokens, N = d_s d_p,
//! I_k = 0 only for split chunks (their dK/dV live until their sequence's backward) and
//! w[k] = 3 - 2 I_k (a recomputed layer still keeps its input and, for a split chunk, K
//! and V). Bytes per GPU. backward_position[k] = f2b[k] is copied through. Throws
//! invalid_argument for a slice naming an unknown sequence or an empty slice, sizes that
//! differ, non-positive or non-finite numbers, or F[k] <= 0 (a recomputed layer would keep
//! more than it frees).
[[nodiscard]] inline std::vector<stage_aware_chunk> stage_aware_chunks(std::span<const chunk> chunks, std::span<const token_count> lengths,
                                                                       std::span<const std::int64_t> backward_position,
                                                                       const infinipipe_memory& m) {
  ZEPPELIN_EXPECTS(backward_position.size() == chunks.size(), "one backward position per chunk",
                   {{"backward_positions", double(backward_position.size())}, {"chunks", double(chunks.size())}});
  ZEPPELIN_EXPECTS(std::isfinite(m.token_bytes) && m.token_bytes > 0 && std::isfinite(m.element_bytes) && m.element_bytes > 0 && m.hidden > 0 &&
                       m.layers > 0 && m.sp_degree > 0 && m.pp_degree > 0,
                   "memory numbers must be finite and positive",
                   {{"token_bytes", m.token_bytes}, {"element_bytes", m.element_bytes}, {"hidden", double(m.hidden)}, {"layers", double(m.layers)},
                    {"sp_degree", double(m.sp_degree)}, {"pp_degree", double(m.pp_degree)}});
  const double gpus = double(m.sp_degree) * m.pp_degree;
  const double dkv_per_token = 2 * m.element_bytes * m.layers * m.hidden / gpus;
  std::vector<stage_aware_chunk> out;
  out.reserve(chunks.size());
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    for (const chunk_slice& s : chunks[k].slices)
      ZEPPELIN_EXPECTS(s.sequence >= 0 && static_cast<std::size_t>(s.sequence) < lengths.size() && s.begin >= 0 && s.begin < s.end &&
                           s.end <= lengths[static_cast<std::size_t>(s.sequence)],
                       "a slice must be a non-empty range of a known sequence",
                       {{"chunk", double(k)}, {"sequence", double(s.sequence)}, {"begin", double(s.begin)}, {"end", double(s.end)}});
    const bool split = kind_of(chunks[k], lengths) == chunk_kind::split;
    const double tokens = static_cast<double>(chunks[k].tokens());
    const double kept_per_layer_input = m.element_bytes * m.hidden * (split ? 3.0 : 1.0) / m.sp_degree;
    const double freed = (m.token_bytes / (double(m.layers) * m.sp_degree) - kept_per_layer_input) * tokens;
    ZEPPELIN_EXPECTS(freed > 0, "a recomputed layer must free more than it keeps (M_token / L > e D w[k])",
                     {{"chunk", double(k)}, {"freed_bytes_per_layer", freed}});
    out.push_back({backward_position[k], (m.token_bytes / gpus + (split ? dkv_per_token : 0.0)) * tokens, freed});
  }
  return out;
}

//! Search limits.
struct stage_aware_options {
  std::int64_t max_nodes = 100'000;  //!< branch-and-bound nodes (0.2 - 1 ms each on InfiniPipe-shaped instances)
  friend bool operator==(const stage_aware_options&, const stage_aware_options&) = default;
};

//! An optimal solution of a stage_aware_problem.
struct stage_aware_plan {
  int stages = 0;                                //!< d_p
  std::vector<std::int64_t> backward_position;   //!< f2b, per chunk in forward order
  std::vector<int> diagonal_layers;              //!< C: n + d_p - 1 counts in [0, L / d_p]
  std::int64_t total_layers = 0;                 //!< sum C: recompute time is F^ x this (Eq. 17)
  std::int64_t lower_bound = 0;                  //!< proven lower bound on sum C
  std::int64_t nodes = 0;                        //!< branch-and-bound nodes searched

  //! True when the lower bound meets the plan: no plan recomputes fewer layers.
  [[nodiscard]] bool proven_optimal() const noexcept { return lower_bound == total_layers; }

  //! ckpt(stage, chunk): layers the 0-based stage recomputes for the chunk (forward index).
  [[nodiscard]] int recomputed_layers(int stage, std::int64_t chunk) const {
    ZEPPELIN_EXPECTS(stage >= 0 && stage < stages && chunk >= 0 && static_cast<std::size_t>(chunk) < backward_position.size(),
                     "no such (stage, chunk) in the plan",
                     {{"stage", double(stage)}, {"stages", double(stages)}, {"chunk", double(chunk)}, {"chunks", double(backward_position.size())}});
    return diagonal_layers[static_cast<std::size_t>(backward_position[static_cast<std::size_t>(chunk)] + stages - 1 - stage)];
  }
  friend bool operator==(const stage_aware_plan&, const stage_aware_plan&) = default;
};

namespace detail {
// Eq. 20 as a covering program over the diagonals: one row per window over budget, need =
// its bytes over (less the float margin), a coefficient F[k] per chunk on its diagonal.
// Throws infeasible (naming the stage, window and bytes over) when even full recomputation
// leaves a window over budget.
[[nodiscard]] inline covering_ip covering_program_of(const stage_aware_problem& p) {
  const std::vector<checkpoint_window> windows = stage_aware_windows(p);
  const std::size_t diagonals = p.chunks.size() + static_cast<std::size_t>(p.stages) - 1;
  covering_ip ip;
  ip.variables = static_cast<int>(diagonals);
  ip.upper = p.max_layers;
  const checkpoint_window* worst = nullptr;
  double worst_over = 0;
  for (const checkpoint_window& window : windows) {
    double kept = 0, freeable = 0;
    for (const std::int64_t k : window.chunks) {
      kept += p.chunks[static_cast<std::size_t>(k)].kept_bytes;
      freeable += p.chunks[static_cast<std::size_t>(k)].freed_bytes_per_layer * p.max_layers;
    }
    const double need = kept - p.budget_bytes[static_cast<std::size_t>(window.stage)] - window_margin(p, window);
    if (need <= 0) continue;
    if (need > freeable) {
      const double over = kept - p.budget_bytes[static_cast<std::size_t>(window.stage)] - freeable;
      if (over > worst_over) worst_over = over, worst = &window;
      continue;
    }
    for (const std::int64_t k : window.chunks) {
      ip.column.push_back(static_cast<int>(diagonal_of(p, window.stage, k)));
      ip.coefficient.push_back(p.chunks[static_cast<std::size_t>(k)].freed_bytes_per_layer);
    }
    ip.need.push_back(need);
    ip.row_start.push_back(static_cast<std::int64_t>(ip.column.size()));
  }
  if (worst != nullptr)
    ZEPPELIN_THROW(infeasible, "stage-aware checkpointing: a window does not fit even with every layer recomputed",
                   {{"stage", double(worst->stage)},
                    {"window", double(worst->step)},
                    {"bytes_over", worst_over},
                    {"budget_bytes", p.budget_bytes[static_cast<std::size_t>(worst->stage)]}});
  return ip;
}

// The plan of diagonal counts `x` (value `value`, proven bound `bound`, `nodes` searched).
[[nodiscard]] inline stage_aware_plan plan_of(const stage_aware_problem& p, std::vector<int> x, std::int64_t value, std::int64_t bound,
                                              std::int64_t nodes) {
  stage_aware_plan plan{p.stages, {}, std::move(x), value, bound, nodes};
  plan.backward_position.reserve(p.chunks.size());
  for (const stage_aware_chunk& c : p.chunks) plan.backward_position.push_back(c.backward_position);
  return plan;
}
}  // namespace detail

//! The best plan found within options.max_nodes, with a proven lower bound on sum C
//! (proven_optimal(): no plan recomputes fewer layers). An anytime answer, as a MIP solver
//! with a node or time limit gives: a planner that must answer in bounded time uses it.
[[nodiscard]] inline stage_aware_plan best_stage_aware_checkpointing(const stage_aware_problem& p, const stage_aware_options& options = {}) {
  ZEPPELIN_EXPECTS(options.max_nodes >= 1, "the node limit must be positive", {{"max_nodes", double(options.max_nodes)}});
  detail::covering_result r = detail::solve_covering(detail::covering_program_of(p), options.max_nodes);
  return detail::plan_of(p, std::move(r.x), r.value, r.lower_bound, r.nodes);
}

//! A fast feasible plan without search: every diagonal starts at L / d_p layers, then each,
//! those whose layers free the fewest bytes first (ties: the lower diagonal), drops as far as
//! its windows' slack allows. The result is maximal (no single diagonal can drop further),
//! not minimal; its lower_bound is 0. A planner's estimate where the exact search is too
//! slow (many candidate pipelines; pack/elastic_pipeline.hpp). O(nonzeros + diagonals log).
//! Errors: those of best_stage_aware_checkpointing.
[[nodiscard]] inline stage_aware_plan greedy_stage_aware_checkpointing(const stage_aware_problem& p) {
  validate(p);
  const detail::covering_ip ip = detail::covering_program_of(p);
  const auto n = static_cast<std::size_t>(ip.variables);
  std::vector<std::vector<std::pair<std::size_t, double>>> rows_of(n);  // per diagonal: (row, coefficient)
  std::vector<double> slack(ip.need.size()), weight(n, 0);
  for (std::size_t r = 0; r < ip.need.size(); ++r) {
    double most = 0;
    for (std::int64_t e = ip.row_start[r]; e < ip.row_start[r + 1]; ++e) {
      const auto i = static_cast<std::size_t>(ip.column[static_cast<std::size_t>(e)]);
      const double a = ip.coefficient[static_cast<std::size_t>(e)];
      most += a * ip.upper;
      if (!rows_of[i].empty() && rows_of[i].back().first == r) rows_of[i].back().second += a;
      else rows_of[i].emplace_back(r, a);
      weight[i] += a;
    }
    slack[r] = most - ip.need[r];
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return weight[x] < weight[y]; });
  std::vector<int> x(n, ip.upper);
  for (const std::size_t i : order) {
    double drop = ip.upper;
    for (const auto& [r, a] : rows_of[i]) drop = std::min(drop, std::floor(slack[r] / a));
    const int d = static_cast<int>(std::clamp(drop, 0.0, static_cast<double>(x[i])));
    if (d == 0) continue;
    x[i] -= d;
    for (const auto& [r, a] : rows_of[i]) slack[r] -= a * d;
  }
  const std::int64_t value = std::accumulate(x.begin(), x.end(), std::int64_t{0});
  return detail::plan_of(p, std::move(x), value, 0, 0);
}

//! The fewest recomputed layers sum C that fit every window (Eq. 20), proven optimal; see
//! the file comment. resource_limit, naming the best plan found and the bound, when the
//! search needs more than options.max_nodes.
[[nodiscard]] inline stage_aware_plan solve_stage_aware_checkpointing(const stage_aware_problem& p, const stage_aware_options& options = {}) {
  stage_aware_plan plan = best_stage_aware_checkpointing(p, options);
  if (!plan.proven_optimal())
    ZEPPELIN_THROW(resource_limit, "stage-aware checkpointing: branch and bound hit its node limit before proving optimality",
                   {{"max_nodes", double(options.max_nodes)}, {"incumbent", double(plan.total_layers)}, {"lower_bound", double(plan.lower_bound)}});
  return plan;
}

//! A solved plan as a checkpoint_policy: site.stage is the 0-based stage, site.micro_batch
//! the chunk's forward index; a stage with several model chunks spends ckpt(stage, chunk)
//! on its model chunks in order (as selective_recompute), capped at site.layers.
struct stage_aware_recompute {
  stage_aware_plan plan;

  [[nodiscard]] int recomputed_layers(const checkpoint_site& site) const {
    const long long left = static_cast<long long>(plan.recomputed_layers(site.stage, site.micro_batch)) - site.earlier_layers;
    return static_cast<int>(std::clamp<long long>(left, 0, site.layers));
  }
  friend bool operator==(const stage_aware_recompute&, const stage_aware_recompute&) = default;
};
static_assert(checkpoint_policy<stage_aware_recompute>);

ZEPPELIN_NAMESPACE_END
