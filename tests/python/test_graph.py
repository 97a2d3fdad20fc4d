"""tprobe-graph on real PyTorch dumps (issue 65 item 4): a small nested model dumped at level mix (and
L0) by PrecisionDebugger, run twice; the second run has one layer's weight scaled before the step, a
layer renamed, or one extra torch op before the model; a 2-rank gloo job with rank 1 perturbed. The
.vis.db is read back with sqlite3 and checked against the dumps: where the runs part (default rule),
msprobe 8.3.3's numbers recomputed from the two dump.json files, renamed layers (--layer-mapping),
fuzzy matching, the tree and the data of every node, and the refusal of an L1 dump.

All runs are made once per module (setUpModule-like lazy fixture, two at a time) and shared."""

import concurrent.futures
import glob
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import textwrap
import unittest

import tprobe_testing as tt

GRAPH = os.path.join(tt.BIN_DIR, "tprobe-graph")

# Two blocks (Linear + ReLU) and a Sequential head; the second block's attribute name is a parameter
# (the renamed-layer run) and a top-level torch.add with a kwarg sits between the blocks and the head.
MODEL = textwrap.dedent("""
    import torch, torch.nn as nn
    torch.set_num_threads(1)

    class Block(nn.Module):
        def __init__(self, i, o):
            super().__init__()
            self.fc = nn.Linear(i, o)
            self.act = nn.ReLU()
        def forward(self, x):
            return self.act(self.fc(x))

    class Net(nn.Module):
        def __init__(self, second="layer2"):
            super().__init__()
            self.layer1 = Block(4, 8)
            self.second = second
            setattr(self, second, Block(8, 8))
            self.head = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
        def forward(self, x):
            h = getattr(self, self.second)(self.layer1(x))
            h = torch.add(h, 1.0, alpha=0.5)
            return self.head(h)

    def make(second="layer2", scale=1.0):
        torch.manual_seed(0)
        model = Net(second)
        if scale != 1.0:  # the perturbation: the second block's linear weight, before the step
            with torch.no_grad():
                getattr(model, second).fc.weight.mul_(scale)
        x = torch.randn(6, 4)
        y = torch.tensor([0, 2, 1, 1, 0, 2])
        return model, x, y
""")

# argv: [second-block name] [weight scale] ["extra": one more F.relu before the model].
TRAIN = textwrap.dedent("""
    import sys
    import torch, torch.nn.functional as F
    from tprobe import PrecisionDebugger
    from model import make
    second = sys.argv[1] if len(sys.argv) > 1 else "layer2"
    scale = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    model, x, y = make(second, scale)
    debugger = PrecisionDebugger(config_path="./config.json")
    debugger.start(model)
    if "extra" in sys.argv[3:]:
        F.relu(x)  # shifts every Functional.relu.N of the model by one
    loss = F.cross_entropy(model(x), y) * 1e-3  # small gradients: some statistics print as 1.234e-05
    loss.backward()
    debugger.stop()
    debugger.step()
""")

# Two gloo ranks, each with its own dump folder; argv[1] scales rank 1's weight. The all_reduce sees
# only the inputs, so rank 0's run does not depend on rank 1's weight.
DISTRIBUTED = textwrap.dedent("""
    import os, sys
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    import torch.nn.functional as F

    def run(rank, world, init_file, scale):
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
        from tprobe import PrecisionDebugger
        from model import make
        model, x, y = make("layer2", scale if rank == 1 else 1.0)
        x = x + rank
        debugger = PrecisionDebugger(config_path="./config.json")
        debugger.start(model)
        dist.all_reduce(x)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        debugger.stop()
        debugger.step()
        debugger.close()
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(run, args=(2, os.path.join(os.getcwd(), "init"), float(sys.argv[1])), nprocs=2)
""")

PERTURBED_MODULE = "Module.layer2.fc.Linear.forward.0"
PERTURBED_API = "Functional.linear.1.forward"  # the op of that module, which reads the weight

# name -> (script, argv, level)
RUNS = {
    "base": (TRAIN, [], "mix"),
    "same": (TRAIN, [], "mix"),
    "perturbed": (TRAIN, ["layer2", "1.5"], "mix"),
    "renamed": (TRAIN, ["block2"], "mix"),
    "extra": (TRAIN, ["layer2", "1.0", "extra"], "mix"),
    "l0": (TRAIN, [], "L0"),
    "l1": (TRAIN, [], "L1"),
    "dist_base": (DISTRIBUTED, ["1.0"], "mix"),
    "dist_perturbed": (DISTRIBUTED, ["1.5"], "mix"),
}

_fixture = {}


def _run_one(root, name):
    script, argv, level = RUNS[name]
    directory = os.path.join(root, name)
    os.makedirs(directory)
    with open(os.path.join(directory, "model.py"), "w") as f:
        f.write(MODEL)
    with open(os.path.join(directory, "train.py"), "w") as f:
        f.write(script)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(tt.default_config(level=level), f)
    env = dict(os.environ)
    env.pop("TPROBE_ENDPOINT", None)
    result = subprocess.run([tt.PYTHON, "train.py"] + argv, cwd=directory, env=env, capture_output=True, text=True,
                            timeout=240)
    return name, result, os.path.join(directory, "dump")


def dumps():
    """{run name: its dump folder (the one holding step0)}, made once for the module."""
    if "dumps" not in _fixture:
        root = os.environ.get("TPROBE_TEST_TMP") or None
        if root:
            os.makedirs(root, exist_ok=True)
        _fixture["tmp"] = tempfile.mkdtemp(prefix="tprobe-graph-", dir=root)
        made = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            for name, result, dump in pool.map(lambda n: _run_one(_fixture["tmp"], n), RUNS):
                if result.returncode != 0:
                    raise RuntimeError(f"run {name} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}")
                made[name] = dump
        _fixture["dumps"] = made
    return _fixture["dumps"]


def tearDownModule():
    if "tmp" in _fixture:
        shutil.rmtree(_fixture["tmp"], ignore_errors=True)


def rank_dir(dump, rank=None):
    return os.path.join(dump, "step0", "rank" if rank is None else f"rank{rank}")


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class Graph:
    """One tprobe-graph run: exit status, output and the rows of its .vis.db."""

    def __init__(self, result, db):
        self.rc, self.stdout, self.stderr = result.returncode, result.stdout, result.stderr
        self.db = db
        con = sqlite3.connect(db)
        con.row_factory = sqlite3.Row
        self.rows = [dict(r) for r in con.execute("SELECT * FROM tb_nodes")]
        self.config = [dict(r) for r in con.execute("SELECT * FROM tb_config")]
        con.close()

    def nodes(self, source="NPU", step=0, rank=0):
        """{node_name: row} of one graph."""
        return {r["node_name"]: r for r in self.rows
                if r["data_source"] == source and r["step"] == step and r["rank"] == rank}

    def first_part(self, step=0, rank=0):
        """The node stdout names as where the runs part, or None for 'no node where the runs part'."""
        for line in self.stdout.splitlines():
            prefix = f"tprobe-graph: step {step} rank {rank}: "
            if line.startswith(prefix):
                rest = line[len(prefix):]
                if rest.startswith("no node where the runs part"):
                    return None
                if rest.startswith("the runs part first at "):
                    return rest[len("the runs part first at "):].split(" (")[0]
        raise AssertionError(f"no line for step {step} rank {rank} in:\n{self.stdout}")


def descendants(nodes, name):
    """name and every node below it."""
    found, todo = [], [name]
    while todo:
        n = todo.pop()
        found.append(n)
        sub = nodes[n]["sub_nodes"]
        todo.extend(json.loads(sub) if sub else [])
    return found


def ancestors(nodes, name):
    """The up_node chain of name, nearest first, the root last."""
    chain, up = [], nodes[name]["up_node"]
    while up:
        chain.append(up)
        up = nodes[up]["up_node"]
    return chain


def relative_errors(npu, bench):
    """msprobe 8.3.3's four relative errors of one output (|npu - bench| / |bench|, 0 where bench is 0)."""
    errors = []
    for field in ("Max", "Min", "Mean", "Norm"):
        errors.append(abs(npu[field] - bench[field]) / abs(bench[field]) if bench[field] != 0 else 0.0)
    return errors


def format_value(v):
    """msprobe's format_node_data for one field of a dump leaf (graph-spec.md §3.5)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return f"{v:.6e}" if "e" in repr(v) else str(round(v, 6))
    if isinstance(v, list):
        return str(v)
    return str(v)


def flatten(prefix, value, out):
    """read_op's flattening: lists '.i', dicts '.key'; a leaf is a dict with a string 'type' (or null)."""
    if value is None or (isinstance(value, dict) and isinstance(value.get("type"), str)):
        out.append((prefix, value))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            flatten(f"{prefix}.{i}", v, out)
    elif isinstance(value, dict):
        for k, v in value.items():
            flatten(f"{prefix}.{k}", v, out)


def expected_items(name, entry):
    """(input items, output items) of a dump.json entry, as [(key, leaf)] in order."""
    items = []
    if ".parameters_grad" in name:
        for param, value in entry.items():  # {"weight": [leaf]}: the list level adds no index
            for leaf in value:
                items.append((f"{name}.{param}", leaf))
    else:
        for field, suffix in (("input_args", "input"), ("input_kwargs", "input"), ("input", "input"),
                              ("output", "output"), ("parameters", "parameters")):
            if field in entry:
                flatten(f"{name}.{suffix}", entry[field], items)
    inputs = [(k, v) for k, v in items if not (".output." in k and ".input." not in k)]
    outputs = [(k, v) for k, v in items if ".output." in k and ".input." not in k]
    return inputs, outputs


class GraphTest(unittest.TestCase):
    maxDiff = None

    def setUp(self):
        self.runs = dumps()
        self.out = tempfile.mkdtemp(prefix="out-", dir=_fixture["tmp"])

    def graph(self, *args, expect_rc=None):
        """Runs tprobe-graph ARGS -o a fresh folder; returns its Graph (the one .vis.db it wrote)."""
        out = tempfile.mkdtemp(prefix="graph-", dir=self.out)
        result = subprocess.run([GRAPH] + list(args) + ["-o", out], capture_output=True, text=True, timeout=120)
        if expect_rc is not None:
            self.assertEqual(result.returncode, expect_rc, f"{args}:\n{result.stdout}\n{result.stderr}")
        files = glob.glob(os.path.join(out, "*.vis.db"))
        self.assertEqual(len(files), 1, f"{args}: {os.listdir(out)}\n{result.stdout}\n{result.stderr}")
        return Graph(result, files[0])

    # 1. Where the runs part.

    def test_perturbed_weight_default_rule(self):
        g = self.graph(self.runs["perturbed"], self.runs["base"], expect_rc=1)
        self.assertEqual(g.config[0]["graph_type"], "compare")
        self.assertEqual(g.config[0]["task"], "summary")
        nodes = g.nodes()
        self.assertEqual(nodes[PERTURBED_MODULE]["precision_index"], 1)
        # Every ancestor up to the root's child carries the error; the root has no index.
        chain = ancestors(nodes, PERTURBED_MODULE)
        self.assertEqual(chain, ["Module.layer2.Block.forward.0", "DefaultModel"])
        for up in chain[:-1]:
            self.assertEqual(nodes[up]["precision_index"], 1, up)
        self.assertIsNone(nodes["DefaultModel"]["precision_index"])
        # What ran before the perturbed op (layer1's forward nodes, post-order first) agrees.
        before = [n for n, r in nodes.items() if r["node_order"] < nodes[PERTURBED_API]["node_order"]]
        self.assertEqual(sorted(before), sorted(descendants(nodes, "Module.layer1.Block.forward.0")))
        for n in before:
            self.assertEqual(nodes[n]["precision_index"], 0, n)
        # stdout names a node at or inside the perturbed module.
        first = g.first_part()
        self.assertIn(first, descendants(nodes, PERTURBED_MODULE))
        self.assertEqual(nodes[first]["precision_index"], 1)
        # The bench side carries no index, and its nodes link back.
        bench = g.nodes("Bench")
        self.assertEqual(set(bench), set(nodes))
        self.assertTrue(all(r["precision_index"] is None for r in bench.values()))
        self.assertEqual(json.loads(bench[PERTURBED_MODULE]["matched_node_link"])[-1], PERTURBED_MODULE)

    def test_identical_runs_part_nowhere(self):
        g = self.graph(self.runs["same"], self.runs["base"], expect_rc=0)
        self.assertIsNone(g.first_part())
        nodes = g.nodes()
        self.assertGreater(len(nodes), 30)
        for name, row in nodes.items():
            if name == "DefaultModel":
                self.assertIsNone(row["precision_index"])
                continue
            self.assertIsNotNone(row["precision_index"], f"{name} unmatched")
            self.assertEqual(row["precision_index"], 0, name)
            self.assertEqual(json.loads(row["matched_node_link"])[-1], name)

    def test_msprobe_input_json(self):
        spec = os.path.join(self.out, "input.json")
        with open(spec, "w") as f:
            json.dump({"npu_path": self.runs["perturbed"], "bench_path": self.runs["base"],
                       "is_print_compare_log": True}, f)
        g = self.graph("-i", spec, expect_rc=1)
        self.assertEqual(g.config[0]["graph_type"], "compare")
        self.assertIn(g.first_part(), descendants(g.nodes(), PERTURBED_MODULE))

    def test_perturbed_weight_msprobe_833_rule(self):
        g = self.graph(self.runs["perturbed"], self.runs["base"], "--rule", "msprobe-8.3.3")
        npu = load_json(os.path.join(rank_dir(self.runs["perturbed"]), "dump.json"))["data"]
        bench = load_json(os.path.join(rank_dir(self.runs["base"]), "dump.json"))["data"]
        nodes = g.nodes()
        for name in (PERTURBED_API, PERTURBED_MODULE):
            errors = []
            for a, b in zip(npu[name]["output"], bench[name]["output"]):
                errors += relative_errors(a, b)
            expected = min(1.0, max(errors))
            self.assertGreater(expected, 0.01, name)  # the perturbation shows, and not capped
            self.assertLess(expected, 1.0, name)
            self.assertAlmostEqual(nodes[name]["precision_index"], expected, delta=1e-6, msg=name)
        # msprobe 8.3.3 does not carry a module's children: the Block has its own output's number.
        block = "Module.layer2.Block.forward.0"
        errors = relative_errors(npu[block]["output"][0], bench[block]["output"][0])
        self.assertAlmostEqual(nodes[block]["precision_index"], min(1.0, max(errors)), delta=1e-6)
        for n in descendants(nodes, "Module.layer1.Block.forward.0"):
            self.assertEqual(nodes[n]["precision_index"], 0, n)
        # Its colours are msprobe's five, not the levels' three.
        self.assertEqual(list(json.loads(g.config[0]["node_colors"])),
                         ["#FFFCF3", "#FFEDBE", "#FFDC7F", "#FFC62E", "#FF704D", "#C7C7C7"])

    # 2. Renamed layers, layer mapping, fuzzy matching.

    def renamed_nodes(self, nodes):
        renamed = [n for n in nodes if "layer2" in n or any("layer2" in a for a in ancestors(nodes, n))]
        self.assertGreater(len(renamed), 8)
        return renamed

    def test_renamed_layer_unmatched_by_default(self):
        g = self.graph(self.runs["base"], self.runs["renamed"])
        nodes = g.nodes()
        renamed = self.renamed_nodes(nodes)
        for n in renamed:
            self.assertIsNone(nodes[n]["precision_index"], n)
            self.assertEqual(nodes[n]["matched_node_link"], "[]", n)
        for n in descendants(nodes, "Module.layer1.Block.forward.0") + ["Module.head.Sequential.forward.0"]:
            self.assertEqual(nodes[n]["precision_index"], 0, n)
            self.assertEqual(json.loads(nodes[n]["matched_node_link"])[-1], n)
        bench = g.nodes("Bench")
        self.assertIn("Module.block2.Block.forward.0", bench)
        self.assertEqual(bench["Module.block2.Block.forward.0"]["matched_node_link"], "[]")

    def test_renamed_layer_with_layer_mapping(self):
        mapping = os.path.join(self.out, "mapping.yaml")
        with open(mapping, "w") as f:
            f.write("layer2: block2\n")
        g = self.graph(self.runs["base"], self.runs["renamed"], "--layer-mapping", mapping, expect_rc=0)
        nodes, bench = g.nodes(), g.nodes("Bench")
        for n in self.renamed_nodes(nodes):
            link = json.loads(nodes[n]["matched_node_link"])
            expected = n.replace("Module.layer2.", "Module.block2.")
            self.assertEqual(link[-1], expected, n)
            self.assertIn(expected, bench)
            if n != "Module.layer2.Block.forward.0" and ".forward" in n:
                self.assertIn("Module.block2.Block.forward.0", link, n)
            self.assertEqual(nodes[n]["precision_index"], 0, n)  # same weights: they agree
            self.assertEqual(json.loads(bench[expected]["matched_node_link"])[-1], n)

    def test_fuzzy_match_shifted_call_counts(self):
        relus = ["Functional.relu.0.forward", "Functional.relu.1.forward", "Functional.relu.2.forward",
                 "Functional.relu.0.backward", "Functional.relu.1.backward", "Functional.relu.2.backward"]
        g = self.graph(self.runs["base"], self.runs["extra"])
        nodes = g.nodes()
        for n in relus:
            self.assertIn("Module.", nodes[n]["up_node"])
            self.assertIsNone(nodes[n]["precision_index"], n)
            self.assertEqual(nodes[n]["matched_node_link"], "[]", n)
        g = self.graph(self.runs["base"], self.runs["extra"], "-fm", expect_rc=0)
        nodes, bench = g.nodes(), g.nodes("Bench")
        self.assertIn("Functional.relu.3.forward", bench)
        for n in relus:
            fields = n.split(".")
            shifted = ".".join([fields[0], fields[1], str(int(fields[2]) + 1), fields[3]])
            link = json.loads(nodes[n]["matched_node_link"])
            self.assertEqual(link[-1], shifted, n)
            self.assertEqual(link[-2], nodes[n]["up_node"], n)
            self.assertEqual(nodes[n]["precision_index"], 0, n)
        self.assertIn(" 0 unmatched)", g.stdout)

    # 3. Two ranks.

    def test_two_ranks_only_rank1_perturbed(self):
        for run in ("dist_base", "dist_perturbed"):
            self.assertEqual(sorted(os.listdir(os.path.join(self.runs[run], "step0"))), ["rank0", "rank1"])
        g = self.graph(self.runs["dist_perturbed"], self.runs["dist_base"], expect_rc=1)
        self.assertEqual(json.loads(g.config[0]["rank_list"]), [0, 1])
        self.assertEqual(json.loads(g.config[0]["step_list"]), [0])
        self.assertIsNone(g.first_part(rank=0))
        rank1 = g.nodes(rank=1)
        first = g.first_part(rank=1)
        self.assertIn(first, descendants(rank1, PERTURBED_MODULE))
        self.assertEqual(rank1[PERTURBED_MODULE]["precision_index"], 1)
        rank0 = g.nodes(rank=0)
        self.assertIn("Distributed.all_reduce.0.forward", rank0)
        self.assertEqual(set(rank0), set(rank1))
        for name, row in rank0.items():
            if name != "DefaultModel":
                self.assertEqual(row["precision_index"], 0, name)
        self.assertEqual({r["graph_id"] for r in g.rows}, {"NPU_0_0", "NPU_0_1", "Bench_0_0", "Bench_0_1"})

    # 4. The tree and the data against the dumps.

    def check_build(self, dump):
        """The build of one rank folder against its construct.json and dump.json."""
        folder = rank_dir(dump)
        g = self.graph(folder, expect_rc=0)
        self.assertEqual(len(g.config), 1)
        self.assertEqual(g.config[0]["graph_type"], "build")
        self.assertEqual(json.loads(g.config[0]["rank_list"]), [0])
        construct = load_json(os.path.join(folder, "construct.json"))
        data = load_json(os.path.join(folder, "dump.json"))["data"]
        nodes = g.nodes()
        self.assertEqual(len(nodes), len(g.rows))  # one graph, all NPU
        self.assertTrue(all(r["precision_index"] is None for r in g.rows))
        self.assertTrue(all(r["matched_node_link"] == "[]" for r in g.rows))

        # Every entry construct.json lists (and every parameters_grad) is a node, under its parent.
        listed = set(construct) | {p for p in construct.values() if p}
        wanted = [n for n in data if n in listed or ".parameters_grad" in n]
        self.assertGreater(len(wanted), 10)
        for name in wanted:
            self.assertIn(name, nodes)
            self.assertEqual(nodes[name]["id"], f"NPU_0_0_{name}")
            self.assertEqual(nodes[name]["graph_id"], "NPU_0_0")
        for child, parent in construct.items():
            up = nodes[child]["up_node"]
            if parent:
                self.assertEqual(up, parent, child)
            else:
                self.assertTrue(up == "DefaultModel" or up.startswith("Apis_Between_Modules."), (child, up))
        extra = set(nodes) - set(wanted)
        self.assertTrue(all(n == "DefaultModel" or n.startswith("Apis_Between_Modules.") for n in extra), extra)

        # up_node and sub_nodes agree both ways; one root; node_order is the post-order of the tree.
        roots = [n for n, r in nodes.items() if r["up_node"] == ""]
        self.assertEqual(roots, ["DefaultModel"])
        for name, row in nodes.items():
            subs = json.loads(row["sub_nodes"]) if row["sub_nodes"] else []
            for s in subs:
                self.assertEqual(nodes[s]["up_node"], name)
                self.assertLess(nodes[s]["node_order"], row["node_order"])
            if row["up_node"]:
                self.assertIn(name, json.loads(nodes[row["up_node"]]["sub_nodes"]))
        order = []

        def post(n):
            sub = nodes[n]["sub_nodes"]
            for s in json.loads(sub) if sub else []:
                post(s)
            order.append(n)
        post("DefaultModel")
        self.assertEqual(len(order), len(nodes))
        self.assertEqual([nodes[n]["node_order"] for n in order], list(range(len(nodes))))

        # input_data/output_data: the entry's flattened leaves, values formatted as msprobe does.
        scientific = others = 0
        for name in wanted:
            inputs, outputs = expected_items(name, data[name])
            for column, items in (("input_data", inputs), ("output_data", outputs)):
                got = json.loads(nodes[name][column])
                self.assertEqual(list(got), [k for k, _ in items], f"{name} {column}")
                for key, leaf in items:
                    item = got[key]
                    if leaf is None or leaf.get("Max", leaf.get("value")) is None:
                        self.assertEqual(item, {"value": "null"}, key)
                        continue
                    if leaf["type"] == "torch.Tensor":
                        self.assertEqual(item["shape"], str(leaf["shape"]), key)
                        self.assertEqual(item["dtype"], leaf["dtype"], key)
                        self.assertEqual(item["requires_grad"], str(leaf["requires_grad"]), key)
                        for field in ("Max", "Min", "Mean", "Norm"):
                            self.assertEqual(item[field], format_value(leaf[field]), f"{key} {field}")
                            scientific += "e-" in item[field]
                    else:  # a number or string argument: its value, and the Python type of the dumped value
                        self.assertEqual(item["Max"], format_value(leaf["value"]), key)
                        self.assertEqual(item["dtype"], f"<class {type(leaf['value']).__name__}>", key)
                        others += 1
        self.assertGreater(scientific, 0)  # the small gradients' branch was exercised
        if any(n.startswith("Functional.") for n in nodes):
            self.assertGreater(others, 0)  # and the non-tensor arguments'
        return g, nodes, data

    def test_build_mix_against_dump(self):
        g, nodes, data = self.check_build(self.runs["base"])
        self.assertEqual(g.config[0]["node_colors"], "null")
        # The shapes of the item keys the brief lists, on known entries.
        self.assertIn("Torch.add.0.forward.input.alpha", json.loads(nodes["Torch.add.0.forward"]["input_data"]))
        self.assertEqual(nodes["Torch.add.0.forward"]["up_node"], "DefaultModel")  # a lone API is not grouped
        mod = json.loads(nodes[PERTURBED_MODULE]["input_data"])
        self.assertIn(f"{PERTURBED_MODULE}.parameters.weight", mod)
        self.assertIn(f"{PERTURBED_API}.output.0", json.loads(nodes[PERTURBED_API]["output_data"]))
        self.assertTrue(any(n.startswith("Apis_Between_Modules.") for n in nodes))
        # An output's Max is the dump's, rounded to 6 decimals.
        out = data[PERTURBED_API]["output"][0]["Max"]
        self.assertEqual(json.loads(nodes[PERTURBED_API]["output_data"])[f"{PERTURBED_API}.output.0"]["Max"],
                         str(round(out, 6)))

    def test_build_l0_against_dump(self):
        g, nodes, _ = self.check_build(self.runs["l0"])
        self.assertFalse(any(n.startswith(("Functional.", "Torch.", "Apis_Between_Modules.")) for n in nodes))
        self.assertIn("Module.layer2.fc.Linear.parameters_grad.0", nodes)

    def test_l1_dump_refused(self):
        out = os.path.join(self.out, "l1")
        for args in ([self.runs["l1"]], [self.runs["l1"], self.runs["base"]]):
            result = subprocess.run([GRAPH] + args + ["-o", out], capture_output=True, text=True, timeout=60)
            self.assertEqual(result.returncode, 100, result.stdout + result.stderr)
            lines = result.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, result.stderr)
            self.assertTrue(lines[0].startswith("tprobe-graph: fatal: "), lines[0])
            self.assertIn("construct.json", lines[0])
            self.assertFalse(glob.glob(os.path.join(out, "*.vis.db")))


if __name__ == "__main__":
    unittest.main()
