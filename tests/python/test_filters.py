"""The config's step, scope, list and data_mode filters, and summary_mode md5, applied to a real
model (rank is in test_distributed.py)."""

import os
import unittest
import zlib

import tprobe_testing as tt
from test_structure import FORWARD_BACKWARD


class FilterTest(tt.CaptureTest):
    def test_step(self):
        run = self.run_script(FORWARD_BACKWARD, config=tt.default_config(step=[1, "3-4"]), steps=4)
        self.assertEqual(sorted(os.listdir(run.dump)), ["step1", "step3"])
        self.assertIn("Functional.linear.0.forward", run.data(1))

    def test_scope(self):
        config = tt.default_config(scope=["Functional.relu.0.forward", "Functional.linear.1.forward"])
        run = self.run_script(FORWARD_BACKWARD, config=config)
        self.assertEqual(sorted(run.data()), sorted([
            "Functional.relu.0.forward", "Functional.linear.1.forward",
            "Functional.relu.0.backward", "Functional.linear.1.backward"]))

    def test_list(self):
        run = self.run_script(FORWARD_BACKWARD, config=tt.default_config(list=["relu"]))
        self.assertEqual(sorted(run.data()), sorted([
            "Functional.relu.0.forward", "Functional.relu.1.forward",
            "Functional.relu.0.backward", "Functional.relu.1.backward"]))

    def test_list_l0(self):
        run = self.run_script(FORWARD_BACKWARD, config=tt.default_config(level="L0", list=["block.fc"]))
        self.assertEqual(sorted(run.data()), sorted([
            "Module.block.fc.Linear.forward.0", "Module.block.fc.Linear.backward.0",
            "Module.block.fc.Linear.parameters_grad.0"]))

    def test_a_filtered_run_has_the_stacks_of_the_entries_it_keeps(self):
        # The capture walks the Python stack only for an operator the filters keep
        # (tprobe_entry_wanted): the kept entries' stacks are the unfiltered run's.
        def stacks_by_entry(run):  # each run has its own directory, which the lines name
            return {n: [line.replace(run.dir, "RUN") for line in group[1]]
                    for group in run.load("stack.json").values() for n in group[0]}
        everything = stacks_by_entry(self.run_script(FORWARD_BACKWARD, name="all"))
        for name, config in (("list", tt.default_config(list=["relu"])),
                             ("scope", tt.default_config(scope=["Functional.relu.0.forward",
                                                                "Functional.linear.1.forward"]))):
            run = self.run_script(FORWARD_BACKWARD, config=config, name=name)
            forwards = sorted(n for n in run.data() if n.endswith(".forward"))
            kept = stacks_by_entry(run)
            self.assertEqual(sorted(kept), forwards)
            for entry in forwards:
                self.assertEqual(kept[entry], everything[entry], entry)
                self.assertTrue(any("train.py" in line for line in kept[entry]), entry)

    def test_data_mode_forward(self):
        run = self.run_script(FORWARD_BACKWARD, config=tt.default_config(data_mode=["forward"]))
        names = list(run.data())
        self.assertIn("Functional.linear.0.forward", names)
        self.assertFalse([n for n in names if n.endswith(".backward")], names)

    def test_data_mode_backward_input(self):
        run = self.run_script(FORWARD_BACKWARD, config=tt.default_config(data_mode=["backward", "input"]))
        data = run.data()
        backward = [n for n in data if n.endswith(".backward")]
        self.assertEqual(len(backward), 7)
        self.assertFalse([n for n in data if n.endswith(".forward")])
        for name in backward:
            self.assertTrue(data[name]["input"], name)
            self.assertNotIn("output", data[name], name)

    def test_summary_mode_md5(self):
        run = self.run_script(FORWARD_BACKWARD, config=tt.default_config(summary_mode="md5"))
        leaf = run.data()["Functional.linear.0.forward"]["input_args"][0]
        self.assertRegex(leaf["md5"], r"^[0-9a-f]{8}$")
        self.assertEqual(list(leaf)[-1], "md5")
        # msprobe's "md5" is the CRC-32 of the tensor's raw bytes.
        exec(tt.MODEL, scope := {})
        _, x, _ = scope["make"]()
        self.assertEqual(leaf["md5"], f"{zlib.crc32(x.numpy().tobytes()):08x}")


if __name__ == "__main__":
    unittest.main()
