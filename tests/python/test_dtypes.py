"""Statistics of every dtype and odd tensor the capture meets (docs/msprobe-compat.md §2.6), and
non-tensor arguments (§2.7), compared with what torch computes."""

import math
import os
import unittest

import torch

import tprobe_testing as tt

VALUES = """
import torch
torch.manual_seed(0)
def values():
    base = torch.randn(4, 6) * 3
    return {
        "f32": base, "f64": base.double(), "f16": base.half(), "bf16": base.bfloat16(),
        "i64": torch.arange(-5, 7).reshape(3, 4), "u8": torch.arange(0, 200, 7, dtype=torch.uint8),
        "boolean": base > 0, "zero_dim": torch.tensor(423), "empty": torch.zeros(0, 3),
        "strided": base.t(), "expanded": torch.randn(3, 1).expand(3, 5),
        "complex": torch.complex(base, base * 2),
    }
"""

SCRIPT = VALUES + """
from tprobe import PrecisionDebugger
import torch.nn.functional as F
debugger = PrecisionDebugger(config_path="./config.json", level="debug")
debugger.save(values(), "v")
debugger.save([1, 2.5, True, "s", None, slice(1, None, 2), torch.float16, torch.Size([2, 3])], "leaves")
debugger.step()
debugger2 = PrecisionDebugger()
assert debugger2 is debugger  # one per process, as msprobe's
"""


class DtypeTest(tt.CaptureTest):
    def test_statistics_of_every_dtype(self):
        run = self.run_script(SCRIPT)
        dumped = run.data()["v.0.debug"]
        scope = {}
        exec(VALUES, scope)
        for name, t in scope["values"]().items():
            leaf = dumped[name]
            self.assertEqual(leaf["dtype"], str(t.dtype), name)
            self.assertEqual(leaf["shape"], list(t.shape), name)
            if name == "empty":
                self.assertEqual([leaf[k] for k in ("Max", "Min", "Mean", "Norm")], [None] * 4)
                continue
            if name == "boolean":
                self.assertEqual((leaf["Max"], leaf["Min"], leaf["Mean"], leaf["Norm"]),
                                 (bool(t.any()), bool(t.all()), None, None))
                continue
            if name == "zero_dim":
                self.assertEqual([leaf[k] for k in ("Max", "Min", "Mean", "Norm")], [423] * 4)
                continue
            if name == "complex":
                a = t.abs()
                expected = {"Max": a.max().item(), "Min": a.min().item(), "Mean": a.mean().item(), "Norm": None}
            else:
                expected = tt.stats_of(t)
            for key, want in expected.items():
                if want is None:
                    self.assertIsNone(leaf[key], f"{name} {key}")
                else:
                    # In-dtype statistics (fp16, bf16) may round their last place differently.
                    tolerance = {"f16": 2e-3, "bf16": 1e-2}.get(name, 1e-5)
                    self.assertTrue(math.isclose(leaf[key], want, rel_tol=tolerance, abs_tol=1e-5),
                                    f"{name} {key}: dump {leaf[key]} != torch {want}")

    def test_half_means_are_torchs_own_in_place_and_in_a_stage(self):
        # msprobe's Mean is torch.mean, which on the CPU rounds a float16/bfloat16 sum to the dtype
        # before dividing in torch 1.13 and not in torch 2.2 and later: the capture asks its torch
        # which, and the dump must hold torch's value exactly, whether the capture or a stage
        # computed it (TPROBE_STATS_MODE copy).
        script = '''
import torch
from tprobe import PrecisionDebugger
torch.manual_seed(3)
debugger = PrecisionDebugger(config_path="./config.json", level="debug")
halves = {f"{dtype}_{n}": (torch.randn(n) * 0.7 + 0.4).to(getattr(torch, dtype))
          for dtype in ("bfloat16", "float16") for n in (5, 13, 640, 4099, 70001)}
halves["probe"] = torch.full((5,), 1.9921875, dtype=torch.bfloat16)
debugger.save(halves, "h")
debugger.step()
torch.save(halves, "halves.pt")
'''
        for mode in ("auto", "copy"):
            with self.subTest(mode=mode):
                run = self.run_script(script, env={"TPROBE_STATS_MODE": mode}, name=f"half_{mode}")
                dumped = run.data()["h.0.debug"]
                halves = torch.load(os.path.join(run.dir, "halves.pt"))
                for name, t in halves.items():
                    mean = t.mean().item()
                    if math.isnan(mean):
                        self.assertTrue(math.isnan(dumped[name]["Mean"]), name)
                    else:
                        self.assertEqual(dumped[name]["Mean"], mean, f"{name}: dump {dumped[name]['Mean']}")

    def test_non_tensor_leaves(self):
        run = self.run_script(SCRIPT)
        self.assertEqual(run.data()["leaves.0.debug"], [
            {"type": "int", "value": 1}, {"type": "float", "value": 2.5}, {"type": "bool", "value": True},
            {"type": "str", "value": "s"}, None, {"type": "slice", "value": [1, None, 2]},
            {"type": "torch.dtype", "value": "torch.float16"}, {"type": "torch.Size", "value": [2, 3]}])

    def test_more_leaves_and_unreadable_tensors(self):
        # Leaves encoded by the C++ capture from their typed facts (core/dump_semantics.h), and
        # tensors tprobe cannot read, sent as facts: dtype and shape, statistics null.
        script = """
import numpy as np
import torch
from tprobe import PrecisionDebugger
debugger = PrecisionDebugger(config_path="./config.json", level="debug")
debugger.save([torch.channels_last, Ellipsis, float("nan"), float("-inf"), 2**70, torch.device("cpu"),
               np.float32(0.5), np.int64(-3), np.array([[1.0, -2.0]]), np.array([True, False]), [], {}], "more")
debugger.save({"q": torch.quantize_per_tensor(torch.ones(2, 3), 0.1, 0, torch.qint8),
               "sparse": torch.eye(3).to_sparse()}, "odd")
debugger.step()
"""
        data = self.run_script(script).data()
        more = data["more.0.debug"]
        self.assertEqual(more[:2], [{"type": "torch.memory_format", "format": "channels_last"},
                                    {"type": "ellipsis", "value": "..."}])
        # Non-finite reals as Python's json writes them (NaN, -Infinity tokens), as msprobe does.
        self.assertEqual(more[2]["type"], "float")
        self.assertTrue(math.isnan(more[2]["value"]))
        self.assertEqual(more[3], {"type": "float", "value": float("-inf")})
        self.assertEqual(more[4], {"type": "int", "value": float(2**70)})
        self.assertEqual(more[5:8], [{"type": "torch.device", "value": "cpu"}, {"type": "float32", "value": 0.5},
                                     {"type": "int64", "value": -3}])
        self.assertEqual(more[8], {"type": "numpy.ndarray", "dtype": "float64", "shape": [1, 2], "Max": 1.0,
                                   "Min": -2.0, "Mean": -0.5, "Norm": math.sqrt(5.0)})
        self.assertEqual(more[9], {"type": "numpy.ndarray", "dtype": "bool", "shape": [2], "Max": True,
                                   "Min": False, "Mean": None, "Norm": None})
        self.assertEqual(more[10:], [[], {}])
        odd = data["odd.0.debug"]
        nulls = {"Max": None, "Min": None, "Mean": None, "Norm": None, "requires_grad": False}
        self.assertEqual(odd["q"], {"type": "torch.Tensor", "dtype": "torch.qint8", "shape": [2, 3], **nulls})
        self.assertEqual(odd["sparse"], {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [3, 3], **nulls})
        self.assertEqual(list(odd["q"]), ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad"])

    def test_python_number_operand(self):
        # `x * 2` passes the 2 as a wrapped 0-d tensor: dumped as the number msprobe shows.
        script = """
import torch
from tprobe import PrecisionDebugger
debugger = PrecisionDebugger(config_path="./config.json")
x = torch.ones(3)
debugger.start()
y = x * 2
z = x.sum(dim=0, keepdim=True)
debugger.stop()
debugger.step()
"""
        data = self.run_script(script).data()
        self.assertEqual(data["Torch.mul.0.forward"]["input_args"][1], {"type": "int", "value": 2})
        s = data["Torch.sum.0.forward"]
        self.assertEqual(s["input_args"][1:], [[{"type": "int", "value": 0}], {"type": "bool", "value": True}])
        self.assertEqual(s["input_kwargs"], {"dtype": None})


if __name__ == "__main__":
    unittest.main()
