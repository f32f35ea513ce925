"""InfiniPipe's elastic pipeline for one global batch: the chunks (slices of sequences), their
forward order in back-to-back chunk-level 1F1B pipelines, and the layers each stage recomputes
for each chunk (stage-aware checkpointing, solved exactly)."""
from dataclasses import dataclass
from typing import List

import torch

from . import _capi, _checks


@dataclass(frozen=True)
class Chunking:
    mesh: List[int]  # slice lengths of the longest sequence
    chunks: List[torch.Tensor]  # per chunk: LongTensor [slices, 3] of (sequence, begin, end)
    contexts: List[int]  # per chunk: the context of its cut slice (0: none)
    pipelines: List[List[int]]  # per pipeline: chunk indices in forward order
    checkpoint: List[torch.Tensor]  # per pipeline: LongTensor [stages, chunks] of layers recomputed
    iteration_s: float  # predicted


def chunk(lengths, *, sp, pp, model="13b", gpu_memory_gib=80.0, margin_gib=8.0, max_slices=16):
    """Plans InfiniPipe's elastic pipeline for `lengths` with Ulysses degree `sp` inside a node
    and `pp` stages, for `model` (7b, 13b, 30b: the paper's GPT shapes, or a preset's full
    name) on the paper's A800 cluster with `gpu_memory_gib` per GPU and `margin_gib` kept
    free. Raises ZeppelinError when even full recomputation does not fit."""
    lengths = _checks.lengths_tensor(lengths)
    sp = _checks.positive_int("sp", sp)
    pp = _checks.positive_int("pp", pp)
    max_slices = _checks.positive_int("max_slices", max_slices)
    gpu_memory_gib = _checks.non_negative_number("gpu_memory_gib", gpu_memory_gib)
    margin_gib = _checks.non_negative_number("margin_gib", margin_gib)
    if margin_gib >= gpu_memory_gib:
        raise ValueError(f"margin_gib ({margin_gib}) must be below gpu_memory_gib ({gpu_memory_gib})")
    _checks.name_str("model", model)
    preset = model if "-" in model else "gpt-" + model
    handle, done = _capi.create(
        _capi.lib.zeppelin_chunking_create, _capi.lib.zeppelin_chunking_destroy,
        _capi.lengths_pointer(lengths), len(lengths), sp, pp, preset.encode(),
        (float(gpu_memory_gib) - float(margin_gib)) * 2**30, max_slices,
    )
    try:
        mesh = _capi.table(_capi.lib.zeppelin_chunking_mesh, 1, handle)[:, 0].tolist()
        slices = _capi.table(_capi.lib.zeppelin_chunking_slices, 5, handle)
        order = _capi.table(_capi.lib.zeppelin_chunking_order, 2, handle).tolist()
        ckpt = _capi.table(_capi.lib.zeppelin_chunking_checkpoint, 4, handle).tolist()
        seconds = float(_capi.lib.zeppelin_chunking_seconds(handle))
    finally:
        done()
    count = int(slices[:, 0].max()) + 1 if len(slices) else 0
    chunks = [slices[slices[:, 0] == c][:, 1:4].contiguous() for c in range(count)]
    contexts = [int(slices[slices[:, 0] == c][0, 4]) for c in range(count)]
    pipelines = [[] for _ in range(max((p for p, _ in order), default=-1) + 1)]
    for p, c in order:
        pipelines[p].append(c)
    checkpoint = [torch.zeros(pp, len(chunks_of), dtype=torch.int64) for chunks_of in pipelines]
    for p, stage, k, layers in ckpt:
        checkpoint[p][stage, k] = layers
    return Chunking(mesh, chunks, contexts, pipelines, checkpoint, seconds)
