"""What a new user's probe of tprobe broke (issue 60), on a realistic loop: a small GPT-style decoder
(tied embeddings, nn.MultiheadAttention with a bool causal mask, LayerNorm, GELU), AdamW, gradient
clipping, two micro-batches of accumulation per step, and CPU autocast bfloat16 for its twin.

- Every kind of dump tprobe writes compares against itself: exit 0, no failing and no error row
  (masked_fill's -inf argument made the whole dump uncomparable).
- The loop compares against its bfloat16 autocast twin without an error row.
- Python values keep their structure: dict keys travel as keys (numeric, dotted, unicode), and a
  value the writer cannot place is one refused record, the dump going on.
"""

import glob
import json
import os
import subprocess
import textwrap

from tprobe_testing import BIN_DIR, CaptureTest, default_config

GPT = textwrap.dedent("""
    import sys
    import torch, torch.nn as nn, torch.nn.functional as F
    torch.set_num_threads(1)

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
            self.ln2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x, mask):
            h = self.ln1(x)
            a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
            x = x + a
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self, vocab=40, d=16, heads=2, layers=2, context=8):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.zeros(1, context, d))
            self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.head.weight = self.tok.weight  # tied embeddings

        def forward(self, idx):
            t = idx.shape[1]
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)  # causal: masked_fill(mask, -inf)
            x = self.tok(idx) + self.pos[:, :t]
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.ln(x))

    from tprobe import PrecisionDebugger
    bf16 = "--bf16" in sys.argv
    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, 40, (4, 4, 9))
    debugger = PrecisionDebugger(config_path="./config.json")
    for step in range(STEPS):
        debugger.start(model)
        for micro in range(2):
            batch = data[step * 2 + micro]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(batch[:, :-1])
                loss = F.cross_entropy(logits.float().reshape(-1, 40), batch[:, 1:].reshape(-1)) / 2
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        debugger.stop()
        debugger.step()
""")


def compare(npu, bench, out):
    """tprobe compare NPU BENCH -o OUT: (exit code, stderr, the result JSON of each rank pair)."""
    result = subprocess.run([os.path.join(BIN_DIR, "tprobe"), "compare", npu, bench, "-o", out],
                            capture_output=True, text=True, timeout=300)
    tables = []
    for path in sorted(glob.glob(os.path.join(out, "compare_result*.json"))):
        with open(path, encoding="utf-8") as f:
            tables.append(json.load(f))
    return result.returncode, result.stderr, tables


class RealUse(CaptureTest):

    def gpt_dump(self, name, bf16=False, steps=2, **config):
        with_tprobe = config.pop("tprobe", None)
        cfg = default_config(**config)
        if with_tprobe:
            cfg["tprobe"] = with_tprobe
        script = GPT if not bf16 else GPT.replace('"--bf16" in sys.argv', "True")
        return self.run_script(script, cfg, steps=steps, name=name)

    def test_every_kind_of_dump_compares_against_itself(self):
        kinds = [("statistics-L1", dict(level="L1")), ("statistics-L0", dict(level="L0")),
                 ("statistics-mix", dict(level="mix")), ("md5-L1", dict(level="L1", summary_mode="md5")),
                 ("md5-mix", dict(level="mix", summary_mode="md5")), ("tensor-L1", dict(task="tensor", level="L1")),
                 ("tensor-mix", dict(task="tensor", level="mix")),
                 ("tensor-pt-mix", dict(task="tensor", level="mix", tprobe={"tensor_format": "pt"}))]
        for name, config in kinds:
            with self.subTest(dump=name):
                run = self.gpt_dump(name, **config)
                text = open(os.path.join(run.folder(0), "dump.json"), encoding="utf-8").read()
                if config["level"] != "L0":
                    # The causal mask's fill value, as Python's json writes it (and msprobe reads it).
                    fills = [e for n, e in run.data(0).items() if "masked_fill" in n and n.endswith("forward")]
                    self.assertTrue(fills, name)
                    self.assertEqual(fills[0]["input_args"][2], {"type": "float", "value": float("-inf")})
                    self.assertIn('"value": -Infinity', text)
                self.assertNotIn('"-inf"', text)
                for step in (0, 1):
                    folder = run.folder(step)
                    code, err, tables = compare(folder, folder, os.path.join(run.dir, f"self{step}"))
                    self.assertEqual(code, 0, f"{name} step {step}: {err}")
                    self.assertEqual(len(tables), 1)
                    t = tables[0]
                    self.assertGreater(len(t["rows"]), 50, name)
                    self.assertEqual((t["failing_rows"], t["error_rows"], t["unmatched_rows"]), (0, 0, 0), name)

    def test_the_loop_compares_with_its_bfloat16_autocast_twin(self):
        for level in ("L1", "mix"):
            with self.subTest(level=level):
                fp32 = self.gpt_dump(f"fp32-{level}", level=level)
                bf16 = self.gpt_dump(f"bf16-{level}", bf16=True, level=level)
                code, err, tables = compare(bf16.folder(1), fp32.folder(1), os.path.join(bf16.dir, "twin"))
                self.assertIn(code, (0, 1), err)  # a negative answer is an answer; an error is not
                self.assertNotIn("error", err)
                self.assertEqual(tables[0]["error_rows"], 0)
                paired = len(tables[0]["rows"]) - tables[0]["unmatched_rows"]
                self.assertGreater(paired, 0.9 * len(tables[0]["rows"]))


KEYS = textwrap.dedent("""
    import torch, torch.nn as nn
    from tprobe import PrecisionDebugger
    torch.set_num_threads(1)

    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            y = self.fc(x)
            return {"head.0": y, "0": y * 2, ODD_KEY: y + 1}

    class Net(nn.Module):  # the root module is not dumped (as msprobe): Heads is a child
        def __init__(self):
            super().__init__()
            self.heads = Heads()

        def forward(self, x):
            return self.heads(x)

    torch.manual_seed(0)
    model = Net()
    x = torch.randn(2, 4)
    debugger = PrecisionDebugger(config_path="./config.json")
    for step in range(STEPS):
        debugger.start(model)
        out = model(x)
        debugger.save({"a": x, 3: x * 3}, "k", save_backward=False)
        debugger.save({3000000: x}, "big", save_backward=False)
        debugger.save({"it's": x, "": x} if ODD_KEY != "plain" else {"b": x}, "q", save_backward=False)
        debugger.stop()
        debugger.step()
""")


class PythonValues(CaptureTest):

    def test_dict_keys_travel_as_keys(self):
        # Keys outside msprobe's file-name characters ("\u00e9", "it's", "") cannot name a tensor
        # file: the statistics task only (test_a_value_the_writer_cannot_take_is_one_refused_record).
        for task, odd in (("statistics", '"\\u00e9"'), ("tensor", '"plain"')):
            with self.subTest(task=task):
                run = self.run_script(KEYS.replace("ODD_KEY", odd), default_config(task=task, level="mix"), steps=2,
                                      name=task)
                for step in (0, 1):  # the run goes on after each of them
                    data = run.data(step)
                    self.assertEqual(list(data["k.0.debug"]), ["a", "3"])
                    self.assertEqual(list(data["big.0.debug"]), ["3000000"])
                    self.assertEqual(list(data["q.0.debug"]), ["it's", ""] if task == "statistics" else ["b"])
                    module = [n for n in data if n.startswith("Module.heads.Heads.forward.")]
                    self.assertEqual(len(module), 1, list(data))
                    output = data[module[0]]["output"]
                    self.assertEqual(len(output), 1)
                    self.assertEqual(list(output[0]), ["head.0", "0", "\u00e9" if task == "statistics" else "plain"])
                    for leaf in output[0].values():
                        self.assertEqual(leaf["shape"], [2, 4])
                self.assertFalse(os.path.exists(os.path.join(run.folder(0), "dump_error_info.log")))
                if task == "tensor":
                    files = sorted(os.listdir(os.path.join(run.folder(0), "dump_tensor_data")))
                    self.assertIn(f"{module[0]}.output.0.head.0.npy", files)
                    self.assertIn("k.0.debug.debug.3.npy", files)
                    self.assertFalse([f for f in files if "'" in f], files)

    def test_a_value_the_writer_cannot_take_is_one_refused_record(self):
        # Task tensor: a key that cannot name a file ("it's") is one refused record, named in
        # dump_error_info.log and counted at the end; the rest of the run is dumped.
        run = self.run_script(KEYS.replace("ODD_KEY", '"plain"').replace('{"b": x}', '{"it\'s": x}'),
                              default_config(task="tensor", level="mix"), steps=2, expect_ok=False)
        for step in (0, 1):
            data = run.data(step)
            self.assertIn("k.0.debug", data)
            self.assertIn("big.0.debug", data)
            with open(os.path.join(run.folder(step), "dump_error_info.log"), encoding="utf-8") as f:
                lines = f.read().splitlines()
            self.assertEqual(len(lines), 1, lines)
            self.assertIn("q.0.debug", lines[0])
        self.assertIn("2 records could not be dumped", run.result.stderr)
