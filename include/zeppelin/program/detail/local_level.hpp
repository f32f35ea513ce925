// zeppelin/program/detail/local_level.hpp
// The local level of one micro-batch: the sequences every rank holds alone (the local queue
// of schedule/engine_queue.hpp, in its order), computed in place over the rank's own K and
// V; the backward adds dK/dV straight into the rank's accumulators. One round, no
// communication. Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/detail/level_work.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/schedule/engine_queue.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! The blocks of the local queue of micro-batch `mb` per rank (query and key rows both in the
//! rank's rows), one list for both passes; empty where a rank holds no local sequence.
[[nodiscard]] inline std::vector<block_list> local_blocks(const plan& p, const execution_program& prog,
                                                          const std::vector<engine_queue>& queues, std::int32_t mb) {
  std::vector<block_list> out(static_cast<std::size_t>(p.num_ranks()));
  std::vector<attention_block> blocks;
  for (rank_index r = 0; r < p.num_ranks(); ++r) {
    const auto ri = static_cast<std::size_t>(r);
    blocks.clear();
    const auto& shards = p.placements[ri].shards;
    for (const engine_task& task : queues[ri].tasks) {
      if (task.zone != zone_kind::local || task.micro_batch != mb) continue;
      for (const std::int32_t qi : task.shards)
        for (const std::int32_t ki : task.shards) {
          const shard& qs = shards[static_cast<std::size_t>(qi)];
          const shard& ks = shards[static_cast<std::size_t>(ki)];
          append_blocks(group_shard{qs.seq, qs.range, qi, prog.shard_row[ri][static_cast<std::size_t>(qi)]},
                        group_shard{ks.seq, ks.range, ki, prog.shard_row[ri][static_cast<std::size_t>(ki)]}, blocks);
        }
    }
    out[ri] = block_list(blocks);
  }
  return out;
}

inline void build_local(level_work& w, const std::vector<block_list>& blocks, pass_kind pass) {
  for (std::size_t r = 0; r < blocks.size(); ++r) {
    if (blocks[r].empty()) continue;
    launch_request req;
    req.group = no_group;
    req.k = buffer_ref::tensor(tensor_kind::k);
    req.v = buffer_ref::tensor(tensor_kind::v);
    if (pass == pass_kind::backward) {
      req.dk = buffer_ref::tensor(tensor_kind::dk);
      req.dv = buffer_ref::tensor(tensor_kind::dv);
    }
    req.blocks = blocks[r];
    w.at(static_cast<rank_index>(r), 1).launches.push_back(std::move(req));
  }
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
