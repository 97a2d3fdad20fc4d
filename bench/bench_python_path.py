#!/usr/bin/env python3
"""Per-call cost of the Python side of the PyTorch capture (python/tprobe), microseconds:

    PYTHONPATH=python TPROBE_TORCH_LIBRARY=build/lib/libtprobe_torch.so \\
        /usr/bin/python3 bench/bench_python_path.py [--calls N] [--repeats R]

What L0/mix hooks and PrecisionDebugger.save() do per non-tensor leaf (walk() over a value and
its capture) and per stack lookup (Stacks.current() at a fixed depth of 20 frames, the steady
state: the stack is already interned). The capture session writes its records to a record file
in a temp directory (no pipeline), level L0 so that no operator callback runs. It prints the
median over R repeats of N calls each; it reports and never asserts. Figures and their reading:
docs/performance.md, "Python path".
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

from tprobe import _native
from tprobe._stack import Stacks
from tprobe import _values

LEAVES = {
    "int": 3,
    "float": 0.5,
    "bool": True,
    "str": "mean",
    "None": None,
    "tuple of 3 ints": (1, 2, 3),
    "torch.Size": torch.Size([8, 16]),
    "torch.dtype": torch.float16,
}


def value_sender(ops, entry):
    """The value callback walk() gets, for the package under test (send() since the C++ capture
    encodes leaves; before that, a JSON text for ops.value)."""
    send = getattr(_values, "send", None)
    if send is not None:
        return lambda slot, v: send(ops, entry, slot, v)
    return lambda slot, text: ops.value(entry, slot, text)


def per_call_us(fn, calls, repeats):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def at_depth(depth, fn):
    if depth == 0:
        return fn()
    return at_depth(depth - 1, fn)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=7)
    opts = p.parse_args()
    ops = _native.load()
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "config.json")
        with open(config, "w") as f:
            json.dump({"task": "statistics", "level": "L0", "dump_path": os.path.join(tmp, "dump")}, f)
        options = {"endpoint": os.path.join(tmp, "records.bin"), "stacks": True,
                   "exclude_dir": _native.PACKAGE_DIR + "/"}
        ops.open(config, -1, json.dumps(options))
        ops.start()
        try:
            entry = "Module.fc.Linear.forward.0"
            value = value_sender(ops, entry)
            tensor = lambda slot, t: None  # tensors are not this bench's subject
            print(f"{'per call, us':<28}{'median':>8}")
            for name, leaf in LEAVES.items():
                us = per_call_us(lambda: _values.walk(leaf, "input.1", tensor, value), opts.calls, opts.repeats)
                print(f"{'leaf ' + name:<28}{us:8.2f}")
            stacks = Stacks(ops)
            us = at_depth(20, lambda: per_call_us(stacks.current, opts.calls, opts.repeats))
            print(f"{'stack, 20 frames':<28}{us:8.2f}")
        finally:
            ops.stop()
            ops.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
