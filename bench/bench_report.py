#!/usr/bin/env python3
"""bench_report.py: how the report page behaves with a big compare (issue 15 item 3).

Writes a synthetic compare result of ROWS rows (mode all, tprobe compare's JSON form, every row
distinct: names, metrics, statistics; a failing row every 97 rows, red and yellow marks), renders it
with `tprobe report`, and loads the page in Debian's headless chromium (selenium), measuring in the
same run:
  - render:  tprobe report's wall time
  - tti:     time to interactive: navigation start to the page's own "ready" mark
             (window.tprobeReadyAt: data parsed, table, charts and tree drawn)
  - filter:  typing a name filter until the table shows the filtered rows
  - sort:    clicking a column header until the sorted first page shows
  - empty:   the same load of an empty HTML page, the baseline
and prints each as a ratio to the empty page's load. Run from the repository root after building:

    /usr/bin/python3 bench/bench_report.py [--rows 200000] [--bin build/bin]
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

COLUMNS = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
           "NPU Requires_grad", "Bench Requires_grad", "Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr",
           "One Thousandth Err Ratio", "Five Thousandths Err Ratio", "NPU max", "NPU min", "NPU mean", "NPU l2norm",
           "Bench max", "Bench min", "Bench mean", "Bench l2norm", "Requires_grad Consistent",
           "Accuracy Reached or Not", "Err_message", "Data_name", "Match"]
OPS = ["Functional.linear", "Torch.matmul", "Functional.gelu", "Tensor.__add__", "Functional.layer_norm", "Torch.softmax"]


def synthetic_result(path, rows, seed=1):
    rnd = random.Random(seed)
    out, status, highlight = [], [], []
    for i in range(rows):
        op = OPS[i % len(OPS)]
        direction = "forward" if (i // 1000) % 3 else "backward"
        name = f"{op}.{i // 12}.{direction}.{'input' if i % 3 else 'output'}.{i % 4}"
        failing = i % 97 == 0
        cos = rnd.uniform(0.5, 0.98) if failing else 1 - rnd.random() * 1e-4
        err = rnd.uniform(0.01, 3) if failing else rnd.random() * 1e-3
        stats = [rnd.gauss(0, 3) for _ in range(8)]
        out.append([name, name, "torch.bfloat16", "torch.float32", "[32, 64]", "[32, 64]", "False", "False",
                    round(cos, 12), round(err * 10, 12), round(err, 12), round(err / 3, 12), round(rnd.random(), 12),
                    round(rnd.random(), 12), *stats, True, "No" if failing else "Yes", "",
                    f"['{name}.npy', '{name}.npy']", "name"])
        status.append("f" if failing else "o")
        highlight.append("red" if failing else ("yellow" if i % 331 == 0 else None))
    doc = {"format": "tprobe-compare", "version": 1, "mode": "all", "match": "auto", "npu": "", "bench": "",
           "rank": "rank0", "columns": COLUMNS, "rows": out, "highlight": highlight, "row_status": "".join(status),
           "failing_rows": status.count("f"), "unmatched_rows": 0, "error_rows": 0,
           "paired_by_name": rows, "paired_by_alignment": 0,
           "advisor": {"line": "0", "suspect_nodes": out[0][0], "expert_advice": "synthetic"}}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def write_empty_page(folder):
    """The baseline page: no content, ready (body[data-ready], window.tprobeReadyAt) at once."""
    empty = os.path.join(folder, "empty.html")
    with open(empty, "w") as f:
        f.write("<!doctype html><html><head><meta charset=utf-8><title>empty</title></head><body>"
                "<script>window.tprobeReadyAt = performance.now(); document.body.dataset.ready = '1';</script>"
                "</body></html>")
    return empty


def headless_chromium():
    """Debian's headless chromium through selenium, as the benchmarks load pages."""
    o = Options()
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                "--window-size=1400,1000"):
        o.add_argument(arg)
    o.binary_location = shutil.which("chromium")
    d = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=o)
    d.set_page_load_timeout(300)
    return d


def load_until_ready(d, path):
    """Loads `path` and waits for the page's ready mark: seconds from navigation start to it."""
    d.get("file://" + path)
    WebDriverWait(d, 300, poll_frequency=0.02).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")
    return d.execute_script("return window.tprobeReadyAt") / 1e3


def median(xs):
    return sorted(xs)[len(xs) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--repeat", type=int, default=3, help="page loads per measurement (the median is shown)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-report-")
    try:
        results = os.path.join(tmp, "cmp")
        os.makedirs(results)
        synthetic_result(os.path.join(results, "compare_result_rank0_20260101000000.json"), a.rows)
        page = os.path.join(tmp, "report.html")
        t = time.perf_counter()
        subprocess.run([os.path.join(a.bin, "tprobe"), "report", results, "-o", page], check=False,
                       stdout=subprocess.DEVNULL)
        render = time.perf_counter() - t
        empty = write_empty_page(tmp)
        d = headless_chromium()

        def load(path):
            return load_until_ready(d, path)

        def table_text():
            return d.execute_script("const i = document.querySelector('.page-info'); return i ? i.textContent : ''")

        empties, ttis, filters, sorts = [], [], [], []
        for _ in range(a.repeat):
            empties.append(load(empty))
            ttis.append(load(page))
            before = table_text()
            box = d.find_element(By.CSS_SELECTOR, ".name-filter")
            t = time.perf_counter()
            d.execute_script("arguments[0].value = 'matmul.77'; arguments[0].dispatchEvent(new Event('input'))", box)
            WebDriverWait(d, 60, poll_frequency=0.005).until(lambda d: table_text() != before)
            filters.append(time.perf_counter() - t - 0.12)  # less the page's 120 ms typing debounce
            before = table_text()
            d.execute_script("arguments[0].value = ''; arguments[0].dispatchEvent(new Event('input'))", box)
            WebDriverWait(d, 60, poll_frequency=0.005).until(lambda d: table_text() != before)
            th = d.find_element(By.CSS_SELECTOR, 'th[data-col="10"]')
            first = d.execute_script("return document.querySelector('table.rows tbody tr').dataset.row")
            t = time.perf_counter()
            th.click()
            WebDriverWait(d, 60, poll_frequency=0.005).until(
                lambda d: d.execute_script("return document.querySelector('table.rows tbody tr').dataset.row") != first)
            sorts.append(time.perf_counter() - t)
        d.quit()

        size = os.path.getsize(page)
        source = os.path.getsize(os.path.join(results, "compare_result_rank0_20260101000000.json"))
        base = median(empties)
        print(f"rows {a.rows}: page {size / 1e6:.1f} MB (compare JSON {source / 1e6:.1f} MB, ratio {size / source:.2f}); "
              f"tprobe report {render:.2f} s")
        print(f"empty page load (baseline) {base * 1e3:.0f} ms")
        for label, xs in (("time to interactive", ttis), ("name filter", filters), ("sort by MaxAbsErr", sorts)):
            print(f"{label}: {median(xs) * 1e3:.0f} ms = {median(xs) / base:.1f}x the empty page")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
