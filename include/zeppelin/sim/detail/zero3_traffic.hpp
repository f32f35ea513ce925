// zeppelin/sim/detail/zero3_traffic.hpp
// ZeRO-3's parameter traffic of one pipeline stage of one data-parallel replica on a task
// engine (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models", stage 3; PyTorch FSDP and DeepSpeed run it the same way).
//   in : the rings of the stage's ZeRO group (detail/collective_rings.hpp: its dp x cp GPUs),
//        which of their edges this replica's GPUs send on, and, layer by layer in the order
//        the stage's compute stream runs them, the bytes of the layer's parameters
//   out: per layer a task its compute waits for (the all-gather of its parameters, every
//        ring edge this replica sends on), and after a backward layer the reduce-scatter of
//        its gradients (nothing waits for it; the iteration ends when it is delivered)
// Prefetch: a layer's gather is issued once the previous gather has completed and the
// compute two layers back has finished, so one layer's parameters are gathered while the
// layer before it computes (FSDP's and DeepSpeed's default of prefetching the next layer; a
// deeper prefetch would hold more gathered layers than the memory model counts). The
// stream continues across micro-batches and passes: the first layer of an op is gathered
// during the last layer of the op before it, whatever that op waits for.
// Every GPU of the group takes part in every collective. A replica issues the edges its own
// GPUs send on and waits for them: with several replicas every collective's bytes are on
// the links once, and each replica advances as if the others reached the layer with it.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/sim/detail/collective_rings.hpp>
#include <zeppelin/sim/event_engine.hpp>

#include <array>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

template <class Engine>
class zero3_stage_traffic {
 public:
  //! `rings` must outlive this object; `own_edges` index rings->edges.
  zero3_stage_traffic(const collective_rings& rings, std::vector<std::size_t> own_edges)
      : rings_(&rings), own_(std::move(own_edges)) {
    flows_.reserve(own_.size());
  }

  //! The all-gather of the next layer's `bytes` of parameters (see the file comment).
  [[nodiscard]] task_id gather(Engine& engine, double bytes, task_tag tag) {
    tag.kind = task_kind::parameter_gather;
    const task_id deps[2] = {last_gather_, computed_[0]};
    last_gather_ = collective(engine, bytes, tag, deps);
    return last_gather_;
  }

  //! Records the compute task of the layer whose gather was the last one asked for.
  void computed(task_id layer) noexcept { computed_ = {computed_[1], layer}; }

  //! The reduce-scatter of `bytes` of gradients once `after` (a backward layer) has run.
  void reduce_scatter(Engine& engine, double bytes, task_id after, task_tag tag) {
    tag.kind = task_kind::gradient_scatter;
    const task_id deps[1] = {after};
    (void)collective(engine, bytes, tag, deps);
  }

 private:
  task_id collective(Engine& engine, double bytes, task_tag tag, std::span<const task_id> deps) {
    flows_.clear();
    const double share = rings_->edge_bytes(bytes);
    for (const std::size_t e : own_) {
      const ring_edge& edge = rings_->edges[e];
      flows_.push_back(engine.flow(edge.source, edge.destination, share, tag, deps));
    }
    return flows_.size() == 1 ? flows_.front() : engine.join(std::span<const task_id>(flows_));
  }

  const collective_rings* rings_;
  std::vector<std::size_t> own_;
  std::vector<task_id> flows_;
  task_id last_gather_ = no_task;
  std::array<task_id, 2> computed_{no_task, no_task};  //!< the compute two layers back, one layer back
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
