/* zeppelin_capi.h
 * The C ABI of zeppelin's planner, relayout and host attention kernels: what the Python
 * binding (python/zeppelin_torch, through ctypes) and any other foreign-language trainer call.
 * Plain C: opaque handles, int64 tables, pointers to caller-owned memory; no C++ type crosses it.
 *
 * Errors: every function returning int returns 0 on success and nonzero on failure, and then
 * zeppelin_last_error() (per thread) holds the library's message, naming the value and what
 * was expected. A failed call writes nothing to its outputs and leaks nothing.
 *
 * Tables: functions that fill an int64 table take (out, room, count): *count receives the
 * number of rows; the rows are written only when out is not NULL and room >= *count, so a
 * caller asks for the count first (out = NULL) and then fills.
 */
#ifndef ZEPPELIN_CAPI_H
#define ZEPPELIN_CAPI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZEPPELIN_CAPI_VERSION 1

#if defined(__GNUC__) || defined(__clang__)
#define ZEPPELIN_CAPI __attribute__((visibility("default")))
#else
#define ZEPPELIN_CAPI
#endif

/* The ABI version this library was built with (ZEPPELIN_CAPI_VERSION). */
ZEPPELIN_CAPI int32_t zeppelin_capi_version(void);
/* The message of this thread's last failed call ("" when none failed). */
ZEPPELIN_CAPI const char* zeppelin_last_error(void);

typedef struct zeppelin_plan zeppelin_plan;
typedef struct zeppelin_relayout zeppelin_relayout;

/* Plans a batch of `sequences` lengths on `nodes` x `gpus_per_node` GPUs with the partitioner
 * called `partitioner` (hierarchical, even_split, allgather, hybrid_dp, per_document,
 * ulysses), `capacity` tokens per GPU per micro-batch (0: the batch's mean tokens per GPU
 * rounded up, plus 1/8) and `cp_size` ranks per CP group (allgather, per_document, ulysses;
 * 0: all). */
ZEPPELIN_CAPI int zeppelin_plan_create(const int64_t* lengths, int64_t sequences, int32_t nodes, int32_t gpus_per_node,
                         const char* partitioner, int64_t capacity, int32_t cp_size, zeppelin_plan** out);
/* Plans with Zeppelin's cost-driven planner (the `zeppelin` method): every candidate layout
 * (Zeppelin's, Ulysses', the baselines') priced by the step simulator for `model` (a preset
 * name: 7b, 13b, llama3-8b, ...) on the cluster preset `cluster` (a, b, c, ...) with `nodes`
 * x `gpus_per_node` GPUs (0: the preset's), the fastest kept; capacity as above. */
ZEPPELIN_CAPI int zeppelin_plan_by_cost(const int64_t* lengths, int64_t sequences, const char* cluster, int32_t nodes,
                                        int32_t gpus_per_node, const char* model, int64_t capacity, zeppelin_plan** out);
ZEPPELIN_CAPI void zeppelin_plan_destroy(zeppelin_plan* plan);
/* The cost-driven planner's chosen candidate ("" for a partitioner's plan; owned by the plan). */
ZEPPELIN_CAPI const char* zeppelin_plan_choice(const zeppelin_plan* plan);
/* Its simulated step in seconds (NaN for a partitioner's plan). */
ZEPPELIN_CAPI double zeppelin_plan_predicted_step(const zeppelin_plan* plan);
ZEPPELIN_CAPI int32_t zeppelin_plan_ranks(const zeppelin_plan* plan);
ZEPPELIN_CAPI int32_t zeppelin_plan_micro_batches(const zeppelin_plan* plan);
ZEPPELIN_CAPI int32_t zeppelin_plan_groups(const zeppelin_plan* plan);
ZEPPELIN_CAPI int64_t zeppelin_plan_capacity(const zeppelin_plan* plan);
/* The plan's fingerprint: equal on every rank that planned the same batch the same way. */
ZEPPELIN_CAPI uint64_t zeppelin_plan_fingerprint(const zeppelin_plan* plan);
/* The batch's lengths (rows of 1). */
ZEPPELIN_CAPI int zeppelin_plan_lengths(const zeppelin_plan* plan, int64_t* out, int64_t room, int64_t* count);
/* The plan as JSON (format "zeppelin.plan", with its lengths and fingerprint; the format of
 * `zeppelin plan --json`): *length receives its bytes (no NUL), written when out is not NULL
 * and room >= *length. */
ZEPPELIN_CAPI int zeppelin_plan_json(const zeppelin_plan* plan, char* out, int64_t room, int64_t* length);
/* Reads such a JSON back: the fingerprint and the plan against its lengths are checked. */
ZEPPELIN_CAPI int zeppelin_plan_read_json(const char* text, int64_t length, zeppelin_plan** out);
/* Rank `rank`'s shards, in its storage order: rows of 5 (sequence, begin, end, group or -1,
 * micro-batch). */
ZEPPELIN_CAPI int zeppelin_plan_shards(const zeppelin_plan* plan, int32_t rank, int64_t* out, int64_t room, int64_t* count);
/* Group `group`'s members in ring order (rows of 1), and its collective (0 ring, 1 all-gather,
 * 2 all-to-all) and zone (0 local, 1 intra-node, 2 inter-node). */
ZEPPELIN_CAPI int zeppelin_plan_group(const zeppelin_plan* plan, int32_t group, int64_t* members, int64_t room, int64_t* count,
                        int32_t* collective, int32_t* zone);

/* The relayout of micro-batch `micro_batch` from the plan's attention layout to the
 * token-balanced layout (Zeppelin's remap), solved exactly for a cluster of the plan's shape
 * with the library's default H100 topology, `bytes_per_token` per token moved. */
ZEPPELIN_CAPI int zeppelin_relayout_create(const zeppelin_plan* plan, int32_t micro_batch, double bytes_per_token, zeppelin_relayout** out);
ZEPPELIN_CAPI void zeppelin_relayout_destroy(zeppelin_relayout* relayout);
/* Rank `rank`'s segments: direction 0 what it sends, 1 what it receives; rows of 5
 * (sequence, begin, end, peer, offset in this rank's buffer), in buffer order. */
ZEPPELIN_CAPI int zeppelin_relayout_segments(const zeppelin_relayout* relayout, int32_t rank, int32_t direction, int64_t* out,
                               int64_t room, int64_t* count);
/* Rank `rank`'s shards in the token-balanced layout, in buffer order: rows of 3 (sequence,
 * begin, end). */
ZEPPELIN_CAPI int zeppelin_relayout_target(const zeppelin_relayout* relayout, int32_t rank, int64_t* out, int64_t room, int64_t* count);

/* Packs a stream of documents into training iterations of `micro_batches` micro-batches of at
 * most `max_tokens` tokens each, with the packer `method` (original, fixed_greedy, fixed_exact,
 * wlb: WLB-LLM's variable-length packing with outlier queues), N x max_tokens tokens arriving
 * per iteration, flushed at the end of the stream (every document is placed). */
typedef struct zeppelin_packing zeppelin_packing;
ZEPPELIN_CAPI int zeppelin_packing_create(const int64_t* lengths, int64_t documents, const char* method, int32_t micro_batches,
                                          int64_t max_tokens, zeppelin_packing** out);
ZEPPELIN_CAPI void zeppelin_packing_destroy(zeppelin_packing* packing);
ZEPPELIN_CAPI int64_t zeppelin_packing_iterations(const zeppelin_packing* packing);
/* Rows of 3 (iteration, micro-batch, document) in training order, each micro-batch's documents
 * in packing order. */
ZEPPELIN_CAPI int zeppelin_packing_table(const zeppelin_packing* packing, int64_t* out, int64_t room, int64_t* count);

/* Hydraulis' heterogeneous strategy for one iteration (the library's plan_strategy): the
 * schemes <TP, PP, CP> `model` allows on `gpus` GPUs (`gpus_per_node` per node, A800 tables
 * with `memory_bytes` per GPU of which `margin_bytes` are kept free), the strategy proposal
 * over `lengths`, greedy dispatch (`trials`, `seed`; trials capped so that
 * trials x sequences <= 2^20, at least one) and packing. */
typedef struct zeppelin_strategy zeppelin_strategy;
ZEPPELIN_CAPI int zeppelin_strategy_create(const int64_t* lengths, int64_t sequences, int64_t gpus, int32_t gpus_per_node,
                                           const char* model, double memory_bytes, double margin_bytes, int32_t trials,
                                           uint64_t seed, zeppelin_strategy** out);
ZEPPELIN_CAPI void zeppelin_strategy_destroy(zeppelin_strategy* strategy);
/* The predicted iteration seconds (the slowest pipeline's). */
ZEPPELIN_CAPI double zeppelin_strategy_seconds(const zeppelin_strategy* strategy);
/* The pipelines: rows of 5 (tp, pp, cp, MaxLen, micro-batch count). */
ZEPPELIN_CAPI int zeppelin_strategy_pipelines(const zeppelin_strategy* strategy, int64_t* out, int64_t room, int64_t* count);
/* Their micro-batches: rows of 3 (pipeline, micro-batch, sequence). */
ZEPPELIN_CAPI int zeppelin_strategy_micro_batches(const zeppelin_strategy* strategy, int64_t* out, int64_t room, int64_t* count);

/* The step planner (the library's plan_step): every default candidate composition (each
 * paper's, Megatron-LM-, TransformerEngine- and Ulysses-like baselines, compositions across papers)
 * planned for `lengths` on `nodes` x `gpus_per_node` GPUs of the cluster preset `cluster`
 * (a, b, c, ...) training `model` (a preset name), priced on the step simulator on
 * `threads` threads, the fastest kept. `context` is the loader's window (0: the longest
 * document); `margin_bytes` of each GPU's memory are kept free. */
typedef struct zeppelin_step_decision zeppelin_step_decision;
ZEPPELIN_CAPI int zeppelin_plan_step(const int64_t* lengths, int64_t documents, const char* cluster, int32_t nodes, int32_t gpus_per_node,
                                     const char* model, int64_t context, double margin_bytes, int32_t threads, zeppelin_step_decision** out);
ZEPPELIN_CAPI void zeppelin_step_decision_destroy(zeppelin_step_decision* decision);
/* The chosen composition's predicted iteration seconds. */
ZEPPELIN_CAPI double zeppelin_step_decision_seconds(const zeppelin_step_decision* decision);
/* The decision as JSON ("zeppelin.step", as `zeppelin step --json` prints it): *length
 * receives its bytes; written when out is not NULL and room >= *length. */
ZEPPELIN_CAPI int zeppelin_step_decision_json(const zeppelin_step_decision* decision, char* out, int64_t room, int64_t* length);

/* InfiniPipe's elastic pipeline for one global batch (the library's plan_elastic_pipeline):
 * Ulysses degree `sp` inside a node, `pp` stages, `model` (a preset name: gpt-7b, gpt-13b,
 * gpt-30b, ...), `usable_bytes` of memory per GPU, up to `max_slices` slices of the longest
 * sequence; the paper's A800 cluster. */
typedef struct zeppelin_chunking zeppelin_chunking;
ZEPPELIN_CAPI int zeppelin_chunking_create(const int64_t* lengths, int64_t sequences, int32_t sp, int32_t pp, const char* model,
                                           double usable_bytes, int32_t max_slices, zeppelin_chunking** out);
ZEPPELIN_CAPI void zeppelin_chunking_destroy(zeppelin_chunking* chunking);
ZEPPELIN_CAPI double zeppelin_chunking_seconds(const zeppelin_chunking* chunking);
/* The mesh: slice lengths of the longest sequence (rows of 1). */
ZEPPELIN_CAPI int zeppelin_chunking_mesh(const zeppelin_chunking* chunking, int64_t* out, int64_t room, int64_t* count);
/* The chunks' slices: rows of 5 (chunk, sequence, begin, end, the chunk's context). */
ZEPPELIN_CAPI int zeppelin_chunking_slices(const zeppelin_chunking* chunking, int64_t* out, int64_t room, int64_t* count);
/* The forward order: rows of 2 (pipeline, chunk), pipelines one after the other. */
ZEPPELIN_CAPI int zeppelin_chunking_order(const zeppelin_chunking* chunking, int64_t* out, int64_t room, int64_t* count);
/* The checkpointing: rows of 4 (pipeline, stage, position in the pipeline's forward order,
 * layers recomputed). */
ZEPPELIN_CAPI int zeppelin_chunking_checkpoint(const zeppelin_chunking* chunking, int64_t* out, int64_t room, int64_t* count);

/* Host attention of one block: query positions [q_begin, q_end) and key positions [k_begin,
 * k_end) of ONE sequence, causal by position, GQA (heads % kv_heads == 0), scale 0 meaning
 * 1/sqrt(head_dim). dtype 0 = float32, 1 = float64. Layouts: q, o, d_o, dq [rows][heads][dim];
 * k, v, dk, dv [rows][kv_heads][dim]; lse [heads][lse_stride].
 * Forward overwrites o and lse with the block's normalised output and log-sum-exp (-inf and 0
 * for a row that sees no key). Backward takes the GLOBAL o, d_o and lse of the query rows and
 * ADDS the block's gradients into dq, dk, dv. */
ZEPPELIN_CAPI int zeppelin_attention_forward(int32_t dtype, int32_t heads, int32_t kv_heads, int32_t head_dim, double scale,
                               int64_t q_begin, int64_t q_end, int64_t k_begin, int64_t k_end, const void* q,
                               const void* k, const void* v, void* o, void* lse, int64_t lse_stride);
ZEPPELIN_CAPI int zeppelin_attention_backward(int32_t dtype, int32_t heads, int32_t kv_heads, int32_t head_dim, double scale,
                                int64_t q_begin, int64_t q_end, int64_t k_begin, int64_t k_end, const void* q,
                                const void* k, const void* v, const void* o, const void* d_o, const void* lse,
                                int64_t lse_stride, void* dq, void* dk, void* dv);
/* Merges a block result (o_blk, lse_blk) of `rows` query rows into an accumulator (o_acc,
 * lse_acc) by log-sum-exp; -inf rows contribute nothing. */
ZEPPELIN_CAPI int zeppelin_lse_merge(int32_t dtype, int64_t rows, int32_t heads, int32_t head_dim, void* o_acc, void* lse_acc,
                       int64_t acc_lse_stride, const void* o_blk, const void* lse_blk, int64_t blk_lse_stride);

/* ---- device kernels (a build with CUDA: zeppelin_capi_has_cuda() == 1; otherwise each call
 * fails with a message saying so) ------------------------------------------------------------
 * Pointers are device memory; `stream` is a cudaStream_t (NULL: the legacy default stream).
 * dtype 2 = bfloat16, 3 = float16; head_dim 64 or 128; LSE, delta and the accumulators fp32.
 * A launch computes `blocks` blocks in CSR form: block b is query rows [cu_q[b], cu_q[b+1]) at
 * positions q_offset[b] + i against key rows [cu_k[b], cu_k[b+1]) at positions k_offset[b] + j,
 * causal by position (q_offset / k_offset NULL: 0, plain packed sequences). */
ZEPPELIN_CAPI int32_t zeppelin_capi_has_cuda(void);
/* Writes O (o in dtype and / or o_f32 in fp32; NULL: not written) and LSE [heads][lse_stride]. */
ZEPPELIN_CAPI int zeppelin_cuda_attention_forward(int32_t dtype, int32_t heads, int32_t kv_heads, int32_t head_dim,
                                                  double scale, int32_t blocks, const int32_t* cu_q, const int32_t* cu_k,
                                                  const int64_t* q_offset, const int64_t* k_offset, int32_t max_seqlen_q,
                                                  int64_t total_q, const void* q, const void* k, const void* v, void* o,
                                                  float* o_f32, float* lse, int64_t lse_stride, void* stream);
/* delta[h][row] = sum_d dO . O over `rows` rows of the GLOBAL O and dO (dtype). */
ZEPPELIN_CAPI int zeppelin_cuda_attention_preprocess(int32_t dtype, int64_t rows, int32_t heads, int32_t head_dim,
                                                     const void* o, const void* d_o, float* delta, int64_t delta_stride,
                                                     void* stream);
/* Adds the blocks' gradients into dq_accum [total_q][heads][dim] and dk_accum, dv_accum
 * [key rows][kv_heads][dim] (fp32), from the GLOBAL dO, LSE and delta of the query rows. */
ZEPPELIN_CAPI int zeppelin_cuda_attention_backward(int32_t dtype, int32_t heads, int32_t kv_heads, int32_t head_dim,
                                                   double scale, int32_t blocks, const int32_t* cu_q, const int32_t* cu_k,
                                                   const int64_t* q_offset, const int64_t* k_offset, int32_t max_seqlen_k,
                                                   int64_t total_q, const void* q, const void* k, const void* v,
                                                   const void* d_o, const float* lse, const float* delta, int64_t lse_stride,
                                                   float* dq_accum, float* dk_accum, float* dv_accum, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* ZEPPELIN_CAPI_H */
