"""What the Python tests of the PyTorch capture share: run a training script in a fresh
/usr/bin/python3 (one capture session per process, as in real use) in a temporary directory,
with a config.json, directly or under `tprobe run`; then read the dump it wrote.

ctest sets (tests/python/CMakeLists.txt): PYTHONPATH (python/ and this directory),
TPROBE_TORCH_LIBRARY, TPROBE_BIN_DIR, TPROBE_PIPELINES and TPROBE_TEST_TMP; nothing is guessed.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import torch

PYTHON = sys.executable
BIN_DIR = os.environ.get("TPROBE_BIN_DIR", "")
PIPELINES = os.environ.get("TPROBE_PIPELINES", "")


def default_config(**overrides):
    section = {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}
    config = {"task": "statistics", "dump_path": "./dump", "rank": [], "step": [], "level": "L1",
              "statistics": section}
    for key, value in overrides.items():
        if key in section:
            section[key] = value
        else:
            config[key] = value
    if config["task"] == "tensor":
        config["tensor"] = config.pop("statistics")
        config["tensor"].pop("summary_mode", None)
    return config


# A small model whose dump is known by heart: used by several tests.
MODEL = textwrap.dedent("""
    import torch, torch.nn as nn, torch.nn.functional as F
    torch.set_num_threads(1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.act = nn.ReLU()
        def forward(self, x):
            return self.act(self.fc(x)) + x

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(4, 8)
            self.block = Block()
            self.out = nn.Linear(8, 3)
        def forward(self, x):
            return self.out(self.block(torch.relu(self.inp(x))))

    def make(seed=0):
        torch.manual_seed(seed)
        model = Net()
        x = torch.randn(5, 4)
        y = torch.tensor([0, 2, 1, 1, 0])
        return model, x, y
""")

# The training loop with msprobe's three lines, for `steps` steps.
TRAIN = textwrap.dedent("""
    from tprobe import PrecisionDebugger
    from model import make
    import torch.nn.functional as F
    import torch
    model, x, y = make()
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


class Run:
    """One finished script run and its dump."""

    def __init__(self, directory, result):
        self.dir = directory
        self.result = result
        self.dump = os.path.join(directory, "dump")

    def folder(self, step=0, rank=None):
        return os.path.join(self.dump, f"step{step}", "rank" if rank is None else f"rank{rank}")

    def load(self, name="dump.json", step=0, rank=None):
        with open(os.path.join(self.folder(step, rank), name), encoding="utf-8") as f:
            return json.load(f)

    def data(self, step=0, rank=None):
        """The data of dump.json, or of debug.json (level debug writes that one instead)."""
        debug = os.path.join(self.folder(step, rank), "debug.json")
        return self.load("debug.json" if os.path.exists(debug) else "dump.json", step, rank)["data"]


class CaptureTest(unittest.TestCase):
    """Base class: self.run_script(...) runs a script in a temporary directory."""

    def setUp(self):
        root = os.environ.get("TPROBE_TEST_TMP") or None
        if root:
            os.makedirs(root, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="tprobe-py-", dir=root)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_script(self, script, config=None, env=None, manifest=None, steps=1, expect_ok=True, name=None,
                   timeout=240, ignore_sigint=False):
        """Writes model.py, config.json and train.py (`script` with STEPS replaced) and runs it with
        /usr/bin/python3: directly (direct mode) or under `tprobe run MANIFEST` if manifest is set."""
        directory = os.path.join(self.tmp, name or self.id().rsplit(".", 1)[-1])
        os.makedirs(directory)
        with open(os.path.join(directory, "model.py"), "w") as f:
            f.write(MODEL)
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(config if config is not None else default_config(), f)
        with open(os.path.join(directory, "train.py"), "w") as f:
            f.write(script.replace("STEPS", str(steps)))
        command = [PYTHON, "train.py"]
        if manifest:
            command = [os.path.join(BIN_DIR, "tprobe"), "run", os.path.join(PIPELINES, manifest), "--"] + command
        if ignore_sigint:  # as a background job of a non-interactive shell starts
            command = ["/bin/sh", "-c", 'trap "" INT; exec "$@"', "sh"] + command
        full_env = dict(os.environ)
        full_env.pop("TPROBE_ENDPOINT", None)
        full_env.update(env or {})
        result = subprocess.run(command, cwd=directory, env=full_env, capture_output=True, text=True,
                                timeout=timeout)
        if expect_ok and result.returncode != 0:
            self.fail(f"{' '.join(command)} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return Run(directory, result)


def stats_of(t):
    """msprobe's statistics of a tensor, as torch computes them (the reference)."""
    t = t.detach()
    if t.dtype == torch.bool:
        return {"Max": bool(t.any()), "Min": bool(t.all()), "Mean": None, "Norm": None}
    # msprobe: float64 and integers are converted to float32 first, other floats stay as they are.
    f = t.float() if not t.is_floating_point() or t.dtype == torch.float64 else t
    return {"Max": f.max().item(), "Min": f.min().item(), "Mean": f.mean().item(), "Norm": f.norm().item()}
