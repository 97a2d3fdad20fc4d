"""Task grad_probe on real PyTorch runs (docs/msprobe-compat.md §6): PrecisionDebugger.monitor(model) alone
writes rank{R}/grad_summary_{S}.csv and rank{R}/step{S}/{param}.npy whose numbers equal what torch
computes from the same gradients (the script saves them as the reference); `tprobe gradsim` finds
the step where two runs part, offline and live (pipelines/gradsim-live.json); the param_list, step
and rank filters; a bfloat16 model; a 2-rank gloo job."""

import csv
import os
import subprocess
import zlib

import numpy as np
import torch

import tprobe_testing as tt

# The model of tprobe_testing; run "b" (or CHANGE=1) trains on other data from step 3 on. The
# gradients each optimizer step sees are saved to refs.pt: the reference the files are checked against.
SCRIPT = """
import os, torch, torch.nn.functional as F
from tprobe import PrecisionDebugger
from model import make
model, x, y = make()
DTYPE = os.environ.get("DTYPE", "float32")
model = model.to(getattr(torch, DTYPE))
x = x.to(getattr(torch, DTYPE))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
debugger = PrecisionDebugger(config_path="./config.json")
debugger.monitor(model)
changed = os.environ.get("TPROBE_RUN_LABEL") == "b" or os.environ.get("CHANGE") == "1"
g = torch.Generator().manual_seed(7)
refs = []
for step in range(STEPS):
    xs = x + 0.1 * step
    if changed and step >= 3:
        xs = torch.randn(x.shape, generator=g).to(x.dtype) * 3
    loss = F.cross_entropy(model(xs).float(), y)
    loss.backward()
    refs.append({n: p.grad.detach().clone() for n, p in model.named_parameters()})
    opt.step()
    opt.zero_grad()
torch.save(refs, "refs.pt")
"""

PARAMS = ["inp.weight", "inp.bias", "block.fc.weight", "block.fc.bias", "out.weight", "out.bias"]


def config(level="L2", bounds=(-1, 0, 1), **common):
    c = {"task": "grad_probe", "dump_path": "./dump", "rank": [], "step": [], "level": "L1",
         "grad_probe": {"grad_level": level, "param_list": [], "bounds": list(bounds)}}
    for key, value in common.items():
        if key == "param_list":
            c["grad_probe"]["param_list"] = value
        else:
            c[key] = value
    return c


def read_csv(path):
    with open(path, "rb") as f:
        raw = f.read()
    assert raw.startswith(b"\xef\xbb\xbf"), path
    return list(csv.reader(raw[3:].decode("utf-8").splitlines()))


def reference_row(name, grad, level, bounds):
    """msprobe's GradStatCsv row, from torch (docs/msprobe-compat.md §6.1)."""
    row = [name]
    if level == "L0":
        row.append(f"{zlib.crc32(grad.float().numpy().tobytes()):08x}")
    if level == "L2":
        wide = grad.float() if grad.dtype == torch.bfloat16 else grad
        index = torch.bucketize(wide, torch.Tensor(bounds))
        fractions = [(index == i).sum().item() / grad.numel() for i in range(len(bounds) + 1)]
        fractions.append((wide == 0).sum().item() / grad.numel())
        row += [repr(f) for f in fractions]
    row += [repr(torch.max(grad).float().item()), repr(torch.min(grad).float().item())]
    return row, torch.norm(grad).float().item(), str(list(grad.shape))


class GradProbeTest(tt.CaptureTest):
    def gradsim(self, dir1, dir2, out):
        return subprocess.run([os.path.join(tt.BIN_DIR, "tprobe"), "gradsim", dir1, dir2, "-o", out],
                              capture_output=True, text=True, timeout=120)

    def check_files(self, run, level="L2", bounds=(-1, 0, 1), steps=range(4), rank=0, params=PARAMS):
        refs = torch.load(os.path.join(run.dir, "refs.pt"))
        base = os.path.join(run.dump, f"rank{rank}")
        self.assertEqual(sorted(os.listdir(base)),
                         sorted([f"grad_summary_{s}.csv" for s in steps] +
                                ([f"step{s}" for s in steps] if level != "L0" else [])))
        for s in steps:
            rows = read_csv(os.path.join(base, f"grad_summary_{s}.csv"))
            self.assertEqual(rows[0][0], "param_name")
            self.assertEqual(rows[0][-4:], ["max", "min", "norm", "shape"])
            self.assertEqual([r[0] for r in rows[1:]], params)
            for r in rows[1:]:
                grad = refs[s][r[0]]
                expected, norm, shape = reference_row(r[0], grad, level, bounds)
                self.assertEqual(r[:-2], expected, f"step {s} {r[0]}")
                # ATen's float32 norm accumulates in its own order: equal to the last bits.
                self.assertAlmostEqual(float(r[-2]), norm, delta=abs(norm) * 1e-6 + 1e-30)
                self.assertEqual(r[-1], shape)
                if level != "L0":
                    direction = np.load(os.path.join(base, f"step{s}", f"{r[0]}.npy"))
                    self.assertEqual(direction.dtype, np.bool_)
                    np.testing.assert_array_equal(direction, (grad > 0).numpy())

    def test_levels_match_torch(self):
        for level, bounds in (("L0", (-1, 0, 1)), ("L1", (-1, 0, 1)), ("L2", (-0.01, 0, 0.5, 1.0))):
            with self.subTest(level=level):
                run = self.run_script(SCRIPT, config=config(level, bounds), steps=4, name=f"level_{level}")
                self.check_files(run, level, bounds)
                if level == "L2":
                    header = read_csv(os.path.join(run.dump, "rank0", "grad_summary_0.csv"))[0]
                    self.assertEqual(header[1:6], ["(-inf, -0.01]", "(-0.01, 0]", "(0, 0.5]", "(0.5, 1.0]", "(1.0, inf)"])

    def test_identical_runs_similarity_one(self):
        a = self.run_script(SCRIPT, config=config(), steps=5, name="a")
        b = self.run_script(SCRIPT, config=config(), steps=5, name="b")
        out = os.path.join(self.tmp, "out")
        result = self.gradsim(a.dump, b.dump, out)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("no suspect step", result.stdout)
        rows = read_csv(os.path.join(out, "rank0", "similarities.csv"))
        self.assertEqual(rows[0], ["step", "0", "1", "2", "3", "4"])
        self.assertEqual([r[0] for r in rows[1:]], PARAMS + ["summary"])
        for r in rows[1:]:
            self.assertEqual(r[1:], ["1.0"] * 5)
        pictures = sorted(os.listdir(os.path.join(out, "rank0", "similarities_picture")))
        self.assertEqual(pictures, sorted(f"{k}_similarities.svg" for k in PARAMS + ["summary"]))
        with open(os.path.join(out, "rank0", "similarities_picture", "summary_similarities.svg")) as f:
            svg = f.read()
        self.assertTrue(svg.startswith("<svg") and "summary_similarities" in svg and "<polyline" in svg)

    def expected_similarities(self, run_a, run_b):
        """Σ(sign agreement) from the two scripts' own gradients, per step: msprobe's definition."""
        ra = torch.load(os.path.join(run_a.dir, "refs.pt"))
        rb = torch.load(os.path.join(run_b.dir, "refs.pt"))
        table = {}
        for s in range(len(ra)):
            same = total = 0
            for p in PARAMS:
                agree = ((ra[s][p] > 0) == (rb[s][p] > 0))
                table[(p, s)] = agree.sum().item() / agree.numel()
                same += agree.sum().item()
                total += agree.numel()
            table[("summary", s)] = same / total
        return table

    def test_data_change_flagged_offline_and_live(self):
        a = self.run_script(SCRIPT, config=config(), steps=6, name="a")
        b = self.run_script(SCRIPT, config=config(), steps=6, name="b", env={"CHANGE": "1"})
        out = os.path.join(self.tmp, "out")
        result = self.gradsim(a.dump, b.dump, out)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        lines = [l for l in result.stdout.splitlines() if "first suspect step" in l]
        self.assertEqual(len(lines), 1, result.stdout)
        self.assertIn("first suspect step 3 (rank 0)", lines[0])
        rows = read_csv(os.path.join(out, "rank0", "similarities.csv"))
        expected = self.expected_similarities(a, b)
        for r in rows[1:]:
            for s, value in enumerate(r[1:]):
                self.assertEqual(float(value), expected[(r[0], s)], f"{r[0]} step {s}")
        self.assertTrue(all(v == "1.0" for r in rows[1:] for v in r[1:4]))

        # Live: the two runs at once under pipelines/gradsim-live.json (run b changes its data).
        live = self.run_script(SCRIPT, config=config(), steps=6, name="live", manifest="gradsim-live.json",
                               expect_ok=False)
        self.assertEqual(live.result.returncode, 1, live.result.stdout + live.result.stderr)
        live_lines = [l for l in live.result.stdout.splitlines() if "first suspect step" in l]
        self.assertEqual(len(live_lines), 1, live.result.stdout + live.result.stderr)
        self.assertIn("tprobe-gradsim-live: first suspect step 3 (rank 0)", live_lines[0])
        with open(os.path.join(live.dir, "output", "rank0", "similarities.csv"), "rb") as f1, \
                open(os.path.join(out, "rank0", "similarities.csv"), "rb") as f2:
            self.assertEqual(f1.read(), f2.read())  # offline and live are the same code

    def test_param_list_step_rank_filters(self):
        run = self.run_script(SCRIPT, config=config("L1", param_list=["out.weight", "inp.bias"], step=[1, "3-4"]),
                              steps=6, name="filters")
        self.check_files(run, "L1", steps=[1, 3, 4], params=["inp.bias", "out.weight"])
        # Not distributed is rank 0: rank [1] leaves nothing.
        none = self.run_script(SCRIPT, config=config("L1", rank=[1]), steps=2, name="rank_filter")
        self.assertFalse(os.path.exists(os.path.join(none.dump, "rank0")))

    def test_bfloat16_model(self):
        run = self.run_script(SCRIPT, config=config(), steps=3, env={"DTYPE": "bfloat16"}, name="bf16")
        self.check_files(run, steps=range(3))
        refs = torch.load(os.path.join(run.dir, "refs.pt"))
        self.assertEqual(refs[0]["out.weight"].dtype, torch.bfloat16)
        # norm in bfloat16 as torch.norm(bf16) returns it: exactly
        rows = read_csv(os.path.join(run.dump, "rank0", "grad_summary_0.csv"))
        for r in rows[1:]:
            self.assertEqual(float(r[-2]), torch.norm(refs[0][r[0]]).float().item())

    def test_two_ranks_gloo(self):
        script = """
import os, torch, torch.distributed as dist, torch.multiprocessing as mp, torch.nn.functional as F

def run(rank, world, init_file):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    from tprobe import PrecisionDebugger
    from model import make
    model, x, y = make()
    x = x + rank
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    debugger = PrecisionDebugger(config_path="./config.json")
    debugger.monitor(model)
    for step in range(STEPS):
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    debugger.close()
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(run, args=(2, os.path.join(os.getcwd(), "init")), nprocs=2)
"""
        run = self.run_script(script, config=config("L1"), steps=2, name="gloo")
        self.assertEqual(sorted(os.listdir(run.dump)), ["rank0", "rank1"])
        for r in (0, 1):
            base = os.path.join(run.dump, f"rank{r}")
            self.assertEqual(sorted(os.listdir(base)), ["grad_summary_0.csv", "grad_summary_1.csv", "step0", "step1"])
            self.assertEqual(sorted(os.listdir(os.path.join(base, "step0"))), sorted(p + ".npy" for p in PARAMS))
        # Different data per rank: the inputs' layer differs.
        r0 = read_csv(os.path.join(run.dump, "rank0", "grad_summary_0.csv"))
        r1 = read_csv(os.path.join(run.dump, "rank1", "grad_summary_0.csv"))
        self.assertNotEqual(r0[1], r1[1])
        out = os.path.join(self.tmp, "out")
        result = self.gradsim(run.dump, run.dump, out)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(sorted(os.listdir(out)), ["rank0", "rank1"])

    def test_other_task_monitor_does_nothing(self):
        script = """
from tprobe import PrecisionDebugger
from model import make
model, x, y = make()
PrecisionDebugger(config_path="./config.json").monitor(model)
"""
        run = self.run_script(script, config=tt.default_config(), name="other_task")
        self.assertIn("monitor() is for task grad_probe", run.result.stderr)


if __name__ == "__main__":
    import unittest
    unittest.main()


def write_grad_dump(root, ranks=(0,), steps=(0, 1), params=("fc.weight",), header_only=False):
    """A grad_probe dump by hand, as the capture writes it: rank{R}/grad_summary_{S}.csv (UTF-8 BOM)
    and rank{R}/step{S}/{param}.npy (bool directions)."""
    for r in ranks:
        base = os.path.join(root, f"rank{r}")
        for s in steps:
            os.makedirs(os.path.join(base, f"step{s}"))
            with open(os.path.join(base, f"grad_summary_{s}.csv"), "w", encoding="utf-8-sig", newline="") as f:
                f.write("param_name,max,min,norm,shape\r\n")
                if not header_only:
                    for p in params:
                        f.write(f"{p},1.0,-1.0,2.0,[2]\r\n")
            for p in params:
                np.save(os.path.join(base, f"step{s}", f"{p}.npy"), np.array([True, False]))


class GradsimOfflineInputs(tt.CaptureTest):
    """tprobe gradsim over inputs that cannot give an answer: no "no suspect step" about no data,
    and a folder one side lacks is named on that side (exit 100)."""

    def gradsim(self, dir1, dir2):
        return subprocess.run([os.path.join(tt.BIN_DIR, "tprobe"), "gradsim", dir1, dir2, "-o",
                               os.path.join(self.tmp, "out")], capture_output=True, text=True, timeout=120)

    def test_a_header_only_csv_is_an_error(self):
        a, b = os.path.join(self.tmp, "a"), os.path.join(self.tmp, "b")
        write_grad_dump(a, header_only=True)
        write_grad_dump(b, header_only=True)
        r = self.gradsim(a, b)
        self.assertEqual(r.returncode, 100, r.stdout + r.stderr)
        self.assertIn(f"tprobe-gradsim: fatal: {a}/rank0/grad_summary_0.csv: no parameter rows", r.stderr)
        self.assertNotIn("no suspect step", r.stdout)

    def test_a_missing_rank_or_step_folder_names_the_side_that_lacks_it(self):
        a, b = os.path.join(self.tmp, "a"), os.path.join(self.tmp, "b")
        write_grad_dump(a, ranks=(0, 1))
        write_grad_dump(b, ranks=(0,))
        for first, second, lacking, having in ((a, b, b, a), (b, a, b, a)):
            r = self.gradsim(first, second)
            self.assertEqual(r.returncode, 100, r.stdout + r.stderr)
            self.assertIn(f"tprobe-gradsim: fatal: {lacking} has no rank1, which {having} has", r.stderr)
        c, d = os.path.join(self.tmp, "c"), os.path.join(self.tmp, "d")
        write_grad_dump(c, steps=(0, 1, 2))
        write_grad_dump(d, steps=(0, 1))
        r = self.gradsim(c, d)
        self.assertEqual(r.returncode, 100, r.stdout + r.stderr)
        self.assertIn(f"tprobe-gradsim: fatal: {d}/rank0 has no step2, which {c}/rank0 has", r.stderr)
        # A direction file on one side only: that side is named.
        g, h = os.path.join(self.tmp, "g"), os.path.join(self.tmp, "h")
        write_grad_dump(g)
        write_grad_dump(h)
        os.remove(os.path.join(g, "rank0", "step1", "fc.weight.npy"))
        r = self.gradsim(g, h)
        self.assertEqual(r.returncode, 100, r.stdout + r.stderr)
        self.assertIn(f"{g}/rank0/step1 has no direction file fc.weight.npy, which {h}/rank0/step1 has",
                      r.stderr)
        # Matching dumps still compare (the same directions: similarity 1, no suspect step).
        e, f = os.path.join(self.tmp, "e"), os.path.join(self.tmp, "f")
        write_grad_dump(e)
        write_grad_dump(f)
        r = self.gradsim(e, f)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("no suspect step", r.stdout)
