"""tprobe.tensor_format "pt": dump_tensor_data/ holds torch.save files, as msprobe writes them for
PyTorch (docs/msprobe-compat.md §2.3), that torch.load reads with the captured values; dump.json's
data_name fields name them; `tprobe compare` reads them, against themselves and against the .npy
dump of the same run."""

import csv
import glob
import os
import subprocess

import numpy as np
import torch

import tprobe_testing as tt
from test_dtypes import VALUES

# Every dtype the capture dumps, 0-d, empty, strided and expanded tensors, saved at level debug.
SAVE_VALUES = VALUES + """
from tprobe import PrecisionDebugger
debugger = PrecisionDebugger(config_path="./config.json", level="debug")
debugger.save(values(), "v")
debugger.step()
"""


# Forward and backward only: every tensor is a function of the seed, so two runs dump the same
# values (an optimizer step would dump torch.empty's uninitialised memory).
FORWARD_BACKWARD = """
from tprobe import PrecisionDebugger
from model import make
import torch.nn.functional as F
model, x, y = make()
debugger = PrecisionDebugger(config_path="./config.json")
debugger.start(model)
F.cross_entropy(model(x), y).backward()
debugger.stop()
debugger.step()
"""


def config(tensor_format=None, level="L1"):
    cfg = tt.default_config(task="tensor", level=level)
    if tensor_format is not None:
        cfg["tprobe"] = {"tensor_format": tensor_format}
    return cfg


def data_names(node):
    """Every data_name in a dump.json subtree."""
    if isinstance(node, dict):
        if "data_name" in node:
            yield node["data_name"]
        for value in node.values():
            yield from data_names(value)
    elif isinstance(node, list):
        for value in node:
            yield from data_names(value)


class TensorFormatTest(tt.CaptureTest):
    def tensor_dir(self, run):
        return os.path.join(run.folder(), "dump_tensor_data")

    def test_every_dtype_loads_with_torch(self):
        run = self.run_script(SAVE_VALUES, config=config("pt"))
        dumped = run.data()["v.0.debug"]
        scope = {}
        exec(VALUES, scope)
        expected = scope["values"]()
        files = []
        for name, want in expected.items():
            leaf = dumped[name]
            self.assertTrue(leaf["data_name"].endswith(f".{name}.pt"), leaf["data_name"])
            files.append(leaf["data_name"])
            got = torch.load(os.path.join(self.tensor_dir(run), leaf["data_name"]))
            self.assertEqual(got.dtype, want.dtype, name)
            self.assertEqual(tuple(got.shape), tuple(want.shape), name)
            self.assertFalse(got.requires_grad, name)
            self.assertTrue(got.is_contiguous(), name)
            self.assertTrue(torch.equal(got, want), f"{name}: {got} != {want}")
        self.assertEqual(sorted(os.listdir(self.tensor_dir(run))), sorted(files))

    def test_npy_stays_the_default(self):
        run = self.run_script(SAVE_VALUES, config=config())
        names = os.listdir(self.tensor_dir(run))
        self.assertTrue(names and all(n.endswith(".npy") for n in names), names)

    def test_pt_and_npy_dumps_of_one_run_agree_and_compare(self):
        pt = self.run_script(FORWARD_BACKWARD, config=config("pt"), name="pt")
        npy = self.run_script(FORWARD_BACKWARD, config=config("npy"), name="npy")
        pt_names = sorted(data_names(pt.data()))
        npy_names = sorted(data_names(npy.data()))
        self.assertGreater(len(pt_names), 20)
        self.assertEqual([n[:-len(".pt")] for n in pt_names], [n[:-len(".npy")] for n in npy_names])
        self.assertTrue(all(n.endswith(".pt") for n in pt_names))
        self.assertEqual(sorted(os.listdir(self.tensor_dir(pt))), pt_names)
        dtypes = set()
        for name in pt_names:
            got = torch.load(os.path.join(self.tensor_dir(pt), name))
            want = np.load(os.path.join(self.tensor_dir(npy), name[:-len(".pt")] + ".npy"))
            dtypes.add(got.dtype)
            self.assertEqual(tuple(got.shape), want.shape, name)
            self.assertTrue(np.array_equal(got.numpy(), want), name)
        self.assertIn(torch.int64, dtypes)  # the targets of cross_entropy

        # tprobe compare reads both formats: pt against itself, pt against npy and back.
        for a, b in ((pt, pt), (pt, npy), (npy, pt)):
            out = os.path.join(self.tmp, f"compare-{os.path.basename(a.dir)}-{os.path.basename(b.dir)}")
            result = subprocess.run([os.path.join(tt.BIN_DIR, "tprobe"), "compare", a.folder(), b.folder(),
                                     "-o", out], capture_output=True, text=True, timeout=300)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            [table] = glob.glob(os.path.join(out, "compare_result_*.csv"))
            with open(table, newline="", encoding="utf-8") as f:
                saved = {n[:-len(".pt")] for n in pt_names}
                rows = [row for row in csv.DictReader(f) if row["NPU Name"] in saved]
            self.assertEqual(len(rows), len(pt_names))
            compared = 0
            for row in rows:
                self.assertNotIn("read failed", row["Err_message"], row)
                self.assertNotIn("not found", row["Err_message"], row)
                # msprobe computes no cosine for 0-d tensors ("unsupported"); all others are equal.
                if row["NPU Tensor Shape"] == "[]":
                    continue
                self.assertEqual(float(row["MaxAbsErr"]), 0.0, row)
                if row["NPU Dtype"] == "torch.float32" and float(row["NPU l2norm"]) > 0:
                    self.assertEqual(float(row["Cosine"]), 1.0, row)
                    compared += 1
            self.assertGreater(compared, 10)

    def test_statistics_tensor_list_follows_the_format(self):
        cfg = tt.default_config()
        cfg["statistics"]["tensor_list"] = ["linear"]
        cfg["tprobe"] = {"tensor_format": "pt"}
        run = self.run_script(tt.TRAIN, config=cfg)
        names = os.listdir(self.tensor_dir(run))
        self.assertTrue(names and all(n.endswith(".pt") and "linear" in n for n in names), names)
        leaf = run.data()["Functional.linear.0.forward"]["output"][0]
        got = torch.load(os.path.join(self.tensor_dir(run), leaf["data_name"]))
        self.assertAlmostEqual(got.max().item(), leaf["Max"], places=5)

    def test_bad_value_names_the_key(self):
        run = self.run_script(tt.TRAIN, config=config("torch"), expect_ok=False)
        self.assertNotEqual(run.result.returncode, 0)
        self.assertIn('"tprobe.tensor_format": "torch" is not one of npy, pt', run.result.stderr)


if __name__ == "__main__":
    import unittest
    unittest.main()
