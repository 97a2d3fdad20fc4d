"""Task overflow_check (docs/msprobe-compat.md §3.6, §5.1): only calls with NaN/Inf in Max or Min are
written, with their tensors; after overflow_nums such calls the capture stops (tprobe-overflow
sends the capture a stop on its control endpoint) and training goes on."""

import json
import os
import unittest

import tprobe_testing as tt

# fp16 overflow at a known operator: 12**5 = 248832 > 65504, the fp16 maximum. Before it, two clean
# calls; after it, calls that only carry the Inf on (propagators). (Operators that torch 1.13
# implements for Half on CPU.)
OVERFLOW = """
import torch
from tprobe import PrecisionDebugger
torch.manual_seed(0)
debugger = PrecisionDebugger(config_path="./config.json")
x = torch.full((4, 4), 3.0, dtype=torch.float16)
for step in range(STEPS):
    debugger.start()
    y = torch.neg(x)            # clean
    z = torch.add(x, 9.0)       # clean: 12
    w = torch.pow(z, 5)         # producer: Inf in fp16
    v = torch.mul(w, 2.0)       # propagator
    u = torch.sub(v, w)         # propagator (inf - inf = nan)
    s = torch.abs(y)            # clean
    debugger.stop()
    debugger.step()
print("trained", STEPS)
"""


def overflow_config(nums):
    config = tt.default_config(task="overflow_check", level="L1")
    config.pop("statistics", None)
    config["overflow_check"] = {"overflow_nums": nums}
    return config


def anomalous(leaf):
    return isinstance(leaf, dict) and any(str(leaf.get(k)).lower() in ("inf", "-inf", "nan")
                                          for k in ("Max", "Min"))


def leaves(obj):
    if isinstance(obj, dict) and "type" in obj:
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from leaves(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from leaves(v)


class OverflowTest(tt.CaptureTest):
    def entries(self, run, step):
        path = os.path.join(run.folder(step), "dump.json")
        if not os.path.exists(path):
            return {}
        return run.data(step)

    def test_only_overflowing_calls_with_their_tensors(self):
        run = self.run_script(OVERFLOW, config=overflow_config(-1), steps=2)
        for step in (0, 1):
            data = self.entries(run, step)
            self.assertEqual(list(data), ["Torch.pow.0.forward", "Torch.mul.0.forward", "Torch.sub.0.forward"],
                             f"step {step}")
            for name, entry in data.items():
                self.assertTrue(any(anomalous(l) for l in leaves(entry)), name)
                # Every tensor of the call is saved (inputs too), as msprobe's overflow_check does.
                for leaf in leaves(entry):
                    if leaf.get("type") == "torch.Tensor":
                        self.assertTrue(os.path.exists(os.path.join(run.folder(step), "dump_tensor_data",
                                                                    leaf["data_name"])), leaf)
            self.assertEqual(run.load("dump.json", step)["task"], "overflow_check")
            # stack.json lists every forward call, dumped or not, as msprobe's does.
            stacked = sorted(n for group in run.load("stack.json", step).values() for n in group[0])
            self.assertEqual(stacked, ["Torch.abs.0.forward", "Torch.add.0.forward", "Torch.mul.0.forward",
                                       "Torch.neg.0.forward", "Torch.pow.0.forward", "Torch.sub.0.forward"])

    def test_overflow_nums_stops_the_capture_and_training_goes_on(self):
        run = self.run_script(OVERFLOW, config=overflow_config(2), steps=3)
        self.assertIn("trained 3", run.result.stdout)
        self.assertEqual(list(self.entries(run, 0)), ["Torch.pow.0.forward", "Torch.mul.0.forward"])
        self.assertEqual(self.entries(run, 1), {}, "the capture was stopped after overflow_nums calls")
        self.assertEqual(self.entries(run, 2), {})
        # msprobe writes no folder after the stop; the calls of step 0 up to it have their stacks.
        self.assertFalse(os.path.exists(run.folder(1)))
        stacked = sorted(n for group in run.load("stack.json", 0).values() for n in group[0])
        self.assertEqual(stacked, ["Torch.add.0.forward", "Torch.mul.0.forward", "Torch.neg.0.forward",
                                   "Torch.pow.0.forward"])
        self.assertIn("tprobe: tprobe-overflow stopped the capture: reached the preset overflow times, current "
                      "overflow times: 2", run.result.stderr)

    def test_default_overflow_nums_is_one_under_tprobe_run(self):
        config = overflow_config(1)
        del config["overflow_check"]  # msprobe's default: 1
        run = self.run_script(OVERFLOW, config=config, manifest="overflow_check.json", steps=2)
        self.assertEqual(list(self.entries(run, 0)), ["Torch.pow.0.forward"])
        self.assertEqual(self.entries(run, 1), {})


if __name__ == "__main__":
    unittest.main()
