#!/usr/bin/env python3
"""Step-time cost of tprobe's PyTorch capture on three training loops, CPU, one thread:

    PYTHONPATH=python /usr/bin/python3 bench/bench_torch.py [--model resnet18|transformer|gru|mlp|tiny|all]
                                                            [--steps N] [--configs a,b,...] [--quick]

For each model (examples/train_resnet18.py, examples/train_transformer.py, bench/train_gru.py; and
bench/train_mlp.py, a deep MLP with many parameters, when asked for with --model mlp; and
bench/train_gpt2.py, a GPT-2-small-sized decoder with bf16 autocast, with --model gpt2) and
each configuration it prints the median step time with the tool over the median step time without
it, next to the goal; at the end, issue 16's table: statistics L1, statistics mix, md5 L1, tensor
L1 with the step barrier and async, one column per model, each cell the ratio, its goal and
PASS/OVER, then the limits measured in the same run: the disk's write + fsync speed in the dump
directory's file system, and one read pass over a step's operator data. --quick (2 rounds of 2
steps, the tiny GRU unless --model is given) finishes in about a minute: a smoke run. The bench
reports; it never asserts. Figures and their reading: docs/performance.md, "PyTorch capture".

How it measures. The parent only orchestrates. For each configuration it starts two child
processes that train the same model on the same batches with the examples' own train() loop
(examples/train_*.py): a baseline child that never imports tprobe, and a tool child under
PrecisionDebugger in direct mode (no TPROBE_ENDPOINT, so the child starts its own pipeline, whose
stages write into a temp dump dir); "control" runs two baseline children, the noise floor. After
warm-up steps on both, they take turns in blocks of steps (base, tool, tool, base, ...), one
process training at a time, each block starting once the tool's pipeline has finished the
previous block's work (its processes idle), so that this work never lands in a baseline block.
After the warm-up both children train on the same CPU (--pin: this VM's vCPUs change speed each on
its own, see PIN_CPU); the capture's threads and stages keep every CPU. A
block of consecutive tool steps lets a capture that outruns its pipeline hit backpressure inside
the block, and "sust." counts a tool block until its pipeline is idle again. A step is timed from
debugger.start() to debugger.step() inclusive (wall), and by the child's CPU time (all its
threads) over the same step. "drain" is the time from the tool child's last step to its exit (the
pipeline finishing its files); "stages" the CPU time of the pipeline's processes per tool step.
The limits: at the start and at the end it writes --disk-mib MiB with fsync into the dump
directory (the faster of the two is the disk's speed); a tensor row is allowed the larger of its
goal and 1 + (one step's tensor files at that speed) / baseline step. It also creates files of 16
KiB (1000, 200 with --quick) at the start and at the end: a tensor row's line adds what its step's
files cost to create at that rate, beside the allowance, which counts bytes only. The read pass is a one-thread
sum over --read-mib MiB of float32 (memory bandwidth as one reduction sees it): a capture that
reads every tensor of a step once, as statistics must, costs at least the step's operator data
(its tensor dump) at that speed, printed as the ratio no statistics row can go below. Each
statistics row also gets the floor of its own reads: the bytes its capture read in place
(counters()' stats_bytes_read: first-time contents, after every reuse) at that speed, the least
one reader can spend on them (the capture's helper thread may share them: below it is possible).
numpy's reduction is not the capture's reader, which is faster: tprobe-bench-crc (from
$TPROBE_BIN_DIR, else build/bin) times the capture's statistics kernel over --read-mib MiB on one
thread and with the capture's helper thread, and each statistics row's reads get those two
floors too, the least the capture's own readers can spend on them.

Comparing two builds. --against DIR measures a second build in the same rounds: DIR holds that
build's lib/libtprobe_torch.so and bin/ (a copy of build/ taken before a change, say). Each
configuration then also runs a tool child on it (with the Python package of DIR/python/tprobe
where DIR has one, this tree's otherwise), its block
taking its turn beside the other two in every round (base, this build, that build; then the
reverse), and the configuration's line is followed by that build's ratio and, per round, this
build's median step over that build's: a paired comparison, which a drift of the machine's speed
between two whole runs does not reach. --against msprobe makes that third child msprobe's own
PrecisionDebugger (8.3.3 run from its source, `. /tmp/msprobe-src/env.sh`, or any install the
children's Python imports) with the same
config.json and model, so each row reads tprobe / msprobe / no tool (issue 67 item 1); msprobe's
log lines go to the child's log, not its protocol.
"""
import argparse
import importlib
import json
import os
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

# name: (module, its extra arguments). "tiny" is for smoke runs (--quick), not in "all".
MODELS = {"resnet18": ("train_resnet18", []), "transformer": ("train_transformer", []),
          "gru": ("train_gru", []),
          # Opt-in (not in "all"): many parameters, whose optimizer burst step()'s barrier waits for.
          "mlp": ("train_mlp", []),
          # Opt-in: a GPT-2-small-sized decoder with bf16 autocast and AdamW, the realistic GPU
          # workload (issue 67); on a CPU give it a small shape with --model-args.
          "gpt2": ("train_gpt2", []),
          "tiny": ("train_gru", ["--hidden", "16", "--seq", "8", "--layers", "1", "--batch", "4"])}
ALL_MODELS = ["resnet18", "transformer", "gru"]
DEFAULT_STEPS = {"resnet18": 24, "transformer": 96, "gru": 48, "mlp": 24, "gpt2": 16, "tiny": 48}
DEFAULT_ROUNDS = 8
DISK_MIB = 256  # written with fsync at the start and at the end (--disk-mib)
READ_MIB = 256  # summed once per repeat for the read-pass limit (--read-mib)
DEVICE = "cpu"  # --device: where the children train
# --allocator pinned (the default): glibc's malloc in both children with fixed thresholds. Left
# alone, glibc moves its mmap threshold when a mapped block is freed and gives the heap's top
# back to the kernel past its trim threshold; which of a step's large tensors come back as fresh
# pages (a page fault each 4 KiB) then hangs on the process's allocation history. On this VM a
# fault costs ~15 µs: resnet18's no-tool step read 250 ms in one process and 46 ms with these
# two settings, and a bare `import` of an empty module moved it to 180 ms, so the ratio measured
# the allocator's luck (0.61x on 2026-11-28), not the tool. Both sides get the same settings;
# --allocator default measures glibc's own behaviour, with the faults column saying what it costs.
PINNED_ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20),  # glibc's largest on 64 bits
                    "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
ALLOCATOR_ENV = dict(PINNED_ALLOCATOR)
# --pin auto (the default): after its warm-up, each child's training thread (its main thread; the
# threads and processes the capture has started by then keep every CPU) runs on one CPU, the same
# for both children: of the CPUs this process may use, the one that has served the fewest device
# interrupts (here the other takes all of the disk's), so that the dump's writes do not interrupt
# the training thread. On this 2-vCPU VM each vCPU swings between two speeds on its own (a
# one-thread Python loop: 113-130 ms on the fast one, 198-229 ms on the slow one, measured with
# taskset; the guest sees no steal time), so two children that the scheduler leaves on different
# vCPUs compared the vCPUs, not the tool. --pin none leaves the placement to the scheduler;
# --pin N pins to CPU N.
PIN_CPU = None


def quietest_cpu(allowed, interrupts="/proc/interrupts"):
    """Of `allowed`, the CPU with the fewest device interrupts so far (`interrupts`: the
    numbered lines, not the local timer's or the inter-processor ones); the first on a tie or
    when the file cannot be read."""
    counts = dict.fromkeys(allowed, 0)
    try:
        with open(interrupts) as f:
            cpus = [int(c[3:]) for c in f.readline().split()]
            for line in f:
                fields = line.split()
                if not fields or not fields[0].rstrip(":").isdigit():
                    continue
                for cpu, n in zip(cpus, fields[1:1 + len(cpus)]):
                    if cpu in counts and n.isdigit():
                        counts[cpu] += int(n)
    except (OSError, ValueError):
        pass
    return min(allowed, key=lambda c: (counts[c], c))

# name, example config, goal (step-time ratio), description. "control" runs two children without
# tprobe against each other: how far from 1.00 the measurement itself strays on this machine.
# A goal is a ratio, or a ratio per model ("*": the others). Issue 16's goals for its table's rows.
CONFIGS = [
    ("control", None, None, "no tprobe on either side: the noise floor"),
    ("outside", "statistics_L1", 1.02, "tool loaded, steps not configured"),
    ("statistics_L1", "statistics_L1", {"resnet18": 1.25, "*": 1.3}, "statistics, L1 (operators)"),
    # The device path's statistics one tensor at a time (no arena): what the arena saves, on a GPU.
    ("statistics_L1_direct", "statistics_L1", {"resnet18": 1.25, "*": 1.3},
     "statistics, L1, device statistics reduced per tensor (TPROBE_DEVICE_STATS=direct)"),
    # The arena's copies deferred and enqueued together, one cat per dtype (capture/torch/device_stats.h).
    ("statistics_L1_deferred", "statistics_L1", {"resnet18": 1.25, "*": 1.3},
     "statistics, L1, arena copies deferred (TPROBE_DEVICE_STATS=deferred)"),
    # Raw copies into the arena and one NVRTC-compiled kernel a batch, no ATen call per tensor
    # (capture/torch/segment_engine.h; issue 67's goal: at most 5 µs a tensor on the training thread).
    ("statistics_L1_kernel", "statistics_L1", {"resnet18": 1.25, "*": 1.3},
     "statistics, L1, raw copies and one statistics kernel a batch (TPROBE_DEVICE_STATS=kernel)"),
    ("statistics_L0", "statistics_L0", 1.05, "statistics, L0 (modules)"),
    ("statistics_mix", "statistics_mix", 1.3, "statistics, mix"),
    # What the step barrier costs (step() waits until the writer wrote the step's files): the
    # same configs with async_dump, whose step() does not wait.
    ("statistics_L1_async", "statistics_L1", 1.3, "statistics, L1, async_dump (step() does not wait)"),
    ("statistics_mix_async", "statistics_mix", 1.3, "statistics, mix, async_dump (step() does not wait)"),
    ("md5", "md5", 1.3, "statistics, summary_mode md5, L1"),
    ("tensor", "tensor", 3.0, "tensor, L1 (.npy files), step() waits for the step's files"),
    ("tensor_async", "tensor", 3.0, "tensor, L1 (.npy files), async_dump (step() does not wait)"),
    # The same dump as torch.save files (config tprobe.tensor_format "pt"): what msprobe's format costs.
    ("tensor_pt", "tensor", 3.0, "tensor, L1 (.pt files, tprobe.tensor_format pt)"),
    # Task free_benchmark (issue 62): every call re-run in each mode (forward goal 4x, backward
    # 10x), and with the list narrowed to one API (the rest of the step as statistics L1 costs).
    ("fb_improve_precision", "free_benchmark", 4.0, "free_benchmark improve_precision, every call"),
    ("fb_add_noise", "free_benchmark", 4.0, "free_benchmark add_noise, every call"),
    ("fb_bit_noise", "free_benchmark", 4.0, "free_benchmark bit_noise, every call"),
    ("fb_change_value", "free_benchmark", 4.0, "free_benchmark change_value, every call"),
    ("fb_no_change", "free_benchmark", 4.0, "free_benchmark no_change, every call"),
    ("fb_to_cpu", "free_benchmark", 4.0, "free_benchmark to_cpu, every call"),
    ("fb_backward", "free_benchmark", 10.0, "free_benchmark bit_noise, fuzz_stage backward, every call"),
    ("fb_one_api", "free_benchmark", {"resnet18": 1.25, "*": 1.3},
     "free_benchmark bit_noise, list narrowed to Functional.linear.0"),
]
# Issue 16's table: (row, configuration). The default run measures these and "control".
TABLE = [("statistics L1", "statistics_L1"), ("statistics mix", "statistics_mix"), ("md5 L1", "md5"),
         ("tensor L1, step barrier", "tensor"), ("tensor L1, async", "tensor_async")]
DEFAULT_CONFIGS = ["control"] + [c for _, c in TABLE]


def goal_of(config, model_name):
    goal = {c[0]: c[2] for c in CONFIGS}[config]
    return goal.get(model_name, goal.get("*")) if isinstance(goal, dict) else goal
OUTSIDE_STEP = 1000000  # the largest step msprobe accepts; never reached


def example(model_name):
    return importlib.import_module(MODELS[model_name][0])


def model_args(model_name, module, extra=()):
    # --model-args reach the children through the environment (their argv is the parent's protocol).
    chosen = shlex.split(os.environ.get("TPROBE_BENCH_MODEL_ARGS", ""))
    return module.parse_args(["--quiet", "--threads", "1", *MODELS[model_name][1], *chosen, *extra])


def dir_usage(path):
    """Bytes and files under `path`, in one walk."""
    total = files = 0
    for top, _, names in os.walk(path):
        files += len(names)
        for f in names:
            try:
                total += os.path.getsize(os.path.join(top, f))
            except OSError:
                pass
    return total, files


def step_dump_bytes(dump):
    """Median bytes of the step{N} folders under `dump`, how many there are, and their median
    number of files."""
    if not os.path.isdir(dump):
        return 0, 0, 0
    steps = [dir_usage(os.path.join(dump, d)) for d in os.listdir(dump) if d.startswith("step")]
    if not steps:
        return 0, 0, 0
    return (int(statistics.median(b for b, _ in steps)), len(steps),
            int(statistics.median(f for _, f in steps)))


def file_create_rate(directory, count, size=16 << 10):
    """Files/s created with `size` bytes each and closed, as the writer writes a tensor's file (no
    fsync), in a new folder of `directory`, and that folder: what a dump of many small files costs
    beyond its bytes (the transformer's tensor step is ~1,300 files of ~26 KiB). The caller keeps
    the folder until the run ends: deleting files slows the next creations (empty_dump)."""
    folder = tempfile.mkdtemp(prefix="file-rate-", dir=directory)
    data = os.urandom(size)
    t0 = time.perf_counter()
    for i in range(count):
        fd = os.open(os.path.join(folder, f"{i}.npy"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    return count / (time.perf_counter() - t0), folder


def disk_write_bandwidth(directory, size):
    """Bytes/s writing `size` bytes (at least 16 MiB) in 4 MiB chunks, then fsync."""
    size = max(size, 16 << 20)
    os.sync()  # others' dirty pages are not this write's
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
    to step()), this process's CPU seconds (all its threads) and the training thread's own CPU
    seconds from the batch's hand-over to the end of the step. On a GPU train()'s figure is the
    time to enqueue the step, not to run it (the baseline never waits; tprobe's stop() does), so
    both sides synchronise the device at the end of each step and the wall time runs from the
    batch's hand-over to that point."""

    def __init__(self, device="cpu"):
        self.samples = []  # (wall, cpu, minor page faults, training thread's cpu) per step
        self.cpu0 = self.wall0 = self.thread0 = 0.0
        self.faults0 = 0
        self.cuda = device.startswith("cuda")

    def mark(self):  # called by a loader just before it yields a batch
        self.cpu0 = time.process_time()
        self.thread0 = time.thread_time()
        self.faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        self.wall0 = time.perf_counter()

    def on_step(self, i, seconds, loss):
        if self.cuda:
            import torch
            torch.cuda.synchronize()
            seconds = time.perf_counter() - self.wall0
        self.samples.append((seconds, time.process_time() - self.cpu0,
                             resource.getrusage(resource.RUSAGE_SELF).ru_minflt - self.faults0,
                             time.thread_time() - self.thread0))

    def take(self):
        samples, self.samples = self.samples, []
        return samples


# --- child: trains under PrecisionDebugger, one block at a time, as told on stdin ---------------

def child_main(model_name, config, dump):
    """Trains `model_name` one block at a time as told on stdin ("run N", "quit"), under
    PrecisionDebugger unless `config` is "-". Answers "BENCH ready WALL:CPU:FAULTS:THREAD ..." after
    each block and "BENCH counters JSON" (the capture's) and "BENCH done STAGES_CPU" at the end, where
    WALL and CPU are a step's seconds and FAULTS its minor page faults (all threads), THREAD the
    training thread's CPU seconds. The device is the parent's --device (TPROBE_BENCH_DEVICE)."""
    import torch
    module = example(model_name)
    tool = config != "-"
    args = model_args(model_name, module, ["--config", config, "--dump-path", dump] if tool else [])
    torch.set_num_threads(1)
    device = os.environ.get("TPROBE_BENCH_DEVICE", "cpu")
    model = module.build_model(args).to(device)
    pool = [tuple(t.to(device) for t in batch) for batch in module.batches(args, 8)]
    out = os.fdopen(os.dup(1), "w", buffering=1)
    if tool and os.environ.get("TPROBE_BENCH_TOOL") == "msprobe":
        # --against msprobe: its PrecisionDebugger, which logs to stdout, on the child's stderr.
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        from msprobe.pytorch import PrecisionDebugger
        debugger = PrecisionDebugger(config_path=config, dump_path=dump)
    else:
        debugger = module.make_debugger(args)
    clock = step_clock(device)

    module.train(args, model, debugger, child_batches(pool, clock, out), clock.on_step)
    # The pipeline's processes (launcher and stages) are this process's children: once the
    # debugger has ended them, their CPU time is in RUSAGE_CHILDREN.
    if hasattr(debugger, "close"):
        debugger.close()
    if hasattr(debugger, "counters"):
        out.write("BENCH counters " + json.dumps(debugger.counters()) + "\n")
    child_done(out)


def child_batches(pool, clock, out):
    """A child's batches, the example's train() loop's loader: one block of steps at a time as the
    parent says on stdin ("run N", "quit"), "BENCH ready WALL:CPU:FAULTS:THREAD ..." (clock.take()) on
    `out` before each block; the training thread bound to TPROBE_BENCH_PIN's CPU after the warm-up
    block. bench_monitor.py's children use it too."""
    pin = os.environ.get("TPROBE_BENCH_PIN")
    i = 0
    while True:
        out.write("BENCH ready " + " ".join(f"{w:.6f}:{c:.6f}:{f}:{t:.6f}" for w, c, f, t in clock.take()) + "\n")
        command = sys.stdin.readline().split()
        if not command or command[0] == "quit":
            return
        if pin and i > 0:
            # After the warm-up: the capture's threads and pipeline exist and keep every CPU;
            # only this thread, which trains, is bound (Linux binds the calling thread).
            os.sched_setaffinity(0, {int(pin)})
        for _ in range(int(command[1])):
            clock.mark()
            yield pool[i % len(pool)]
            i += 1


def child_done(out):
    """A child's last line, "BENCH done STAGES_CPU CPUS": the CPU seconds of its ended children (the
    pipeline's processes) and the CPUs its training thread may run on, for the parent's pin check."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    out.write(f"BENCH done {usage.ru_utime + usage.ru_stime:.6f} {cpus}\n")


def tree_cpu_seconds(root):
    """CPU seconds (user + system) used so far by process `root` and its descendants."""
    children, cpu = {}, {}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(pid))
        cpu[int(pid)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, []))
    return total


SETTLE_WINDOW = 0.1  # seconds


def settle(proc, timeout=300.0):
    """Waits until the tool child and its pipeline are idle (under 5 % of a core over a window):
    the stages may still be working on earlier steps, and on a small machine that work would
    land in the other side's block. Returns the seconds they were still busy (to a window)."""
    t0 = time.monotonic()
    last = tree_cpu_seconds(proc.pid)
    while time.monotonic() - t0 < timeout:
        time.sleep(SETTLE_WINDOW)
        now = tree_cpu_seconds(proc.pid)
        if now - last < 0.05 * SETTLE_WINDOW:
            return max(0.0, time.monotonic() - t0 - SETTLE_WINDOW)
        last = now
    return time.monotonic() - t0


def default_sigint():
    # A shell runs a background job with SIGINT ignored, and an ignored signal stays ignored
    # across exec; the direct mode ends its pipeline with SIGINT, so give the child the default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class child:
    def __init__(self, model_name, config, dump, log, extra_env=None):
        env = {**os.environ, **(extra_env or {})}
        env.pop("TPROBE_ENDPOINT", None)
        env.pop("TPROBE_CONFIG", None)
        env["OMP_NUM_THREADS"] = "1"
        env["TPROBE_BENCH_DEVICE"] = DEVICE
        env.pop("TPROBE_BENCH_PIN", None)
        if PIN_CPU is not None:
            env["TPROBE_BENCH_PIN"] = str(PIN_CPU)
        env.update(ALLOCATOR_ENV)
        python = env.pop("TPROBE_BENCH_PYTHON", None) or os.path.join(ROOT, "python")
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

    runs = 0

    def run(self, steps):
        self.runs += 1
        self.proc.stdin.write(f"run {steps}\n")
        return self.wait_ready()

    def quit(self):
        """Seconds from the quit command to the child's exit, the CPU seconds of its pipeline
        processes (None if not reported), and its exit status."""
        t0 = time.perf_counter()
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        stages_cpu = None
        self.counters = {}
        cpus = None
        for line in self.proc.stdout:
            if line.startswith("BENCH done"):
                fields = line.split()
                stages_cpu = float(fields[2])
                cpus = {int(c) for c in fields[3].split(",")} if len(fields) > 3 else None
            elif line.startswith("BENCH counters "):
                self.counters = json.loads(line.split(" ", 2)[2])
        status = self.proc.wait()
        # A child pins its training thread at its second block (the first is the warm-up): one
        # that trained past it and is not on PIN_CPU measured something else than the header says.
        if PIN_CPU is not None and self.runs > 1 and cpus is not None and cpus != {PIN_CPU}:
            raise RuntimeError(f"a child's training thread could run on CPUs {sorted(cpus)}, "
                               f"not on CPU {PIN_CPU} alone (--pin)")
        return time.perf_counter() - t0, stages_cpu, status


# --- parent: starts the children and has them take turns -----------------------------------

class measurement:
    def __init__(self, name):
        self.name = name
        self.base, self.tool = [], []  # (wall, cpu) seconds of every measured step
        self.rounds = []  # (baseline block, tool block) of each round
        # per round: (tool block + its pipeline work) / baseline block, wall; and its lower bound
        self.sustained = []
        self.tool_steps = 0  # tool steps run, warm-up included
        self.stages_cpu = None  # CPU seconds of the child's pipeline processes
        self.drain = None
        self.error = None
        self.step_bytes = 0
        self.steps_dumped = 0
        self.step_files = 0
        self.counters = {}  # the tool child's capture counters at its end
        # --against: (baseline block, tool block, the other build's tool block) of each round
        self.against_rounds = []
        self.against_error = None


def import_failure(check):
    """Why an import check (a finished `python -c`) failed: its last line on stderr; None if it did not."""
    if check.returncode == 0:
        return None
    lines = check.stderr.strip().splitlines()
    return lines[-1] if lines else f"status {check.returncode}"


def start_child(model_name, config, dump, log, m, extra_env=None):
    try:
        return child(model_name, config, dump, log, extra_env)
    except (RuntimeError, BrokenPipeError) as e:
        m.error = m.error or str(e)
        return None


def bench_config(model_name, name, example_config, opts, tmp, block):
    m = measurement(name)
    m.error = opts.tool_error if example_config else None
    dump = os.path.join(tmp, f"{model_name}-{name}")
    config = os.path.join(tmp, f"{model_name}-{name}.json")
    config_against = os.path.join(tmp, f"{model_name}-{name}-against.json")
    if example_config:
        with open(os.path.join(ROOT, "examples", "configs", example_config + ".json")) as f:
            doc = json.load(f)
        doc["dump_path"] = dump
        if name == "outside":
            doc["step"] = [OUTSIDE_STEP]
        if name.endswith("_async"):
            doc["async_dump"] = True
            if doc["task"] == "tensor":
                # msprobe wants a list with async_dump for task tensor; items match entry names
                # by substring, so these two name every entry: the same dump as "tensor".
                doc["tensor"]["list"] = ["forward", "backward"]
        if name.endswith("_pt"):
            doc.setdefault("tprobe", {})["tensor_format"] = "pt"
        if name.startswith("fb_"):
            section, mode = doc["free_benchmark"], name[len("fb_"):]
            if mode == "backward":  # msprobe wants a list for backward: "backward" is in every backward name
                section.update(pert_mode="bit_noise", fuzz_stage="backward", list=["backward"])
            elif mode == "one_api":
                section.update(pert_mode="bit_noise", list=["Functional.linear.0.forward"])
            elif mode == "to_cpu":
                section.update(pert_mode="to_cpu", fuzz_device="cpu")
            else:
                section["pert_mode"] = mode
        with open(config, "w") as f:
            json.dump(doc, f)
        if opts.against:
            doc["dump_path"] = dump + "-against"
            with open(config_against, "w") as f:
                json.dump(doc, f)
    else:
        config = "-"
    log_path = os.path.join(tmp, f"{model_name}-{name}.log")
    with open(log_path, "w") as log:
        base = start_child(model_name, "-", dump, log, measurement("baseline"))
        if base is None:
            raise SystemExit(f"bench_torch: the baseline child failed; see {log_path}")
        device_stats = next((mode for mode in ("direct", "deferred", "kernel") if name.endswith("_" + mode)), None)
        extra_env = {"TPROBE_DEVICE_STATS": device_stats} if device_stats else None
        tool = None if m.error else start_child(model_name, config, dump, log, m, extra_env)
        other = None
        if tool and opts.against and example_config:
            other_m = measurement("against")
            other_m.error = opts.against_error
            if not other_m.error:
                other = start_child(model_name, config_against, dump + "-against", log, other_m,
                                    {**(extra_env or {}), **opts.against_env})
            m.against_error = other_m.error
        base.run(opts.warmup)
        if tool:
            try:
                tool.run(opts.warmup)
                m.tool_steps += opts.warmup
            except (RuntimeError, BrokenPipeError) as e:
                m.error = str(e)
        if other:
            try:
                other.run(opts.warmup)
            except (RuntimeError, BrokenPipeError) as e:
                m.against_error = str(e)
        for r in range(opts.rounds):
            # base-tool, then tool-base: a drift in machine load hits both sides alike. With
            # --against the tool's block stays in the middle, so that it neighbours the baseline
            # as often as the other build's does.
            order = ["base", "tool", "against"] if other else ["base", "tool"]
            if r % 2:
                order.reverse()
            blocks, spans = {}, {}
            for side in order:
                if tool and not m.error:
                    settle(tool.proc)
                if other and not m.against_error:
                    settle(other.proc)
                t0 = time.monotonic()
                if side == "base":
                    blocks["base"] = base.run(block)
                    spans["base"] = time.monotonic() - t0
                elif side == "against":
                    if not m.against_error and not m.error:
                        try:
                            blocks["against"] = other.run(block)
                        except (RuntimeError, BrokenPipeError) as e:
                            m.against_error = str(e)
                elif tool and not m.error:
                    try:
                        blocks["tool"] = tool.run(block)
                    except (RuntimeError, BrokenPipeError) as e:
                        m.error = str(e)
                        continue
                    # Sustained: the block until its pipeline work is done as well.
                    spans["tool"] = time.monotonic() - t0 + settle(tool.proc)
            m.base.extend(blocks["base"])
            if "tool" in blocks:
                m.tool.extend(blocks["tool"])
                m.tool_steps += len(blocks["tool"])
                m.rounds.append((blocks["base"], blocks["tool"]))
                m.sustained.append((spans["tool"] / spans["base"],
                                    max(spans["tool"] - SETTLE_WINDOW, 0.0) / spans["base"]))
                if "against" in blocks:
                    m.against_rounds.append((blocks["base"], blocks["tool"], blocks["against"]))
        base.quit()
        if other:
            try:
                _, _, status = other.quit()
                if status != 0 and not m.against_error:
                    m.against_error = f"child exited with status {status}"
            except BrokenPipeError as e:
                m.against_error = m.against_error or str(e)
                other.proc.wait()
        if tool:
            try:
                m.drain, m.stages_cpu, status = tool.quit()
                m.counters = tool.counters
                if status != 0 and not m.error:
                    m.error = f"child exited with status {status}"
            except BrokenPipeError as e:
                m.error = m.error or str(e)
                tool.proc.wait()
    if m.error and m.error != opts.tool_error:
        with open(log_path) as log:
            tail = [line.rstrip() for line in log if line.strip()][-2:]
        if tail:
            m.error += ": " + " | ".join(tail)
    m.step_bytes, m.steps_dumped, m.step_files = step_dump_bytes(dump)
    if not opts.keep:
        for folder in (dump, dump + "-against") if opts.against else (dump,):
            empty_dump(folder)
            opts.emptied.append(folder)
    return m


def empty_dump(dump):
    """Frees a dump's disk space but keeps its files (truncated to 0 bytes) until the run ends.
    Deleting them would slow every later tensor row: on ext4 without a journal (this machine's
    file system), creating a file skips every inode deleted in the last 1-6 minutes
    (ext4's recently_deleted), one buffer lookup each: a transformer tensor run took 155 ms a
    step, and 1120 ms a step right after its dump's 36810 files were deleted."""
    for folder, _, files in os.walk(dump):
        for name in files:
            try:
                os.truncate(os.path.join(folder, name), 0)
            except OSError:
                pass


def bench_model(model_name, opts, tmp):
    steps = opts.steps or DEFAULT_STEPS[model_name]
    block = max(1, -(-steps // opts.rounds))  # steps per block, rounded up
    results = [bench_config(model_name, name, example_config, opts, tmp, block)
               for name, example_config, _, _ in CONFIGS if name in opts.configs]
    return results, block


def fmt_bytes(n):
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB" if n else "0"


def fmt_count(n):
    return f"{n / 1000:.1f}k" if n >= 1000 else f"{n:.0f}"


def median_of(samples, k):
    return statistics.median(x[k] for x in samples)


def report(model_name, results, block, opts):
    """Prints the model's lines; fills each measurement's ratio, sustained, allowed and verdict."""
    whats = {c[0]: c[3] for c in CONFIGS}
    print(f"\n{model_name}: {opts.rounds} rounds of {block} baseline + {block} tool steps per "
          f"configuration after {opts.warmup} warm-up steps")
    print("  ratio: median over rounds of (median tool step / median baseline step of the round), wall time;"
          " range: lowest and highest round;\n  sust.: the same with each tool block lasting until its"
          " pipeline has finished its work, to +-0.1 s per block (what a long run sees when the pipeline is the slower);"
          "\n  cpu: the ratio for the training process's CPU time"
          " (less sensitive to other load); stages: CPU of the pipeline processes per tool step;"
          "\n  drain: from the last step to the end of the process (the pipeline finishing its files);"
          " faults: minor page faults a step, baseline/tool (medians; see --allocator)")
    print(f"  {'configuration':<15} {'base ms':>8} {'tool ms':>8} {'ratio':>7} {'range':>11} {'sust.':>6} {'cpu':>6} "
          f"{'goal':>6}  {'result':<14} {'dump/step':>10} {'stages':>9} {'drain':>6} {'faults':>11}  what")
    for m in results:
        goal, what = goal_of(m.name, model_name), whats[m.name]
        m.ratio = None
        if m.error or not m.rounds:
            base = f"{median_of(m.base, 0) * 1e3:8.1f}" if m.base else f"{'-':>8}"
            print(f"  {m.name:<15} {base} {'-':>8} {'-':>7} {'-':>11} {'-':>6} {'-':>6} {goal or 0:>5.2f}x  {'FAILED':<14} "
                  f"{'-':>10} {'-':>9} {'-':>6} {'-':>11}  {what}: {m.error}")
            continue
        drain = f"{m.drain:5.1f}s" if m.name != "control" else f"{'-':>6}"
        b, t = median_of(m.base, 0), median_of(m.tool, 0)
        ratios = [median_of(tool, 0) / median_of(base, 0) for base, tool in m.rounds]
        ratio = statistics.median(ratios)
        cpu = statistics.median(median_of(tool, 1) / median_of(base, 1) for base, tool in m.rounds)
        sustained = statistics.median(x[0] for x in m.sustained)
        sustained_low = statistics.median(x[1] for x in m.sustained)
        allowed = goal
        bound = ""
        if m.name.startswith("tensor") and opts.disk_bw and m.step_bytes:
            disk_s = m.step_bytes / opts.disk_bw
            allowed = max(goal, 1 + disk_s / b)
            bound = (f"; disk {opts.disk_bw / 1e6:.0f} MB/s (write + fsync): one step's {fmt_bytes(m.step_bytes)} "
                     f"takes {disk_s * 1e3:.0f} ms = {disk_s / b:.2f}x a baseline step, "
                     f"so the disk allows {1 + disk_s / b:.2f}x")
            if m.step_files and opts.file_rate:
                # Not in the verdict (the goal counts bytes): what the step's files cost beyond them.
                files_s = m.step_files / opts.file_rate
                bound += (f"; its {m.step_files} files at {opts.file_rate:.0f} files/s (create, write 16 KiB, "
                          f"close) take {files_s * 1e3:.0f} ms: {1 + (disk_s + files_s) / b:.2f}x with their creation")
        if goal is None:
            verdict = "(noise)"
        elif ratio > allowed:
            verdict = "NOT MET"
        elif sustained_low > allowed:
            verdict = "NOT MET(sust.)"  # steps fast, but the pipeline falls behind
        else:
            verdict = "MET" if ratio <= goal and sustained_low <= goal else "MET(disk)"
        m.ratio, m.sust, m.sust_low, m.base_step = ratio, sustained, sustained_low, b
        m.spread = (min(ratios), max(ratios))
        spread = f"{m.spread[0]:.2f}-{m.spread[1]:.2f}"
        stages = (f"{m.stages_cpu / m.tool_steps * 1e3:6.0f} ms" if m.stages_cpu and m.tool_steps
                  else f"{'-':>9}")
        goal_text = f"{goal:5.2f}x" if goal else f"{'-':>6}"
        faults = f"{fmt_count(median_of(m.base, 2))}/{fmt_count(median_of(m.tool, 2))}"
        print(f"  {m.name:<15} {b * 1e3:8.1f} {t * 1e3:8.1f} {ratio:6.3f}x {spread:>11} {sustained:5.2f}x {cpu:5.2f}x {goal_text}  "
              f"{verdict:<14} {fmt_bytes(m.step_bytes):>10} {stages} {drain} {faults:>11}  {what}{bound}")
        if m.against_error:
            print(f"  {'':<15} against {opts.against}: FAILED: {m.against_error}")
        elif m.against_rounds:
            # Per round, each build's block against the same baseline block, and against each other.
            theirs = [median_of(other, 0) / median_of(base, 0) for base, _, other in m.against_rounds]
            quotients = [median_of(tool, 0) / median_of(other, 0) for _, tool, other in m.against_rounds]
            print(f"  {'':<15} against {opts.against}: {statistics.median(theirs):.3f}x "
                  f"({min(theirs):.2f}-{max(theirs):.2f}); this build / that one, per round: "
                  f"{statistics.median(quotients):.3f} ({min(quotients):.3f}-{max(quotients):.3f}, "
                  f"{sum(q < 1 for q in quotients)} of {len(quotients)} rounds faster)")
        c = m.counters
        if c.get("device_tensors") and m.tool_steps:
            # The device path's own account (capture/torch/device_stats.h), per tool step.
            per = {k: c.get(k, 0) / m.tool_steps
                   for k in ("device_tensors", "device_segments", "device_reused", "device_reads", "device_waits", "device_bytes",
                             "device_capture_ns", "device_collect_ns", "device_deferred", "device_flushes",
                             "device_flush_ns", "device_unread", "device_raw_copies", "device_kernels", "device_copy_ns")}
            print(f"  {'':<15} device path per step: {per['device_tensors']:.0f} tensors "
                  f"({per['device_segments']:.0f} reduced in arenas, {per['device_reused']:.0f} reused), "
                  f"{per['device_reads']:.2f} host reads, "
                  f"{per['device_waits']:.2f} of them waited on their event, {fmt_bytes(per['device_bytes'])} device to host")
            print(f"  {'':<15} training thread in the device path per step: enqueueing "
                  f"{per['device_capture_ns'] / 1e6:.2f} ms ({per['device_capture_ns'] / 1e3 / max(per['device_tensors'], 1):.1f} µs "
                  f"a tensor), closing and reading batches {per['device_collect_ns'] / 1e6:.2f} ms")
            if per["device_kernels"]:
                # The training thread's time a tensor outside the copies: the bookkeeping issue 67
                # bounds (with the copy's own launch, at most 5 µs a tensor on a GPU).
                print(f"  {'':<15} statistics kernel per step: {per['device_raw_copies']:.0f} raw copies, "
                      f"{per['device_kernels']:.2f} launches; enqueueing a tensor "
                      f"{(per['device_capture_ns'] - per['device_copy_ns']) / 1e3 / max(per['device_tensors'], 1):.1f} µs "
                      f"besides {per['device_copy_ns'] / 1e3 / max(per['device_segments'], 1):.1f} µs "
                      f"an arena copy")
            if per["device_deferred"]:
                print(f"  {'':<15} deferred copies per step: {per['device_deferred']:.0f} tensors in "
                      f"{per['device_flushes']:.1f} flushes, {per['device_flush_ns'] / 1e6:.2f} ms flushing (any thread), "
                      f"{per['device_unread']:.0f} unread")
        if c.get("stats_bytes_read") and m.tool_steps:
            # What the capture read in place (not reused, not zeros): the least any capture of
            # these tensors reads; the table's read-pass lines turn it into a step-time floor.
            print(f"  {'':<15} read in place: {fmt_bytes(c['stats_bytes_read'] / m.tool_steps)} a step "
                  f"({c.get('stats_reused', 0) / m.tool_steps:.0f} tensors a step reused, "
                  f"{c.get('stats_zeroed', 0) / m.tool_steps:.0f} zeros not read)")
        if c.get("stats_parts_helped") and m.tool_steps:
            # Parts of large tensors read by the capture's helper thread (capture/part_runner.h).
            print(f"  {'':<15} capture helper thread: {c['stats_parts_helped'] / m.tool_steps:.0f} parts of 1 MiB a step "
                  f"(TPROBE_CAPTURE_THREADS={os.environ.get('TPROBE_CAPTURE_THREADS', 'default')})")


def read_pass_bandwidth(size, repeats=3):
    """Bytes/s of one-thread float32 sums over `size` bytes, best of `repeats` (after one to fault
    the pages in): how fast one pass over data in memory can go, as a reduction reads it."""
    import numpy
    a = numpy.ones(size // 4, dtype=numpy.float32)
    numpy.add.reduce(a)
    best = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        numpy.add.reduce(a)
        seconds = time.perf_counter() - t0
        best = seconds if best is None else min(best, seconds)
    return a.nbytes / best


def capture_read_bandwidth(mib):
    """(one thread, with the helper) bytes/s of the capture's own statistics kernel over `mib` MiB
    of float32 in memory, from tprobe-bench-crc (core/part_runner.h: the caller and the capture's
    helper thread read a large tensor's parts), or None where that binary is not built."""
    exe = os.path.join(os.environ.get("TPROBE_BIN_DIR") or os.path.join(ROOT, "build", "bin"), "tprobe-bench-crc")
    if not os.path.isfile(exe):
        return None
    out = subprocess.run([exe, "--mib", str(mib), "--reps", "3"], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    alone = re.search(r"^statistics: +([\d.]+) GB/s", out, re.M)
    helped = re.search(r"^statistics, caller \+ 1 helper thread[^:]*: +([\d.]+) GB/s", out, re.M)
    if not alone or not helped:
        raise RuntimeError(f"{exe}: no statistics lines in its output:\n{out}")
    return float(alone.group(1)) * 1e9, float(helped.group(1)) * 1e9


def table(models, results_by_model, opts):
    """Issue 16's table: one row per TABLE entry, one column per model: ratio, goal (or the disk's
    bound), PASS/OVER; then the limits."""
    width = 34
    print("\ntprobe / no-tool step time (median over alternating rounds; goal; PASS when within it)")
    print(f"  {'':<24}" + "  ".join(f"{name:<{width}}" for name in models))
    for label, config in TABLE:
        cells = []
        for name in models:
            m = next((r for r in results_by_model[name] if r.name == config), None)
            if m is None:
                cells.append("(not run)")
            elif m.ratio is None:
                cells.append("FAILED")
            else:
                goal = goal_of(config, name)
                allowed = goal
                if config.startswith("tensor") and m.step_bytes:
                    allowed = max(goal, 1 + m.step_bytes / opts.disk_bw / m.base_step)
                bound = f"<={allowed:.2f}x" + (" disk" if allowed > goal else "")
                sust = f" sust {m.sust:.2f}x" if config.endswith("_async") else ""
                # As the model's lines judge it: the steps, and the pipeline keeping up with them.
                verdict = "PASS" if m.ratio <= allowed and m.sust_low <= allowed else "OVER"
                cells.append(f"{m.ratio:.2f}x {bound}{sust} {verdict}")
        print(f"  {label:<24}" + "  ".join(f"{c:<{width}}" for c in cells))
    # A row's verdict is as good as the run was quiet: the control's distance from 1 is how far
    # the machine alone moved a ratio in this run (a VM's slow spell, another process).
    floors = []
    for name in models:
        control = next((r for r in results_by_model[name] if r.name == "control" and getattr(r, "ratio", None)), None)
        if control is not None:
            floors.append(f"{name} {control.ratio:.3f}x ({control.spread[0]:.2f}-{control.spread[1]:.2f})")
    if floors:
        print(f"  noise floor: the control row (no tprobe on either side) of each model: {', '.join(floors)}; "
              "a row nearer its goal than its model's control is from 1.00x could fall either side of it")
    disk = " / ".join(f"{bw / 1e6:.0f}" for bw in opts.disk_bws)
    print(f"  disk: write + fsync of {opts.disk_mib} MiB in the dump directory's file system: {disk} MB/s "
          f"(start / end of the run); a tensor row is allowed 1 + (its step's files at "
          f"{opts.disk_bw / 1e6:.0f} MB/s) / baseline step when that exceeds its goal")
    rates = " / ".join(f"{r:.0f}" for r in opts.file_rates)
    print(f"  file creation: {opts.files_probe} files of 16 KiB created, written and closed: {rates} files/s "
          f"(start / end of the run); not in the allowance, which counts bytes: a step of many small "
          f"files (the transformer's tensor dump) costs their creation as well, shown on its model's line")
    print(f"  read pass: one-thread sum over {opts.read_mib} MiB of float32: {opts.read_bw / 1e9:.2f} GB/s; "
          "a capture that reads each of a step's tensors once costs at least:")
    if opts.kernel_bws:
        print(f"  the capture's statistics kernel (tprobe-bench-crc, {opts.read_mib} MiB): "
              f"{opts.kernel_bws[0] / 1e9:.2f} GB/s on one thread, {opts.kernel_bws[1] / 1e9:.2f} GB/s with its "
              "helper thread; a statistics row's floors at those speeds follow its one-reader floor")
    else:
        print("  the capture's statistics kernel: tprobe-bench-crc is not built, its floors are left out")
    for name in models:
        tensor = next((r for r in results_by_model[name] if r.name == "tensor" and r.step_bytes), None)
        base = [r.base_step for r in results_by_model[name] if getattr(r, "ratio", None)]
        # The statistics rows' own reads (the capture's stats_bytes_read): first-time contents only,
        # what is left to read once every reuse has been made; one reader's floor for that row.
        read_rows = [r for r in results_by_model[name]
                     if getattr(r, "ratio", None) and r.tool_steps and r.counters.get("stats_bytes_read")]
        if (tensor is None and not read_rows) or not base:
            print(f"    {name}: (needs the tensor row or a statistics row)")
            continue
        b = statistics.median(base)
        if tensor is not None:
            seconds = tensor.step_bytes / opts.read_bw
            print(f"    {name}: operator data {fmt_bytes(tensor.step_bytes)} per step (its tensor dump) read in "
                  f"{seconds * 1e3:.1f} ms = {1 + seconds / b:.3f}x a {b * 1e3:.1f} ms baseline step")
        for r in read_rows:
            per_step = r.counters["stats_bytes_read"] / r.tool_steps
            seconds = per_step / opts.read_bw
            print(f"    {name} {r.name}: {fmt_bytes(per_step)} a step read in place (first-time contents) in "
                  f"{seconds * 1e3:.1f} ms = {1 + seconds / r.base_step:.3f}x its {r.base_step * 1e3:.1f} ms baseline "
                  f"step with one reader (measured {r.ratio:.2f}x)"
                  + (f"; at the capture's kernel {1 + per_step / opts.kernel_bws[0] / r.base_step:.3f}x alone, "
                     f"{1 + per_step / opts.kernel_bws[1] / r.base_step:.3f}x with its helper" if opts.kernel_bws else ""))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=list(MODELS) + ["all"],
                   help="a model, or all (resnet18, transformer, gru; the default; tiny with --quick; mlp, a deep MLP, "
                        "and gpt2, a GPT-2-small decoder with bf16 autocast, only by name)")
    p.add_argument("--steps", type=int, help="measured steps per configuration and side (default "
                   + ", ".join(f"{DEFAULT_STEPS[m]} {m}" for m in MODELS) + "; 4 with --quick)")
    p.add_argument("--rounds", type=int, help=f"baseline/tool alternations per configuration ({DEFAULT_ROUNDS}; 2 with --quick)")
    p.add_argument("--warmup", type=int, help="warm-up steps on each side (3; 1 with --quick)")
    p.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                   help="comma-separated subset of " + ", ".join(c[0] for c in CONFIGS)
                   + " (default: " + ",".join(DEFAULT_CONFIGS) + ")")
    p.add_argument("--disk-mib", type=int, help=f"MiB written with fsync for the disk's speed ({DISK_MIB}; 32 with --quick)")
    p.add_argument("--read-mib", type=int, help=f"MiB summed for the read-pass limit ({READ_MIB}; 64 with --quick)")
    p.add_argument("--quick", action="store_true", help="a smoke run of about a minute (see above)")
    p.add_argument("--device", default="cpu", help="where the children train: cpu (default) or cuda[:N]; "
                   "on a GPU each step ends with a device synchronisation on both sides")
    p.add_argument("--allocator", choices=["pinned", "default"], default="pinned",
                   help="pinned (default): both children run glibc's malloc with fixed mmap and trim "
                        "thresholds, so that a step's page faults do not hang on each process's "
                        "allocation history; default: glibc as it comes (see the faults column)")
    p.add_argument("--pin", default="auto",
                   help="auto (default): after the warm-up both children train on one CPU, the one "
                        "with the fewest device interrupts (their capture threads and stages keep "
                        "every CPU); none: the scheduler places them; N: CPU N")
    p.add_argument("--model-args", default="",
                   help="more arguments for the example model, e.g. \"--batch 64 --size 64\" (a larger "
                        "step than the defaults; the example's --help lists them)")
    p.add_argument("--tmp", help="directory for the dumps (default: a new one under $TMPDIR)")
    p.add_argument("--keep", action="store_true", help="keep the dumps and the children's logs")
    p.add_argument("--against", metavar="DIR",
                   help="a second build to measure in the same rounds: DIR/lib/libtprobe_torch.so and "
                        "DIR/bin (e.g. a copy of build/ from before a change), or msprobe: msprobe's "
                        "PrecisionDebugger; see above")
    p.add_argument("--child", nargs=3, metavar=("MODEL", "CONFIG", "DUMP"), help=argparse.SUPPRESS)
    opts = p.parse_args()
    if opts.child:
        return child_main(*opts.child)
    quick = opts.quick
    global DEVICE
    DEVICE = opts.device
    if opts.allocator == "default":
        ALLOCATOR_ENV.clear()
    global PIN_CPU
    allowed = sorted(os.sched_getaffinity(0))
    if opts.pin == "auto":
        PIN_CPU = quietest_cpu(allowed) if len(allowed) > 1 else None
    elif opts.pin != "none":
        if not opts.pin.isdigit() or int(opts.pin) not in allowed:
            p.error(f"--pin {opts.pin!r}: not auto, none or one of the CPUs this process may use ({allowed})")
        PIN_CPU = int(opts.pin)
    opts.model = opts.model or ("tiny" if quick else "all")
    opts.rounds = opts.rounds or (2 if quick else DEFAULT_ROUNDS)
    opts.warmup = opts.warmup if opts.warmup is not None else (1 if quick else 3)
    if quick and not opts.steps:
        opts.steps = 2 * opts.rounds
    opts.disk_mib = opts.disk_mib or (32 if quick else DISK_MIB)
    opts.read_mib = opts.read_mib or (64 if quick else READ_MIB)
    opts.configs = [c.strip() for c in opts.configs.split(",") if c.strip()]
    os.environ["TPROBE_BENCH_MODEL_ARGS"] = opts.model_args
    unknown = set(opts.configs) - {c[0] for c in CONFIGS}
    if unknown:
        p.error(f"unknown configurations: {', '.join(sorted(unknown))}")
    opts.against_env = {}
    opts.against_error = None
    if opts.against == "msprobe":
        opts.against_env = {"TPROBE_BENCH_TOOL": "msprobe"}
        why = import_failure(subprocess.run([sys.executable, "-c", "from msprobe.pytorch import PrecisionDebugger"],
                                            capture_output=True, text=True))
        if why:
            opts.against_error = f"msprobe not importable ({why}): run from its source, `. /tmp/msprobe-src/env.sh`"
    elif opts.against:
        opts.against = os.path.abspath(opts.against)
        library = os.path.join(opts.against, "lib", "libtprobe_torch.so")
        launcher = os.path.join(opts.against, "bin", "tprobe")
        for needed in (library, launcher):
            if not os.path.isfile(needed):
                p.error(f"--against {opts.against}: {needed} does not exist (a build directory's lib/ and bin/)")
        opts.against_env = {"TPROBE_TORCH_LIBRARY": library, "TPROBE_BIN_DIR": os.path.dirname(launcher)}
        # A Python package of its own (DIR/python/tprobe: a change to the hooks) goes first on its path.
        if os.path.isfile(os.path.join(opts.against, "python", "tprobe", "__init__.py")):
            opts.against_env["TPROBE_BENCH_PYTHON"] = os.path.join(opts.against, "python")

    # The tool is imported only in the children; check once that it can be.
    check = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, flush=True); "
                            "import tprobe; tprobe.PrecisionDebugger"],
                           capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "python") + os.pathsep
                                + os.environ.get("PYTHONPATH", "")})
    why = import_failure(check)
    opts.tool_error = f"tprobe not importable ({why})" if why else None

    tmp = opts.tmp or tempfile.mkdtemp(prefix="tprobe-bench-torch-")
    os.makedirs(tmp, exist_ok=True)
    torch_version = check.stdout.strip() or "?"
    print(f"tprobe PyTorch capture benchmark: torch {torch_version}, {os.cpu_count()} CPUs, "
          f"torch threads 1, device {DEVICE}, dumps in {tmp}"
          + (", allocator pinned (" + " ".join(f"{k}={v}" for k, v in ALLOCATOR_ENV.items()) + " in both children)"
             if ALLOCATOR_ENV else ", allocator glibc's default")
          + (f", training threads on CPU {PIN_CPU} after the warm-up" if PIN_CPU is not None
             else ", training threads placed by the scheduler")
          + (f", model arguments {opts.model_args!r}" if opts.model_args else "")
          + (", against msprobe's PrecisionDebugger" if opts.against == "msprobe"
             else f", against the build in {opts.against}" if opts.against else "")
          + (" with its own Python package" if "TPROBE_BENCH_PYTHON" in opts.against_env else ""))
    if opts.tool_error:
        print(f"warning: {opts.tool_error}; only the baseline is measured")
    models = ALL_MODELS if opts.model == "all" else [opts.model]
    if opts.model_args:
        # Checked here, once, rather than as a failed child per configuration.
        for name in models:
            try:
                model_args(name, example(name))
            except SystemExit:
                p.error(f"--model-args {opts.model_args!r}: not arguments of {MODELS[name][0]}.py (above)")
    t0 = time.perf_counter()
    print("load average (1, 5, 15 min) at start: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    opts.emptied = []  # dumps truncated after their configuration, deleted at the end (empty_dump)
    opts.disk_bws = [disk_write_bandwidth(tmp, opts.disk_mib << 20)]
    opts.disk_bw = opts.disk_bws[0]
    opts.files_probe = 200 if quick else 1000
    rate, folder = file_create_rate(tmp, opts.files_probe)
    opts.file_rates, opts.file_rate = [rate], rate
    opts.emptied.append(folder)
    opts.read_bw = read_pass_bandwidth(opts.read_mib << 20)
    opts.kernel_bws = capture_read_bandwidth(opts.read_mib)
    results_by_model = {}
    for name in models:
        results, block = bench_model(name, opts, tmp)
        report(name, results, block, opts)
        results_by_model[name] = results
    # The disk as the run left it; the faster of the two measurements is what the disk can do.
    opts.disk_bws.append(disk_write_bandwidth(tmp, opts.disk_mib << 20))
    opts.disk_bw = max(opts.disk_bws)
    rate, folder = file_create_rate(tmp, opts.files_probe)
    opts.file_rates.append(rate)
    opts.emptied.append(folder)
    table(models, results_by_model, opts)
    print(f"\ntotal wall time {time.perf_counter() - t0:.0f} s; load average at the end: "
          + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    if not opts.keep:
        for dump in opts.emptied:
            shutil.rmtree(dump, ignore_errors=True)
        if not opts.tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
