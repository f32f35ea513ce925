"""The packers from the binding: every document placed once, micro-batches within the token
limit, each iteration of the requested size; bad arguments refused by name."""
import random

import pytest
import torch

import zeppelin_torch as zt


@pytest.mark.parametrize("method", ["original", "fixed_greedy", "fixed_exact", "wlb"])
@pytest.mark.parametrize("seed", range(4))
def test_every_document_packed_once_within_the_limit(method, seed):
    rng = random.Random(seed)
    max_tokens = 4096
    # the exact packer searches branch and bound up to a node limit: small streams for it
    count = rng.randint(1, 16 if method == "fixed_exact" else 120)
    lengths = [rng.choice([rng.randint(1, 300), rng.randint(1, max_tokens)]) for _ in range(count)]
    iterations = zt.pack(lengths, micro_batches=4, max_tokens=max_tokens, method=method)
    seen = []
    for it in iterations:
        assert len(it) == 4
        for docs in it:
            assert sum(lengths[d] for d in docs.tolist()) <= max_tokens
            seen += docs.tolist()
    assert sorted(seen) == list(range(len(lengths)))


def test_wlb_balances_better_than_arrival_order():
    rng = random.Random(9)
    lengths = [int(min(8191, rng.lognormvariate(6, 1.3))) + 1 for _ in range(600)]

    def imbalance(iterations):
        worst = []
        for it in iterations:
            work = [sum(lengths[d] ** 2 for d in docs.tolist()) for docs in it]
            if sum(work):
                worst.append(max(work) / (sum(work) / len(work)))
        return sum(worst) / len(worst)

    original = zt.pack(lengths, micro_batches=8, max_tokens=8192, method="original")
    wlb = zt.pack(lengths, micro_batches=8, max_tokens=8192, method="wlb")
    assert imbalance(wlb) < imbalance(original)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(method="nope"), zt.ZeppelinError, r"unknown packing method 'nope' \(valid: original"),
        (dict(micro_batches=0), ValueError, r"micro_batches must be in \[1, "),
        (dict(max_tokens=5), zt.ZeppelinError, "longer"),
        (dict(method=None), TypeError, "method must be a str, got NoneType"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    args = dict(micro_batches=2, max_tokens=100, method="wlb")
    args.update(kwargs)
    with pytest.raises(error, match=message):
        zt.pack([10, 50, 30], **args)
