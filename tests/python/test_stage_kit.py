"""A stage of your own, swapped in for tprobe-stats by a manifest's "exec", inside a real pipeline
around a real PyTorch training run: the Python kit's example (examples/stages/norm_alert.py,
python/tprobe/stage.py, written from docs/stage-protocol.md) and the C++ kit's
(examples/stages/norm_guard.cpp, build/bin/tprobe-example-norm-guard). The dump must be the one
the shipped pipeline (statistics.json, tensor.json) writes, barriers must still make step() wait
for the files, and a stage that does not answer barriers (protocol 1.0) must never be waited for."""

import json
import os
import re
import sys
import unittest

import tprobe_testing as tt
from test_step_barrier import READ_AFTER_STEP

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "stages")
NORM_ALERT = os.path.abspath(os.path.join(EXAMPLES, "norm_alert.py"))
NORM_GUARD = os.path.join(tt.BIN_DIR, "tprobe-example-norm-guard")

# A protocol-1.0 stage: its ack does not offer barriers (Stage(..., barriers=False)), so nothing
# may wait for it; it passes every record on.
LEGACY_STAGE = """#!/usr/bin/python3
import sys
sys.path.insert(0, PYTHON_DIR)
from tprobe.stage import Stage
Stage("legacy", "a 1.0 stage that answers no barrier", barriers=False).main(lambda record, stage: record)
"""

# A stage of one's own as a user writes it: it imports the kit and nothing sets its path up.
PLAIN_STAGE = """#!/usr/bin/python3
from tprobe.stage import Stage
Stage("plain", "passes every record on").main(lambda record, stage: record)
"""

# A stage that stops the capture through Stage.control at the first tensor it sees, and says
# whether the command was queued; it passes every record on.
STOPPING_STAGE = """#!/usr/bin/python3
import sys
sys.path.insert(0, PYTHON_DIR)
from tprobe.stage import Stage
sent = []
def handle(record, stage):
    if record.kind == "tensor" and not sent:
        sent.append(stage.control(record.run, "stop", reason="a test stage stops at its first tensor"))
        print(f"stopping-stage: control returned {sent[0]} at step {record.step}", file=sys.stderr, flush=True)
    return record
Stage("stopping", "stops the capture at the first tensor").main(handle)
"""


def tensor_leaves(node, out):
    """Every tensor leaf (a dict with Max) of a dump's data, in order."""
    if isinstance(node, dict):
        if "Max" in node and "type" in node:
            out.append(node)
        for value in node.values():
            tensor_leaves(value, out)
    elif isinstance(node, list):
        for value in node:
            tensor_leaves(value, out)
    return out


class StageKitTest(tt.CaptureTest):
    def manifest(self, name, stages):
        path = os.path.join(self.tmp, name + ".json")
        with open(path, "w") as f:
            json.dump({"description": name, "stages": stages}, f)
        return path

    def assert_same_dump(self, run, reference, steps):
        for step in range(steps):
            for name in ("dump.json", "stack.json", "construct.json"):
                # stack.json names the script by its path: the runs' directories differ.
                ours = json.loads(json.dumps(run.load(name, step)).replace(run.dir, "RUN"))
                theirs = json.loads(json.dumps(reference.load(name, step)).replace(reference.dir, "RUN"))
                self.assertEqual(ours, theirs, f"step {step}: {name}")
            ours = os.path.join(run.folder(step), "dump_tensor_data")
            theirs = os.path.join(reference.folder(step), "dump_tensor_data")
            if os.path.isdir(theirs):
                names = sorted(os.listdir(theirs))
                self.assertTrue(names)
                self.assertEqual(sorted(os.listdir(ours)), names, f"step {step}: tensor files")
                for n in names:
                    with open(os.path.join(ours, n), "rb") as a, open(os.path.join(theirs, n), "rb") as b:
                        self.assertEqual(a.read(), b.read(), n)
            # Complete: every tensor has its statistics (the capture, tprobe-stats or the writer
            # computed them), none left null.
            leaves = tensor_leaves(run.data(step), [])
            self.assertGreater(len(leaves), 10)
            for leaf in leaves:
                if leaf.get("dtype") != "torch.bool" and not leaf.get("uninitialized"):  # no values to count
                    self.assertIsNotNone(leaf["Max"], f"step {step}: a tensor without statistics: {leaf}")

    def swap_stats(self, exec_path, options, config, steps=2, script=tt.TRAIN, name="ours"):
        reference = self.run_script(script, config=config, steps=steps, name="reference",
                                    manifest="tensor.json" if config["task"] == "tensor" else "statistics.json")
        manifest = self.manifest(name, [
            {"name": "mine", "exec": exec_path, "inputs": ["capture"], "options": options},
            {"name": "writer", "stage": "writer", "inputs": ["mine"]},
        ])
        run = self.run_script(script, config=config, steps=steps, manifest=manifest, name=name)
        self.assertIn("taps: mine=", run.result.stderr)  # every stage, ours included, has a tap
        return run, reference

    def test_python_stage_for_stats_statistics(self):
        threshold = 2.0
        run, reference = self.swap_stats(NORM_ALERT, {"threshold": threshold}, tt.default_config())
        self.assert_same_dump(run, reference, 2)
        # It printed exactly the tensors whose norm exceeds the threshold, as the dump has them.
        printed = [float(m.group(1)) for m in re.finditer(r"^norm-alert: step \d+ rank -?\d+ \S+ \S+ norm=(\S+)$",
                                                             run.result.stdout, re.M)]
        expected = [leaf["Norm"] for step in (0, 1) for leaf in tensor_leaves(run.data(step), [])
                    if isinstance(leaf["Norm"], (int, float)) and leaf["Norm"] > threshold]
        self.assertTrue(expected)
        self.assertEqual(len(printed), len(expected), run.result.stdout)
        self.assertTrue(all(p > threshold for p in printed))
        self.assertIn("norm-alert: ", run.result.stderr)  # its summary line
        self.assertRegex(run.result.stderr, r"norm-alert: (\d+) records received, \1 sent")

    def test_python_stage_for_stats_tensor_task(self):
        # Task tensor: the capture sends the data without statistics; with tprobe-stats gone, the
        # writer computes them, so the dump is still the shipped pipeline's, tensor files included.
        run, reference = self.swap_stats(NORM_ALERT, {"threshold": 1e9}, tt.default_config(task="tensor"))
        self.assert_same_dump(run, reference, 2)
        self.assertNotIn("norm-alert: step", run.result.stdout)

    def test_python_stage_keeps_the_step_barrier(self):
        # step() returns once the writer wrote the step: the barrier crosses the Python stage.
        run, reference = self.swap_stats(NORM_ALERT, {}, tt.default_config(level="mix"), steps=3,
                                         script=READ_AFTER_STEP)
        self.assert_same_dump(run, reference, 3)
        with open(os.path.join(run.dir, "seen.json")) as f:
            seen = json.load(f)
        for step, files in enumerate(seen):
            self.assertIsNotNone(files["dump.json"], f"step {step}: no dump.json when step() returned")
            self.assertEqual(json.loads(files["dump.json"]), run.load("dump.json", step), f"step {step}")

    def test_cpp_stage_for_stats(self):
        run, reference = self.swap_stats(NORM_GUARD, {"limit": 1e30}, tt.default_config(task="tensor"))
        self.assert_same_dump(run, reference, 2)
        self.assertNotIn("stopping the capture", run.result.stdout)
        self.assertRegex(run.result.stderr, r"norm-guard: (\d+) records received, \1 sent")

    def test_cpp_stage_stops_the_capture(self):
        # A low limit: the guard names the first tensor above it and stops that capture through
        # the control endpoint of its session; the training runs on and succeeds, later steps are
        # not captured.
        manifest = self.manifest("guard", [
            {"name": "guard", "exec": NORM_GUARD, "inputs": ["capture"], "options": {"limit": 0.5}},
            {"name": "writer", "stage": "writer", "inputs": ["guard"]},
        ])
        run = self.run_script(tt.TRAIN, manifest=manifest, steps=3)
        self.assertEqual(run.result.stdout.count("stopping the capture"), 1, run.result.stdout)
        self.assertTrue(os.path.exists(os.path.join(run.folder(0), "dump.json")))
        self.assertFalse(os.path.exists(os.path.join(run.dump, "step2")), "the capture went on after stop")

    def python_stage(self, name, source):
        path = os.path.join(self.tmp, name + ".py")
        python_dir = os.path.dirname(os.path.dirname(os.path.abspath(__import__("tprobe").__file__)))
        with open(path, "w") as f:
            f.write(source.replace("PYTHON_DIR", repr(python_dir)))
        os.chmod(path, 0o755)
        return path

    def legacy_stage(self):
        return self.python_stage("legacy", LEGACY_STAGE)

    def test_python_stage_finds_tprobe_without_pythonpath(self):
        # tprobe run gives its stages (and their --describe) the PYTHONPATH it gives the command,
        # so a Python stage imports tprobe.stage with no PYTHONPATH set by the user.
        manifest = self.manifest("plain", [
            {"name": "plain", "exec": self.python_stage("plain", PLAIN_STAGE), "inputs": ["capture"]},
            {"name": "writer", "stage": "writer", "inputs": ["plain"]},
        ])
        run = self.run_script(tt.TRAIN, manifest=manifest, steps=2, env={"PYTHONPATH": ""}, timeout=120)
        self.assertRegex(run.result.stderr, r"plain: (\d+) records received, \1 sent")
        for step in (0, 1):
            self.assertIn("Functional.linear.0.forward", run.data(step))

    def test_python_stage_stops_the_capture(self):
        # Stage.control in the Python kit: the command reaches the capture through the control
        # endpoint its session record named; training runs on and succeeds, later steps are not
        # captured.
        manifest = self.manifest("stopping", [
            {"name": "stopping", "exec": self.python_stage("stopping", STOPPING_STAGE), "inputs": ["capture"]},
            {"name": "writer", "stage": "writer", "inputs": ["stopping"]},
        ])
        run = self.run_script(tt.TRAIN, manifest=manifest, steps=3)
        self.assertIn("stopping-stage: control returned True at step 0", run.result.stderr)
        self.assertTrue(os.path.exists(os.path.join(run.folder(0), "dump.json")))
        self.assertFalse(os.path.exists(os.path.join(run.dump, "step2")), "the capture went on after stop")

    def test_stage_without_barriers_is_never_waited_for(self):
        # After the capture and after tprobe-stats: neither waits for a stage whose ack does not
        # offer barriers (if one did, the step barrier would never be answered and step() would
        # hang until the pipeline deadline, detaching the capture: an incomplete dump).
        legacy = self.legacy_stage()
        config = tt.default_config()
        config["tprobe"] = {"pipeline_timeout_s": 600}
        reference = self.run_script(tt.TRAIN, config=config, steps=3, manifest="statistics.json", name="reference")
        for name, stages in {
            "first": [{"name": "legacy", "exec": legacy, "inputs": ["capture"]},
                      {"name": "writer", "stage": "writer", "inputs": ["legacy"]}],
            "after_stats": [{"name": "stats", "stage": "stats", "inputs": ["capture"]},
                            {"name": "legacy", "exec": legacy, "inputs": ["stats"]},
                            {"name": "writer", "stage": "writer", "inputs": ["legacy"]}],
        }.items():
            with self.subTest(name):
                run = self.run_script(tt.TRAIN, config=config, steps=3, manifest=self.manifest(name, stages),
                                      name=name, timeout=120)
                self.assert_same_dump(run, reference, 3)
                self.assertNotIn("detach", run.result.stderr)

    def test_a_failing_python_stage_is_named_and_the_training_runs_on(self):
        # A bug in the handler: the kit exits 111 with one fatal line; tprobe run stops the stages,
        # names ours and exits 111, and the training itself completes (its capture detaches).
        path = os.path.join(self.tmp, "broken.py")
        with open(path, "w") as f:
            f.write(LEGACY_STAGE.replace("PYTHON_DIR", repr(os.path.dirname(os.path.dirname(
                os.path.abspath(__import__("tprobe").__file__))))).replace(
                'Stage("legacy", "a 1.0 stage that answers no barrier", barriers=False).main(lambda record, stage: record)',
                'Stage("broken", "fails on the first tensor").main(lambda r, s: 1 / 0 if r.kind == "tensor" else r)'))
        os.chmod(path, 0o755)
        manifest = self.manifest("broken", [{"name": "mine", "exec": path, "inputs": ["capture"]},
                                            {"name": "writer", "stage": "writer", "inputs": ["mine"]}])
        # The capture reports the lost pipeline once, as an exception from the call that found it
        # (docs/pytorch.md, "When the pipeline fails"); a script that goes on finishes its training.
        script = tt.TRAIN.replace("    debugger.stop()\n    debugger.step()\n",
                                  "    try:\n        debugger.stop()\n        debugger.step()\n"
                                  "    except RuntimeError as e:\n        print('capture lost:', e)\n")
        self.assertIn("except RuntimeError", script)
        script += "\nopen('finished', 'w').close()\n"
        run = self.run_script(script, manifest=manifest, steps=2, expect_ok=False)
        self.assertEqual(run.result.returncode, 111, run.result.stderr)
        self.assertIn("broken: fatal: internal error: ZeroDivisionError", run.result.stderr)
        self.assertIn('stage "mine"', run.result.stderr)
        self.assertTrue(os.path.exists(os.path.join(run.dir, "finished")), run.result.stderr)


# A Python stage with typed options (tprobe.stage.Option's choices and required), no stream: at
# the end it prints the options it parsed as JSON.
TYPED_STAGE = """#!/usr/bin/python3
import json, sys
sys.path.insert(0, PYTHON_DIR)
from tprobe.stage import Stage, Option
def handle(record, stage):
    return record
handle.finish = lambda stage: print(json.dumps(stage.options), flush=True)
Stage("typed", "typed options", [
    Option("mode", "string", "a", "how", choices=["a", "b"]),
    Option("name", "string", None, "who", required=True),
    Option("kinds", "list", ["x"], "which", choices=["x", "y"]),
    Option("level", "int", 1, "how much", min=0, max=3),
], has_input=False, has_output=False).main(handle)
"""


class TypedOptionsTest(unittest.TestCase):
    """choices and required in the Python kit, meant and worded as the C++ stages' (stage_main.h,
    stage_option_check): --describe declares them, the stage refuses a bad value with exit 100 and
    one fatal line, and tprobe run refuses a manifest that breaks them before starting anything.
    The C++ kit's stage (norm-guard) parses through stage_main() under its own name."""

    def setUp(self):
        import tempfile
        self.tmp = tempfile.mkdtemp(prefix="tprobe-typed-")
        self.addCleanup(__import__("shutil").rmtree, self.tmp, True)
        python_dir = os.path.dirname(os.path.dirname(os.path.abspath(__import__("tprobe").__file__)))
        source = TYPED_STAGE.replace("PYTHON_DIR", repr(python_dir))
        self.stage = os.path.join(self.tmp, "typed.py")  # run here, without a stream
        self.sink = os.path.join(self.tmp, "typed_sink.py")  # in a manifest: a sink of the capture
        for path, text in ((self.stage, source),
                           (self.sink, source.replace("has_input=False, has_output=False", "has_output=False"))):
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)

    def run_stage(self, *args, command=None):
        import subprocess
        return subprocess.run((command or [sys.executable, self.stage]) + list(args), capture_output=True,
                              text=True, timeout=60)

    def test_describe_declares_choices_and_required(self):
        r = self.run_stage("--describe")
        self.assertEqual(r.returncode, 0, r.stderr)
        options = {o["name"]: o for o in json.loads(r.stdout)["options"]}
        self.assertEqual(options["mode"]["choices"], ["a", "b"])
        self.assertEqual(options["kinds"]["choices"], ["x", "y"])
        self.assertIs(options["name"]["required"], True)
        self.assertEqual(options["name"]["default"], "")
        for name in ("mode", "kinds", "level", "hwm"):
            self.assertNotIn("required", options[name], name)
        for name in ("name", "level", "hwm"):
            self.assertNotIn("choices", options[name], name)
        help = self.run_stage("--help")
        self.assertEqual(help.returncode, 0, help.stderr)
        self.assertIn("(one of a, b)", help.stdout)
        self.assertIn("(required)", help.stdout)

    def test_values_within_choices_are_parsed(self):
        r = self.run_stage("--name", "me")
        self.assertEqual(r.returncode, 0, r.stderr)
        options = json.loads(r.stdout)
        self.assertEqual((options["mode"], options["name"], options["kinds"]), ("a", "me", ["x"]))
        r = self.run_stage("--name", "me", "--mode", "b", "--kinds", "y,x", "--kinds", "y")
        self.assertEqual(r.returncode, 0, r.stderr)
        options = json.loads(r.stdout)
        self.assertEqual((options["mode"], options["kinds"]), ("b", ["y,x", "y"]))

    def test_bad_values_are_refused_in_the_c_plus_plus_stages_words(self):
        for args, message in [
            ((), "--name is required"),
            (("--mode", "b"), "--name is required"),
            (("--name", "me", "--mode", "c"), '--mode must be one of a, b, got "c"'),
            (("--name", "me", "--kinds", "x,z"), '--kinds must be one of x, y, got "z"'),
            (("--name", "me", "--kinds", "y", "--kinds", "w"), '--kinds must be one of x, y, got "w"'),
            (("--name", "me", "--level", "4"), "--level must be in [0, 3], got 4"),
            (("--name", "me", "--hwm", "0"), "--hwm must be in [1, 1000000000], got 0"),
        ]:
            with self.subTest(args):
                r = self.run_stage(*args)
                self.assertEqual(r.returncode, 100, r.stderr)
                self.assertEqual(r.stderr, f"typed: fatal: {message}\n")
                self.assertEqual(r.stdout, "")
        # The same wording as a C++ stage's, prefix aside.
        for command, message in [
            ([os.path.join(tt.BIN_DIR, "tprobe-compare"), "a", "b", "-o", self.tmp, "--match", "loose"],
             'tprobe-compare: fatal: --match must be one of auto, name, got "loose"\n'),
            ([os.path.join(tt.BIN_DIR, "tprobe-compare"), "a", "b"], "tprobe-compare: fatal: --output is required\n"),
        ]:
            r = self.run_stage(command=command)
            self.assertEqual((r.returncode, r.stderr), (100, message))

    def manifest(self, options):
        path = os.path.join(self.tmp, "typed.json")
        with open(path, "w") as f:
            json.dump({"description": "typed", "stages": [
                {"name": "mine", "exec": self.sink, "inputs": ["capture"], "options": options}]}, f)
        return path

    def test_launcher_refuses_a_manifest_that_breaks_a_python_stage_s_choices_or_required(self):
        import subprocess
        marker = os.path.join(self.tmp, "ran")
        for options, message in [
            ({"name": "me", "mode": "c"}, 'stage "mine": option "mode" must be one of a, b, got "c"'),
            ({"name": "me", "kinds": ["x", "q"]}, 'option "kinds" must be one of x, y, got "q"'),
            ({"mode": "a"}, 'stage "mine": option "name" is required'),
        ]:
            with self.subTest(options):
                r = subprocess.run([os.path.join(tt.BIN_DIR, "tprobe"), "run", self.manifest(options), "--",
                                    "/usr/bin/touch", marker], capture_output=True, text=True, timeout=120)
                self.assertEqual(r.returncode, 100, r.stderr)
                self.assertIn(message, r.stderr)
                self.assertFalse(os.path.exists(marker), "the command ran")

    def test_cpp_kit_stage_parses_through_stage_main_under_its_own_name(self):
        guard = os.path.join(tt.BIN_DIR, "tprobe-example-norm-guard")
        r = self.run_stage("--input", "ipc:///tmp/x", "--limit", "-1", command=[guard])
        self.assertEqual((r.returncode, r.stderr), (100, "norm-guard: fatal: --limit must be in [0, inf], got -1\n"))
        r = self.run_stage("--input", "ipc:///tmp/x", "--limit", "big", command=[guard])
        self.assertEqual((r.returncode, r.stderr), (100, 'norm-guard: fatal: --limit must be a number, got "big"\n'))
        r = self.run_stage(command=[guard])
        self.assertEqual(r.returncode, 100)
        self.assertRegex(r.stderr, r"^norm-guard: fatal: .*--input.*\n$")
        r = self.run_stage("--describe", command=[guard])
        self.assertEqual(r.returncode, 0, r.stderr)
        table = json.loads(r.stdout)
        self.assertEqual(table["stage"], "norm-guard")
        self.assertEqual([o["name"] for o in table["options"]], ["limit", "hwm", "tap-payload"])
        r = self.run_stage("--help", command=[guard])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("norm-guard", r.stdout)
        self.assertNotIn("tprobe-norm-guard", r.stdout)


class LostRecordsTest(unittest.TestCase):
    """Lossless, checked (docs/stage-protocol.md, "Losses"), in both kits' real processes: a
    producer that says numbered and skips a seq, or whose eos counts more records than came, ends
    the stage with exit 111 and one line naming it and the first missing seq."""

    def setUp(self):
        import tempfile
        self.tmp = tempfile.mkdtemp(prefix="tprobe-lost-")
        self.addCleanup(__import__("shutil").rmtree, self.tmp, True)

    def feed(self, command, seqs, eos_records, numbered=True):
        import subprocess
        import zmq
        from tprobe.stage import decode_header, encode_header
        endpoint = f"ipc://{self.tmp}/in"
        read_fd, write_fd = os.pipe()
        proc = subprocess.Popen(command + ["--input", endpoint, "--producers", "1", "--ready-fd", str(write_fd)],
                                pass_fds=(write_fd,), stderr=subprocess.PIPE, text=True)
        os.close(write_fd)
        with os.fdopen(read_fd) as ready:
            self.assertEqual(ready.readline(), "\n", "the stage never said ready")
        ctx = zmq.Context()
        try:
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.RCVTIMEO, 30000)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint)
            meta = {"name": "lossy capture", "host": os.uname().nodename, "pid": os.getpid()}
            if numbered:
                meta["numbered"] = True
            sock.send_multipart([encode_header({"kind": "hello", "meta": meta})])
            self.assertEqual(decode_header(sock.recv_multipart()[0])["kind"], "ack")
            for seq in seqs:
                sock.send_multipart([encode_header({"kind": "flush", "seq": seq})])
            sock.send_multipart([encode_header({"kind": "eos", "meta": {"records": eos_records, "dropped": 0}})])
            self.assertEqual(decode_header(sock.recv_multipart()[0])["kind"], "ack")
        finally:
            ctx.destroy(linger=0)
        _, err = proc.communicate(timeout=60)
        return proc.returncode, err

    def stages(self):
        python_stage = os.path.join(self.tmp, "sink.py")
        python_dir = os.path.dirname(os.path.dirname(os.path.abspath(__import__("tprobe").__file__)))
        with open(python_stage, "w") as f:
            f.write("import sys\nsys.path.insert(0, %r)\nfrom tprobe.stage import Stage\n"
                    "Stage('sink', 'takes everything', has_output=False).main(lambda r, s: None)\n" % python_dir)
        return {"python kit": [sys.executable, python_stage], "tprobe-null": [os.path.join(tt.BIN_DIR, "tprobe-null")]}

    def test_a_numbered_producer_s_gap_is_named(self):
        for kit, command in self.stages().items():
            with self.subTest(kit):
                code, err = self.feed(command, [1, 2, 5, 6], 4)
                self.assertEqual(code, 111, err)
                self.assertIn(f"2 records that lossy capture (pid {os.getpid()}) sent never arrived on ipc://", err)
                self.assertIn("(the first: seq 3); what came is written", err)
                self.assertEqual(len([l for l in err.splitlines() if "fatal" in l]), 1, err)

    def test_an_eos_that_counts_more_than_came_is_a_loss_and_a_whole_stream_is_not(self):
        for kit, command in self.stages().items():
            with self.subTest(kit):
                code, err = self.feed(command, [7, 9, 12], 4, numbered=False)  # not numbered: seq unchecked
                self.assertEqual(code, 111, err)
                self.assertIn("1 record that lossy capture", err)
                self.assertNotIn("the first: seq", err)
                code, err = self.feed(command, [1, 2, 3], 3)
                self.assertEqual(code, 0, err)
                self.assertNotIn("never arrived", err)


if __name__ == "__main__":
    unittest.main()
