#!/usr/bin/env python3
"""A small real training loop on torchvision's resnet18 (SGD, cross-entropy) on deterministic
synthetic images, dumped with tprobe when --config is given:

    PYTHONPATH=python /usr/bin/python3 examples/train_resnet18.py --steps 3 \
        --config examples/configs/statistics_L1.json

Without --config it trains without tprobe. The same --seed gives the same weights and batches, so a
float32 run and a bfloat16 run (--dtype bfloat16) dump comparable steps. The capture lines are the
three of msprobe's PrecisionDebugger: construct it, start(model) / stop() / step() around a step.
"""
import argparse
import time

import torch
import torchvision


class no_debugger:
    """Stands in for PrecisionDebugger when --config is not given, so the loop is the same."""

    def start(self, model=None):
        pass

    def stop(self):
        pass

    def step(self):
        pass


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
    p.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    p.add_argument("--size", type=int, default=32, help="image height and width (default 32)")
    p.add_argument("--classes", type=int, default=10, help="number of classes (default 10)")
    p.add_argument("--quiet", action="store_true", help="no per-step line")
    return p.parse_args(argv)


def build_model(args):
    torch.manual_seed(args.seed)
    model = torchvision.models.resnet18(num_classes=args.classes)
    if args.dtype == "bfloat16" and args.cast == "model":
        model = model.to(torch.bfloat16)
    return model


def batches(args, count):
    """`count` deterministic (images, labels) batches; the label depends on the image, so the
    loss falls."""
    g = torch.Generator().manual_seed(args.seed + 1)
    for _ in range(count):
        x = torch.randn(args.batch, 3, args.size, args.size, generator=g)
        y = (x.mean(dim=(1, 2, 3)) * 40).floor().long().remainder(args.classes)
        if args.dtype == "bfloat16" and args.cast == "model":
            x = x.to(torch.bfloat16)
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
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    for i, (x, y) in enumerate(loader):
        t0 = time.perf_counter()
        debugger.start(model)
        with autocast(args):
            out = model(x)
        loss = crit(out.float(), y)
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
            print(f"resnet18 step {i} loss {loss:.4f} time {seconds:.3f} s", flush=True)

    train(args, model, debugger, batches(args, args.steps), report)


if __name__ == "__main__":
    main()
