"""Python arguments and results as msprobe slots (msprobe-compat.md §1.5, §1.7).

walk() visits a nested value and calls `tensor(slot, t)` for each tensor and `value(slot, json)`
for every other leaf, with slots as the capture names them: "input.0", "input.1.0", "kwargs.dim",
"output.0". Lists and tuples nest by index, dicts (namedtuples too) by key. No torch operator is
called here: in mix mode any operator would itself be dumped.
"""

import json
import math

import torch

try:
    import numpy as np
except ImportError:  # numpy is optional: its values are then dumped as null
    np = None

MAX_DEPTH = 400  # msprobe's Const.DUMP_MAX_DEPTH


def _real(v):
    if math.isnan(v) or math.isinf(v):
        return repr(v)  # "nan", "inf": JSON has no token for them
    return v


def _memory_format_name(fmt):
    return str(fmt).rsplit(".", 1)[-1]


def _ndarray_leaf(a):
    leaf = {"type": "numpy.ndarray", "dtype": str(a.dtype), "shape": list(a.shape)}
    if a.size == 0 or a.dtype == object:
        leaf.update(Max=None, Min=None, Mean=None, Norm=None)
    elif a.dtype == bool:
        leaf.update(Max=bool(a.any()), Min=bool(a.all()), Mean=None, Norm=None)
    else:
        f = a.astype("float64")
        leaf.update(Max=_real(float(f.max())), Min=_real(float(f.min())), Mean=_real(float(f.mean())),
                    Norm=_real(float(np.sqrt((f * f).sum()))))
    return leaf


def leaf(v):
    """msprobe's JSON leaf of a non-tensor value (None → null, unsupported → null)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return {"type": "bool", "value": v}
    if isinstance(v, int):
        return {"type": "int", "value": v}
    if isinstance(v, float):
        return {"type": "float", "value": _real(v)}
    if isinstance(v, str):
        return {"type": "str", "value": v}
    if isinstance(v, slice):
        parts = [v.start, v.stop, v.step]
        return {"type": "slice", "value": [p if isinstance(p, int) else None for p in parts]}
    if v is Ellipsis:
        return {"type": "ellipsis", "value": "..."}
    if isinstance(v, torch.Size):
        return {"type": "torch.Size", "value": list(v)}
    if isinstance(v, torch.dtype):
        return {"type": "torch.dtype", "value": str(v)}
    if isinstance(v, torch.device):
        return {"type": "torch.device", "value": str(v)}
    if isinstance(v, torch.memory_format):
        return {"type": "torch.memory_format", "format": _memory_format_name(v)}
    if np is not None:
        if isinstance(v, np.ndarray):
            return _ndarray_leaf(v)
        if isinstance(v, np.generic):
            item = v.item()
            return {"type": str(v.dtype), "value": _real(item) if isinstance(item, float) else item}
    return None


def walk(obj, slot, tensor, value, depth=0):
    if isinstance(obj, torch.Tensor):
        tensor(slot, obj)
        return
    if depth >= MAX_DEPTH:
        value(slot, "null")
        return
    if isinstance(obj, torch.Size):
        value(slot, json.dumps(leaf(obj)))
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple → dict, as msprobe
        walk(dict(zip(obj._fields, obj)), slot, tensor, value, depth)
    elif isinstance(obj, (list, tuple)):
        if not obj:
            value(slot, "[]")
        for i, e in enumerate(obj):
            walk(e, f"{slot}.{i}", tensor, value, depth + 1)
    elif isinstance(obj, dict):
        if not obj:
            value(slot, "{}")
        for k, e in obj.items():
            walk(e, f"{slot}.{k}", tensor, value, depth + 1)
    else:
        value(slot, json.dumps(leaf(obj), allow_nan=False))


def grad_tensors(obj, slot, out_tensors, out_slots, depth=0, every=False):
    """The tensors requiring grad (every=True: all tensors) in a nested value, with their slots,
    for the backward link."""
    if isinstance(obj, torch.Tensor):
        if every or obj.requires_grad:
            out_tensors.append(obj)
            out_slots.append(slot)
    elif depth < MAX_DEPTH:
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            obj = dict(zip(obj._fields, obj))
        if isinstance(obj, (list, tuple)):
            for i, e in enumerate(obj):
                grad_tensors(e, f"{slot}.{i}", out_tensors, out_slots, depth + 1, every)
        elif isinstance(obj, dict):
            for k, e in obj.items():
                grad_tensors(e, f"{slot}.{k}", out_tensors, out_slots, depth + 1, every)


def output_items(output):
    """msprobe's output list: a tuple or list is the list, anything else becomes [output]."""
    if isinstance(output, (list, tuple)) and not hasattr(output, "_fields"):
        return list(enumerate(output))
    return [(0, output)]
