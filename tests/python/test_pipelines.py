"""The three lines under `tprobe run` (statistics and tensor manifests) and in direct mode, the
debugger's API (save, model checks, singleton) and its error messages."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import tprobe_testing as tt
from test_structure import FORWARD_BACKWARD

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class PipelineTest(tt.CaptureTest):
    def test_tprobe_run_statistics(self):
        run = self.run_script(tt.TRAIN, manifest="statistics.json", steps=2)
        self.assertIn("Functional.linear.0.forward", run.data(1))
        self.assertFalse(os.path.exists(os.path.join(run.folder(), "dump_tensor_data")))
        self.assertIn("tprobe: done", run.result.stderr)

    def test_statistics_pipeline_is_the_writer_alone_and_writes_what_tprobe_stats_would(self):
        # The capture computes statistics (and md5) in place, so the shipped pipeline sends its
        # records straight to the writer: one hop and one barrier stop fewer. The dump must be the
        # one the pipeline with tprobe-stats between writes (pipelines/testing/stats-writer.json).
        with open(os.path.join(tt.PIPELINES, "statistics.json")) as f:
            stages = json.load(f)["stages"]
        self.assertEqual([(s["stage"], s["inputs"]) for s in stages], [("writer", ["capture"])])
        for level, summary in (("L1", "statistics"), ("mix", "md5")):
            config = tt.default_config(level=level, summary_mode=summary)
            runs = [self.run_script(tt.TRAIN, config=config, manifest=manifest, steps=2, name=f"{level}-{name}")
                    for name, manifest in (("direct", "statistics.json"), ("staged", "testing/stats-writer.json"))]
            for step in range(2):
                for file in ("dump.json", "stack.json", "construct.json"):
                    # stack.json names the script by its path: the runs' directories differ.
                    direct, staged = (json.loads(json.dumps(r.load(file, step)).replace(r.dir, "RUN")) for r in runs)
                    self.assertEqual(direct, staged, f"{level} step {step}: {file}")
            self.assertIn("Functional.linear.0.forward", runs[0].data(1))
            if summary == "md5":
                leaf = runs[0].data(0)["Functional.linear.0.forward"]["output"][0]
                self.assertRegex(leaf["md5"], "^[0-9a-f]{8}$")

    def test_tprobe_run_tensor(self):
        # The tensor manifest switches the task: the script's config says statistics.
        run = self.run_script(tt.TRAIN, manifest="tensor.json")
        dump = run.load()
        self.assertEqual(dump["task"], "tensor")
        leaf = dump["data"]["Functional.linear.0.forward"]["output"][0]
        self.assertTrue(os.path.isfile(os.path.join(dump["dump_data_dir"], leaf["data_name"])))

    def test_direct_mode_is_quiet_and_complete(self):
        run = self.run_script(tt.TRAIN, steps=3)
        for step in range(3):
            self.assertIn("Functional.linear.2.backward", run.data(step))
        self.assertNotIn("stages ready", run.result.stderr)
        self.assertEqual(run.result.stderr.strip(), "")

    def test_constructor_overrides(self):
        script = tt.TRAIN.replace('PrecisionDebugger(config_path="./config.json")',
                                  'PrecisionDebugger(config_path="./config.json", task="tensor", '
                                  'dump_path="./other", level="L0", step=[1])')
        run = self.run_script(script, steps=2)
        self.assertEqual(os.listdir(os.path.join(run.dir, "other")), ["step1"])
        with open(os.path.join(run.dir, "other", "step1", "rank", "dump.json")) as f:
            dump = json.load(f)
        self.assertEqual((dump["task"], dump["level"]), ("tensor", "L0"))

    def test_save(self):
        script = """
import torch
from tprobe import PrecisionDebugger
debugger = PrecisionDebugger(config_path="./config.json", level="debug")
for step in range(STEPS):
    x = torch.arange(6.0, requires_grad=True)
    debugger.save(x, "x")
    debugger.save({"double": x * 2, "n": [1, 2.5]}, "d", save_backward=False)
    w = torch.ones(2, requires_grad=True)
    # Its gradient entry is the nest with every leaf null, those that need no grad stay null.
    debugger.save({"x": x.detach(), "w": w, "n": [x.detach()[:2], 3], "e": []}, "nest")
    (x * 3).sum().backward()
    (w * 4).sum().backward()
    debugger.save(x.grad, "g")  # save_backward of what needs no grad: msprobe writes g_grad as null
    debugger.step()
"""
        run = self.run_script(script, steps=2)
        for step in (0, 1):
            # Level debug writes debug.json, as msprobe's single-point save does.
            self.assertEqual(sorted(os.listdir(run.folder(step))), ["construct.json", "debug.json", "stack.json"])
            data = run.data(step)
            # A gradient entry comes right after its forward one: msprobe writes it at save() time.
            self.assertEqual(list(data), ["x.0.debug", "x_grad.0.debug", "d.0.debug", "nest.0.debug",
                                          "nest_grad.0.debug", "g.0.debug", "g_grad.0.debug"])
            self.assertIsNone(data["g_grad.0.debug"])
            nest = data["nest_grad.0.debug"]
            self.assertEqual(list(nest), ["x", "w", "n", "e"])
            self.assertEqual((nest["x"], nest["n"], nest["e"]), (None, [None, None], []))
            self.assertEqual((nest["w"]["Min"], nest["w"]["Max"], nest["w"]["shape"]), (4.0, 4.0, [2]))
            self.assertEqual(data["g.0.debug"]["Max"], 3.0)
            self.assertEqual(data["x.0.debug"]["Max"], 5.0)
            self.assertAlmostEqual(data["x.0.debug"]["Norm"], 55 ** 0.5, places=5)
            self.assertEqual(data["d.0.debug"]["double"]["Max"], 10.0)
            self.assertEqual(data["d.0.debug"]["n"], [{"type": "int", "value": 1}, {"type": "float", "value": 2.5}])
            self.assertEqual((data["x_grad.0.debug"]["Min"], data["x_grad.0.debug"]["Max"]), (3.0, 3.0))

    def test_direct_mode_ends_when_started_with_sigint_ignored(self):
        # Direct mode ends its pipeline with SIGINT; an inherited "ignore SIGINT" must not make the
        # script hang at exit (subprocess.run's timeout would fail the test).
        run = self.run_script(tt.TRAIN, ignore_sigint=True, timeout=120)
        self.assertIn("Functional.linear.0.forward", run.data())

    def test_level_l0_needs_the_model(self):
        script = tt.TRAIN.replace("debugger.start(model)", "debugger.start()")
        run = self.run_script(script, config=tt.default_config(level="L0"), expect_ok=False)
        self.assertNotEqual(run.result.returncode, 0)
        self.assertIn("tprobe: level L0 needs the model", run.result.stderr)

    def test_bad_config_names_the_field(self):
        run = self.run_script(tt.TRAIN, config=tt.default_config(level="L7"), expect_ok=False)
        self.assertNotEqual(run.result.returncode, 0)
        self.assertIn("level", run.result.stderr)
        self.assertIn("config.json", run.result.stderr)

    def test_a_task_not_built_is_refused_not_dumped_as_statistics(self):
        # msprobe configs name tasks tprobe does not build yet; the debugger used to start the
        # statistics pipeline for them and write a statistics dump. Now it refuses at construction,
        # one line naming the file and the task, before anything is dumped.
        built = "statistics, tensor, overflow_check, grad_probe, free_benchmark, structure, monitor"
        # exception_dump is MindSpore's (level L2 there); run_ut (msprobe's pre-check) captures
        # nothing: the line says how to dump and replay it.
        expected = {"exception_dump": f'./config.json: task "exception_dump" is not built in tprobe yet (built: {built})',
                    "run_ut": './config.json: task "run_ut" replays a dump, it captures nothing: dump with task '
                              '"tensor" (or "statistics") at level L1, then run `tprobe precheck DUMP -config '
                              './config.json`'}
        for task, level, section in (("exception_dump", "L2", {}), ("run_ut", "L1", {"white_list": []})):
            with self.subTest(task=task):
                config = {"task": task, "dump_path": "./dump", "level": level, task: section}
                run = self.run_script(tt.TRAIN, config=config, expect_ok=False, name=f"unbuilt-{task}")
                self.assertNotEqual(run.result.returncode, 0)
                self.assertIn(expected[task], run.result.stderr)
                self.assertFalse(os.path.exists(run.dump), os.listdir(run.dir))
        # A task given as PrecisionDebugger's argument: the message names the user's file, not the
        # temporary copy that carries the argument.
        script = tt.TRAIN.replace('PrecisionDebugger(config_path="./config.json")',
                                  'PrecisionDebugger(config_path="./config.json", task="exception_dump", level="L2")')
        run = self.run_script(script, expect_ok=False, name="unbuilt-argument")
        self.assertIn('./config.json (with the arguments of PrecisionDebugger): task "exception_dump" is not built',
                      run.result.stderr)
        self.assertNotIn("tprobe-config-", run.result.stderr)
        self.assertFalse(os.path.exists(run.dump))

    def test_a_task_the_manifest_cannot_do_is_refused(self):
        # The script's own config (the launcher has no --config to check) asks for overflow_check
        # under pipelines/statistics.json: the capture refuses it, naming the manifest and its tasks.
        config = {"task": "overflow_check", "dump_path": "./dump", "level": "L1",
                  "overflow_check": {"overflow_nums": 1}}
        run = self.run_script(tt.TRAIN, config=config, manifest="statistics.json", expect_ok=False)
        self.assertNotEqual(run.result.returncode, 0)
        manifest = os.path.join(tt.PIPELINES, "statistics.json")
        self.assertIn(f'./config.json: task "overflow_check" is not one that {manifest} can do (its tasks: '
                      "statistics, tensor, structure)", run.result.stderr)
        self.assertFalse(os.path.exists(run.dump))

    def test_direct_mode_picks_a_manifest_that_does_the_task(self):
        # Direct mode starts its own pipeline with a manifest chosen by task: each built task's
        # manifest must list it among its "tasks" (or force it with capture.task).
        from tprobe import _pipeline
        for task in ("statistics", "tensor", "overflow_check", "grad_probe", "free_benchmark", "structure"):
            with open(os.path.join(tt.PIPELINES, _pipeline.manifest_for(task))) as f:
                manifest = json.load(f)
            tasks = manifest.get("tasks") or [manifest.get("capture", {}).get("task")]
            self.assertIn(task, tasks, _pipeline.manifest_for(task))

    def test_import_without_the_library(self):
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), TPROBE_TORCH_LIBRARY="/nonexistent/lib.so")
        ok = subprocess.run([sys.executable, "-c", "import tprobe"], env=env, capture_output=True, text=True)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        bad = subprocess.run([sys.executable, "-c", "import tprobe; tprobe.PrecisionDebugger()"], env=env,
                             capture_output=True, text=True)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("TPROBE_TORCH_LIBRARY=/nonexistent/lib.so does not exist", bad.stderr)

    def test_a_library_that_cannot_load_says_why(self):
        # The loader's own reason, which torch 2.x hides behind "Could not load this library".
        with tempfile.TemporaryDirectory(dir=os.environ.get("TPROBE_TEST_TMP")) as d:
            fake = os.path.join(d, "libtprobe_torch.so")
            with open(fake, "w") as f:
                f.write("not a library\n" * 400)
            env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), TPROBE_TORCH_LIBRARY=fake)
            bad = subprocess.run([sys.executable, "-c", "import tprobe; tprobe.PrecisionDebugger()"], env=env,
                                 capture_output=True, text=True)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn(f"tprobe: cannot load {fake}", bad.stderr)
        self.assertIn("invalid ELF header", bad.stderr)


if __name__ == "__main__":
    unittest.main()
