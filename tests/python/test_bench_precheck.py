"""bench/bench_precheck.py --quick: a real dump, both pre-check runs and the float64 baseline are
measured and printed with APIs/s, MB/s and the ratio against the goal (MET or OVER, never missing).
Only the shape is checked: the figures are the bench's to report. And the bench's hand-built
resnet18 is torchvision's (same parameters and buffers, same shapes) where torchvision is there."""

import importlib.util
import os
import re
import subprocess
import sys
import unittest

import torch

import tprobe_testing as tt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench", "bench_precheck.py")


def bench_module():
    spec = importlib.util.spec_from_file_location("bench_precheck", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BenchPrecheckSmokeTest(tt.CaptureTest):
    def test_quick_run_prints_every_figure(self):
        result = subprocess.run([sys.executable, BENCH, "--quick", "--jobs", "2", "--tmp", self.tmp],
                                capture_output=True, text=True, timeout=300)
        out = result.stdout
        self.assertEqual(result.returncode, 0, out + result.stderr)
        self.assertRegex(out, r"dump: \d+ tensor files, \d+\.\d MB, in")
        self.assertRegex(out, r"baseline: one float64 training step .*: \d+\.\d ms \(best of 1\)")
        apis = r"(\d+) APIs \(\d+ pass, \d+ warning, \d+ error, \d+ SKIP\): \d+\.\d APIs/s, \d+\.\d MB/s; \d+\.\d\dx the float64 step"
        parallel = re.search(r"precheck -j 2: \d+\.\d\d s wall, \d+\.\d\d s CPU \(best of 1\); " + apis
                             + r" \(goal <=1\.5x\) (MET|OVER)", out)
        serial = re.search(r"precheck -j 1: .*; " + apis + "$", out, re.M)
        self.assertIsNotNone(parallel, out)
        self.assertIsNotNone(serial, out)
        self.assertGreater(int(parallel.group(1)), 100, out)  # a resnet18 step: conv, bn, relu, the optimizer's ops
        self.assertEqual(parallel.group(1), serial.group(1), out)
        self.assertEqual(os.listdir(self.tmp), [], "the dump and CSVs are removed without --keep")

    def test_resnet18_is_torchvisions(self):
        try:
            import torchvision
        except ImportError:
            self.skipTest("torchvision is not installed")
        ours = bench_module().ResNet18(num_classes=10).state_dict()
        theirs = torchvision.models.resnet18(num_classes=10).state_dict()
        self.assertEqual(list(ours), list(theirs))
        for name, tensor in theirs.items():
            self.assertEqual(ours[name].shape, tensor.shape, name)
        torch.manual_seed(0)
        x = torch.randn(2, 3, 32, 32)
        model = bench_module().ResNet18(num_classes=10)
        reference = torchvision.models.resnet18(num_classes=10)
        reference.load_state_dict(model.state_dict())
        model.eval(), reference.eval()
        self.assertTrue(torch.allclose(model(x), reference(x)))


if __name__ == "__main__":
    unittest.main()
