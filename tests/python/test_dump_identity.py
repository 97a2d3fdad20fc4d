"""bench/dump_identity.py (issue 64): the dumps of two builds compared byte for byte.

DumpIdentityRunTest runs it in its quick mode (the tiny GRU, 2 steps, statistics L1 and md5) with
--against this same build: every file identical, exit 0. CompareTreesTest checks that the
comparer sees a changed byte, a file in one tree only and a changed length, and that the script
then exits 1 with one line per file.
"""
import contextlib
import io
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "dump_identity.py")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import dump_identity  # noqa: E402


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def tree(top, files):
    for rel, data in files.items():
        write(os.path.join(top, rel), data)
    return top


class CompareTreesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="tprobe-identity-test-")
        self.addCleanup(self.tmp.cleanup)
        self.base = {"step0/rank/dump.json": b'{"data": {"a": 1.5}}', "step0/rank/stack.json": b"{}",
                     "step0/rank/dump_tensor_data/x.npy": bytes(range(200))}

    def test_same_trees_have_no_differences(self):
        a = tree(os.path.join(self.tmp.name, "a"), self.base)
        b = tree(os.path.join(self.tmp.name, "b"), self.base)
        self.assertEqual(dump_identity.compare_trees(a, b), [])

    def test_one_changed_byte_is_found(self):
        changed = dict(self.base)
        data = bytearray(changed["step0/rank/dump_tensor_data/x.npy"])
        data[117] ^= 1
        changed["step0/rank/dump_tensor_data/x.npy"] = bytes(data)
        a = tree(os.path.join(self.tmp.name, "a"), self.base)
        b = tree(os.path.join(self.tmp.name, "b"), changed)
        self.assertEqual(dump_identity.compare_trees(a, b),
                         [("step0/rank/dump_tensor_data/x.npy", "differs (200 bytes each)")])

    def test_missing_file_and_length_are_found(self):
        changed = dict(self.base)
        del changed["step0/rank/stack.json"]
        changed["step0/rank/dump.json"] += b" "
        a = tree(os.path.join(self.tmp.name, "a"), self.base)
        b = tree(os.path.join(self.tmp.name, "b"), changed)
        diffs = dump_identity.compare_trees(a, b)
        self.assertEqual([p for p, _ in diffs], ["step0/rank/dump.json", "step0/rank/stack.json"])
        self.assertIn("only in " + a, diffs[1][1])
        self.assertIn("differs (20 and 21 bytes)", diffs[0][1])

    def test_script_exits_1_with_a_line_per_differing_file(self):
        """main() with runs that dump differently: each differing file named, exit 1."""
        other = os.path.join(self.tmp.name, "other")
        for piece in ("lib/libtprobe_torch.so", "bin/tprobe-run", "bin/tprobe-writer"):
            write(os.path.join(other, piece), b"")
        base = self.base

        def fake_dump(model, config, steps, dump, env, log):
            files = dict(base)
            if env["TPROBE_TORCH_LIBRARY"].startswith(other):  # the other build: one byte off
                files["step0/rank/dump.json"] = files["step0/rank/dump.json"].replace(b"1.5", b"1.6")
            tree(dump, files)

        out = io.StringIO()
        with mock.patch.object(dump_identity, "dump_once", fake_dump), contextlib.redirect_stdout(out):
            status = dump_identity.main(["--against", other, "--model", "tiny", "--configs", "md5",
                                         "--keep", os.path.join(self.tmp.name, "dumps")])
        self.assertEqual(status, 1, out.getvalue())
        self.assertIn("tiny md5: step0/rank/dump.json: differs (20 bytes each)", out.getvalue())
        self.assertIn("3 files compared, 1 differ", out.getvalue())

    def test_against_without_a_build_is_a_usage_error(self):
        self.assertEqual(dump_identity.main(["--against", self.tmp.name, "--quick"]), 100)


class DumpIdentityRunTest(unittest.TestCase):
    def test_quick_run_against_this_build_is_identical(self):
        build = os.path.dirname(os.environ["TPROBE_BIN_DIR"])
        proc = subprocess.run([sys.executable, SCRIPT, "--quick", "--against", build],
                              capture_output=True, text=True, timeout=500)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertRegex(proc.stdout, r"dump_identity: [1-9]\d* files compared, 0 differ")


if __name__ == "__main__":
    unittest.main()
