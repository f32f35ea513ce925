// examples/train_gpt/device_main.cpp
// train_gpt on GPUs (device_world.hpp run_on_device): the loop of main.cpp, with every rank's
// dispatch, layout moves, attention and gradient all-gather on the device
// (device_attention.hpp) and the token-local layers in fp32 on the host.
//   --world device   nodes x gpus-per-node ranks as threads on GPU --device (the device
//                    loopback world: grouped sends and receives on each rank's communication
//                    stream, as NCCL runs them)
//   --world nccl     this process is rank --rank of nodes x gpus-per-node processes, one per
//                    GPU (GPU rank % gpus-per-node of its node), joined over NCCL: rank 0 writes
//                    the unique id to --id-file (a path that must not exist yet), the others
//                    read it (nccl/bootstrap.hpp); launch_nccl.sh starts the processes of one
//                    node
// Both compare with the same training on one rank (the device loopback world with one rank on
// this process's GPU) and print, last,
//   loss parity: max |loss - reference| = X over S steps
// Exit status 0 when X <= 2e-2 x max(1, |loss|) (attention in bf16: partial results merged in
// another order round differently), 1 otherwise, 77 when the machine lacks the GPUs (no CUDA
// device, or fewer than gpus-per-node for --world nccl).
#include "device_attention.hpp"
#include "device_world.hpp"
#include "train_loop.hpp"

#include <zeppelin/checkpoint/any_checkpoint_policy.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cuda/device_loopback.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/nccl.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

namespace train_gpt {
namespace {

using namespace zeppelin;

constexpr int no_device_status = 77;
constexpr double bf16_parity_bound = 2e-2;

// One rank's step on a device world: its rows dispatched on the device, forward and backward
// with device attention, gradients summed over the ranks, AdamW. Returns the batch's mean loss.
template <device_communicator C>
double rank_step(C& c, const options& o, const any_checkpoint_policy& recompute, const device_step& step, gpt_params<float>& w,
                 adamw<float>& optimizer, cudaStream_t stream) {
  const linear_rows rows = device_dispatch_rows(c, step, stream);
  const device_attention<C> attention{c, o.model, step, rows, stream};
  gpt_params<float> g;
  double loss = forward_backward(attention, o.model, recompute, rows, 1.0 / step.host.targets, w, &g);
  sum_over_ranks(g, loss, static_cast<std::size_t>(c.size()), [&](const std::vector<float>& flat) { return device_gather(c, flat); });
  optimizer.step(w, g);
  return loss / step.host.targets;
}

// The steps of a run: each step's documents planned for t (the same plan in every process),
// its device engine built, and `ranks_step(step)` run, which returns the step's mean loss.
template <class RanksStep>
run_result train_steps(const options& o, const topology& t, bool progress, const char* label, RanksStep&& ranks_step) {
  const method_spec requested = method_or_partitioner(o.method);
  corpus data = corpus_of(o);
  run_result result;
  for (int step = 0; step < o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    step_batch sb = data.next(step, o.tokens);
    const auto tokens = static_cast<double>(sb.lengths.total_tokens());
    const planned_step<float> planned = plan_step<float>(std::move(sb), t, requested, o.model);
    const device_step engine_step = make_device_step(planned, t, o.model);
    result.executed = std::string(planned.executed.name);
    const double loss = ranks_step(engine_step);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report_step(result, progress, label, step, o.steps, loss, tokens, seconds);
  }
  return result;
}

// t's ranks as threads on GPU o.device (the device loopback world), each with its own copy of
// the parameters and optimizer; they must hold the same bits after every step.
run_result train_loopback(const options& o, const topology& t, const any_checkpoint_policy& recompute, bool progress, const char* label) {
  const auto R = static_cast<std::size_t>(t.num_ranks());
  std::vector<gpt_params<float>> params(R, init_params<float>(o.model, o.seed));
  std::vector<adamw<float>> optimizers(R, fresh_adamw<float>(o));
  const device_loopback_world world{.ranks = t.num_ranks(), .gpus_per_node = t.gpus_per_node(), .device = o.device,
                                    .timeout = std::chrono::seconds(600)};
  run_result result = train_steps(o, t, progress, label, [&](const device_step& step) {
    double step_loss = 0;
    std::mutex m;
    world.run([&](device_loopback_comm& c) {
      const auto ri = static_cast<std::size_t>(c.rank());
      const double loss = rank_step(c, o, recompute, step, params[ri], optimizers[ri], c.compute_stream());
      std::lock_guard lock(m);
      if (c.rank() == 0) step_loss = loss;
    });
    return step_loss;
  });
  for (std::size_t r = 1; r < R; ++r)
    ZEPPELIN_EXPECTS(flatten(params[r]) == flatten(params[0]), "the ranks hold different parameters after training",
                     {{"rank", double(r)}});
  return result;
}

// This process as rank o.rank of t's ranks, one process per GPU, over NCCL.
run_result train_nccl(const options& o, const topology& t, const any_checkpoint_policy& recompute, bool progress, const char* label) {
  ZEPPELIN_EXPECTS(o.rank >= 0 && o.rank < t.num_ranks(), "--rank must name one of the nodes x gpus-per-node ranks",
                   {{"rank", double(o.rank)}, {"ranks", double(t.num_ranks())}});
  ZEPPELIN_EXPECTS(!o.id_file.empty(), "--world nccl needs --id-file: a path the ranks share, which must not exist yet", {});
  const std::filesystem::path id_file = o.id_file;
  ncclUniqueId id{};
  if (o.rank == 0) {
    ZEPPELIN_EXPECTS(!std::filesystem::exists(id_file),
                     "--id-file exists already: rank 0 writes a fresh NCCL id there, and a stale one would mislead the other ranks", {});
    id = nccl::make_unique_id();
    nccl::write_unique_id(id_file, id);
  } else {
    id = nccl::read_unique_id(id_file, std::chrono::minutes(5));
  }
  nccl_communicator comm(id, t.num_ranks(), o.rank,
                         {.device = o.rank % t.gpus_per_node(), .gpus_per_node = t.gpus_per_node(), .timeout = std::chrono::minutes(10)});
  const device::cuda_stream compute(0);
  gpt_params<float> params = init_params<float>(o.model, o.seed);
  adamw<float> optimizer = fresh_adamw<float>(o);
  run_result result = train_steps(o, t, progress, label, [&](const device_step& step) {
    const double loss = rank_step(comm, o, recompute, step, params, optimizer, compute.get());
    ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(compute.get()));
    return loss;
  });
  if (o.rank == 0) std::filesystem::remove(id_file);  // every rank read it before the communicator came up
  return result;
}

}  // namespace

int run_on_device(const options& o) {
  ZEPPELIN_EXPECTS(!o.pipelined() && o.gradient_check == 0,
                   "the GPU worlds run the plain training loop: no --stages, --micro-batches or --gradient-check",
                   {{"stages", double(o.stages)}, {"micro_batches", double(o.micro_batch_count())}, {"gradient_check", double(o.gradient_check)}});
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    std::printf("skipped: no CUDA device\n");
    return no_device_status;
  }
  const bool nccl_world = o.world == world_kind::nccl;
  if (nccl_world && devices < o.gpus_per_node) {
    std::printf("skipped: %d ranks per node need as many GPUs, this machine has %d\n", o.gpus_per_node, devices);
    return no_device_status;
  }
  options one_rank = o;
  one_rank.device = nccl_world ? o.rank % o.gpus_per_node : o.device;
  ZEPPELIN_EXPECTS(one_rank.device >= 0 && one_rank.device < devices, "--device names no GPU of this machine",
                   {{"device", double(one_rank.device)}, {"devices", double(devices)}});
  ZEPPELIN_CUDA_CHECK(cudaSetDevice(one_rank.device));
  cudaDeviceProp prop{};
  ZEPPELIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, one_rank.device));

  const topology t = cluster_by_name(o.cluster, o.nodes, o.gpus_per_node), single = cluster_by_name(o.cluster, 1, 1);
  const bool speaks = !nccl_world || o.rank == 0;
  const bool progress = speaks && isatty(fileno(stdout)) != 0;
  const char* label = speaks ? "ranks" : nullptr;
  if (speaks)
    std::printf("train_gpt: %d layers, width %d, %d heads (%d K/V), vocab %d; %d steps of %lld tokens; method %s on %d x %d ranks, "
                "%s; fp32 layers on the host, bf16 attention on %s\n",
                o.model.layers, o.model.dim, o.model.heads, o.model.kv_heads, o.model.vocab, o.steps, static_cast<long long>(o.tokens),
                o.method.c_str(), t.nodes(), t.gpus_per_node(),
                nccl_world ? "one process per GPU over NCCL" : "threads on one GPU (device loopback world)", prop.name);
  const run_result reference = train_loopback(one_rank, single, {no_recompute{}}, progress, speaks ? "reference" : nullptr);
  const any_checkpoint_policy recompute = checkpoint_policy_by_name(o.checkpoint_or_none());
  const run_result distributed =
      nccl_world ? train_nccl(o, t, recompute, progress, label) : train_loopback(one_rank, t, recompute, progress, label);
  const auto [worst, scale] = max_loss_gap(reference, distributed);
  const double tolerance = bf16_parity_bound * std::max(1.0, scale);
  if (speaks) {
    std::printf("loss: %.6f -> %.6f; tokens/s: reference %.0f, %d ranks %.0f (method %s, last step: %s); bound %.1e\n",
                reference.loss.front(), reference.loss.back(), reference.tokens / reference.seconds, t.num_ranks(),
                distributed.tokens / distributed.seconds, o.method.c_str(), distributed.executed.c_str(), tolerance);
    std::printf("loss parity: max |loss - reference| = %.3e over %d steps\n", worst, o.steps);
  }
  return worst <= tolerance ? 0 : 1;
}

}  // namespace train_gpt
