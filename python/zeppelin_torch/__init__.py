"""zeppelin_torch: zeppelin's planner, relayout and attention for PyTorch trainers.

    import zeppelin_torch as zt
    p = zt.plan(lengths, nodes=1, gpus_per_node=world)         # same on every rank
    sched = zt.RankSchedule(p, rank)                             # this rank's part
    x = sched.layout.dispatch(tokens)                            # its rows of the batch
    o = zt.ring_attention(q, k, v, sched)                        # differentiable

Host build: CPU tensors (float32, float64) and torch.distributed (gloo). See docs/pytorch.md.
"""
from ._agreement import PlanMismatch
from ._capi import ZeppelinError
from .attention import varlen_attention
from .chunk import Chunking, chunk
from .pack import pack
from .plan import Group, Layout, Plan, plan, plan_by_cost, read_plan
from .relayout import RankRelayout, Relayout, relayout
from .ring import RankSchedule, RingStep, ring_attention
from .step import StepCandidate, StepDecision, plan_step
from .strategy import Pipeline, Strategy, strategy

__all__ = [
    "Chunking",
    "Pipeline",
    "Strategy",
    "chunk",
    "strategy",
    "plan_step",
    "StepCandidate",
    "StepDecision",
    "Group",
    "Layout",
    "Plan",
    "PlanMismatch",
    "RankRelayout",
    "RankSchedule",
    "Relayout",
    "RingStep",
    "ZeppelinError",
    "pack",
    "plan",
    "plan_by_cost",
    "read_plan",
    "relayout",
    "ring_attention",
    "varlen_attention",
]
__version__ = "0.2.0"
