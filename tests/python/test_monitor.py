"""TrainerMon (msprobe's training monitor, docs/msprobe-compat.md §9) on real PyTorch runs: every csv's
values equal msprobe's statistics of the tensors the training script saved as it ran (weight
grads accumulated over two micro-batches, Adam's exp_avg / exp_avg_sq before the step, the
weights before and after it, activations and their gradients, mg_direction); monitor_reduce
against msprobe's formulas (V-5: zeros of fp16 counts nothing, a RuntimeError is NaN); a gradient
spike is the anomaly and nothing before it is; the NaN rule; DYNAMIC_MONITOR on and off mid-run;
a 2-rank gloo job; losses bit-identical with and without the monitor; print_struct."""

import csv
import glob
import json
import math
import os
import re
import textwrap
import unittest

import torch

import tprobe_testing as tt

# The model of tprobe_testing, trained with Adam over GA micro-batches a step. The script saves
# what each hook of msprobe's would see (refs.pt): the reference the csv files are checked against.
SCRIPT = textwrap.dedent("""
    import json, os, torch, torch.nn.functional as F
    from model import make
    model, x, y = make()
    DEVICE = os.environ.get("TEST_DEVICE", "cpu")  # CudaMonitorTest: cuda
    model, x, y = model.to(DEVICE), x.to(DEVICE), y.to(DEVICE)
    GA = int(os.environ.get("GA", "1"))
    N_TRAIN = int(os.environ.get("N_TRAIN", "3"))
    MONITOR = os.environ.get("MONITOR", "1") == "1"
    SPIKE = int(os.environ.get("SPIKE", "-1"))
    NAN = int(os.environ.get("NAN_STEP", "-1"))
    LR = float(os.environ.get("LR", "0.01"))
    SHIFT = float(os.environ.get("SHIFT", "0.1"))
    class HalvingSGD(torch.optim.SGD):  # an optimizer that writes the grads it reads (an unscale, say)
        def step(self, closure=None):
            with torch.no_grad():
                for group in self.param_groups:
                    for p in group["params"]:
                        if p.grad is not None:
                            p.grad.mul_(0.5)
            return super().step(closure)

    OPT = os.environ.get("OPT", "adam")
    opt = torch.optim.Adam(model.parameters(), lr=LR) if OPT == "adam" \\
        else HalvingSGD(model.parameters(), lr=LR) if OPT == "halving" else torch.optim.SGD(model.parameters(), lr=LR)
    if MONITOR:
        from tprobe import TrainerMon
        mon = TrainerMon(os.environ["MONITOR_CONFIG"], params_have_main_grad=False)
        mon.set_monitor(model, opt, grad_acc_steps=GA)
    refs = {"actv": {}, "actv_grad": {}, "grad": [], "exp_avg": [], "exp_avg_sq": [], "param_origin": [],
            "param_updated": []}
    where = {"step": 0, "micro": 0}
    names = {m: n for n, m in model.named_modules()}

    def fwd(m, args, out):
        key = (names[m], where["step"], where["micro"])
        refs["actv"][key] = ([a.detach().clone() for a in args if torch.is_tensor(a)], out.detach().clone())

    def bwd(m, gin, gout):
        key = (names[m], where["step"], where["micro"])
        clone = lambda ts: [None if t is None else t.detach().clone() for t in ts]
        refs["actv_grad"][key] = (clone(gin), clone(gout))

    if os.environ.get("REFS", "1") == "1":
        for m in model.modules():
            m.register_forward_hook(fwd)
            m.register_full_backward_hook(bwd)
    losses = []
    def command(on):
        # A user's stage would send it on seeing something; here the script sends it itself, then
        # waits (bounded) until the capture has it, so the test knows the step it applies after.
        import time, zmq
        from tprobe.stage import encode_header
        sock = zmq.Context.instance().socket(zmq.PUSH)
        sock.setsockopt(zmq.LINGER, 1000)
        sock.connect(mon.session_config["control"])
        sock.send(encode_header({"kind": "control", "meta": {"command": "monitor", "on": on, "from": "train.py"}}))
        deadline = time.monotonic() + 20
        while not json.loads(mon._ops.monitor_counters())["control_pending"]:
            assert time.monotonic() < deadline, "the control command never arrived"
            time.sleep(0.001)
        sock.close()

    for step in range(N_TRAIN):
        where["step"] = step
        if os.environ.get("CONTROL_OFF_AT") == str(step):
            command(False)
        if os.environ.get("CONTROL_ON_AT") == str(step):
            command(True)
        if os.environ.get("DYNAMIC_AT") == str(step):
            with open(os.environ["MONITOR_CONFIG"]) as f:
                c = json.load(f)
            c["dynamic_on"] = True
            with open(os.environ["MONITOR_CONFIG"], "w") as f:
                json.dump(c, f)
        if os.environ.get("MV_POKE_AT") == str(step):  # Adam's moments changed between two steps:
            for p in model.parameters():
                opt.state[p]["exp_avg"].mul_(2.0)  # in place (its version moves)
        if os.environ.get("MV_REPLACE_AT") == str(step):
            for p in model.parameters():
                opt.state[p]["exp_avg_sq"] = opt.state[p]["exp_avg_sq"] * 3.0  # another tensor
        for micro in range(GA):
            where["micro"] = micro
            xs = x + SHIFT * step + 0.01 * micro
            if step == NAN:
                xs = xs.clone()
                xs[0, 0] = float("nan")
            loss = F.cross_entropy(model(xs), y) / GA
            if step == SPIKE:
                loss = loss * 100
            loss.backward()
            losses.append(loss.item())
        refs["grad"].append({n: p.grad.detach().clone() for n, p in model.named_parameters()})
        if step == NAN:  # the optimizer gets finite grads: the weights, and later steps, stay finite
            for p in model.parameters():
                p.grad.nan_to_num_(0.0)
        refs["exp_avg"].append({n: opt.state[p]["exp_avg"].clone() for n, p in model.named_parameters()
                                if "exp_avg" in opt.state.get(p, {})})
        refs["exp_avg_sq"].append({n: opt.state[p]["exp_avg_sq"].clone() for n, p in model.named_parameters()
                                   if "exp_avg_sq" in opt.state.get(p, {})})
        refs["param_origin"].append({n: p.detach().clone() for n, p in model.named_parameters()})
        if os.environ.get("METRICS") == "1":  # msprobe's API: this step's acc_grad statistics, read now
            refs.setdefault("metrics", []).append(mon.generate_wgrad_metrics()[1])
        opt.step()
        refs["param_updated"].append({n: p.detach().clone() for n, p in model.named_parameters()})
        opt.zero_grad()
    torch.save(refs, "refs.pt")
    with open("losses.txt", "w") as f:
        f.write("\\n".join(repr(v) for v in losses))
""")

PARAMS = ["inp.weight", "inp.bias", "block.fc.weight", "block.fc.bias", "out.weight", "out.bias"]
MODULES = ["", "inp", "block", "block.fc", "block.act", "out"]
ALL_OPS = ["min", "max", "norm", "mean", "zeros", "nans", "id"]


def monitor_config(**fields):
    c = {"targets": {}, "ops": ["min", "max", "norm", "mean", "zeros", "nans"], "eps": 1e-8}
    c.update(fields)
    return c


def reference(t, ops, eps=1e-8):
    """msprobe's module_metric / features formulas, with torch (a non-tensor: NaN everywhere)."""
    out = []
    for op in ops:
        if not torch.is_tensor(t):
            out.append(math.nan)
            continue
        try:
            if op == "min":
                v = torch.min(t).item()
            elif op == "max":
                v = torch.max(t).item()
            elif op == "norm":
                v = torch.norm(t.to(torch.float64), p=2).item()
            elif op == "mean":
                v = torch.mean(t.to(torch.float64)).item()
            elif op == "zeros":
                v = math.nan if t.numel() == 0 else (torch.sum(torch.abs(t) < eps) / t.numel()).item()
            elif op == "nans":
                v = torch.isnan(t).sum().item()
            elif op == "id":
                v = t.item() if t.dim() == 0 else math.nan
        except RuntimeError:
            v = math.nan
        out.append(float(v))
    return out


def same(csv_text, value):
    """A csv cell against the reference: "nan" for NaN, else the value rounded to 6 digits."""
    if math.isnan(value):
        return csv_text == "nan"
    return math.isclose(float(csv_text), value, rel_tol=1e-9, abs_tol=6e-7)


class MonitorRun:
    def __init__(self, run):
        self.run = run
        self.base = os.path.join(run.dir, "monitor_output")

    def rank_dir(self, rank=0):
        found = glob.glob(os.path.join(self.base, f"*-rank{rank}-*"))
        assert len(found) == 1, (found, os.listdir(self.base) if os.path.isdir(self.base) else None)
        return found[0]

    def rows(self, prefix, rank=0):
        """{(name, step, micro_step or None): row dict} over every {prefix}_{a}-{b}.csv."""
        out = {}
        pattern = re.compile(re.escape(prefix) + r"_\d+-\d+\.csv")  # "actv_*" would match actv_grad_0-0.csv
        for path in sorted(glob.glob(os.path.join(self.rank_dir(rank), f"{prefix}_*-*.csv"))):
            if not pattern.fullmatch(os.path.basename(path)):
                continue
            with open(path, newline="", encoding="utf-8") as f:
                for row in csv.DictReader(f):
                    key = (row["name"], int(row["step"]), int(row["micro_step"]) if "micro_step" in row else None)
                    assert key not in out, (path, key)
                    out[key] = row
        return out

    def files(self, rank=0):
        return sorted(os.listdir(self.rank_dir(rank)))

    def refs(self):
        # The reference statistics are the host's, whatever device the script trained on.
        return torch.load(os.path.join(self.run.dir, "refs.pt"), map_location="cpu")


class MonitorCase(tt.CaptureTest):
    RUN_ENV = {}  # of every run of the class's tests

    def run_monitor(self, config, env=None, steps=3, script=SCRIPT, expect_ok=True, name=None):
        """Runs `script` (direct mode) with its monitor config in MONITOR_CONFIG, the files under
        the run's monitor_output."""
        name = name or self.id().rsplit(".", 1)[-1]
        config_path = os.path.join(self.tmp, f"{name}-monitor.json")
        with open(config_path, "w") as f:
            json.dump(config, f)
        directory = os.path.join(self.tmp, name)
        full = {"N_TRAIN": str(steps), "MONITOR_CONFIG": config_path,
                "MONITOR_OUTPUT_DIR": os.path.join(directory, "monitor_output")}
        full.update(self.RUN_ENV)
        full.update(env or {})
        run = self.run_script(script, env=full, expect_ok=expect_ok, name=name)
        run.config_path = config_path
        return MonitorRun(run)

    def anomalies(self, mon, rank=0):
        path = os.path.join(mon.base, "anomaly_detected", f"rank{rank}", "anomaly.json")
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def check_rows(self, rows, expected, ops):
        """rows: the csv's; expected: {key: tensor or None}. Same keys, same values, shape, dtype."""
        self.assertEqual(sorted(rows), sorted(expected))
        for key, tensor in expected.items():
            row = rows[key]
            for op, value in zip(ops, reference(tensor, ops)):
                self.assertTrue(same(row[op], value), f"{key} {op}: csv {row[op]} reference {value!r}")
            if torch.is_tensor(tensor):
                self.assertEqual(row["shape"], str(list(tensor.shape)), key)
                self.assertEqual(row["dtype"], str(tensor.dtype), key)
            else:
                self.assertEqual((row["shape"], row["dtype"]), ("nan", "nan"), key)


class MonitorTest(MonitorCase):
    # ---- the statistics themselves, in this process ----

    def test_reduce_is_msprobes_formulas(self):
        from tprobe import _native
        ops = _native.load()
        nan = float("nan")
        tensors = [
            torch.tensor([[1.0, -2.0], [0.0, 1e-9]]),                      # V-5 fc.weight
            torch.tensor([0.5, nan]),                                       # V-5 fc.bias: NaN propagates
            torch.arange(6, dtype=torch.float16).reshape(2, 3),            # V-5: zeros of fp16 counts nothing
            torch.empty(0),                                                 # min raises: NaN; zeros NaN
            torch.tensor([True, False]),                                    # abs of bool raises: zeros NaN
            torch.tensor([3, -4, 0], dtype=torch.int32),
            torch.tensor(2.5, dtype=torch.float64),                         # 0-dim: id is the value
            torch.randn(7, 5, dtype=torch.bfloat16),
            None,                                                           # a non-tensor: NaN everywhere
        ]
        block = ops.monitor_reduce(tensors, ",".join(ALL_OPS), 1e-8)
        self.assertEqual((block.dtype, tuple(block.shape)), (torch.float64, (len(tensors), len(ALL_OPS))))
        for i, t in enumerate(tensors):
            got, want = block[i].tolist(), reference(t, ALL_OPS)
            for op, g, w in zip(ALL_OPS, got, want):
                self.assertTrue(g == w or (math.isnan(g) and math.isnan(w)), f"tensor {i} {op}: {g!r} != {w!r}")
        # V-5's figures, as msprobe's csv rounds them.
        self.assertEqual([round(v, 6) for v in block[0].tolist()[:5]], [-2.0, 1.0, 2.236068, -0.25, 0.5])
        self.assertEqual(block[2].tolist()[4], 0.0)
        self.assertEqual(ops.monitor_reduce([], "norm", 1e-8).shape, (0, 1))
        # Large float32/float64 tensors are read once for all ops (monitor.cpp's one_pass): the same
        # values, mean and norm to the last few bits (their sums run in another order than torch's).
        g = torch.Generator().manual_seed(0)
        big = [torch.randn(70000, generator=g), torch.randn(300, 257, generator=g, dtype=torch.float64),
               torch.randn(65536, generator=g) * 1e-9, torch.zeros(40000)]
        with_nan = torch.randn(50001, generator=g)
        with_nan[123] = float("nan")
        with_inf = torch.randn(50001, generator=g)
        with_inf[7], with_inf[9] = float("inf"), float("-inf")
        strided = torch.randn(400, 300, generator=g).t()  # not contiguous: torch's kernels
        big += [with_nan, with_inf, strided]
        block = ops.monitor_reduce(big, ",".join(ALL_OPS), 1e-8)
        for i, t in enumerate(big):
            for op, g_, w in zip(ALL_OPS, block[i].tolist(), reference(t, ALL_OPS)):
                if op in ("norm", "mean") and not math.isnan(w):
                    self.assertTrue(math.isclose(g_, w, rel_tol=1e-12, abs_tol=1e-300), f"big {i} {op}: {g_!r} != {w!r}")
                else:
                    self.assertTrue(g_ == w or (math.isnan(g_) and math.isnan(w)), f"big {i} {op}: {g_!r} != {w!r}")
        with self.assertRaises(RuntimeError):
            ops.monitor_reduce([torch.ones(2)], "norm,median", 1e-8)

    # ---- real runs ----

    def test_every_csv_equals_the_tensors(self):
        """GA 2, Adam, 3 steps, everything on: each csv row is msprobe's statistics of the tensor
        the script saw at that hook, and the rows are exactly those msprobe writes."""
        config = monitor_config(xy_distribution=True, all_xy=True, wg_distribution=True, mv_distribution=True,
                                param_distribution=True, mg_direction=True)
        ops = config["ops"]
        mon = self.run_monitor(config, env={"GA": "2", "METRICS": "1"}, steps=3)
        refs = mon.refs()
        # generate_wgrad_metrics (read to the host in the script, before each step): the same
        # statistics as the grads the script saw.
        for step, pre in enumerate(refs["metrics"]):
            self.assertEqual(sorted(pre), sorted(f"0:{n}/rank0/acc_grad" for n in PARAMS))  # vpp 0
            for tag, metric in pre.items():
                want = reference(refs["grad"][step][tag.split("/")[0].split(":", 1)[1]], ops)
                for op, w in zip(ops, want):
                    got = metric[op]
                    self.assertTrue(math.isclose(got, w, rel_tol=1e-9) or (math.isnan(got) and math.isnan(w)),
                                    f"step {step} {tag} {op}: {got!r} != {w!r}")
        expected = {}
        for (module, step, micro), (inputs, output) in refs["actv"].items():
            self.assertEqual(len(inputs), 1)
            expected[(f"{module}.input", step, micro)] = inputs[0]
            expected[(f"{module}.output", step, micro)] = output
        self.check_rows(mon.rows("actv"), expected, ops)
        expected = {}
        for (module, step, micro), (grad_in, grad_out) in refs["actv_grad"].items():
            expected[(f"{module}.input", step, micro)] = grad_in[0]   # None for x: a NaN row
            expected[(f"{module}.output", step, micro)] = grad_out[0]
        self.check_rows(mon.rows("actv_grad"), expected, ops)
        for prefix in ("grad_unreduced", "grad_reduced"):  # no DDP: both are the accumulated grad
            self.check_rows(mon.rows(prefix), {(n, s, None): g[n] for s, g in enumerate(refs["grad"]) for n in PARAMS},
                            ops)
        for prefix in ("exp_avg", "exp_avg_sq", "param_origin", "param_updated"):
            expected = {(n, s, None): d[n] for s, d in enumerate(refs[prefix]) for n in d}
            if prefix.startswith("exp_avg"):  # read before the step: Adam has no state at step 0
                self.assertEqual({s for _, s, _ in expected}, {1, 2})
            self.check_rows(mon.rows(prefix), expected, ops)
        expected = {}
        for s in range(3):
            for n in PARAMS:
                if s == 0:
                    expected[(n, s, None)] = torch.tensor(1.0)
                else:
                    g, m = refs["grad"][s][n], refs["exp_avg"][s][n]
                    expected[(n, s, None)] = ((g.sign() * m.sign()).sum() / m.numel() + 1) / 2
        self.check_rows(mon.rows("other"), expected, ops)
        self.assertIn("grad_reduced_0-0.csv", mon.files())
        self.assertNotIn("exp_avg_0-0.csv", mon.files())
        with open(glob.glob(os.path.join(mon.rank_dir(), "actv_0-0.csv"))[0], newline="") as f:
            self.assertEqual(f.readline().rstrip("\n"),
                             "vpp_stage,name,step,micro_step,min,max,norm,mean,zeros,nans,shape,dtype")

    def test_moments_read_after_a_step_are_read_again_when_changed(self):
        """Adam's moments are read right after a step, for the next one (_prefetch_mv); a moment
        changed in place or replaced before the next step is read again there: every exp_avg and
        exp_avg_sq row is the tensor the optimizer sees at its step."""
        config = monitor_config(mv_distribution=True)
        mon = self.run_monitor(config, env={"MV_POKE_AT": "2", "MV_REPLACE_AT": "3"}, steps=5)
        refs = mon.refs()
        for prefix in ("exp_avg", "exp_avg_sq"):
            expected = {(n, s, None): d[n] for s, d in enumerate(refs[prefix]) for n in d}
            self.assertEqual({s for _, s, _ in expected}, {1, 2, 3, 4})
            self.check_rows(mon.rows(prefix), expected, config["ops"])

    def test_losses_bit_identical_with_and_without(self):
        config = monitor_config(xy_distribution=True, all_xy=True, wg_distribution=True, mv_distribution=True,
                                param_distribution=True, mg_direction=True)
        losses = []
        for on in ("0", "1"):
            mon = self.run_monitor(config, env={"GA": "2", "MONITOR": on, "REFS": "0"}, steps=4, name=f"on{on}")
            with open(os.path.join(mon.run.dir, "losses.txt")) as f:
                losses.append(f.read())
        self.assertEqual(losses[0], losses[1])
        self.assertEqual(len(losses[0].split()), 8)

    def test_gradient_spike_is_the_anomaly(self):
        """Same data every step, lr 0: the grads repeat exactly until step 3 multiplies the loss
        by 100. Every anomaly is at step 3, in the norm and mean of the grads."""
        config = monitor_config(wg_distribution=True,
                                alert={"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}],
                                       "dump": True})
        mon = self.run_monitor(config, env={"OPT": "sgd", "LR": "0", "SPIKE": "3", "SHIFT": "0"}, steps=6)
        found = self.anomalies(mon)
        self.assertTrue(found)
        self.assertEqual({a["step"] for a in found.values()}, {3}, found)
        tags = {a["tag_name"] for a in found.values()}
        for n in PARAMS:
            self.assertIn(f"0:{n}/rank0/post_grad", tags)
            self.assertIn(f"0:{n}/rank0/acc_grad", tags)
        for a in found.values():
            self.assertIn("Rule AnomalyTurbulence reports anomaly signal in", a["message"])
            self.assertRegex(a["message"], r"'(norm|mean)'\) at step 3")
        self.assertIn("AnomalyTurbulence", mon.run.result.stderr + mon.run.result.stdout)

    def test_nan_rule(self):
        """A NaN in step 2's input: the grads accumulated in the backward (acc_grad, read by the
        AccumulateGrad hooks) are NaN, AnomalyNan fires for them at step 2 and at no other step;
        the script cleans the grads before the optimizer step, so the reduced grads (post_grad,
        read before the step) are finite."""
        config = monitor_config(wg_distribution=True,
                                alert={"rules": [{"rule_name": "AnomalyNan", "args": {}}], "dump": True})
        mon = self.run_monitor(config, env={"NAN_STEP": "2"}, steps=4)
        pre, post = mon.rows("grad_unreduced"), mon.rows("grad_reduced")
        self.assertEqual(pre[("inp.weight", 2, None)]["norm"], "nan")
        self.assertGreater(float(pre[("inp.weight", 2, None)]["nans"]), 0)
        for key in (("inp.weight", 1, None), ("inp.weight", 3, None)):
            self.assertNotEqual(pre[key]["norm"], "nan", key)
        self.assertEqual([k for k, row in post.items() if "nan" in row.values()], [])
        found = self.anomalies(mon)
        self.assertTrue(found)
        self.assertEqual({a["step"] for a in found.values()}, {2})
        self.assertEqual({a["tag_name"] for a in found.values()}, {f"0:{n}/rank0/acc_grad" for n in PARAMS})
        self.assertTrue(all("Rule AnomalyNan" in a["message"] for a in found.values()))

    def test_dynamic_on_and_off(self):
        """DYNAMIC_MONITOR: nothing until the file says dynamic_on (written before step 2's
        forward, seen after step 2's optimizer step), then collect_times (2) steps, then the file
        says dynamic_on false again and nothing more is collected."""
        config = monitor_config(wg_distribution=True, dynamic_on=False, collect_times=2)
        mon = self.run_monitor(config, env={"DYNAMIC_MONITOR": "True", "DYNAMIC_AT": "2"}, steps=7)
        steps = {s for _, s, _ in mon.rows("grad_reduced")}
        self.assertEqual(steps, {3, 4})
        refs = mon.refs()
        self.check_rows(mon.rows("grad_reduced"), {(n, s, None): refs["grad"][s][n] for s in (3, 4) for n in PARAMS},
                        config["ops"])
        with open(mon.run.config_path) as f:
            self.assertIs(json.load(f)["dynamic_on"], False)

    def test_control_path_off_and_on(self):
        """A stage's {"command": "monitor", "on": false} arriving in step 1 turns the monitor off
        after that step (its rows are written); "on" in step 3 turns it on from step 4, with the
        values of the tensors of those steps; the session goes on in between."""
        config = monitor_config(wg_distribution=True, mv_distribution=True)
        mon = self.run_monitor(config, env={"CONTROL_OFF_AT": "1", "CONTROL_ON_AT": "3"}, steps=6)
        refs = mon.refs()
        for prefix in ("grad_reduced", "grad_unreduced"):
            self.check_rows(mon.rows(prefix), {(n, s, None): refs["grad"][s][n] for s in (0, 1, 4, 5) for n in PARAMS},
                            config["ops"])
        self.assertEqual({s for _, s, _ in mon.rows("exp_avg")}, {1, 4, 5})  # Adam has no state at step 0
        self.assertIn("train.py turned the monitor off", mon.run.result.stderr)
        self.assertIn("train.py turned the monitor on", mon.run.result.stderr)

    def test_grads_read_off_the_training_thread(self):
        """monitor_reduce_start/finish (the worker thread's reductions, CPU; below 2^18 elements at
        once) give monitor_reduce's blocks, in any order of finishing, in a forked child too; a
        ticket finishes once."""
        from tprobe import _native
        ops = _native.load()
        g = torch.Generator().manual_seed(1)
        text = ",".join(ALL_OPS)
        batches = [[torch.randn(300000, generator=g), None, torch.tensor(3.0)],
                   [torch.randn(300, 200, generator=g, dtype=torch.float64).t(), torch.empty(0)],
                   [torch.arange(5, dtype=torch.int64)], []]
        tickets = [ops.monitor_reduce_start(b, text, 1e-8) for b in batches]
        # early: on the worker whatever the size (a ticket finished long after: the moments).
        small = [torch.randn(40, generator=g), torch.ones(3, dtype=torch.float64)]
        batches.append(small)
        tickets.append(ops.monitor_reduce_start(small, text, 1e-8, True))
        got = ops.monitor_reduce_finish(list(reversed(tickets)))[::-1]
        for b, block in zip(batches, got):
            self.assertTrue(torch.equal(block.isnan(), ops.monitor_reduce(b, text, 1e-8).isnan()))
            self.assertTrue(torch.equal(block.nan_to_num(), ops.monitor_reduce(b, text, 1e-8).nan_to_num()))
        with self.assertRaisesRegex(RuntimeError, "no reduction has ticket"):
            ops.monitor_reduce_finish([tickets[0]])
        with self.assertRaises(RuntimeError):
            ops.monitor_reduce_start([torch.ones(2)], "norm,median", 1e-8)
        pid = os.fork()
        if pid == 0:  # the parent's worker thread is not in the child: the child makes its own
            ok = False
            try:
                t = ops.monitor_reduce_start([torch.ones(360000)], "norm,mean", 1e-8)  # past the worker's minimum
                ok = ops.monitor_reduce_finish([t])[0].tolist() == [[600.0, 1.0]]
            finally:
                os._exit(0 if ok else 1)
        self.assertEqual(os.waitpid(pid, 0)[1], 0)

    def test_send_rows_refuses_what_is_not_a_span_of_a_host_block(self):
        """monitor_send_rows (a step's rows: spans of monitor_reduce's blocks) checks its blocks and
        spans before it reads a number, so a wrong span is an error, never another row's values."""
        from tprobe import _native
        ops = _native.load()
        block = torch.zeros(3, 2, dtype=torch.float64)
        for blocks, spans, what in [([block], [0, 0], "triples"), ([block], [1, 0, 1], "names no block"),
                                    ([block], [0, 2, 2], "outside its block"), ([block], [0, -1, 1], "outside"),
                                    ([block.float()], [0, 0, 1], "float64 CPU"), ([block.t()], [0, 0, 1], "contiguous"),
                                    ([torch.zeros(6, dtype=torch.float64)], [0, 0, 1], "matrix")]:
            with self.assertRaisesRegex(RuntimeError, what):
                ops.monitor_send_rows("grad_reduced", 0, 0, blocks, spans)

    def test_an_optimizer_that_writes_grads(self):
        """post_grad is read on the worker while optimizer.step runs. An optimizer that changes the
        grads in place (HalvingSGD) is seen at its first step (a warning, once); later steps read
        post_grad before the step, as msprobe does: the grads the script saw before opt.step()."""
        config = monitor_config(wg_distribution=True)
        mon = self.run_monitor(config, env={"OPT": "halving"}, steps=4)
        refs = mon.refs()
        self.check_rows(mon.rows("grad_unreduced"), {(n, s, None): refs["grad"][s][n] for s in range(4) for n in PARAMS},
                        config["ops"])
        self.check_rows({k: v for k, v in mon.rows("grad_reduced").items() if k[1] > 0},
                        {(n, s, None): refs["grad"][s][n] for s in (1, 2, 3) for n in PARAMS}, config["ops"])
        self.assertEqual(mon.run.result.stderr.count("the optimizer changed a grad in place during step 0"), 1)

    def test_print_struct(self):
        config = monitor_config(xy_distribution=True, print_struct=True)
        mon = self.run_monitor(config, steps=2, expect_ok=False)
        self.assertNotEqual(mon.run.result.returncode, 0)
        self.assertIn("exit after first monitor step when print model struct", mon.run.result.stderr)
        with open(os.path.join(mon.base, "module_struct", "rank0", "module_struct.json")) as f:
            struct = json.load(f)
        self.assertEqual(sorted(struct), sorted(f"0:{m}" for m in MODULES))
        self.assertEqual(struct["0:inp"]["input"], {"config": "list[1]", "0": "size=(5, 4), dtype=torch.float32"})
        self.assertEqual(struct["0:inp"]["output"], {"config": "tensor", "tensor": "size=(5, 8), dtype=torch.float32"})
        self.assertEqual(struct["0:inp"]["input_grad"]["config"], "tuple[1]")

    def test_stack_info(self):
        mon = self.run_monitor(monitor_config(xy_distribution=True, stack_info=True), steps=2)
        with open(os.path.join(mon.rank_dir(), "stack_info.csv"), newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        self.assertEqual(rows[0], ["module_name", "stack_info"])
        self.assertEqual(sorted(r[0] for r in rows[1:]), sorted(f"0:{m}" for m in MODULES))
        for name, stack in rows[1:]:
            self.assertRegex(stack, r"File .*train\.py, line \d+, in <module>, \n ", name)

    def test_bad_config_fails_at_construction(self):
        mon = self.run_monitor({"ops": "norm"}, steps=1, expect_ok=False)
        self.assertNotEqual(mon.run.result.returncode, 0)
        self.assertIn("ops", mon.run.result.stderr)
        self.assertIn("-monitor.json", mon.run.result.stderr)


@unittest.skipUnless(torch.cuda.is_available(), "no CUDA device: scripts/cuda-check.sh runs these on a GPU")
class CudaMonitorTest(MonitorCase):
    """The monitor's device path (issue 67 item 4): the model, its grads, activations and Adam's
    moments on the GPU, reduced where they are (monitor_reduce) and read once per device; each csv
    against the host's statistics of the same tensors, the anomaly and NaN rules as on the CPU."""
    RUN_ENV = {"TEST_DEVICE": "cuda"}
    test_every_csv_equals_the_tensors = MonitorTest.test_every_csv_equals_the_tensors
    test_gradient_spike_is_the_anomaly = MonitorTest.test_gradient_spike_is_the_anomaly
    test_nan_rule = MonitorTest.test_nan_rule
    test_losses_bit_identical_with_and_without = MonitorTest.test_losses_bit_identical_with_and_without


DDP = textwrap.dedent("""
    import json, os, torch, torch.distributed as dist, torch.multiprocessing as mp
    import torch.nn.functional as F

    def run(rank, world, init_file):
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
        from tprobe import TrainerMon
        from model import make
        model, x, y = make()
        x = x + rank
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        mon = TrainerMon(os.environ["MONITOR_CONFIG"], params_have_main_grad=False)
        mon.set_monitor(model, opt)
        for step in range(STEPS):
            F.cross_entropy(model(x), y).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            opt.zero_grad()
        mon.close()
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(run, args=(2, os.path.join(os.getcwd(), "init")), nprocs=2)
""")


class MonitorDistributedTest(MonitorCase):
    def test_two_ranks_gloo(self):
        """Each rank its own directory; the unreduced grads differ (different data), the reduced
        ones are their sum on both ranks; anomaly.json names each rank's place in the group
        (pp_stage: its group rank) and the group (group_mates), as msprobe's GradAnomalyData."""
        config = monitor_config(wg_distribution=True,  # AnomalyNan with threshold 0: every nonzero value fires
                                alert={"rules": [{"rule_name": "AnomalyNan", "args": {"threshold": 0}}], "dump": True})
        mon = self.run_monitor(config, script=DDP.replace("STEPS", "2"), steps=2)
        pre = [mon.rows("grad_unreduced", r) for r in (0, 1)]
        post = [mon.rows("grad_reduced", r) for r in (0, 1)]
        self.assertEqual(sorted(pre[0]), sorted((n, s, None) for n in PARAMS for s in (0, 1)))
        self.assertEqual(pre[0].keys(), post[1].keys())
        for key in pre[0]:
            self.assertNotEqual(pre[0][key]["norm"], pre[1][key]["norm"], key)
            self.assertEqual(post[0][key], post[1][key], key)
            total = float(pre[0][key]["mean"]) + float(pre[1][key]["mean"])
            self.assertAlmostEqual(float(post[0][key]["mean"]), total, places=5)
        for rank in (0, 1):
            found = self.anomalies(mon, rank)
            self.assertTrue(found, rank)
            for key, a in found.items():
                self.assertEqual((a["rank"], a["pp_stage"], a["group_mates"]), (rank, rank, [0, 1]), key)


if __name__ == "__main__":
    unittest.main()
