"""The statistics memo (capture/torch/torch_values.h): an operator's input that is the previous
operator's output takes that output's statistics instead of a second read, and anything that may
have written the tensor in between makes the capture read it again."""

import json
import math
import unittest

import torch

import tprobe_testing as tt

SCRIPT = """
import json
import torch
from tprobe import PrecisionDebugger
torch.set_num_threads(1)
torch.manual_seed(0)
a = torch.randn(128, 64)  # 32 KiB: above stats_memo_min_bytes
debugger = PrecisionDebugger(config_path="./config.json")
debugger.start()
x = torch.exp(a)          # its output is kept
y = torch.sin(x)          # its input is that output: taken from the memo
x.data.mul_(2)            # x's memory written through an alias whose version counter is not x's
z = torch.cos(x)          # must see the doubled values
g = torch.tanh(z)
g.numpy()[0, 0] += 0      # touches nothing: Python between operators that writes nothing
h = torch.sigmoid(g)      # input from the memo again
debugger.stop()
print("COUNTERS " + json.dumps(debugger.counters()))
debugger.step()
"""


class StatsMemoTest(tt.CaptureTest):
    def assert_close(self, where, leaf, tensor):
        expected = tt.stats_of(tensor)
        for key in ("Max", "Min", "Mean", "Norm"):
            self.assertTrue(math.isclose(leaf[key], expected[key], rel_tol=1e-6, abs_tol=1e-7),
                            f"{where} {key}: dump {leaf[key]} != torch {expected[key]}")

    def test_reused_statistics_equal_a_fresh_read_and_a_hidden_write_is_seen(self):
        run = self.run_script(SCRIPT)
        counters = json.loads(run.result.stdout.split("COUNTERS ", 1)[1].splitlines()[0])
        data = run.data()
        torch.manual_seed(0)
        a = torch.randn(128, 64)
        x = torch.exp(a)
        z = torch.cos(2 * x)
        g = torch.tanh(z)
        self.assert_close("sin input", data["Torch.sin.0.forward"]["input_args"][0], x)
        # Without forgetting the memo at the alias's mul_, this input would be exp(a)'s statistics.
        self.assert_close("cos input", data["Torch.cos.0.forward"]["input_args"][0], 2 * x)
        self.assert_close("sigmoid input", data["Torch.sigmoid.0.forward"]["input_args"][0], g)
        # sin's, tanh's and sigmoid's inputs are their producers' outputs; cos's is not (the mul_
        # ran between them and wrote in place).
        self.assertGreaterEqual(counters["stats_reused"], 3, counters)


if __name__ == "__main__":
    unittest.main()
