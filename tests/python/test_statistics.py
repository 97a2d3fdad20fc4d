"""dump.json statistics (forward and backward) and task tensor's .npy files equal what torch
computes independently, in this process, for the same model and data."""

import math
import os
import unittest

import numpy as np
import torch
import torch.nn.functional as F

import tprobe_testing as tt

exec(tt.MODEL)  # make(): the model the scripts train, built here the same way


def reference():
    """Every tensor of one training step, computed op by op as the model does."""
    model, x, y = make()  # noqa: F821 (from tt.MODEL)
    w0, b0 = model.inp.weight, model.inp.bias
    w1, b1 = model.block.fc.weight, model.block.fc.bias
    w2, b2 = model.out.weight, model.out.bias
    h0 = F.linear(x, w0, b0)
    r0 = torch.relu(h0)
    h1 = F.linear(r0, w1, b1)
    r1 = torch.relu(h1)
    a = r1 + r0
    out = F.linear(a, w2, b2)
    loss = F.cross_entropy(out, y)
    for t in (h0, r0, h1, r1, a, out):
        t.retain_grad()
    loss.backward()
    g = lambda t: t.grad.detach().clone()  # noqa: E731
    return {
        "Functional.linear.0.forward": {"input_args": [x, w0, b0], "output": [h0]},
        "Functional.relu.0.forward": {"input_args": [h0], "output": [r0]},
        "Functional.linear.1.forward": {"input_args": [r0, w1, b1], "output": [h1]},
        "Functional.relu.1.forward": {"input_args": [h1], "output": [r1]},
        "Torch.add.0.forward": {"input_args": [r1, r0], "output": [a]},
        "Functional.linear.2.forward": {"input_args": [a, w2, b2], "output": [out]},
        "Functional.cross_entropy_loss.0.forward": {"input_args": [out, y], "output": [loss]},
        "Functional.cross_entropy_loss.0.backward": {"input": [torch.tensor(1.0)], "output": [g(out)]},
        "Functional.linear.2.backward": {"input": [g(out)], "output": [g(a), g(w2), g(b2)]},
        "Torch.add.0.backward": {"input": [g(a)], "output": [g(a), g(a)]},
        "Functional.relu.1.backward": {"input": [g(r1)], "output": [g(h1)]},
        # the gradient of r0 through linear.1 only (r0 also feeds the residual add)
        "Functional.linear.1.backward": {"input": [g(h1)], "output": [g(h1) @ w1.detach(), g(w1), g(b1)]},
        "Functional.relu.0.backward": {"input": [g(r0)], "output": [g(h0)]},
        "Functional.linear.0.backward": {"input": [g(h0)], "output": [None, g(w0), g(b0)]},
    }


class StatisticsTest(tt.CaptureTest):
    def assert_stats(self, where, leaf, tensor):
        self.assertEqual(leaf["type"], "torch.Tensor", where)
        self.assertEqual(leaf["dtype"], str(tensor.dtype), where)
        self.assertEqual(leaf["shape"], list(tensor.shape), where)
        expected = tt.stats_of(tensor)
        scale = max(abs(expected["Norm"]), 1e-30)
        for key in ("Max", "Min", "Norm"):
            self.assertTrue(math.isclose(leaf[key], expected[key], rel_tol=2e-6, abs_tol=1e-7 * scale),
                            f"{where} {key}: dump {leaf[key]} != torch {expected[key]}")
        # Means of gradients sit near 0: summation order matters, relative to the norm.
        tolerance = 1e-6 * scale / math.sqrt(max(tensor.numel(), 1)) + 2e-6 * abs(expected["Mean"])
        self.assertLessEqual(abs(leaf["Mean"] - expected["Mean"]), tolerance, f"{where} Mean")

    def check(self, data, expected):
        for entry, sections in expected.items():
            self.assertIn(entry, data)
            for section, tensors in sections.items():
                dumped = data[entry][section]
                self.assertGreaterEqual(len(dumped), len(tensors), f"{entry} {section}")
                for i, t in enumerate(tensors):
                    if t is None:
                        self.assertIsNone(dumped[i], f"{entry} {section}[{i}]")
                    else:
                        self.assert_stats(f"{entry} {section}[{i}]", dumped[i], t)

    def test_forward_and_backward_statistics_equal_torch(self):
        run = self.run_script(tt.TRAIN)
        data = run.data()
        self.check(data, reference())
        ce = data["Functional.cross_entropy_loss.0.forward"]
        # Non-tensor arguments in msprobe's encoding: weight=None, reduction, ignore_index, label_smoothing.
        self.assertEqual(ce["input_args"][2:], [None, {"type": "int", "value": 1}, {"type": "int", "value": -100},
                                                {"type": "float", "value": 0.0}])
        self.assertEqual(data["Torch.add.0.forward"]["input_kwargs"], {"alpha": {"type": "int", "value": 1}})
        self.assertIs(data["Functional.linear.0.forward"]["is_recompute"], False)
        self.assertIs(data["Functional.linear.0.forward"]["input_args"][1]["requires_grad"], True)
        self.assertIs(data["Functional.linear.0.backward"]["input"][0]["requires_grad"], False)

    def test_copy_mode_gives_the_same_statistics(self):
        # TPROBE_STATS_MODE=copy: the stats stage computes them from copies, not the capture.
        run = self.run_script(tt.TRAIN, env={"TPROBE_STATS_MODE": "copy"})
        self.check(run.data(), reference())

    def test_task_tensor_files_equal_the_tensors(self):
        run = self.run_script(tt.TRAIN, config=tt.default_config(task="tensor"))
        dump = run.load()
        self.assertEqual(dump["task"], "tensor")
        tensor_dir = dump["dump_data_dir"]
        self.assertEqual(tensor_dir, os.path.join(run.folder(), "dump_tensor_data"))
        files = 0
        for entry, sections in reference().items():
            for section, tensors in sections.items():
                for i, t in enumerate(tensors):
                    if t is None:
                        continue
                    leaf = dump["data"][entry][section][i]
                    category = {"input_args": "input"}.get(section, section)
                    self.assertEqual(leaf["data_name"], f"{entry}.{category}.{i}.npy")
                    saved = np.load(os.path.join(tensor_dir, leaf["data_name"]))
                    self.assertEqual(saved.dtype, t.detach().numpy().dtype, leaf["data_name"])
                    np.testing.assert_allclose(saved, t.detach().numpy(), rtol=1e-6, atol=1e-7,
                                               err_msg=leaf["data_name"])
                    if section in ("input_args", "output") and entry.endswith(".forward"):
                        np.testing.assert_array_equal(saved, t.detach().numpy(), err_msg=leaf["data_name"])
                    files += 1
        self.assertGreater(files, 40)


if __name__ == "__main__":
    unittest.main()
