"""tprobe report over a monitor output folder (msprobe's TrainerMon layout, docs/stages/monitor.md):
the terminal line, the page's data, and the trends view in a real browser (Debian's chromium,
headless, as tests/python/test_report_browser.py): one chart per tag, a line per rank, anomalies
ringed where anomaly.json puts them, the type/op/rank/filter controls and the anomaly table.

The folder is made here in msprobe's own bytes: docs/msprobe-compat.md §9.12's V-5 files (ops min, max,
norm, mean, zeros, nans; step_count_per_record 2; ×3 at step 2), for two ranks, and V-5's
anomaly.json entries (AnomalyTurbulence on the mean of fc.weight's grad and of fc.input at step 2).
"""

import json
import os
import re
import shutil
import tempfile
import unittest

from test_report_browser import CHROMEDRIVER, CHROMIUM, HAVE_SELENIUM, page_data, run

if HAVE_SELENIUM:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

TMP_ROOT = os.environ.get("TPROBE_TEST_TMP") or None

GRAD_HEADER = "vpp_stage,name,step,min,max,norm,mean,zeros,nans,shape,dtype\n"
ACTV_HEADER = "vpp_stage,name,step,micro_step,min,max,norm,mean,zeros,nans,shape,dtype\n"


def grad_rows(step, s):
    return (f"0,fc.weight,{step},{-2.0 * s},{1.0 * s},{[2.236068, 2.236068, 6.708204][step]},{-0.25 * s},0.5,0,"
            f"\"[2, 2]\",torch.float32\n"
            f"0,fc.bias,{step},nan,nan,nan,nan,0.0,1,[2],torch.float32\n")


def actv_rows(step, s):
    return (f"0,fc.input,{step},0,{0.0},{5.0 * s},{[7.416198, 7.416198, 22.248595][step]},{2.5 * s},0.0,0,"
            f"\"[2, 3]\",torch.float16\n"
            f"0,fc.output,{step},0,{1.0 * s},{1.0 * s},{2.0 * s},{1.0 * s},0.0,0,\"[2, 2]\",torch.float32\n")


def anomaly(rank, tag, step, call_id, current, history):
    return {"rank": rank, "step": step, "micro_step": 0, "pp_stage": 0, "vpp_stage": 0, "call_id": call_id,
            "tag_name": tag,
            "message": f"Rule AnomalyTurbulence reports anomaly signal in ('{tag}', 'mean') at step {step}, "
                       f"current value {current}, history mean {history}.",
            "group_mates": [0, 1]}


def write_monitor(root, ranks=(0, 1), anomalies=True):
    for rank in ranks:
        d = os.path.join(root, f"Dec06_20-54-0{rank}-rank{rank}-{'0a1b2c3' + str(rank)}")
        os.makedirs(d)
        for name, text in (("grad_reduced_0-1.csv", GRAD_HEADER + grad_rows(0, 1) + grad_rows(1, 1)),
                           ("grad_reduced_2-3.csv", GRAD_HEADER + grad_rows(2, 3)),
                           ("actv_0-1.csv", ACTV_HEADER + actv_rows(0, 1) + actv_rows(1, 1)),
                           ("actv_2-3.csv", ACTV_HEADER + actv_rows(2, 3))):
            with open(os.path.join(d, name), "w", newline="") as f:
                f.write(text)
        a = os.path.join(root, "anomaly_detected", f"rank{rank}")
        os.makedirs(a)
        entries = {}
        if anomalies:
            w = f"0:fc.weight/rank{rank}/post_grad"
            x = f"0:fc.input:0/rank{rank}/actv"
            entries[f"{w}_step_2_call_7"] = anomaly(rank, w, 2, 7, -0.74999999925, 0.24999999975)
            entries[f"{x}_step_2_call_-1"] = anomaly(rank, x, 2, -1, 7.5, 2.5)
        with open(os.path.join(a, "anomaly.json"), "w") as f:
            json.dump(entries, f, indent=1)
    return root


class MonitorFixture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if TMP_ROOT:
            os.makedirs(TMP_ROOT, exist_ok=True)
        cls.tmp = tempfile.mkdtemp(prefix="report-monitor-", dir=TMP_ROOT)
        cls.mon = write_monitor(os.path.join(cls.tmp, "monitor_output"))
        cls.page = os.path.join(cls.tmp, "report.html")
        cls.report = run("report", cls.mon, "-o", cls.page, expect=1)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)


class TerminalAndData(MonitorFixture):
    def test_summary_line(self):
        lines = self.report.stdout.splitlines()
        self.assertIn(f"tprobe-report: monitor {self.mon}: FAIL: 4 anomalies; 4 tags in 8 csv files, 2 ranks, steps 0-2; "
                      "first step 2 rank 0 0:fc.weight/rank0/post_grad mean", lines)
        self.assertEqual(lines[-1], f"tprobe-report: verdict: FAIL; report {self.page}")

    def test_page_data(self):
        m = page_data(self.page)["monitors"][0]
        self.assertEqual(m["ranks"], [0, 1])
        self.assertEqual(m["csv_files"], 8)
        self.assertEqual([t["prefix"] for t in m["types"]], ["actv", "grad_reduced"])
        actv, grad = m["types"]
        self.assertEqual(actv["ops"], ["min", "max", "norm", "mean", "zeros", "nans"])
        self.assertEqual([t["name"] for t in actv["tags"]], ["0:fc.input:0", "0:fc.output:0"])
        weight = grad["tags"][0]
        self.assertEqual(weight["name"], "0:fc.weight")
        self.assertEqual([s["rank"] for s in weight["series"]], [0, 1])
        s = weight["series"][1]
        self.assertEqual(s["steps"], [0, 1, 2])
        self.assertEqual(s["v"][grad["ops"].index("norm")], [2.236068, 2.236068, 6.708204])
        self.assertEqual(s["v"][grad["ops"].index("mean")], [-0.25, -0.25, -0.75])
        self.assertEqual(grad["tags"][1]["series"][0]["v"][grad["ops"].index("norm")], ["nan", "nan", "nan"])
        a = m["anomalies"]
        self.assertEqual([(x["step"], x["rank"], x["name"], x["prefix"], x["op"]) for x in a],
                         [(2, 0, "0:fc.weight", "grad_reduced", "mean"), (2, 0, "0:fc.input:0", "actv", "mean"),
                          (2, 1, "0:fc.weight", "grad_reduced", "mean"), (2, 1, "0:fc.input:0", "actv", "mean")])

    def test_a_clean_folder_passes_and_a_broken_csv_is_not_read(self):
        clean = write_monitor(os.path.join(self.tmp, "clean"), ranks=(0,), anomalies=False)
        p = run("report", clean, "-o", os.path.join(self.tmp, "c.html"), expect=0)
        self.assertIn(f"tprobe-report: monitor {clean}: PASS: 0 anomalies; 4 tags in 4 csv files, 1 rank, steps 0-2",
                      p.stdout.splitlines())
        broken = write_monitor(os.path.join(self.tmp, "broken"), ranks=(0,), anomalies=False)
        rank_dir = [d for d in os.listdir(broken) if "-rank0-" in d][0]
        cut = os.path.join(broken, rank_dir, "actv_2-3.csv")
        with open(cut, "a") as f:
            f.write("0,fc.x,2,0,1.0\n")
        why = f"{cut}: row 4: 5 cells, not 12 (a truncated or foreign file)"
        # Beside a clean folder: named, and the verdict is FAIL; alone: nothing to report (100).
        p = run("report", clean, broken, "-o", os.path.join(self.tmp, "b.html"), expect=1)
        self.assertIn(f"tprobe-report: ERROR: result not read: {why}", p.stdout.splitlines())
        p = run("report", broken, "-o", os.path.join(self.tmp, "x.html"), expect=100)
        self.assertIn(f"(not read: {why})", p.stderr)


@unittest.skipUnless((CHROMIUM and CHROMEDRIVER and HAVE_SELENIUM) or os.environ.get("CI"),
                     "chromium, chromium-driver or python3-selenium missing (scripts/setup.sh installs them)")
class Browser(MonitorFixture):
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
        self.sec = d.find_element(By.CSS_SELECTOR, "section.monitor")

    def charts(self):
        return self.driver.execute_script(
            "return Array.from(arguments[0].querySelectorAll('.mon-chart'), c => [c.dataset.tag, "
            "c.querySelectorAll('path.mon-line').length, c.querySelectorAll('circle.anomaly').length])", self.sec)

    def test_charts_lines_and_anomaly_rings(self):
        d = self.driver
        self.assertIn("FAIL: 4 anomalies; first step 2 rank 0 0:fc.weight/rank0/post_grad mean",
                      self.sec.find_element(By.CSS_SELECTOR, ".verdict-box").text)
        # The first anomaly's type and op are shown first: grad_reduced, mean; a line per rank; the
        # two ranks' rings on fc.weight, none on fc.bias.
        self.assertEqual(Select(self.sec.find_element(By.CSS_SELECTOR, "select.mon-type")).first_selected_option.get_attribute("value"),
                         "grad_reduced")
        self.assertEqual(self.sec.find_element(By.CSS_SELECTOR, "select.mon-op").get_attribute("value"), "mean")
        self.assertEqual(self.charts(), [["0:fc.weight", 2, 2], ["0:fc.bias", 2, 0]])
        # Each ring sits on its line's step-2 point (the mean fell to -0.75: the lowest point).
        ring = self.sec.find_element(By.CSS_SELECTOR, '.mon-chart[data-tag="0:fc.weight"] circle.anomaly[data-rank="0"]')
        path = self.sec.find_element(By.CSS_SELECTOR, '.mon-chart[data-tag="0:fc.weight"] path.mon-line[data-rank="0"]')
        last = re.findall(r"[ML]([\d.]+) ([\d.]+)", path.get_attribute("d"))[-1]
        self.assertAlmostEqual(float(ring.get_attribute("cx")), float(last[0]), delta=0.1)
        self.assertAlmostEqual(float(ring.get_attribute("cy")), float(last[1]), delta=0.1)
        self.assertIn("current value -0.74999999925, history mean 0.24999999975",
                      ring.find_element(By.TAG_NAME, "title").get_attribute("textContent"))
        # norm: no anomaly was reported on it; all ops: a line per rank and op, the rings back.
        Select(self.sec.find_element(By.CSS_SELECTOR, "select.mon-op")).select_by_value("norm")
        self.assertEqual(self.charts(), [["0:fc.weight", 2, 0], ["0:fc.bias", 2, 0]])
        Select(self.sec.find_element(By.CSS_SELECTOR, "select.mon-op")).select_by_value("*")
        self.assertEqual(self.charts(), [["0:fc.weight", 12, 2], ["0:fc.bias", 12, 0]])
        Select(self.sec.find_element(By.CSS_SELECTOR, "select.mon-rank")).select_by_value("1")
        self.assertEqual(self.charts(), [["0:fc.weight", 6, 1], ["0:fc.bias", 6, 0]])
        severe = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
        self.assertEqual(severe, [])

    def test_filter_and_the_anomaly_table(self):
        d = self.driver
        self.sec.find_element(By.CSS_SELECTOR, "input.mon-filter").send_keys("bias")
        WebDriverWait(d, 10).until(lambda d: [c[0] for c in self.charts()] == ["0:fc.bias"])
        rows = self.sec.find_elements(By.CSS_SELECTOR, "table.mon-anomalies tr")
        self.assertEqual(len(rows), 5)  # header and four anomalies
        link = rows[2].find_element(By.TAG_NAME, "a")
        self.assertEqual(link.text, "0:fc.input:0/rank0/actv")
        d.execute_script("arguments[0].scrollIntoView({block: 'center'})", link)
        link.click()
        WebDriverWait(d, 10).until(lambda d: self.charts() == [["0:fc.input:0", 2, 2]])
        self.assertEqual(Select(self.sec.find_element(By.CSS_SELECTOR, "select.mon-type")).first_selected_option.get_attribute("value"),
                         "actv")
        severe = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
        self.assertEqual(severe, [])


if __name__ == "__main__":
    unittest.main()
