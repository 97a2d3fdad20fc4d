"""`pip install .` (issue 67 item 5), against Debian's torch: into a venv that sees the system's
packages, with no package index, the build reusing this build tree (TPROBE_CMAKE_BUILD_DIR, so
that the check costs no second compile); then, with no PYTHONPATH and no TPROBE_* variable, the
installed package loads its capture and finds its binaries and manifests inside itself, the
`tprobe` command runs a shipped manifest by name around a training script, and the dump is there.
A Python without torch is refused by setup.py in one line."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

from tprobe_testing import BIN_DIR, default_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_TREE = os.path.dirname(os.path.abspath(BIN_DIR)) if BIN_DIR else ""

TRAIN = textwrap.dedent("""
    import torch
    from tprobe import PrecisionDebugger
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    debugger = PrecisionDebugger(config_path="config.json")
    debugger.start(model)
    model(torch.randn(2, 4)).sum().backward()
    debugger.stop()
    debugger.step()
""")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("TPROBE_")}
    env.update(extra)
    return env


@unittest.skipUnless(BUILD_TREE, "needs TPROBE_BIN_DIR (the build tree the install reuses)")
class PipInstallTest(unittest.TestCase):
    def setUp(self):
        base = os.environ.get("TPROBE_TEST_TMP", tempfile.gettempdir())
        os.makedirs(base, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="pip_install_", dir=base)
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def test_installed_package_runs_without_pythonpath(self):
        venv = os.path.join(self.tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
        python, pip = os.path.join(venv, "bin", "python"), os.path.join(venv, "bin", "pip")
        r = subprocess.run([pip, "install", "."], cwd=ROOT, capture_output=True, text=True, timeout=900,
                           env=clean_env(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
                                         TPROBE_CMAKE_BUILD_DIR=BUILD_TREE))
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])

        where = subprocess.run([python, "-c", textwrap.dedent("""
            import json, tprobe, tprobe._native as n
            n.load()
            print(json.dumps([n.PACKAGE_DIR, n._library_path, n.bin_dir(), n.pipelines_dir()]))
        """)], cwd=self.tmp, env=clean_env(), capture_output=True, text=True)
        self.assertEqual(where.returncode, 0, where.stderr)
        package, library, bin_dir, pipelines = json.loads(where.stdout)
        self.assertTrue(package.startswith(venv + os.sep), package)  # the installed copy, not python/
        self.assertEqual(library, os.path.join(package, "lib", "libtprobe_torch.so"))
        # Its own libraries come from the package ($ORIGIN), never from the build tree.
        ldd = subprocess.run(["ldd", library], capture_output=True, text=True).stdout
        resolved = [os.path.realpath(line.split("=>")[1].split("(")[0].strip()) for line in ldd.splitlines() if "=> /" in line]
        self.assertIn(os.path.realpath(os.path.join(package, "lib", "libtprobe_capture.so.0")), resolved, ldd[:2000])
        self.assertEqual([p for p in resolved if p.startswith(os.path.realpath(BUILD_TREE) + os.sep)
                          and not p.startswith(os.path.realpath(venv) + os.sep)], [], ldd[:2000])
        self.assertEqual(bin_dir, os.path.join(package, "bin"))
        self.assertEqual(pipelines, os.path.join(package, "pipelines"))
        self.assertTrue(os.path.isfile(os.path.join(pipelines, "statistics.json")))
        shipped = sorted(os.listdir(bin_dir))
        self.assertIn("tprobe-run", shipped)
        self.assertIn("tprobe-config-check", shipped)
        self.assertEqual([n for n in shipped if not (n == "tprobe" or n.startswith("tprobe-"))], [])

        work = os.path.join(self.tmp, "train")
        os.makedirs(work)
        with open(os.path.join(work, "train.py"), "w") as f:
            f.write(TRAIN)
        with open(os.path.join(work, "config.json"), "w") as f:
            json.dump(default_config(), f)
        tprobe = os.path.join(venv, "bin", "tprobe")  # the console script: execs the package's bin/tprobe
        run = subprocess.run([tprobe, "run", "statistics", "--", python, "train.py"], cwd=work, env=clean_env(),
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        with open(os.path.join(work, "dump", "step0", "rank", "dump.json")) as f:
            dump = json.load(f)
        self.assertIn("Functional.linear.0.forward", dump["data"])

    def test_python_without_torch_is_refused(self):
        # A torch that does not import, as a pip that builds in isolation shows setup.py none.
        shadow = os.path.join(self.tmp, "shadow", "torch")
        os.makedirs(shadow)
        with open(os.path.join(shadow, "__init__.py"), "w") as f:
            f.write("raise ImportError('no torch here')\n")
        r = subprocess.run([sys.executable, "setup.py", "build"], cwd=ROOT,
                           env=clean_env(PYTHONPATH=os.path.dirname(shadow),
                                         TPROBE_CMAKE_BUILD_DIR=os.path.join(self.tmp, "nobuild")),
                           capture_output=True, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cannot import torch", r.stderr)
        self.assertIn("pip install --no-build-isolation .", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "nobuild")))  # refused before CMake


if __name__ == "__main__":
    unittest.main()
