"""Distributed attention over torch.distributed (gloo, forked CPU processes) driven by plans of
every partitioner, against the single-rank reference of the whole batch: O and the gradients
of Q, K, V to 1e-12 in fp64 (1e-5 in fp32); and refusals of calls that do not match the plan."""
import random

import pytest
import torch

import zeppelin_torch as zt
from _world import run_world

PARTITIONERS = ["hierarchical", "even_split", "allgather", "hybrid_dp", "per_document", "ulysses", "cost-driven"]
HEADS, KV_HEADS, DIM = 4, 2, 8


def case_lengths(seed):
    rng = random.Random(seed)
    return [rng.choice([rng.randint(1, 24), rng.randint(20, 300)]) for _ in range(rng.randint(1, 12))]


def global_tensors(total, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(total, HEADS, DIM, generator=g, dtype=dtype)
    k = torch.randn(total, KV_HEADS, DIM, generator=g, dtype=dtype)
    v = torch.randn(total, KV_HEADS, DIM, generator=g, dtype=dtype)
    d_o = torch.randn(total, HEADS, DIM, generator=g, dtype=dtype)
    return q, k, v, d_o


def run_cases(rank, world, cases, dtype):
    """Each rank: its rows of every micro-batch of every case, through ring_attention and back."""
    out = []
    for partitioner, seed, nodes in cases:
        lengths = case_lengths(seed)
        if partitioner == "cost-driven":
            p = zt.plan_by_cost(lengths, nodes=nodes, gpus_per_node=world // nodes, capacity=-(-sum(lengths) // world))
        else:
            p = zt.plan(lengths, nodes=nodes, gpus_per_node=world // nodes, partitioner=partitioner)
        q, k, v, d_o = global_tensors(sum(lengths), dtype, seed)
        rows, rings = [], 0
        for mb in range(p.micro_batches):
            sched = zt.RankSchedule(p, rank, mb)
            rings += len(sched.rings)
            index = sched.layout.token_index
            ql, kl, vl = (t.index_select(0, index).requires_grad_() for t in (q, k, v))
            o = zt.ring_attention(ql, kl, vl, sched)
            o.backward(d_o.index_select(0, index))
            rows.append((index, o.detach(), ql.grad, kl.grad, vl.grad))
        out.append((p.fingerprint, rows, rings))
    return out


def check_against_reference(results, cases, dtype, tol):
    assert sum(r[c][2] for r in results for c in range(len(cases))) > 0, "no case cut a sequence over ranks"
    for c, (partitioner, seed, _) in enumerate(cases):
        lengths = case_lengths(seed)
        assert len({r[c][0] for r in results}) == 1, "ranks disagree on the plan"
        q, k, v, d_o = global_tensors(sum(lengths), dtype, seed)
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        cu = torch.zeros(len(lengths) + 1, dtype=torch.int64)
        cu[1:] = torch.tensor(lengths).cumsum(0)
        ref = zt.varlen_attention(q, k, v, cu)
        ref_grads = torch.autograd.grad(ref, (q, k, v), d_o)
        got = [torch.full_like(t, float("nan")) for t in (ref, *ref_grads)]
        for rank_result in results:
            for index, *tensors in rank_result[c][1]:
                for g, t in zip(got, tensors):
                    g.index_copy_(0, index, t)
        for name, g, want in zip(("O", "dQ", "dK", "dV"), got, (ref, *ref_grads)):
            err = (g - want.detach()).abs().max().item()
            assert err < tol, f"{partitioner} seed {seed}: {name} differs by {err}"


def test_every_partitioner_matches_the_single_rank_reference():
    cases = [(p, seed, nodes) for i, p in enumerate(PARTITIONERS) for seed, nodes in ((10 + i, 2), (20 + i, 1))]
    results = run_world(4, run_cases, cases, torch.float64)
    check_against_reference(results, cases, torch.float64, 1e-12)


def test_float32_on_three_ranks():
    cases = [("hierarchical", 31, 1), ("even_split", 32, 1)]
    results = run_world(3, run_cases, cases, torch.float32)
    check_against_reference(results, cases, torch.float32, 1e-5)


def refusals(rank, world):
    p = zt.plan([100, 50], gpus_per_node=world)
    other = zt.plan([100, 50], gpus_per_node=world + 1)
    sched = zt.RankSchedule(p, rank)
    rows = sched.layout.rows
    q = torch.zeros(rows, HEADS, DIM, dtype=torch.float64)
    kv = torch.zeros(rows, KV_HEADS, DIM, dtype=torch.float64)
    messages = []
    for call in (
        lambda: zt.ring_attention(q[:-1], kv, kv, sched),
        lambda: zt.ring_attention(q, kv, kv, zt.RankSchedule(p, (rank + 1) % world)),
        lambda: zt.ring_attention(q, kv, kv, zt.RankSchedule(other, rank)),
        lambda: zt.ring_attention(q, kv, kv, "schedule"),
    ):
        try:
            call()
            messages.append(None)
        except (TypeError, ValueError) as e:
            messages.append(str(e))
    return messages


def test_calls_that_do_not_match_the_plan_are_refused():
    results = run_world(2, refusals)
    for rank, messages in enumerate(results):
        assert "q must have" in messages[0] and "rows (the layout's tokens)" in messages[0]
        assert f"schedule is for plan rank {(rank + 1) % 2}" in messages[1]
        assert "the world has 2 ranks and the plan 3" in messages[2]
        assert "schedule must be a RankSchedule, got str" in messages[3]


def two_plans(rank, world):
    """Ranks 0, 2 run one plan and ranks 1, 3 another, side by side (group_ranks maps them)."""
    ranks = [0, 2] if rank % 2 == 0 else [1, 3]
    lengths = case_lengths(40 + rank % 2)
    p = zt.plan(lengths, gpus_per_node=2, partitioner="even_split")
    sched = zt.RankSchedule(p, ranks.index(rank))
    q, k, v, d_o = global_tensors(sum(lengths), torch.float64, 40 + rank % 2)
    index = sched.layout.token_index
    ql, kl, vl = (t.index_select(0, index).requires_grad_() for t in (q, k, v))
    o = zt.ring_attention(ql, kl, vl, sched, group_ranks=ranks)
    o.backward(d_o.index_select(0, index))
    return p.fingerprint, [(index, o.detach(), ql.grad, kl.grad, vl.grad)], len(sched.rings)


def test_group_ranks_run_two_plans_side_by_side():
    results = run_world(4, two_plans)
    for parity in (0, 1):
        cases = [("even_split", 40 + parity, 1)]
        check_against_reference([[results[parity]], [results[parity + 2]]], cases, torch.float64, 1e-12)


def mismatched_plans(rank, world):
    """Each rank plans its own batch or capacity (as a rank that re-planned alone would); every
    call must raise PlanMismatch on every rank before moving anything, and a matching call
    afterwards must still run (no message of the refused call left behind)."""
    lengths = [100, 50] if rank == 0 else [60, 90]
    cases = (
        zt.plan(lengths, gpus_per_node=world, partitioner="even_split"),  # another batch
        zt.plan([100, 50], gpus_per_node=world, partitioner="even_split", capacity=75 + 25 * rank),  # another capacity
    )
    messages = []
    for p in cases:
        sched = zt.RankSchedule(p, rank)
        q = torch.zeros(sched.layout.rows, HEADS, DIM, dtype=torch.float64)
        kv = torch.zeros(sched.layout.rows, KV_HEADS, DIM, dtype=torch.float64)
        try:
            zt.ring_attention(q, kv, kv, sched)
            messages.append(None)
        except zt.PlanMismatch as e:
            messages.append(str(e))
    same = zt.plan([100, 50], gpus_per_node=world, partitioner="even_split")
    rr = same.relayout().rank(rank) if rank == 0 else zt.plan([60, 90], gpus_per_node=world).relayout().rank(rank)
    try:
        zt.relayout(torch.zeros(rr.source.rows, 3, dtype=torch.float64), rr)
        messages.append(None)
    except zt.PlanMismatch as e:
        messages.append(str(e))
    sched = zt.RankSchedule(same, rank)
    q = torch.ones(sched.layout.rows, HEADS, DIM, dtype=torch.float64)
    kv = torch.ones(sched.layout.rows, KV_HEADS, DIM, dtype=torch.float64)
    messages.append(zt.ring_attention(q, kv, kv, sched).shape[0])
    return messages


def test_ranks_with_different_plans_are_refused_on_every_rank():
    results = run_world(2, mismatched_plans)
    for rank, messages in enumerate(results):
        for m in messages[:2]:
            assert m is not None, f"rank {rank}: a mismatched ring_attention ran"
            assert m.startswith("ring_attention: the ranks hold different plans: ranks ['0 (global 0)'] hold plan 0x")
            assert "ranks ['1 (global 1)'] hold plan 0x" in m and m.endswith("refusing to run")
        assert messages[2] is not None and messages[2].startswith("relayout: the ranks hold different plans: ranks ['0'] hold plan")
        assert messages[3] > 0
    assert results[0][:3] == results[1][:3], "the ranks must raise the same message"
