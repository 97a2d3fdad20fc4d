"""Outputs of allocation-only operators (empty, empty_like, empty_strided, new_empty) are memory
nobody wrote: the dump marks them "uninitialized": true with null statistics, no checksum and no
tensor file, and a compare of two runs never fails on them (issue 12 item 4)."""

import glob
import json
import os
import subprocess
import unittest

import tprobe_testing as tt

# GARBAGE fills freed memory with a run-specific pattern first, so that empty() returns different
# bytes in the two runs: what a real run does, made certain.
SCRIPT = """
import os, torch
from tprobe import PrecisionDebugger
torch.manual_seed(0)
debugger = PrecisionDebugger(config_path="./config.json")
x = torch.randn(64, 64)
for step in range(STEPS):
    junk = torch.full((64, 64), float(os.environ.get("GARBAGE", "1")))
    del junk
    debugger.start()
    a = torch.empty(64, 64)
    b = torch.empty_like(x)
    c = x.new_empty((64, 64))
    d = torch.empty_strided((64, 64), (64, 1))
    a.copy_(x); b.fill_(2.0); c.zero_(); d.copy_(x)   # then written: from here on it is data
    y = torch.add(a, b)
    debugger.stop()
    debugger.step()
"""

ALLOCATING = ("Torch.empty.0.forward", "Torch.empty_like.0.forward", "Torch.new_empty.0.forward",
              "Torch.empty_strided.0.forward")


class UninitializedTest(tt.CaptureTest):
    def dump(self, task, summary_mode, garbage, name):
        config = tt.default_config(task=task, level="L1", summary_mode=summary_mode)
        return self.run_script(SCRIPT, config=config, env={"GARBAGE": garbage}, name=name)

    def check_marked(self, run, task):
        data = run.data()
        found = [e for e in data if any(e.startswith(p.rsplit(".", 2)[0] + ".") for p in ALLOCATING)]
        self.assertGreaterEqual(len(found), 3, list(data))
        for entry in found:
            out = data[entry]["output"][0]
            self.assertIs(out.get("uninitialized"), True, entry)
            self.assertEqual((out["Max"], out["Min"], out["Mean"], out["Norm"]), (None, None, None, None), entry)
            self.assertNotIn("md5", out)
            self.assertNotIn("data_name", out)
        # The operators that wrote into them are data as usual.
        add = data["Torch.add.0.forward"]["output"][0]
        self.assertNotIn("uninitialized", add)
        if task == "tensor":
            files = os.listdir(os.path.join(run.folder(), "dump_tensor_data"))
            self.assertFalse([f for f in files if any(f.startswith(e + ".output") for e in found)], files)
        # Garbage that reaches an operator before anything wrote it (the destination of a copy_ or
        # fill_) is uninitialized there too; once written, it is data.
        for entry, leaf in (("Tensor.copy_.0.forward", data.get("Tensor.copy_.0.forward", {}).get("input_args", [None])[0]),
                            ("Tensor.fill_.0.forward", data.get("Tensor.fill_.0.forward", {}).get("input_args", [None])[0])):
            self.assertIsNotNone(leaf, entry)
            self.assertIs(leaf.get("uninitialized"), True, entry)
        self.assertNotIn("uninitialized", data["Torch.add.0.forward"]["input_args"][0])

    def compare(self, a, b):
        out = os.path.join(self.tmp, "cmp-" + os.path.basename(a.dir))
        r = subprocess.run([os.path.join(tt.BIN_DIR, "tprobe"), "compare", a.folder(), b.folder(), "-o", out],
                           capture_output=True, text=True, timeout=120)
        rows = json.load(open(glob.glob(os.path.join(out, "compare_result*.json"))[0]))
        return r, rows

    def test_md5_runs_with_different_garbage_compare_equal(self):
        a = self.dump("statistics", "md5", "1", "a")
        b = self.dump("statistics", "md5", "7", "b")
        self.check_marked(a, "statistics")
        r, _ = self.compare(a, b)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_tensor_dump_writes_no_file_and_compare_passes(self):
        a = self.dump("tensor", "statistics", "1", "ta")
        b = self.dump("tensor", "statistics", "3", "tb")
        self.check_marked(a, "tensor")
        r, rows = self.compare(a, b)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("Uninitialized memory", json.dumps(rows))

    def test_statistics_dump_is_marked(self):
        self.check_marked(self.dump("statistics", "statistics", "5", "s"), "statistics")


if __name__ == "__main__":
    unittest.main()
