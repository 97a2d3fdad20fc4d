"""dump.json statistics (forward and backward) and task tensor's .npy files equal what torch
computes independently, in this process, for the same model and data."""

import json
import math
import os
import textwrap
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
        # Non-tensor arguments in msprobe's encoding: weight=None, reduction (ATen's int 1 as the str
        # F.cross_entropy took), ignore_index, label_smoothing.
        self.assertEqual(ce["input_args"][2:], [None, {"type": "str", "value": "mean"}, {"type": "int", "value": -100},
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


# A tensor read as one operator's output is not read again as the next one's input while its
# storage's version counter has not moved (capture_state.h, content_of). Every way of writing
# it in between must be seen: through the tensor, through a second tensor on the same storage
# with its own version counter (`.data`), and while the capture is off.
REUSE = textwrap.dedent("""
    import json, torch
    from tprobe import PrecisionDebugger
    torch.set_num_threads(1)
    torch.manual_seed(0)
    debugger = PrecisionDebugger(config_path="./config.json")
    x = torch.randn(64, 32)
    seen = {}
    for step in range(STEPS):
        debugger.start()
        y = torch.relu(x)
        seen["Torch.sigmoid.0.forward"] = y.clone()
        torch.sigmoid(y)                  # y as read at relu's end: reused
        y.data.mul_(2)                    # its own version counter; the operator is watched
        seen["Torch.tanh.0.forward"] = y.clone()
        torch.tanh(y)
        y.detach().add_(1)                # shares y's counter
        seen["Torch.neg.0.forward"] = y.clone()
        torch.neg(y)
        debugger.stop()
        y.data.sub_(3)                    # while the capture is off
        debugger.start()
        seen["Torch.exp.0.forward"] = y.clone()
        torch.exp(y)
        debugger.stop()
        debugger.step()
    torch.save(seen, "seen.pt")
    with open("counters.json", "w") as f:
        json.dump(debugger.counters(), f)
    debugger.close()
""")


# What is known of a content outlives the gap between stop() and the next start() while the gap
# is watched (capture_state.h, watch_on): a weight the optimizer wrote at the end of one step is
# not read again at the start of the next. A write in the gap, even through `.data`, is seen; a gap
# longer than the watch (an evaluation loop) forgets everything, so a write after it is read too.
GAP = textwrap.dedent("""
    import json, os, torch
    from tprobe import PrecisionDebugger
    torch.set_num_threads(1)
    torch.manual_seed(0)
    debugger = PrecisionDebugger(config_path="./config.json")
    gap_ops, gap_write = int(os.environ["GAP_OPS"]), os.environ["GAP_WRITE"] == "1"
    w = torch.randn(64, 32)
    s = torch.randn(8)
    seen = {}
    for step in range(STEPS):
        seen[step] = w.clone()            # in the gap: a read, not a write
        debugger.start()
        torch.neg(w)                      # w as the last step left it
        with torch.no_grad():
            w.mul_(1.5)                   # read as its result: what the next step starts from
        debugger.stop()
        debugger.step()
        known = debugger.counters()["contents_known"]
        for _ in range(gap_ops):
            torch.neg(s)
        if gap_write:
            w.data.sub_(0.25)             # a counter of its own: only the watch can see it
    torch.save(seen, "seen.pt")
    with open("counters.json", "w") as f:
        json.dump(dict(debugger.counters(), known_in_gap=known), f)
    debugger.close()
""")


class StatisticsReuse(tt.CaptureTest):
    assert_stats = StatisticsTest.assert_stats

    def run_reuse(self, name, env=None, config=None):
        run = self.run_script(REUSE, name=name, env=env, config=config)
        with open(os.path.join(run.dir, "counters.json")) as f:
            counters = json.load(f)
        return run, counters, torch.load(os.path.join(run.dir, "seen.pt"))

    def test_inputs_written_in_every_way_are_read_again(self):
        run, counters, seen = self.run_reuse("reuse")
        data = run.data()
        for entry, tensor in seen.items():
            self.assert_stats(entry, data[entry]["input_args"][0], tensor)
        # At least sigmoid's input (relu's output) came from the statistics read before.
        self.assertGreaterEqual(counters["stats_reused"], 1, counters)
        _, counters_off, _ = self.run_reuse("off", env={"TPROBE_REUSE_STATS": "off"})
        self.assertEqual(counters_off["stats_reused"], 0, counters_off)
        # The writing operators not dumped (list): their results never renew what is known of
        # y's storage; only their schemas (Tensor(a!) self) tell that they write it.
        listed = ["relu", "sigmoid", "tanh", "neg", "exp", "clone"]
        run, _, seen = self.run_reuse("listed", config=tt.default_config(list=listed))
        data = run.data()
        self.assertNotIn("Tensor.mul_.0.forward", data)
        for entry, tensor in seen.items():
            self.assert_stats(entry + " (writers not dumped)", data[entry]["input_args"][0], tensor)

    def test_a_watched_gap_keeps_contents_and_a_long_one_forgets_them(self):
        steps = 3
        reused = {}
        for name, ops, write in (("kept", 0, "0"), ("written", 0, "1"), ("long", 5000, "1")):
            run = self.run_script(GAP, steps=steps, name=name, env={"GAP_OPS": str(ops), "GAP_WRITE": write})
            with open(os.path.join(run.dir, "counters.json")) as f:
                counters = json.load(f)
            reused[name] = counters["stats_reused"]
            # Each step captures four tensors of w's 8 KiB (neg's input and result, mul_'s input
            # and result): every one not reused was read, and nothing else.
            self.assertEqual(counters["stats_bytes_read"], (4 * steps - counters["stats_reused"]) * 64 * 32 * 4,
                             f"{name}: {counters}")
            # Into the gap goes only what is alive: w, not neg's result nor the scalar operand
            # (dead storages' records would keep their memory fragmenting the heap).
            self.assertEqual(counters["known_in_gap"], 1, name)
            seen = torch.load(os.path.join(run.dir, "seen.pt"))
            for step in range(steps):
                self.assert_stats(f"{name} step {step}", run.data(step)["Torch.neg.0.forward"]["input_args"][0],
                                  seen[step])
        # Every step after the first found w as the previous one left it, unless written.
        self.assertEqual(reused["kept"], reused["written"] + steps - 1, reused)
        self.assertEqual(reused["long"], reused["written"], reused)

    def test_a_model_dumps_the_same_with_and_without_reuse(self):
        for config, name in ((tt.default_config(), "L1"), (tt.default_config(level="mix"), "mix"),
                             (tt.default_config(summary_mode="md5"), "md5")):
            on = self.run_script(tt.TRAIN, config=config, steps=2, name=name + "-on")
            off = self.run_script(tt.TRAIN, config=config, steps=2, name=name + "-off",
                                  env={"TPROBE_REUSE_STATS": "off"})
            for step in (0, 1):
                self.assertEqual(on.data(step), off.data(step), f"{name} step {step}")


# Views whose bytes are not in C order: the capture gathers them in C order and reads them in
# place, as the stats stage reads the copy it is sent (TPROBE_STATS_MODE=copy); the sums run in
# the same order, so the two dumps are equal bit for bit, and nothing is shipped. Tensors over
# 1 MiB are read in parts by the training thread and the capture's helper thread; their parts'
# sums combine in part order, so they too equal the stage's, which reads the parts in order.
STRIDED = textwrap.dedent("""
    import json, torch
    from tprobe import PrecisionDebugger
    torch.set_num_threads(1)
    torch.manual_seed(0)
    debugger = PrecisionDebugger(config_path="./config.json")
    a = torch.randn(70, 130) * 3
    b = torch.randn(4, 5, 6, 7)
    c = torch.randn(700, 1100) * 2                  # 3 MiB: read in parts
    for step in range(STEPS):
        debugger.start()
        torch.neg(a.t())                            # a transpose
        torch.neg(a[::3, 1::2])                     # slices with steps
        torch.neg(b.permute(3, 1, 0, 2))            # a 4-d permutation
        torch.neg(a[:1].expand(40, 130))            # stride 0
        torch.neg(a.t().half())                     # float16, then its transpose below
        torch.neg(a.half().t())
        torch.neg(a.double().t())
        torch.neg(torch.arange(60).reshape(6, 10).t())  # int64
        torch.logical_not(a.t() > 0)                # bool
        torch.neg(a[:, 5])                          # one column
        torch.neg(c)                                # large, contiguous
        torch.neg(c.t())                            # large, a transpose
        torch.neg(c.double())                       # large, float64
        debugger.stop()
        debugger.step()
    with open("counters.json", "w") as f:
        json.dump(debugger.counters(), f)
    debugger.close()
""")


# The results of zero-filling operators are not read: their statistics (and CRC-32) are those of
# zeros, from the element count (tprobe_capture_tensor_zeroed). The dump equals the statistics
# stage's, which reads the copies it is sent (TPROBE_STATS_MODE=copy).
ZEROED = textwrap.dedent("""
    import json, torch
    from tprobe import PrecisionDebugger
    torch.set_num_threads(1)
    torch.manual_seed(0)
    debugger = PrecisionDebugger(config_path="./config.json")
    for step in range(STEPS):
        debugger.start()
        a = torch.randn(700, 1100) * 3               # 3 MiB: read in parts, were it read
        a.zero_()
        b = torch.randn(40, 30)
        b[:, ::2].zero_()                            # a strided view's zeros
        torch.zeros(5, 7, dtype=torch.float16)
        torch.zeros((), dtype=torch.int64)           # 0-d: its value, an int
        torch.zeros_like(b, dtype=torch.bool)
        b.new_zeros(3, 4, dtype=torch.complex64)
        torch.zeros(0, 3)                            # empty
        torch.neg(a)                                 # the zeros read again as an input: known
        debugger.stop()
        debugger.step()
    with open("counters.json", "w") as f:
        json.dump(debugger.counters(), f)
    debugger.close()
""")


def run_auto_and_copy(test, script, config, name):
    """`script` over two steps with the statistics taken in place (auto) and by the stage (copy):
    each run and its counters."""
    runs = {}
    for mode in ("auto", "copy"):
        run = test.run_script(script, config=config, steps=2, name=f"{name}-{mode}", env={"TPROBE_STATS_MODE": mode})
        with open(os.path.join(run.dir, "counters.json")) as f:
            runs[mode] = (run, json.load(f))
    return runs["auto"], runs["copy"]


class ZeroedStatistics(tt.CaptureTest):
    def test_zero_filled_results_are_not_read_and_equal_the_stats_stage(self):
        for config, name in ((tt.default_config(), "L1"), (tt.default_config(summary_mode="md5"), "md5")):
            (auto, auto_counters), (copy, copy_counters) = run_auto_and_copy(self, ZEROED, config, name)
            # zero_ twice, zeros three times, zeros_like, new_zeros: 7 results a step, 2 steps.
            self.assertEqual(auto_counters["stats_zeroed"], 14, f"{name}: {auto_counters}")
            self.assertEqual(copy_counters["stats_zeroed"], 0, name)
            for step in (0, 1):
                self.assertEqual(auto.data(step), copy.data(step), f"{name} step {step}")
            data = auto.data(0)
            zeros = data["Tensor.zero_.0.forward"]["output"][0]
            self.assertEqual((zeros["Max"], zeros["Min"], zeros["Mean"], zeros["Norm"]), (0, 0, 0, 0))
            self.assertEqual(data["Torch.zeros.1.forward"]["output"][0]["Max"], 0)
            if name == "md5":
                self.assertIn("md5", zeros)


class StridedStatistics(tt.CaptureTest):
    def test_views_read_in_place_equal_the_stats_stage(self):
        for config, name in ((tt.default_config(), "L1"), (tt.default_config(summary_mode="md5"), "md5")):
            (auto, auto_counters), (copy, copy_counters) = run_auto_and_copy(self, STRIDED, config, name)
            self.assertEqual(auto_counters["bytes"], 0, f"{name}: the views' data stayed in the process")
            self.assertGreater(copy_counters["bytes"], 0, name)
            for step in (0, 1):
                self.assertEqual(auto.data(step), copy.data(step), f"{name} step {step}")
            data = auto.data(0)
            self.assertEqual(data["Torch.neg.0.forward"]["input_args"][0]["shape"], [130, 70])
            if name == "md5":
                self.assertIn("md5", data["Torch.neg.0.forward"]["input_args"][0])


if __name__ == "__main__":
    unittest.main()
