#!/usr/bin/env python3
"""A deep MLP training loop for bench/bench_torch.py (--model mlp): blocks of Linear, LayerNorm and
GELU, a linear head, Adam, cross-entropy, on deterministic synthetic data, under tprobe when
--config is given. It has the interface of examples/train_*.py (parse_args, build_model, batches,
make_debugger, train: the last two are bench/train_gru.py's), so the bench drives it the same way:

    PYTHONPATH=python /usr/bin/python3 bench/train_mlp.py --steps 3 --config examples/configs/statistics_L1.json

Its shape is many parameters and small operators: 60 blocks have 181 parameters, and the
optimizer's per-parameter operators (Adam's add_, mul_, addcmul_, sqrt, div, addcdiv_ on every
parameter, and zero_grad) come as one burst at the end of the step, which step()'s barrier waits
for the writer to turn into dump.json (docs/performance.md, "an unseen model's optimizer burst").
"""
import argparse
import sys

import torch
from torch import nn

import train_gru
from train_gru import make_debugger, train  # noqa: F401 (the bench's interface)
from train_gru import add_common_args


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p)
    p.add_argument("--batch", type=int, default=32, help="rows per batch (default 32)")
    p.add_argument("--width", type=int, default=128, help="features of every block (default 128)")
    p.add_argument("--blocks", type=int, default=60, help="Linear-LayerNorm-GELU blocks (default 60)")
    p.add_argument("--classes", type=int, default=10, help="classes (default 10)")
    p.add_argument("--quiet", action="store_true", help="no per-step line")
    return p.parse_args(argv)


class rows_as_sequence(nn.Module):
    """The MLP's (batch, classes) output as (batch, 1, classes): the (batch, time, classes) shape
    that train_gru.train flattens."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x).unsqueeze(1)


def build_model(args):
    torch.manual_seed(args.seed)
    layers = []
    for _ in range(args.blocks):
        layers += [nn.Linear(args.width, args.width), nn.LayerNorm(args.width), nn.GELU()]
    return rows_as_sequence(nn.Sequential(*layers, nn.Linear(args.width, args.classes)))


def batches(args, count):
    """`count` deterministic (inputs, labels) batches; the class is the sign pattern of the first
    features, so the model has something to learn."""
    g = torch.Generator().manual_seed(args.seed + 1)
    for _ in range(count):
        x = torch.randn(args.batch, args.width, generator=g)
        y = (x[:, 0] > 0).long() * 2 + (x[:, 1] > 0).long()
        yield x, y.remainder(args.classes)


def main(argv=None):
    train_gru.run("mlp", sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
