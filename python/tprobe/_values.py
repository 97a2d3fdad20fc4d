"""Python arguments and results as msprobe slots (docs/msprobe-compat.md §2.5, §2.7).

walk() visits a nested value and calls `tensor(slot, t)` for each tensor and `value(slot, v)`
for every other leaf, with slots as the capture names them: "input.0", "input.1.0", "kwargs.dim",
"output.0". Lists and tuples nest by index, dicts (namedtuples too) by key, a key that the slot
could misread quoted (key_slot: "output.'0'", "output.'head.0'"). send() captures a
leaf: it passes the value's typed facts to torch.ops.tprobe.value_*, and the C++ capture builds
msprobe's JSON leaf (core/dump_semantics.h), so the encoding exists once. No torch operator is
called here: in mix mode any operator would itself be dumped.
"""

import torch

try:
    import numpy as np
except ImportError:  # numpy is optional: its values are then dumped as null
    np = None

MAX_DEPTH = 400  # msprobe's Const.DUMP_MAX_DEPTH


def _real(v):
    """A numpy statistic as a Python float (numpy's NaN/Inf included: the capture spells them)."""
    return float(v)


def _ndarray(ops, entry, slot, a):
    if a.size == 0 or a.dtype == object:
        stats = (None, None, None, None)
    elif a.dtype == bool:
        stats = (bool(a.any()), bool(a.all()), None, None)
    else:
        f = a.astype("float64")
        stats = (_real(f.max()), _real(f.min()), _real(f.mean()), _real(np.sqrt((f * f).sum())))
    return ops.value_ndarray(entry, slot, str(a.dtype), list(a.shape), *stats)


_INT64 = (-(1 << 63), 1 << 63)


def _key_text(k):
    """A dict key as dump.json holds it: Python's json.dump turns 3 into "3", True into "true",
    None into "null" (msprobe's dicts reach dump.json that way); other keys as str()."""
    if isinstance(k, str):
        return k
    if k is True or k is False or k is None:
        return {True: "true", False: "false", None: "null"}[k]
    if isinstance(k, int):
        return int.__repr__(k)
    if isinstance(k, float):
        if k != k:
            return "NaN"
        if k in (float("inf"), float("-inf")):
            return "Infinity" if k > 0 else "-Infinity"
        return float.__repr__(k)
    return str(k)


_DIGITS = frozenset("0123456789")


def key_slot(slot, k):
    """slot + one dict key level, in the capture's slot grammar (core/dump_semantics.h,
    slot_key_append): a key that would read as a list index or as more than one level (all
    digits, empty, with a dot, or starting with an apostrophe) is quoted, ' doubled inside."""
    text = _key_text(k)
    if text and "." not in text and text[0] != "'" and not _DIGITS.issuperset(text):
        return f"{slot}.{text}"
    return slot + ".'" + text.replace("'", "''") + "'"


def send(ops, entry, slot, v):
    """Captures one non-tensor leaf: its typed facts go to the C++ capture, which builds msprobe's
    JSON leaf (core/dump_semantics.h; None and unsupported types → null)."""
    if v is None:
        return ops.value(entry, slot, "null")
    if isinstance(v, bool):
        return ops.value_scalar(entry, slot, v, "bool")
    if isinstance(v, int):
        if _INT64[0] <= v < _INT64[1]:
            return ops.value_scalar(entry, slot, v, None)
        return ops.value_scalar(entry, slot, float(v), "int")  # beyond int64: its nearest double
    if isinstance(v, float):
        return ops.value_scalar(entry, slot, v, None)
    if isinstance(v, str):
        return ops.value_text(entry, slot, "str", v)
    if isinstance(v, slice):
        parts = [v.start, v.stop, v.step]
        none_mask = sum(1 << i for i, p in enumerate(parts) if not isinstance(p, int))
        return ops.value_ints(entry, slot, "slice", [p if isinstance(p, int) else 0 for p in parts], none_mask)
    if v is Ellipsis:
        return ops.value_text(entry, slot, "ellipsis", "...")
    if isinstance(v, torch.Size):
        return ops.value_ints(entry, slot, "torch.Size", list(v), 0)
    if isinstance(v, torch.dtype):
        return ops.value_text(entry, slot, "torch.dtype", str(v))
    if isinstance(v, torch.device):
        return ops.value_text(entry, slot, "torch.device", str(v))
    if isinstance(v, torch.memory_format):
        return ops.value_memory_format(entry, slot, str(v).rsplit(".", 1)[-1])
    if isinstance(v, list) and not v:
        return ops.value(entry, slot, "[]")
    if isinstance(v, dict) and not v:
        return ops.value(entry, slot, "{}")
    if np is not None:
        if isinstance(v, np.ndarray):
            return _ndarray(ops, entry, slot, v)
        if isinstance(v, np.generic):
            return ops.value_scalar(entry, slot, v.item(), str(v.dtype))
    return ops.value(entry, slot, "null")


def walk(obj, slot, tensor, value, depth=0):
    """Visits a nested value: tensor(slot, t) for each tensor, value(slot, v) for every other leaf
    (None past MAX_DEPTH, [] and {} for empty containers); `send` captures such a leaf."""
    if isinstance(obj, torch.Tensor):
        tensor(slot, obj)
        return
    if depth >= MAX_DEPTH:
        value(slot, None)
        return
    if isinstance(obj, torch.Size):
        value(slot, obj)
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple → dict, as msprobe
        walk(dict(zip(obj._fields, obj)), slot, tensor, value, depth)
    elif isinstance(obj, (list, tuple)):
        if not obj:
            value(slot, [])
        for i, e in enumerate(obj):
            walk(e, f"{slot}.{i}", tensor, value, depth + 1)
    elif isinstance(obj, dict):
        if not obj:
            value(slot, {})
        for k, e in obj.items():
            walk(e, key_slot(slot, k), tensor, value, depth + 1)
    else:
        value(slot, obj)


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
                grad_tensors(e, key_slot(slot, k), out_tensors, out_slots, depth + 1, every)


def output_items(output):
    """msprobe's output list: a tuple or list is the list, anything else becomes [output]."""
    if isinstance(output, (list, tuple)) and not hasattr(output, "_fields"):
        return list(enumerate(output))
    return [(0, output)]
