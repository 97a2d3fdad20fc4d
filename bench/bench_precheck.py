#!/usr/bin/env python3
"""Speed of `tprobe precheck` on a resnet18 tensor dump, against the CPU time of the same ops run
once in float64 (issue 61 item 7):

    PYTHONPATH=python /usr/bin/python3 bench/bench_precheck.py [--batch 8] [--size 32] [--width 64]
                                                               [--repeats 3] [--jobs N] [--quick]

1. Dump: a child process trains one step of a resnet18 (built here layer by layer as torchvision's
   resnet18 is: conv 7x7/2, max-pool, four stages of two BasicBlocks, average pool, fc; --width is
   the first stage's channels, 64 as torchvision's) with SGD (momentum 0.9) and cross-entropy,
   under tprobe's PrecisionDebugger, task tensor, level L1: every operator's inputs and outputs as
   .npy files, the optimizer's operators included.
2. Pre-check: `tprobe precheck DUMP -o OUT -j N` (from $TPROBE_BIN_DIR, else build/bin), with N =
   the CPUs this process may use (--jobs) and N = 1, each --repeats times; the best wall time of
   each, and its CPU time (the child's user + system, all its threads).
3. Baseline, in this process: the same model (same seed: same weights) in float64 on the same batch,
   one training step (forward, loss, backward, optimizer step, zero_grad: the operators the dump
   holds, once, one precision higher as the pre-check replays them), with torch's default threads;
   the best of --repeats after one warm-up, compute only.

It prints APIs/s (the APIs the pre-check judged, from its summary line, over its wall time), MB/s
(the bytes of the dump's tensor files over its wall time) and the ratio pre-check / baseline next to
the goal (1.5x with -j over all cores). It reports; it never asserts. --quick (width 8, batch 2,
size 16, one repeat) is a smoke run of a few seconds. Figures: docs/performance.md, "Pre-check".
"""
import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOAL = 1.5  # pre-check wall time / float64 step, -j over all cores


# ---- resnet18, as torchvision.models.resnet18 builds it ------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes=10, width=64):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        planes = [width, width * 2, width * 4, width * 8]
        inplanes = width
        for i, p in enumerate(planes):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(inplanes, p, stride), BasicBlock(p, p)))
            inplanes = p
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inplanes, num_classes)
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def make(args):
    """The model, one batch and the optimizer, the same for the same arguments."""
    torch.manual_seed(args.seed)
    model = ResNet18(width=args.width)
    g = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(args.batch, 3, args.size, args.size, generator=g)
    y = (x.mean(dim=(1, 2, 3)) * 40).floor().long().remainder(10)
    return model, x, y


def train_step(model, opt, x, y):
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()


def optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


# ---- the dump (child process) --------------------------------------------------------------------

def child_dump(args):
    from tprobe import PrecisionDebugger
    torch.set_num_threads(1)
    model, x, y = make(args)
    opt = optimizer(model)
    model.train()
    debugger = PrecisionDebugger(config_path=args.child_dump)
    debugger.start(model)
    train_step(model, opt, x, y)
    debugger.stop()
    debugger.step()


def dump_step(args, tmp):
    config = {"task": "tensor", "dump_path": os.path.join(tmp, "dump"), "rank": [], "step": [], "level": "L1",
              "async_dump": False, "tensor": {"scope": [], "list": [], "data_mode": ["all"], "file_format": "npy"}}
    path = os.path.join(tmp, "config.json")
    with open(path, "w") as f:
        json.dump(config, f)
    env = dict(os.environ)
    env.pop("TPROBE_ENDPOINT", None)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    argv = [sys.executable, os.path.abspath(__file__), "--child-dump", path, "--batch", str(args.batch),
            "--size", str(args.size), "--width", str(args.width), "--seed", str(args.seed)]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1200)
    if result.returncode != 0:
        sys.exit(f"bench_precheck: the dump's training exited with {result.returncode}:\n{result.stdout}{result.stderr}")
    rank = os.path.join(tmp, "dump", "step0", "rank")
    if not os.path.isfile(os.path.join(rank, "dump.json")):
        sys.exit(f"bench_precheck: no dump.json in {rank}")
    return rank


def tensor_bytes(rank):
    folder = os.path.join(rank, "dump_tensor_data")
    names = os.listdir(folder)
    return sum(os.path.getsize(os.path.join(folder, n)) for n in names), len(names)


# ---- the pre-check -------------------------------------------------------------------------------

SUMMARY = re.compile(r"tprobe-precheck: (\d+) APIs: (\d+) pass, (\d+) warning, (\d+) error, (\d+) SKIP")


def run_precheck(tprobe, rank, out, jobs):
    """(wall s, CPU s, summary match) of one `tprobe precheck` run into a fresh `out`."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    result = subprocess.run([tprobe, "precheck", rank, "-o", out, "-j", str(jobs)], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = SUMMARY.search(result.stdout)
    if result.returncode not in (0, 1) or not summary:
        sys.exit(f"bench_precheck: tprobe precheck -j {jobs} exited with {result.returncode}:\n{result.stdout}{result.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, summary


# ---- the baseline --------------------------------------------------------------------------------

def baseline(args):
    """Best seconds of one float64 training step of the same model on the same batch."""
    model, x, y = make(args)
    model = model.double().train()
    x = x.double()
    opt = optimizer(model)
    train_step(model, opt, x, y)  # warm-up: the optimizer's buffers, the allocator's pools
    best = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        train_step(model, opt, x, y)
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, help="images in the batch (default 8; 2 with --quick)")
    p.add_argument("--size", type=int, help="image height and width (default 32; 16 with --quick)")
    p.add_argument("--width", type=int, help="channels of the first stage (default 64, torchvision's; 8 with --quick)")
    p.add_argument("--seed", type=int, default=1234, help="weights and data seed (default 1234)")
    p.add_argument("--repeats", type=int, help="runs of each measurement, the best kept (default 3; 1 with --quick)")
    p.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)),
                   help="-j of the parallel run (default: the CPUs this process may use)")
    p.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    p.add_argument("--tmp", help="directory for the dump and the CSVs (default: a new one under $TMPDIR)")
    p.add_argument("--keep", action="store_true", help="keep the dump and the CSVs")
    p.add_argument("--child-dump", help=argparse.SUPPRESS)  # internal: be the dumping child, with this config
    args = p.parse_args()
    quick = {"batch": (8, 2), "size": (32, 16), "width": (64, 8), "repeats": (3, 1)}
    for key, (normal, smoke) in quick.items():
        if getattr(args, key) is None:
            setattr(args, key, smoke if args.quick else normal)
    if args.child_dump:
        return child_dump(args)

    tprobe = os.path.join(os.environ.get("TPROBE_BIN_DIR") or os.path.join(ROOT, "build", "bin"), "tprobe")
    if not os.access(tprobe, os.X_OK):
        sys.exit(f"bench_precheck: {tprobe} not found (build the tprobe and tprobe-precheck targets, or set TPROBE_BIN_DIR)")
    tmp = tempfile.mkdtemp(prefix="bench-precheck-", dir=args.tmp)
    try:
        print(f"tprobe precheck benchmark: resnet18 (width {args.width}) batch {args.batch}x3x{args.size}x{args.size}, "
              f"one SGD step dumped (task tensor, L1); {os.cpu_count()} CPUs, {len(os.sched_getaffinity(0))} usable, "
              f"torch {torch.__version__} with {torch.get_num_threads()} threads; tmp {tmp}", flush=True)
        t0 = time.perf_counter()
        rank = dump_step(args, tmp)
        size, files = tensor_bytes(rank)
        print(f"dump: {files} tensor files, {size / 1e6:.1f} MB, in {time.perf_counter() - t0:.1f} s", flush=True)

        base = baseline(args)
        print(f"baseline: one float64 training step (forward, backward, SGD step) in this process: "
              f"{base * 1e3:.1f} ms (best of {args.repeats})", flush=True)

        for jobs in dict.fromkeys([args.jobs, 1]):
            runs = [run_precheck(tprobe, rank, os.path.join(tmp, f"out-j{jobs}"), jobs) for _ in range(args.repeats)]
            wall, cpu, summary = min(runs, key=lambda r: r[0])
            apis = int(summary.group(1))
            ratio = wall / base
            goal = f"(goal <={GOAL:.1f}x) {'MET' if ratio <= GOAL else 'OVER'}" if jobs == args.jobs else ""
            print(f"precheck -j {jobs}: {wall:.2f} s wall, {cpu:.2f} s CPU (best of {args.repeats}); "
                  f"{apis} APIs ({summary.group(2)} pass, {summary.group(3)} warning, {summary.group(4)} error, "
                  f"{summary.group(5)} SKIP): {apis / wall:.1f} APIs/s, {size / 1e6 / wall:.1f} MB/s; "
                  f"{ratio:.2f}x the float64 step {goal}".rstrip(), flush=True)
    finally:
        if args.keep:
            print(f"kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
