#!/usr/bin/env python3
"""A small recurrent training loop for bench/bench_torch.py: a GRU sequence classifier (nn.GRU, a
linear head on every time step, Adam, cross-entropy) on deterministic synthetic sequences, under
tprobe when --config is given. It has the interface of examples/train_*.py (parse_args,
build_model, batches, make_debugger, train), so the bench drives it the same way:

    PYTHONPATH=python /usr/bin/python3 bench/train_gru.py --steps 3 --config examples/configs/statistics_L1.json

A recurrent model is the third shape of L1 capture the bench measures: few, small operators per
time step (CPU GRU runs as one fused operator per layer and direction in forward, and its backward
as one autograd node), unlike resnet18's few large convolutions and the transformer's many small
ones. --hidden 16 --seq 8 --layers 1 is the bench's "tiny" model (smoke runs).
"""
import argparse
import sys
import time

import torch
from torch import nn


class no_debugger:
    """Stands in for PrecisionDebugger when --config is not given, so the loop is the same."""

    def start(self, model=None):
        pass

    def stop(self):
        pass

    def step(self):
        pass


class sequence_classifier(nn.Module):
    def __init__(self, features, hidden, layers, classes):
        super().__init__()
        self.gru = nn.GRU(features, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out)


def add_common_args(p):
    """The arguments every bench model takes (train_gru, train_mlp, train_gpt2)."""
    p.add_argument("--steps", type=int, default=3, help="training steps (default 3)")
    p.add_argument("--config", help="tprobe/msprobe config.json; without it, no tprobe")
    p.add_argument("--dump-path", help="overrides the config's dump_path")
    p.add_argument("--seed", type=int, default=1234, help="weights and data seed (default 1234)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p)
    p.add_argument("--batch", type=int, default=16, help="sequences per batch (default 16)")
    p.add_argument("--seq", type=int, default=32, help="time steps per sequence (default 32)")
    p.add_argument("--features", type=int, default=32, help="input features per time step (default 32)")
    p.add_argument("--hidden", type=int, default=64, help="GRU hidden size (default 64)")
    p.add_argument("--layers", type=int, default=2, help="GRU layers (default 2)")
    p.add_argument("--classes", type=int, default=8, help="classes per time step (default 8)")
    p.add_argument("--quiet", action="store_true", help="no per-step line")
    return p.parse_args(argv)


def build_model(args):
    torch.manual_seed(args.seed)
    return sequence_classifier(args.features, args.hidden, args.layers, args.classes)


def batches(args, count):
    """`count` deterministic (inputs, labels) batches; a step's class depends on its input and the
    previous step's, so the recurrence has something to learn."""
    g = torch.Generator().manual_seed(args.seed + 1)
    for _ in range(count):
        x = torch.randn(args.batch, args.seq, args.features, generator=g)
        s = x.sum(-1)
        y = ((s + torch.roll(s, 1, dims=1)) * 2).floor().long().remainder(args.classes)
        yield x, y


def make_debugger(args):
    if not args.config:
        return no_debugger()
    from tprobe import PrecisionDebugger
    return PrecisionDebugger(config_path=args.config, dump_path=args.dump_path)


def train(args, model, debugger, loader, on_step=None):
    """The training loop; `on_step(index, seconds, loss)` is called after each step."""
    crit = torch.nn.CrossEntropyLoss()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for i, (x, y) in enumerate(loader):
        t0 = time.perf_counter()
        debugger.start(model)
        out = model(x)
        loss = crit(out.flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        debugger.stop()
        debugger.step()
        if on_step:
            on_step(i, time.perf_counter() - t0, loss.item())


def run(name, module, argv=None):
    """A bench model's command line: `module` gives parse_args, build_model and batches."""
    args = module.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = module.build_model(args)
    debugger = make_debugger(args)

    def report(i, seconds, loss):
        if not args.quiet:
            print(f"{name} step {i} loss {loss:.4f} time {seconds:.3f} s", flush=True)

    train(args, model, debugger, module.batches(args, args.steps), report)


def main(argv=None):
    run("gru", sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
