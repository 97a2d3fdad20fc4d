"""The dynamic config_check pack (tprobe.config_check.ConfigChecker, issue 66 item 1): a real
training run (fixtures/config_check/train_dynamic.py) packs every forward's weights and inputs,
the random calls with their stacks, Megatron's args and the static entries; the values equal the
tensors the run saw, recomputed here; two runs that differ in the seed and the learning rate are
told apart by `tprobe-config-check compare` on exactly those rows, two equal runs pass; two gloo
ranks share one zip; a pack left by an earlier run is refused before training."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

import torch

from test_config_check import read_xlsx

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "fixtures", "config_check", "train_dynamic.py")
BIN = os.path.join(os.environ.get("TPROBE_BIN_DIR", ""), "tprobe-config-check")

FAKE_MEGATRON = '''import argparse
def get_args():
    return argparse.Namespace(lr={lr}, seed={seed}, micro_batch_size=4, init_method=print)
'''


def features(t):
    """msprobe's get_tensor_features, written out: integers, booleans and float64 as float32."""
    if not t.is_floating_point() or t.dtype == torch.float64:
        t = t.float()
    return {"max": torch.max(t).item(), "min": torch.min(t).item(), "mean": torch.mean(t).item(),
            "norm": torch.linalg.vector_norm(t).item()}


class ConfigCheckDynamicTest(unittest.TestCase):
    def setUp(self):
        base = os.environ.get("TPROBE_TEST_TMP", tempfile.gettempdir())
        os.makedirs(base, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="config_check_dynamic_", dir=base)
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def run_training(self, name, seed, lr, env=None, expect_rc=0):
        site = os.path.join(self.tmp, "site_" + name)
        os.makedirs(os.path.join(site, "megatron"), exist_ok=True)
        open(os.path.join(site, "megatron", "__init__.py"), "w").close()
        with open(os.path.join(site, "megatron", "training.py"), "w") as f:
            f.write(FAKE_MEGATRON.format(lr=lr, seed=seed))
        conf = os.path.join(self.tmp, name + ".yaml")
        with open(conf, "w") as f:
            f.write("optimizer:\n  learning_rate: %s\n" % lr)
        pack = os.path.join(self.tmp, name, "pack.zip")
        saved = os.path.join(self.tmp, name + ".pt")
        full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([site, os.environ.get("PYTHONPATH", "")]), **(env or {}))
        r = subprocess.run([sys.executable, SCRIPT, pack, str(seed), str(lr), conf, saved],
                           env=full_env, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, expect_rc, r.stdout + r.stderr)
        return pack, saved, r

    def compare(self, a, b, name):
        out = os.path.join(self.tmp, name)
        r = subprocess.run([BIN, "compare", a, b, "-o", out], capture_output=True, text=True)
        return r, read_xlsx(os.path.join(out, "result.xlsx"))

    def test_pack_holds_what_the_run_saw(self):
        pack, saved, _ = self.run_training("a", 1, 0.1)
        z = zipfile.ZipFile(pack)
        names = z.namelist()
        self.assertEqual(sorted(n for n in names if not n.startswith(("weights/", "dataset/"))),
                         ["env", "hyperparameters/hyperparameters_dynamic.json",
                          "hyperparameters/hyperparameters_static.json", "pip", "random/rank0.json"])
        self.assertTrue(all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist()))
        seen = torch.load(saved)
        self.assertEqual(len(seen), 3)
        for step, s in enumerate(seen):
            weights = json.loads(z.read(f"weights/step{step}/rank0/weight.json"))
            self.assertEqual(list(weights), list(s["params"]))
            for n, p in s["params"].items():
                self.assertEqual(weights[n], features(p.float()), (step, n))
            dataset = json.loads(z.read(f"dataset/step{step}/rank0/dataset.json"))
            # Positional arguments by index (json keys), keyword arguments by name; the bf16
            # keyword reduced in bf16, as msprobe does.
            self.assertEqual(dataset, {"args": {"0": features(s["x"])}, "kwargs": {"scale": features(s["scale"])}})
        # The weights moved between steps (SGD), so the steps are different entries.
        self.assertNotEqual(z.read("weights/step0/rank0/weight.json"), z.read("weights/step1/rank0/weight.json"))
        random_calls = json.loads(z.read("random/rank0.json"))
        self.assertEqual(sorted(random_calls), ["random.random", "torch.manual_seed", "torch.randn"])
        seed_call = random_calls["torch.manual_seed"]
        self.assertEqual([e["count"] for e in seed_call], [1])
        self.assertTrue(seed_call[0]["stack"][-1].startswith(f"File {SCRIPT}, line "), seed_call[0]["stack"][-1])
        self.assertTrue(seed_call[0]["stack"][-1].endswith("in main, torch.manual_seed(seed)"))
        # Calls made before the first forward only (msprobe writes the file once): the first
        # step's randn, not the later ones.
        self.assertEqual([e["count"] for e in random_calls["torch.randn"]], [1])
        dynamic = json.loads(z.read("hyperparameters/hyperparameters_dynamic.json"))
        self.assertEqual(dynamic, {"lr": 0.1, "seed": 1, "micro_batch_size": 4, "init_method": None})
        static = json.loads(z.read("hyperparameters/hyperparameters_static.json"))
        self.assertEqual(static, {"optimizer.learning_rate": 0.1})
        self.assertEqual(json.loads(z.read("env"))["PYTHONPATH"].split(os.pathsep)[0], os.path.join(self.tmp, "site_a"))

    def test_seed_and_learning_rate_are_named(self):
        a, _, _ = self.run_training("a", 1, 0.1)
        b, _, _ = self.run_training("b", 2, 0.2)
        r, book = self.compare(a, b, "ab")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertEqual(book["summary"][1:], [["env", "pass"], ["pip", "pass"], ["dataset", "error"],
                                               ["weights", "error"], ["hyperparameters", "error"], ["random", "pass"]])
        # Every initialised weight differs from the first step (another seed), the float64 zeros
        # do not; every input differs too.
        self.assertEqual({(row[2], row[3]) for row in book["weights"][1:]},
                         {("fc1.weight", False), ("fc1.bias", False), ("fc2.weight", False), ("fc2.bias", False),
                          ("steps", True)})
        self.assertEqual(len(book["weights"][1:]), 3 * 5)
        self.assertEqual([row[2] for row in book["dataset"][1:] if row[0] == 0.0], ["args.0", "kwargs.scale"])
        self.assertEqual([row[3] for row in book["dataset"][1:] if row[2] == "kwargs.scale"], [True] * 3)
        self.assertEqual([row[3] for row in book["dataset"][1:] if row[2] == "args.0"], [False] * 3)
        hyper = sorted(tuple(row) for row in book["hyperparameters"][1:])
        self.assertEqual(hyper, [
            ("hyperparameters_dynamic.json", "lr", "lr", "0.1", "0.2", "pure name", "error"),
            ("hyperparameters_dynamic.json", "seed", "seed", "1", "2", "pure name", "error"),
            ("hyperparameters_static.json", "optimizer.learning_rate", "optimizer.learning_rate", "0.1", "0.2",
             "pure name", "error")])
        self.assertIn("hyperparameters: error", r.stdout)

    def test_equal_runs_pass(self):
        a, _, _ = self.run_training("a", 1, 0.1)
        c, _, _ = self.run_training("c", 1, 0.1)
        r, book = self.compare(a, c, "ac")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual([row[1] for row in book["summary"][1:]], ["pass"] * 6)
        self.assertEqual(len(book["weights"][1:]), 15)
        self.assertEqual(len(book["random"][1:]), 3)

    def test_two_gloo_ranks_share_one_zip(self):
        pack = os.path.join(self.tmp, "dist", "pack.zip")
        procs = []
        for rank in (0, 1):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", INIT_FILE=os.path.join(self.tmp, "init"))
            conf = os.path.join(self.tmp, "d.yaml")
            with open(conf, "w") as f:
                f.write("lr: 0.1\n")
            procs.append(subprocess.Popen([sys.executable, SCRIPT, pack, "1", "0.1", conf,
                                           os.path.join(self.tmp, f"d{rank}.pt")], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for p in procs:
            out, _ = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 0, out)
        names = zipfile.ZipFile(pack).namelist()
        self.assertEqual(len(names), len(set(names)))
        for rank in (0, 1):
            self.assertIn(f"random/rank{rank}.json", names)
            for step in range(3):
                self.assertIn(f"weights/step{step}/rank{rank}/weight.json", names)
                self.assertIn(f"dataset/step{step}/rank{rank}/dataset.json", names)
        self.assertEqual(sum(n in ("env", "pip") for n in names), 2)  # rank 0 only
        seen = torch.load(os.path.join(self.tmp, "d1.pt"))
        dataset = json.loads(zipfile.ZipFile(pack).read("dataset/step2/rank1/dataset.json"))
        self.assertEqual(dataset["args"]["0"], features(seen[2]["x"]))

    def test_pack_of_an_earlier_run_is_refused_before_training(self):
        a, saved, _ = self.run_training("a", 1, 0.1)
        os.remove(saved)
        _, _, r = self.run_training("a", 1, 0.1, expect_rc=1)
        self.assertIn(f"tprobe config_check: {a} already holds env", r.stderr)
        self.assertFalse(os.path.exists(saved))  # stopped before the first step

    def test_bad_arguments_are_refused(self):
        from tprobe.config_check import ConfigChecker
        with self.assertRaisesRegex(ValueError, "must be a string ending in .zip"):
            ConfigChecker(output_zip_path=os.path.join(self.tmp, "pack.tar"))
        with self.assertRaisesRegex(ValueError, "only 'pytorch' is built"):
            ConfigChecker(output_zip_path=os.path.join(self.tmp, "p.zip"), fmk="mindspore")
        with self.assertRaisesRegex(ValueError, "not a torch.nn.Module"):
            ConfigChecker(model=object(), output_zip_path=os.path.join(self.tmp, "p.zip"))
        bad = os.path.join(self.tmp, "conf.txt")
        open(bad, "w").close()
        with self.assertRaisesRegex(ValueError, "static pack failed: .*conf.txt"):
            ConfigChecker(shell_path=[bad], output_zip_path=os.path.join(self.tmp, "q.zip"))


if __name__ == "__main__":
    unittest.main()
