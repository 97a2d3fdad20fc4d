"""tprobe report's graph view (issue 65 item 3): a .vis.db that `tprobe-graph` builds from small
dumps made here, rendered by `tprobe report` and driven in Debian's headless chromium.

Two runs of two ranks each, the same model: Module.layers.ModuleList holding 6 Blocks, each Block
an Inner module holding linear → relu, then the Block's own gelu. The NPU run's rank 1 has its
layers.4 linear output 10× the bench's (summary relative error far above 80 %: the error band),
rank 0 is identical to the bench. So the compare graph's first failing node is
Functional.linear.4.forward on rank 1 and none on rank 0, and the checks below can fail.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

BIN_DIR = os.environ.get("TPROBE_BIN_DIR", "")
TMP_ROOT = os.environ.get("TPROBE_TEST_TMP") or None
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
    HAVE_SELENIUM = True
except ImportError:
    HAVE_SELENIUM = False

BLOCKS = 6
PERTURBED = "Functional.linear.4.forward"


def tensor(mx, mn, mean, norm):
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4, 8], "Max": mx, "Min": mn, "Mean": mean,
            "Norm": norm, "requires_grad": False}


def write_rank(d, perturb):
    data, construct, stack = {}, {}, {}
    top = "Module.layers.ModuleList.forward.0"
    construct[top] = None
    data[top] = {"input_args": [tensor(1.0, -1.0, 0.1, 3.0)], "input_kwargs": {}, "output": [tensor(9.0, -1.0, 0.5, 9.0)]}
    for i in range(BLOCKS):
        block = f"Module.layers.{i}.Block.forward.0"
        inner = f"Module.layers.{i}.inner.Inner.forward.0"
        x = tensor(1.0 + i, -1.0, 0.1, 3.0)
        y = tensor(2.0 + i, -2.0, 0.2, 4.0)
        if perturb and i == 4:
            y = tensor(20.0 + 10 * i, -20.0, 2.0, 40.0)
        r = tensor(2.0 + i, 0.0, 0.3, 3.5)
        g = tensor(2.5 + i, 0.0, 0.35, 3.7)
        construct[block] = top
        construct[inner] = block
        data[block] = {"input_args": [x], "input_kwargs": {}, "output": [g]}
        data[inner] = {"input_args": [x], "input_kwargs": {}, "output": [r]}
        for name, parent, inputs, outputs in ((f"Functional.linear.{i}.forward", inner, [x], [y]),
                                              (f"Torch.relu.{i}.forward", inner, [tensor(2.0 + i, -2.0, 0.2, 4.0)], [r]),
                                              (f"Functional.gelu.{i}.forward", block, [r], [g])):
            construct[name] = parent
            data[name] = {"input_args": inputs, "input_kwargs": {}, "output": outputs}
            stack[name] = [f"File /work/model.py, line {10 + i}, in forward, \n x = op(x)"]
    os.makedirs(d)
    with open(os.path.join(d, "dump.json"), "w") as f:
        json.dump({"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None, "data": data}, f)
    with open(os.path.join(d, "construct.json"), "w") as f:
        json.dump(construct, f)
    with open(os.path.join(d, "stack.json"), "w") as f:
        json.dump({str(k): [[n], s] for k, (n, s) in enumerate(stack.items())}, f)


def make_run(root, perturb_rank):
    for rank in (0, 1):
        write_rank(os.path.join(root, f"rank{rank}"), perturb=rank == perturb_rank)
    return root


def run(binary, *args, expect=None):
    p = subprocess.run([os.path.join(BIN_DIR, binary), *args], capture_output=True, text=True, timeout=120)
    if expect is not None and p.returncode != expect:
        raise AssertionError(f"{binary} {' '.join(args)}: exit {p.returncode}, expected {expect}\n{p.stdout}\n{p.stderr}")
    return p


def page_data(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r'<script type="application/json" id="tprobe-data">(.*?)</script>', text, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


class GraphFixture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if TMP_ROOT:
            os.makedirs(TMP_ROOT, exist_ok=True)
        cls.tmp = tempfile.mkdtemp(prefix="report-graph-", dir=TMP_ROOT)
        npu = make_run(os.path.join(cls.tmp, "npu"), perturb_rank=1)
        bench = make_run(os.path.join(cls.tmp, "bench"), perturb_rank=None)
        cls.out = os.path.join(cls.tmp, "graph")
        run("tprobe-graph", npu, bench, "-o", cls.out, expect=1)  # the runs part: exit 1
        cls.db = os.path.join(cls.out, [f for f in os.listdir(cls.out) if f.endswith(".vis.db")][0])
        cls.page = os.path.join(cls.tmp, "report.html")
        cls.report = run("tprobe-report", cls.out, "-o", cls.page, expect=1)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)


class Reading(GraphFixture):
    def test_summary_line_names_the_perturbed_node_per_rank(self):
        line = [l for l in self.report.stdout.splitlines() if l.startswith("tprobe-report: graph ")]
        self.assertEqual(len(line), 1, self.report.stdout)
        self.assertIn(": FAIL: compare (summary), 4 graphs", line[0])
        self.assertIn("step 0 rank 0: none; step 0 rank 1: " + PERTURBED, line[0])

    def test_page_data_is_compact_parallel_arrays(self):
        db = page_data(self.page)["graphs"][0]
        self.assertEqual([g["id"] for g in db["graphs"]], ["NPU_0_0", "NPU_0_1", "Bench_0_0", "Bench_0_1"])
        g = db["graphs"][1]
        n = len(g["names"])
        self.assertEqual(len(g["parent"]), n)
        self.assertEqual(len(g["kind"]), n)
        self.assertEqual(len(g["off"]), n + 1)
        self.assertEqual(g["names"][-1], "DefaultModel")
        self.assertEqual(g["names"][g["first"]], PERTURBED)
        self.assertEqual(db["graphs"][3]["names"][g["link"][g["first"]]], PERTURBED)
        self.assertIsNone(db["graphs"][0]["first"])

    def test_malformed_db_is_an_error_row(self):
        bad = os.path.join(self.tmp, "bad")
        os.makedirs(bad, exist_ok=True)
        with open(os.path.join(bad, "build_20260101000000.vis.db"), "wb") as f:
            f.write(b"not sqlite at all" * 10)
        p = run("tprobe-report", bad, self.out, "-o", os.path.join(self.tmp, "bad.html"), expect=1)
        self.assertRegex(p.stdout, r"ERROR: result not read: .*build_20260101000000\.vis\.db: not a graph file")

    def test_build_graph_passes(self):
        out = os.path.join(self.tmp, "build")
        run("tprobe-graph", os.path.join(self.tmp, "bench"), "-o", out, expect=0)
        p = run("tprobe-report", out, "-o", os.path.join(self.tmp, "build.html"), expect=0)
        self.assertRegex(p.stdout, r"graph .*build_\d+\.vis\.db: PASS: build, 2 graphs")


@unittest.skipUnless((CHROMIUM and CHROMEDRIVER and HAVE_SELENIUM) or os.environ.get("CI"),
                     "chromium, chromium-driver or python3-selenium missing (scripts/setup.sh installs them)")
class Browser(GraphFixture):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        options = Options()
        for a in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--window-size=1400,1200"):
            options.add_argument(a)
        options.binary_location = CHROMIUM
        cls.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        cls.driver.set_page_load_timeout(30)

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        super().tearDownClass()

    def setUp(self):
        d = self.driver
        d.get("file://" + self.page)
        WebDriverWait(d, 20).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")
        self.sec = d.find_element(By.CSS_SELECTOR, "section.graph")

    def shown(self):
        return self.driver.execute_script(
            "return Array.from(arguments[0].querySelectorAll('.graph-canvas .gnode'), n => n.querySelector('.gname').textContent)",
            self.sec)

    def node(self, name):
        return self.sec.find_element(By.CSS_SELECTOR, f'.gnode[data-node="{self.index(name)}"]')

    def index(self, name):
        return self.driver.execute_script(
            "const db = JSON.parse(document.getElementById('tprobe-data').textContent).graphs[0];"
            "return db.graphs[+arguments[0]].names.indexOf(arguments[1])",
            Select(self.sec.find_element(By.CSS_SELECTOR, "select.graph-select")).first_selected_option.get_attribute("value"), name)

    def test_first_level_only_then_expand(self):
        # the failing rank's graph shows first: the root and its first level, each module closed
        self.assertEqual(Select(self.sec.find_element(By.CSS_SELECTOR, "select.graph-select")).first_selected_option.text,
                         "NPU step 0 rank 1 (32 nodes)")
        self.assertEqual(self.shown(), ["DefaultModel", "Module.layers.ModuleList.forward.0"])
        top = self.node("Module.layers.ModuleList.forward.0")
        top.find_element(By.CSS_SELECTOR, ".gtoggle").click()
        self.assertEqual(self.shown(), ["DefaultModel", "Module.layers.ModuleList.forward.0"] +
                         [f"Module.layers.{i}.Block.forward.0" for i in range(BLOCKS)])
        top.find_element(By.CSS_SELECTOR, ".gtoggle").click()  # closes: its rows are hidden, not re-made
        self.assertFalse(self.sec.find_element(By.CSS_SELECTOR, f'.gnode[data-node="{self.index("Module.layers.2.Block.forward.0")}"]').is_displayed())

    def test_search_opens_a_deep_node(self):
        box = self.sec.find_element(By.CSS_SELECTOR, "input.graph-search")
        box.send_keys("relu.3")
        WebDriverWait(self.driver, 5).until(lambda d: "Torch.relu.3.forward" in self.shown())
        row = self.node("Torch.relu.3.forward").find_element(By.CSS_SELECTOR, ".grow")
        self.assertIn("match", row.get_attribute("class"))
        self.assertIn("selected", row.get_attribute("class"))
        self.assertTrue(row.is_displayed())
        shown = self.shown()
        for ancestor in ("Module.layers.3.Block.forward.0", "Module.layers.3.inner.Inner.forward.0"):
            self.assertIn(ancestor, shown)
        self.assertNotIn("Torch.relu.2.forward", shown)  # other modules stay closed
        self.assertEqual(self.sec.find_element(By.CSS_SELECTOR, ".graph-count").text, "1 of 1 match")

    def test_first_failing_node_and_its_panel(self):
        self.sec.find_element(By.CSS_SELECTOR, "button.graph-first").click()
        row = self.node(PERTURBED).find_element(By.CSS_SELECTOR, ".grow")
        self.assertIn("selected", row.get_attribute("class"))
        error = page_data(self.page)["graphs"][0]["error"]  # node_colors' last range: the error band
        self.assertEqual(row.get_attribute("data-band"), str(error))
        self.assertEqual(row.value_of_css_property("background-color"), "rgba(255, 112, 77, 1)")  # #FF704D
        panel = self.sec.find_element(By.CSS_SELECTOR, ".graph-panel")
        self.assertEqual(panel.find_element(By.CSS_SELECTOR, "h3.gp-name").text, PERTURBED)
        out = panel.find_element(By.CSS_SELECTOR, f'table.gp-items[data-side="output"] tr[data-key="{PERTURBED}.output.0"]')
        cell = lambda f: out.find_element(By.CSS_SELECTOR, f'td[data-field="{f}"]').text
        self.assertEqual((cell("Max"), cell("Min"), cell("Mean"), cell("Norm")), ("60.0", "-20.0", "2.0", "40.0"))
        self.assertEqual(cell("shape"), "[4, 8]")
        self.assertTrue(cell("MaxRelativeErr").endswith("%"))
        self.assertIn(PERTURBED, panel.find_element(By.CSS_SELECTOR, ".gp-match a").text)

    def test_rank_summary_lines(self):
        lines = self.sec.find_elements(By.CSS_SELECTOR, ".graph-rank-line")
        self.assertEqual([l.text for l in lines], ["rank 0: no failing node", "rank 1: first failing node " + PERTURBED])
        lines[0].find_element(By.CSS_SELECTOR, "a").click()
        self.assertEqual(Select(self.sec.find_element(By.CSS_SELECTOR, "select.graph-select")).first_selected_option.text,
                         "NPU step 0 rank 0 (32 nodes)")
        self.assertTrue(self.sec.find_element(By.CSS_SELECTOR, "button.graph-first").get_property("disabled"))

    def test_zoom_and_pan(self):
        view = self.sec.find_element(By.CSS_SELECTOR, ".graph-view")
        canvas = self.sec.find_element(By.CSS_SELECTOR, ".graph-canvas")
        self.driver.execute_script("arguments[0].dispatchEvent(new WheelEvent('wheel', {deltaY: -300, clientX: 50, clientY: 50, bubbles: true, cancelable: true}))", view)
        self.assertIn("scale(1.5", canvas.get_attribute("style"))
        from selenium.webdriver.common.action_chains import ActionChains
        before = canvas.get_attribute("style")
        ActionChains(self.driver).move_to_element_with_offset(view, 10, 10).click_and_hold().move_by_offset(40, 30).release().perform()
        self.assertNotEqual(canvas.get_attribute("style"), before)


if __name__ == "__main__":
    unittest.main()
