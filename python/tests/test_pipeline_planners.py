"""Hydraulis' strategy and InfiniPipe's chunking from the binding: every sequence (every token)
assigned exactly once, within what the chosen schemes hold; deterministic; bad arguments
refused by name."""
import random

import pytest
import torch

import zeppelin_torch as zt


def lengths_of(seed, n=48, longest=40000):
    rng = random.Random(seed)
    return [rng.choice([rng.randint(64, 2048), rng.randint(64, longest)]) for _ in range(n)]


@pytest.mark.parametrize("seed", range(3))
def test_strategy_assigns_every_sequence_once(seed):
    lengths = lengths_of(seed)
    s = zt.strategy(lengths, gpus=16, gpus_per_node=8, model="7b")
    assert s.iteration_s > 0
    assert sum(p.tp * p.pp * p.cp for p in s.pipelines) <= 16
    seen = []
    for p in s.pipelines:
        for mb in p.micro_batches:
            seen += mb.tolist()
            assert all(lengths[i] <= p.max_len for i in mb.tolist())
    assert sorted(seen) == list(range(len(lengths)))
    again = zt.strategy(lengths, gpus=16, gpus_per_node=8, model="7b")
    assert again.iteration_s == s.iteration_s


@pytest.mark.parametrize("seed", range(3))
def test_chunking_covers_every_token_once(seed):
    lengths = lengths_of(10 + seed, n=32, longest=60000)
    c = zt.chunk(lengths, sp=8, pp=4, model="13b")
    assert c.iteration_s > 0 and c.mesh == sorted(c.mesh, reverse=True)
    covered = [torch.zeros(n, dtype=torch.int64) for n in lengths]
    for slices in c.chunks:
        for seq, begin, end in slices.tolist():
            covered[seq][begin:end] += 1
    assert all(bool(t.eq(1).all()) for t in covered), "a token is in no chunk or in two"
    assert sorted(i for p in c.pipelines for i in p) == list(range(len(c.chunks)))
    for ckpt, chunks_of in zip(c.checkpoint, c.pipelines):
        assert ckpt.shape == (4, len(chunks_of))
        assert bool((ckpt >= 0).all())


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: zt.strategy([100], gpus=0), ValueError, r"gpus must be in \[1, "),
        (lambda: zt.strategy([100], gpus=8, model="nope"), zt.ZeppelinError, "nope"),
        (lambda: zt.strategy([10**7], gpus=8, gpu_memory_gib=16.0), zt.ZeppelinError, ""),
        (lambda: zt.strategy([100], gpus=8, margin_gib=-1), ValueError, "margin_gib must be a finite number >= 0"),
        (lambda: zt.chunk([100], sp=0, pp=2), ValueError, r"sp must be in \[1, "),
        (lambda: zt.chunk([100], sp=8, pp=2, margin_gib=90.0), ValueError, r"margin_gib \(90.0\) must be below"),
        (lambda: zt.chunk([100], sp=8, pp=2, model=7), TypeError, "model must be a str, got int"),
        (lambda: zt.chunk([10**8], sp=1, pp=1, gpu_memory_gib=10.0), zt.ZeppelinError, ""),
    ],
)
def test_bad_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call()
