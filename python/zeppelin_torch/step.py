"""The step planner for one iteration: every candidate composition (each paper's own,
Megatron-LM-, TransformerEngine- and Ulysses-like baselines, compositions across papers) planned and
priced on the library's step simulator, the fastest kept."""
import json
from dataclasses import dataclass
from typing import List, Optional

from . import _capi, _checks


@dataclass(frozen=True)
class StepCandidate:
    name: str
    seconds: float  # predicted iteration seconds; inf when it refused or was stopped
    refusal: Optional[str]  # why it could not plan the step, None when it did
    stopped_after_s: Optional[float]  # its simulation stopped past this best price (it takes longer); None otherwise


@dataclass(frozen=True)
class StepDecision:
    chosen: str
    predicted_s: float
    lower_bound_s: float
    efficiency: float  # lower_bound_s / predicted_s
    candidates: List[StepCandidate]
    parts: List[dict]  # {"sequences": [...], "plan": <zeppelin.step_plan>} per part, run back to back
    json: str  # the decision as `zeppelin step --json` prints it (docs/formats.md)


def plan_step(lengths, *, nodes, gpus_per_node=8, model="7b", cluster="c", context=0, margin_gib=8.0, threads=1):
    """Plans one iteration of the documents `lengths` on `nodes` x `gpus_per_node` GPUs of the
    cluster preset `cluster` training `model` (preset names as the `zeppelin` tool takes them):
    every default candidate composition priced on the step simulator (`threads` block shapes
    at once; the result does not depend on it), the fastest kept. `context` is the loader's window (0: the
    longest document), `margin_gib` of each GPU kept free. Raises ZeppelinError when no
    candidate plans the step (naming the first refusal)."""
    lengths = _checks.lengths_tensor(lengths)
    nodes = _checks.positive_int("nodes", nodes)
    gpus_per_node = _checks.positive_int("gpus_per_node", gpus_per_node)
    context = _checks.non_negative_int("context", context, _checks.INT64_MAX)
    threads = _checks.positive_int("threads", threads)
    margin_gib = _checks.non_negative_number("margin_gib", margin_gib)
    handle, done = _capi.create(
        _capi.lib.zeppelin_plan_step, _capi.lib.zeppelin_step_decision_destroy,
        _capi.lengths_pointer(lengths), len(lengths), _checks.name_str("cluster", cluster), nodes, gpus_per_node,
        _checks.name_str("model", model), context, float(margin_gib) * 2**30, threads,
    )
    try:
        text = _capi.text(_capi.lib.zeppelin_step_decision_json, handle)
    finally:
        done()
    doc = json.loads(text)
    if doc.get("format") != "zeppelin.step" or doc.get("version") != 1:
        raise _capi.ZeppelinError(f"plan_step: unexpected format {doc.get('format')!r} version {doc.get('version')!r}")
    candidates = [
        StepCandidate(c["name"], float("inf") if c["seconds"] is None else float(c["seconds"]), c["refusal"], c["stopped_after_s"])
        for c in doc["candidates"]
    ]
    return StepDecision(doc["chosen"], float(doc["predicted_s"]), float(doc["lower_bound_s"]), float(doc["efficiency"]),
                        candidates, doc["parts"], text)
