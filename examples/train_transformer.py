#!/usr/bin/env python3
"""A small real training loop on a transformer encoder (nn.TransformerEncoder, token
classification, AdamW, cross-entropy) on deterministic synthetic tokens, dumped with tprobe when
--config is given:

    PYTHONPATH=python /usr/bin/python3 examples/train_transformer.py --steps 3 \
        --config examples/configs/tensor.json

Without --config it trains without tprobe. The same --seed gives the same weights and batches, so a
float32 run and a bfloat16 run (--dtype bfloat16) dump comparable steps. The capture lines are the
three of msprobe's PrecisionDebugger: construct it, start(model) / stop() / step() around a step.
"""
import argparse
import math
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


class token_classifier(nn.Module):
    """Token and position embeddings, a TransformerEncoder, a per-token linear head."""

    def __init__(self, vocab, classes, seq, d_model, heads, layers, ff):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = nn.Embedding(seq, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, classes)
        self.scale = math.sqrt(d_model)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        h = self.embed(tokens) * self.scale + self.position(positions)
        return self.head(self.norm(self.encoder(h)))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3, help="training steps (default 3)")
    p.add_argument("--config", help="tprobe/msprobe config.json; without it, no tprobe")
    p.add_argument("--dump-path", help="overrides the config's dump_path")
    p.add_argument("--seed", type=int, default=1234, help="weights and data seed (default 1234)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="compute dtype (default float32)")
    p.add_argument("--cast", choices=["autocast", "model"], default="autocast",
                   help="how --dtype bfloat16 applies: CPU autocast (default) or model.to(bfloat16)")
    p.add_argument("--batch", type=int, default=8, help="sequences per batch (default 8)")
    p.add_argument("--seq", type=int, default=32, help="tokens per sequence (default 32)")
    p.add_argument("--vocab", type=int, default=100, help="vocabulary size (default 100)")
    p.add_argument("--classes", type=int, default=10, help="number of token classes (default 10)")
    p.add_argument("--d-model", type=int, default=64, help="model width (default 64)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    p.add_argument("--layers", type=int, default=2, help="encoder layers (default 2)")
    p.add_argument("--ff", type=int, default=128, help="feed-forward width (default 128)")
    p.add_argument("--quiet", action="store_true", help="no per-step line")
    return p.parse_args(argv)


def build_model(args):
    torch.manual_seed(args.seed)
    model = token_classifier(args.vocab, args.classes, args.seq, args.d_model, args.heads,
                             args.layers, args.ff)
    if args.dtype == "bfloat16" and args.cast == "model":
        model = model.to(torch.bfloat16)
    return model


def batches(args, count):
    """`count` deterministic (tokens, labels) batches; a token's class depends on it and on its
    left neighbour, so the encoder has something to learn."""
    g = torch.Generator().manual_seed(args.seed + 1)
    for _ in range(count):
        x = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
        left = torch.roll(x, 1, dims=1)
        y = (x + 3 * left).remainder(args.classes)
        yield x, y


def autocast(args):
    return torch.autocast("cpu", dtype=torch.bfloat16,
                          enabled=args.dtype == "bfloat16" and args.cast == "autocast")


def make_debugger(args):
    if not args.config:
        return no_debugger()
    from tprobe import PrecisionDebugger
    return PrecisionDebugger(config_path=args.config, dump_path=args.dump_path)


def train(args, model, debugger, loader, on_step=None):
    """The training loop; `on_step(index, seconds, loss)` is called after each step."""
    crit = torch.nn.CrossEntropyLoss()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    for i, (x, y) in enumerate(loader):
        t0 = time.perf_counter()
        debugger.start(model)
        with autocast(args):
            out = model(x)
        loss = crit(out.float().flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        debugger.stop()
        debugger.step()
        if on_step:
            on_step(i, time.perf_counter() - t0, loss.item())


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    model = build_model(args)
    debugger = make_debugger(args)

    def report(i, seconds, loss):
        if not args.quiet:
            print(f"transformer step {i} loss {loss:.4f} time {seconds:.3f} s", flush=True)

    train(args, model, debugger, batches(args, args.steps), report)


if __name__ == "__main__":
    main()
