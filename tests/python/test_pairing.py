"""tprobe compare pairs the rows of dumps that name calls differently or record other operators
(docs/stages/compare.md, "Matching"): an msprobe-format dump of a run against tprobe's dump of
the same run, and a tprobe dump against one with an inserted operator.

CI has no msprobe, so the msprobe-format dump is recorded here the way msprobe records (reference
§2.2, §2.5, §2.7): the public APIs of torch.nn.functional, torch and torch.Tensor are wrapped
("Functional.linear.0.forward", "Tensor.transpose.0.forward", "Tensor.__add__.0.forward"), calls
made inside a wrapped call are not recorded, arguments become input_args / input_kwargs leaves,
modules (mix) become "Module.{path}.{Class}.forward.{n}" at their forward hook. It records forward
entries only, as msprobe's data_mode ["forward"] does.

A row is paired right when its bench row holds the same data: the same state, shape and
statistics (the runs are deterministic; tools differ only in the last digits of a Norm).
"""

import glob
import json
import os
import re
import subprocess
import unittest

import tprobe_testing as tt

MODELS = """
import torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(1)
INSERT = os.environ.get("INSERT") == "1"

class ConvGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, padding=1)
        self.gru = nn.GRU(8, 16, batch_first=True)
        self.fc = nn.Linear(16, 5)
    def forward(self, x):
        h = F.relu(self.conv(x)).transpose(1, 2)
        o, _ = self.gru(h)
        return self.fc(o[:, -1])

class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Linear(16, 32)
        self.q, self.k, self.v = nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32)
        self.norm = nn.LayerNorm(32)
        self.out = nn.Linear(32, 5)
    def forward(self, x):
        h = self.emb(x)
        if INSERT:
            F.gelu(x)  # the inserted operator: its result is not used
        a = torch.softmax(self.q(h) @ self.k(h).transpose(-1, -2) / 32 ** 0.5, dim=-1)
        h = self.norm(h + a @ self.v(h))
        return self.out(F.gelu(h).mean(dim=1) + F.gelu(h[:, 0]))

class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 6, 3)
        self.c2 = nn.Conv2d(6, 8, 3)
        self.fc = nn.Linear(8 * 2 * 2, 5)
    def forward(self, x):
        h = F.max_pool2d(F.relu(self.c1(x)), 2)
        h = F.max_pool2d(F.relu(self.c2(h)), 2)
        return self.fc(h.flatten(1))

def make(name):
    torch.manual_seed(0)
    if name == "convgru":
        return ConvGRU(), torch.randn(8, 4, 10), torch.randint(0, 5, (8,))
    if name == "attention":
        return Attention(), torch.randn(4, 6, 16), torch.randint(0, 5, (4,))
    return ConvNet(), torch.randn(4, 3, 14, 14), torch.randint(0, 5, (4,))
"""

# msprobe's naming, recorded with wrappers (see the module docstring).
RECORDER = """
import json, os, threading, torch, torch.nn.functional as F

class Recorder:
    APIS = {
        "Functional": (F, ["conv1d", "conv2d", "linear", "relu", "gelu", "layer_norm", "softmax", "cross_entropy",
                           "max_pool2d", "dropout"]),
        "Torch": (torch, ["matmul", "softmax", "tanh", "cat", "flatten", "relu", "add"]),
        "Tensor": (torch.Tensor, ["transpose", "__add__", "__mul__", "__matmul__", "__truediv__", "__getitem__",
                                  "view", "reshape", "mean", "permute", "flatten", "contiguous"]),
    }

    def __init__(self, model, level):
        self.data, self.counts, self.local = {}, {}, threading.local()
        for prefix, (owner, names) in self.APIS.items():
            for name in names:
                setattr(owner, name, self.wrap(prefix, name, getattr(owner, name)))
        if level == "mix":
            for path, module in model.named_modules():
                if path:
                    module.register_forward_hook(self.module_hook(path))

    def depth(self):
        return getattr(self.local, "depth", 0)

    def leaf(self, v, key=None):
        if isinstance(v, torch.Tensor):
            self.local.depth = self.depth() + 1
            try:
                t = v.detach()
                f = t.float() if not t.is_floating_point() or t.dtype == torch.float64 else t
                return {"type": "torch.Tensor", "dtype": str(t.dtype), "shape": list(t.shape),
                        "Max": f.max().item(), "Min": f.min().item(), "Mean": f.mean().item(),
                        "Norm": f.norm().item(), "requires_grad": v.requires_grad}
            finally:
                self.local.depth -= 1
        if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
            return [self.leaf(x) for x in v]
        if isinstance(v, torch.Size):
            return {"type": "torch.Size", "value": list(v)}
        if isinstance(v, slice):
            return {"type": "slice", "value": [v.start, v.stop, v.step]}
        if isinstance(v, torch.dtype):
            return {"type": "torch.dtype", "value": str(v)}
        if isinstance(v, (bool, int, float, str)):
            return {"type": type(v).__name__, "value": v}
        return None

    def count(self, prefix):
        n = self.counts.get(prefix, 0)
        self.counts[prefix] = n + 1
        return n

    def wrap(self, prefix, name, original):
        def wrapper(*args, **kwargs):
            if self.depth() > 0:
                return original(*args, **kwargs)
            entry = f"{prefix}.{name}.{self.count(prefix + '.' + name)}.forward"
            self.data[entry] = None  # inserted at the pre-hook: calls in call order
            self.local.depth = 1
            try:
                out = original(*args, **kwargs)
            finally:
                self.local.depth = 0
            self.data[entry] = {"input_args": self.leaf(list(args)),
                                "input_kwargs": {k: self.leaf(v) for k, v in kwargs.items()},
                                "output": self.leaf(list(out) if isinstance(out, tuple) else [out])}
            return out
        return wrapper

    def module_hook(self, path):
        def hook(module, inputs, output):
            prefix = f"Module.{path}.{type(module).__name__}.forward"
            entry = f"{prefix}.{self.count(prefix)}"
            self.data[entry] = {"input_args": self.leaf(list(inputs)), "input_kwargs": {},
                                "output": self.leaf(list(output) if isinstance(output, tuple) else [output]),
                                "parameters": {k: self.leaf(p) for k, p in module.named_parameters(recurse=False)}}
        return hook

    def write(self, folder, level):
        os.makedirs(folder, exist_ok=True)
        doc = {"task": "statistics", "level": level, "framework": "pytorch", "dump_data_dir": None,
               "data": {k: v for k, v in self.data.items() if v is not None}}
        with open(os.path.join(folder, "dump.json"), "w") as f:
            json.dump(doc, f, indent=1)
"""

TRAIN = """
import os, sys, json
MODELS
RECORDER
model, x, y = make(os.environ["MODEL_NAME"])
level = json.load(open("config.json"))["level"]
opt = torch.optim.SGD(model.parameters(), lr=0.1)
if os.environ.get("RECORD") == "msprobe":
    recorder = Recorder(model, level)
    loss = F.cross_entropy(model(x), y)
    recorder.write("dump/step0/rank", level)
else:
    from tprobe import PrecisionDebugger
    debugger = PrecisionDebugger(config_path="./config.json")
    debugger.start(model)
    loss = F.cross_entropy(model(x), y)
    loss.backward(); opt.step(); opt.zero_grad()
    debugger.stop(); debugger.step()
"""


UNINITIALISED = re.compile(r"^\w+\.(empty|empty_like|empty_strided|new_empty|new_empty_strided)\.\d+\.forward\.output")


def flat(path):
    """Tensor rows of a dump.json as compare names them: name → (state, shape, Max, Min, Mean, Norm)."""
    rows = {}

    def leaf(name, v, state):
        if isinstance(v, dict) and isinstance(v.get("type"), str):
            if "Max" in v and isinstance(v.get("shape"), list):
                rows[name] = (state, str(v["shape"]), v["Max"], v["Min"], v["Mean"], v["Norm"])
        elif isinstance(v, dict):
            for k, x in v.items():
                leaf(f"{name}.{k}", x, state)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                leaf(f"{name}.{i}", x, state)

    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    for entry, body in data.items():
        for section, state in (("input_args", "input"), ("input_kwargs", "input"), ("input", "input"),
                               ("output", "output"), ("parameters", "input")):
            if section in body:
                leaf(f"{entry}.{'parameters' if section == 'parameters' else state}", body[section], state)
    return rows


def same_data(a, b):
    if a[:2] != b[:2]:
        return False
    for x, y in zip(a[2:], b[2:]):
        if isinstance(x, bool) or isinstance(y, bool) or x is None or y is None:
            if x != y:
                return False
        elif abs(x - y) > 1e-5 * max(1.0, abs(x), abs(y)):
            return False
    return True


class PairingTest(tt.CaptureTest):
    def dump(self, model, level, record, insert=False):
        env = {"MODEL_NAME": model, "RECORD": record, "INSERT": "1" if insert else "0"}
        script = TRAIN.replace("MODELS", MODELS).replace("RECORDER", RECORDER)
        run = self.run_script(script, config=tt.default_config(level=level), env=env,
                              name=f"{model}-{level}-{record}-{int(insert)}")
        return os.path.join(run.dump, "step0")

    def compare(self, npu_step, bench_step, *options):
        out = os.path.join(self.tmp, f"out-{len(os.listdir(self.tmp))}")
        result = subprocess.run([os.path.join(tt.BIN_DIR, "tprobe"), "compare", npu_step, bench_step, "-o", out,
                                 *options], capture_output=True, text=True, timeout=120)
        self.assertIn(result.returncode, (0, 1), result.stderr)
        with open(glob.glob(os.path.join(out, "compare_result_*.json"))[0], encoding="utf-8") as f:
            return json.load(f)

    def tally(self, result, npu_step, bench_step):
        """(rows paired right, tensor rows): right = paired with a row of the same data, or unpaired
        when the other dump has no such row."""
        npu = flat(os.path.join(npu_step, "rank", "dump.json"))
        bench = flat(os.path.join(bench_step, "rank", "dump.json"))
        columns = result["columns"]
        ni, bi = columns.index("NPU Name"), columns.index("Bench Name")
        right = total = 0
        self.wrong = []
        for row in result["rows"]:
            name, partner = row[ni], row[bi]
            if name not in npu or UNINITIALISED.search(name):
                continue  # not a tensor, or memory never written (its statistics differ every run)
            total += 1
            candidates = {b for b, v in bench.items() if same_data(npu[name], v)}
            good = (partner in candidates) if candidates else partner == "N/A"
            right += good
            if not good:
                self.wrong.append((name, partner, sorted(candidates)[:2]))
        return right, total

    def test_msprobe_naming_pairs_with_tprobe(self):
        for model in ("convgru", "attention", "convnet"):
            for level in ("L1", "mix"):
                with self.subTest(model=model, level=level):
                    ms = self.dump(model, level, "msprobe")
                    tp = self.dump(model, level, "tprobe")
                    result = self.compare(ms, tp)
                    self.assertEqual(result["match"], "auto")
                    self.assertEqual(result["columns"][-1], "Match")
                    right, total = self.tally(result, ms, tp)
                    self.assertGreater(total, 10)
                    self.assertGreaterEqual(right / total, 0.95, f"{right}/{total}: {self.wrong}")
                    self.assertGreater(result["paired_by_alignment"], 0)  # other names were paired
                    by_name, _ = self.tally(self.compare(ms, tp, "--match", "name"), ms, tp)
                    self.assertLess(by_name, right)  # what the alignment adds

    def test_inserted_operator_pairs_every_other_row(self):
        for level in ("L1", "mix"):
            with self.subTest(level=level):
                plain = self.dump("attention", level, "tprobe")
                inserted = self.dump("attention", level, "tprobe", insert=True)
                result = self.compare(plain, inserted)
                right, total = self.tally(result, plain, inserted)
                self.assertEqual(right, total, self.wrong)
                by_name, _ = self.tally(self.compare(plain, inserted, "--match", "name"), plain, inserted)
                self.assertLess(by_name, total)  # name + counter matching shifts every later gelu
                # The other way round, only the inserted call's rows (input, output, its backward's
                # input and output) are left without a partner.
                back = self.compare(inserted, plain)
                right, total = self.tally(back, inserted, plain)
                self.assertGreaterEqual(right, total - 4)
                self.assertGreaterEqual(back["unmatched_rows"], 2)

    def test_gru_step_pairs_with_msprobe_8_3_3s_dump(self):
        """A dump msprobe itself wrote, against a fresh tprobe dump of the same run (issue 60 item 8).

        fixtures/msprobe_gru_L1/dump.json: msprobe 8.3.3 (Ascend-mstt 99c2e0f99, installed by
        shared/tools/msprobe-setup.sh on torch 1.13) dumping one step of
        `bench/train_gru.py --steps 1 --hidden 16 --seq 8 --layers 1` (seed 1234) with config task
        statistics, level L1, data_mode all; kept: its first eight entries, the linear head, the two
        flattens, the loss (F.cross_entropy with keywords from nn.CrossEntropyLoss), the autograd
        engine's ones_like and their backward entries (the optimizer's entries dropped)."""
        fixture = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "msprobe_gru_L1", "dump.json")
        gru = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "bench", "train_gru.py")
        script = f"""
import sys
sys.path.insert(0, {os.path.dirname(gru)!r})
import train_gru
train_gru.main(["--steps", "1", "--hidden", "16", "--seq", "8", "--layers", "1", "--quiet",
                "--config", "./config.json", "--dump-path", "./dump"])
"""
        run = self.run_script(script, config=tt.default_config(level="L1"), name="gru-msprobe")
        tp = os.path.join(run.dump, "step0", "rank", "dump.json")

        def pairs(result):
            columns = result["columns"]
            ni, bi = columns.index("NPU Name"), columns.index("Bench Name")
            return {row[ni]: row[bi] for row in result["rows"]}

        ms_to_tp = pairs(self.compare(fixture, tp))
        paired = sum(b != "N/A" for b in ms_to_tp.values())
        # 26 of 27 rows: msprobe's Functional.linear.0.backward.output.0 ([16, 8, 8], the gradient of
        # the output where the input's belongs) has no tprobe equal.
        self.assertGreaterEqual(paired / len(ms_to_tp), 0.95, ms_to_tp)
        ce, loss = "Functional.cross_entropy.0.forward.input.", "Functional.cross_entropy_loss.0.forward.input."
        # Keywords (msprobe) with positional arguments (tprobe) of the same schema name.
        for keyword, position in (("weight", 2), ("reduction", 3), ("ignore_index", 4), ("label_smoothing", 5)):
            self.assertEqual(ms_to_tp[ce + keyword], loss + str(position), keyword)
        self.assertEqual(ms_to_tp["Torch.ones_like.0.forward.input.memory_format"],
                         "Torch.ones_like.0.forward.input.memory_format")
        # The linear's bias gradient: msprobe's second backward output, tprobe's third.
        self.assertEqual(ms_to_tp["Functional.linear.0.backward.output.1"], "Functional.linear.0.backward.output.2")

        tp_to_ms = pairs(self.compare(tp, fixture))
        self.assertEqual(tp_to_ms[loss + "3"], ce + "reduction")
        self.assertEqual(tp_to_ms[loss + "4"], ce + "ignore_index")
        self.assertEqual(tp_to_ms["Functional.linear.0.backward.output.2"], "Functional.linear.0.backward.output.1")
        # Every tprobe row of the entries msprobe recorded pairs, but for what msprobe never saw:
        # defaults nobody passed (ones_like's dtype, layout, device, pin_memory; y.flatten()'s
        # start_dim and end_dim), cross_entropy_loss's None gradient for its target, and the linear's
        # input and weight gradients (msprobe's hook on a 3-d linear sees the output's).
        recorded = {name.split(".forward")[0].split(".backward")[0] for name in ms_to_tp}
        aliases = {"Functional.cross_entropy.0": "Functional.cross_entropy_loss.0", "Tensor.flatten.0": "Torch.flatten.0",
                   "Tensor.flatten.1": "Torch.flatten.1"}
        recorded = {aliases.get(n, n) for n in recorded}
        mine = {n: b for n, b in tp_to_ms.items() if n.split(".forward")[0].split(".backward")[0] in recorded}
        unpaired = sorted(n for n, b in mine.items() if b == "N/A")
        self.assertEqual(unpaired, sorted([
            "Functional.cross_entropy_loss.0.backward.output.1", "Functional.linear.0.backward.output.0",
            "Functional.linear.0.backward.output.1", "Torch.flatten.1.forward.input.1", "Torch.flatten.1.forward.input.2",
            "Torch.ones_like.0.forward.input.device", "Torch.ones_like.0.forward.input.dtype",
            "Torch.ones_like.0.forward.input.layout", "Torch.ones_like.0.forward.input.pin_memory"]))


if __name__ == "__main__":
    unittest.main()
