// examples/train_gpt/options.hpp
// train_gpt's command line, parsed (main.cpp), and the world its ranks run in.
//   world_kind   host: nodes x gpus-per-node host thread ranks (the host loopback world, the
//                host engine, fp64 or fp32); device: as many ranks on one GPU (the device
//                loopback world, the CUDA engine in bf16); nccl: this process is one rank of
//                nodes x gpus-per-node processes, one GPU each, joined over NCCL through a
//                shared file (device_main.cpp)
#pragma once

#include "gpt.hpp"

#include <zeppelin/schedule/pipeline/any_schedule.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/step/step_plan.hpp>
#include <zeppelin/strategy/parallel_scheme.hpp>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace train_gpt {

enum class world_kind : std::uint8_t { host, device, nccl };

//! Whose composition forms and lays out a step's micro-batches (step_documents.hpp).
enum class training_system : std::uint8_t { zeppelin, wlb, infinipipe, hydraulis };

struct options {
  training_system system = training_system::zeppelin;
  std::string method = "zeppelin";
  std::string cluster = "c";
  int nodes = 1;
  int gpus_per_node = 4;
  int steps = 20;
  std::int64_t tokens = 512;
  std::int64_t min_length = 8;
  std::int64_t max_length = 160;
  std::string corpus_file;
  std::uint64_t seed = 1;
  gpt_config model{};
  double lr = 1e-2;
  bool fp32 = false;
  int gradient_check = 0;  //!< coordinates to check; 0: train
  std::string checkpoint;  //!< checkpoint/any_checkpoint_policy.hpp text form; empty: the system's own (none, or InfiniPipe's plan)
  int tp = 1;                       //!< tensor-parallel ranks per group (on one node)
  zeppelin::tp_collectives tp_mode = zeppelin::tp_collectives::all_reduce;  //!< all-reduces, or sequence parallelism
  int dp = 1;                       //!< data-parallel replicas, each a whole pipeline
  int stages = 1;                   //!< pipeline stages, each a group of nodes x gpus_per_node ranks
  int micro_batches = 0;            //!< per step; 0: the stage count
  zeppelin::pipeline_schedule_kind schedule = zeppelin::pipeline_schedule_kind::one_f_one_b;
  int virtual_stages = 2;  //!< model chunks per stage of the interleaved schedule
  std::int64_t chunk_tokens = 0;  //!< infinipipe: the most tokens of a chunk (0: no limit)
  std::vector<zeppelin::parallel_scheme> pipelines;  //!< hydraulis: fixed pipelines (empty: the library's proposal)
  world_kind world = world_kind::host;
  int device = 0;          //!< device world: the GPU every rank uses
  int rank = 0;            //!< nccl world: this process's rank
  std::string id_file;     //!< nccl world: where rank 0 writes the NCCL unique id, the others read it
  [[nodiscard]] int micro_batch_count() const { return micro_batches > 0 ? micro_batches : stages; }
  [[nodiscard]] bool pipelined() const { return stages > 1 || micro_batch_count() > 1; }
  //! The policy --checkpoint names, "none" when it names none.
  [[nodiscard]] std::string checkpoint_or_none() const { return checkpoint.empty() ? "none" : checkpoint; }
  [[nodiscard]] int chunks() const { return schedule == zeppelin::pipeline_schedule_kind::interleaved ? virtual_stages : 1; }
};

//! Pipelines from their text, TPxPPxCP each, comma-separated ("" gives none); throws
//! invalid_argument naming the text that is not one.
inline std::vector<zeppelin::parallel_scheme> pipelines_by_text(const std::string& text) {
  std::vector<zeppelin::parallel_scheme> out;
  std::stringstream all(text);
  std::string one;
  while (std::getline(all, one, ',')) {
    zeppelin::parallel_scheme p;
    char x1 = 0, x2 = 0;
    std::stringstream in(one);
    in >> p.tp >> x1 >> p.pp >> x2 >> p.cp;
    ZEPPELIN_EXPECTS(in && in.peek() == std::char_traits<char>::eof() && x1 == 'x' && x2 == 'x' && p.tp >= 1 && p.pp >= 1 && p.cp >= 1,
                     "--pipelines: '" + one + "' is not TPxPPxCP of positive degrees", {});
    out.push_back(p);
  }
  return out;
}

}  // namespace train_gpt
