"""A step's files are final when debugger.step() returns (msprobe's synchronous dump): the script
reads step{N}/rank/dump.json, stack.json and construct.json right after step() and finds what the
dump holds at the end, at levels L0, L1 and mix, direct and under `tprobe run`. With
"async_dump": true the step does not wait, and close() is still the barrier for everything."""

import json
import os
import unittest

import tprobe_testing as tt

READ_AFTER_STEP = """
import json, os
from tprobe import PrecisionDebugger
from model import make
import torch, torch.nn.functional as F
model, x, y = make()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
debugger = PrecisionDebugger(config_path="./config.json")
seen = []
for step in range(STEPS):
    debugger.start(model)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    debugger.stop()
    debugger.step()
    folder = os.path.join("dump", f"step{step}", "rank")
    files = {}
    for name in ("dump.json", "stack.json", "construct.json"):
        path = os.path.join(folder, name)
        files[name] = open(path).read() if os.path.exists(path) else None
    tensors = os.path.join(folder, "dump_tensor_data")
    files["tensor_files"] = sorted(os.listdir(tensors)) if os.path.isdir(tensors) else []
    seen.append(files)
with open("seen.json", "w") as f:
    json.dump(seen, f)
debugger.close()
"""


class StepBarrierTest(tt.CaptureTest):
    def check_read_after_step(self, config, manifest=None, steps=3):
        run = self.run_script(READ_AFTER_STEP, config=config, manifest=manifest, steps=steps)
        with open(os.path.join(run.dir, "seen.json")) as f:
            seen = json.load(f)
        self.assertEqual(len(seen), steps)
        for step, files in enumerate(seen):
            for name in ("dump.json", "stack.json", "construct.json"):
                self.assertIsNotNone(files[name], f"step {step}: no {name} when step() returned")
                self.assertEqual(json.loads(files[name]), run.load(name, step),
                                 f"step {step}: {name} read after step() differs from the final file")
            data = run.data(step)
            self.assertGreater(len(data), 3)
            folder = os.path.join(run.folder(step), "dump_tensor_data")
            final_tensors = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
            self.assertEqual(files["tensor_files"], final_tensors, f"step {step}: tensor files")
        return run, seen

    def test_l1_direct(self):
        self.check_read_after_step(tt.default_config(level="L1"))

    def test_l0_direct(self):
        self.check_read_after_step(tt.default_config(level="L0"))

    def test_mix_tensor_direct(self):
        run, seen = self.check_read_after_step(tt.default_config(level="mix", task="tensor"))
        self.assertTrue(seen[0]["tensor_files"], "a tensor dump writes tensor files")
        self.assertTrue(any(n.startswith("Module.") for n in json.loads(seen[0]["dump.json"])["data"]))

    def test_mix_under_tprobe_run(self):
        # capture → stats → writer: the barrier crosses a stage before it reaches the writer.
        self.check_read_after_step(tt.default_config(level="mix"), manifest="statistics.json")

    def test_async_dump_keeps_files_final_at_close(self):
        config = tt.default_config(level="L1")
        config["async_dump"] = True
        run = self.run_script(READ_AFTER_STEP, config=config, steps=2)
        for step in (0, 1):
            self.assertGreater(len(run.data(step)), 3)


if __name__ == "__main__":
    unittest.main()
