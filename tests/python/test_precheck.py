"""`tprobe precheck` (msprobe's run_ut / acc_check) on dumps of real PyTorch trainings: a small
transformer block (embedding, linear, layer_norm or an RMS norm, softmax attention, gelu, dropout,
cross_entropy, backward, an SGD step with momentum) dumped at L1.

* An ATen CPU kernel overridden with a wrong one (torch.library) is named, and nothing else is.
* Clean fp32 and bf16 runs pass; whether a bf16 torch.matmul is named follows from this torch's
  own arithmetic, measured here in Python on the dumped operands.
* A statistics dump (random mode) checks the same APIs.
* The CLI on real dumps: -j, resume, -save_error_data, -config white lists, msprobe's spellings,
  the three forms of DUMP, and one-line refusals of bad input.
"""

import csv
import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import textwrap
import unittest

import numpy as np
import torch

from tprobe_testing import BIN_DIR, PYTHON, default_config

TPROBE = os.path.join(BIN_DIR, "tprobe")

# Knobs (environment): WRONG_GELU=1 replaces aten::gelu's CPU kernel in the training process only
# (the replay keeps LibTorch's); DTYPE the model's dtype; NORM layer_norm | rms; ATTN einsum |
# linear (q @ k^T and att @ v as F.linear on contiguous operands) | matmul (att @ v as torch.matmul).
SCRIPT = textwrap.dedent("""
    import os
    import torch, torch.nn as nn, torch.nn.functional as F
    from tprobe import PrecisionDebugger
    torch.set_num_threads(1)
    if os.environ.get("WRONG_GELU"):
        def wrong_gelu(x, approximate="none"):  # sigmoid, not gelu: no recursion into aten::gelu
            return x * torch.sigmoid(1.9 * x)
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("gelu", wrong_gelu, "CPU")
    DTYPE = getattr(torch, os.environ.get("DTYPE", "float32"))
    NORM = os.environ.get("NORM", "layer_norm")
    ATTN = os.environ.get("ATTN", "einsum")

    class Norm(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))
            self.bias = nn.Parameter(torch.zeros(d))
        def forward(self, x):
            if NORM == "rms":
                return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
            return F.layer_norm(x, x.shape[-1:], self.weight, self.bias)

    class Block(nn.Module):
        def __init__(self, d=16):
            super().__init__()
            self.ln1, self.ln2 = Norm(d), Norm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.drop = nn.Dropout(0.1)
        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
            if ATTN == "einsum":
                scores = torch.einsum("btd,bsd->bts", q, k)
            else:
                scores = torch.stack([F.linear(q[i], k[i]) for i in range(x.shape[0])])
            att = self.drop(F.softmax(scores / x.shape[-1] ** 0.5, dim=-1))
            if ATTN == "einsum":
                ctx = torch.einsum("bts,bsd->btd", att, v)
            elif ATTN == "matmul":
                ctx = torch.matmul(att, v)
            else:
                ctx = torch.stack([F.linear(att[i], v[i].t().contiguous()) for i in range(x.shape[0])])
            x = x + self.drop(self.proj(ctx))
            return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))

    class Net(nn.Module):
        def __init__(self, vocab=32, d=16):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.block = Block(d)
            self.ln = Norm(d)
            self.head = nn.Linear(d, vocab)
        def forward(self, ids):
            return self.head(self.ln(self.block(self.emb(ids))))

    torch.manual_seed(0)
    model = Net().to(DTYPE)
    ids, y = torch.randint(0, 32, (2, 8)), torch.randint(0, 32, (2, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    debugger = PrecisionDebugger(config_path="./config.json")
    debugger.start(model)
    loss = F.cross_entropy(model(ids).flatten(0, 1).float(), y.flatten())  # the loss in fp32, as usual
    loss.backward()
    opt.step()
    opt.zero_grad()
    debugger.stop()
    debugger.step()
""")

FIRST_ERROR = re.compile(r"tprobe-precheck: first API (?:in error|not pass): (\S+) \(")
SUMMARY = re.compile(r"tprobe-precheck: (\d+) APIs: (\d+) pass, (\d+) warning, (\d+) error, (\d+) SKIP; (\S+)")

_root = None
_trainings = {}


def setUpModule():
    global _root
    parent = os.environ.get("TPROBE_TEST_TMP") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    _root = tempfile.mkdtemp(prefix="tprobe-precheck-", dir=parent)


def tearDownModule():
    shutil.rmtree(_root, ignore_errors=True)


def training(name, task="tensor", **env):
    """The rank folder of a one-step training's dump (trained once per name for the module)."""
    if name not in _trainings:
        directory = os.path.join(_root, name)
        os.makedirs(directory)
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(default_config(task=task), f)
        with open(os.path.join(directory, "train.py"), "w") as f:
            f.write(SCRIPT)
        full_env = dict(os.environ)
        full_env.pop("TPROBE_ENDPOINT", None)
        full_env.update(env)
        r = subprocess.run([PYTHON, "train.py"], cwd=directory, env=full_env, capture_output=True, text=True,
                           timeout=120)
        if r.returncode != 0:
            raise AssertionError(f"training {name} failed:\n{r.stdout}\n{r.stderr}")
        _trainings[name] = os.path.join(directory, "dump", "step0", "rank")
    return _trainings[name]


def precheck(args, cwd=None):
    return subprocess.run([TPROBE] + args, capture_output=True, text=True, timeout=120, cwd=cwd or _root)


def slurp(path):
    with open(path, "rb") as f:
        return f.read()


def read_rows(path):
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.reader(f))


def results(out_dir):
    """{API: (forward, backward, message)} of the one result CSV in out_dir, in file order."""
    files = glob.glob(os.path.join(out_dir, "accuracy_checking_result_*.csv"))
    assert len(files) == 1, files
    rows = read_rows(files[0])
    assert rows[0] == ["API name", "Forward Test Success", "Backward Test Success", "Message"], rows[0]
    return {r[0]: (r[1], r[2], r[3] if len(r) > 3 else "") for r in rows[1:]}


def errors(rows):
    return sorted(api for api, (fwd, bwd, _) in rows.items() if "error" in (fwd, bwd))


def forward_names(rank_folder):
    with open(os.path.join(rank_folder, "dump.json"), encoding="utf-8") as f:
        return [k[:-len(".forward")] for k in json.load(f)["data"] if k.endswith(".forward")]


def dumped_tensor(rank_folder, entry):
    """A dumped argument as the torch tensor it was (bf16 is stored as float32 in the .npy)."""
    a = np.load(os.path.join(rank_folder, "dump_tensor_data", entry["data_name"]))
    return torch.from_numpy(a).to(getattr(torch, entry["dtype"].split(".")[1]))


def bf16_gemm_accumulates_in_bf16():
    """Whether this torch's CPU bfloat16 gemm accumulates in bfloat16 (torch 1.13 on a CPU without
    AVX-512: 4096 ones sum to 256). A bfloat16 linear's weight gradient then sums a batch in
    bfloat16, worse than rounding, and precheck is right to name it (8 rows: a 1-row product takes
    a dot kernel that accumulates in float32)."""
    ones = torch.ones(8, 4096, dtype=torch.bfloat16)
    return torch.mm(ones, ones.t().contiguous())[0, 0].item() != 4096


BF16_GEMM_IN_BF16 = bf16_gemm_accumulates_in_bf16()


def gemm_named(rows):
    """The linears precheck names for their gradients alone where this torch's bf16 gemm
    accumulates in bf16 (their forward passes); none elsewhere."""
    return [api for api in errors(rows) if BF16_GEMM_IN_BF16 and api.startswith("Functional.linear.")
            and rows[api][0] == "pass" and rows[api][1] == "error"]


class PrecheckTest(unittest.TestCase):
    def run_ok(self, args, expect, cwd=None):
        r = precheck(args, cwd)
        self.assertEqual(r.returncode, expect, r.stdout + r.stderr)
        return r

    def summary(self, r):
        m = SUMMARY.search(r.stdout)
        self.assertIsNotNone(m, r.stdout)
        return [int(x) for x in m.groups()[:5]]


class WrongKernel(PrecheckTest):
    def test_a_wrong_gelu_kernel_is_named_and_nothing_else(self):
        rank = training("wrong", WRONG_GELU="1")
        out = os.path.join(_root, "out-wrong")
        r = self.run_ok(["precheck", rank, "-o", out], 1)
        m = FIRST_ERROR.search(r.stdout)
        self.assertIsNotNone(m, r.stdout)
        self.assertEqual(m.group(1), "Functional.gelu.0")
        rows = results(out)
        self.assertEqual(list(rows), forward_names(rank))
        self.assertEqual(errors(rows), ["Functional.gelu.0"])
        self.assertEqual(rows["Functional.gelu.0"][0], "error")
        total, passed, warned, failed, skipped = self.summary(r)
        self.assertEqual((total, failed), (len(rows), 1))
        # Every other API of the model was really judged: the ordinary ones pass (linear's
        # backward too), and a SKIP is one of msprobe's own, never a binding failure.
        for api in ("Functional.embedding.0", "Functional.layer_norm.0", "Torch.einsum.0", "Functional.softmax.0",
                    "Functional.linear.0", "Functional.linear.4", "Functional.cross_entropy_loss.0"):
            self.assertEqual(rows[api][0], "pass", (api, rows[api]))
        self.assertEqual(rows["Functional.linear.0"][1], "pass")
        for api, (fwd, bwd, msg) in rows.items():
            self.assertNotIn("do not fit", msg, api)
            self.assertNotIn("no overload", msg, api)


class CleanRuns(PrecheckTest):
    def assert_passes(self, rank, out, bf16=False):
        """Every API passes; in a bf16 run, but the linears whose gradients this torch's gemm sums
        in bf16 (gemm_named)."""
        r = precheck(["precheck", rank, "-o", out])
        rows = results(out)
        named = gemm_named(rows) if bf16 else []
        self.assertEqual(r.returncode, 1 if named else 0, r.stdout + r.stderr)
        if not named:
            self.assertNotRegex(r.stdout, FIRST_ERROR)
        self.assertEqual(errors(rows), named)
        self.assertEqual(self.summary(r)[3], len(named))
        skipped = {api.rsplit(".", 1)[0] for api, (fwd, _, _) in rows.items() if fwd == "SKIP"}
        self.assertLessEqual(skipped, {"Torch.empty", "Tensor.to"}, rows)  # msprobe's unsupported_api_list
        return rows

    def test_fp32_run_passes(self):
        rows = self.assert_passes(training("fp32"), os.path.join(_root, "out-fp32"))
        self.assertEqual(rows["Functional.gelu.0"][:2], ("pass", "pass"))

    def test_bf16_run_passes(self):
        # A bf16 model on the kernels this torch computes within bf16 rounding: F.linear on contiguous
        # operands, an RMS norm of elementwise ops (torch 1.13's bf16 layer_norm, its bf16 rsqrt and a
        # bf16 mm of non-contiguous operands are measurably worse than rounding, and are named).
        rank = training("bf16", DTYPE="bfloat16", NORM="rms", ATTN="linear")
        with open(os.path.join(rank, "dump.json"), encoding="utf-8") as f:
            data = json.load(f)["data"]
        self.assertEqual(data["Functional.linear.0.forward"]["output"][0]["dtype"], "torch.bfloat16")
        self.assertEqual(data["Functional.gelu.0.forward"]["output"][0]["dtype"], "torch.bfloat16")
        rows = self.assert_passes(rank, os.path.join(_root, "out-bf16"), bf16=True)
        self.assertEqual(rows["Functional.gelu.0"][:2], ("pass", "pass"))

    def test_bf16_matmul_is_named_iff_this_torch_computes_it_worse_than_rounding(self):
        rank = training("bf16-matmul", DTYPE="bfloat16", NORM="rms", ATTN="matmul")
        with open(os.path.join(rank, "dump.json"), encoding="utf-8") as f:
            entry = json.load(f)["data"]["Torch.matmul.0.forward"]
        a, b = (dumped_tensor(rank, e) for e in entry["input_args"])
        self.assertEqual((a.dtype, b.dtype), (torch.bfloat16, torch.bfloat16))
        exact = a.double() @ b.double()
        rmse = lambda t: (t.double() - exact).pow(2).mean().sqrt().item()
        ratio = rmse(torch.matmul(a, b)) / rmse(exact.to(torch.bfloat16))
        worse = ratio > 2
        out = os.path.join(_root, "out-bf16-matmul")
        r = precheck(["precheck", rank, "-o", out])
        rows = results(out)
        named = gemm_named(rows)
        self.assertEqual(r.returncode, 1 if worse or named else 0, r.stdout + r.stderr)
        self.assertEqual(errors(rows), sorted((["Torch.matmul.0"] if worse else []) + named),
                         f"bf16 matmul {tuple(a.shape)} @ {tuple(b.shape)}: rmse {ratio:.2f}x rounding's")
        if worse and not named:
            self.assertEqual(FIRST_ERROR.search(r.stdout).group(1), "Torch.matmul.0")


class RandomMode(PrecheckTest):
    def test_a_statistics_dump_is_checked_from_max_and_min(self):
        rank = training("statistics", task="statistics")
        self.assertFalse(os.path.exists(os.path.join(rank, "dump_tensor_data")))
        out = os.path.join(_root, "out-statistics")
        r = self.run_ok(["precheck", rank, "-o", out], 0)
        rows = results(out)
        self.assertEqual(list(rows), forward_names(training("fp32")))
        self.assertEqual(errors(rows), [])
        self.assertEqual(rows["Functional.gelu.0"][:2], ("pass", "pass"))
        with open(glob.glob(os.path.join(out, "accuracy_checking_details_*.csv"))[0], encoding="utf-8-sig") as f:
            self.assertIn("Functional.gelu.0.forward.output.0,torch.float64,torch.float32,", f.read())
        self.assertEqual(self.summary(r)[0], len(rows))

    def test_dropout_draws_one_mask_for_both_sides(self):
        """A statistics dump's dropout runs twice (the bench, and the CPU run in the dumped dtypes);
        both draw the same seeded mask, so msprobe's 10% zero-fraction rule never fails by chance.
        40 copies of the training's dropout at p 0.5 on 100 elements: two independent masks would
        part by 10% or more in about one copy of six."""
        rank = training("statistics", task="statistics")
        with open(os.path.join(rank, "dump.json"), encoding="utf-8") as f:
            dump = json.load(f)
        entry = dump["data"]["Functional.dropout.0.forward"]

        def resized(v):
            if isinstance(v, dict) and v.get("type") == "torch.Tensor":
                return {**v, "shape": [100]}
            if isinstance(v, dict) and v.get("type") == "float":
                return {**v, "value": 0.5}
            if isinstance(v, list):
                return [resized(e) for e in v]
            if isinstance(v, dict):
                return {k: resized(e) for k, e in v.items()}
            return v

        dump["data"] = {f"Functional.dropout.{i}.forward": resized(entry) for i in range(40)}
        many = os.path.join(_root, "dropouts")
        os.makedirs(many, exist_ok=True)
        with open(os.path.join(many, "dump.json"), "w", encoding="utf-8") as f:
            json.dump(dump, f)
        out = os.path.join(_root, "out-dropouts")
        self.run_ok(["precheck", many, "-o", out, "-j", "2"], 0)
        rows = results(out)
        self.assertEqual(len(rows), 40)
        self.assertEqual(errors(rows), [])


class Cli(PrecheckTest):
    def files(self, out):
        return {kind: glob.glob(os.path.join(out, f"accuracy_checking_{kind}_*.csv"))[0] for kind in ("result", "details")}

    def test_jobs_give_the_same_files(self):
        rank = training("wrong", WRONG_GELU="1")
        one, two = os.path.join(_root, "j1"), os.path.join(_root, "j2")
        self.run_ok(["precheck", rank, "-o", one, "-j", "1"], 1)
        self.run_ok(["precheck", rank, "-o", two, "-j", "2"], 1)
        for kind, path in self.files(one).items():
            self.assertEqual(slurp(path), slurp(self.files(two)[kind]), kind)

    def test_resume_appends_exactly_the_missing_apis(self):
        rank = training("fp32")
        full = os.path.join(_root, "resume-full")
        self.run_ok(["precheck", rank, "-o", full], 0)
        whole = {k: slurp(p) for k, p in self.files(full).items()}
        # An interrupted run: its last 5 APIs have no rows in either file.
        cut = os.path.join(_root, "resume-cut")
        os.makedirs(cut)
        names = list(results(full))
        kept = set(names[:-5])
        for kind, path in self.files(full).items():
            rows = read_rows(path)
            keep = [rows[0]] + [r for r in rows[1:] if re.sub(r"\.(forward|backward)\.output\.\d+$", "", r[0]) in kept]
            self.assertLess(len(keep), len(rows))
            with open(os.path.join(cut, os.path.basename(path)), "w", encoding="utf-8-sig", newline="") as f:
                csv.writer(f).writerows(keep)
        result = self.files(cut)["result"]
        r = self.run_ok(["precheck", rank, "-o", cut, "-csv_path", result], 0)
        self.assertEqual(self.summary(r)[0], 5, r.stdout)
        self.assertEqual(list(results(cut)), names)
        for kind, path in self.files(cut).items():
            self.assertEqual(slurp(path), whole[kind], kind)

    def test_save_error_data_writes_msprobes_files_torch_loads(self):
        rank = training("wrong", WRONG_GELU="1")
        cwd = os.path.join(_root, "errdata")
        os.makedirs(cwd)
        self.run_ok(["precheck", rank, "-o", "out", "-save_error_data"], 1, cwd=cwd)
        ts = re.search(r"_(\d{14})\.csv$", self.files(os.path.join(cwd, "out"))["result"]).group(1)
        folder = os.path.join(cwd, f"ut_error_data{ts}")  # error_data_path "./"
        names = sorted(os.listdir(folder))
        self.assertEqual(names, sorted(f"Functional.gelu.0.{p}.0.pt" for p in (
            "forward.input", "forward.output.bench", "forward.output.device",
            "backward.input", "backward.output.bench", "backward.output.device")))
        x = torch.load(os.path.join(folder, "Functional.gelu.0.forward.input.0.pt"))
        device = torch.load(os.path.join(folder, "Functional.gelu.0.forward.output.device.0.pt"))
        bench = torch.load(os.path.join(folder, "Functional.gelu.0.forward.output.bench.0.pt"))
        self.assertEqual((x.dtype, device.dtype, bench.dtype), (torch.float32, torch.float32, torch.float64))
        torch.testing.assert_close(device, x * torch.sigmoid(1.9 * x))  # what the wrong kernel computed
        torch.testing.assert_close(bench, torch.nn.functional.gelu(x.double()))
        # error_data_path of a -config puts the folder there.
        target = os.path.join(cwd, "elsewhere")
        os.makedirs(target)
        config = os.path.join(cwd, "config.json")
        with open(config, "w") as f:
            json.dump({"task": "run_ut", "run_ut": {"error_data_path": target}}, f)
        self.run_ok(["precheck", rank, "-o", "out2", "-save_error_data", "-config", config], 1, cwd=cwd)
        self.assertEqual(len(glob.glob(os.path.join(target, "ut_error_data*", "Functional.gelu.0.*.pt"))), 6)

    def test_a_white_list_limits_the_replayed_apis(self):
        rank = training("wrong", WRONG_GELU="1")
        config = os.path.join(_root, "white.json")
        with open(config, "w") as f:
            json.dump({"task": "run_ut", "run_ut": {"white_list": ["linear", "gelu"]}}, f)
        out = os.path.join(_root, "white")
        self.run_ok(["precheck", rank, "-o", out, "-config", config], 1)
        rows = results(out)
        self.assertEqual(list(rows), forward_names(rank))
        for api, (fwd, bwd, msg) in rows.items():
            kind = api.split(".")[1]
            if kind in ("linear", "gelu"):
                self.assertEqual(fwd, "error" if kind == "gelu" else "pass", api)
            else:
                self.assertEqual((fwd, msg), ("SKIP", f"API {kind} in black list or not in white list. SKIP."), api)

    def test_msprobes_spellings_and_the_forms_of_dump_give_the_same_rows(self):
        rank = training("wrong", WRONG_GELU="1")
        reference = os.path.join(_root, "forms-rank")
        self.run_ok(["precheck", rank, "-o", reference], 1)
        expected = slurp(self.files(reference)["details"])
        for name, args in {
                "run_ut": ["-f", "pytorch", "run_ut", "-api_info", os.path.join(rank, "dump.json")],
                "acc_check": ["acc_check", "-api_info", os.path.join(rank, "dump.json")],
                "step": ["precheck", os.path.dirname(rank)],
                "json": ["precheck", os.path.join(rank, "dump.json")]}.items():
            out = os.path.join(_root, "forms-" + name)
            r = self.run_ok(args + ["-o", out], 1)
            self.assertEqual(FIRST_ERROR.search(r.stdout).group(1), "Functional.gelu.0", name)
            self.assertEqual(slurp(self.files(out)["details"]), expected, name)

    def test_bad_input_is_one_line_naming_it(self):
        rank = training("fp32")
        bad_config = os.path.join(_root, "bad-config.json")
        with open(bad_config, "w") as f:
            json.dump({"task": "run_ut", "run_ut": {"white_list": ["gelu"], "whitelist": ["linear"]}}, f)
        typo_config = os.path.join(_root, "typo-config.json")
        with open(typo_config, "w") as f:  # msprobe refuses an API it does not know: a typo would skip all
            json.dump({"task": "run_ut", "run_ut": {"white_list": ["gelu", "no_such_api"]}}, f)
        missing = os.path.join(_root, "no-such-dump")
        for args, code, named in (
                (["precheck", rank, "-config", typo_config], 100, "no such API: no_such_api"),
                (["precheck", missing], 111, missing),
                (["precheck", os.path.join(rank, "construct.json")], 100, "construct.json"),
                (["precheck", rank, "-config", bad_config], 100, "whitelist"),
                (["precheck", rank, "-csv_path", os.path.join(_root, "results.csv")], 100, "results.csv"),
                (["precheck", rank, "-j", "0"], 100, "jobs")):
            r = precheck(args + ["-o", os.path.join(_root, "bad-out")])
            self.assertEqual(r.returncode, code, (args, r.stdout, r.stderr))
            lines = r.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, (args, r.stderr))
            self.assertTrue(lines[0].startswith("tprobe-precheck: fatal: "), lines[0])
            self.assertIn(named, lines[0])
        self.assertFalse(glob.glob(os.path.join(_root, "bad-out", "*.csv")))


if __name__ == "__main__":
    unittest.main()
