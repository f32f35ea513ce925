"""Planning a batch with zeppelin's partitioners, and each rank's view of the plan as tensors.

A Plan places every token of a batch of variable-length sequences on the GPUs of a
nodes x gpus_per_node cluster: each rank holds shards (contiguous token ranges of one
sequence); shards of one sequence on several ranks form a group whose members exchange K/V.
Layout(rank, micro_batch) is what one rank holds in one micro-batch, in its buffer order (the
rows its Q, K, V, O tensors have); Relayout moves rows between the attention layout and the
token-balanced layout of Zeppelin's remap. Every rank that plans the same lengths with the
same arguments gets the same plan (compare `fingerprint` across ranks).
"""
import ctypes
from dataclasses import dataclass
from typing import List

import torch

from . import _capi, _checks


@dataclass(frozen=True)
class Group:
    """The ranks that exchange K/V for the sequences cut over them, in ring order (members[i]
    sends to members[i + 1]), and how the C++ engines exchange it."""

    index: int
    members: List[int]
    collective: str  # "ring", "all_gather" or "all_to_all"
    zone: str  # "local", "intra_node" or "inter_node"


_COLLECTIVES = ("ring", "all_gather", "all_to_all")
_ZONES = ("local", "intra_node", "inter_node")


class Layout:
    """The rows one rank holds, in buffer order, as tensors.

    shards       LongTensor [n, 4]: (sequence, begin, end, group or -1) per shard
    token_index  LongTensor [rows]: each row's token in the whole batch (the sequences
                 concatenated in batch order), what dispatch() gathers
    sequence     LongTensor [rows]: each row's sequence
    positions    LongTensor [rows]: each row's position in its sequence (rotary embeddings)
    cu_seqlens   IntTensor [n + 1]: row offsets of the shards (the local varlen layout)
    """

    def __init__(self, shards, offsets):
        self.shards = shards.contiguous()
        lens = (self.shards[:, 2] - self.shards[:, 1]) if len(self.shards) else torch.zeros(0, dtype=torch.int64)
        self.cu_seqlens = torch.zeros(len(self.shards) + 1, dtype=torch.int32)
        if len(self.shards):
            self.cu_seqlens[1:] = torch.cumsum(lens, 0).to(torch.int32)
        self.rows = int(lens.sum()) if len(self.shards) else 0
        seq = torch.repeat_interleave(self.shards[:, 0], lens) if self.rows else torch.zeros(0, dtype=torch.int64)
        starts = torch.repeat_interleave(self.shards[:, 1] - self.cu_seqlens[:-1].to(torch.int64), lens) if self.rows else seq
        self.sequence = seq
        self.positions = (torch.arange(self.rows, dtype=torch.int64) + starts) if self.rows else seq
        self.token_index = offsets[seq] + self.positions if self.rows else seq

    def dispatch(self, x):
        """The rows of this layout from `x`, a tensor over the whole batch's tokens (dim 0)."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        total = int(self.token_index.max()) + 1 if self.rows else 0
        if x.dim() < 1 or x.shape[0] < total:
            raise ValueError(f"x must have the batch's tokens on dim 0 (at least {total}), got shape {tuple(x.shape)}")
        return x.index_select(0, self.token_index.to(x.device))


class Plan:
    """A plan of one batch (see plan())."""

    def __init__(self, handle, lengths, partitioner):
        self._handle = handle
        self.lengths = lengths
        self.offsets = torch.zeros(len(lengths), dtype=torch.int64)
        self.offsets[1:] = torch.cumsum(lengths, 0)[:-1]
        self.partitioner = partitioner
        self.num_ranks = int(_capi.lib.zeppelin_plan_ranks(handle))
        self.micro_batches = int(_capi.lib.zeppelin_plan_micro_batches(handle))
        self.capacity = int(_capi.lib.zeppelin_plan_capacity(handle))
        self.fingerprint = int(_capi.lib.zeppelin_plan_fingerprint(handle))
        # plan_by_cost: the chosen candidate and its simulated step (None for a partitioner's plan)
        self.choice = _capi.lib.zeppelin_plan_choice(handle).decode() or None
        step = float(_capi.lib.zeppelin_plan_predicted_step(handle))
        self.predicted_step_s = None if step != step else step
        self._shards = [_capi.table(_capi.lib.zeppelin_plan_shards, 5, handle, r) for r in range(self.num_ranks)]
        self.groups = [self._group(g) for g in range(int(_capi.lib.zeppelin_plan_groups(handle)))]

    def __del__(self):
        if getattr(self, "_handle", None):
            _capi.lib.zeppelin_plan_destroy(self._handle)
            self._handle = None

    def __repr__(self):
        return (
            f"Plan({self.partitioner}, {len(self.lengths)} sequences, {int(self.lengths.sum())} tokens, "
            f"{self.num_ranks} ranks, {self.micro_batches} micro-batch(es), fingerprint {self.fingerprint:#018x})"
        )

    def _group(self, g):
        members = _capi.table(
            lambda h, gi, out, room, count: _capi.lib.zeppelin_plan_group(h, gi, out, room, count, None, None), 1, self._handle, g
        )
        collective, zone = ctypes.c_int32(0), ctypes.c_int32(0)
        _capi.call(_capi.lib.zeppelin_plan_group, self._handle, g, None, 0, ctypes.byref(ctypes.c_int64()),
                   ctypes.byref(collective), ctypes.byref(zone))
        return Group(g, [int(m) for m in members[:, 0]], _COLLECTIVES[collective.value], _ZONES[zone.value])

    def _rank(self, name, rank):
        _checks.non_negative_int(name, rank)
        if rank >= self.num_ranks:
            raise ValueError(f"{name} must be < the plan's {self.num_ranks} ranks, got {rank}")
        return rank

    def _micro_batch(self, micro_batch):
        _checks.non_negative_int("micro_batch", micro_batch)
        if micro_batch >= self.micro_batches:
            raise ValueError(f"micro_batch must be < the plan's {self.micro_batches} micro-batches, got {micro_batch}")
        return micro_batch

    def to_json(self):
        """The plan as JSON text (format "zeppelin.plan" with its lengths and fingerprint, as
        `zeppelin plan --json` writes it; read_plan reads it back)."""
        return _capi.text(_capi.lib.zeppelin_plan_json, self._handle)

    def shards(self, rank):
        """LongTensor [n, 5]: rank's shards in storage order, (sequence, begin, end, group or -1, micro-batch)."""
        return self._shards[self._rank("rank", rank)]

    def layout(self, rank, micro_batch=0):
        """What `rank` holds in `micro_batch` (its attention layout), as a Layout."""
        s = self.shards(rank)
        return Layout(s[s[:, 4] == self._micro_batch(micro_batch)][:, :4], self.offsets)

    def relayout(self, micro_batch=0, bytes_per_token=1.0):
        """The remap of `micro_batch` from the attention layout to the token-balanced layout
        (exact min-max solver, default H100 topology of the plan's shape)."""
        from .relayout import Relayout

        return Relayout(self, self._micro_batch(micro_batch), float(bytes_per_token))


def plan(lengths, *, gpus_per_node, nodes=1, partitioner="hierarchical", capacity=0, cp_size=0):
    """Plans `lengths` (sequence lengths in tokens: list, tuple or 1-D integer tensor) on
    nodes x gpus_per_node GPUs with `partitioner` ("hierarchical" is Zeppelin's; also
    even_split, allgather, hybrid_dp, per_document, ulysses, and micro_batched: hierarchical
    over the fewest micro-batches that fit the capacity). capacity: tokens per GPU per
    micro-batch (0: the batch's mean per GPU plus 1/8); cp_size: ranks per CP group of
    allgather, per_document and ulysses (0: all). Raises TypeError / ValueError naming a bad
    argument, ZeppelinError when the library refuses the batch."""
    lengths = _checks.lengths_tensor(lengths)
    nodes = _checks.positive_int("nodes", nodes)
    gpus_per_node = _checks.positive_int("gpus_per_node", gpus_per_node)
    capacity = _checks.non_negative_int("capacity", capacity, _checks.INT64_MAX)
    cp_size = _checks.non_negative_int("cp_size", cp_size)
    name = _checks.name_str("partitioner", partitioner)
    handle = ctypes.c_void_p()
    _capi.call(
        _capi.lib.zeppelin_plan_create,
        _capi.lengths_pointer(lengths),
        len(lengths),
        nodes,
        gpus_per_node,
        name,
        capacity,
        cp_size,
        ctypes.byref(handle),
    )
    return Plan(handle, lengths, partitioner)


def plan_by_cost(lengths, *, gpus_per_node=0, nodes=1, model="7b", cluster="c", capacity=0):
    """Plans `lengths` with Zeppelin's cost-driven planner: Zeppelin's layout, Ulysses' and the
    baselines' are each priced by the step simulator for `model` (a preset name: 7b, 13b,
    llama3-8b, ...) on the cluster preset `cluster` ("a", "b", "c": the Zeppelin paper's;
    nodes x gpus_per_node GPUs, 0: the preset's 8), and the fastest is kept: the plan never
    predicts slower than any of them. Plan.choice names the winner, Plan.predicted_step_s
    its simulated step. Slower than plan() (it simulates; milliseconds to seconds)."""
    lengths = _checks.lengths_tensor(lengths)
    nodes = _checks.positive_int("nodes", nodes)
    gpus_per_node = _checks.non_negative_int("gpus_per_node", gpus_per_node)
    capacity = _checks.non_negative_int("capacity", capacity, _checks.INT64_MAX)
    cluster_name, model_name = _checks.name_str("cluster", cluster), _checks.name_str("model", model)
    handle = ctypes.c_void_p()
    _capi.call(
        _capi.lib.zeppelin_plan_by_cost,
        _capi.lengths_pointer(lengths),
        len(lengths),
        cluster_name,
        nodes,
        gpus_per_node,
        model_name,
        capacity,
        ctypes.byref(handle),
    )
    return Plan(handle, lengths, "cost-driven")


def read_plan(text):
    """The plan of a "zeppelin.plan" JSON text (Plan.to_json, `zeppelin plan --json`), checked:
    its fingerprint, and the plan against the lengths it carries. Raises ZeppelinError naming
    what is wrong."""
    if isinstance(text, bytes):
        data = text
    elif isinstance(text, str):
        data = text.encode("utf-8")
    else:
        raise TypeError(f"text must be a str or bytes, got {type(text).__name__}")
    handle = ctypes.c_void_p()
    _capi.call(_capi.lib.zeppelin_plan_read_json, data, len(data), ctypes.byref(handle))
    lengths = _capi.table(_capi.lib.zeppelin_plan_lengths, 1, handle)[:, 0].contiguous()
    return Plan(handle, lengths, "read")
