"""bench/bench_torch.py --quick on the tiny GRU: the run ends with issue 16's table, every row
measured (a ratio against the baseline of the same run, a goal, PASS or OVER, never FAILED or
missing), and both limits printed. Only the shape is checked: the figures are the bench's to
report, not a test's to assert. Keeps the script from rotting between the runs that record figures."""

import os
import re
import shutil
import subprocess
import sys
import unittest

import tprobe_testing as tt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench", "bench_torch.py")
ROWS = ["statistics L1", "statistics mix", "md5 L1", "tensor L1, step barrier", "tensor L1, async"]
CELL = re.compile(r"\d+\.\d\dx <=\d+\.\d\dx( disk)?( sust \d+\.\d\dx)? (PASS|OVER)")


class BenchTorchSmokeTest(tt.CaptureTest):
    def test_quick_run_prints_every_row(self):
        result = subprocess.run([sys.executable, BENCH, "--quick", "--model", "tiny", "--tmp", self.tmp],
                                capture_output=True, text=True, timeout=300)
        out = result.stdout
        self.assertEqual(result.returncode, 0, out + result.stderr)
        table = out[out.index("tprobe / no-tool step time"):]
        self.assertIn("tiny", table.splitlines()[1])
        for row in ROWS:
            line = next((l for l in table.splitlines() if l.strip().startswith(row + " ")), None)
            self.assertIsNotNone(line, f"row {row!r} missing:\n{table}")
            cell = line.strip()[len(row):].strip()
            self.assertRegex(cell, CELL, f"row {row!r}:\n{out}")
        self.assertRegex(table, r"noise floor: .* tiny \d+\.\d{3}x \(\d+\.\d\d-\d+\.\d\d\); a row nearer its goal")
        self.assertRegex(table, r"disk: write \+ fsync of 32 MiB .*: \d+ / \d+ MB/s")
        # The file system's creation rate, and what a tensor row's files cost beyond their bytes.
        self.assertRegex(table, r"file creation: 200 files of 16 KiB created, written and closed: \d+ / \d+ files/s")
        self.assertRegex(out, r"  tensor  .*; its \d+ files at \d+ files/s \(create, write 16 KiB, close\) take \d+ ms: "
                              r"\d+\.\d\dx with their creation")
        self.assertRegex(table, r"read pass: .* \d+\.\d\d GB/s")
        self.assertRegex(table, r"tiny: operator data .* = \d+\.\d{3}x a [\d.]+ ms baseline step")
        # Each statistics row's own reads, from the capture's stats_bytes_read, as a floor.
        for config in ("statistics_L1", "statistics_mix", "md5"):
            self.assertRegex(table, rf"tiny {config}: [\d.]+ [KMG]?i?B a step read in place \(first-time contents\) "
                                    rf"in \d+\.\d ms = \d+\.\d{{3}}x its [\d.]+ ms baseline step with one reader "
                                    rf"\(measured \d+\.\d\dx\); at the capture's kernel \d+\.\d{{3}}x alone, "
                                    rf"\d+\.\d{{3}}x with its helper")
        # ... and at the capture's own statistics kernel, alone and with its helper (tprobe-bench-crc).
        self.assertRegex(table, r"the capture's statistics kernel \(tprobe-bench-crc, 64 MiB\): \d+\.\d\d GB/s on "
                                r"one thread, \d+\.\d\d GB/s with its helper thread")
        self.assertRegex(out, r"\n {18}read in place: [\d.]+ [KMG]?i?B a step \(\d+ tensors a step reused")
        # Both children run with the allocator's thresholds pinned, said in the first line, and
        # every measured row gives its steps' page faults (baseline/tool).
        self.assertIn("allocator pinned (MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 "
                      "in both children)", out.splitlines()[0])
        rows = [l for l in out.splitlines() if re.match(r"  (control|statistics_L1) +\d", l)]
        self.assertEqual(len(rows), 2, out)
        for line in rows:
            self.assertRegex(line, r" \d+(\.\dk)?/\d+(\.\dk)?  ", line)

    def test_model_args_reach_the_model(self):
        """--model-args are parsed as the example's own arguments, by the function the children use:
        a wrong one is refused before anything runs; a right one is run and named in the header."""
        bad = subprocess.run([sys.executable, BENCH, "--quick", "--model", "tiny", "--configs", "control",
                              "--tmp", self.tmp, "--model-args", "--no-such-flag 1"],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(bad.returncode, 2, bad.stdout + bad.stderr)
        self.assertIn("--model-args '--no-such-flag 1': not arguments of train_gru.py", bad.stderr)
        good = subprocess.run([sys.executable, BENCH, "--quick", "--model", "tiny", "--configs", "control",
                               "--tmp", self.tmp, "--model-args", "--batch 2"],
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(good.returncode, 0, good.stdout + good.stderr)
        self.assertIn("model arguments '--batch 2'", good.stdout)

    def test_gpt2_decoder_trains_under_the_bench(self):
        """--model gpt2 (issue 67's realistic GPU workload, bench/train_gpt2.py) runs through the bench
        with a small shape: a no-tool and a statistics L1 child, bf16 autocast on the CPU; and its
        loss falls over a few steps of its own loop, so the decoder (causal mask, tied head) learns."""
        small = "--layers 1 --d-model 32 --heads 2 --seq 16 --batch 2 --vocab 64"
        run = subprocess.run([sys.executable, BENCH, "--quick", "--model", "gpt2", "--configs", "statistics_L1",
                              "--tmp", self.tmp, "--model-args", small],
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertRegex(run.stdout, r"gpt2.*statistics_L1|statistics_L1.*gpt2", run.stdout)
        script = os.path.join(os.path.dirname(BENCH), "train_gpt2.py")
        own = subprocess.run([sys.executable, script, "--steps", "12", *small.split(), "--batch", "8"],
                             capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": os.path.dirname(BENCH)})
        self.assertEqual(own.returncode, 0, own.stdout + own.stderr)
        losses = [float(m) for m in re.findall(r"loss (\S+)", own.stdout)]
        self.assertEqual(len(losses), 12, own.stdout)
        self.assertLess(sum(losses[-3:]) / 3, losses[0], own.stdout)

    def test_against_measures_a_second_build_in_the_same_rounds(self):
        """--against DIR runs a third child per configuration on DIR's library and stage binaries:
        the header names DIR, each configuration with a tool gets that build's ratio and the per-round
        quotient (here the same build twice, so both are measured and positive); the control row,
        which has no tool, gets none. DIR/python/tprobe, where DIR has one, is the Python package of
        that build's children. A DIR without a build's lib/ and bin/ is refused before anything
        runs, naming the file it lacks."""
        # A build directory as --against wants it, made of the one ctest names (nothing guessed).
        build = os.path.join(self.tmp, "other-build")
        os.makedirs(build)
        os.symlink(os.path.dirname(os.path.abspath(os.environ["TPROBE_TORCH_LIBRARY"])), os.path.join(build, "lib"))
        os.symlink(os.path.abspath(tt.BIN_DIR), os.path.join(build, "bin"))

        def against(configs):
            """The bench's lines against `build`, and the index of the statistics_L1 row."""
            run = subprocess.run([sys.executable, BENCH, "--quick", "--model", "tiny", "--configs", configs,
                                  "--tmp", self.tmp, "--against", build], capture_output=True, text=True, timeout=300)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            lines = run.stdout.splitlines()
            return lines, next(i for i, l in enumerate(lines) if l.startswith("  statistics_L1 "))

        lines, row = against("control,statistics_L1")
        self.assertIn(f"against the build in {build}", lines[0])
        self.assertNotIn("with its own Python package", lines[0])
        self.assertRegex(lines[row + 1], rf"^ {{18}}against {re.escape(build)}: \d+\.\d{{3}}x \(\d+\.\d\d-\d+\.\d\d\); "
                                         r"this build / that one, per round: \d+\.\d{3} \(\d+\.\d{3}-\d+\.\d{3}, "
                                         r"\d of 2 rounds faster\)$")
        control = next(i for i, l in enumerate(lines) if l.startswith("  control "))
        self.assertNotIn("against", lines[control + 1])
        # DIR/python/tprobe, where there is one, is the package of that build's children: here one
        # that cannot be imported, so that only those children fail.
        shutil.copytree(os.path.join(os.path.dirname(BENCH), "..", "python", "tprobe"),
                        os.path.join(build, "python", "tprobe"))
        with open(os.path.join(build, "python", "tprobe", "__init__.py"), "a") as f:
            f.write("\nraise ImportError('the package of other-build')\n")
        lines, row = against("statistics_L1")
        self.assertIn(f"against the build in {build} with its own Python package", lines[0])
        self.assertNotIn("FAILED", lines[row])
        self.assertIn(f"against {build}: FAILED", lines[row + 1])
        missing = os.path.join(self.tmp, "no-build")
        os.makedirs(os.path.join(missing, "bin"))
        bad = subprocess.run([sys.executable, BENCH, "--quick", "--model", "tiny", "--against", missing],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(bad.returncode, 2, bad.stdout + bad.stderr)
        self.assertIn(f"--against {missing}: {missing}/lib/libtprobe_torch.so does not exist", bad.stderr)

    def test_against_msprobe_runs_its_debugger_in_the_same_rounds(self):
        """--against msprobe: the third child trains under msprobe.pytorch's PrecisionDebugger
        (here a stand-in that records its calls and, as msprobe does, logs to stdout) with the
        row's config.json and its own dump path, started, stopped and stepped each step; its
        ratio follows the row. Where msprobe cannot be imported, each row says so and the rest runs."""
        fake = os.path.join(self.tmp, "fake-msprobe")
        os.makedirs(os.path.join(fake, "msprobe", "pytorch"))
        open(os.path.join(fake, "msprobe", "__init__.py"), "w").close()
        calls = os.path.join(self.tmp, "msprobe-calls.txt")
        with open(os.path.join(fake, "msprobe", "pytorch", "__init__.py"), "w") as f:
            f.write(f"""import json
CALLS = {calls!r}
class PrecisionDebugger:
    def __init__(self, config_path=None, dump_path=None):
        with open(config_path) as f:
            task = json.load(f)["task"]
        self.log("init", task, config_path.endswith("-against.json"), dump_path.endswith("-against"))
    def log(self, *what):
        print("[INFO] msprobe: " + " ".join(map(str, what)), flush=True)  # msprobe's logger writes to stdout
        with open(CALLS, "a") as f:
            f.write(" ".join(map(str, what)) + "\\n")
    def start(self, model=None):
        self.log("start", type(model).__name__)
    def stop(self):
        self.log("stop")
    def step(self):
        self.log("step")
""")

        def run(pythonpath):
            env = {**os.environ, "PYTHONPATH": pythonpath + os.pathsep + os.environ.get("PYTHONPATH", "")}
            result = subprocess.run([sys.executable, BENCH, "--quick", "--model", "tiny", "--configs",
                                     "control,statistics_L1", "--tmp", self.tmp, "--against", "msprobe"],
                                    capture_output=True, text=True, timeout=300, env=env)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            lines = result.stdout.splitlines()
            self.assertIn("against msprobe's PrecisionDebugger", lines[0])
            return lines, next(i for i, l in enumerate(lines) if l.startswith("  statistics_L1 "))

        lines, row = run(fake)
        self.assertNotIn("FAILED", lines[row])
        self.assertRegex(lines[row + 1], r"^ {18}against msprobe: \d+\.\d{3}x \(\d+\.\d\d-\d+\.\d\d\); "
                                         r"this build / that one, per round: ")
        with open(calls) as f:
            logged = f.read().splitlines()
        self.assertEqual(logged[0], "init statistics True True")  # the row's config, its own dump
        starts = [c for c in logged if c.startswith("start ")]
        # --quick: 1 warm-up step and 2 rounds of 2 steps, each started, stopped and stepped.
        self.assertEqual(len(starts), 5, logged)
        self.assertEqual(logged[1:4], [starts[0], "stop", "step"])
        self.assertEqual(logged.count("step"), 5)
        broken = os.path.join(self.tmp, "broken-msprobe")
        os.makedirs(os.path.join(broken, "msprobe"))
        with open(os.path.join(broken, "msprobe", "__init__.py"), "w") as f:
            f.write("raise ImportError('no msprobe here')\n")
        lines, row = run(broken)
        self.assertNotIn("FAILED", lines[row])
        self.assertIn("against msprobe: FAILED: msprobe not importable (ImportError: no msprobe here)", lines[row + 1])

    def test_allocator_default_leaves_glibc_alone(self):
        """--allocator default pins nothing: the first line says glibc runs as it comes."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
        run = subprocess.run([sys.executable, BENCH, "--quick", "--model", "tiny", "--configs", "control",
                              "--tmp", self.tmp, "--allocator", "default"],
                             capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("allocator glibc's default", run.stdout.splitlines()[0])
        self.assertNotIn("MALLOC_", run.stdout.splitlines()[0])

    def test_pin_binds_the_training_threads(self):
        """--pin auto (the default) names the CPU both children train on after the warm-up; the
        parent refuses a child that reports any other CPUs, so a run that ends with status 0
        trained there. --pin none says the scheduler places them; a CPU this process may not use
        is refused before anything runs."""
        allowed = sorted(os.sched_getaffinity(0))
        run = subprocess.run([sys.executable, BENCH, "--quick", "--model", "tiny", "--configs", "control,statistics_L1",
                              "--tmp", self.tmp], capture_output=True, text=True, timeout=300)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        first = run.stdout.splitlines()[0]
        if len(allowed) > 1:
            cpu = int(re.search(r"training threads on CPU (\d+) after the warm-up", first).group(1))
            self.assertIn(cpu, allowed)
        else:
            self.assertIn("training threads placed by the scheduler", first)
        unpinned = subprocess.run([sys.executable, BENCH, "--quick", "--model", "tiny", "--configs", "control",
                                   "--tmp", self.tmp, "--pin", "none"], capture_output=True, text=True, timeout=300)
        self.assertEqual(unpinned.returncode, 0, unpinned.stdout + unpinned.stderr)
        self.assertIn("training threads placed by the scheduler", unpinned.stdout.splitlines()[0])
        bad = subprocess.run([sys.executable, BENCH, "--quick", "--model", "tiny", "--pin", str(max(allowed) + 1)],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(bad.returncode, 2, bad.stdout + bad.stderr)
        self.assertIn(f"--pin '{max(allowed) + 1}': not auto, none or one of the CPUs this process may use", bad.stderr)

    def test_quietest_cpu_counts_device_interrupts_only(self):
        """The CPU with the fewest device interrupts (numbered lines), whatever the local timer and
        the inter-processor interrupts say; the first allowed one when the file cannot be read."""
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        import bench_torch
        path = os.path.join(self.tmp, "interrupts")
        with open(path, "w") as f:
            f.write("           CPU0       CPU1       CPU2\n"
                    " 36:          0    4658283        10 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n"
                    " 40:         50          0        60 PCI-MSIX-0000:00:03.0   2-edge      virtio2-input.0\n"
                    "LOC:   99999999         1         1   Local timer interrupts\n"
                    "CAL:   99999999         1         1   Function call interrupts\n")
        self.assertEqual(bench_torch.quietest_cpu([0, 1, 2], path), 0)
        self.assertEqual(bench_torch.quietest_cpu([1, 2], path), 2)
        self.assertEqual(bench_torch.quietest_cpu([1, 2], os.path.join(self.tmp, "missing")), 1)


if __name__ == "__main__":
    unittest.main()
