"""tprobe config-check (msprobe's config_check): two static packs of environments that differ in a
determinism env variable, a package version (a dist-info folder put on PYTHONPATH) and a learning rate
in a yaml file: each difference is named in the terminal summary and in result.xlsx (read here with
zipfile + xml), exit 1; identical packs exit 0; a broken pack exits 100 naming the zip; random
stacks found on one side only are named."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET
import zipfile

BIN = os.path.join(os.environ.get("TPROBE_BIN_DIR", ""), "tprobe-config-check")
NS = {"m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main"}
REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"


def read_xlsx(path):
    """{sheet: [[cell, …], …]} in the workbook's sheet order (shared or inline strings, booleans, numbers)."""
    z = zipfile.ZipFile(path)
    shared = []
    if "xl/sharedStrings.xml" in z.namelist():
        for si in ET.fromstring(z.read("xl/sharedStrings.xml")).findall("m:si", NS):
            shared.append("".join(t.text or "" for t in si.iter("{%s}t" % NS["m"])))
    rels = {r.get("Id"): r.get("Target") for r in ET.fromstring(z.read("xl/_rels/workbook.xml.rels"))}
    out = {}
    for sheet in ET.fromstring(z.read("xl/workbook.xml")).find("m:sheets", NS):
        target = rels[sheet.get(REL)].lstrip("/")
        target = target if target.startswith("xl/") else "xl/" + target
        rows = []
        for row in ET.fromstring(z.read(target)).iter("{%s}row" % NS["m"]):
            cells = {}
            for c in row.findall("m:c", NS):
                col = 0
                for ch in c.get("r"):
                    if ch.isalpha():
                        col = col * 26 + ord(ch) - 64
                t, v = c.get("t"), c.find("m:v", NS)
                if t == "s":
                    cells[col - 1] = shared[int(v.text)]
                elif t == "b":
                    cells[col - 1] = v.text == "1"
                elif t == "str" or t == "inlineStr":
                    cells[col - 1] = "".join(x.text or "" for x in c.iter("{%s}t" % NS["m"])) if t == "inlineStr" else v.text
                elif v is not None:
                    cells[col - 1] = float(v.text)
            rows.append([cells.get(i, "") for i in range(max(cells) + 1)] if cells else [])
        out[sheet.get("name")] = rows
    return out


SCRIPT = """#!/bin/bash
LR=0.0001
GPT_ARGS="--num-layers 2 --hidden-size 64"
torchrun --nproc_per_node 8 pretrain.py $GPT_ARGS --seed 1234 --micro-batch-size 4
"""


class ConfigCheckTest(unittest.TestCase):
    def setUp(self):
        base = os.environ.get("TPROBE_TEST_TMP", tempfile.gettempdir())
        os.makedirs(base, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="config_check_", dir=base)
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        with open(os.path.join(self.tmp, "train.sh"), "w") as f:
            f.write(SCRIPT)

    def pack(self, name, lr, peft, extra_env):
        """A pack made in an environment with `extra_env`, peft==`peft` installed, `lr` in conf.yaml."""
        site = os.path.join(self.tmp, "site_" + name, "peft-%s.dist-info" % peft)
        os.makedirs(site)
        with open(os.path.join(site, "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: peft\nVersion: %s\n" % peft)
        conf = os.path.join(self.tmp, name + ".yaml")
        with open(conf, "w") as f:
            f.write("optimizer:\n  learning_rate: %s\n  weight_decay: 0.1\ntrain:\n  bs: 16\n" % lr)
        env = {k: v for k, v in os.environ.items() if k not in ("NCCL_DETERMINISTIC", "CUDA_LAUNCH_BLOCKING")}
        env.update(extra_env)
        env["PYTHONPATH"] = os.path.dirname(site)
        out = os.path.join(self.tmp, name + ".zip")
        # Shaped like msprobe's `config_check -d train.sh conf.yaml -o PACK.zip`.
        subprocess.run([BIN, "-d", os.path.join(self.tmp, "train.sh"), conf, "-o", out, "--python", sys.executable],
                       env=env, check=True, capture_output=True, text=True)
        self.assertEqual(sorted(zipfile.ZipFile(out).namelist()),
                         ["env", "hyperparameters/hyperparameters_static.json", "pip"])
        return out

    def compare(self, a, b, name):
        out = os.path.join(self.tmp, name)
        r = subprocess.run([BIN, "compare", a, b, "-o", out], capture_output=True, text=True)
        return r, out

    def test_differences_are_named_and_exit_1(self):
        a = self.pack("a", "0.001", "0.1", {"NCCL_DETERMINISTIC": "1"})
        b = self.pack("b", "0.002", "0.2", {})
        r, out = self.compare(a, b, "result")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("env: error", r.stdout)
        self.assertIn("NCCL_DETERMINISTIC", r.stdout)
        self.assertIn("package=peft, bench version=0.1, cmp version=0.2, level=error", r.stdout)
        self.assertIn("bench_para=optimizer.learning_rate, cmp_para=optimizer.learning_rate, "
                      "bench_value=0.001, cmp_value=0.002", r.stdout)
        book = read_xlsx(os.path.join(out, "result.xlsx"))
        self.assertEqual(list(book), ["summary", "env", "pip", "hyperparameters"])
        self.assertEqual(book["summary"], [["filename", "pass_check"], ["env", "error"], ["pip", "error"],
                                           ["hyperparameters", "error"]])
        # msprobe's env sheet: its bench_* columns hold the cmp pack's side (its compare_env_data
        # swaps its arguments): cmp lacks NCCL_DETERMINISTIC → the default False; bench has "1".
        self.assertEqual(book["env"], [["bench_env_name", "cmp_env_name", "bench_value", "cmp_value", "level"],
                                       ["NCCL_DETERMINISTIC", "NCCL_DETERMINISTIC", False, "1", "error"]])
        self.assertEqual(book["pip"], [["package", "bench version", "cmp version", "level"],
                                       ["peft", "0.1", "0.2", "error"]])
        self.assertEqual(book["hyperparameters"][1:],
                         [["hyperparameters_static.json", "optimizer.learning_rate", "optimizer.learning_rate",
                           "0.001", "0.002", "pure name", "error"]])
        # Unzipped as msprobe does.
        for side in ("bench", "cmp"):
            self.assertTrue(os.path.isfile(os.path.join(out, side, "hyperparameters", "hyperparameters_static.json")))

    def test_identical_packs_exit_0(self):
        a = self.pack("a", "0.001", "0.1", {})
        out = os.path.join(self.tmp, "same")
        # msprobe's spelling: `msprobe -f pytorch config_check -c A B -o DIR`.
        r = subprocess.run([BIN, "-f", "pytorch", "-c", a, a, "-o", out], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        book = read_xlsx(os.path.join(out, "result.xlsx"))
        self.assertEqual(book["summary"][1:], [["env", "pass"], ["pip", "pass"], ["hyperparameters", "pass"]])
        self.assertEqual(len(book["env"]), 1)

    def test_bad_pack_exits_100_naming_it(self):
        a = self.pack("a", "0.001", "0.1", {})
        bad = os.path.join(self.tmp, "bad.zip")
        with zipfile.ZipFile(bad, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("env", "{not json")
        r, _ = self.compare(a, bad, "bad")
        self.assertEqual(r.returncode, 100, r.stdout + r.stderr)
        self.assertIn("bad.zip: entry env", r.stderr)
        with zipfile.ZipFile(bad, "w") as z:
            z.writestr("random/rankX.json", "{}")
        r, _ = self.compare(bad, bad, "bad2")
        self.assertEqual(r.returncode, 100)
        self.assertIn("bad.zip: entry random/rankX.json", r.stderr)

    def test_random_stacks(self):
        """msprobe's dynamic pack's random/rank{R}.json: a call stack found on one side only is named."""
        frame = "File /w/train.py, line %d, in main, x = torch.randn(3, 4)"
        packs = []
        for name, stacks in (("r1", [[frame % 5]]), ("r2", [[frame % 9], ["File /w/data.py, line 2, in f, random.random()"]])):
            path = os.path.join(self.tmp, name + ".zip")
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("random/rank0.json", json.dumps({"torch.randn": [{"count": 1, "stack": s} for s in stacks]}))
            packs.append(path)
        r, out = self.compare(packs[0], packs[1], "random")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("random: error", r.stdout)
        self.assertIn("bench_stack=no match stack, cmp_stack=File /w/data.py, line 2, in f, random.random()", r.stdout)
        book = read_xlsx(os.path.join(out, "result.xlsx"))
        self.assertEqual(book["random"][1:], [
            ["torch.randn", 0.0, frame % 5, frame % 9, 1.0, 1.0, True],
            ["torch.randn", 0.0, "no match stack", "File /w/data.py, line 2, in f, random.random()", 0.0, 1.0, False]])

    def test_msprobe_dynamic_packs_give_msprobe_result(self):
        """Packs of msprobe's dynamic pack (weights, dataset, random): the cells of msprobe's own
        result.xlsx for them (fixtures/config_check/README.md), rows compared as sets where msprobe
        leaves them in hash order."""
        fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "config_check")
        r, out = self.compare(os.path.join(fixtures, "bench.zip"), os.path.join(fixtures, "cmp.zip"), "dynamic")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        with open(os.path.join(fixtures, "msprobe_result.json")) as f:
            expected = json.load(f)
        book = read_xlsx(os.path.join(out, "result.xlsx"))
        self.assertEqual(list(book), list(expected))
        self.assertEqual(book["summary"], expected["summary"])
        key = lambda row: json.dumps([round(c, 12) if isinstance(c, float) else c for c in row])
        for sheet in expected:
            self.assertEqual(book[sheet][0], expected[sheet][0])
            self.assertEqual(sorted(map(key, book[sheet][1:])), sorted(map(key, expected[sheet][1:])), sheet)


if __name__ == "__main__":
    unittest.main()
