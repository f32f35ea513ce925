"""The remap over torch.distributed: each rank ends with exactly the rows of its
token-balanced layout, the inverse restores the attention layout, the balanced layout is
balanced, and gradients flow back through the exchange."""
import pytest
import torch

import zeppelin_torch as zt
from _world import run_world

CASES = [("hierarchical", [900, 40, 33, 7, 300, 12], 2), ("ulysses", [500, 20, 20, 260], 1), ("even_split", [77, 5, 640], 2)]


def move(rank, world, cases):
    out = []
    for partitioner, lengths, nodes in cases:
        p = zt.plan(lengths, nodes=nodes, gpus_per_node=world // nodes, partitioner=partitioner)
        tokens = torch.arange(sum(lengths), dtype=torch.float64).unsqueeze(1).repeat(1, 3)
        rr = p.relayout().rank(rank)
        x = rr.source.dispatch(tokens).requires_grad_()
        y = zt.relayout(x, rr)
        back = zt.relayout(y, rr, inverse=True)
        (y * torch.arange(1, 4, dtype=torch.float64)).sum().backward()
        out.append((y.detach(), rr.target.token_index, back.detach(), x.detach(), x.grad, rr.target.rows))
    return out


def test_relayout_moves_every_row_to_its_balanced_place():
    results = run_world(4, move, CASES)
    for c, (_, lengths, _) in enumerate(CASES):
        rows = []
        for rank_result in results:
            y, target_index, back, x, grad, n = rank_result[c]
            assert torch.equal(y[:, 0].long(), target_index), "a row landed in the wrong place"
            assert torch.equal(back, x), "the inverse did not restore the attention layout"
            assert torch.equal(grad, torch.arange(1, 4, dtype=torch.float64).expand_as(grad))
            rows.append(n)
        assert sum(rows) == sum(lengths)
        assert max(rows) - min(rows) <= 1, f"token-balanced layout not balanced: {rows}"


def test_bad_arguments():
    p = zt.plan([10, 30], gpus_per_node=2)
    rr = p.relayout().rank(0)
    with pytest.raises(ValueError, match=r"x must have \d+ rows on dim 0"):
        zt.relayout(torch.zeros(1000), rr)
    with pytest.raises(TypeError, match="rank_relayout must be a RankRelayout"):
        zt.relayout(torch.zeros(3), p)
    with pytest.raises(ValueError, match="micro_batch must be < the plan's 1"):
        p.relayout(micro_batch=3)
