"""The live accuracy pre-check on a real training (pipelines/precheck-live.json): the rows that
tprobe-precheck-live writes while the script trains equal, byte for byte, those of `tprobe precheck`
over the dump the same run wrote (one library behind both front doors), and an ATen CPU kernel
overridden with a wrong one (torch.library) is named as the first API not pass."""

import glob
import os
import subprocess
import textwrap

from tprobe_testing import BIN_DIR, CaptureTest, default_config

# Two steps of a model whose forward calls F.gelu; WRONG_GELU=1 replaces aten::gelu's CPU kernel
# in this process only (the replay in the stage keeps LibTorch's).
SCRIPT = textwrap.dedent("""
    import os
    import torch, torch.nn as nn, torch.nn.functional as F
    from tprobe import PrecisionDebugger
    torch.set_num_threads(1)
    if os.environ.get("WRONG_GELU"):
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("gelu", lambda x, approximate="none": torch.relu(x) * 1.5, "CPU")
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(4, 8)
            self.out = nn.Linear(8, 3)
        def forward(self, x):
            return self.out(F.gelu(self.inp(x)))
    torch.manual_seed(0)
    model = Net()
    x, y = torch.randn(5, 4), torch.tensor([0, 2, 1, 1, 0])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    debugger = PrecisionDebugger(config_path="./config.json")
    for step in range(STEPS):
        debugger.start(model)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        debugger.stop()
        debugger.step()
""")


def read(path):
    with open(path, "rb") as f:
        return f.read()


class PrecheckLive(CaptureTest):
    def run_live(self, wrong, name):
        env = {"WRONG_GELU": "1"} if wrong else {}
        run = self.run_script(SCRIPT, config=default_config(task="tensor"), env=env, manifest="precheck-live.json",
                              steps=2, expect_ok=False, name=name)
        self.assertEqual(run.result.returncode, 1 if wrong else 0, run.result.stdout + run.result.stderr)
        return run

    def assert_rows_equal_offline(self, run):
        for step in (0, 1):
            live_dir = os.path.join(run.dir, "output", f"step{step}", "rank")
            offline_dir = os.path.join(run.dir, "offline", f"step{step}")
            offline = subprocess.run([os.path.join(BIN_DIR, "tprobe"), "precheck", run.folder(step), "-o", offline_dir],
                                     capture_output=True, text=True, timeout=120)
            self.assertIn(offline.returncode, (0, 1), offline.stderr)
            for kind in ("result", "details"):
                live = glob.glob(os.path.join(live_dir, f"accuracy_checking_{kind}_*.csv"))
                off = glob.glob(os.path.join(offline_dir, f"accuracy_checking_{kind}_*.csv"))
                self.assertEqual((len(live), len(off)), (1, 1), (live_dir, offline_dir))
                self.assertEqual(read(live[0]), read(off[0]), f"step {step} {kind}")
            # Every API call of the dump has its row (nothing sampled away on this small run).
            rows = read(glob.glob(os.path.join(live_dir, "accuracy_checking_result_*.csv"))[0]).decode("utf-8-sig")
            calls = [k[:-len(".forward")] for k in run.data(step) if k.endswith(".forward")]
            self.assertEqual([line.split(",")[0] for line in rows.splitlines()[1:]], calls)

    def test_rows_equal_tprobe_precheck_over_the_same_runs_dump(self):
        run = self.run_live(False, "clean")
        self.assertIn("tprobe-precheck-live: 34 APIs:", run.result.stdout)
        self.assertIn(" 0 error,", run.result.stdout)
        self.assertNotIn("first API not pass", run.result.stdout)
        self.assertNotIn("not checked", run.result.stdout)
        self.assert_rows_equal_offline(run)

    def test_a_wrong_cpu_kernel_is_named(self):
        run = self.run_live(True, "wrong")
        out = run.result.stdout
        self.assertIn("tprobe-precheck-live: first API not pass: step 0 rank -1 Functional.gelu.0 "
                      "(Functional.gelu.0.forward.output.0", out)
        # gelu of each of the two steps, and nothing else.
        self.assertIn(" 2 error,", out)
        self.assertIn('stage "precheck" (tprobe-precheck-live) found what it looks for (exit 1)', run.result.stderr)
        self.assert_rows_equal_offline(run)
        rows = read(glob.glob(os.path.join(run.dir, "output", "step0", "rank", "accuracy_checking_result_*.csv"))[0])
        self.assertIn(b"Functional.gelu.0,error,", rows)


if __name__ == "__main__":
    import unittest
    unittest.main()
