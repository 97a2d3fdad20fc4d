"""The NaN/Inf analysis on real PyTorch runs: an fp16 overflow at a known operator, and a 2-rank gloo
job in which rank 1's exp makes an Inf that an all_reduce spreads to rank 0, with and without an
intentional -inf attention mask (masked_fill). Offline (`tprobe nan-analyze` on the dump) and live
(`tprobe run pipelines/nan-live.json`), the answer is rank 1's exp, and the mask alone is no answer."""

import glob
import json
import os
import subprocess
import unittest

import tprobe_testing as tt

FP16 = """
import torch
from tprobe import PrecisionDebugger
debugger = PrecisionDebugger(config_path="./config.json")
x = torch.linspace(1, 400, 8).half()
debugger.start()
y = torch.add(x, 1)          # finite
z = torch.mul(y, y)          # 401 * 401 > 65504: inf in float16
w = torch.nan_to_num(z)      # an inf input, finite output
v = torch.sub(z, z)          # inf - inf = nan: a new NaN, but later
debugger.stop()
debugger.step()
"""

# argv: "mask" puts an intentional -inf attention mask on both ranks; "exp" makes rank 1 overflow.
JOB = """
import os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp

MASK = "mask" in sys.argv[1:]
EXP = "exp" in sys.argv[1:]

def run(rank, world, init_file):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    from tprobe import PrecisionDebugger
    torch.manual_seed(0)
    w = torch.randn(4, 4)
    x = torch.randn(3, 4) + rank
    debugger = PrecisionDebugger(config_path="./config.json")
    for step in range(STEPS):
        debugger.start()
        h = torch.matmul(x, w)
        dist.all_reduce(h)
        if MASK:
            scores = torch.matmul(h, h.t())
            mask = torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=1)
            scores = scores.masked_fill(mask, float("-inf"))
            h = torch.matmul(torch.softmax(scores, dim=-1), h)
        if rank == 1 and EXP:
            h = torch.exp(h * 100.0)
        else:
            h = h * 2.0
        dist.all_reduce(h)
        y = torch.tanh(h)
        debugger.stop()
        debugger.step()
    debugger.close()
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(run, args=(2, os.path.join(os.getcwd(), "init")), nprocs=2)
"""


def nan_analyze(step_dir, out_dir):
    return subprocess.run([os.path.join(tt.BIN_DIR, "tprobe"), "nan-analyze", step_dir, "-o", out_dir],
                          capture_output=True, text=True, timeout=120)


def result_files(out_dir):
    return sorted(glob.glob(os.path.join(out_dir, "anomaly_analyze_*.json")))


class NanAnalyzeTest(tt.CaptureTest):
    def job(self, *flags, manifest=None):
        script = JOB.replace('sys.argv[1:]', repr(list(flags)))
        return self.run_script(script, manifest=manifest, expect_ok=False, name="job-" + "-".join(flags or ("clean",))
                               + ("-live" if manifest else ""))

    def check_offline(self, run, expect_exp):
        out = os.path.join(run.dir, "offline")
        r = nan_analyze(os.path.join(run.dump, "step0"), out)
        if not expect_exp:
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("no NaN/Inf producer", r.stdout)
            self.assertEqual(result_files(out), [])
            return
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"^tprobe-nan-analyze: first producer: rank 1 Torch\.exp\.0\.forward \(")
        self.assertNotIn("masked_fill", r.stdout)
        self.assertNotIn("all_reduce", r.stdout)
        files = result_files(out)
        self.assertEqual(len(files), 1)
        with open(files[0]) as f:
            doc = json.load(f)  # msprobe's schema, Infinity as Python writes it
        self.assertEqual(list(doc), ["rank_1"])
        node = doc["rank_1"][0]
        self.assertEqual(node["op_name"], "Torch.exp.0.forward")
        self.assertEqual(set(node["data_info"]), {"input_args", "input_kwargs", "output"})
        self.assertEqual(node["data_info"]["output"][0]["Max"], float("inf"))
        self.assertEqual(node["construct_info"][-1], "Torch.exp.0.forward")
        self.assertTrue(any("torch.exp(h * 100.0)" in line for line in node["stack_info"]), node["stack_info"])

    def test_fp16_overflow_at_known_operator(self):
        run = self.run_script(FP16)
        d = run.data()
        self.assertEqual(d["Torch.mul.0.forward"]["output"][0]["Max"], float("inf"))  # the dump saw it
        r = nan_analyze(os.path.join(run.dump, "step0"), os.path.join(run.dir, "out"))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertEqual(r.stdout.splitlines(),
                         ["tprobe-nan-analyze: first producer: rank 0 Torch.mul.0.forward "
                          "(inputs finite, output.0 inf; layer 0)"])

    def test_two_ranks_offline(self):
        for flags, expect in ((("exp",), True), (("exp", "mask"), True), (("mask",), False)):
            with self.subTest(flags=flags):
                run = self.job(*flags)
                self.assertEqual(run.result.returncode, 0, run.result.stderr)
                self.assertEqual(sorted(os.listdir(os.path.join(run.dump, "step0"))), ["rank0", "rank1"])
                if "mask" in flags:  # the mask's -inf is in the dump: msprobe's nan_analyze names it
                    self.assertEqual(run.data(rank=0)["Torch.masked_fill.0.forward"]["output"][0]["Min"], float("-inf"))
                if "exp" in flags:  # rank 0's second all_reduce has finite inputs and an Inf output
                    reduce0 = run.data(rank=0)["Distributed.all_reduce.1.forward"]
                    self.assertLess(reduce0["input_args"][0][0]["Max"], float("inf"))
                    self.assertEqual(reduce0["output"][0][0]["Max"], float("inf"))
                self.check_offline(run, expect)

    def test_two_ranks_live(self):
        for flags, expect in ((("exp",), True), (("exp", "mask"), True), (("mask",), False)):
            with self.subTest(flags=flags):
                run = self.job(*flags, manifest="nan-live.json")
                lines = [l for l in run.result.stdout.splitlines() if "first producer" in l]
                if not expect:
                    self.assertEqual(run.result.returncode, 0, run.result.stdout + run.result.stderr)
                    self.assertEqual(lines, [])
                    self.assertIn("0 with a NaN/Inf producer", run.result.stderr)
                    continue
                # The command succeeded and the stage found what it looks for: exit 1.
                self.assertEqual(run.result.returncode, 1, run.result.stdout + run.result.stderr)
                self.assertEqual(lines, ["tprobe-nan-live: step 0: first producer: rank 1 Torch.exp.0.forward "
                                         "(inputs finite, output.0 inf; layer 1)"])
                files = result_files(os.path.join(run.dir, "output"))
                self.assertEqual(len(files), 1)
                with open(files[0]) as f:
                    self.assertEqual(json.load(f)["rank_1"][0]["op_name"], "Torch.exp.0.forward")
                # Offline on the dump the writer wrote in the same run: the same answer.
                self.check_offline(run, True)


FP16_STEPS = """
import torch
from tprobe import PrecisionDebugger
debugger = PrecisionDebugger(config_path="./config.json")
x = torch.linspace(1, 400, 8).half()
for step in range(STEPS):
    debugger.start()
    y = torch.add(x, 1)
    z = torch.mul(y, y)          # inf in float16, every step
    debugger.stop()
    debugger.step()
print("trained", STEPS)
"""


class NanLiveStopTest(tt.CaptureTest):
    def test_stop_capture_after_the_first_producer(self):
        # pipelines/nan-live.json with the stage's --stop-capture: the capture is stopped through
        # its control endpoint once the first producer is named; the training runs to its end.
        with open(os.path.join(tt.PIPELINES, "nan-live.json")) as f:
            manifest = json.load(f)
        for stage in manifest["stages"]:
            if stage["stage"] == "nan-live":
                stage["options"]["stop-capture"] = True
        path = os.path.join(self.tmp, "nan-live-stop.json")
        with open(path, "w") as f:
            json.dump(manifest, f)
        run = self.run_script(FP16_STEPS, manifest=path, steps=40, expect_ok=False)
        self.assertEqual(run.result.returncode, 1, run.result.stderr)  # the stage found a producer
        self.assertIn("trained 40", run.result.stdout)
        self.assertIn("first producer", run.result.stdout + run.result.stderr)
        self.assertIn("tprobe: tprobe-nan-live stopped the capture: ", run.result.stderr)
        self.assertTrue(os.path.exists(os.path.join(run.folder(0), "dump.json")))
        # The stop reaches the capture on its own socket and is applied at its next operator
        # boundary, a few steps later at most even on a loaded machine: the last steps are not dumped.
        for step in range(30, 40):
            self.assertFalse(os.path.exists(os.path.join(run.folder(step), "dump.json")), f"step {step}")


if __name__ == "__main__":
    unittest.main()
