#!/usr/bin/env python3
"""Step-time cost of the training monitor (TrainerMon, issue 63), tprobe's beside msprobe's, on the
bench models, CPU, one thread:

    PYTHONPATH=python /usr/bin/python3 bench/bench_monitor.py [--model resnet18|transformer|gru|tiny|all]
                                                              [--configs wg,wg_mv,...] [--steps N] [--quick]

For each model (bench_torch.py's: examples/train_resnet18.py, examples/train_transformer.py,
bench/train_gru.py, their own train() loop and batches) and each monitor configuration (CONFIGS:
wg, wg_mv, param, xy, all; every one with ops norm,min,max,mean, the AnomalyTurbulence 0.5 rule,
format csv, step_interval 1) it trains three children on the same batches: one without any tool,
one under tprobe's TrainerMon (`from tprobe import TrainerMon`, direct mode: the child starts
pipelines/monitor.json itself, whose stage writes the csv files), and one under msprobe 8.3.3's
TrainerMon (run, not copied: msprobe must be importable, e.g. after `. /tmp/msprobe-src/env.sh`).
Both monitors are built as their users build them, `TrainerMon(config, params_have_main_grad=False)`
and `set_monitor(model, optimizer)` right after the example's train() makes its optimizer.

It prints, per model and configuration, the median no-tool step and each monitor's ratio to it
(median over rounds of the round's median monitor step / its median no-tool step; warm-up steps
excluded), then the table: model, config, no-tool ms, tprobe ratio, msprobe ratio, goal, ok/MISS.
The goal: wg_mv (weight grads and Adam's moments) within 1.05x a step (issue 63), and every row
at or below msprobe's ratio where msprobe runs. --quick (the tiny GRU, 2 rounds of 2 steps) is a
smoke run: it checks that the bench runs, not the figures. Exit status: 0, or 1 when a no-tool or
tprobe child failed (the bench could not measure), never for a figure. Figures: docs/stages/monitor.md,
"Cost".

How it measures: bench_torch.py's way, by its helpers. The parent orchestrates; the three children
take turns in blocks of steps (no-tool, tprobe, msprobe; then the reverse order), one training at a
time, after warm-up steps on each, every block starting once tprobe's pipeline is idle (its stage
writes the previous block's files in other processes; "sust." holds tprobe's block until they are
written). After the warm-up the children's training threads run on the same CPU (bench_torch's
--pin, the CPU with the fewest device interrupts), and glibc's malloc has the same fixed
thresholds in all three (bench_torch's --allocator pinned). A step is timed as the example's
train() times it: forward, backward, optimizer.step (where both monitors do their per-step work)
and zero_grad. msprobe writes its csv files inside optimizer.step; tprobe's stage writes them in
its own process, whose CPU time per step is the "stage" column. Beside the wall-time ratio, "cpu"
is the ratio of the child's CPU time (all its threads: tprobe's worker and sender too) and
"thread" that of the training thread's own CPU time: what the monitor's hooks and step work cost
the thread that trains, steadier on a shared machine than the wall time, blind to its waits.

msprobe on torch 1.13 (Debian's): its monitor refuses torch < 2.0 by a string comparison at
import (module_hook.py: torch.__version__.split('+')[0] >= '2.0'). This bench's msprobe child
bypasses that gate: torch.__version__ reads "2.0.0" while msprobe.pytorch.monitor.module_hook is
imported, and its true value again at once (the rest of msprobe, imported before, sees the true
one). Three more things msprobe's monitor takes from torch 2 are stood in for, in that child only,
where this torch lacks them: torch.distributed.fsdp (which does not import on Python 3.11 with
torch 1.13; msprobe only tests isinstance against its FullyShardedDataParallel: a class nothing
is an instance of), torch.utils.tensorboard (tensorboard is not installed; format csv never makes
a SummaryWriter) and torch.no_grad used as a bare decorator (`@torch.no_grad` on the functions
its hooks run; torch 1.13 only has `@torch.no_grad()`, which does the same). msprobe's forward
hooks need torch 2's register_forward_hook(with_kwargs=True): its activation rows (xy, all)
cannot run on torch 1.13 and read "n/a (needs torch >= 2.0)".
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_torch as bt  # noqa: E402  (its models, child protocol, clocks, pinning and settling)

OPS = ["norm", "min", "max", "mean"]  # msprobe's usual
ALERT = {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}]}
# name, the config's collection fields, tprobe's goal (a step-time ratio, or None), what.
CONFIGS = [
    ("wg", {"wg_distribution": True}, None, "weight grads (acc_grad + post_grad)"),
    ("wg_mv", {"wg_distribution": True, "mv_distribution": True}, 1.05,
     "weight grads + Adam's exp_avg / exp_avg_sq"),
    ("param", {"param_distribution": True}, None, "weights before and after the step"),
    ("xy", {"xy_distribution": True, "all_xy": True}, None, "activations and their grads, every module"),
    ("all", {"wg_distribution": True, "mv_distribution": True, "param_distribution": True,
             "xy_distribution": True, "all_xy": True}, None, "all of the above"),
]
TOOLS = ["base", "tprobe", "msprobe"]
MSPROBE_GATE = ("msprobe's version gate bypassed; its forward hooks need torch 2's with_kwargs, "
                "so its activation rows cannot run on torch 1.13")
NEEDS_TORCH2 = "n/a (needs torch >= 2.0)"


def monitor_config(fields):
    """The monitor config of a CONFIGS entry, as a user of msprobe writes it."""
    return {"targets": {}, **fields, "ops": list(OPS), "alert": ALERT, "format": "csv", "step_interval": 1}


# --- msprobe's TrainerMon on this torch (child side) ---------------------------------------------

def import_msprobe_trainermon():
    """msprobe's TrainerMon class (msprobe.pytorch.monitor.module_hook, what msprobe.pytorch
    exports on torch 2) and the list of what was stood in for on this torch (the docstring)."""
    import types
    import torch
    import msprobe.pytorch  # noqa: F401  everything but the monitor, with torch's true version
    notes = []
    standins = {}
    try:
        import torch.distributed.fsdp  # noqa: F401
    except Exception:  # torch 1.13 on Python 3.11: a dataclass error at import
        fsdp = types.ModuleType("torch.distributed.fsdp")
        fsdp.FullyShardedDataParallel = type("FullyShardedDataParallel", (), {})
        standins["torch.distributed.fsdp"] = fsdp
        notes.append("torch.distributed.fsdp (does not import here) stood in for by an empty FullyShardedDataParallel")
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:
        tb = types.ModuleType("torch.utils.tensorboard")

        class SummaryWriter:
            def __init__(self, *args, **kwargs):
                raise RuntimeError("bench_monitor: tensorboard is not installed (format csv only)")
        tb.SummaryWriter = SummaryWriter
        standins["torch.utils.tensorboard"] = tb
        notes.append("torch.utils.tensorboard (tensorboard not installed) stood in for; format csv never uses it")
    try:
        torch.no_grad(lambda: None)
    except TypeError:
        real_no_grad = torch.no_grad

        class no_grad(real_no_grad):
            """torch 2's no_grad, which also decorates when given the function (`@torch.no_grad`)."""
            def __new__(cls, func=None):
                self = super().__new__(cls)
                if callable(func):
                    self.__init__()
                    return self(func)
                return self

            def __init__(self, func=None):
                super().__init__()
        torch.no_grad = no_grad
        notes.append("torch.no_grad accepts a bare function as torch 2's does")
    saved = {name: sys.modules.get(name) for name in standins}
    sys.modules.update(standins)
    version = torch.__version__
    if not torch.__version__.split("+")[0] >= "2.0":  # msprobe's own (string) comparison
        torch.__version__ = "2.0.0"
        notes.insert(0, f"version gate bypassed (torch.__version__ read \"2.0.0\" during the import, {version} after)")
    try:
        from msprobe.pytorch.monitor.module_hook import TrainerMon
    finally:
        torch.__version__ = version
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return TrainerMon, notes


def monitor_optimizer(mon, model):
    """Has the example's train() call mon.set_monitor(model, optimizer) right after it builds its
    optimizer, as a user's script does: torch.optim's optimizer classes are wrapped until the first
    one is built, then put back. Returns a list that holds the optimizer once that happened."""
    import torch
    built = []
    originals = {}
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer:
            originals[name] = cls

    def make(cls):
        def build(*args, **kwargs):
            for n, c in originals.items():
                setattr(torch.optim, n, c)
            opt = cls(*args, **kwargs)
            mon.set_monitor(model, opt)
            built.append(opt)
            return opt
        return build
    for name, cls in originals.items():
        setattr(torch.optim, name, make(cls))
    return built


def child_main(model_name, tool, config, out_dir):
    """Trains `model_name` with the example's train() one block at a time as told on stdin, under
    `tool`'s TrainerMon (base: none), speaking bench_torch's child protocol ("BENCH ready ...",
    "BENCH done STAGES_CPU CPUS")."""
    import torch
    os.environ["MONITOR_OUTPUT_DIR"] = out_dir
    module = bt.example(model_name)
    args = bt.model_args(model_name, module)
    torch.set_num_threads(1)
    model = module.build_model(args)
    pool = list(module.batches(args, 8))
    debugger = module.make_debugger(args)  # no --config: the example's stand-in, which does nothing
    clock = bt.step_clock("cpu")
    mon = None
    if tool == "tprobe":
        from tprobe import TrainerMon
        mon = TrainerMon(config, params_have_main_grad=False)
    elif tool == "msprobe":
        TrainerMon, notes = import_msprobe_trainermon()
        for note in notes:
            print(f"bench_monitor: msprobe child: {note}", file=sys.stderr)
        mon = TrainerMon(config, params_have_main_grad=False)
    built = monitor_optimizer(mon, model) if mon is not None else [None]
    out = os.fdopen(os.dup(1), "w", buffering=1)

    def loader():
        if not built:
            raise RuntimeError("bench_monitor: the example's train() built no torch.optim optimizer")
        yield from bt.child_batches(pool, clock, out)

    module.train(args, model, debugger, loader(), clock.on_step)
    if tool == "tprobe":
        mon.close()  # the pipeline's files complete; its processes' CPU is then in RUSAGE_CHILDREN
    bt.child_done(out)


# --- parent -----------------------------------------------------------------------------------------

class child(bt.child):
    """bench_torch's child (run, wait_ready, quit and its pin check), started as this file's."""

    def __init__(self, model_name, tool, config, out_dir, log, extra_env):
        env = {**os.environ, **extra_env}
        for name in ("TPROBE_ENDPOINT", "TPROBE_CONFIG", "TPROBE_BENCH_PIN", "MONITOR_OUTPUT_DIR", "DYNAMIC_MONITOR"):
            env.pop(name, None)
        env["OMP_NUM_THREADS"] = "1"
        if bt.PIN_CPU is not None:
            env["TPROBE_BENCH_PIN"] = str(bt.PIN_CPU)
        env.update(bt.ALLOCATOR_ENV)
        env["PYTHONPATH"] = os.path.join(ROOT, "python") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--child", model_name, tool, config, out_dir],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1, env=env,
            preexec_fn=bt.default_sigint)
        self.wait_ready()


class measurement:
    def __init__(self, model_name, config):
        self.model, self.config = model_name, config
        self.samples = {t: [] for t in TOOLS}  # (wall, cpu, faults, thread cpu) of every measured step
        self.rounds = []  # {tool: that round's block}
        self.sustained = []  # tprobe's block until its pipeline is idle / the no-tool block
        self.error = {}  # tool -> why it has no figure
        self.stages_cpu = None  # CPU seconds of tprobe's pipeline processes
        self.tool_steps = {t: 0 for t in TOOLS}

    def ratio(self, tool, field=0):
        """(median over rounds of tool block / no-tool block, lowest, highest), or None; of the
        wall time (field 0), the process's CPU (1) or the training thread's (3)."""
        ratios = [bt.median_of(r[tool], field) / bt.median_of(r["base"], field) for r in self.rounds if tool in r]
        return (statistics.median(ratios), min(ratios), max(ratios)) if ratios else None

    def base_ms(self):
        return bt.median_of(self.samples["base"], 0) * 1e3 if self.samples["base"] else None


def log_tail(path, lines=3):
    with open(path, errors="replace") as f:
        return [line.rstrip() for line in f if line.strip()][-lines:]


def bench_config(model_name, name, fields, opts, tmp, block):
    m = measurement(model_name, name)
    config = os.path.join(tmp, f"{model_name}-{name}.json")
    with open(config, "w") as f:
        json.dump(monitor_config(fields), f)
    children = {}
    for tool in TOOLS:
        if tool == "msprobe" and opts.msprobe_error:
            m.error[tool] = opts.msprobe_error
            continue
        log_path = os.path.join(tmp, f"{model_name}-{name}-{tool}.log")
        with open(log_path, "w") as log:
            try:
                children[tool] = child(model_name, tool, config, os.path.join(tmp, f"{model_name}-{name}-{tool}"),
                                       log, opts.msprobe_env if tool == "msprobe" else {})
            except (RuntimeError, BrokenPipeError) as e:
                tail = log_tail(log_path)
                if tool == "msprobe" and any("with_kwargs" in line for line in tail):
                    m.error[tool] = NEEDS_TORCH2
                else:
                    m.error[tool] = f"FAILED: {e}: " + " | ".join(tail)
    if "base" not in children:
        raise SystemExit(f"bench_monitor: the no-tool child failed: {m.error['base']}")

    def run(tool, steps):
        try:
            return children[tool].run(steps)
        except (RuntimeError, BrokenPipeError) as e:
            m.error[tool] = f"FAILED: {e}: " + " | ".join(log_tail(os.path.join(tmp, f"{model_name}-{name}-{tool}.log")))
            return None

    def live():
        return [t for t in TOOLS if t in children and t not in m.error]

    for tool in live():
        if run(tool, opts.warmup) is not None:
            m.tool_steps[tool] += opts.warmup
    for r in range(opts.rounds):
        order = live() if r % 2 == 0 else live()[::-1]
        blocks, spans = {}, {}
        for tool in order:
            if "tprobe" in live():
                bt.settle(children["tprobe"].proc)  # its stage's work lands in no one's block
            t0 = time.monotonic()
            samples = run(tool, block)
            if samples is None:
                continue
            spans[tool] = time.monotonic() - t0
            if tool == "tprobe":
                spans[tool] += bt.settle(children["tprobe"].proc)
            blocks[tool] = samples
            m.samples[tool].extend(samples)
            m.tool_steps[tool] += len(samples)
        if "base" not in blocks:
            raise SystemExit(f"bench_monitor: the no-tool child failed: {m.error.get('base')}")
        m.rounds.append(blocks)
        if "tprobe" in spans:
            m.sustained.append(spans["tprobe"] / spans["base"])
    for tool, c in children.items():
        try:
            _, stages_cpu, status = c.quit()
            if status != 0 and tool not in m.error:
                m.error[tool] = f"FAILED: child exited with status {status}: " + " | ".join(
                    log_tail(os.path.join(tmp, f"{model_name}-{name}-{tool}.log")))
            if tool == "tprobe":
                m.stages_cpu = stages_cpu
        except BrokenPipeError as e:
            m.error.setdefault(tool, f"FAILED: {e}")
            c.proc.wait()
    # The rounds measured before a monitor failed do not stand for it.
    for tool in ("tprobe", "msprobe"):
        if tool in m.error:
            for r in m.rounds:
                r.pop(tool, None)
    if not opts.keep:
        for tool in TOOLS:
            shutil.rmtree(os.path.join(tmp, f"{model_name}-{name}-{tool}"), ignore_errors=True)
    return m


def goal_of(name):
    return {c[0]: c[2] for c in CONFIGS}[name]


def verdict(m):
    """(goal text, ok / MISS / -): tprobe within its goal and at or below msprobe's ratio."""
    tp, ms = m.ratio("tprobe"), m.ratio("msprobe")
    goal = goal_of(m.config)
    parts = ([f"<={goal:.2f}x"] if goal else []) + (["<=msprobe"] if ms else [])
    if not parts:
        return "-", "-"
    if tp is None:
        return ", ".join(parts), "MISS"
    ok = (goal is None or tp[0] <= goal) and (ms is None or tp[0] <= ms[0])
    return ", ".join(parts), "ok" if ok else "MISS"


def report(model_name, results, block, opts):
    whats = {c[0]: c[3] for c in CONFIGS}
    print(f"\n{model_name}: {opts.rounds} rounds of {block} steps per child (no tool, tprobe, msprobe) "
          f"after {opts.warmup} warm-up steps each")
    print(f"  {'config':<7} {'no-tool ms':>10} {'tprobe':>8} {'range':>11} {'sust.':>6} {'cpu':>6} {'thread':>6}"
          f" {'stage':>9} {'msprobe':>8} {'range':>11} {'cpu':>6} {'thread':>6}  what")
    for m in results:
        cells = []
        for tool in ("tprobe", "msprobe"):
            r = m.ratio(tool)
            if r is None:
                cells.append((f"{'-':>8}", f"{'-':>11}", f"{'-':>6}", f"{'-':>6}"))
                continue
            cpu, thread = m.ratio(tool, 1)[0], m.ratio(tool, 3)[0]
            cells.append((f"{r[0]:7.3f}x", f"{r[1]:.2f}-{r[2]:.2f}", f"{cpu:5.2f}x", f"{thread:5.2f}x"))
        sust = f"{statistics.median(m.sustained):5.2f}x" if m.sustained and m.ratio("tprobe") else f"{'-':>6}"
        stage = (f"{m.stages_cpu / m.tool_steps['tprobe'] * 1e3:6.1f} ms" if m.stages_cpu and m.tool_steps["tprobe"]
                 else f"{'-':>9}")
        (tr, trr, tc, tt), (mr, mrr, mc, mt) = cells
        print(f"  {m.config:<7} {m.base_ms():10.1f} {tr} {trr:>11} {sust} {tc} {tt} {stage} {mr} {mrr:>11} {mc} {mt}"
              f"  {whats[m.config]}")
        for tool, why in m.error.items():
            print(f"  {'':<7} {tool}: {why}")


def table(models, results_by_model):
    print("\nmonitor / no-tool step time (median over alternating rounds, warm-up excluded; "
          "goal: wg_mv <=1.05x, every row <= msprobe where msprobe runs)")
    print(f"  {'model':<12} {'config':<7} {'no-tool ms':>10} {'tprobe':>9} {'msprobe':>26}  {'goal':<19} result")
    any_row = False
    for name in models:
        for m in results_by_model[name]:
            tp, ms = m.ratio("tprobe"), m.ratio("msprobe")
            tp_text = f"{tp[0]:.3f}x" if tp else "FAILED"
            if ms:
                ms_text = f"{ms[0]:.3f}x"
            else:
                why = m.error.get("msprobe", "")
                ms_text = why if why.startswith("n/a") else "FAILED" if why.startswith("FAILED") else why or "-"
            goal, result = verdict(m)
            print(f"  {name:<12} {m.config:<7} {m.base_ms():10.1f} {tp_text:>9} {ms_text:>26}  {goal:<19} {result}")
            any_row = True
    return any_row


def probe_msprobe(env):
    """None when this Python imports msprobe's TrainerMon (with import_msprobe_trainermon's stand-ins,
    which it prints), else why not."""
    code = ("import sys; sys.path.insert(0, %r); import bench_monitor as b; c, notes = b.import_msprobe_trainermon(); "
            "print('\\n'.join(notes))") % os.path.join(ROOT, "bench")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env})
    if run.returncode != 0:
        lines = run.stderr.strip().splitlines()
        return "n/a (msprobe not importable: " + (lines[-1] if lines else f"status {run.returncode}") + ")", []
    return None, [line for line in run.stdout.splitlines() if line.strip()]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=list(bt.MODELS) + ["all"],
                   help="a model, or all (resnet18, transformer, gru: the default; tiny with --quick)")
    p.add_argument("--steps", type=int, help="measured steps per child (default " + ", ".join(
        f"{bt.DEFAULT_STEPS[m]} {m}" for m in bt.ALL_MODELS) + ", as bench_torch.py; 4 with --quick)")
    p.add_argument("--rounds", type=int, help=f"alternations (default {bt.DEFAULT_ROUNDS}; 2 with --quick)")
    p.add_argument("--warmup", type=int, help="warm-up steps per child (3; 1 with --quick)")
    p.add_argument("--configs", default=",".join(c[0] for c in CONFIGS),
                   help="comma-separated subset of " + ", ".join(c[0] for c in CONFIGS) + " (default: all)")
    p.add_argument("--pin", default="auto", help="bench_torch's --pin: auto (default), none or a CPU number")
    p.add_argument("--msprobe-path", default="",
                   help="directories put before PYTHONPATH in msprobe's children (default: msprobe is "
                        "found on PYTHONPATH, e.g. after `. /tmp/msprobe-src/env.sh`)")
    p.add_argument("--no-msprobe", action="store_true", help="measure tprobe only")
    p.add_argument("--quick", action="store_true", help="a smoke run: the tiny GRU, 2 rounds of 2 steps")
    p.add_argument("--tmp", help="directory for the children's output (default: a new one under $TMPDIR)")
    p.add_argument("--keep", action="store_true", help="keep the monitors' files and the children's logs")
    p.add_argument("--child", nargs=4, metavar=("MODEL", "TOOL", "CONFIG", "OUT"), help=argparse.SUPPRESS)
    opts = p.parse_args()
    if opts.child:
        return child_main(*opts.child)
    allowed = sorted(os.sched_getaffinity(0))
    if opts.pin == "auto":
        bt.PIN_CPU = bt.quietest_cpu(allowed) if len(allowed) > 1 else None
    elif opts.pin != "none":
        if not opts.pin.isdigit() or int(opts.pin) not in allowed:
            p.error(f"--pin {opts.pin!r}: not auto, none or one of the CPUs this process may use ({allowed})")
        bt.PIN_CPU = int(opts.pin)
    opts.model = opts.model or ("tiny" if opts.quick else "all")
    opts.rounds = opts.rounds or (2 if opts.quick else bt.DEFAULT_ROUNDS)
    opts.warmup = opts.warmup if opts.warmup is not None else (1 if opts.quick else 3)
    configs = [c.strip() for c in opts.configs.split(",") if c.strip()]
    unknown = set(configs) - {c[0] for c in CONFIGS}
    if unknown:
        p.error(f"unknown configurations: {', '.join(sorted(unknown))}")
    os.environ["TPROBE_BENCH_MODEL_ARGS"] = ""  # bench_torch's model_args reads it
    opts.msprobe_env = {}
    if opts.msprobe_path:
        opts.msprobe_env["PYTHONPATH"] = opts.msprobe_path + os.pathsep + os.environ.get("PYTHONPATH", "")
    notes = []
    opts.msprobe_error = "n/a (--no-msprobe)" if opts.no_msprobe else None
    if not opts.no_msprobe:
        opts.msprobe_error, notes = probe_msprobe(opts.msprobe_env)
    import torch
    tmp = opts.tmp or tempfile.mkdtemp(prefix="tprobe-bench-monitor-")
    os.makedirs(tmp, exist_ok=True)
    print(f"tprobe monitor benchmark: torch {torch.__version__}, {os.cpu_count()} CPUs, torch threads 1, CPU, "
          f"output in {tmp}, allocator pinned in every child"
          + (f", training threads on CPU {bt.PIN_CPU} after the warm-up" if bt.PIN_CPU is not None else ""))
    print(f"monitor config: targets {{}} + the row's fields, ops {','.join(OPS)}, AnomalyTurbulence 0.5, "
          "format csv, step_interval 1; TrainerMon(config, params_have_main_grad=False), set_monitor(model, optimizer)")
    if opts.msprobe_error:
        print(f"msprobe: {opts.msprobe_error}")
    else:
        print(f"msprobe: {MSPROBE_GATE}")
        for note in notes[1:] if notes and notes[0].startswith("version gate") else notes:
            print(f"  in msprobe's child: {note}")
    print("load average (1, 5, 15 min) at start: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    t0 = time.perf_counter()
    models = bt.ALL_MODELS if opts.model == "all" else [opts.model]
    results_by_model = {}
    for name in models:
        steps = opts.steps or (2 * opts.rounds if opts.quick else bt.DEFAULT_STEPS[name])
        block = max(1, -(-steps // opts.rounds))
        results = [bench_config(name, c, fields, opts, tmp, block) for c, fields, _, _ in CONFIGS if c in configs]
        report(name, results, block, opts)
        results_by_model[name] = results
    table(models, results_by_model)
    print(f"\ntotal wall time {time.perf_counter() - t0:.0f} s; load average at the end: "
          + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    if not opts.keep and not opts.tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    failed = [f"{m.model} {m.config}" for name in models for m in results_by_model[name] if m.ratio("tprobe") is None]
    if failed:
        print(f"bench_monitor: tprobe's TrainerMon could not be measured: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
