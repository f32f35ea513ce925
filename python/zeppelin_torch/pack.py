"""Packing a stream of documents into micro-batches (WLB-LLM's packers), before planning each
micro-batch's placement."""
import torch

from . import _capi, _checks


def pack(lengths, *, micro_batches, max_tokens, method="wlb"):
    """Packs documents (lengths in stream order: list, tuple or 1-D integer tensor) into
    training iterations of `micro_batches` micro-batches of at most `max_tokens` tokens, with
    `method`: "original" (arrival order), "fixed_greedy", "fixed_exact" (fixed-length packing,
    greedy or exact) or "wlb" (WLB-LLM's variable-length packing with outlier queues). Every
    document is placed (the stream is flushed at its end). Returns a list of iterations, each a
    list of `micro_batches` LongTensors of document indices (possibly empty)."""
    lengths = _checks.lengths_tensor(lengths)
    micro_batches = _checks.positive_int("micro_batches", micro_batches)
    max_tokens = _checks.positive_int("max_tokens", max_tokens, _checks.INT64_MAX)
    handle, done = _capi.create(
        _capi.lib.zeppelin_packing_create, _capi.lib.zeppelin_packing_destroy,
        _capi.lengths_pointer(lengths), len(lengths), _checks.name_str("method", method), micro_batches, max_tokens,
    )
    try:
        iterations = int(_capi.lib.zeppelin_packing_iterations(handle))
        rows = _capi.table(_capi.lib.zeppelin_packing_table, 3, handle)
    finally:
        done()
    out = [[[] for _ in range(micro_batches)] for _ in range(iterations)]
    for iteration, micro_batch, document in rows.tolist():
        out[iteration][micro_batch].append(document)
    return [[torch.tensor(docs, dtype=torch.int64) for docs in it] for it in out]
