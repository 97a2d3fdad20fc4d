#!/usr/bin/env python3
"""bench_report_graph.py: the report's graph view with a big .vis.db (issue 65 item 3).

Writes a synthetic compare_{ts}.vis.db straight in msprobe 8.3.3's schema (python's sqlite3; the
DDL is the one core/graph/vis_db.cpp writes): an NPU graph of NODES nodes and its Bench twin, a
root holding 100 modules, each of (NODES/100 - 1) APIs in one wide module (the module with many
children), every API one input and one output item with msprobe's summary fields, every node
matched, precision_index spread over the bands and one node in the error band. Renders it with
`tprobe report` and loads the page in Debian's headless chromium (selenium), measuring:
  - ready:   navigation start to the page's "ready" mark (window.tprobeReadyAt: data parsed, the
             graph's first level drawn)
  - expand:  a click on the widest module's toggle until its children (the first 200, the page's
             chunk; a "more" row makes the next) are laid out and painted (two animation frames)
  - empty:   the same load of an empty HTML page, the baseline
and prints each in ms and as a ratio to the empty page's load, with the page's size. Run from the
repository root after building:

    /usr/bin/python3 bench/bench_report_graph.py [--graph-nodes 100000] [--bin build/bin]
"""

import argparse
import json
import os
import random
import shutil
import sqlite3
import subprocess
import tempfile
import time

from bench_report import headless_chromium, load_until_ready, median, write_empty_page

DDL = """
CREATE TABLE tb_nodes (id TEXT PRIMARY KEY, graph_id TEXT NOT NULL, node_order INTEGER NOT NULL, node_name TEXT NOT NULL,
 node_type TEXT NOT NULL, up_node TEXT, sub_nodes TEXT, precision_index INTEGER, overflow_level TEXT,
 micro_step_id INTEGER NOT NULL, matched_node_link TEXT, stack_id TEXT, parallel_merge_info TEXT,
 matched_distributed TEXT, modified INTEGER NOT NULL, input_data TEXT, output_data TEXT, data_source TEXT,
 dump_data_dir TEXT, step INTEGER NOT NULL, rank INTEGER NOT NULL);
CREATE TABLE tb_stack (id TEXT PRIMARY KEY, stack_info TEXT);
CREATE TABLE tb_config (id TEXT PRIMARY KEY, graph_type TEXT NOT NULL, task TEXT, tool_tip TEXT, micro_steps INTEGER,
 overflow_check INTEGER, node_colors TEXT NOT NULL, rank_list TEXT NOT NULL, step_list TEXT NOT NULL);
"""
COLORS = {"#FFFCF3": {"value": [0, 0.2], "description": "pass"}, "#FFEDBE": {"value": [0.2, 0.4], "description": ""},
          "#FFDC7F": {"value": [0.4, 0.6], "description": ""}, "#FFC62E": {"value": [0.6, 0.8], "description": ""},
          "#FF704D": {"value": [0.8, 1], "description": "error"}, "#C7C7C7": {"value": [], "description": "unmatched"}}


def item(rnd, compare):
    d = {"type": "torch.Tensor", "dtype": "torch.bfloat16", "shape": "[32, 4096]", "Max": f"{rnd.gauss(3, 1):.6f}",
         "Min": f"{rnd.gauss(-3, 1):.6f}", "Mean": f"{rnd.gauss(0, 0.1):.6f}", "Norm": f"{rnd.uniform(10, 300):.6f}",
         "requires_grad": "True", "data_name": "-1"}
    if compare:
        d.update({"Max diff": f"{rnd.gauss(0, 1e-3):.6f}", "Min diff": f"{rnd.gauss(0, 1e-3):.6f}",
                  "Mean diff": f"{rnd.gauss(0, 1e-4):.6f}", "L2norm diff": f"{rnd.gauss(0, 1e-2):.6f}",
                  "MaxRelativeErr": f"{rnd.uniform(0, 1):.6f}%", "MinRelativeErr": f"{rnd.uniform(0, 1):.6f}%",
                  "MeanRelativeErr": f"{rnd.uniform(0, 1):.6f}%", "NormRelativeErr": f"{rnd.uniform(0, 1):.6f}%",
                  "Requires_grad Consistent": "True"})
    return d


def write_db(path, nodes, seed=1):
    rnd = random.Random(seed)
    modules = 100
    per = max(1, nodes // modules - 1)
    db = sqlite3.connect(path)
    db.executescript(DDL)
    rows = []
    for source in ("NPU", "Bench"):
        gid = f"{source}_0_0"
        order = 0
        top = []
        for m in range(modules):
            mod = f"Module.layers.{m}.Block.forward.0"
            kids = []
            for a in range(per):
                name = f"Functional.linear.{m * per + a}.forward"
                kids.append(name)
                pi = None
                if source == "NPU":
                    pi = 0.9 if (m, a) == (modules // 2, per // 2) else round(rnd.uniform(0, 0.79), 6)
                rows.append((f"{gid}_{name}", gid, order, name, "1", mod, "", pi, None, 0,
                             json.dumps(["DefaultModel", mod, name]), f"{gid}_0", "", "{}", 0,
                             json.dumps({f"{name}.input.0": item(rnd, source == "NPU")}),
                             json.dumps({f"{name}.output.0": item(rnd, source == "NPU")}), source, None, 0, 0))
                order += 1
            rows.append((f"{gid}_{mod}", gid, order, mod, "0", "DefaultModel", json.dumps(kids),
                         0.1 if source == "NPU" else None, None, 0, json.dumps(["DefaultModel", mod]), f"{gid}_0", "",
                         "{}", 0, "{}", "{}", source, None, 0, 0))
            order += 1
            top.append(mod)
        rows.append((f"{gid}_DefaultModel", gid, order, "DefaultModel", "0", "", json.dumps(top), None, None, 0,
                     json.dumps(["DefaultModel"]), f"{gid}_0", "", "{}", 0, "{}", "{}", source, None, 0, 0))
    db.executemany("INSERT INTO tb_nodes VALUES (" + ",".join("?" * 21) + ")", rows)
    db.execute("INSERT INTO tb_config VALUES ('1','compare','summary',NULL,1,0,?,'[0]','[0]')", (json.dumps(COLORS),))
    db.commit()
    db.close()
    return per, order + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph-nodes", type=int, default=100000, help="nodes of the NPU graph (the Bench twin as many)")
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--repeat", type=int, default=3, help="page loads per measurement (the median is shown)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-report-graph-")
    try:
        results = os.path.join(tmp, "graph")
        os.makedirs(results)
        db = os.path.join(results, "compare_20260101000000.vis.db")
        per, n = write_db(db, a.graph_nodes)
        page = os.path.join(tmp, "report.html")
        t = time.perf_counter()
        p = subprocess.run([os.path.join(a.bin, "tprobe-report"), results, "-o", page], stdout=subprocess.PIPE, text=True)
        render = time.perf_counter() - t
        if p.returncode not in (0, 1):
            raise SystemExit(f"tprobe-report failed: exit {p.returncode}")
        empty = write_empty_page(tmp)  # bench_report.py's baseline, browser and load, shared
        d = headless_chromium()
        d.set_script_timeout(120)

        def load(path):
            return load_until_ready(d, path)

        empties, readies, expands = [], [], []
        for _ in range(a.repeat):
            empties.append(load(empty))
            readies.append(load(page))
            # the widest module (per children), its toggle clicked; laid out and painted (two frames)
            ms = d.execute_async_script("""
              const done = arguments[arguments.length - 1];
              const node = document.querySelector('section.graph .gnode[data-depth="1"]');
              const t0 = performance.now();
              node.querySelector('.gtoggle').click();
              document.body.offsetHeight;
              requestAnimationFrame(() => requestAnimationFrame(() => done([performance.now() - t0,
                node.querySelectorAll('.gkids .gnode').length])));""")
            if ms[1] != min(per, 200):  # the page makes a module's children 200 at a time (GRAPH_CHUNK)
                raise SystemExit(f"expand showed {ms[1]} children, expected {min(per, 200)}")
            expands.append(ms[0] / 1e3)
        d.quit()
        size = os.path.getsize(page)
        base = median(empties)
        print(f"graph nodes {n} (NPU) + {n} (Bench), widest module {per} children: page {size / 1e6:.1f} MB "
              f"(vis.db {os.path.getsize(db) / 1e6:.1f} MB); tprobe report {render:.2f} s")
        print(f"empty page load (baseline) {base * 1e3:.0f} ms")
        print(f"ready (first level drawn): {median(readies) * 1e3:.0f} ms = {median(readies) / base:.1f}x the empty page")
        print(f"expand a module of {per} children: {median(expands) * 1e3:.0f} ms = {median(expands) / base:.1f}x the empty page")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
