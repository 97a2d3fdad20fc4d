#!/usr/bin/env python3
"""Step-time cost of tprobe's PyTorch capture on the example training loops, CPU, one thread:

    PYTHONPATH=python /usr/bin/python3 bench/bench_torch.py [--model resnet18|transformer|all]
                                                            [--steps N] [--configs a,b,...]

For each model and each configuration (outside steps, statistics L1, L0, mix, md5, tensor) it
prints the median step time with the tool over the median step time without it, next to the goal.
The bench reports; it never asserts.

How it measures. This process (which never imports tprobe) trains the baseline; one child process
per configuration trains the same model with the same batches under PrecisionDebugger in direct
mode (no TPROBE_ENDPOINT, so the child starts its own pipeline, whose stages write into a temp dump
dir). The two take turns in blocks of steps (baseline block, tool block, baseline block, ...), one
process running at a time, after warm-up steps on both sides; a block of consecutive tool steps
lets a capture that outruns its pipeline hit backpressure inside the block. Both sides run the
examples' own train() loop (examples/train_*.py), timing each step from debugger.start() to
debugger.step() inclusive. "drain" is the time from the child's last step to its exit (the
pipeline finishing its writes). For the tensor task it also writes a file of one step's dump size
with fsync into the same directory and prints that bandwidth, so the reader can see whether the
disk binds.
"""
import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import torch  # noqa: E402

import train_resnet18  # noqa: E402
import train_transformer  # noqa: E402

MODELS = {"resnet18": train_resnet18, "transformer": train_transformer}
DEFAULT_STEPS = {"resnet18": 24, "transformer": 96}
DEFAULT_ROUNDS = 8

# name, example config, goal (step-time ratio), description
CONFIGS = [
    ("outside", "statistics_L1", 1.02, "tool loaded, steps not configured"),
    ("statistics_L1", "statistics_L1", 1.3, "statistics, L1 (operators)"),
    ("statistics_L0", "statistics_L0", 1.05, "statistics, L0 (modules)"),
    ("statistics_mix", "statistics_mix", 1.4, "statistics, mix"),
    ("md5", "md5", 1.5, "statistics, summary_mode md5, L1"),
    ("tensor", "tensor", 2.5, "tensor, L1 (.npy files)"),
]
OUTSIDE_STEP = 1000000  # the largest step msprobe accepts; never reached


def model_args(module, extra=()):
    return module.parse_args(["--quiet", "--threads", "1", *extra])


def dir_bytes(path):
    total = 0
    for top, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(top, f))
            except OSError:
                pass
    return total


def step_dump_bytes(dump):
    """Median bytes of the step{N} folders under `dump`, and how many there are."""
    if not os.path.isdir(dump):
        return 0, 0
    steps = [os.path.join(dump, d) for d in os.listdir(dump) if d.startswith("step")]
    if not steps:
        return 0, 0
    return int(statistics.median(dir_bytes(s) for s in steps)), len(steps)


def disk_write_bandwidth(directory, size):
    """Bytes/s writing `size` bytes (at least 16 MiB) in 4 MiB chunks, then fsync."""
    size = max(size, 16 << 20)
    chunk = os.urandom(1 << 20) * 4
    path = os.path.join(directory, "bandwidth.bin")
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        written = 0
        while written < size:
            n = min(len(chunk), size - written)
            f.write(chunk[:n])
            written += n
        f.flush()
        os.fsync(f.fileno())
    seconds = time.perf_counter() - t0
    os.remove(path)
    return size / seconds


class step_clock:
    """Step times from the examples' train() loop: wall seconds as train() measures them (start()
    to step()), and this process's CPU seconds (all its threads) from the batch's hand-over to
    the end of the step."""

    def __init__(self):
        self.samples = []  # (wall, cpu) per step
        self.cpu0 = 0.0

    def mark(self):  # called by a loader just before it yields a batch
        self.cpu0 = time.process_time()

    def on_step(self, i, seconds, loss):
        self.samples.append((seconds, time.process_time() - self.cpu0))

    def take(self):
        samples, self.samples = self.samples, []
        return samples


# --- child: trains under PrecisionDebugger, one block at a time, as told on stdin ---------------

def child_main(model_name, config, dump):
    module = MODELS[model_name]
    args = model_args(module, ["--config", config, "--dump-path", dump])
    torch.set_num_threads(1)
    model = module.build_model(args)
    pool = list(module.batches(args, 8))
    debugger = module.make_debugger(args)
    clock = step_clock()
    out = os.fdopen(os.dup(1), "w", buffering=1)

    def loader():
        i = 0
        while True:
            out.write("BENCH ready " + " ".join(f"{w:.6f}:{c:.6f}" for w, c in clock.take()) + "\n")
            command = sys.stdin.readline().split()
            if not command or command[0] == "quit":
                return
            for _ in range(int(command[1])):
                clock.mark()
                yield pool[i % len(pool)]
                i += 1

    module.train(args, model, debugger, loader(), clock.on_step)
    # The pipeline's processes (launcher and stages) are this process's children: once the
    # debugger has ended them, their CPU time is in RUSAGE_CHILDREN.
    if hasattr(debugger, "close"):
        debugger.close()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    out.write(f"BENCH done {usage.ru_utime + usage.ru_stime:.6f}\n")


def default_sigint():
    # A shell runs a background job with SIGINT ignored, and an ignored signal stays ignored
    # across exec; the direct mode ends its pipeline with SIGINT, so give the child the default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class child:
    def __init__(self, model_name, config, dump, log):
        env = dict(os.environ)
        env.pop("TPROBE_ENDPOINT", None)
        env.pop("TPROBE_CONFIG", None)
        env["OMP_NUM_THREADS"] = "1"
        python = os.path.join(ROOT, "python")
        env["PYTHONPATH"] = python + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--child", model_name, config, dump],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1, env=env,
            preexec_fn=default_sigint)
        self.wait_ready()

    def wait_ready(self):
        for line in self.proc.stdout:
            if line.startswith("BENCH ready"):
                return [tuple(float(x) for x in sample.split(":")) for sample in line.split()[2:]]
        raise RuntimeError(f"child exited with status {self.proc.wait()}")

    def run(self, steps):
        self.proc.stdin.write(f"run {steps}\n")
        return self.wait_ready()

    def quit(self):
        """Seconds from the quit command to the child's exit, the CPU seconds of its pipeline
        processes (None if not reported), and its exit status."""
        t0 = time.perf_counter()
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        stages_cpu = None
        for line in self.proc.stdout:
            if line.startswith("BENCH done"):
                stages_cpu = float(line.split()[2])
        status = self.proc.wait()
        return time.perf_counter() - t0, stages_cpu, status


# --- parent: baseline training, taking turns with the children --------------------------------

class measurement:
    def __init__(self, name):
        self.name = name
        self.base, self.tool = [], []  # (wall, cpu) seconds of every measured step
        self.rounds = []  # (baseline block, tool block) of each round
        self.tool_steps = 0  # tool steps run, warm-up included
        self.stages_cpu = None  # CPU seconds of the child's pipeline processes
        self.drain = None
        self.error = None
        self.step_bytes = 0
        self.steps_dumped = 0
        self.disk_bw = None


def bench_model(model_name, opts, tmp):
    module = MODELS[model_name]
    args = model_args(module)
    torch.set_num_threads(1)
    model = module.build_model(args)
    pool = list(module.batches(args, 8))
    steps = opts.steps or DEFAULT_STEPS[model_name]
    block = max(1, -(-steps // opts.rounds))  # steps per block, rounded up
    wanted = [c for c in CONFIGS if c[0] in opts.configs]
    results = []
    clock = step_clock()

    def loader():
        # Baseline warm-up, then for each configuration: child warm-up, then rounds of
        # (baseline block, tool block).
        i = 0

        def batches(n):
            nonlocal i
            for _ in range(n):
                clock.mark()
                yield pool[i % len(pool)]
                i += 1

        yield from batches(opts.warmup)
        for name, example, goal, _ in wanted:
            m = measurement(name)
            results.append(m)
            if opts.tool_error:
                m.error = opts.tool_error
            dump = os.path.join(tmp, f"{model_name}-{name}")
            config = os.path.join(tmp, f"{model_name}-{name}.json")
            with open(os.path.join(ROOT, "examples", "configs", example + ".json")) as f:
                doc = json.load(f)
            doc["dump_path"] = dump
            if name == "outside":
                doc["step"] = [OUTSIDE_STEP]
            with open(config, "w") as f:
                json.dump(doc, f)
            log_path = os.path.join(tmp, f"{model_name}-{name}.log")
            proc = None
            with open(log_path, "w") as log:
                try:
                    if not m.error:
                        proc = child(model_name, config, dump, log)
                        proc.run(opts.warmup)
                        m.tool_steps += opts.warmup
                except (RuntimeError, BrokenPipeError) as e:
                    m.error = str(e)
                for _ in range(opts.rounds):
                    clock.take()
                    yield from batches(block)
                    base = clock.take()
                    m.base.extend(base)
                    if proc and not m.error:
                        try:
                            tool = proc.run(block)
                        except (RuntimeError, BrokenPipeError) as e:
                            m.error = str(e)
                            continue
                        m.tool.extend(tool)
                        m.tool_steps += len(tool)
                        m.rounds.append((base, tool))
                if proc:
                    try:
                        m.drain, m.stages_cpu, status = proc.quit()
                        if status != 0 and not m.error:
                            m.error = f"child exited with status {status}"
                    except BrokenPipeError as e:
                        m.error = m.error or str(e)
                        proc.proc.wait()
            if m.error:
                with open(log_path) as log:
                    tail = [l.rstrip() for l in log if l.strip()][-2:]
                if tail:
                    m.error += ": " + " | ".join(tail)
            m.step_bytes, m.steps_dumped = step_dump_bytes(dump)
            if name == "tensor" and not m.error:
                m.disk_bw = disk_write_bandwidth(tmp, m.step_bytes)
            if not opts.keep:
                shutil.rmtree(dump, ignore_errors=True)

    module.train(args, model, module.no_debugger(), loader(), clock.on_step)
    return results, block


def fmt_bytes(n):
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB" if n else "0"


def median_of(samples, k):
    return statistics.median(x[k] for x in samples)


def report(model_name, results, block, opts):
    goals = {c[0]: (c[2], c[3]) for c in CONFIGS}
    print(f"\n{model_name}: {opts.rounds} rounds of {block} baseline + {block} tool steps per "
          f"configuration after {opts.warmup} warm-up steps")
    print("  ratio: median over rounds of (median tool step / median baseline step, wall time, same round);"
          " range: lowest and highest round;\n  cpu: the same ratio for the training process's CPU time"
          " (less sensitive to other load); stages: CPU of the pipeline processes per tool step;"
          "\n  drain: from the last step to the end of the process (the pipeline finishing its files)")
    print(f"  {'configuration':<15} {'base ms':>8} {'tool ms':>8} {'ratio':>6} {'range':>11} {'cpu':>6} "
          f"{'goal':>6}  {'result':<9} {'dump/step':>10} {'stages':>9} {'drain':>6}  what")
    for m in results:
        goal, what = goals[m.name]
        if m.error or not m.rounds:
            base = f"{median_of(m.base, 0) * 1e3:8.1f}" if m.base else f"{'-':>8}"
            print(f"  {m.name:<15} {base} {'-':>8} {'-':>6} {'-':>11} {'-':>6} {goal:>5.2f}x  {'FAILED':<9} "
                  f"{'-':>10} {'-':>9} {'-':>6}  {what}: {m.error}")
            continue
        b, t = median_of(m.base, 0), median_of(m.tool, 0)
        ratios = [median_of(tool, 0) / median_of(base, 0) for base, tool in m.rounds]
        ratio = statistics.median(ratios)
        cpu = statistics.median(median_of(tool, 1) / median_of(base, 1) for base, tool in m.rounds)
        verdict = "MET" if ratio <= goal else "NOT MET"
        bound = ""
        if m.disk_bw and m.step_bytes:
            disk_s = m.step_bytes / m.disk_bw
            if goal < ratio <= 1 + disk_s / b:
                verdict = "MET(disk)"
            bound = (f"; disk {m.disk_bw / 1e6:.0f} MB/s (write + fsync): one step's {fmt_bytes(m.step_bytes)} "
                     f"takes {disk_s * 1e3:.0f} ms = {disk_s / b:.2f}x a baseline step, "
                     f"so the disk allows {1 + disk_s / b:.2f}x")
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        stages = (f"{m.stages_cpu / m.tool_steps * 1e3:6.0f} ms" if m.stages_cpu is not None and m.tool_steps
                  else f"{'-':>9}")
        print(f"  {m.name:<15} {b * 1e3:8.1f} {t * 1e3:8.1f} {ratio:5.2f}x {spread:>11} {cpu:5.2f}x {goal:5.2f}x  "
              f"{verdict:<9} {fmt_bytes(m.step_bytes):>10} {stages} {m.drain:5.1f}s  {what}{bound}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["resnet18", "transformer", "all"], default="all")
    p.add_argument("--steps", type=int, help="measured steps per configuration and side "
                   f"(default {DEFAULT_STEPS['resnet18']} resnet18, {DEFAULT_STEPS['transformer']} transformer)")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                   help=f"baseline/tool alternations per configuration ({DEFAULT_ROUNDS})")
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps on each side (2)")
    p.add_argument("--configs", default=",".join(c[0] for c in CONFIGS),
                   help="comma-separated subset of " + ", ".join(c[0] for c in CONFIGS))
    p.add_argument("--tmp", help="directory for the dumps (default: a new one under $TMPDIR)")
    p.add_argument("--keep", action="store_true", help="keep the dumps and child logs")
    p.add_argument("--child", nargs=3, metavar=("MODEL", "CONFIG", "DUMP"), help=argparse.SUPPRESS)
    opts = p.parse_args()
    if opts.child:
        return child_main(*opts.child)
    opts.configs = [c.strip() for c in opts.configs.split(",") if c.strip()]
    unknown = set(opts.configs) - {c[0] for c in CONFIGS}
    if unknown:
        p.error(f"unknown configurations: {', '.join(sorted(unknown))}")

    # The tool is imported only in the children; check once that it can be.
    check = subprocess.run([sys.executable, "-c", "import tprobe; tprobe.PrecisionDebugger"],
                           capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "python") + os.pathsep
                                + os.environ.get("PYTHONPATH", "")})
    opts.tool_error = None
    if check.returncode != 0:
        lines = check.stderr.strip().splitlines()
        opts.tool_error = "tprobe not importable (" + (lines[-1] if lines else f"status {check.returncode}") + ")"

    tmp = opts.tmp or tempfile.mkdtemp(prefix="tprobe-bench-torch-")
    os.makedirs(tmp, exist_ok=True)
    print(f"tprobe PyTorch capture benchmark: torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"torch threads 1, dumps in {tmp}")
    if opts.tool_error:
        print(f"warning: {opts.tool_error}; only the baseline is measured")
    models = list(MODELS) if opts.model == "all" else [opts.model]
    t0 = time.perf_counter()
    print("load average (1, 5, 15 min) at start: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    for name in models:
        results, block = bench_model(name, opts, tmp)
        report(name, results, block, opts)
    print(f"\ntotal wall time {time.perf_counter() - t0:.0f} s; load average at the end: "
          + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    if not opts.keep and not opts.tmp:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
