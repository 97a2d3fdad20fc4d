"""Operators nested below the captured depth make no RecordFunction while the capture runs
(capture/torch/op_callbacks.cpp, "Quiet below the captured depth"): the dump must not change, the
nested operators must really stop reaching the callback, and a profiler on the thread must still
see every operator."""

import json
import os
import re
import unittest

import tprobe_testing as tt

# Nested calls of several kinds: composite operators (linear, layer_norm, cross_entropy), in-place
# operators and views, a custom autograd function whose backward runs operators, a reentrant
# checkpoint (a backward inside a backward), and an optimizer under no_grad.
NESTED = """
import json
import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from tprobe import PrecisionDebugger
from model import make

class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g

model, x, y = make()
norm = torch.nn.LayerNorm(x.shape[1])
opt = torch.optim.SGD(list(model.parameters()) + list(norm.parameters()), lr=0.1, momentum=0.9)
debugger = PrecisionDebugger(config_path="./config.json")
PROFILE, EXOTIC = PROFILE_FLAG, EXOTIC_FLAG
for step in range(STEPS):
    debugger.start(model)
    def train_step():
        h = norm(x)
        if EXOTIC:
            h = Square.apply(h)
        h = h.transpose(0, 1).contiguous().transpose(0, 1)
        h = (h + 1.0).mul_(0.5)
        out = torch.utils.checkpoint.checkpoint(model, h, use_reentrant=True) if EXOTIC else model(h)
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    if PROFILE:
        with torch.autograd.profiler.profile() as prof:
            train_step()
        print("PROFILED " + json.dumps(sorted({e.name for e in prof.function_events})), flush=True)
    else:
        train_step()
    debugger.stop()
    debugger.step()
    print("COUNTERS " + json.dumps(debugger.counters()), flush=True)
"""


def script(profile=False, exotic=True):
    """`exotic`: with the custom function and the reentrant checkpoint."""
    return NESTED.replace("PROFILE_FLAG", str(profile)).replace("EXOTIC_FLAG", str(exotic))


def all_counters(run):
    got = [json.loads(line.split(" ", 1)[1]) for line in run.result.stdout.splitlines() if line.startswith("COUNTERS ")]
    assert got, run.result.stdout + run.result.stderr
    return got


def counters(run):
    return all_counters(run)[-1]


def last_step(run, key):
    """A counter's growth over the run's last step."""
    got = all_counters(run)
    return got[-1][key] - got[-2][key]


def files(run, step):
    """dump.json, stack.json and construct.json of a step, with the run's own directory named alike."""
    out = {}
    for name in ("dump.json", "stack.json", "construct.json"):
        path = os.path.join(run.folder(step), name)
        with open(path, encoding="utf-8") as f:
            out[name] = re.sub(re.escape(run.dir), "RUN", f.read())
    return out


class QuietNestedTest(tt.CaptureTest):
    def test_the_dump_is_the_same_with_the_nested_operators_quiet(self):
        for level in ("L1", "mix"):
            config = tt.default_config(level=level)
            quiet = self.run_script(script(), config=config, steps=3, name=f"quiet-{level}")
            loud = self.run_script(script(), config=config, steps=3, name=f"loud-{level}",
                                   env={"TPROBE_QUIET_NESTED": "off"})
            self.assertLess(last_step(quiet, "nested_record_functions"), last_step(loud, "nested_record_functions"))
            for step in (0, 2):
                got, want = files(quiet, step), files(loud, step)
                for name in want:
                    self.assertEqual(got[name], want[name], f"{level} step{step} {name}")
            names = list(quiet.data(2))
            # The run did reach what the quiet must not hide: the backward entries, whose inputs
            # come from the autograd nodes' RecordFunctions.
            self.assertIn("Functional.layer_norm.0.backward", names)
            backward = quiet.data(2)["Functional.layer_norm.0.backward"]
            self.assertTrue(backward["input"], backward)

    def test_nested_operators_no_longer_reach_the_callback(self):
        config = tt.default_config()
        quiet = self.run_script(script(exotic=False), config=config, name="quiet", steps=3)
        loud = self.run_script(script(exotic=False), config=config, name="loud", steps=3,
                               env={"TPROBE_QUIET_NESTED": "off"})
        self.assertEqual(last_step(quiet, "operators"), last_step(loud, "operators"))
        nested_quiet, nested_loud = last_step(quiet, "nested_record_functions"), last_step(loud, "nested_record_functions")
        # Without the quiet, linear's t and addmm, the backward kernels' operators, ... all come
        # through; with it, only those the engine runs outside the nodes (the sum of two gradients).
        self.assertGreater(nested_loud, last_step(quiet, "operators"))
        self.assertLess(nested_quiet * 10, nested_loud, (nested_quiet, nested_loud))

    def test_a_profiler_on_the_thread_still_sees_every_operator(self):
        config = tt.default_config()
        run = self.run_script(script(profile=True), config=config, name="profiled", steps=3)
        profiled = [json.loads(line.split(" ", 1)[1]) for line in run.result.stdout.splitlines()
                    if line.startswith("PROFILED ")][-1]
        # Nested in linear, and run inside the backward kernels: what the quiet would hide.
        for name in ("aten::linear", "aten::addmm", "aten::t", "aten::mm", "aten::native_layer_norm"):
            self.assertIn(name, profiled)
        loud = self.run_script(script(), config=config, name="loud", steps=3, env={"TPROBE_QUIET_NESTED": "off"})
        self.assertEqual(last_step(run, "nested_record_functions"), last_step(loud, "nested_record_functions"))
        self.assertIn("Functional.layer_norm.0.forward", list(run.data()))


    def test_forked_data_loader_workers_run_functions_and_operators(self):
        # A DataLoader worker is a fork of the training process, callbacks still registered: its
        # operators, its custom Function and its nested operators must neither hang nor be dumped.
        script = """
import torch
import torch.nn.functional as F
from tprobe import PrecisionDebugger
from model import make

class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return F.linear(x, torch.eye(x.shape[-1])) * 2
    @staticmethod
    def backward(ctx, g):
        return g * 2

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        return Twice.apply(torch.full((4,), float(i))).softmax(0)

model, x, y = make()
debugger = PrecisionDebugger(config_path="./config.json")
for step in range(STEPS):
    debugger.start(model)
    for batch in torch.utils.data.DataLoader(Data(), batch_size=5, num_workers=2):
        loss = F.cross_entropy(model(batch), y[: len(batch)])
        loss.backward()
    debugger.stop()
    debugger.step()
"""
        run = self.run_script(script, steps=2, timeout=120)
        for step in (0, 1):
            names = list(run.data(step))
            # Two batches in the training process; nothing of the workers' Twice or softmax.
            self.assertEqual(names.count("Functional.cross_entropy_loss.0.forward"), 1, names)
            self.assertIn("Functional.cross_entropy_loss.1.forward", names)
            self.assertFalse([n for n in names if "softmax" in n or n.startswith("Torch.mul.")], names)


if __name__ == "__main__":
    unittest.main()
