"""tprobe ckpt-compare (msprobe's checkpoint compare, config_check -c) on real torch.save files: a
nudged parameter is the only one that differs, bf16 and shared-storage views are read, a TP-sharded
Megatron-LM layout merges to its unsharded checkpoint, msprobe's JSON layout, and the refusals."""

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import unittest
from collections import OrderedDict

import torch

BIN = os.path.join(os.environ.get("TPROBE_BIN_DIR", ""), "tprobe-ckpt-compare")


def model_state(seed=0):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    return OrderedDict((k, v.clone()) for k, v in m.state_dict().items())


# A small GPT in Megatron-LM's legacy names (mapped to mcore's by msprobe's name_mapping.yaml).
HIDDEN, FFN, VOCAB, LAYERS = 8, 16, 12, 2


def gpt_state(seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)
    sd = OrderedDict()
    sd["language_model.embedding.word_embeddings.weight"] = r(VOCAB, HIDDEN)
    for i in range(LAYERS):
        p = f"language_model.encoder.layers.{i}."
        sd[p + "input_norm.weight"] = r(HIDDEN)
        sd[p + "self_attention.query_key_value.weight"] = r(3 * HIDDEN, HIDDEN)
        sd[p + "self_attention.query_key_value.bias"] = r(3 * HIDDEN)
        sd[p + "self_attention.dense.weight"] = r(HIDDEN, HIDDEN)
        sd[p + "self_attention.dense.bias"] = r(HIDDEN)
        sd[p + "post_attention_norm.weight"] = r(HIDDEN)
        sd[p + "mlp.dense_h_to_4h.weight"] = r(FFN, HIDDEN)
        sd[p + "mlp.dense_4h_to_h.weight"] = r(HIDDEN, FFN)
    sd["language_model.encoder.final_norm.weight"] = r(HIDDEN)
    return sd


def shard(name, t, tp, rank):
    if any(k in name for k in ("query_key_value", "dense_h_to_4h", "word_embeddings")):
        return t.chunk(tp, 0)[rank].clone()
    if any(k in name for k in ("self_attention.dense.weight", "dense_4h_to_h.weight")):
        return t.chunk(tp, 1)[rank].clone()
    return t.clone()


def stage_state(sd, pp, rank):
    """Pipeline stage `rank` of `pp`: its layers renumbered from 0, the embedding first, the final norm last."""
    out = OrderedDict()
    per = LAYERS // pp
    for k, v in sd.items():
        if ".layers." in k:
            i = int(k.split(".layers.")[1].split(".")[0])
            if i // per != rank:
                continue
            k = k.replace(f".layers.{i}.", f".layers.{i - rank * per}.")
        elif "embedding" in k and rank != 0 or "final_norm" in k and rank != pp - 1:
            continue
        out[k] = v
    return out


def save_megatron(root, sd, tp, iteration=10, pp=1):
    it = os.path.join(root, f"iter_{iteration:07d}")
    for p in range(pp):
        for rank in range(tp):
            d = os.path.join(it, f"mp_rank_{rank:02d}" + (f"_{p:03d}" if pp > 1 else ""))
            os.makedirs(d)
            args = argparse.Namespace(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                      expert_model_parallel_size=1, num_experts=None, lr=1e-4, seq_length=32)
            state = {"args": args, "checkpoint_version": 3.0, "iteration": iteration,
                     "model": OrderedDict((k, shard(k, v, tp, rank)) for k, v in stage_state(sd, pp, p).items()),
                     "optimizer": {"state": {0: {"exp_avg": torch.zeros(3)}}, "param_groups": [{"lr": 1e-4}]},
                     "rng_state": [{"random_rng_state": (3, tuple(range(5)), None),
                                    "torch_rng_state": torch.get_rng_state()}]}
            torch.save(state, os.path.join(d, "model_optim_rng.pt"))
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))


class CkptCompareTest(unittest.TestCase):
    def setUp(self):
        root = os.environ.get("TPROBE_TEST_TMP") or None
        if root:
            os.makedirs(root, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="tprobe-ckpt-", dir=root)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def compare(self, a, b, out="out.json", expect=0, extra=()):
        p = subprocess.run([BIN, a, b, "-o", self.path(out), *extra], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, expect, p.stdout + p.stderr)
        return p

    def result(self, out="out.json"):
        with open(self.path(out)) as f:
            return json.load(f, object_pairs_hook=OrderedDict)

    def test_nudged_parameter_is_the_only_difference(self):
        a = model_state()
        b = OrderedDict((k, v.clone()) for k, v in a.items())
        b["2.weight"][1, 3] += 0.25
        torch.save(a, self.path("a.pt"))
        torch.save(b, self.path("b.pt"))
        p = self.compare(self.path("a.pt"), self.path("b.pt"), extra=("--threads", "3"))
        r = self.result()
        self.assertEqual(list(r), list(a))  # A's order
        for name, m in r.items():
            x, y = a[name].double(), b[name].double()
            self.assertEqual(m["numel"], x.numel())
            self.assertEqual(m["shape"], list(x.shape))
            self.assertAlmostEqual(m["l2"], (x - y).norm().item(), places=12)
            self.assertAlmostEqual(m["cos"], (x.flatten() @ y.flatten() / (x.norm() * y.norm())).item(), places=12)
            if name == "2.weight":
                self.assertAlmostEqual(m["l2"], 0.25, places=6)
                self.assertLess(m["cos"], 1.0)
            else:
                self.assertEqual(m["l2"], 0.0)
                self.assertEqual(m["cos"], 1.0)
        self.assertIn("1 moved (l2 > 0)", p.stdout)
        self.assertIn("largest l2:\n  2.weight  l2 0.25", p.stdout)

    def test_json_bytes_as_msprobe_writes_them(self):
        a = OrderedDict([("w", torch.tensor([[3.0, 4.0]])), ("z", torch.zeros(2)), ("s", torch.tensor(2.0)),
                         ("only_a", torch.ones(1))])
        b = OrderedDict([("w", torch.tensor([[0.0, 4.0]])), ("z", torch.ones(2)), ("s", torch.tensor([2.0, 1.0])),
                         ("only_b", torch.ones(1))])
        torch.save(a, self.path("a.pt"))
        torch.save(b, self.path("b.pt"))
        p = self.compare(self.path("a.pt"), self.path("b.pt"))
        expected = OrderedDict([
            ("w", {"l2": 3.0, "cos": 16.0 / 20.0, "numel": 2, "shape": [1, 2]}),
            ("z", {"l2": 2.0 ** 0.5, "cos": None, "numel": 2, "shape": [2]}),  # one norm is 0
            ("s", {"l2": None, "cos": None, "numel": [1, 2], "shape": [[], [2]]}),
        ])
        with open(self.path("out.json")) as f:
            self.assertEqual(f.read(), json.dumps(expected, indent=4))
        self.assertIn("only in the first (1): only_a", p.stdout)
        self.assertIn("only in the second (1): only_b", p.stdout)

    def test_bf16_views_and_nested_dicts(self):
        base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
        a = {"net": {"emb": base.bfloat16(), "t": base.t(), "row": base[1], "col": base[:, 2],
                                    "tied": base}, "step": 3, "names": ["x", "y"]}
        nudged = base.clone()
        nudged[3, 2] += 1
        b = {"net": {"emb": nudged.bfloat16(), "t": nudged.t(), "row": nudged[1], "col": nudged[:, 2],
                     "tied": nudged}, "step": 4}
        torch.save(a, self.path("a.pt"))
        torch.save(b, self.path("b.pt"))
        self.compare(self.path("a.pt"), self.path("b.pt"))
        r = self.result()
        self.assertEqual(list(r), ["net.emb", "net.t", "net.row", "net.col", "net.tied"])
        for name in ("net.emb", "net.t", "net.col", "net.tied"):
            self.assertEqual(r[name]["l2"], 1.0, name)
        self.assertEqual(r["net.row"]["l2"], 0.0)
        self.assertEqual(r["net.t"]["shape"], [6, 4])
        x = base[:, 2].double()
        y = nudged[:, 2].double()
        self.assertAlmostEqual(r["net.col"]["cos"], (x @ y / (x.norm() * y.norm())).item(), places=12)

    def test_megatron_tp_shards_merge_to_the_unsharded_checkpoint(self):
        sd = gpt_state()
        save_megatron(self.path("tp1"), sd, 1)
        save_megatron(self.path("tp2"), sd, 2)
        p = self.compare(self.path("tp2"), self.path("tp1"))
        r = self.result()
        self.assertEqual(len(r), len(sd))
        self.assertIn("decoder.layers.1.self_attention.linear_qkv.weight", r)
        self.assertIn("decoder.layers.0.mlp.linear_fc2.weight", r)
        self.assertIn("decoder.final_layernorm.weight", r)
        self.assertIn("embedding.word_embeddings.weight", r)
        for name, m in r.items():
            self.assertEqual((m["l2"], m["cos"]), (0.0, 1.0), name)
        self.assertEqual(r["decoder.layers.0.mlp.linear_fc2.weight"]["shape"], [HIDDEN, FFN])
        self.assertIn("TP 2, PP 1, EP 1", p.stdout)
        # The merged shards against a plain file of the same weights under mcore's names, and a
        # nudge in one shard of a row-parallel weight shows on that weight only.
        sd2 = OrderedDict((k, v.clone()) for k, v in sd.items())
        sd2["language_model.encoder.layers.1.mlp.dense_4h_to_h.weight"][2, FFN - 1] += 2.0
        save_megatron(self.path("tp2b"), sd2, 2)
        self.compare(self.path("tp2", "iter_0000010"), self.path("tp2b"), out="nudged.json")
        r = self.result("nudged.json")
        moved = [k for k, m in r.items() if m["l2"] != 0.0]
        self.assertEqual(moved, ["decoder.layers.1.mlp.linear_fc2.weight"])
        self.assertAlmostEqual(r[moved[0]]["l2"], 2.0, places=5)

    def test_megatron_pipeline_stages_number_layers_globally(self):
        sd = gpt_state()
        save_megatron(self.path("tp1"), sd, 1)
        save_megatron(self.path("tp2pp2"), sd, 2, pp=2)
        p = self.compare(self.path("tp2pp2"), self.path("tp1"))
        r = self.result()
        self.assertEqual(sorted(r), sorted(self.result_names(sd)))
        for name, m in r.items():
            self.assertEqual((m["l2"], m["cos"]), (0.0, 1.0), name)
        self.assertIn("TP 2, PP 2, EP 1", p.stdout)
        self.assertIn("0 only in the first, 0 only in the second", p.stdout)

    @staticmethod
    def result_names(sd):
        """msprobe's mcore names of the legacy names of gpt_state."""
        out = []
        for k in sd:
            for a, b in (("language_model.", ""), ("encoder", "decoder"), (".input_norm.", ".input_layernorm."),
                         ("query_key_value", "linear_qkv"), (".dense.", ".linear_proj."),
                         ("post_attention_norm", "pre_mlp_layernorm"), ("dense_h_to_4h", "linear_fc1"),
                         ("dense_4h_to_h", "linear_fc2"), ("final_norm", "final_layernorm")):
                k = k.replace(a, b)
            out.append(k)
        return out

    def test_folder_of_files_pairs_by_name(self):
        a, b = model_state(0), model_state(0)
        b["0.bias"][0] -= 1
        for name, sd in (("a", a), ("b", b)):
            os.makedirs(self.path(name))
            keys = list(sd)
            torch.save(OrderedDict((k, sd[k]) for k in keys[:2]), self.path(name, "pytorch_model-00001.bin"))
            torch.save(OrderedDict((k, sd[k]) for k in keys[2:]), self.path(name, "pytorch_model-00002.bin"))
        self.compare(self.path("a"), self.path("b"))
        r = self.result()
        self.assertEqual(list(r), list(a))
        self.assertEqual([k for k, m in r.items() if m["l2"] != 0.0], ["0.bias"])

    def test_refusals(self):
        torch.save(model_state(), self.path("a.pt"))
        with open(self.path("out.json"), "w") as f:
            f.write("keep")
        p = self.compare(self.path("a.pt"), self.path("a.pt"), expect=100)
        self.assertIn("exists", p.stderr)
        with open(self.path("out.json")) as f:
            self.assertEqual(f.read(), "keep")
        with open(self.path("a.pt"), "rb") as f:
            data = f.read()
        with open(self.path("bad.pt"), "wb") as f:
            f.write(data[: len(data) // 2])
        p = self.compare(self.path("a.pt"), self.path("bad.pt"), out="new.json", expect=100)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertTrue(lines[0].startswith("tprobe-ckpt-compare: fatal: " + self.path("bad.pt")), lines[0])
        self.assertFalse(os.path.exists(self.path("new.json")))
        p = self.compare(self.path("a.pt"), self.path("missing.pt"), out="new.json", expect=111)
        self.assertIn("missing.pt", p.stderr)
        p = subprocess.run([BIN, self.path("a.pt")], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 100, p.stderr)

    def test_msprobe_spelling(self):
        torch.save(model_state(), self.path("a.pt"))
        p = subprocess.run([BIN, "-c", self.path("a.pt"), self.path("a.pt"), "-o", self.path("c.json")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(self.result("c.json")), 4)


if __name__ == "__main__":
    unittest.main()
