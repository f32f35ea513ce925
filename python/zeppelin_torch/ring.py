"""Distributed attention over torch.distributed, driven by a plan.

Every rank calls ring_attention with its rows of one micro-batch (Plan.layout(rank, mb): Q, K,
V in the layout's buffer order). Sequences a rank holds whole are computed locally; the
shards of each group circulate around the group's members in ring order (members[i] sends to
members[i + 1]): at round r a member holds the K/V of the member r places before it and
computes its query shards against the held key shards of the same sequences, merging by
log-sum-exp; a round's K/V transfer is posted before its compute and overlaps it. The backward
runs the same ring, dK/dV following their K/V one compute behind, and one more hop home, from
the global O and LSE (as FlashAttention's backward). Groups run one after another
in index order on every rank, so no two rings wait on each other. Over torch.distributed every
group circulates as a ring, whatever collective the C++ engines would use for it: the result
is the same attention.
"""
from dataclasses import dataclass
from typing import List, Tuple

import torch
import torch.distributed as dist

from . import _agreement, _checks
from .attention import check_scale
from .kernels import kernels_for
from .plan import Plan


@dataclass(frozen=True)
class _Shard:
    row: int  # first row in the owner's buffer (or in the held K/V)
    seq: int
    begin: int
    end: int


@dataclass(frozen=True)
class RingStep:
    """One round of one group on one rank: send the held K/V to `send_to`, receive from
    `recv_from`, and, during the round, hold the K/V of member `holds`."""

    group: int
    round: int
    holds: int
    send_to: int
    recv_from: int


class RankSchedule:
    """One rank's part of the plan in one micro-batch: its shards per group, and per group the
    ring order and the shards of every member (what it will hold)."""

    def __init__(self, plan: Plan, rank: int, micro_batch: int = 0):
        if not isinstance(plan, Plan):
            raise TypeError(f"plan must be a zeppelin_torch.Plan, got {type(plan).__name__}")
        self.plan, self.rank, self.micro_batch = plan, rank, micro_batch
        self.layout = plan.layout(rank, micro_batch)
        self.local: List[_Shard] = []
        mine = {}
        row = 0
        for seq, begin, end, group in self.layout.shards.tolist():
            (self.local if group < 0 else mine.setdefault(group, [])).append(_Shard(row, seq, begin, end))
            row += end - begin
        self.mine = mine
        # groups this rank rings in this micro-batch: it is a member and some member holds shards of it
        self.rings: List[Tuple[int, List[int], List[List[_Shard]]]] = []
        of_member = {}  # member -> {group: its shards there}, each member read once
        for g in plan.groups:
            if rank not in g.members:
                continue
            for m in g.members:
                if m not in of_member:
                    of_member[m] = self._shards_by_group(m)
            held = [of_member[m].get(g.index, []) for m in g.members]
            if any(held):
                self.rings.append((g.index, g.members, held))

    def _shards_by_group(self, member):
        """{group: member's shards of it in this micro-batch}, rows counted from 0 per group
        (the order they sit in the K/V buffer the member circulates)."""
        out, rows = {}, {}
        for seq, begin, end, g, mb in self.plan.shards(member).tolist():
            if g >= 0 and mb == self.micro_batch:
                out.setdefault(g, []).append(_Shard(rows.get(g, 0), seq, begin, end))
                rows[g] = rows.get(g, 0) + end - begin
        return out

    def steps(self):
        """The rounds this rank runs, group by group (the plan's ring schedule for this rank)."""
        out = []
        for g, members, _ in self.rings:
            i, n = members.index(self.rank), len(members)
            for r in range(n):
                out.append(RingStep(g, r, members[(i - r) % n], members[(i + 1) % n], members[(i - 1) % n]))
        return out


def _rows(shards):
    return sum(s.end - s.begin for s in shards)


def _gather(t, shards):
    return torch.cat([t[s.row : s.row + s.end - s.begin] for s in shards]) if shards else t[:0]


class _Shift:
    """Posts the sends of `tensors` ([2, rows, ...]) to send_to and the receives of what
    recv_from sends (rows_in rows); wait() returns the received tensors. Posted before a
    round's compute, so the transfer overlaps it (the ring's double buffering)."""

    def __init__(self, tensors, send_to, recv_from, rows_in, tag, global_rank):
        self.incoming = [t.new_empty((t.shape[0], rows_in) + tuple(t.shape[2:])) for t in tensors]
        self.outgoing = [t.contiguous() for t in tensors]  # alive until the sends complete
        self.ops = []
        for t, buf in zip(self.outgoing, self.incoming):
            self.ops.append(dist.isend(t, global_rank(send_to), tag=tag))
            self.ops.append(dist.irecv(buf, global_rank(recv_from), tag=tag))

    def wait(self):
        for op in self.ops:
            op.wait()
        return self.incoming


def _pairs(queries, keys):
    for q in queries:
        for k in keys:
            if q.seq == k.seq:
                yield q, k


def _span(s):
    return slice(s.row, s.row + s.end - s.begin)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sched, scale, global_rank, kernels):
        n, heads, _ = q.shape
        acc = kernels.acc_dtype(q.dtype)
        o = torch.zeros(q.shape, dtype=acc, device=q.device)
        lse = torch.full((heads, n), float("-inf"), dtype=acc, device=q.device)

        def compute(queries, keys, hk, hv):
            for qs, ks in _pairs(queries, keys):
                o_blk, lse_blk = kernels.forward_block(q[_span(qs)], hk[_span(ks)], hv[_span(ks)], (qs.begin, qs.end),
                                                       (ks.begin, ks.end), scale)
                kernels.merge(o[_span(qs)], lse, qs.row, o_blk, lse_blk)

        compute(sched.local, sched.local, k, v)
        for g, members, held in sched.rings:
            i, size = members.index(sched.rank), len(members)
            mine = sched.mine.get(g, [])
            kv = torch.stack([_gather(k, mine), _gather(v, mine)])
            for r in range(size):
                shift = None
                if r + 1 < size:  # the next round's K/V travel while this round computes
                    shift = _Shift([kv], members[(i + 1) % size], members[(i - 1) % size], _rows(held[(i - r - 1) % size]),
                                   2 * g, global_rank)
                compute(mine, held[(i - r) % size], kv[0], kv[1])
                if shift is not None:
                    (kv,) = shift.wait()
        o = o.to(q.dtype)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.sched, ctx.scale, ctx.global_rank, ctx.kernels = sched, scale, global_rank, kernels
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, d_o, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        sched, scale, kernels = ctx.sched, ctx.scale, ctx.kernels
        d_o = d_o.contiguous()
        acc = kernels.acc_dtype(q.dtype)
        prepared = kernels.prepare_backward(o, d_o)
        dq, dk, dv = (torch.zeros(t.shape, dtype=acc, device=t.device) for t in (q, k, v))

        def compute(queries, keys, hk, hv, hdk, hdv):
            for qs, ks in _pairs(queries, keys):
                qr, kr = _span(qs), _span(ks)
                kernels.backward_block(q[qr], hk[kr], hv[kr], o[qr], d_o[qr], lse, qs.row, dq[qr], hdk[kr], hdv[kr],
                                       (qs.begin, qs.end), (ks.begin, ks.end), scale, prepared)

        compute(sched.local, sched.local, k, v, dk, dv)
        for g, members, held in sched.rings:
            i, size = members.index(sched.rank), len(members)
            mine = sched.mine.get(g, [])
            kv = torch.stack([_gather(k, mine), _gather(v, mine)])
            grads = torch.zeros(kv.shape, dtype=acc, device=kv.device)
            send_to, recv_from = members[(i + 1) % size], members[(i - 1) % size]
            for r in range(size):
                rows_in = _rows(held[(i - r - 1) % size])
                # K/V travel during the compute; the dK/dV they accumulate follow it
                shift = _Shift([kv], send_to, recv_from, rows_in, 2 * g, ctx.global_rank) if r + 1 < size else None
                compute(mine, held[(i - r) % size], kv[0], kv[1], grads[0], grads[1])
                if size > 1:  # after the last round: one more hop takes the dK/dV home
                    grads_shift = _Shift([grads], send_to, recv_from, rows_in, 2 * g + 1, ctx.global_rank)
                    if shift is not None:
                        (kv,) = shift.wait()
                    (grads,) = grads_shift.wait()
            start = 0
            for s in mine:
                rows = s.end - s.begin
                dk[_span(s)] += grads[0, start : start + rows]
                dv[_span(s)] += grads[1, start : start + rows]
                start += rows
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None


def ring_attention(q, k, v, schedule, *, scale=0.0, group_ranks=None, return_lse=False):
    """Causal attention of this rank's rows under a plan: q [rows, heads, dim], k and v
    [rows, kv_heads, dim] in schedule.layout's buffer order, contiguous (CPU float32 / float64
    with gloo; on a GPU bfloat16 / float16 with NCCL); schedule = RankSchedule(plan, rank, micro_batch) of the calling rank. Every
    rank of the plan must call it (collectively) with the same plan and micro-batch: the ranks
    check that first (24 bytes with every other rank) and all raise PlanMismatch naming the
    ranks that differ. group_ranks maps a plan rank to its global torch.distributed rank
    (default: the identity, the world group).
    Differentiable in q, k, v; returns O [rows, heads, dim] (and LSE [heads, rows])."""
    if not isinstance(schedule, RankSchedule):
        raise TypeError(f"schedule must be a RankSchedule, got {type(schedule).__name__}")
    if not dist.is_initialized() and schedule.rings:
        raise RuntimeError("ring_attention: torch.distributed is not initialized, and the plan has groups across ranks")
    if group_ranks is None:
        if dist.is_initialized() and dist.get_world_size() != schedule.plan.num_ranks:
            raise ValueError(
                f"the world has {dist.get_world_size()} ranks and the plan {schedule.plan.num_ranks}: pass group_ranks"
            )
        global_rank = int
    else:
        ranks = [int(r) for r in group_ranks]
        if len(ranks) != schedule.plan.num_ranks:
            raise ValueError(f"group_ranks must have the plan's {schedule.plan.num_ranks} entries, got {len(ranks)}")
        global_rank = ranks.__getitem__
    if dist.is_initialized() and global_rank(schedule.rank) != dist.get_rank():
        raise ValueError(
            f"schedule is for plan rank {schedule.rank} (global {global_rank(schedule.rank)}), this process is rank {dist.get_rank()}"
        )
    _checks.qkv(q, k, v, rows=schedule.layout.rows)
    if dist.is_initialized():
        identity = _agreement.identity(schedule.plan, schedule.micro_batch)
        _agreement.check_ring("ring_attention", identity, schedule.rank, global_rank, q.device)
    o, lse = _RingAttention.apply(q, k, v, schedule, check_scale(scale), global_rank, kernels_for(q))
    return (o, lse) if return_lse else o
