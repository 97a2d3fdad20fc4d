"""The device path (capture/torch/device_stats.h): statistics reduced into a slot buffer, data copied
into staging, one host read per step, records handed over in capture order. Its dump must equal the
host path's (same entries, slots and order; statistics to float rounding, md5 and .npy exactly), and
the capture's counters must show one read per step for many tensors, or one per full slot buffer
when the buffer is smaller than a step.

DevicePathTest runs it on CPU tensors (TPROBE_DEVICE_PATH_ON_CPU=1) against the host path, on every
machine. CudaDevicePathTest runs the same tests on a GPU, where torch sees one (skipped elsewhere;
scripts/cuda-check.sh runs them there): the model trains on the device, the reference run reads each
device tensor with a blocking .cpu() (TPROBE_DEVICE_PATH_OFF=1), and the device path's run goes
from start() to stop() under torch.cuda.set_sync_debug_mode("error"), so any synchronising call the
capture makes on the training thread (.item(), a blocking copy to the host, a stream synchronize)
raises and fails the run."""

import json
import math
import unittest

import tprobe_testing as tt

# The test model plus tensors of every statistics kind: bool, integer, 0-d, complex (a conjugate
# view), bfloat16, float64, and NaN and Inf counts.
# TEST_DEVICE (default cpu) is where the model trains; TEST_SYNC_GUARD=1 turns every synchronising
# CUDA call between start() and stop() into an error. Every input is on the device before the loop.
SCRIPT = tt.TRAIN.replace("    debugger.stop()\n    debugger.step()\n", """\
    flags = x > 0
    count = torch.arange(6, device=DEVICE).sum()
    z = torch.view_as_complex(complex_parts[step]).conj() * 2
    h = x.bfloat16() * 2
    d = x.double().exp()
    nans = torch.log(x)
    infs = x / 0
    debugger.stop()
    if GUARD:
        torch.cuda.set_sync_debug_mode(0)
    debugger.step()
    print("COUNTERS " + json.dumps(debugger.counters()), flush=True)
""").replace("    debugger.start(model)\n", """\
    debugger.start(model)
    if GUARD:
        torch.cuda.set_sync_debug_mode("error")
""").replace("model, x, y = make()\n", """\
model, x, y = make()
DEVICE = os.environ.get("TEST_DEVICE", "cpu")
GUARD = os.environ.get("TEST_SYNC_GUARD") == "1"
model, x, y = model.to(DEVICE), x.to(DEVICE), y.to(DEVICE)
complex_parts = [torch.randn(3, 2, generator=torch.Generator().manual_seed(s)).to(DEVICE) for s in range(STEPS)]
""").replace("import torch\n", "import torch, json, os\n", 1)
assert "COUNTERS" in SCRIPT and "GUARD = " in SCRIPT and "set_sync_debug_mode(\"error\")" in SCRIPT

STEPS = 3


def counters(run):
    """The capture's counters after each step."""
    got = [json.loads(line.split(" ", 1)[1]) for line in run.result.stdout.splitlines() if line.startswith("COUNTERS ")]
    assert len(got) == STEPS, run.result.stdout
    return got


def per_step(samples, key):
    values = [s[key] for s in samples]
    return [b - a for a, b in zip([0] + values, values)]


class DevicePathTest(tt.CaptureTest):
    # The environment of the reference run (host path) and of the device path's run.
    HOST_ENV = {}
    DEVICE_ENV = {"TPROBE_DEVICE_PATH_ON_CPU": "1"}

    def run_pair(self, config, env, name):
        host = self.run_script(SCRIPT, config=config, steps=STEPS, name=name + "-host", env=self.HOST_ENV)
        device = self.run_script(SCRIPT, config=config, steps=STEPS, name=name + "-device",
                                 env={**self.DEVICE_ENV, **env})
        return host, device

    def assert_same_dump(self, host, device, exact_md5=False):
        for step in range(STEPS):
            a, b = host.data(step), device.data(step)
            self.assertEqual(list(a), list(b), f"step {step}: entries or their order differ")
            for entry in a:
                self.assert_close(a[entry], b[entry], f"step {step} {entry}")

    def assert_close(self, a, b, where):
        if isinstance(a, dict):
            self.assertIsInstance(b, dict, where)
            self.assertEqual(list(a), list(b), where)
            for k in a:
                self.assert_close(a[k], b[k], f"{where}.{k}")
        elif isinstance(a, list):
            self.assertIsInstance(b, list, where)
            self.assertEqual(len(a), len(b), where)
            for i, (x, y) in enumerate(zip(a, b)):
                self.assert_close(x, y, f"{where}[{i}]")
        elif isinstance(a, float) and isinstance(b, float):
            # ATen's reductions and core's differ in accumulation order and width.
            same = math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6) or (math.isnan(a) and math.isnan(b))
            self.assertTrue(same, f"{where}: {a} != {b}")
        else:
            self.assertEqual(a, b, where)

    def test_statistics_one_read_per_step(self):
        host, device = self.run_pair(tt.default_config(level="L1"), {}, "stats")
        self.assert_same_dump(host, device)
        got = counters(device)
        tensors = per_step(got, "device_tensors")
        self.assertTrue(all(n > 20 for n in tensors), tensors)  # many tensors a step ...
        self.assertEqual(per_step(got, "device_reads"), [1] * STEPS)  # ... one host read
        self.assertEqual(per_step(got, "device_full"), [0] * STEPS)
        self.assertEqual(got[-1]["device_summaries"], sum(tensors))
        self.assertEqual(per_step(got, "device_bytes"), [48 * n for n in tensors])  # 6 float64 a tensor
        self.assertEqual(counters(host)[-1]["device_tensors"], 0)  # the host path took none

    def test_full_slot_buffer_reads_early_and_keeps_order(self):
        host, device = self.run_pair(tt.default_config(level="L1"), {"TPROBE_DEVICE_SLOTS": "4"}, "full")
        self.assert_same_dump(host, device)
        got = counters(device)
        tensors, reads = per_step(got, "device_tensors"), per_step(got, "device_reads")
        full = per_step(got, "device_full")
        for n, r, f in zip(tensors, reads, full):
            self.assertEqual(f, n // 4)  # a batch closes at each 4th row
            self.assertEqual(r, -(-n // 4))  # and the step's end reads the rest: ceil(n / 4)

    def test_md5_data_through_staging(self):
        config = tt.default_config(level="L1", summary_mode="md5")
        host, device = self.run_pair(config, {}, "md5")
        self.assert_same_dump(host, device)
        self.assertTrue(any("md5" in json.dumps(v) for v in device.data(0).values()))
        got = counters(device)
        self.assertEqual(per_step(got, "device_reads"), [1] * STEPS)
        self.assertEqual(got[-1]["device_summaries"], 0)  # every tensor went as data
        self.assertGreater(min(per_step(got, "device_bytes")), 48 * min(per_step(got, "device_tensors")))

    def test_tensor_task_through_staging(self):
        config = tt.default_config(task="tensor", level="L1")
        host, device = self.run_pair(config, {"TPROBE_DEVICE_STAGING_MIB": "1"}, "tensor")
        self.assert_same_dump(host, device)
        import numpy
        import os
        folder_a, folder_b = (os.path.join(r.folder(1), "dump_tensor_data") for r in (host, device))
        files = sorted(os.listdir(folder_a))
        self.assertEqual(files, sorted(os.listdir(folder_b)))
        self.assertGreater(len(files), 20)
        for f in files:
            a, b = numpy.load(os.path.join(folder_a, f)), numpy.load(os.path.join(folder_b, f))
            self.assertEqual(a.dtype, b.dtype, f)
            self.assertEqual((a.shape, a.tobytes()), (b.shape, b.tobytes()), f)  # bit for bit


@unittest.skipUnless(tt.torch.cuda.is_available(), "no CUDA device: scripts/cuda-check.sh runs these on a GPU")
class CudaDevicePathTest(DevicePathTest):
    HOST_ENV = {"TEST_DEVICE": "cuda", "TPROBE_DEVICE_PATH_OFF": "1"}
    DEVICE_ENV = {"TEST_DEVICE": "cuda", "TEST_SYNC_GUARD": "1"}

    def test_the_guard_catches_a_sync(self):
        """The guard is live: the host path's blocking .cpu() under it fails the run."""
        run = self.run_script(SCRIPT, config=tt.default_config(level="L1"), steps=1, expect_ok=False,
                              env={**self.HOST_ENV, "TEST_SYNC_GUARD": "1"})
        self.assertIn("synchronizing CUDA operation", run.result.stderr)  # torch's words, through the capture
        self.assertIn("tprobe: capture failed", run.result.stderr)


if __name__ == "__main__":
    unittest.main()
