"""Entry names and counts for a known model at levels L1, L0 and mix; construct.json and
stack.json; counts restarting at 0 every step (parameters_grad's k does not, as in msprobe)."""

import json
import os
import unittest

import torch
import torch.utils.checkpoint

import tprobe_testing as tt

# Forward and backward only: optimizer internals differ between torch versions.
FORWARD_BACKWARD = """
from tprobe import PrecisionDebugger
from model import make
import torch.nn.functional as F
model, x, y = make()
debugger = PrecisionDebugger(config_path="./config.json")
for step in range(STEPS):
    debugger.start(model)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    debugger.stop()
    debugger.step()
"""

L1_ENTRIES = [
    "Functional.linear.0.forward", "Functional.relu.0.forward", "Functional.linear.1.forward",
    "Functional.relu.1.forward", "Torch.add.0.forward", "Functional.linear.2.forward",
    "Functional.cross_entropy_loss.0.forward",
    "Functional.cross_entropy_loss.0.backward", "Functional.linear.2.backward", "Torch.add.0.backward",
    "Functional.relu.1.backward", "Functional.linear.1.backward", "Functional.relu.0.backward",
    "Functional.linear.0.backward",
]

L0_ENTRIES = [
    "Module.inp.Linear.forward.0", "Module.block.fc.Linear.forward.0", "Module.block.act.ReLU.forward.0",
    "Module.block.Block.forward.0", "Module.out.Linear.forward.0",
    "Module.out.Linear.backward.0", "Module.out.Linear.parameters_grad.0", "Module.block.Block.backward.0",
    "Module.block.act.ReLU.backward.0", "Module.block.fc.Linear.backward.0",
    "Module.block.fc.Linear.parameters_grad.0", "Module.inp.Linear.backward.0",
    "Module.inp.Linear.parameters_grad.0",
]


# A custom autograd.Function and a reentrant checkpoint around the model's first linear.
SCALED_AND_CHECKPOINTED = """
import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from tprobe import PrecisionDebugger
from model import make

class Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.relu(x) * 2
    @staticmethod
    def backward(ctx, g):
        return g * 2

model, x, y = make()
debugger = PrecisionDebugger(config_path="./config.json")
debugger.start(model)
h = torch.utils.checkpoint.checkpoint(model.inp, Scaled.apply(x.requires_grad_()), use_reentrant=True)
loss = F.cross_entropy(model.out(model.block(h)), y)
loss.backward()
debugger.stop()
debugger.step()
"""


def input_stats(entry):
    """The first input's shape and statistics."""
    return {k: entry["input_args"][0][k] for k in ("shape", "Max", "Min", "Mean", "Norm")}


def output_stats(entry):
    """The first output's shape and statistics, without requires_grad (a recomputation has grad
    where the first pass under no_grad had none)."""
    return {k: entry["output"][0][k] for k in ("shape", "Max", "Min", "Mean", "Norm")}


def without_autograd_seed(names):
    # loss.backward() makes its seed gradient with torch.ones_like: an operator like any other.
    return [n for n in names if not n.startswith("Torch.ones_like.")]


class StructureTest(tt.CaptureTest):
    def test_l1_names_counts_and_steps(self):
        run = self.run_script(FORWARD_BACKWARD, steps=2)
        for step in (0, 1):
            data = run.data(step)
            self.assertEqual(without_autograd_seed(list(data)), L1_ENTRIES, f"step {step}")
        self.assertEqual(run.load("construct.json"), {})
        dump = run.load()
        self.assertEqual((dump["task"], dump["level"], dump["framework"], dump["dump_data_dir"]),
                         ("statistics", "L1", "pytorch", None))
        # Backward entries: inputs are the output gradients, outputs the input gradients.
        self.assertEqual(len(run.data()["Functional.linear.0.backward"]["output"]), 3)
        self.assertEqual(set(run.data()["Functional.relu.0.backward"]), {"input", "output"})

    def test_stack_json(self):
        run = self.run_script(FORWARD_BACKWARD)
        stacks = run.load("stack.json")
        names = [n for group in stacks.values() for n in group[0]]
        forwards = [n for n in run.data() if n.endswith(".forward")]
        self.assertEqual(sorted(names), sorted(forwards))  # every forward once, no backward
        linear0 = next(group[1] for group in stacks.values() if "Functional.linear.0.forward" in group[0])
        # Innermost first: nn.Linear's forward, then up to the training script.
        self.assertIn("torch/nn/modules/linear.py", linear0[0])
        self.assertIn("return F.linear(input, self.weight, self.bias)", linear0[0])
        script = [line for line in linear0 if "train.py" in line]
        self.assertEqual(len(script), 1)
        self.assertRegex(script[0], r"^File .*/train\.py, line 9, in <module>, \n loss = F\.cross_entropy\(model\(x\), y\)$")
        self.assertFalse(any("/tprobe/" in line for group in stacks.values() for line in group[1]))
        # linear.1 and linear.2 run from other lines (the block, the net): three stacks for three lines.
        groups = [g[0] for g in stacks.values() if any(n.startswith("Functional.linear.") for n in g[0])]
        self.assertEqual(sum(len(g) for g in groups), 3)

    def test_module_stacks_begin_at_the_module_call(self):
        # A module's stack is walked by the capture when the hook announces the entry: it begins
        # at torch's module call, without tprobe's own frames or torch.ops' Python entry.
        run = self.run_script(FORWARD_BACKWARD, config=tt.default_config(level="mix"))
        stacks = run.load("stack.json")
        block = next(group[1] for group in stacks.values() if "Module.block.Block.forward.0" in group[0])
        self.assertIn("torch/nn/modules/module.py", block[0])
        self.assertFalse(any("/tprobe/" in line or "torch/_ops.py" in line for line in block), block)
        self.assertEqual(len([line for line in block if "train.py" in line]), 1, block)
        names = [n for group in stacks.values() for n in group[0]]
        self.assertEqual(sorted(names), sorted(n for n in run.data() if n.endswith(".forward") or ".forward." in n))

    def test_l0_modules_parameters_and_construct(self):
        run = self.run_script(FORWARD_BACKWARD, config=tt.default_config(level="L0"), steps=2)
        for step in (0, 1):
            # Forward and backward counts restart every step; parameters_grad's k does not (msprobe).
            expected = [n.replace("parameters_grad.0", f"parameters_grad.{step}") for n in L0_ENTRIES]
            self.assertEqual(list(run.data(step)), expected, f"step {step}")
        data = run.data()
        fc = data["Module.block.fc.Linear.forward.0"]
        self.assertEqual(list(fc), ["input_args", "input_kwargs", "output", "parameters", "is_recompute"])
        self.assertEqual(sorted(fc["parameters"]), ["bias", "weight"])
        self.assertEqual(fc["parameters"]["weight"]["shape"], [8, 8])
        grads = data["Module.block.fc.Linear.parameters_grad.0"]
        self.assertEqual(sorted(grads), ["bias", "weight"])
        self.assertEqual(grads["weight"][0]["shape"], [8, 8])
        # The first module's input needs no grad: its backward output is null.
        self.assertEqual(data["Module.inp.Linear.backward.0"]["output"], [None])
        self.assertEqual(data["Module.block.Block.backward.0"]["output"][0]["shape"], [5, 8])
        construct = run.load("construct.json")
        self.assertEqual(construct["Module.block.fc.Linear.forward.0"], "Module.block.Block.forward.0")
        self.assertEqual(construct["Module.block.act.ReLU.forward.0"], "Module.block.Block.forward.0")
        self.assertIsNone(construct["Module.block.Block.forward.0"])
        self.assertEqual(construct["Module.block.fc.Linear.backward.0"], "Module.block.Block.backward.0")
        self.assertIsNone(construct["Module.inp.Linear.forward.0"])
        # msprobe 8.3.3's dumps: a module without parameters has "parameters": {}, and parameter
        # gradients are not nodes of construct.json.
        self.assertEqual(data["Module.block.act.ReLU.forward.0"]["parameters"], {})
        self.assertEqual([n for n in construct if "parameters_grad" in n], [])
        self.assertEqual(sorted(construct), sorted(n for n in data if "parameters_grad" not in n))

    def test_mix_parents(self):
        run = self.run_script(FORWARD_BACKWARD, config=tt.default_config(level="mix"))
        data = run.data()
        names = without_autograd_seed(list(data))
        self.assertEqual(sorted(names), sorted(L1_ENTRIES + L0_ENTRIES))
        # An operator comes before the module that contains it (the module's entry is written when it returns).
        self.assertLess(names.index("Functional.linear.1.forward"), names.index("Module.block.fc.Linear.forward.0"))
        self.assertLess(names.index("Module.block.fc.Linear.forward.0"), names.index("Module.block.Block.forward.0"))
        construct = run.load("construct.json")
        expected = {
            "Functional.linear.0.forward": "Module.inp.Linear.forward.0",
            "Functional.relu.0.forward": None,  # torch.relu in Net.forward, outside any submodule
            "Functional.linear.1.forward": "Module.block.fc.Linear.forward.0",
            "Functional.relu.1.forward": "Module.block.act.ReLU.forward.0",
            "Torch.add.0.forward": "Module.block.Block.forward.0",
            "Module.block.fc.Linear.forward.0": "Module.block.Block.forward.0",
            "Functional.cross_entropy_loss.0.forward": None,
            "Functional.linear.2.backward": "Module.out.Linear.backward.0",
            "Torch.add.0.backward": "Module.block.Block.backward.0",
            "Functional.relu.1.backward": "Module.block.act.ReLU.backward.0",
            "Module.block.act.ReLU.backward.0": "Module.block.Block.backward.0",
        }
        for name, parent in expected.items():
            self.assertEqual(construct[name], parent, name)

    def test_task_structure_and_the_data_modes_of_one_direction_as_msprobe_writes_them(self):
        # msprobe 8.3.3 (its dumps of a model of every kind of module, checked field by field):
        # task structure writes construct.json and stack.json and leaves dump.json's data {};
        # data_mode ["backward"] leaves the forward entries out of dump.json and keeps them, the
        # operators' too, in construct.json and stack.json.
        mix = self.run_script(FORWARD_BACKWARD, config=tt.default_config(level="mix"), name="all")
        config = tt.default_config(level="L1", task="structure")
        del config["statistics"]
        structure = self.run_script(FORWARD_BACKWARD, config=config, name="structure")
        dump = structure.load()
        self.assertEqual((dump["task"], dump["level"], dump["data"]), ("structure", "mix", {}))
        self.assertEqual(structure.load("construct.json"), mix.load("construct.json"))
        def stacked(run):
            return sorted(n for group in run.load("stack.json").values() for n in group[0])
        self.assertEqual(stacked(structure), stacked(mix))

        backward = self.run_script(FORWARD_BACKWARD, config=tt.default_config(level="mix", data_mode=["backward"]),
                                   name="backward")
        names = list(backward.data())
        self.assertEqual(names, [n for n in mix.data() if not n.endswith(".forward") and ".forward." not in n])
        self.assertIn("Module.out.Linear.parameters_grad.0", names)
        self.assertEqual(backward.load("construct.json"), mix.load("construct.json"))
        self.assertEqual(stacked(backward), stacked(mix))

        # data_mode ["forward"]: the backward entries are not in dump.json, but construct.json
        # keeps their nodes (msprobe's backward_data_collect updates it before anything is
        # analyzed); no gradient is read for them.
        forward = self.run_script(FORWARD_BACKWARD, config=tt.default_config(level="mix", data_mode=["forward"]),
                                  name="forward")
        self.assertEqual(list(forward.data()), [n for n in mix.data() if n.endswith(".forward") or ".forward." in n])
        self.assertEqual(forward.load("construct.json"), mix.load("construct.json"))
        self.assertEqual(stacked(forward), stacked(mix))

    def test_a_module_scope_and_a_list_at_mix_take_what_runs_inside_the_module(self):
        # msprobe 8.3.3's begin_module / end_module (its dumps of a larger model, checked): a range
        # that starts at a module starts when the module begins, so its submodules (announced
        # before it, when each returns) are in it; at mix, list ["Block"] dumps the block with
        # everything inside it, whatever the names, and the backward of those.
        config = tt.default_config(level="L0", scope=["Module.block.Block.forward.0", "Module.block.Block.forward.0"])
        forwards = [n for n in self.run_script(FORWARD_BACKWARD, config=config, name="scope").data() if ".forward." in n]
        self.assertEqual(forwards, ["Module.block.fc.Linear.forward.0", "Module.block.act.ReLU.forward.0",
                                    "Module.block.Block.forward.0"])
        listed = self.run_script(FORWARD_BACKWARD, config=tt.default_config(level="mix", list=["Block"]), name="list")
        data = listed.data()
        self.assertEqual([n for n in data if n.endswith(".forward") or ".forward." in n], [
            "Functional.linear.1.forward", "Module.block.fc.Linear.forward.0", "Functional.relu.1.forward",
            "Module.block.act.ReLU.forward.0", "Torch.add.0.forward", "Module.block.Block.forward.0"])
        self.assertEqual(sorted(n for n in data if n.endswith(".backward") or ".backward." in n), sorted([
            "Functional.linear.1.backward", "Functional.relu.1.backward", "Torch.add.0.backward",
            "Module.block.fc.Linear.backward.0", "Module.block.act.ReLU.backward.0", "Module.block.Block.backward.0"]))
        # construct.json keeps every node, those the list left out too (msprobe's update_construct
        # runs before its filters); stack.json only what was dumped.
        full = self.run_script(FORWARD_BACKWARD, config=tt.default_config(level="mix"), name="full")
        self.assertEqual(listed.load("construct.json"), full.load("construct.json"))
        stacked = sorted(n for group in listed.load("stack.json").values() for n in group[0])
        self.assertEqual(stacked, sorted(n for n in data if n.endswith(".forward") or ".forward." in n))

    def test_op_depth_goes_deeper(self):
        # TPROBE_OP_DEPTH=2 also dumps what runs inside each operator, under the Aten prefix.
        run = self.run_script(FORWARD_BACKWARD, env={"TPROBE_OP_DEPTH": "2"})
        names = list(run.data())
        self.assertIn("Functional.linear.0.forward", names)
        self.assertTrue(any(n.startswith("Aten.") for n in names), names)

    def test_operators_inside_an_autograd_function_are_the_outermost(self):
        # A Python autograd.Function's apply is a RecordFunction without a schema: the operators its
        # forward calls are dumped as msprobe dumps them (checkpoint's forward is one such function),
        # and the engine's gradient sums between nodes are still not.
        data = self.run_script(SCALED_AND_CHECKPOINTED).data()
        forwards = [n for n, e in data.items() if n.endswith(".forward") and not e["is_recompute"]]
        self.assertEqual(forwards[:3], ["Functional.relu.0.forward", "Torch.mul.0.forward", "Functional.linear.0.forward"])
        # The rest is the unwrapped model's: its residual x is used twice (the engine sums two
        # gradients into it), and no entry comes of that sum.
        self.assertEqual(without_autograd_seed(forwards[3:]), [
            "Functional.linear.1.forward", "Functional.relu.1.forward", "Torch.add.0.forward",
            "Functional.linear.2.forward", "Functional.cross_entropy_loss.0.forward"])
        self.assertEqual([n for n in data if n.endswith(".backward")][:5], [
            "Functional.cross_entropy_loss.0.backward", "Functional.linear.2.backward", "Torch.add.0.backward",
            "Functional.relu.1.backward", "Functional.linear.1.backward"])

    def test_recomputation_in_backward_is_dumped_with_is_recompute(self):
        # What a Python Function's backward runs is a recomputation, as msprobe's is_recomputation
        # says (a `backward` called from torch/autograd/function.py): the reentrant checkpoint's
        # forward run again, and the custom Function's own backward (`g * 2`). Those operators are
        # dumped as forward entries, counted on, with is_recompute true, and the recomputed
        # linear gets its backward from the inner backward pass. msprobe 8.3.3 dumps the same
        # three (as Functional.linear.3, its backward and Tensor.__mul__.1); tprobe also shows
        # the checkpoint's detach and the engine's is_same_size, as it would anywhere.
        # torch 1.13's engine checks a Python Function's gradient with at::is_same_size, an
        # operator; torch 2.x compares the sizes without one.
        data = self.run_script(SCALED_AND_CHECKPOINTED).data()
        recomputed = [n for n, e in data.items() if e.get("is_recompute") is True]
        expected = ["Torch.detach.0.forward", "Functional.linear.3.forward", "Torch.is_same_size.0.forward",
                    "Torch.mul.1.forward"]
        if "Torch.is_same_size.0.forward" not in data and not torch.__version__.startswith("1."):
            expected.remove("Torch.is_same_size.0.forward")
        self.assertEqual(recomputed, expected)
        names = list(data)
        self.assertLess(names.index("Functional.linear.3.forward"), names.index("Functional.linear.3.backward"))
        self.assertLess(names.index("Functional.linear.3.backward"), names.index("Torch.mul.1.forward"))
        # The recomputation computes what the first pass did (which ran without grad).
        self.assertEqual(output_stats(data["Functional.linear.3.forward"]), output_stats(data["Functional.linear.0.forward"]))
        self.assertIs(data["Functional.linear.3.forward"]["output"][0]["requires_grad"], True)
        self.assertGreater(data["Functional.linear.3.backward"]["input"][0]["Norm"], 0)

        run = self.run_script(SCALED_AND_CHECKPOINTED, config=tt.default_config(level="mix"), name="mix")
        data, construct = run.data(), run.load("construct.json")
        self.assertIs(data["Module.inp.Linear.forward.0"]["is_recompute"], False)
        self.assertIs(data["Module.inp.Linear.forward.1"]["is_recompute"], True)
        self.assertEqual(construct["Functional.linear.3.forward"], "Module.inp.Linear.forward.1")
        self.assertEqual(construct["Functional.linear.3.backward"], "Module.inp.Linear.backward.1")
        self.assertIn("Module.inp.Linear.backward.1", data)
        self.assertIs(data["Module.block.Block.forward.0"]["is_recompute"], False)

    def test_non_reentrant_checkpoint_recomputes_inside_a_node(self):
        # use_reentrant=False recomputes from a saved-tensor unpack hook inside the node that
        # unpacks (AddmmBackward0, whose operators are otherwise not observed), under a
        # saved_tensors_hooks context (python/tprobe/_recompute.py). msprobe 8.3.3 dumps the same
        # linear.3 and Module.inp.Linear.forward.1 there (flagged only on torch 2.x, where its
        # check finds recompute_fn on the stack).
        script = SCALED_AND_CHECKPOINTED.replace("Scaled.apply(x.requires_grad_()), use_reentrant=True",
                                                 "x.requires_grad_(), use_reentrant=False")
        # torch 2.1+ stops the recomputation early (checkpoint's early_stop): a pack hook raises as
        # addmm saves the last tensor the node needs, so linear.3 ends without its output, as an
        # operator that raised, and so does the module running it (test below).
        early_stop = hasattr(torch.utils.checkpoint, "set_checkpoint_early_stop")
        data = self.run_script(script).data()
        self.assertEqual([n for n, e in data.items() if e.get("is_recompute") is True], ["Functional.linear.3.forward"])
        recomputed, first = data["Functional.linear.3.forward"], data["Functional.linear.0.forward"]
        self.assertEqual(input_stats(recomputed), input_stats(first))
        if early_stop:
            self.assertEqual(recomputed["output"], [])
        else:
            self.assertEqual(output_stats(recomputed), output_stats(first))
        # The backward went on to the end: the first linear's backward is whole.
        self.assertEqual(len(data["Functional.linear.0.backward"]["output"]), 3)
        self.assertEqual(without_autograd_seed([n for n, e in data.items() if e.get("is_recompute") is False]), [
            "Functional.linear.0.forward", "Functional.linear.1.forward", "Functional.relu.0.forward",
            "Torch.add.0.forward", "Functional.linear.2.forward", "Functional.cross_entropy_loss.0.forward"])

        run = self.run_script(script, config=tt.default_config(level="mix"), name="mix")
        data, construct = run.data(), run.load("construct.json")
        self.assertIs(data["Module.inp.Linear.forward.1"]["is_recompute"], True)
        self.assertEqual(construct["Functional.linear.3.forward"], "Module.inp.Linear.forward.1")
        self.assertEqual(len(data["Module.inp.Linear.forward.1"]["output"]), 0 if early_stop else 1)
        self.assertIn("Module.inp.Linear.parameters_grad.0", data)
        # The recomputed module ended with its context: no parent names a node that is not there.
        self.assertLessEqual({p for p in construct.values() if p}, set(construct))
        # Outside a backward, a saved_tensors_hooks context changes nothing.
        script = FORWARD_BACKWARD.replace("    loss = F.cross_entropy(model(x), y)", """\
    import torch
    with torch.autograd.graph.save_on_cpu():
        loss = F.cross_entropy(model(x), y)""")
        self.assertEqual(without_autograd_seed(self.run_script(script, name="save_on_cpu").data()), L1_ENTRIES)

    def test_a_module_whose_forward_raised_ends_there(self):
        """A module whose forward raises gets no forward hook call, and torch 2.1+'s non-reentrant
        checkpoint ends each recomputation that way. Its operators keep it as their parent; the
        modules and operators after it do not (before, it stayed the parent of everything after
        it in the step; msprobe 8.3.3 does the same, and dumps no operator after the raise). It
        is dumped as an operator that raised: inputs and parameters, no output, no stack."""
        script = """
import torch
import torch.nn as nn
from tprobe import PrecisionDebugger

RAISE = [False]
class Stop(Exception):
    pass
def pack(t):
    if RAISE[0]:
        raise Stop()
    return t

class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
    def forward(self, x):
        return self.fc(x)

class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.head = nn.Linear(4, 2)
    def forward(self, x):
        RAISE[0] = True
        try:
            self.inner(x)  # raises in fc's addmm; caught here, inside a running module
        except Exception:
            pass
        RAISE[0] = False
        return self.head(self.inner(x))

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.outer = Outer()
    def forward(self, x):
        return self.outer(x)

torch.manual_seed(0)
model = Net()
x = torch.randn(3, 4, requires_grad=True)
debugger = PrecisionDebugger(config_path="./config.json")
debugger.start(model)
with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    RAISE[0] = True
    try:
        model.outer.head(x)  # raises; caught outside every module
    except Exception:
        pass
    RAISE[0] = False
    loss = model(x).sum()
loss.backward()
with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    RAISE[0] = True
    try:
        model.outer.head(x)  # raises; no module hook after it: closed by stop()
    except Exception:
        pass
debugger.stop()
debugger.step()
"""
        for level in ("mix", "L0"):
            run = self.run_script(script, config=tt.default_config(level=level), name=level)
            data, construct, stacks = run.data(), run.load("construct.json"), run.load("stack.json")
            o, i, fc, head = ("Module.outer.Outer", "Module.outer.inner.Inner", "Module.outer.inner.fc.Linear",
                              "Module.outer.head.Linear")
            expected = {
                f"{head}.forward.0": None,  # raised at the top: closed by the next module's hook
                f"{o}.forward.0": None,
                f"{i}.forward.0": f"{o}.forward.0",
                f"{fc}.forward.0": f"{i}.forward.0",  # raised inside Outer: closed by inner's next call
                f"{i}.forward.1": f"{o}.forward.0",
                f"{fc}.forward.1": f"{i}.forward.1",
                f"{head}.forward.1": f"{o}.forward.0",
                f"{o}.backward.0": None,
                f"{head}.backward.1": f"{o}.backward.0",
                f"{i}.backward.1": f"{o}.backward.0",
                f"{fc}.backward.1": f"{i}.backward.1",
                f"{head}.forward.2": None,
            }
            self.assertEqual({k: v for k, v in construct.items() if k.startswith("Module.")}, expected, level)
            self.assertLessEqual({p for p in construct.values() if p}, set(construct), level)
            for raised in (f"{head}.forward.0", f"{i}.forward.0", f"{fc}.forward.0", f"{head}.forward.2"):
                self.assertEqual(data[raised]["output"], [], f"{level} {raised}")
                self.assertEqual(data[raised]["input_args"][0]["shape"], [3, 4], f"{level} {raised}")
                self.assertNotIn(raised, [n for names, _ in stacks.values() for n in names], level)
            self.assertEqual(sorted(data[f"{fc}.forward.0"]["parameters"]), ["bias", "weight"])
            self.assertNotIn(f"{i}.backward.0", data)
            self.assertEqual(len(data[f"{fc}.backward.1"]["output"]), 1)
            if level == "mix":
                self.assertEqual(construct["Functional.linear.0.forward"], f"{head}.forward.0")
                self.assertEqual(construct["Functional.linear.1.forward"], f"{fc}.forward.0")
                self.assertEqual(construct["Functional.linear.2.forward"], f"{fc}.forward.1")
                self.assertEqual(construct["Functional.linear.3.forward"], f"{head}.forward.1")
                self.assertEqual(data["Functional.linear.1.forward"]["output"], [])

    def test_parameter_gradients_as_msprobe_dumps_them(self):
        """parameters_grad.{k} as msprobe 8.3 writes it (its dumps of this script, checked by hand):
        param.grad after each backward pass has added to it (so a gradient-accumulation loop's
        second entry holds the sum); k counted for the run, not per step; nothing for a module
        whose forward never ran (its weight used directly by its parent) or that is unused."""
        script = """
import json
import os
import torch
from tprobe import PrecisionDebugger

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.side = torch.nn.Linear(4, 4)
        self.unused = torch.nn.Linear(4, 4)
    def forward(self, x):
        return self.fc(x) @ self.side.weight

torch.manual_seed(0)
model = Net()
debugger = PrecisionDebugger(config_path="./config.json")
seen = []
for step in range(STEPS):
    debugger.start(model)
    for micro in range(2):
        model(torch.ones(2, 4) * (micro + 1)).sum().backward()
        # L0 dumps modules only: these operators are not in the dump.
        seen.append({"weight": model.fc.weight.grad.max().item(), "bias": model.fc.bias.grad.max().item()})
    debugger.stop()
    debugger.step()
    model.zero_grad()
json.dump(seen, open("seen.json", "w"))
"""
        run = self.run_script(script, config=tt.default_config(level="L0"), steps=2)
        with open(os.path.join(run.dir, "seen.json")) as f:
            seen = json.load(f)
        for step in (0, 1):
            data = run.data(step)
            grads = [n for n in data if ".parameters_grad." in n]
            self.assertEqual(grads, [f"Module.fc.Linear.parameters_grad.{2 * step}",
                                     f"Module.fc.Linear.parameters_grad.{2 * step + 1}"], f"step {step}")
            for i, name in enumerate(grads):
                maxima = {p: data[name][p][0]["Max"] for p in ("weight", "bias")}
                self.assertEqual(maxima, seen[2 * step + i], name)
        # The second pass's entry is the sum: its bias gradient twice the first's.
        self.assertAlmostEqual(seen[1]["bias"], 2 * seen[0]["bias"], places=5)

    def test_module_leaves_keep_their_order(self):
        """A module's forward entry holds its leaves in order: tensors and values among the
        arguments and results, keyword arguments where torch shows them to hooks, then the
        parameters; a gradient hook's entry holds each parameter's gradient."""
        script = """
import torch
from tprobe import PrecisionDebugger

class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
    def forward(self, x, n, scale=1.0):
        return self.fc(x) * scale, None, n + 1

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mixed = Mixed()
    def forward(self, x):
        return self.mixed(x, 3, scale=2.0)[0].sum()

torch.manual_seed(0)
model = Net()
debugger = PrecisionDebugger(config_path="./config.json")
for step in range(STEPS):
    debugger.start(model)
    model(torch.randn(2, 4)).backward()
    debugger.stop()
    debugger.step()
"""
        run = self.run_script(script, config=tt.default_config(level="L0"))
        data = run.data()
        mixed = data["Module.mixed.Mixed.forward.0"]
        self.assertEqual([a.get("type") for a in mixed["input_args"]], ["torch.Tensor", "int"])
        self.assertEqual(mixed["input_args"][1]["value"], 3)
        if "scale" in mixed["input_kwargs"] or not torch.__version__.startswith("1."):
            # torch >= 2.0 shows keyword arguments to hooks; 1.13's hooks do not see them.
            self.assertEqual(mixed["input_kwargs"]["scale"], {"type": "float", "value": 2.0})
        self.assertEqual(mixed["output"][0]["shape"], [2, 4])
        self.assertEqual(mixed["output"][1:], [None, {"type": "int", "value": 4}])
        fc = data["Module.mixed.fc.Linear.forward.0"]
        self.assertEqual(list(fc), ["input_args", "input_kwargs", "output", "parameters", "is_recompute"])
        self.assertEqual([a["shape"] for a in fc["input_args"]], [[2, 4]])
        self.assertEqual(list(fc["parameters"]), ["weight", "bias"])
        self.assertEqual(fc["parameters"]["bias"]["shape"], [4])
        grads = data["Module.mixed.fc.Linear.parameters_grad.0"]
        self.assertEqual(sorted(grads), ["bias", "weight"])
        self.assertEqual(grads["weight"][0]["shape"], [4, 4])


if __name__ == "__main__":
    unittest.main()
