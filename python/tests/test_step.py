"""The step planner from the binding: the choice is the fastest candidate, every token of every
document lies in exactly one piece of the chosen plan, the same inputs give the same plan, and
bad arguments are refused by name."""
import math
import random

import pytest

import zeppelin_torch as zt


def step_lengths(seed, n=10):
    rng = random.Random(seed)
    return [rng.randint(64, 6000) for _ in range(n)]


@pytest.mark.parametrize("seed", range(2))
def test_plan_step_keeps_the_fastest_and_covers_every_token(seed):
    lengths = step_lengths(seed)
    d = zt.plan_step(lengths, nodes=1, gpus_per_node=4, model="7b")
    planned = [c for c in d.candidates if c.refusal is None and c.stopped_after_s is None]
    assert planned, "some candidate plans a small step"
    for c in d.candidates:
        if c.stopped_after_s is not None:
            assert c.stopped_after_s >= d.predicted_s
    assert d.predicted_s == min(c.seconds for c in planned)
    assert d.chosen == next(c.name for c in d.candidates if c.seconds == d.predicted_s)
    assert 0 < d.lower_bound_s <= d.predicted_s
    assert math.isclose(d.efficiency, d.lower_bound_s / d.predicted_s, rel_tol=1e-12)
    covered = {i: [] for i in range(len(lengths))}
    for part in d.parts:
        plan = part["plan"]
        assert plan["format"] == "zeppelin.step_plan"
        for replica in plan["replicas"]:
            for mb in replica["micro_batches"]:
                for piece in mb["pieces"]:
                    covered[part["sequences"][piece["document"]]].append((piece["begin"], piece["end"]))
    for i, pieces in covered.items():
        at = 0
        for begin, end in sorted(pieces):
            assert begin == at
            at = end
        assert at == lengths[i]
    again = zt.plan_step(lengths, nodes=1, gpus_per_node=4, model="7b", threads=2)
    assert again.json == d.json


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: zt.plan_step([100], nodes=0), ValueError, r"nodes must be"),
        (lambda: zt.plan_step([0, 5], nodes=1), ValueError, r"lengths\[0\] must be in"),
        (lambda: zt.plan_step([100], nodes=1, model="no-such-model"), zt.ZeppelinError, r"unknown model"),
        (lambda: zt.plan_step([2_000_000_000], nodes=1, gpus_per_node=2), zt.ZeppelinError, r"no candidate composition plans this step"),
    ],
)
def test_plan_step_refuses_bad_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call()
