"""The cross-rank plan check of the distributed calls (ring_attention, relayout), as the C++
engines do it (exec/plan_agreement.hpp): before its first transfer, a call's ranks exchange
what they are about to run - the plan's fingerprint, the micro-batch and the plan's rank
count - and when they differ every rank raises the same PlanMismatch, naming the ranks on each
side, instead of exchanging mismatched rounds (silently wrong attention when the sizes happen
to agree, a hang, or gloo aborting the interpreter when they do not).

It runs on every call, 24 bytes with each other rank of the call: a call cannot skip it once
it passed, since a rank that re-planned would then be left exchanging alone."""
import torch
import torch.distributed as dist


class PlanMismatch(ValueError):
    """The ranks of a distributed call hold different plans (or micro-batches): raised on every
    rank of the call, before anything moved. `identities` lists each rank's (fingerprint,
    micro_batch, ranks) in call-rank order."""

    def __init__(self, message, identities):
        super().__init__(message)
        self.identities = identities


def _signed(fingerprint):
    return fingerprint - (1 << 64) if fingerprint >= (1 << 63) else fingerprint


def identity(plan, micro_batch):
    """What a rank contributes to the check: (fingerprint, micro_batch, ranks) as int64s."""
    return (_signed(plan.fingerprint), int(micro_batch), int(plan.num_ranks))


def _check(what, rows, me, names):
    """Raises PlanMismatch unless every rank's row equals this rank's (rows[me])."""
    rows = [tuple(int(v) for v in row) for row in rows]
    if all(row == rows[me] for row in rows):
        return
    sides = {}
    for r, row in enumerate(rows):
        sides.setdefault(row, []).append(names(r))
    described = "; ".join(
        f"ranks {ranks} hold plan {fp & ((1 << 64) - 1):#018x} (micro-batch {mb}, {n} ranks)" for (fp, mb, n), ranks in sides.items()
    )
    raise PlanMismatch(f"{what}: the ranks hold different plans: {described}; refusing to run", rows)


def check_ring(what, mine, rank, global_rank, device):
    """The check of `mine` (identity()) among the plan's ranks (rank r is global_rank(r)), by
    point-to-point messages: every one of them calls it, whatever group the world has."""
    n = mine[2]
    mine = torch.tensor(mine, dtype=torch.int64, device=device)
    rows = [mine if r == rank else torch.empty_like(mine) for r in range(n)]
    ops = []
    for r in range(n):
        if r != rank:
            ops.append(dist.P2POp(dist.isend, mine, global_rank(r)))
            ops.append(dist.P2POp(dist.irecv, rows[r], global_rank(r)))
    if ops:
        for request in dist.batch_isend_irecv(ops):
            request.wait()
    _check(what, [row.tolist() for row in rows], rank, lambda r: f"{r} (global {global_rank(r)})")


def check_group(what, mine, group, device):
    """The check of `mine` (identity()) among the ranks of `group` (None: the world), by one
    all-gather."""
    mine = torch.tensor(mine, dtype=torch.int64, device=device)
    rows = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(rows, mine, group=group)
    _check(what, [row.tolist() for row in rows], dist.get_rank(group), str)
