"""Moving rows between a plan's attention layout and its token-balanced layout over
torch.distributed: one all_to_all_single per call, differentiable (the backward is the inverse
exchange)."""
import ctypes

import torch
import torch.distributed as dist

from . import _agreement, _capi
from .plan import Layout


class RankRelayout:
    """One rank's part of a relayout, as index tensors over peers in ascending rank order.

    send_index  LongTensor: source rows in the order they are sent (peer 0's first)
    send_counts list[int]: rows sent to each peer (the self-transfer included)
    recv_index  LongTensor: destination rows in the order they arrive
    recv_counts list[int]: rows received from each peer
    source, target: the Layouts before and after
    identity    (plan fingerprint, micro-batch, ranks): what relayout checks across ranks
    """

    def __init__(self, sends, receives, ranks, source, target, identity):
        self.send_index, self.send_counts = self._by_peer(sends, ranks)
        self.recv_index, self.recv_counts = self._by_peer(receives, ranks)
        self.source, self.target = source, target
        self.identity = identity

    @staticmethod
    def _by_peer(segments, ranks):
        # segments: rows (sequence, begin, end, peer, offset); stable sort by peer keeps buffer order
        counts = [0] * ranks
        pieces = []
        for seq, begin, end, peer, offset in sorted(segments.tolist(), key=lambda s: s[3]):
            counts[peer] += end - begin
            pieces.append(torch.arange(offset, offset + end - begin, dtype=torch.int64))
        return (torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.int64)), counts


class Relayout:
    """The remap of one micro-batch of a plan (Plan.relayout): per rank, what it sends and receives."""

    def __init__(self, plan, micro_batch, bytes_per_token):
        handle = ctypes.c_void_p()
        _capi.call(_capi.lib.zeppelin_relayout_create, plan._handle, micro_batch, bytes_per_token, ctypes.byref(handle))
        try:
            self.ranks = []
            for r in range(plan.num_ranks):
                sends = _capi.table(_capi.lib.zeppelin_relayout_segments, 5, handle, r, 0)
                receives = _capi.table(_capi.lib.zeppelin_relayout_segments, 5, handle, r, 1)
                target = _capi.table(_capi.lib.zeppelin_relayout_target, 3, handle, r)
                target = torch.cat([target, torch.full((len(target), 1), -1, dtype=torch.int64)], 1)
                self.ranks.append(
                    RankRelayout(
                        sends,
                        receives,
                        plan.num_ranks,
                        plan.layout(r, micro_batch),
                        Layout(target, plan.offsets),
                        _agreement.identity(plan, micro_batch),
                    )
                )
        finally:
            _capi.lib.zeppelin_relayout_destroy(handle)
        self.micro_batch = micro_batch

    def rank(self, r):
        if not 0 <= r < len(self.ranks):
            raise ValueError(f"rank must be in [0, {len(self.ranks)}), got {r}")
        return self.ranks[r]


def _exchange(x, send_index, send_counts, recv_index, recv_counts, rows, group):
    buf = x.index_select(0, send_index).contiguous()
    out = x.new_empty((sum(recv_counts),) + tuple(x.shape[1:]))
    dist.all_to_all_single(out, buf, recv_counts, send_counts, group=group)
    y = x.new_empty((rows,) + tuple(x.shape[1:]))
    y.index_copy_(0, recv_index, out)
    return y


class _Relayout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, rr, inverse, group):
        ctx.rr, ctx.inverse, ctx.group = rr, inverse, group
        return _move(x, rr, inverse, group)

    @staticmethod
    def backward(ctx, dy):
        return _move(dy.contiguous(), ctx.rr, not ctx.inverse, ctx.group), None, None, None


def _move(x, rr, inverse, group):
    if not inverse:
        return _exchange(x, rr.send_index, rr.send_counts, rr.recv_index, rr.recv_counts, rr.target.rows, group)
    return _exchange(x, rr.recv_index, rr.recv_counts, rr.send_index, rr.send_counts, rr.source.rows, group)


def relayout(x, rank_relayout, *, inverse=False, group=None):
    """Rows of `x` (dim 0: this rank's rows in the source layout, or the target layout when
    `inverse`) moved to the other layout. Every rank of `group` (default: the world, whose
    ranks are the plan's) must call it with its own RankRelayout of the same plan and
    micro-batch: the ranks check that first (one all-gather of 24 bytes) and all raise
    PlanMismatch naming the ranks that differ. Differentiable."""
    if not isinstance(rank_relayout, RankRelayout):
        raise TypeError(f"rank_relayout must be a RankRelayout (Relayout.rank(r)), got {type(rank_relayout).__name__}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    rows = rank_relayout.target.rows if inverse else rank_relayout.source.rows
    if x.dim() < 1 or x.shape[0] != rows:
        raise ValueError(f"x must have {rows} rows on dim 0 (this rank's layout), got shape {tuple(x.shape)}")
    if group is None and dist.is_initialized() and dist.get_world_size() != len(rank_relayout.send_counts):
        raise ValueError(
            f"the process group has {dist.get_world_size()} ranks, the plan {len(rank_relayout.send_counts)}"
        )
    if dist.is_initialized():
        _agreement.check_group("relayout", rank_relayout.identity, group, x.device)
    return _Relayout.apply(x.contiguous(), rank_relayout, inverse, group)
