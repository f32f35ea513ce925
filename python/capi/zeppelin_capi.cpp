// python/capi/zeppelin_capi.cpp
// The host entry points of zeppelin_capi.h over the header-only library: each converts its
// arguments, calls the library, and reports errors through guarded() (capi_support.hpp).
#include "capi_handles.hpp"
#include "capi_support.hpp"
#include "zeppelin_capi.h"

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/fingerprint.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/plan_json.hpp>
#include <zeppelin/core/validate.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/exec/host_attention.hpp>
#include <zeppelin/exec/lse_merge.hpp>
#include <zeppelin/pack/any_packer.hpp>
#include <zeppelin/pack/stream.hpp>
#include <zeppelin/partition/capacity.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/remap/exact.hpp>
#include <zeppelin/remap/layout.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

struct zeppelin_relayout {
  zeppelin::relayout_plan relayout;
};

struct zeppelin_packing {
  zeppelin::packing_run run;
};

namespace {

using zeppelin::capi::expect;
using zeppelin::capi::fill_table;

const zeppelin::placement& placement_of(const zeppelin_plan* p, std::int32_t rank) {
  expect(p != nullptr, "zeppelin: the plan must not be NULL");
  expect(rank >= 0 && rank < p->plan.num_ranks(), "zeppelin: rank " + std::to_string(rank) + " is outside the plan's " +
                                                      std::to_string(p->plan.num_ranks()) + " ranks");
  return p->plan.placements[static_cast<std::size_t>(rank)];
}

// The dims of a block call after checking them, its position ranges and its LSE stride.
zeppelin::attention_dims checked_block(std::int32_t heads, std::int32_t kv_heads, std::int32_t head_dim, double scale,
                                       std::int64_t q_begin, std::int64_t q_end, std::int64_t k_begin, std::int64_t k_end,
                                       std::int64_t lse_stride) {
  const zeppelin::attention_dims d{heads, kv_heads, head_dim, scale};
  zeppelin::validate(d);
  expect(0 <= q_begin && q_begin <= q_end && 0 <= k_begin && k_begin <= k_end,
         "zeppelin attention: positions must satisfy 0 <= begin <= end (query [" + std::to_string(q_begin) + ", " +
             std::to_string(q_end) + "), key [" + std::to_string(k_begin) + ", " + std::to_string(k_end) + "))");
  expect(lse_stride >= q_end - q_begin, "zeppelin attention: lse_stride must be at least the query rows");
  return d;
}

// Calls f(T{}) for the element type dtype names (0 float32, 1 float64).
template <class F>
void with_dtype(std::int32_t dtype, F&& f) {
  if (dtype == 0) return f(float{});
  if (dtype == 1) return f(double{});
  ZEPPELIN_THROW(invalid_argument, "zeppelin attention: dtype must be 0 (float32) or 1 (float64)",
                 {{"dtype", double(dtype)}});
}

}  // namespace

extern "C" {

int32_t zeppelin_capi_version(void) { return ZEPPELIN_CAPI_VERSION; }

const char* zeppelin_last_error(void) { return zeppelin::capi::last_error.c_str(); }

int zeppelin_plan_create(const int64_t* lengths, int64_t sequences, int32_t nodes, int32_t gpus_per_node,
                         const char* partitioner, int64_t capacity, int32_t cp_size, zeppelin_plan** out) {
  return zeppelin::capi::guarded([&] {
    expect(out != nullptr, "zeppelin_plan_create: out must not be NULL");
    expect(partitioner != nullptr, "zeppelin_plan_create: the partitioner name must not be NULL");
    expect(capacity >= 0, "zeppelin_plan_create: capacity must be >= 0 (0: balanced), got " + std::to_string(capacity));
    expect(cp_size >= 0, "zeppelin_plan_create: cp_size must be >= 0 (0: all ranks), got " + std::to_string(cp_size));
    const zeppelin::batch b(zeppelin::capi::lengths_of(lengths, sequences));
    const zeppelin::topology t(zeppelin::topology_config{.nodes = nodes, .gpus_per_node = gpus_per_node});
    const zeppelin::partitioner_settings settings{
        .capacity = capacity > 0 ? capacity : zeppelin::balanced_capacity(b, t), .cp_size = cp_size, .metric = {}};
    *out = new zeppelin_plan{zeppelin::partition(zeppelin::partitioner_by_name(partitioner, settings), b, t), std::vector<zeppelin::token_count>(b.lengths().begin(), b.lengths().end()), "",
                             std::numeric_limits<double>::quiet_NaN()};
  });
}

void zeppelin_plan_destroy(zeppelin_plan* plan) { delete plan; }

int32_t zeppelin_plan_ranks(const zeppelin_plan* plan) { return plan ? plan->plan.num_ranks() : 0; }
int32_t zeppelin_plan_micro_batches(const zeppelin_plan* plan) { return plan ? plan->plan.micro_batches() : 0; }
int32_t zeppelin_plan_groups(const zeppelin_plan* plan) { return plan ? static_cast<int32_t>(plan->plan.groups.size()) : 0; }
int64_t zeppelin_plan_capacity(const zeppelin_plan* plan) { return plan ? plan->plan.capacity : 0; }
uint64_t zeppelin_plan_fingerprint(const zeppelin_plan* plan) { return plan ? zeppelin::fingerprint(plan->plan) : 0; }
const char* zeppelin_plan_choice(const zeppelin_plan* plan) { return plan ? plan->choice.c_str() : ""; }
double zeppelin_plan_predicted_step(const zeppelin_plan* plan) {
  return plan ? plan->predicted_step_s : std::numeric_limits<double>::quiet_NaN();
}

int zeppelin_plan_lengths(const zeppelin_plan* plan, int64_t* out, int64_t room, int64_t* count) {
  return zeppelin::capi::guarded([&] {
    expect(plan != nullptr, "zeppelin: the plan must not be NULL");
    fill_table<1>(static_cast<std::int64_t>(plan->lengths.size()), out, room, count,
                  [&](std::int64_t i, std::int64_t* row) { row[0] = plan->lengths[static_cast<std::size_t>(i)]; });
  });
}

int zeppelin_plan_json(const zeppelin_plan* plan, char* out, int64_t room, int64_t* length) {
  return zeppelin::capi::guarded([&] {
    expect(plan != nullptr && length != nullptr, "zeppelin_plan_json: the plan and length must not be NULL");
    const zeppelin::batch b(plan->lengths);
    std::ostringstream text;
    zeppelin::write_plan_json(text, plan->plan, &b);
    const std::string json = text.str();
    *length = static_cast<std::int64_t>(json.size());
    if (out != nullptr && room >= *length) std::copy(json.begin(), json.end(), out);
  });
}

int zeppelin_plan_read_json(const char* text, int64_t length, zeppelin_plan** out) {
  return zeppelin::capi::guarded([&] {
    expect(text != nullptr && length >= 0 && out != nullptr, "zeppelin_plan_read_json: text and out must not be NULL");
    zeppelin::plan_document doc = zeppelin::read_plan_json(std::string_view(text, static_cast<std::size_t>(length)));
    expect(!doc.lengths.empty(), "zeppelin_plan_read_json: the plan JSON has no \"lengths\": the plan cannot be checked");
    const zeppelin::batch b(doc.lengths);
    const zeppelin::topology t(zeppelin::topology_config{.nodes = doc.layout.nodes, .gpus_per_node = doc.layout.gpus_per_node});
    zeppelin::validate(doc.layout, b, t);
    *out = new zeppelin_plan{std::move(doc.layout), std::move(doc.lengths), "", std::numeric_limits<double>::quiet_NaN()};
  });
}

int zeppelin_plan_shards(const zeppelin_plan* plan, int32_t rank, int64_t* out, int64_t room, int64_t* count) {
  return zeppelin::capi::guarded([&] {
    const auto& shards = placement_of(plan, rank).shards;
    fill_table<5>(static_cast<std::int64_t>(shards.size()), out, room, count, [&](std::int64_t i, std::int64_t* row) {
      const zeppelin::shard& s = shards[static_cast<std::size_t>(i)];
      row[0] = s.seq, row[1] = s.range.begin, row[2] = s.range.end;
      row[3] = s.group == zeppelin::no_group ? -1 : s.group, row[4] = s.micro_batch;
    });
  });
}

int zeppelin_plan_group(const zeppelin_plan* plan, int32_t group, int64_t* members, int64_t room, int64_t* count,
                        int32_t* collective, int32_t* zone) {
  return zeppelin::capi::guarded([&] {
    expect(plan != nullptr, "zeppelin: the plan must not be NULL");
    expect(group >= 0 && static_cast<std::size_t>(group) < plan->plan.groups.size(),
           "zeppelin: group " + std::to_string(group) + " is outside the plan's " + std::to_string(plan->plan.groups.size()) +
               " groups");
    const zeppelin::ring_group& g = plan->plan.groups[static_cast<std::size_t>(group)];
    fill_table<1>(static_cast<std::int64_t>(g.ranks.size()), members, room, count,
                  [&](std::int64_t i, std::int64_t* row) { row[0] = g.ranks[static_cast<std::size_t>(i)]; });
    if (collective) *collective = static_cast<int32_t>(g.collective);
    if (zone) *zone = static_cast<int32_t>(g.zone);
  });
}

int zeppelin_relayout_create(const zeppelin_plan* plan, int32_t micro_batch, double bytes_per_token, zeppelin_relayout** out) {
  return zeppelin::capi::guarded([&] {
    expect(plan != nullptr && out != nullptr, "zeppelin_relayout_create: the plan and out must not be NULL");
    expect(micro_batch >= 0 && micro_batch < plan->plan.micro_batches(),
           "zeppelin_relayout_create: micro-batch " + std::to_string(micro_batch) + " is outside the plan's " +
               std::to_string(plan->plan.micro_batches()));
    const zeppelin::topology t(zeppelin::topology_config{.nodes = plan->plan.nodes, .gpus_per_node = plan->plan.gpus_per_node});
    *out = new zeppelin_relayout{zeppelin::plan_remap(plan->plan, t, bytes_per_token, zeppelin::exact_remap{}, micro_batch)};
  });
}

void zeppelin_relayout_destroy(zeppelin_relayout* relayout) { delete relayout; }

int zeppelin_relayout_segments(const zeppelin_relayout* relayout, int32_t rank, int32_t direction, int64_t* out,
                               int64_t room, int64_t* count) {
  return zeppelin::capi::guarded([&] {
    expect(relayout != nullptr, "zeppelin: the relayout must not be NULL");
    expect(rank >= 0 && static_cast<std::size_t>(rank) < relayout->relayout.ranks.size(),
           "zeppelin: rank " + std::to_string(rank) + " is outside the relayout's " +
               std::to_string(relayout->relayout.ranks.size()) + " ranks");
    expect(direction == 0 || direction == 1, "zeppelin: direction must be 0 (sends) or 1 (receives), got " +
                                                 std::to_string(direction));
    const auto& r = relayout->relayout.ranks[static_cast<std::size_t>(rank)];
    const auto& segs = direction == 0 ? r.sends : r.receives;
    fill_table<5>(static_cast<std::int64_t>(segs.size()), out, room, count, [&](std::int64_t i, std::int64_t* row) {
      const zeppelin::relayout_segment& s = segs[static_cast<std::size_t>(i)];
      row[0] = s.seq, row[1] = s.range.begin, row[2] = s.range.end;
      row[3] = direction == 0 ? s.to : s.from;
      row[4] = direction == 0 ? s.from_offset : s.to_offset;
    });
  });
}

int zeppelin_relayout_target(const zeppelin_relayout* relayout, int32_t rank, int64_t* out, int64_t room, int64_t* count) {
  return zeppelin::capi::guarded([&] {
    expect(relayout != nullptr, "zeppelin: the relayout must not be NULL");
    expect(rank >= 0 && static_cast<std::size_t>(rank) < relayout->relayout.target.size(),
           "zeppelin: rank " + std::to_string(rank) + " is outside the relayout's " +
               std::to_string(relayout->relayout.target.size()) + " ranks");
    const auto& shards = relayout->relayout.target[static_cast<std::size_t>(rank)].shards;
    fill_table<3>(static_cast<std::int64_t>(shards.size()), out, room, count, [&](std::int64_t i, std::int64_t* row) {
      const zeppelin::shard& s = shards[static_cast<std::size_t>(i)];
      row[0] = s.seq, row[1] = s.range.begin, row[2] = s.range.end;
    });
  });
}

int zeppelin_packing_create(const int64_t* lengths, int64_t documents, const char* method, int32_t micro_batches,
                            int64_t max_tokens, zeppelin_packing** out) {
  return zeppelin::capi::guarded([&] {
    expect(out != nullptr && method != nullptr, "zeppelin_packing_create: out and method must not be NULL");
    expect(documents >= 0 && (lengths != nullptr || documents == 0),
           "zeppelin_packing_create: the lengths must not be NULL (documents " + std::to_string(documents) + ")");
    const std::vector<zeppelin::token_count> docs(lengths, lengths + documents);
    const zeppelin::packing_limits limits{.micro_batches = micro_batches, .max_tokens = max_tokens};
    *out = new zeppelin_packing{zeppelin::pack_stream(zeppelin::make_packer(zeppelin::packer_kind_by_name(method)), docs, limits)};
  });
}

void zeppelin_packing_destroy(zeppelin_packing* packing) { delete packing; }

int64_t zeppelin_packing_iterations(const zeppelin_packing* packing) {
  return packing ? static_cast<int64_t>(packing->run.iterations.size()) : 0;
}

int zeppelin_packing_table(const zeppelin_packing* packing, int64_t* out, int64_t room, int64_t* count) {
  return zeppelin::capi::guarded([&] {
    expect(packing != nullptr, "zeppelin: the packing must not be NULL");
    std::vector<std::int64_t> rows;
    for (std::size_t i = 0; i < packing->run.iterations.size(); ++i) {
      const auto& mbs = packing->run.iterations[i].micro_batches;
      for (std::size_t m = 0; m < mbs.size(); ++m)
        for (const std::int64_t d : mbs[m].documents) rows.insert(rows.end(), {std::int64_t(i), std::int64_t(m), d});
    }
    zeppelin::capi::fill_rows<3>(rows, out, room, count);
  });
}

int zeppelin_attention_forward(int32_t dtype, int32_t heads, int32_t kv_heads, int32_t head_dim, double scale,
                               int64_t q_begin, int64_t q_end, int64_t k_begin, int64_t k_end, const void* q,
                               const void* k, const void* v, void* o, void* lse, int64_t lse_stride) {
  return zeppelin::capi::guarded([&] {
    const zeppelin::attention_dims d = checked_block(heads, kv_heads, head_dim, scale, q_begin, q_end, k_begin, k_end, lse_stride);
    if (q_end > q_begin || k_end > k_begin)
      zeppelin::capi::expect_buffers("zeppelin_attention_forward", {{"q", q}, {"k", k}, {"v", v}, {"o", o}, {"lse", lse}});
    with_dtype(dtype, [&](auto zero) {
      using T = decltype(zero);
      zeppelin::host_attention{}.forward(zeppelin::attention_forward_args<T>{
          d, zeppelin::block_mask::causal, {q_begin, q_end}, {k_begin, k_end}, static_cast<const T*>(q),
          static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(o), static_cast<T*>(lse), lse_stride});
    });
  });
}

int zeppelin_attention_backward(int32_t dtype, int32_t heads, int32_t kv_heads, int32_t head_dim, double scale,
                                int64_t q_begin, int64_t q_end, int64_t k_begin, int64_t k_end, const void* q,
                                const void* k, const void* v, const void* o, const void* d_o, const void* lse,
                                int64_t lse_stride, void* dq, void* dk, void* dv) {
  return zeppelin::capi::guarded([&] {
    const zeppelin::attention_dims d = checked_block(heads, kv_heads, head_dim, scale, q_begin, q_end, k_begin, k_end, lse_stride);
    if (q_end > q_begin || k_end > k_begin)
      zeppelin::capi::expect_buffers("zeppelin_attention_backward", {{"q", q}, {"k", k}, {"v", v}, {"o", o}, {"d_o", d_o}, {"lse", lse},
                                                                     {"dq", dq}, {"dk", dk}, {"dv", dv}});
    with_dtype(dtype, [&](auto zero) {
      using T = decltype(zero);
      zeppelin::host_attention{}.backward(zeppelin::attention_backward_args<T>{
          d, zeppelin::block_mask::causal, {q_begin, q_end}, {k_begin, k_end}, static_cast<const T*>(q),
          static_cast<const T*>(k), static_cast<const T*>(v), static_cast<const T*>(o), static_cast<const T*>(d_o),
          static_cast<const T*>(lse), lse_stride, static_cast<T*>(dq), static_cast<T*>(dk), static_cast<T*>(dv)});
    });
  });
}

int zeppelin_lse_merge(int32_t dtype, int64_t rows, int32_t heads, int32_t head_dim, void* o_acc, void* lse_acc,
                       int64_t acc_lse_stride, const void* o_blk, const void* lse_blk, int64_t blk_lse_stride) {
  return zeppelin::capi::guarded([&] {
    expect(rows >= 0 && heads >= 1 && head_dim >= 1, "zeppelin_lse_merge: rows >= 0, heads >= 1 and head_dim >= 1 expected");
    expect(acc_lse_stride >= rows && blk_lse_stride >= rows, "zeppelin_lse_merge: LSE strides must be at least the rows");
    if (rows > 0)
      zeppelin::capi::expect_buffers("zeppelin_lse_merge", {{"o_acc", o_acc}, {"lse_acc", lse_acc}, {"o_blk", o_blk}, {"lse_blk", lse_blk}});
    with_dtype(dtype, [&](auto zero) {
      using T = decltype(zero);
      zeppelin::merge_block(static_cast<T*>(o_acc), static_cast<T*>(lse_acc), acc_lse_stride, static_cast<const T*>(o_blk),
                            static_cast<const T*>(lse_blk), blk_lse_stride, rows, heads, head_dim);
    });
  });
}

}  // extern "C"
