"""`tprobe repro DUMP --api NAME -o DIR` (tools/repro/): a real training dumps at level L1; the
script written for one call re-runs it on the CPU from the dumped tensors (or, for a statistics
dump, from tensors drawn from Max/Min) and prints msprobe's metrics, which must find the dumped
outputs and gradients equal to the bench's, and must find a dumped output changed by hand wrong."""

import os
import re
import subprocess
import sys

import numpy as np

import tprobe_testing as tt

# An embedding, a layer norm and a linear layer, forward and backward, and one random call.
TRAIN = """
import torch, torch.nn as nn, torch.nn.functional as F
from tprobe import PrecisionDebugger
torch.manual_seed(0)
emb, ln, fc = nn.Embedding(10, 8), nn.LayerNorm(8), nn.Linear(8, 3)
idx = torch.tensor([[1, 2, 3], [4, 5, 9]])
debugger = PrecisionDebugger(config_path="./config.json")
debugger.start()
h = ln(emb(idx))
h = h + 0.01 * torch.randn_like(h)
fc(h).square().sum().backward()
debugger.stop()
debugger.step()
"""

CALLS = ["Functional.linear.0", "Functional.layer_norm.0", "Functional.embedding.0"]


def line_of(output, label, section="forward output 0"):
    """The line of `label` in the block that starts with `section`."""
    block = output.split(section, 1)[1]
    for line in block.splitlines()[1:]:
        if not line.startswith("  "):
            break
        if line.strip().startswith(label):
            return line
    raise AssertionError(f"no line {label!r} under {section!r} in:\n{output}")


def metric(line, name):
    return float(re.search(rf"\b{name}=(\S+)", line).group(1))


class ReproTest(tt.CaptureTest):
    def repro(self, run, api, expect=0):
        out = os.path.join(run.dir, "repro")
        result = subprocess.run([os.path.join(tt.BIN_DIR, "tprobe"), "repro", run.folder(), "--api", api, "-o", out],
                                capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, expect, result.stdout + result.stderr)
        return out, result

    def run_repro_script(self, out, api, expect=0):
        script = os.path.join(out, f"repro_{api}.py")
        result = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=240, cwd="/")
        self.assertEqual(result.returncode, expect, result.stdout + result.stderr)
        return result.stdout

    def test_scripts_find_the_dumped_outputs_and_gradients_equal_to_the_bench(self):
        run = self.run_script(TRAIN, config=tt.default_config(task="tensor"))
        for api in CALLS:
            with self.subTest(api=api):
                out, result = self.repro(run, api)
                self.assertIn(f"repro_{api}.py", result.stdout)
                names = os.listdir(out)
                self.assertIn(f"{api}.forward.input.0.npy", names)
                self.assertIn(f"{api}.forward.output.0.npy", names)
                self.assertIn(f"{api}.backward.input.0.npy", names)
                text = self.run_repro_script(out, api)
                dumped = line_of(text, "dumped device output")
                self.assertGreater(metric(dumped, "cosine"), 0.99999, text)
                self.assertIn("status=pass", dumped)
                self.assertLess(metric(dumped, "max_abs_err"), 1e-5)
                for name in ("max_rel_err", "rmse", "small_value_err_ratio", "error_balance"):
                    metric(dumped, name)
                self.assertIn("status=pass", line_of(text, "CPU, dumped dtypes"))
                # The backward from the dumped output gradient gives the dumped weight gradient.
                grad = line_of(text, "dumped device grad", "backward: gradient of input 0")
                self.assertIn("status=pass", grad)
                self.assertTrue(text.rstrip().splitlines()[-1].startswith("result: pass"), text)

    def test_a_dumped_output_changed_by_hand_is_an_error(self):
        run = self.run_script(TRAIN, config=tt.default_config(task="tensor"))
        path = os.path.join(run.folder(), "dump_tensor_data", "Functional.linear.0.forward.output.0.npy")
        wrong = np.load(path)
        wrong[0] = -wrong[0] + 1
        np.save(path, wrong)
        out, _ = self.repro(run, "Functional.linear.0")
        text = self.run_repro_script(out, "Functional.linear.0", expect=1)
        self.assertIn("status=error", line_of(text, "dumped device output"))
        self.assertIn("status=pass", line_of(text, "CPU, dumped dtypes"))  # the kernel itself is fine
        self.assertTrue(text.rstrip().splitlines()[-1].startswith("result: error"), text)

    def test_a_statistics_dump_replays_from_random_inputs(self):
        run = self.run_script(TRAIN, config=tt.default_config())
        out, result = self.repro(run, "Functional.layer_norm.0")
        self.assertIn("tensors drawn from their statistics (random mode)", result.stdout)
        self.assertEqual(os.listdir(out), ["repro_Functional.layer_norm.0.py"])
        text = self.run_repro_script(out, "Functional.layer_norm.0")
        self.assertIn("random mode: 3 inputs drawn from their Max/Min (seed 1234)", text)
        self.assertIn("status=pass", line_of(text, "CPU, dumped dtypes"))
        self.assertIn("statistics only: Max=", line_of(text, "dumped device output"))
        self.assertEqual(text, self.run_repro_script(out, "Functional.layer_norm.0"))  # seeded: the same inputs

    def test_refusals_are_one_line_and_exit_100(self):
        run = self.run_script(TRAIN, config=tt.default_config())
        for api, message in [("Functional.linear.7", "no API Functional.linear.7"),
                             ("Torch.randn_like.0", "is not reproduced: randn_like draws random numbers")]:
            with self.subTest(api=api):
                _, result = self.repro(run, api, expect=100)
                self.assertEqual(result.stdout, "")
                self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
                self.assertTrue(result.stderr.startswith("tprobe-repro: fatal: "), result.stderr)
                self.assertIn(message, result.stderr)
        _, result = self.repro(run, "", expect=100)
        self.assertIn("--api", result.stderr)
