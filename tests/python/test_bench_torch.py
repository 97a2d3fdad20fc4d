"""bench/bench_torch.py --quick on the tiny GRU: the run ends with issue 16's table, every row
measured (a ratio against the baseline of the same run, a goal, PASS or OVER, never FAILED or
missing), and both limits printed. Only the shape is checked: the figures are the bench's to
report, not a test's to assert. Keeps the script from rotting between the runs that record figures."""

import os
import re
import subprocess
import sys
import unittest

import tprobe_testing as tt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench", "bench_torch.py")
ROWS = ["statistics L1", "statistics mix", "md5 L1", "tensor L1, step barrier", "tensor L1, async"]
CELL = re.compile(r"\d+\.\d\dx <=\d+\.\d\dx( disk)?( sust \d+\.\d\dx)? (PASS|OVER)")


class BenchTorchSmokeTest(tt.CaptureTest):
    def test_quick_run_prints_every_row(self):
        result = subprocess.run([sys.executable, BENCH, "--quick", "--model", "tiny", "--tmp", self.tmp],
                                capture_output=True, text=True, timeout=300)
        out = result.stdout
        self.assertEqual(result.returncode, 0, out + result.stderr)
        table = out[out.index("tprobe / no-tool step time"):]
        self.assertIn("tiny", table.splitlines()[1])
        for row in ROWS:
            line = next((l for l in table.splitlines() if l.strip().startswith(row + " ")), None)
            self.assertIsNotNone(line, f"row {row!r} missing:\n{table}")
            cell = line.strip()[len(row):].strip()
            self.assertRegex(cell, CELL, f"row {row!r}:\n{out}")
        self.assertRegex(table, r"noise floor: .* tiny \d+\.\d{3}x \(\d+\.\d\d-\d+\.\d\d\); a row nearer its goal")
        self.assertRegex(table, r"disk: write \+ fsync of 32 MiB .*: \d+ / \d+ MB/s")
        self.assertRegex(table, r"read pass: .* \d+\.\d\d GB/s")
        self.assertRegex(table, r"tiny: operator data .* = \d+\.\d{3}x a [\d.]+ ms baseline step")
        # Both children run with the allocator's thresholds pinned, said in the first line, and
        # every measured row gives its steps' page faults (baseline/tool).
        self.assertIn("allocator pinned (MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 "
                      "in both children)", out.splitlines()[0])
        rows = [l for l in out.splitlines() if re.match(r"  (control|statistics_L1) +\d", l)]
        self.assertEqual(len(rows), 2, out)
        for line in rows:
            self.assertRegex(line, r" \d+(\.\dk)?/\d+(\.\dk)?  ", line)

    def test_model_args_reach_the_model(self):
        """--model-args are parsed as the example's own arguments, by the function the children use:
        a wrong one is refused before anything runs; a right one is run and named in the header."""
        bad = subprocess.run([sys.executable, BENCH, "--quick", "--model", "tiny", "--configs", "control",
                              "--tmp", self.tmp, "--model-args", "--no-such-flag 1"],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(bad.returncode, 2, bad.stdout + bad.stderr)
        self.assertIn("--model-args '--no-such-flag 1': not arguments of train_gru.py", bad.stderr)
        good = subprocess.run([sys.executable, BENCH, "--quick", "--model", "tiny", "--configs", "control",
                               "--tmp", self.tmp, "--model-args", "--batch 2"],
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(good.returncode, 0, good.stdout + good.stderr)
        self.assertIn("model arguments '--batch 2'", good.stdout)

    def test_allocator_default_leaves_glibc_alone(self):
        """--allocator default pins nothing: the first line says glibc runs as it comes."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
        run = subprocess.run([sys.executable, BENCH, "--quick", "--model", "tiny", "--configs", "control",
                              "--tmp", self.tmp, "--allocator", "default"],
                             capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("allocator glibc's default", run.stdout.splitlines()[0])
        self.assertNotIn("MALLOC_", run.stdout.splitlines()[0])


if __name__ == "__main__":
    unittest.main()
