#!/usr/bin/env python3
"""A GPT-2-small-sized decoder training loop for bench/bench_torch.py (--model gpt2, issue 67): 12
pre-LayerNorm blocks of causal self-attention and a 4x GELU MLP, d_model 768, 12 heads, learned
positions, the head tied to the token embedding, AdamW, bf16 autocast, on deterministic synthetic
tokens, under tprobe when --config is given. It has the interface of examples/train_*.py
(parse_args, build_model, batches, make_debugger, train), so the bench drives it the same way:

    PYTHONPATH=python /usr/bin/python3 bench/train_gpt2.py --steps 3 --config examples/configs/statistics_L1.json

It is the bench's realistic GPU workload: its defaults (batch 16 of 512 tokens, 124M parameters) are
sized for a 50-150 ms step on one H100, where the small models' 7-11 ms steps measure little but the
per-tensor cost. On a CPU give it a small shape: --model-args "--layers 2 --d-model 128 --heads 4
--seq 64 --batch 4 --vocab 1000" (opt-in, not in the bench's "all").
"""
import argparse
import time

import torch
from torch import nn

from train_gru import make_debugger  # the bench's interface: PrecisionDebugger, or none without --config
from train_gru import add_common_args


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p)
    p.add_argument("--batch", type=int, default=16, help="sequences per batch (default 16)")
    p.add_argument("--seq", type=int, default=512, help="tokens per sequence (default 512)")
    p.add_argument("--vocab", type=int, default=50257, help="vocabulary (default 50257, GPT-2's)")
    p.add_argument("--d-model", type=int, default=768, help="model width (default 768)")
    p.add_argument("--heads", type=int, default=12, help="attention heads (default 12)")
    p.add_argument("--layers", type=int, default=12, help="decoder blocks (default 12)")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16",
                   help="bfloat16: autocast on the model's device (default); float32: none")
    p.add_argument("--quiet", action="store_true", help="no per-step line")
    return p.parse_args(argv)


class block(nn.Module):
    """Pre-LayerNorm: x + attention(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, d_model, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, causal):
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, attn_mask=causal, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class decoder(nn.Module):
    def __init__(self, vocab, seq, d_model, heads, layers):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(seq, d_model)
        self.blocks = nn.ModuleList(block(d_model, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        nn.init.normal_(self.wte.weight, std=0.02)  # GPT-2's initialisation (the tied head's logits stay small)
        nn.init.normal_(self.wpe.weight, std=0.01)

    def forward(self, tokens):
        t = tokens.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).triu(1)  # True: not attended
        x = self.wte(tokens) + self.wpe(torch.arange(t, device=tokens.device))
        for b in self.blocks:
            x = b(x, causal)
        return self.ln_f(x) @ self.wte.weight.t()  # the head tied to the embedding, as GPT-2's


def build_model(args):
    torch.manual_seed(args.seed)
    return decoder(args.vocab, args.seq, args.d_model, args.heads, args.layers)


def batches(args, count):
    """`count` deterministic (tokens, next tokens) batches: each token's successor is a fixed
    function of it, so the model has something to learn."""
    g = torch.Generator().manual_seed(args.seed + 1)
    for _ in range(count):
        x = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
        yield x, (x * 7 + 3).remainder(args.vocab)


def train(args, model, debugger, loader, on_step=None):
    """The training loop; `on_step(index, seconds, loss)` is called after each step."""
    crit = torch.nn.CrossEntropyLoss()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    device = next(model.parameters()).device.type
    model.train()
    for i, (x, y) in enumerate(loader):
        t0 = time.perf_counter()
        debugger.start(model)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=args.dtype == "bfloat16"):
            logits = model(x)
            loss = crit(logits.flatten(0, 1).float(), y.flatten())
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

    def report(i, seconds, loss):
        if not args.quiet:
            print(f"gpt2 step {i} loss {loss:.4f} time {seconds:.3f} s", flush=True)

    train(args, model, make_debugger(args), batches(args, args.steps), report)


if __name__ == "__main__":
    main()
