"""The training comes first (issue 11): in direct mode (PrecisionDebugger starts its own pipeline)
a stage killed or stopped at a seeded random point never hangs the training script, which is told
once (a warning by default, a RuntimeError with tprobe.on_pipeline_failure "raise") and runs to its
end; every dump.json left on disk parses. Bad input fails before the first step with one line
naming it: the config file, its dump_path, a save() name. `tprobe run … -- python3 train.py` needs
no PYTHONPATH.
"""

import json
import os
import random
import signal
import subprocess
import textwrap
import time
import unittest

from tprobe_testing import BIN_DIR, MODEL, PIPELINES, PYTHON, TRAIN, CaptureTest, default_config

TIMEOUT_S = 2

# Trains STEPS steps of ~20 ms, catching what the debugger raises, and reports how long the
# longest step took.
FAULT_TRAIN = textwrap.dedent("""
    import sys, time
    from tprobe import PrecisionDebugger
    from model import make
    import torch.nn.functional as F
    import torch
    model, x, y = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    debugger = PrecisionDebugger(config_path="./config.json")
    print("started", flush=True)
    caught, longest = 0, 0.0
    for step in range(STEPS):
        t0 = time.monotonic()
        debugger.start(model)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        try:
            debugger.stop()
            debugger.step()
        except RuntimeError as e:
            caught += 1
            print("caught:", e, file=sys.stderr)
        time.sleep(0.02)
        longest = max(longest, time.monotonic() - t0)
    try:
        debugger.close()
    except RuntimeError as e:
        caught += 1
        print("caught at close:", e, file=sys.stderr)
    print(f"done {STEPS} steps; longest step {longest * 1000:.0f} ms; caught {caught}", flush=True)
""")


def stage_pid(script_pid, program):
    """The pid of `program` started by the launcher that the script started, or None."""
    parents = {}
    names = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                line = f.read()
        except OSError:
            continue
        comm = line[line.index("(") + 1:line.rindex(")")]
        ppid = int(line[line.rindex(")") + 2:].split()[1])
        parents[int(entry)] = ppid
        names[int(entry)] = comm
    for pid, comm in names.items():
        if program.startswith(comm) and parents.get(parents.get(pid, -1), -1) == script_pid:
            try:  # the launcher also runs each binary with --describe first: not the stage
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"--ready-fd" in f.read():
                        return pid
            except OSError:
                pass
    return None


class DirectModeFaults(CaptureTest):
    def test_killed_or_stopped_stages_never_hang_the_training(self):
        rng = random.Random(20261125)
        runs, landed = 12, 0
        for run in range(runs):
            stage = ("tprobe-writer", "tprobe-stats")[run % 2]
            sig = (signal.SIGKILL, signal.SIGSTOP)[(run // 2) % 2]
            mode = ("raise", "warn")[(run // 4) % 2]
            delay = rng.uniform(0.0, 0.8)
            with self.subTest(run=run, stage=stage, signal=sig.name, mode=mode, delay=round(delay, 3)):
                landed += self.one_fault_run(run, stage, sig, mode, delay)
        print(f"direct mode: {runs} runs, {landed} faults landed during training")
        self.assertGreaterEqual(landed, runs * 3 // 4)

    def one_fault_run(self, run, stage, sig, mode, delay):
        directory = os.path.join(self.tmp, f"fault{run}")
        os.makedirs(directory)
        with open(os.path.join(directory, "model.py"), "w") as f:
            f.write(MODEL)
        config = default_config()
        config["tprobe"] = {"pipeline_timeout_s": TIMEOUT_S, "on_pipeline_failure": mode}
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(config, f)
        with open(os.path.join(directory, "train.py"), "w") as f:
            f.write(FAULT_TRAIN.replace("STEPS", "60"))
        env = dict(os.environ)
        env.pop("TPROBE_ENDPOINT", None)
        if stage == "tprobe-stats":
            # The shipped statistics pipeline has no tprobe-stats (the capture computes in place):
            # direct mode reads the same manifest name from a folder where it has one.
            pipelines = os.path.join(directory, "pipelines")
            os.makedirs(pipelines)
            with open(os.path.join(PIPELINES, "testing", "stats-writer.json")) as f:
                two_stages = f.read()
            with open(os.path.join(pipelines, "statistics.json"), "w") as f:
                f.write(two_stages)
            env["TPROBE_PIPELINES"] = pipelines
        t0 = time.monotonic()
        proc = subprocess.Popen([PYTHON, "train.py"], cwd=directory, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(proc.stdout.readline().strip(), "started")
            victim = None
            deadline = time.monotonic() + 30
            while victim is None and time.monotonic() < deadline:
                victim = stage_pid(proc.pid, stage)
                time.sleep(0.01)  # the pipeline starts at the first start(); this only finds its pid
            self.assertIsNotNone(victim, f"no {stage} under the script's launcher")
            time.sleep(delay)  # the fault's point in time
            os.kill(victim, sig)
            out, err = proc.communicate(timeout=90)
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        elapsed = time.monotonic() - t0
        self.assertEqual(proc.returncode, 0, err)
        self.assertIn("done 60 steps", out, err)
        longest_ms = int(out.split("longest step ")[1].split(" ms")[0])
        caught = int(out.split("caught ")[1])
        self.assertLess(longest_ms, TIMEOUT_S * 1000 + 1500, err)
        self.assertLess(elapsed, 60, err)
        landed = "the pipeline stopped reading" in err or "tprobe: fatal: stage" in err
        if landed:
            self.assertLessEqual(err.count("the pipeline stopped reading"), 1, err)  # said once
            self.assertEqual(caught, 1 if mode == "raise" else 0, err)
            if mode == "warn":
                self.assertNotIn("caught", err)
        for root, _, files in os.walk(os.path.join(directory, "dump")):
            for name in files:
                if name.endswith(".json"):
                    with open(os.path.join(root, name), encoding="utf-8") as f:
                        json.load(f)  # every file on disk parses
        return 1 if landed else 0


class TrainingGoesOnByDefault(CaptureTest):
    """Issue 60: an unmodified script (no tprobe section in its config) whose writer dies mid-run
    trains to its end: nothing raises; one line names the cause and the first step not dumped,
    and at exit one line counts the steps that were not dumped."""

    def test_a_killed_writer_is_warned_once_and_counted(self):
        directory = os.path.join(self.tmp, "default")
        os.makedirs(directory)
        with open(os.path.join(directory, "model.py"), "w") as f:
            f.write(MODEL)
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(default_config(), f)
        with open(os.path.join(directory, "train.py"), "w") as f:
            f.write(FAULT_TRAIN.replace("STEPS", "40").replace('print("started", flush=True)', "")
                    .replace("    time.sleep(0.02)\n", "    time.sleep(0.02)\n    print('step', step, flush=True)\n"))
        env = dict(os.environ)
        env.pop("TPROBE_ENDPOINT", None)
        proc = subprocess.Popen([PYTHON, "train.py"], cwd=directory, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            for line in proc.stdout:  # the dump runs, five steps done
                if line.strip() == "step 5":
                    break
            else:
                self.fail("the script ended before its step 5")
            victim = stage_pid(proc.pid, "tprobe-writer")
            self.assertIsNotNone(victim)
            os.kill(victim, signal.SIGKILL)
            out, err = proc.communicate(timeout=90)
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        self.assertEqual(proc.returncode, 0, err)
        self.assertIn("done 40 steps", out, err)
        self.assertIn("caught 0", out, err)  # warn is the default: nothing raised
        stopped = [line for line in err.splitlines() if "the pipeline stopped reading" in line]
        self.assertEqual(len(stopped), 1, err)
        self.assertIn("tprobe-writer", stopped[0])  # the cause, named
        first = int(stopped[0].split("no step from step ")[1].split(" ")[0])
        self.assertGreaterEqual(first, 5, err)
        self.assertNotIn("records were not delivered", err)
        counted = [line for line in err.splitlines() if "the dump is incomplete" in line]
        self.assertEqual(len(counted), 1, err)
        n = 40 - first
        self.assertIn(f"{n} steps not dumped (steps {first}-39)", counted[0], err)
        for step in range(first):  # what came before is there
            self.assertTrue(os.path.exists(os.path.join(directory, "dump", f"step{step}", "rank", "dump.json")))


class PipelineGoneBeforeTheFirstStart(CaptureTest):
    """The pipeline can fail between construction and the first start() (CI once killed a stage
    8 ms after launch): start() then raised and ended a loop that guards only stop() and step().
    The failure is now said at the next stop() (once, raise mode) or warned (warn mode)."""

    def test_said_at_stop_not_at_start(self):
        pipelines = os.path.join(self.tmp, "pipelines")
        os.makedirs(pipelines)
        with open(os.path.join(PIPELINES, "statistics.json")) as f:
            manifest = json.load(f)
        manifest["stages"][0]["options"] = {"no-such-option": 1}  # the launcher refuses it: exit 100
        with open(os.path.join(pipelines, "statistics.json"), "w") as f:
            json.dump(manifest, f)
        for mode in ("raise", "warn"):
            with self.subTest(mode=mode):
                config = default_config()
                config["tprobe"] = {"on_pipeline_failure": mode}
                run = self.run_script(FAULT_TRAIN.replace('print("started", flush=True)', ""), config=config,
                                      env={"TPROBE_PIPELINES": pipelines}, steps=3, name=f"gone-{mode}",
                                      timeout=120)
                out, err = run.result.stdout, run.result.stderr
                self.assertIn("done 3 steps", out, err)
                self.assertIn("the pipeline did not start", err)
                self.assertIn(f"caught {1 if mode == 'raise' else 0}", out, err)
                self.assertEqual(err.count("the pipeline did not start"), 1, err)


class BadInputFailsFirst(CaptureTest):
    """Each of these failed late, or with a message naming nothing, before."""

    def construct(self, config_text, **kwargs):
        """Runs PrecisionDebugger(...) on a config file with this text; returns the process."""
        path = os.path.join(self.tmp, "config.json")
        with open(path, "w") as f:
            f.write(config_text)
        script = "from tprobe import PrecisionDebugger\nPrecisionDebugger(config_path=%r)\nprint('constructed')\n" % path
        env = dict(os.environ)
        env.pop("TPROBE_ENDPOINT", None)
        return subprocess.run([PYTHON, "-c", script], cwd=self.tmp, env=env, capture_output=True, text=True,
                              timeout=120)

    def test_a_bad_config_file_is_named(self):
        for text, words in (("{not json", "invalid JSON"), ("", "invalid JSON"), ("[1, 2]", "JSON object")):
            with self.subTest(text=text):
                r = self.construct(text)
                self.assertNotEqual(r.returncode, 0)
                self.assertNotIn("constructed", r.stdout)
                last = r.stderr.strip().splitlines()[-1]
                self.assertIn("RuntimeError: tprobe: " + os.path.join(self.tmp, "config.json"), last)
                self.assertIn(words, last)

    def test_an_unusable_dump_path_fails_at_construction(self):
        a_file = os.path.join(self.tmp, "a_file")
        with open(a_file, "w") as f:
            f.write("x")
        for dump_path, words in ((a_file, "exists and is not a directory"),
                                 ("/sys/tprobe-dump-test", "cannot be created in /sys")):
            with self.subTest(dump_path=dump_path):
                r = self.construct(json.dumps(default_config(dump_path=dump_path)))
                self.assertNotEqual(r.returncode, 0)
                self.assertNotIn("constructed", r.stdout)
                self.assertIn('field "dump_path"', r.stderr)
                self.assertIn(words, r.stderr)

    def test_save_refuses_names_the_writer_cannot_use(self):
        script = textwrap.dedent("""
            import torch
            from tprobe import PrecisionDebugger
            debugger = PrecisionDebugger(config_path="./config.json")
            debugger.start()
            for bad in ["a/b", "/abs", "a b", "x" * 300]:
                try:
                    debugger.save(torch.ones(2), bad)
                    print("accepted", bad)
                except ValueError as e:
                    print("refused:", e)
            debugger.save(torch.ones(2), "good")
            debugger.stop()
            debugger.step()
        """)
        run = self.run_script(script, config=default_config(level="debug"), timeout=120)
        self.assertEqual(run.result.stdout.count("refused:"), 4, run.result.stdout + run.result.stderr)
        self.assertNotIn("accepted", run.result.stdout)
        self.assertIn("good.0.debug", run.data())  # the dump goes on

    def test_tprobe_run_needs_no_pythonpath(self):
        env = {"PYTHONPATH": ""}
        run = self.run_script(TRAIN, manifest="statistics.json", env=env, timeout=120)
        self.assertIn("Functional.linear.0.forward", run.data())


if __name__ == "__main__":
    unittest.main()
