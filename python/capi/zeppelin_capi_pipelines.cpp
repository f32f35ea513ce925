// python/capi/zeppelin_capi_pipelines.cpp
// The pipeline planners of zeppelin_capi.h: Hydraulis' strategy (strategy/plan_strategy.hpp)
// and InfiniPipe's elastic pipeline (pack/elastic_pipeline.hpp), each kept behind a handle
// whose tables the caller reads.
#include "capi_support.hpp"
#include "zeppelin_capi.h"

#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/pack/elastic_pipeline.hpp>
#include <zeppelin/strategy/plan_strategy.hpp>

#include <algorithm>
#include <string>
#include <vector>

struct zeppelin_strategy {
  zeppelin::strategy_choice choice;
};

struct zeppelin_chunking {
  zeppelin::elastic_plan plan;
  int stages = 0;
};

namespace {

using zeppelin::capi::expect;
using zeppelin::capi::fill_rows;
using zeppelin::capi::fill_table;
using zeppelin::capi::lengths_of;

}  // namespace

extern "C" {

int zeppelin_strategy_create(const int64_t* lengths, int64_t sequences, int64_t gpus, int32_t gpus_per_node, const char* model,
                             double memory_bytes, double margin_bytes, int32_t trials, uint64_t seed, zeppelin_strategy** out) {
  return zeppelin::capi::guarded([&] {
    expect(out != nullptr && model != nullptr, "zeppelin_strategy_create: out and model must not be NULL");
    expect(trials >= 1, "zeppelin_strategy_create: trials must be >= 1, got " + std::to_string(trials));
    const std::vector<zeppelin::token_count> batch = lengths_of(lengths, sequences);
    zeppelin::gpu_spec gpu = zeppelin::gpus::a800_80g();
    gpu.memory_bytes = memory_bytes;
    *out = new zeppelin_strategy{zeppelin::plan_strategy(zeppelin::model_by_name(model),
                                                         {.gpus = gpus,
                                                          .gpus_per_node = gpus_per_node,
                                                          .gpu = gpu,
                                                          .margin_bytes = margin_bytes,
                                                          .dispatch = {.trials = trials, .seed = seed}},
                                                         batch)};
  });
}

void zeppelin_strategy_destroy(zeppelin_strategy* strategy) { delete strategy; }

double zeppelin_strategy_seconds(const zeppelin_strategy* strategy) { return strategy ? strategy->choice.plan.seconds : 0; }

int zeppelin_strategy_pipelines(const zeppelin_strategy* strategy, int64_t* out, int64_t room, int64_t* count) {
  return zeppelin::capi::guarded([&] {
    expect(strategy != nullptr, "zeppelin: the strategy must not be NULL");
    const auto& pipelines = strategy->choice.plan.pipelines;
    fill_table<5>(static_cast<std::int64_t>(pipelines.size()), out, room, count, [&](std::int64_t i, std::int64_t* row) {
      const zeppelin::pipeline_plan& p = pipelines[static_cast<std::size_t>(i)];
      row[0] = p.profile.scheme.tp, row[1] = p.profile.scheme.pp, row[2] = p.profile.scheme.cp;
      row[3] = p.profile.max_len, row[4] = p.packing.count();
    });
  });
}

int zeppelin_strategy_micro_batches(const zeppelin_strategy* strategy, int64_t* out, int64_t room, int64_t* count) {
  return zeppelin::capi::guarded([&] {
    expect(strategy != nullptr, "zeppelin: the strategy must not be NULL");
    std::vector<std::int64_t> rows;
    const auto& pipelines = strategy->choice.plan.pipelines;
    for (std::size_t p = 0; p < pipelines.size(); ++p)
      for (std::size_t m = 0; m < pipelines[p].packing.micro_batches.size(); ++m)
        for (const std::int64_t s : pipelines[p].packing.micro_batches[m]) rows.insert(rows.end(), {std::int64_t(p), std::int64_t(m), s});
    fill_rows<3>(rows, out, room, count);
  });
}

int zeppelin_chunking_create(const int64_t* lengths, int64_t sequences, int32_t sp, int32_t pp, const char* model,
                             double usable_bytes, int32_t max_slices, zeppelin_chunking** out) {
  return zeppelin::capi::guarded([&] {
    expect(out != nullptr && model != nullptr, "zeppelin_chunking_create: out and model must not be NULL");
    expect(sp >= 1 && pp >= 1, "zeppelin_chunking_create: the SP and PP degrees must be >= 1, got " + std::to_string(sp) + " and " +
                                   std::to_string(pp));
    expect(max_slices >= 1, "zeppelin_chunking_create: max_slices must be >= 1, got " + std::to_string(max_slices));
    const std::vector<zeppelin::token_count> batch = lengths_of(lengths, sequences);
    const zeppelin::topology topo = zeppelin::clusters::infinipipe_a800_ib((sp * pp + 7) / 8);
    auto options = zeppelin::elastic_pipeline_options::for_model(zeppelin::model_by_name(model), topo, sp, pp, usable_bytes);
    options.processor.max_slices = max_slices;
    *out = new zeppelin_chunking{zeppelin::plan_elastic_pipeline(batch, options), pp};
  });
}

void zeppelin_chunking_destroy(zeppelin_chunking* chunking) { delete chunking; }

double zeppelin_chunking_seconds(const zeppelin_chunking* chunking) { return chunking ? chunking->plan.seconds : 0; }

int zeppelin_chunking_mesh(const zeppelin_chunking* chunking, int64_t* out, int64_t room, int64_t* count) {
  return zeppelin::capi::guarded([&] {
    expect(chunking != nullptr, "zeppelin: the chunking must not be NULL");
    fill_rows<1>(chunking->plan.chunks.mesh, out, room, count);
  });
}

int zeppelin_chunking_slices(const zeppelin_chunking* chunking, int64_t* out, int64_t room, int64_t* count) {
  return zeppelin::capi::guarded([&] {
    expect(chunking != nullptr, "zeppelin: the chunking must not be NULL");
    std::vector<std::int64_t> rows;
    const auto& chunks = chunking->plan.chunks.chunks;
    for (std::size_t c = 0; c < chunks.size(); ++c)
      for (const zeppelin::chunk_slice& s : chunks[c].slices) rows.insert(rows.end(), {std::int64_t(c), s.sequence, s.begin, s.end, chunks[c].context});
    fill_rows<5>(rows, out, room, count);
  });
}

int zeppelin_chunking_order(const zeppelin_chunking* chunking, int64_t* out, int64_t room, int64_t* count) {
  return zeppelin::capi::guarded([&] {
    expect(chunking != nullptr, "zeppelin: the chunking must not be NULL");
    std::vector<std::int64_t> rows;
    for (std::size_t p = 0; p < chunking->plan.pipelines.size(); ++p)
      for (const std::int64_t c : chunking->plan.pipelines[p].forward) rows.insert(rows.end(), {std::int64_t(p), c});
    fill_rows<2>(rows, out, room, count);
  });
}

int zeppelin_chunking_checkpoint(const zeppelin_chunking* chunking, int64_t* out, int64_t room, int64_t* count) {
  return zeppelin::capi::guarded([&] {
    expect(chunking != nullptr, "zeppelin: the chunking must not be NULL");
    std::vector<std::int64_t> rows;
    for (std::size_t p = 0; p < chunking->plan.pipelines.size(); ++p) {
      const zeppelin::elastic_pipeline& pipe = chunking->plan.pipelines[p];
      for (int s = 0; s < chunking->stages; ++s)
        for (std::size_t k = 0; k < pipe.forward.size(); ++k)
          rows.insert(rows.end(), {std::int64_t(p), s, std::int64_t(k), pipe.checkpoint.recomputed_layers(s, static_cast<std::int64_t>(k))});
    }
    fill_rows<4>(rows, out, room, count);
  });
}

}  // extern "C"
