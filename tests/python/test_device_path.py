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
raises and fails the run. KernelDevicePathTest and CudaKernelDevicePathTest run the same tests with
TPROBE_DEVICE_STATS=kernel (raw copies, one statistics kernel a batch: segment_kernel.h)."""

import json
import math
import unittest

import tprobe_testing as tt

# The test model plus tensors of every statistics kind: bool, integer, 0-d, complex (a conjugate
# view), bfloat16, float64, NaN and Inf counts, two of 200 elements (the others have at most 64),
# which a small arena splits into segments, and two of 40 000, which it leaves to the direct
# reductions.
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
    mid = x.repeat(2, 5) - 1
    big = x.repeat(100, 20) * 3
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

# Writes that come after a tensor's capture and before its deferred copy into the arena
# (device_stats.h): the copy must read the tensor as it was captured. BatchNorm's running
# statistics are written by an operator nested in batch_norm; the ReLU and the residual add write
# captured outputs in place; the second backward of a step adds into .grad in place; `.data`
# writes through a tensor with its own version counter; a second thread writes in place; SGD
# with momentum writes the weights. TEST_HIDDEN_WRITE=1 adds a write the operator callbacks
# cannot see (RecordFunction off on this thread), which the version counter still shows.
DEFER_SCRIPT = """\
import json, os, threading
import torch, torch.nn as nn, torch.nn.functional as F
from tprobe import PrecisionDebugger
torch.set_num_threads(1)
torch.manual_seed(0)
DEVICE = os.environ.get("TEST_DEVICE", "cpu")
HIDDEN = os.environ.get("TEST_HIDDEN_WRITE") == "1"

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.bn = nn.BatchNorm1d(16)
        self.act = nn.ReLU(inplace=True)
        self.out = nn.Linear(16, 3)
    def forward(self, x):
        h = self.act(self.bn(self.fc(x))) * 2
        h += x
        return self.out(h)

model = Net().to(DEVICE)
x = torch.randn(8, 16).to(DEVICE)
y = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1]).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
debugger = PrecisionDebugger(config_path="./config.json")
for step in range(STEPS):
    debugger.start(model)
    for micro in range(2):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
    w = x * 1.5
    w.data.mul_(2)
    v = w + 1
    if HIDDEN:
        torch._C._autograd._enable_record_function(False)
        v.add_(100)
        torch._C._autograd._enable_record_function(True)
    side = threading.Thread(target=lambda: v.mul_(3))
    side.start()
    side.join()
    u = v - 1
    opt.step()
    opt.zero_grad()
    debugger.stop()
    debugger.step()
    print("COUNTERS " + json.dumps(debugger.counters()), flush=True)
"""


def counters(run):
    """The capture's counters after each step."""
    got = [json.loads(line.split(" ", 1)[1]) for line in run.result.stdout.splitlines() if line.startswith("COUNTERS ")]
    assert len(got) == STEPS, run.result.stdout
    return got


def per_step(samples, key):
    values = [s[key] for s in samples]
    return [b - a for a, b in zip([0] + values, values)]


def tensors_of(value):
    """The tensor entries in a dump.json entry, at any depth."""
    if isinstance(value, dict):
        if value.get("type") == "torch.Tensor":
            yield value
        else:
            for v in value.values():
                yield from tensors_of(v)
    elif isinstance(value, list):
        for v in value:
            yield from tensors_of(v)


def arena_sizes(run, step, arena_elements):
    """The elements of each of a step's tensors whose statistics the device path reduces in an
    arena (device_stats.h): real tensors of 1 to `arena_elements` elements that are not 0-d.
    Tensors without statistics (the outputs of allocation-only operators such as torch.empty) are
    not read at all."""
    sizes = []
    for t in tensors_of(run.data(step)):
        if t.get("Max") is None:
            continue
        numel = math.prod(t["shape"])
        if t["shape"] and "complex" not in t["dtype"] and 0 < numel <= arena_elements:
            sizes.append(numel)
    return sizes


def arena_tensors(run, step, arena_elements):
    return len(arena_sizes(run, step, arena_elements))


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
        # Reuse off: every tensor enqueues its own statistics, so the counts follow from the dump.
        host, device = self.run_pair(tt.default_config(level="L1"), {"TPROBE_REUSE_STATS": "off"}, "stats")
        self.assert_same_dump(host, device)
        got = counters(device)
        tensors = per_step(got, "device_tensors")
        self.assertTrue(all(n > 20 for n in tensors), tensors)  # many tensors a step ...
        self.assertEqual(per_step(got, "device_reads"), [1] * STEPS)  # ... one host read
        self.assertEqual(per_step(got, "device_full"), [0] * STEPS)
        self.assertEqual(got[-1]["device_summaries"], sum(tensors))
        self.assertEqual(counters(host)[-1]["device_tensors"], 0)  # the host path took none
        # Every real tensor that is not 0-d went through the arena, the others through slot rows.
        segments = per_step(got, "device_segments")
        self.assertEqual(segments, [arena_tensors(host, step, 8 << 20) for step in range(STEPS)])
        self.assertTrue(all(0 < k < n for k, n in zip(segments, tensors)), (segments, tensors))
        # 6 float64 a slot row and a segment: a tensor in the arena takes a segment per 16 384 elements.
        chunks = [sum(-(-n // 16384) for n in arena_sizes(host, step, 8 << 20)) for step in range(STEPS)]
        self.assertTrue(all(c > k for c, k in zip(chunks, segments)), (chunks, segments))  # the 40 000s
        self.assertEqual(per_step(got, "device_bytes"), [48 * (n - k + c) for n, k, c in zip(tensors, segments, chunks)])

    def test_statistics_reused_for_unchanged_contents(self):
        """An operator's input that is the previous operator's output, unchanged, enqueues nothing:
        its record takes the statistics enqueued for the output. The dump is the host path's."""
        host, device = self.run_pair(tt.default_config(level="L1"), {}, "reuse")
        self.assert_same_dump(host, device)
        got = counters(device)
        tensors, reused, segments = (per_step(got, k) for k in ("device_tensors", "device_reused", "device_segments"))
        self.assertTrue(all(0 < r < n for r, n in zip(reused, tensors)), (reused, tensors))
        # What is reused is not copied into an arena again.
        self.assertTrue(all(s <= n - r for s, r, n in zip(segments, reused, tensors)), (segments, reused, tensors))
        self.assertEqual(per_step(got, "device_reads"), [1] * STEPS)
        # Also on the direct path, and across the batches of a small arena.
        for env in ({"TPROBE_DEVICE_STATS": "direct"}, {"TPROBE_DEVICE_ARENA_KIB": "1"}):
            host, device = self.run_pair(tt.default_config(level="L1"), env, "reuse-" + next(iter(env.values())))
            self.assert_same_dump(host, device)
            self.assertTrue(all(per_step(counters(device), "device_reused")), env)

    def test_direct_reductions(self):
        """TPROBE_DEVICE_STATS=direct: every tensor's statistics reduced on its own into its row."""
        host, device = self.run_pair(tt.default_config(level="L1"),
                                     {"TPROBE_DEVICE_STATS": "direct", "TPROBE_REUSE_STATS": "off"}, "direct")
        self.assert_same_dump(host, device)
        got = counters(device)
        self.assertEqual(got[-1]["device_segments"], 0)
        self.assertEqual(per_step(got, "device_reads"), [1] * STEPS)
        self.assertEqual(per_step(got, "device_bytes"), [48 * n for n in per_step(got, "device_tensors")])

    def test_small_arena_fills_and_large_tensors_go_direct(self):
        """An arena of 1 KiB (256 float32, segments of up to 64): a batch closes each time the next
        tensor does not fit, a tensor of 200 elements takes 4 segments whose statistics the host
        combines, tensors of more than 256 elements are reduced directly, and the dump is the same."""
        host, device = self.run_pair(tt.default_config(level="L1"),
                                     {"TPROBE_DEVICE_ARENA_KIB": "1", "TPROBE_REUSE_STATS": "off"}, "arena")
        self.assert_same_dump(host, device)
        got = counters(device)
        segments, full, reads = (per_step(got, k) for k in ("device_segments", "device_full", "device_reads"))
        self.assertEqual(segments, [arena_tensors(host, step, 256) for step in range(STEPS)])
        # The two 40 000-element tensors (and 0-d and complex ones) took the direct reductions.
        for step, k in enumerate(segments):
            self.assertGreaterEqual(arena_tensors(host, step, 8 << 20) - k, 2)
        self.assertTrue(all(f >= 2 for f in full), full)
        self.assertEqual(reads, [f + 1 for f in full])  # each full batch, then the step's end

    def test_high_precision_rounds_as_the_host_path(self):
        """precision "high": bfloat16's Mean and Norm are float32 values, not bfloat16 ones."""
        host, device = self.run_pair(tt.default_config(level="L1", precision="high"), {}, "high")
        self.assert_same_dump(host, device)

    def test_full_slot_buffer_reads_early_and_keeps_order(self):
        # Direct reductions and no reuse: every tensor takes a slot row.
        host, device = self.run_pair(tt.default_config(level="L1"),
                                     {"TPROBE_DEVICE_SLOTS": "4", "TPROBE_DEVICE_STATS": "direct",
                                      "TPROBE_REUSE_STATS": "off"}, "full")
        self.assert_same_dump(host, device)
        got = counters(device)
        tensors, reads = per_step(got, "device_tensors"), per_step(got, "device_reads")
        full = per_step(got, "device_full")
        for n, r, f in zip(tensors, reads, full):
            self.assertEqual(f, n // 4)  # a batch closes at each 4th row
            self.assertEqual(r, -(-n // 4))  # and the step's end reads the rest: ceil(n / 4)

    def test_deferred_copies_read_what_was_captured(self):
        """TPROBE_DEVICE_STATS=deferred: statistics copies into the arena are deferred and enqueued together, before any
        operator writes one of their tensors: whatever the write (nested, in place, in backward,
        through .data, on another thread), the dump is the host path's, nothing is unread, and
        the copies go in fewer enqueueings than tensors. Without it the copies are eager, with the same
        dump with none deferred (the default)."""
        config = tt.default_config(level="L1")
        host = self.run_script(DEFER_SCRIPT, config=config, steps=STEPS, name="defer-host", env=self.HOST_ENV)
        for mode in ("deferred", "eager"):
            env = {**self.DEVICE_ENV, "TPROBE_REUSE_STATS": "off"}
            if mode == "deferred":
                env["TPROBE_DEVICE_STATS"] = "deferred"
            device = self.run_script(DEFER_SCRIPT, config=config, steps=STEPS, name="defer-" + mode, env=env)
            self.assert_same_dump(host, device)
            got = counters(device)
            deferred, flushes = per_step(got, "device_deferred"), per_step(got, "device_flushes")
            self.assertEqual(got[-1]["device_unread"], 0, mode)
            if mode == "eager":
                self.assertEqual(got[-1]["device_deferred"], 0)
                continue
            segments = per_step(got, "device_segments")
            self.assertEqual(deferred, segments)  # every arena tensor here is contiguous
            self.assertTrue(all(1 < f < d for f, d in zip(flushes, deferred)), (flushes, deferred))

    def test_write_unseen_by_the_callbacks_leaves_statistics_unread(self):
        """A write no operator callback sees (RecordFunction turned off) but the version counter
        shows: the tensor it changed before its deferred copy is reported without statistics,
        counted and said once, never with the changed values."""
        config = tt.default_config(level="L1")
        env = {**self.DEVICE_ENV, "TEST_HIDDEN_WRITE": "1", "TPROBE_DEVICE_STATS": "deferred"}
        device = self.run_script(DEFER_SCRIPT, config=config, steps=STEPS, name="defer-hidden", env=env)
        self.assertEqual(per_step(counters(device), "device_unread"), [1] * STEPS)
        self.assertEqual(device.result.stderr.count("changed before its statistics were copied"), 1,
                         device.result.stderr)
        for step in range(STEPS):
            added = [e for e in device.data(step) if e.startswith("Torch.add.")]
            self.assertTrue(added, list(device.data(step)))
            # v = w + 1, whose output the hidden add_ changed.
            unread = [e for e in added if device.data(step)[e]["output"][0]["Max"] is None]
            self.assertEqual(len(unread), 1, added)

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


class KernelDevicePathTest(DevicePathTest):
    """Every test above with TPROBE_DEVICE_STATS=kernel: the arena takes the tensors' bytes as they
    lie and each batch's segments are reduced by one launch of segment_kernel.h's kernel (here its
    host twin; CudaKernelDevicePathTest runs the kernel itself on a GPU). The tests of the other
    settings (direct, deferred) are not repeated."""
    DEVICE_ENV = {**DevicePathTest.DEVICE_ENV, "TPROBE_DEVICE_STATS": "kernel"}
    test_direct_reductions = None
    test_full_slot_buffer_reads_early_and_keeps_order = None
    test_deferred_copies_read_what_was_captured = None
    test_write_unseen_by_the_callbacks_leaves_statistics_unread = None

    def test_an_unknown_setting_is_refused_before_training(self):
        run = self.run_script(SCRIPT, config=tt.default_config(level="L1"), steps=1, expect_ok=False,
                              env={**self.DEVICE_ENV, "TPROBE_DEVICE_STATS": "kernal"})
        self.assertIn("TPROBE_DEVICE_STATS must be kernel, deferred or direct (or unset), not 'kernal'",
                      run.result.stderr)
        self.assertNotIn("COUNTERS", run.result.stdout)

    def test_raw_copies_and_one_kernel_a_batch(self):
        """No ATen copy for a dense tensor of a dtype the kernel reads: every arena tensor of the
        script but a negative view, which copy_ resolves into float32 in the arena; one kernel
        launch for each batch read, also in an arena of 1 KiB (many batches, tensors split into
        segments); the engine is there (nothing said)."""
        script = SCRIPT.replace("    debugger.stop()\n", "    negative = torch._neg_view(x)\n    debugger.stop()\n", 1)
        config = tt.default_config(level="L1")
        host = self.run_script(script, config=config, steps=STEPS, name="kernel-host", env=self.HOST_ENV)
        for env in ({}, {"TPROBE_DEVICE_ARENA_KIB": "1"}):
            device = self.run_script(script, config=config, steps=STEPS, name="kernel" + "".join(env.values()),
                                     env={**self.DEVICE_ENV, "TPROBE_REUSE_STATS": "off", **env})
            self.assert_same_dump(host, device)
            self.assertNotIn("reduced by ATen instead", device.result.stderr)
            negative = [e for e in host.data(0) if "._neg_view." in e]
            self.assertEqual(len(negative), 1, list(host.data(0)))
            got = counters(device)
            segments, raw = per_step(got, "device_segments"), per_step(got, "device_raw_copies")
            self.assertEqual(raw, [n - 1 for n in segments], env)  # the negative view's output
            kernels, reads = per_step(got, "device_kernels"), per_step(got, "device_reads")
            self.assertEqual(kernels, reads, env)
            if env:
                self.assertTrue(all(r > 2 for r in reads), reads)


class NvrtcLocationTest(unittest.TestCase):
    """Where python/tprobe finds the NVRTC a pip torch ships, for the kernel's compile on a GPU."""

    def test_pip_layouts(self):
        import os
        import tempfile
        from tprobe import _native
        with tempfile.TemporaryDirectory() as root:
            site, torch_lib, empty = (os.path.join(root, d) for d in ("site", "torch_lib", "empty"))
            nvrtc_dir = os.path.join(site, "nvidia", "cuda_nvrtc", "lib")
            for d in (nvrtc_dir, torch_lib, empty):
                os.makedirs(d)
            self.assertIsNone(_native.nvrtc_library([empty], torch_lib))
            for name in ("libnvrtc-builtins-1a2b3c.so.11.8", "libnvrtc-5e6f7a8b.so.11.2"):  # torch/lib, hashed
                open(os.path.join(torch_lib, name), "w").close()
            self.assertEqual(_native.nvrtc_library([empty], torch_lib), os.path.join(torch_lib, "libnvrtc-5e6f7a8b.so.11.2"))
            for name in ("libnvrtc-builtins.so.12.4", "libnvrtc.so.12"):  # nvidia-cuda-nvrtc-cu12, first
                open(os.path.join(nvrtc_dir, name), "w").close()
            self.assertEqual(_native.nvrtc_library([empty, site], torch_lib), os.path.join(nvrtc_dir, "libnvrtc.so.12"))


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


@unittest.skipUnless(tt.torch.cuda.is_available(), "no CUDA device: scripts/cuda-check.sh runs these on a GPU")
class CudaKernelDevicePathTest(KernelDevicePathTest):
    """KernelDevicePathTest on a GPU: the kernel NVRTC compiled, launched through the driver, under
    the sync guard, against blocking per-tensor reads."""
    HOST_ENV = CudaDevicePathTest.HOST_ENV
    DEVICE_ENV = {**CudaDevicePathTest.DEVICE_ENV, "TPROBE_DEVICE_STATS": "kernel"}


if __name__ == "__main__":
    unittest.main()
