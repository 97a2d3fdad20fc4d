"""tprobe report: the page in a real browser (Debian's chromium, headless, through chromedriver and
python3-selenium, all installed by scripts/setup.sh), the terminal summary, and the report as the
last stage of a manifest.

The inputs are made here, not taken from a model: two small mix-level statistics dumps whose runs
part at one operator (so compare fails there, with msprobe's red mark for a NaN maximum), one
operator that turns finite inputs into inf (so nan-analyze names it), and a similarities.csv in
msprobe's §6.2 format whose step 2 drops (so gradsim's rule flags it), and a pre-check's two CSV
files in msprobe's layout (§7.9) with an error on layers.3's linear (linked to its compare rows) and
a warning on layers.5's exp. Everything is checked
against what the inputs imply, so each check can fail.

Without chromium the browser test skips, unless CI is set: CI runs scripts/setup.sh, which
installs it, so there a missing browser is a failure.
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


def tensor(dtype, shape, mx, mn, mean, norm):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": shape, "Max": mx, "Min": mn, "Mean": mean,
            "Norm": norm, "requires_grad": False}


def build_dump(root, diverge):
    """A mix-level dump: layers.{0..N-1}.Block holding linear → relu → exp, then a loss. `diverge`
    changes layers.3's linear output (summary Warning) and makes layers.5's exp overflow (NaN Max:
    red, and the first NaN/Inf producer for nan-analyze)."""
    data, construct, stack = {}, {}, {}
    blocks = 8
    for layer in range(blocks):
        module = f"Module.layers.{layer}.Block.forward.0"
        x = tensor("torch.float32", [4, 8], 1.0 + layer, -1.0, 0.1, 3.0)
        y = tensor("torch.float32", [4, 8], 2.0 + layer, -2.0, 0.2, 4.0)
        if diverge and layer == 3:
            y = tensor("torch.float32", [4, 8], 40.0, -30.0, 9.0, 80.0)
        r = tensor("torch.float32", [4, 8], 2.0 + layer, 0.0, 0.3, 3.5)
        e = tensor("torch.float32", [4, 8], 7.0 + layer, 1.0, 2.0, 20.0)
        if diverge and layer == 5:
            e = tensor("torch.float32", [4, 8], float("inf"), 1.0, float("inf"), float("inf"))
        calls = [(f"Functional.linear.{layer}.forward", [x], [y]),
                 (f"Torch.relu.{layer}.forward", [y], [r]),
                 (f"Torch.exp.{layer}.forward", [r], [e])]
        for name, inputs, outputs in calls:
            data[name] = {"input_args": inputs, "input_kwargs": {}, "output": outputs}
            construct[name] = module
            stack[name] = [f"File /work/model.py, line {10 + layer}, in forward, \n x = op(x)"]
        data[module] = {"input_args": [x], "input_kwargs": {}, "output": [e]}
        construct[module] = "Module.layers.ModuleList.forward.0"
    construct["Module.layers.ModuleList.forward.0"] = None
    # stack.json in msprobe's current form: [names, lines] per distinct stack
    grouped = {str(k): [[name], lines] for k, (name, lines) in enumerate(stack.items())}
    d = os.path.join(root, "step0", "rank0")
    os.makedirs(d)
    doc = {"task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None, "data": data}
    with open(os.path.join(d, "dump.json"), "w") as f:
        json.dump(doc, f, indent=1)  # NaN/Infinity tokens, as msprobe's json.dump writes them
    with open(os.path.join(d, "construct.json"), "w") as f:
        json.dump(construct, f, indent=1)
    with open(os.path.join(d, "stack.json"), "w") as f:
        json.dump(grouped, f, indent=1)
    return os.path.join(root, "step0")


def write_similarities(path, drop_at):
    """docs/msprobe-compat.md §6.2: UTF-8 BOM, "step,0,1,…", one row per parameter, then "summary"."""
    steps = 5
    rows = {"layers.0.weight": [1.0] * steps, "layers.3.weight": [0.99] * steps, "layers.5.bias": [1.0] * steps}
    rows["layers.3.weight"][drop_at:] = [0.8] * (steps - drop_at)
    rows["summary"] = [sum(v[s] for v in rows.values()) / len(rows) for s in range(steps)]
    os.makedirs(os.path.dirname(path))
    with open(path, "w", encoding="utf-8-sig", newline="") as f:
        f.write("step," + ",".join(str(s) for s in range(steps)) + "\r\n")
        for name, values in rows.items():
            f.write(name + "," + ",".join(repr(v) for v in values) + "\r\n")


DETAIL_HEADER = ["API Name", "Bench Dtype", "DEVICE Dtype", "Shape", "余弦相似度", "最大绝对误差", "双百指标", "双千指标",
                 "双万指标", "二进制一致错误率", "误差均衡性", "均方根误差", "小值域错误占比", "相对误差最大值", "相对误差平均值",
                 "inf/nan错误率", "相对误差错误率", "绝对误差错误率", "ULP误差最大值", "ULP误差平均值", "ULP误差大于阈值占比",
                 "Status", "Message"]


def write_precheck(folder, ts="20250101120000"):
    """msprobe's accuracy_checking_result/details pair (utf-8-sig, csv.writer's CRLF and quoting,
    " " for empty cells): Functional.linear.3 in error (cosine 0.5, backward), Torch.exp.5 in warning
    (双千 0.99), Torch.relu.0 passing."""
    import csv
    os.makedirs(folder)

    def detail(name, status, message, **metrics):
        row = [" "] * len(DETAIL_HEADER)
        row[:4] = [name, "torch.float32", "torch.float16", "(4, 8)"]
        for k, v in metrics.items():
            row[DETAIL_HEADER.index(k)] = "%.14f" % v
        row[-2:] = [status, message]
        return row
    details = [detail("Torch.relu.0.forward.output.0", "pass", "\nMax abs error is less than 0.001\n", 余弦相似度=1.0),
               detail("Functional.linear.3.forward.output.0", "pass", "\n", 余弦相似度=0.9999, 双百指标=1.0, 双千指标=1.0),
               detail("Functional.linear.3.backward.output.0", "error", "\nCosine similarity is less than 0.99\n", 余弦相似度=0.5,
                      最大绝对误差=3.0),
               detail("Torch.exp.5.forward.output.0", "warning", "\nRelative error is greater than 0.001\n", 余弦相似度=0.9999,
                      最大绝对误差=0.01, 双百指标=1.0, 双千指标=0.99)]
    results = [["Torch.relu.0", "pass", " "], ["Functional.linear.3", "pass", "error"], ["Torch.exp.5", "warning", " "]]
    for name, header, rows in (("details", DETAIL_HEADER, details),
                               ("result", ["API name", "Forward Test Success", "Backward Test Success", "Message"], results)):
        with open(os.path.join(folder, f"accuracy_checking_{name}_{ts}.csv"), "w", encoding="utf-8-sig", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(rows)
    return folder


def write_free_benchmark(dump):
    """msprobe 8.3.3's free_benchmark.csv as DataWriter.write_data_to_csv writes it (csv.writer,
    CRLF, no BOM; docs/msprobe-compat.md §8.8): the doc figure's row at step 2, V-3's three rows at step 3."""
    import csv
    header = ["rank", "pert_mode", "stage", "step", "api_name", "max_rel", "dtype", "shape", "output_index"]
    steps = {2: [[0, "improve_precision", "forward", 2, "Torch.matmul.40.forward", 0.022563696, "torch.float16",
                  "torch.Size([4096, 4, 192])", ""]],
             3: [[0, "improve_precision", "forward", 3, "Torch.add.0.forward", 0.004049780885728493, "torch.float16",
                  "torch.Size([2])", ""],
                 [0, "improve_precision", "forward", 3, "Torch.mul.1.forward", "symbol_flipping", "torch.float16",
                  "torch.Size([3])", ""],
                 [0, "bit_noise", "forward", 3, "Functional.softmax.0.forward", 0.00024998475230142425,
                  "torch.float32", "torch.Size([2, 2])", 1]]}
    for step, rows in steps.items():
        folder = os.path.join(dump, f"step{step}", "rank0")
        os.makedirs(folder)
        with open(os.path.join(folder, "free_benchmark.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(rows)
    return dump


def run(*args, expect=None):
    p = subprocess.run([os.path.join(BIN_DIR, "tprobe"), *args], capture_output=True, text=True, timeout=120)
    if expect is not None and p.returncode != expect:
        raise AssertionError(f"tprobe {' '.join(args)}: exit {p.returncode}, expected {expect}\n{p.stdout}\n{p.stderr}")
    return p


def page_data(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r'<script type="application/json" id="tprobe-data">(.*?)</script>', text, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


class ReportFixture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if TMP_ROOT:
            os.makedirs(TMP_ROOT, exist_ok=True)
        cls.tmp = tempfile.mkdtemp(prefix="report-", dir=TMP_ROOT)
        npu = build_dump(os.path.join(cls.tmp, "npu"), diverge=True)
        bench = build_dump(os.path.join(cls.tmp, "bench"), diverge=False)
        cls.cmp = os.path.join(cls.tmp, "cmp")
        run("compare", npu, bench, "-o", cls.cmp, "--highlight", expect=1)
        cls.nan = os.path.join(cls.tmp, "nan")
        run("nan-analyze", npu, "-o", cls.nan, expect=1)
        cls.grad = os.path.join(cls.tmp, "grad")
        write_similarities(os.path.join(cls.grad, "rank0", "similarities.csv"), drop_at=2)
        cls.pre = write_precheck(os.path.join(cls.tmp, "pre"))
        cls.fb = write_free_benchmark(os.path.join(cls.tmp, "fb"))
        cls.page = os.path.join(cls.tmp, "out", "report.html")
        cls.report = run("report", cls.cmp, cls.nan, cls.grad, cls.pre, cls.fb, "-o", cls.page, expect=1)
        result = [f for f in os.listdir(cls.cmp) if f.endswith(".json")][0]
        with open(os.path.join(cls.cmp, result)) as f:
            cls.result = json.load(f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)


class TerminalSummary(ReportFixture):
    def test_summary_lines(self):
        lines = self.report.stdout.splitlines()
        failing = self.result["row_status"].count("f")
        self.assertGreater(failing, 0)
        compare = [l for l in lines if l.startswith("tprobe-report: compare ")]
        self.assertEqual(len(compare), 1, lines)
        self.assertIn(f"FAIL: {len(self.result['rows'])} rows, {failing} failing", compare[0])
        suspect = self.result["advisor"]["suspect_nodes"]
        self.assertIn(f"first failing: line {self.result['advisor']['line']} {suspect}", compare[0])
        self.assertIn("tprobe-report: nan-analyze: FAIL: first producer rank_0 Torch.exp.5.forward in "
                      "Module.layers.5.Block.forward.0", lines)
        self.assertIn("tprobe-report: gradsim rank0: FAIL: first suspect step 2 (layers.3.weight, summary)", lines)
        self.assertIn("tprobe-report: precheck pre/20250101120000: FAIL: 3 APIs; forward 2 pass, 1 warning, 0 error, 0 SKIP; "
                      "backward 0 pass, 0 warning, 1 error, 0 SKIP, 2 none; first error Functional.linear.3 "
                      "(余弦相似度 0.5 ≤ 0.99)", lines)
        self.assertIn("tprobe-report: free_benchmark: FAIL: 4 inconsistent API calls in 2 free_benchmark.csv files; "
                      "first step 2 rank 0 Torch.matmul.40.forward (improve_precision, max_rel 0.022563696, "
                      "torch.float16)", lines)
        self.assertEqual(lines[-1], f"tprobe-report: verdict: FAIL; report {self.page}")

    def test_clean_results_pass(self):
        tmp = tempfile.mkdtemp(dir=self.tmp)
        a = build_dump(os.path.join(tmp, "a"), diverge=False)
        b = build_dump(os.path.join(tmp, "b"), diverge=False)
        run("compare", a, b, "-o", os.path.join(tmp, "cmp"), expect=0)
        p = run("report", os.path.join(tmp, "cmp"), "-o", os.path.join(tmp, "r.html"), expect=0)
        self.assertTrue(p.stdout.splitlines()[-1].startswith("tprobe-report: verdict: PASS"), p.stdout)

    def test_an_unreadable_result_is_not_a_pass(self):
        # A clean compare beside a result file that cannot be read (cut short, not JSON; an
        # unreadable similarities.csv): the verdict was PASS over data nobody looked at. Each is
        # named, and the verdict is FAIL (exit 1), on the terminal and on the page.
        tmp = tempfile.mkdtemp(dir=self.tmp)
        a = build_dump(os.path.join(tmp, "a"), diverge=False)
        b = build_dump(os.path.join(tmp, "b"), diverge=False)
        cmp = os.path.join(tmp, "cmp")
        run("compare", a, b, "-o", cmp, expect=0)
        broken = os.path.join(tmp, "broken")
        os.makedirs(os.path.join(broken, "rank0"))
        cut = os.path.join(broken, "compare_result_rank0_20250101000000.json")
        with open(cut, "w") as f:
            f.write('{"format": "tprobe-compare", "columns": [')
        csv = os.path.join(broken, "rank0", "similarities.csv")
        with open(csv, "w") as f:
            f.write("step,0,1\nfc.weight,1.0,not-a-number\n")
        page = os.path.join(tmp, "r.html")
        p = run("report", cmp, broken, "-o", page, expect=1)
        lines = p.stdout.splitlines()
        self.assertTrue(any(l.startswith("tprobe-report: compare ") and ": PASS: " in l for l in lines), p.stdout)
        for path in (cut, csv):
            self.assertTrue(any(l.startswith("tprobe-report: ERROR: result not read: " + path) for l in lines),
                            p.stdout)
        self.assertEqual(lines[-1], f"tprobe-report: verdict: FAIL; report {page}")
        data = page_data(page)
        self.assertTrue(data["negative"])
        self.assertEqual(len(data["run"]["unread"]), 2, data["run"])

    def test_module_tree_found_from_relative_compare_paths(self):
        # compare run elsewhere with relative paths: its JSON names the dumps absolutely, so the
        # report, run from another folder, still finds construct.json
        tmp = tempfile.mkdtemp(dir=self.tmp)
        build_dump(os.path.join(tmp, "a"), diverge=True)
        build_dump(os.path.join(tmp, "b"), diverge=False)
        p = subprocess.run([os.path.join(BIN_DIR, "tprobe"), "compare", "a/step0", "b/step0", "-o", "cmp"], cwd=tmp,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stderr)
        run("report", os.path.join(tmp, "cmp"), "-o", os.path.join(tmp, "r.html"), expect=1)
        c = page_data(os.path.join(tmp, "r.html"))["compares"][0]
        self.assertEqual(c["npu"], os.path.join(os.path.realpath(tmp), "a", "step0", "rank0", "dump.json"))
        self.assertEqual(c["construct_file"], os.path.join(os.path.dirname(c["npu"]), "construct.json"))
        self.assertIn("Module.layers.3.Block.forward.0", c["nodes"])

    def test_nothing_to_report_is_a_usage_error(self):
        p = run("report", self.tmp + "/npu", "-o", os.path.join(self.tmp, "none.html"), expect=100)
        self.assertIn("tprobe-report: fatal: no result found", p.stderr)

    def test_page_is_self_contained(self):
        with open(self.page, encoding="utf-8") as f:
            text = f.read()
        # nothing fetched: no external script, style, image or font
        self.assertNotRegex(text, r'<(script|link|img|iframe)[^>]+(src|href)=')
        self.assertNotIn("http://", text.replace("http://www.w3.org/2000/svg", ""))
        self.assertNotIn("https://", text)


@unittest.skipUnless((CHROMIUM and CHROMEDRIVER and HAVE_SELENIUM) or os.environ.get("CI"),
                     "chromium, chromium-driver or python3-selenium missing (scripts/setup.sh installs them)")
class Browser(ReportFixture):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        options = Options()
        for a in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--window-size=1400,1800"):
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
        self.sec = d.find_element(By.CSS_SELECTOR, "section.cmp")

    def rows(self):
        return self.sec.find_elements(By.CSS_SELECTOR, "table.rows tbody tr")

    def names(self):
        # one script call, so a re-render between two lookups cannot leave a stale element
        return self.driver.execute_script(
            "return Array.from(arguments[0].querySelectorAll('table.rows tbody tr'), tr => tr.cells[1].textContent)",
            self.sec)

    def wait_rows(self, predicate):
        WebDriverWait(self.driver, 10).until(lambda d: predicate(self.names()))

    def test_verdicts(self):
        d = self.driver
        self.assertEqual(d.find_element(By.ID, "verdict").text, "FAIL")
        failing = self.result["row_status"].count("f")
        box = self.sec.find_element(By.CSS_SELECTOR, ".verdict-box").text
        self.assertIn(f"FAIL: {failing} of {len(self.result['rows'])} rows", box)
        self.assertEqual(d.find_element(By.CSS_SELECTOR, "section.nan code.producer").text, "Torch.exp.5.forward")
        self.assertIn("first suspect step 2", d.find_element(By.CSS_SELECTOR, "section.gradsim .verdict-box").text)
        # step 2 of layers.3.weight (0.99 → 0.8) and of the summary (0.997 → 0.93)
        self.assertEqual(len(d.find_elements(By.CSS_SELECTOR, "section.gradsim circle.suspect")), 2)
        self.assertEqual(len(d.find_elements(By.CSS_SELECTOR, "section.cmp svg.chart")), 1)  # forward only: no backward rows
        severe = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
        self.assertEqual(severe, [])

    def test_sort_and_filter(self):
        all_names = [row[0] for row in self.result["rows"]]
        header = self.sec.find_element(By.CSS_SELECTOR, 'th[data-col="0"]')
        header.click()
        self.wait_rows(lambda names: names == sorted(all_names)[:len(names)])
        header.click()
        self.wait_rows(lambda names: names == sorted(all_names, reverse=True)[:len(names)])

        box = self.sec.find_element(By.CSS_SELECTOR, ".name-filter")
        box.send_keys("relu")
        expected = sorted((n for n in all_names if "relu" in n.lower()), reverse=True)
        self.wait_rows(lambda names: names == expected[:100])
        info = self.sec.find_element(By.CSS_SELECTOR, ".page-info").text
        self.assertIn(f"of {len(expected)} rows", info)

        box.clear()
        box.send_keys("\b")  # an input event with the box empty
        Select(self.sec.find_element(By.CSS_SELECTOR, ".result-filter")).select_by_value("s:f")
        failing = [n for n, s in zip(all_names, self.result["row_status"]) if s == "f"]
        self.wait_rows(lambda names: sorted(names) == sorted(failing))
        self.assertTrue(all(tr.get_attribute("data-status") == "f" for tr in self.rows()))

    def test_first_failing_entry_and_red_marks(self):
        line = int(self.result["advisor"]["line"])
        self.sec.find_element(By.CSS_SELECTOR, ".goto-first").click()
        tr = WebDriverWait(self.driver, 10).until(lambda d: self.sec.find_element(By.CSS_SELECTOR, "tr.first-failing"))
        self.assertEqual(int(tr.get_attribute("data-row")), line)
        self.assertEqual(tr.find_elements(By.TAG_NAME, "td")[1].text, self.result["advisor"]["suspect_nodes"])
        self.assertIn("first failing", tr.text)
        # msprobe's red rows (NaN/inf maximum) keep their colour
        reds = [i for i, c in enumerate(self.result["highlight"]) if c == "red"]
        self.assertTrue(reds)
        Select(self.sec.find_element(By.CSS_SELECTOR, ".result-filter")).select_by_value("c:r")
        self.wait_rows(lambda names: len(names) == len(reds))
        for tr in self.rows():
            self.assertIn("hl-r", tr.get_attribute("class"))
            self.assertEqual(tr.find_element(By.TAG_NAME, "td").value_of_css_property("background-color"),
                             "rgba(255, 214, 214, 1)")

    def test_precheck_counts_order_and_links(self):
        d = self.driver
        pre = d.find_element(By.CSS_SELECTOR, "section.precheck")
        self.assertIn("FAIL: 1 API in error, 1 in warning, of 3 APIs", pre.find_element(By.CSS_SELECTOR, ".verdict-box").text)
        cell = lambda direction, status: pre.find_element(
            By.CSS_SELECTOR, f'table.pc-counts tr[data-dir="{direction}"] td[data-status="{status}"]').text
        self.assertEqual([cell("forward", s) for s in ("pass", "warning", "error", "SKIP")], ["2", "1", "0", "0"])
        self.assertEqual([cell("backward", s) for s in ("pass", "warning", "error", "SKIP", "none")], ["0", "0", "1", "0", "2"])
        apis = pre.find_elements(By.CSS_SELECTOR, "table.pc-apis tr[data-api]")
        self.assertEqual([(a.get_attribute("data-api"), a.get_attribute("data-worst")) for a in apis],
                         [("Functional.linear.3", "error"), ("Torch.exp.5", "warning")])
        self.assertIn("Functional.linear.3.backward.output.0", apis[0].text)
        self.assertIn("余弦相似度 0.5 ≤ 0.99", apis[0].find_element(By.CSS_SELECTOR, ".pc-metric").text)
        self.assertIn("双千指标 0.99 ≤ 0.999", apis[1].find_element(By.CSS_SELECTOR, ".pc-metric").text)
        # from the API to its compare rows
        expected = [r[0] for r in self.result["rows"] if r[0].startswith("Functional.linear.3.")]
        self.assertTrue(expected)
        apis[0].find_element(By.CSS_SELECTOR, "button.pc-goto").click()
        self.wait_rows(lambda names: sorted(names) == sorted(expected))
        # and back: each of those rows links to the API's line of the pre-check
        links = self.sec.find_elements(By.CSS_SELECTOR, "table.rows tbody a.pc-link")
        self.assertEqual(len(links), len(expected))
        links[0].click()
        WebDriverWait(d, 10).until(lambda d: "flash" in (apis[0].get_attribute("class") or ""))
        self.assertEqual(apis[0].get_attribute("id"), "pc-0-0")
        # the compare's badge filters to every row of a pre-check API not pass
        both = [r[0] for r in self.result["rows"] if r[0].startswith(("Functional.linear.3.", "Torch.exp.5."))]
        box = self.sec.find_element(By.CSS_SELECTOR, ".name-filter")
        self.assertEqual(box.get_attribute("value"), "/^Functional\\.linear\\.3\\./")  # what the API's button set
        d.execute_script("arguments[0].value = ''", box)
        badge = self.sec.find_element(By.CSS_SELECTOR, ".pc-badge")
        d.execute_script("arguments[0].scrollIntoView({block: 'center'})", badge)  # not under the sticky header
        badge.click()
        self.wait_rows(lambda names: sorted(names) == sorted(both))
        severe = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
        self.assertEqual(severe, [])

    def test_free_benchmark_rows_sort_and_filter(self):
        d = self.driver
        fb = d.find_element(By.CSS_SELECTOR, "section.free-benchmark")
        self.assertIn("FAIL: 4 inconsistent API calls in 2 files", fb.find_element(By.CSS_SELECTOR, ".verdict-box").text)

        def apis():
            return d.execute_script("return Array.from(arguments[0].querySelectorAll('table.fb-rows tr[data-api]'), "
                                    "tr => tr.dataset.api)", fb)
        # by step, each file in arrival order
        self.assertEqual(apis(), ["Torch.matmul.40.forward", "Torch.add.0.forward", "Torch.mul.1.forward",
                                  "Functional.softmax.0.forward"])
        softmax = fb.find_element(By.CSS_SELECTOR, 'table.fb-rows tr[data-api="Functional.softmax.0.forward"]')
        self.assertEqual([td.text for td in softmax.find_elements(By.TAG_NAME, "td")],
                         ["3", "0", "Functional.softmax.0.forward", "bit_noise", "forward", "0.00024998475230142425",
                          "torch.float32", "torch.Size([2, 2])", "1"])
        # max_rel: largest first, symbol_flipping above every number
        fb.find_element(By.CSS_SELECTOR, 'table.fb-rows th[data-col="5"]').click()
        WebDriverWait(d, 10).until(lambda d: apis() == ["Torch.mul.1.forward", "Torch.matmul.40.forward",
                                                        "Torch.add.0.forward", "Functional.softmax.0.forward"])
        fb.find_element(By.CSS_SELECTOR, "input.fb-filter").send_keys("Torch.ma")
        WebDriverWait(d, 10).until(lambda d: apis() == ["Torch.matmul.40.forward"])
        severe = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
        self.assertEqual(severe, [])

    def test_module_tree(self):
        d = self.driver
        root = self.sec.find_element(By.CSS_SELECTOR, '.tree details.node')
        self.assertIn("Module.layers.ModuleList.forward.0", root.text)
        self.assertEqual(len(root.find_elements(By.CSS_SELECTOR, "li")), 0)  # children built on demand
        root.find_element(By.TAG_NAME, "summary").click()
        WebDriverWait(d, 10).until(lambda d: len(root.find_elements(By.CSS_SELECTOR, ":scope > ul > li")) == 8)
        blocks = root.find_elements(By.CSS_SELECTOR, ":scope > ul > li")
        colours = {b.find_element(By.CSS_SELECTOR, "summary .mono").text: b.find_element(By.CSS_SELECTOR, ".sev").get_attribute("class")
                   for b in blocks}
        # layers.3 fails (Warning), layers.5 overflows (red); the others pass
        self.assertIn("sev4", colours["Module.layers.3.Block.forward.0"])
        self.assertIn("sev4", colours["Module.layers.5.Block.forward.0"])
        self.assertIn("sev0", colours["Module.layers.0.Block.forward.0"])
        self.assertIn("sev4", root.find_element(By.CSS_SELECTOR, "summary .sev").get_attribute("class"))
        # a module's rows button filters the table to that module
        block3 = [b for b in blocks if "layers.3.Block" in b.text][0]
        block3.find_element(By.CSS_SELECTOR, "button.rows-btn").click()
        expected = [r[0] for r in self.result["rows"] if ".3.forward" in r[0] or "layers.3." in r[0]]
        self.wait_rows(lambda names: sorted(names) == sorted(expected))
        path = os.path.join(self.tmp, "..", "report_browser.png") if TMP_ROOT else os.path.join(self.tmp, "shot.png")
        self.assertTrue(d.save_screenshot(path))
        self.assertGreater(os.path.getsize(path), 10000)


class ManifestStage(unittest.TestCase):
    """tprobe-report as a pipeline's last stage: it reads the stream to its end and renders the
    result folders of its options with the run's sessions and counters."""

    def test_last_stage_of_a_manifest(self):
        tmp = tempfile.mkdtemp(prefix="report-stage-", dir=TMP_ROOT)
        try:
            a = build_dump(os.path.join(tmp, "a"), diverge=False)
            run("compare", a, a, "-o", os.path.join(tmp, "cmp"), expect=0)
            page = os.path.join(tmp, "report.html")
            manifest = {"stages": [
                {"name": "stats", "stage": "stats", "inputs": ["capture"]},
                {"name": "writer", "stage": "writer", "inputs": ["stats"]},
                {"name": "report", "stage": "report", "inputs": ["stats"],
                 "options": {"output": page, "results": [os.path.join(tmp, "cmp")], "title": "stage test"}}]}
            with open(os.path.join(tmp, "m.json"), "w") as f:
                json.dump(manifest, f)
            config = {"task": "statistics", "dump_path": os.path.join(tmp, "dump"), "rank": [], "step": [], "level": "L1",
                      "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
            with open(os.path.join(tmp, "config.json"), "w") as f:
                json.dump(config, f)
            p = run("run", os.path.join(tmp, "m.json"), "--config", os.path.join(tmp, "config.json"), "--",
                    os.path.join(BIN_DIR, "tprobe-example-producer"), "--steps", "2", "--world-size", "2", expect=0)
            self.assertIn("tprobe-report: verdict: PASS", p.stdout)
            self.assertIn("tprobe-report: stream: ", p.stdout)
            data = page_data(page)
            self.assertEqual(data["title"], "stage test")
            stream = data["run"]["stream"]
            self.assertEqual(len(stream["sessions"]), 2)
            self.assertEqual(sorted(s["rank"] for s in stream["sessions"]), [0, 1])
            self.assertEqual(stream["sessions"][0]["dump_path"], config["dump_path"])
            self.assertEqual(stream["producers"], 1)  # the stats stage
            self.assertEqual(stream["upstream_dropped"], 0)
            self.assertEqual(stream["truncated_producers"], 0)
            self.assertGreater(stream["records"], 10)
            self.assertEqual(len(data["compares"]), 1)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
