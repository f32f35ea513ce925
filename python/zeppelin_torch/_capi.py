"""Loads zeppelin's C ABI (libzeppelin_capi, python/capi/zeppelin_capi.h) and declares its calls.

The library is looked up, in order, at $ZEPPELIN_CAPI_LIBRARY and next to this file (where the
CMake build and the install put it). Every call that returns a status goes through `call`, which
turns a failure into ZeppelinError carrying the library's message.
"""
import ctypes
import os
import pathlib

import torch

CAPI_VERSION = 1


class ZeppelinError(ValueError):
    """An input the library refused (the message names the value and what was expected)."""


def _load():
    candidates = []
    if os.environ.get("ZEPPELIN_CAPI_LIBRARY"):
        candidates.append(pathlib.Path(os.environ["ZEPPELIN_CAPI_LIBRARY"]))
    here = pathlib.Path(__file__).resolve().parent
    candidates += [here / "libzeppelin_capi.so", here / "libzeppelin_capi.dylib"]
    for path in candidates:
        if path.is_file():
            return ctypes.CDLL(str(path))
    raise ImportError(
        "zeppelin_torch: libzeppelin_capi not found (looked at "
        + ", ".join(str(p) for p in candidates)
        + "); build it with CMake (target zeppelin_capi) or set ZEPPELIN_CAPI_LIBRARY"
    )


lib = _load()

_i32, _i64, _u64, _f64 = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_double
_p, _pi64, _pi32 = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int32)

_signatures = {
    "zeppelin_capi_version": (_i32, []),
    "zeppelin_last_error": (ctypes.c_char_p, []),
    "zeppelin_plan_create": (ctypes.c_int, [_pi64, _i64, _i32, _i32, ctypes.c_char_p, _i64, _i32, ctypes.POINTER(_p)]),
    "zeppelin_plan_by_cost": (
        ctypes.c_int, [_pi64, _i64, ctypes.c_char_p, _i32, _i32, ctypes.c_char_p, _i64, ctypes.POINTER(_p)]
    ),
    "zeppelin_plan_destroy": (None, [_p]),
    "zeppelin_plan_choice": (ctypes.c_char_p, [_p]),
    "zeppelin_plan_predicted_step": (_f64, [_p]),
    "zeppelin_plan_ranks": (_i32, [_p]),
    "zeppelin_plan_micro_batches": (_i32, [_p]),
    "zeppelin_plan_groups": (_i32, [_p]),
    "zeppelin_plan_capacity": (_i64, [_p]),
    "zeppelin_plan_fingerprint": (_u64, [_p]),
    "zeppelin_plan_shards": (ctypes.c_int, [_p, _i32, _pi64, _i64, _pi64]),
    "zeppelin_plan_lengths": (ctypes.c_int, [_p, _pi64, _i64, _pi64]),
    "zeppelin_plan_json": (ctypes.c_int, [_p, ctypes.c_char_p, _i64, _pi64]),
    "zeppelin_plan_read_json": (ctypes.c_int, [ctypes.c_char_p, _i64, ctypes.POINTER(_p)]),
    "zeppelin_plan_group": (ctypes.c_int, [_p, _i32, _pi64, _i64, _pi64, _pi32, _pi32]),
    "zeppelin_relayout_create": (ctypes.c_int, [_p, _i32, _f64, ctypes.POINTER(_p)]),
    "zeppelin_relayout_destroy": (None, [_p]),
    "zeppelin_relayout_segments": (ctypes.c_int, [_p, _i32, _i32, _pi64, _i64, _pi64]),
    "zeppelin_relayout_target": (ctypes.c_int, [_p, _i32, _pi64, _i64, _pi64]),
    "zeppelin_attention_forward": (
        ctypes.c_int,
        [_i32, _i32, _i32, _i32, _f64, _i64, _i64, _i64, _i64, _p, _p, _p, _p, _p, _i64],
    ),
    "zeppelin_attention_backward": (
        ctypes.c_int,
        [_i32, _i32, _i32, _i32, _f64, _i64, _i64, _i64, _i64, _p, _p, _p, _p, _p, _p, _i64, _p, _p, _p],
    ),
    "zeppelin_lse_merge": (ctypes.c_int, [_i32, _i64, _i32, _i32, _p, _p, _i64, _p, _p, _i64]),
    "zeppelin_packing_create": (ctypes.c_int, [_pi64, _i64, ctypes.c_char_p, _i32, _i64, ctypes.POINTER(_p)]),
    "zeppelin_packing_destroy": (None, [_p]),
    "zeppelin_packing_iterations": (_i64, [_p]),
    "zeppelin_packing_table": (ctypes.c_int, [_p, _pi64, _i64, _pi64]),
    "zeppelin_strategy_create": (
        ctypes.c_int, [_pi64, _i64, _i64, _i32, ctypes.c_char_p, _f64, _f64, _i32, _u64, ctypes.POINTER(_p)]
    ),
    "zeppelin_strategy_destroy": (None, [_p]),
    "zeppelin_strategy_seconds": (_f64, [_p]),
    "zeppelin_strategy_pipelines": (ctypes.c_int, [_p, _pi64, _i64, _pi64]),
    "zeppelin_strategy_micro_batches": (ctypes.c_int, [_p, _pi64, _i64, _pi64]),
    "zeppelin_plan_step": (
        ctypes.c_int, [_pi64, _i64, ctypes.c_char_p, _i32, _i32, ctypes.c_char_p, _i64, _f64, _i32, ctypes.POINTER(_p)]
    ),
    "zeppelin_step_decision_destroy": (None, [_p]),
    "zeppelin_step_decision_seconds": (_f64, [_p]),
    "zeppelin_step_decision_json": (ctypes.c_int, [_p, ctypes.c_char_p, _i64, _pi64]),
    "zeppelin_chunking_create": (ctypes.c_int, [_pi64, _i64, _i32, _i32, ctypes.c_char_p, _f64, _i32, ctypes.POINTER(_p)]),
    "zeppelin_chunking_destroy": (None, [_p]),
    "zeppelin_chunking_seconds": (_f64, [_p]),
    "zeppelin_chunking_mesh": (ctypes.c_int, [_p, _pi64, _i64, _pi64]),
    "zeppelin_chunking_slices": (ctypes.c_int, [_p, _pi64, _i64, _pi64]),
    "zeppelin_chunking_order": (ctypes.c_int, [_p, _pi64, _i64, _pi64]),
    "zeppelin_chunking_checkpoint": (ctypes.c_int, [_p, _pi64, _i64, _pi64]),
    "zeppelin_capi_has_cuda": (_i32, []),
    "zeppelin_cuda_attention_forward": (
        ctypes.c_int,
        [_i32, _i32, _i32, _i32, _f64, _i32, _p, _p, _p, _p, _i32, _i64, _p, _p, _p, _p, _p, _p, _i64, _p],
    ),
    "zeppelin_cuda_attention_preprocess": (ctypes.c_int, [_i32, _i64, _i32, _i32, _p, _p, _p, _i64, _p]),
    "zeppelin_cuda_attention_backward": (
        ctypes.c_int,
        [_i32, _i32, _i32, _i32, _f64, _i32, _p, _p, _p, _p, _i32, _i64, _p, _p, _p, _p, _p, _p, _i64, _p, _p, _p, _p],
    ),
}
for _name, (_restype, _argtypes) in _signatures.items():
    _fn = getattr(lib, _name)
    _fn.restype, _fn.argtypes = _restype, _argtypes

if lib.zeppelin_capi_version() != CAPI_VERSION:
    raise ImportError(
        f"zeppelin_torch: libzeppelin_capi has ABI version {lib.zeppelin_capi_version()}, this package expects {CAPI_VERSION}"
    )


def call(fn, *args):
    """Calls a status-returning C function; raises ZeppelinError with the library's message on failure."""
    if fn(*args) != 0:
        raise ZeppelinError(lib.zeppelin_last_error().decode("utf-8", "replace"))


def lengths_pointer(lengths):
    """A ctypes int64 pointer to a contiguous int64 CPU tensor."""
    return ctypes.cast(lengths.data_ptr(), _pi64)


def create(fn, destroy, *args):
    """Calls a C constructor (its last argument the handle out-pointer); returns the handle and
    a finalizer to call when done (the handle is destroyed even if reading it fails)."""
    handle = ctypes.c_void_p()
    call(fn, *args, ctypes.byref(handle))
    return handle, lambda: destroy(handle)


def table(fn, width, *args):
    """Fills an int64 table through a (out, room, count) C function: a LongTensor [rows, width]."""
    count = ctypes.c_int64(0)
    call(fn, *args, None, 0, ctypes.byref(count))
    out = torch.empty((count.value, width), dtype=torch.int64)
    if count.value:
        call(fn, *args, ctypes.cast(out.data_ptr(), _pi64), count.value, ctypes.byref(count))
    return out


def text(fn, *args):
    """Reads UTF-8 text through a (out, room, length) C function."""
    length = ctypes.c_int64(0)
    call(fn, *args, None, 0, ctypes.byref(length))
    buf = ctypes.create_string_buffer(length.value)
    call(fn, *args, buf, length.value, ctypes.byref(length))
    return buf.raw[: length.value].decode("utf-8")
