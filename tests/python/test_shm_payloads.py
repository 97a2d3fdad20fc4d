"""Tensor payloads through shared memory (transport/shm.h): in a real tensor dump under
`tprobe run`, large payloads leave the capture by reference (counted in shared_bytes) and the
files are the same, byte for byte, as with TPROBE_SHM=off (everything over the socket). A stage
that stops reading while it holds payloads, or dies, never hangs the training."""

import filecmp
import json
import os
import signal
import subprocess
import textwrap
import time
import unittest

import tprobe_testing as tt
from test_faults import stage_pid

# Activations of 256 x 512 float32 = 512 KiB per tensor: well above the 64 KiB threshold.
BIG_TRAIN = textwrap.dedent("""
    import json, sys, time
    import torch, torch.nn as nn, torch.nn.functional as F
    from tprobe import PrecisionDebugger
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    x = torch.randn(256, 512)
    y = torch.randint(0, 10, (256,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    debugger = PrecisionDebugger(config_path="./config.json")
    print("started", flush=True)
    longest, caught = 0.0, 0
    for step in range(STEPS):
        t0 = time.monotonic()
        debugger.start(model)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        try:
            debugger.stop()
            debugger.step()
        except RuntimeError as e:
            caught += 1
            print("caught:", e, file=sys.stderr)
        longest = max(longest, time.monotonic() - t0)
        print(f"step {step}", flush=True)
    counters = debugger.counters()
    try:
        debugger.close()
    except RuntimeError as e:
        caught += 1
        print("caught at close:", e, file=sys.stderr)
    with open("counters.json", "w") as f:
        json.dump(counters, f)
    print(f"done {STEPS} steps; longest step {longest * 1000:.0f} ms; caught {caught}", flush=True)
""")


def iter_leaves(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from iter_leaves(value)
    elif isinstance(node, list):
        for value in node:
            yield from iter_leaves(value)


def tensor_config(**extra):
    config = tt.default_config(level="L1", task="tensor")
    config.update(extra)
    return config


class SharedMemoryPayloads(tt.CaptureTest):
    def test_files_equal_the_socket_path_and_payloads_went_by_reference(self):
        shared = self.run_script(BIG_TRAIN, config=tensor_config(), manifest="tensor.json", steps=2, name="shm")
        socket = self.run_script(BIG_TRAIN, config=tensor_config(), manifest="tensor.json", steps=2,
                                 name="socket", env={"TPROBE_SHM": "off"})
        # async_dump: the capture runs ahead and may exit before the writer opens the segment; a
        # stage passes references on through its own fd, so this must not matter.
        ahead = self.run_script(BIG_TRAIN, config=tensor_config(async_dump=True, tensor={
            "scope": [], "list": ["forward", "backward"], "data_mode": ["all"]}), manifest="tensor.json", steps=2,
            name="async")
        with open(os.path.join(shared.dir, "counters.json")) as f:
            on = json.load(f)
        with open(os.path.join(socket.dir, "counters.json")) as f:
            off = json.load(f)
        self.assertGreater(on["shared_bytes"], 0, on)
        self.assertGreater(on["shared_bytes"], on["bytes"] // 2, "most of a large-tensor dump goes by reference")
        self.assertEqual(on["shared_gave_up"], 0, on)
        self.assertEqual(off["shared_bytes"], 0, off)
        self.assertEqual(on["bytes"], off["bytes"])
        for step in (0, 1):
            a = os.path.join(shared.folder(step), "dump_tensor_data")
            b = os.path.join(socket.folder(step), "dump_tensor_data")
            names = sorted(os.listdir(a))
            self.assertGreater(len(names), 10)
            self.assertEqual(names, sorted(os.listdir(b)))
            match, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
            self.assertEqual((mismatch, errors), ([], []), f"step {step}")
            c = os.path.join(ahead.folder(step), "dump_tensor_data")
            self.assertEqual(names, sorted(os.listdir(c)), f"step {step}, async_dump")
            match, mismatch, errors = filecmp.cmpfiles(a, c, names, shallow=False)
            self.assertEqual((mismatch, errors), ([], []), f"step {step}, async_dump")
            self.assertEqual(shared.load("dump.json", step)["data"], socket.load("dump.json", step)["data"])

    def test_a_stage_opens_the_segment_after_the_capture_process_is_gone(self):
        # tprobe-fault holds the stream's first record (the session) for 4 s before the writer, so
        # the writer's first reference arrives after the training process has exited (async_dump:
        # its close waits for the statistics stage only). The writer must open the segment
        # through the stage before it, the capture's fd being gone, and the dump be complete.
        manifest = {"description": "stats, a late hop, writer", "capture": {"task": "tensor"}, "stages": [
            {"name": "stats", "stage": "stats", "inputs": ["capture"], "options": {}},
            {"name": "late", "stage": "fault", "inputs": ["stats"],
             "options": {"delay-ms": 4000, "delay-prob": 1, "kinds": "session"}},
            {"name": "writer", "stage": "writer", "inputs": ["late"], "options": {}}]}
        config = tensor_config(async_dump=True, tensor={"scope": [], "list": ["forward", "backward"],
                                                        "data_mode": ["all"]})
        run = self.run_script(BIG_TRAIN, config=config, manifest=self.write_manifest(manifest), steps=2)
        self.assertIn("done 2 steps", run.result.stdout)
        for step in (0, 1):
            data = run.data(step)
            named = {leaf["data_name"] for leaf in iter_leaves(data) if isinstance(leaf, dict) and "data_name" in leaf}
            files = set(os.listdir(os.path.join(run.folder(step), "dump_tensor_data")))
            self.assertGreater(len(files), 10)
            self.assertEqual(named, files, f"step {step}")

    def write_manifest(self, manifest):
        path = os.path.join(self.tmp, "late.json")
        with open(path, "w") as f:
            json.dump(manifest, f)
        return path

    def test_a_stage_that_holds_payloads_or_dies_never_hangs_the_training(self):
        for stage, sig in (("tprobe-writer", signal.SIGSTOP), ("tprobe-stats", signal.SIGKILL)):
            with self.subTest(stage=stage, signal=sig.name):
                self.one_fault(stage, sig)

    def one_fault(self, stage, sig):
        directory = os.path.join(self.tmp, f"{stage}-{sig.name}")
        os.makedirs(directory)
        config = tensor_config()
        config["tprobe"] = {"pipeline_timeout_s": 2, "on_pipeline_failure": "warn"}
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(config, f)
        with open(os.path.join(directory, "train.py"), "w") as f:
            f.write(BIG_TRAIN.replace("STEPS", "30"))
        env = dict(os.environ)
        env.pop("TPROBE_ENDPOINT", None)
        proc = subprocess.Popen([tt.PYTHON, "train.py"], cwd=directory, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        victim = None
        try:
            self.assertEqual(proc.stdout.readline().strip(), "started")
            deadline = time.monotonic() + 30
            while victim is None and time.monotonic() < deadline:
                victim = stage_pid(proc.pid, stage)
                time.sleep(0.01)  # the pipeline starts at the first start(); this only finds its pid
            self.assertIsNotNone(victim, f"no {stage} under the script's launcher")
            self.assertEqual(proc.stdout.readline().strip(), "step 0")  # payloads are in flight now
            os.kill(victim, sig)
            out, err = proc.communicate(timeout=120)
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        finally:
            if victim and sig == signal.SIGSTOP:
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.assertEqual(proc.returncode, 0, err)
        self.assertIn("done 30 steps", out, err)
        longest_ms = int(out.split("longest step ")[1].split(" ms")[0])
        self.assertLess(longest_ms, 2000 + 3000, err)
        with open(os.path.join(directory, "counters.json")) as f:
            counters = json.load(f)
        self.assertTrue(counters["detached"], (counters, err))
        self.assertGreater(counters["shared_bytes"], 0, counters)


if __name__ == "__main__":
    unittest.main()
