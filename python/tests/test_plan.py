"""Plans from the binding: every token placed once, per-rank tensors consistent with the
shards, determinism, and bad input refused with the argument named."""
import random

import pytest
import torch

import zeppelin_torch as zt

PARTITIONERS = ["hierarchical", "even_split", "allgather", "hybrid_dp", "per_document", "ulysses", "micro_batched"]


def random_lengths(seed, n_max=40, long_max=3000):
    rng = random.Random(seed)
    return [rng.choice([rng.randint(1, 64), rng.randint(1, long_max)]) for _ in range(rng.randint(1, n_max))]


@pytest.mark.parametrize("partitioner", PARTITIONERS)
@pytest.mark.parametrize("seed", range(6))
def test_every_token_placed_once(partitioner, seed):
    lengths = random_lengths(seed)
    nodes, gpus = [(1, 4), (2, 2), (2, 4)][seed % 3]
    p = zt.plan(lengths, nodes=nodes, gpus_per_node=gpus, partitioner=partitioner)
    assert p.num_ranks == nodes * gpus
    total = sum(lengths)
    seen = torch.zeros(total, dtype=torch.int64)
    for mb in range(p.micro_batches):
        for r in range(p.num_ranks):
            layout = p.layout(r, mb)
            assert layout.rows == int(layout.cu_seqlens[-1])
            assert len(layout.token_index) == layout.rows
            seen.index_add_(0, layout.token_index, torch.ones(layout.rows, dtype=torch.int64))
            # positions and sequences agree with the shards
            for i, (seq, begin, end, group) in enumerate(layout.shards.tolist()):
                b, e = int(layout.cu_seqlens[i]), int(layout.cu_seqlens[i + 1])
                assert e - b == end - begin
                assert layout.sequence[b:e].eq(seq).all()
                assert layout.positions[b:e].tolist() == list(range(begin, end))
                if group >= 0:
                    assert r in p.groups[group].members
    assert seen.eq(1).all(), "a token was placed twice or not at all"


def test_dispatch_gathers_the_rows():
    lengths = [300, 20, 700, 5, 99]
    p = zt.plan(lengths, gpus_per_node=4)
    tokens = torch.arange(sum(lengths)) * 10
    for r in range(p.num_ranks):
        layout = p.layout(r)
        assert layout.dispatch(tokens).tolist() == (layout.token_index * 10).tolist()


def test_deterministic_fingerprint():
    lengths = random_lengths(7)
    a = zt.plan(lengths, nodes=2, gpus_per_node=4)
    b = zt.plan(torch.tensor(lengths), nodes=2, gpus_per_node=4)
    assert a.fingerprint == b.fingerprint
    assert all(torch.equal(a.shards(r), b.shards(r)) for r in range(a.num_ranks))
    c = zt.plan(lengths[::-1], nodes=2, gpus_per_node=4)
    assert c.fingerprint != a.fingerprint or lengths == lengths[::-1]


def test_schedule_steps_follow_the_ring():
    p = zt.plan([4000, 30, 30], gpus_per_node=4)
    for r in range(p.num_ranks):
        for step in zt.RankSchedule(p, r).steps():
            members = p.groups[step.group].members
            i = members.index(r)
            assert step.send_to == members[(i + 1) % len(members)]
            assert step.holds == members[(i - step.round) % len(members)]


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(lengths=[5, 0]), ValueError, r"lengths\[1\] must be in \[1, "),
        (dict(lengths=[5, 2.5]), TypeError, r"lengths\[1\] must be an int, got float"),
        (dict(lengths=[]), ValueError, "at least one sequence"),
        (dict(lengths=torch.ones(2, 2, dtype=torch.int64)), ValueError, r"lengths must be 1-D, got shape \(2, 2\)"),
        (dict(lengths=torch.ones(3)), TypeError, "lengths must hold integers, got dtype torch.float32"),
        (dict(lengths="123"), TypeError, "lengths must be a list, tuple or 1-D integer tensor, got str"),
        (dict(lengths=[5], gpus_per_node=0), ValueError, r"gpus_per_node must be in \[1, 2147483647\], got 0"),
        (dict(lengths=[5], gpus_per_node=2**40), ValueError, "gpus_per_node must be in"),
        (dict(lengths=[5], nodes=True), TypeError, "nodes must be an int, got bool"),
        (dict(lengths=[5], capacity=-1), ValueError, "capacity must be in"),
        (dict(lengths=[5], partitioner=3), TypeError, "partitioner must be a str, got int"),
        (dict(lengths=[5], partitioner="nope"), zt.ZeppelinError, r"unknown partitioner 'nope' \(valid: hierarchical"),
        (dict(lengths=[2**62, 2**62]), zt.ZeppelinError, ""),
    ],
)
def test_bad_input_is_named(kwargs, error, message):
    kwargs.setdefault("gpus_per_node", 2)
    with pytest.raises(error, match=message):
        zt.plan(**kwargs)


def test_bad_rank_and_micro_batch():
    p = zt.plan([10, 10], gpus_per_node=2)
    with pytest.raises(ValueError, match="rank must be < the plan's 2 ranks, got 2"):
        p.layout(2)
    with pytest.raises(ValueError, match="micro_batch must be < the plan's 1 micro-batches, got 1"):
        p.layout(0, 1)
    with pytest.raises(ValueError, match=r"x must have the batch's tokens on dim 0 \(at least"):
        p.layout(0).dispatch(torch.zeros(3))


@pytest.mark.parametrize("seed", range(3))
def test_cost_driven_plan_places_every_token_and_names_its_choice(seed):
    lengths = random_lengths(100 + seed, long_max=20000)
    p = zt.plan_by_cost(lengths, nodes=2, gpus_per_node=4, model="7b")
    assert p.choice in {"zeppelin_paper", "te_cp+routing+engine", "ulysses", "llama_cp", "te_cp+routing", "te_cp", "hybrid_dp",
                        "hybrid_dp+engine", "zeppelin_paper+micro_batches"}
    assert p.predicted_step_s > 0
    seen = torch.zeros(sum(lengths), dtype=torch.int64)
    for mb in range(p.micro_batches):
        for r in range(p.num_ranks):
            layout = p.layout(r, mb)
            seen.index_add_(0, layout.token_index, torch.ones(layout.rows, dtype=torch.int64))
    assert seen.eq(1).all()
    assert zt.plan_by_cost(lengths, nodes=2, gpus_per_node=4, model="7b").fingerprint == p.fingerprint
    assert zt.plan(lengths, gpus_per_node=8).choice is None


def test_cost_driven_plan_bad_input():
    with pytest.raises(zt.ZeppelinError, match="nope"):
        zt.plan_by_cost([100, 200], model="nope")
    with pytest.raises(zt.ZeppelinError):
        zt.plan_by_cost([100, 200], cluster="zz")
    with pytest.raises(TypeError, match="cluster must be a str, got int"):
        zt.plan_by_cost([100, 200], cluster=3)


@pytest.mark.parametrize("partitioner", PARTITIONERS)
def test_plans_round_trip_through_json(partitioner):
    lengths = random_lengths(200)
    p = zt.plan(lengths, nodes=2, gpus_per_node=2, partitioner=partitioner)
    text = p.to_json()
    assert '"format":"zeppelin.plan"' in text
    q = zt.read_plan(text)
    assert q.fingerprint == p.fingerprint
    assert torch.equal(q.lengths, p.lengths)
    assert all(torch.equal(q.shards(r), p.shards(r)) for r in range(p.num_ranks))
    assert q.to_json() == text


def test_a_tampered_plan_json_is_refused():
    text = zt.plan([300, 20, 7], gpus_per_node=2).to_json()
    with pytest.raises(zt.ZeppelinError, match="fingerprint"):
        zt.read_plan(text.replace('"capacity":', '"capacity":1'))
    with pytest.raises(zt.ZeppelinError):
        zt.read_plan("{not json")
    with pytest.raises(TypeError, match="text must be a str or bytes, got int"):
        zt.read_plan(3)


def test_micro_batched_plans_a_batch_over_the_capacity_in_several_passes():
    lengths = [900, 700, 650, 400, 300, 120, 64, 33]  # 3,167 tokens on 4 GPUs of 400: two passes at least
    with pytest.raises(zt.ZeppelinError, match="more tokens than nodes"):
        zt.plan(lengths, gpus_per_node=4, partitioner="hierarchical", capacity=400)
    p = zt.plan(lengths, gpus_per_node=4, partitioner="micro_batched", capacity=400)
    assert p.micro_batches >= 2
    seen = torch.zeros(sum(lengths), dtype=torch.int64)
    for mb in range(p.micro_batches):
        for r in range(p.num_ranks):
            layout = p.layout(r, mb)
            assert layout.rows <= 400
            seen.index_add_(0, layout.token_index, torch.ones(layout.rows, dtype=torch.int64))
    assert seen.eq(1).all()
