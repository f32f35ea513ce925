"""Hydraulis' heterogeneous strategy for one iteration: which pipelines <TP, PP, CP> to build
and which sequences each runs in which micro-batch."""
from dataclasses import dataclass
from typing import List

import torch

from . import _capi, _checks


@dataclass(frozen=True)
class Pipeline:
    tp: int
    pp: int
    cp: int
    max_len: int  # the longest sequence it can hold (MaxLen)
    micro_batches: List[torch.Tensor]  # sequence indices per micro-batch


@dataclass(frozen=True)
class Strategy:
    pipelines: List[Pipeline]
    iteration_s: float  # predicted: the slowest pipeline's latency


def strategy(lengths, *, gpus, gpus_per_node=8, model="7b", gpu_memory_gib=80.0, margin_gib=8.0, trials=100, seed=1):
    """Chooses Hydraulis' strategy for the iteration's sequences (`lengths`) on `gpus` GPUs:
    every scheme <TP, PP, CP> `model` allows (a preset name: 7b, 13b, 32b, ...; A800 tables with
    `gpu_memory_gib` per GPU, `margin_gib` kept free), the strategy-proposal DP, greedy
    dispatch (`trials`, `seed`; trials capped so that trials x sequences <= 2**20, at least one)
    and packing. Raises ZeppelinError when no scheme fits."""
    lengths = _checks.lengths_tensor(lengths)
    gpus = _checks.positive_int("gpus", gpus, _checks.INT64_MAX)
    gpus_per_node = _checks.positive_int("gpus_per_node", gpus_per_node)
    trials = _checks.positive_int("trials", trials)
    seed = _checks.non_negative_int("seed", seed, 2**64 - 1)
    gpu_memory_gib = _checks.non_negative_number("gpu_memory_gib", gpu_memory_gib)
    margin_gib = _checks.non_negative_number("margin_gib", margin_gib)
    handle, done = _capi.create(
        _capi.lib.zeppelin_strategy_create, _capi.lib.zeppelin_strategy_destroy,
        _capi.lengths_pointer(lengths), len(lengths), gpus, gpus_per_node, _checks.name_str("model", model),
        float(gpu_memory_gib) * 2**30, float(margin_gib) * 2**30, trials, seed,
    )
    try:
        heads = _capi.table(_capi.lib.zeppelin_strategy_pipelines, 5, handle).tolist()
        rows = _capi.table(_capi.lib.zeppelin_strategy_micro_batches, 3, handle).tolist()
        seconds = float(_capi.lib.zeppelin_strategy_seconds(handle))
    finally:
        done()
    batches = [[[] for _ in range(count)] for *_, count in heads]
    for pipeline, micro_batch, sequence in rows:
        batches[pipeline][micro_batch].append(sequence)
    pipelines = [
        Pipeline(tp, pp, cp, max_len, [torch.tensor(b, dtype=torch.int64) for b in batches[i]])
        for i, (tp, pp, cp, max_len, _) in enumerate(heads)
    ]
    return Strategy(pipelines, seconds)
