"""The TPROBE_* switches (issue 64): each is a documented user setting, set by the launcher, or a
named test-only hook; none keeps an older path alive for comparisons.

- every row of docs/performance.md's switch table has a kind of user, launcher or test-only (each
  kind a row may list, as "user (`deferred`), test-only (`direct`)"), and a user row says why;
- the switches removed with their paths (TPROBE_BATCH, TPROBE_STACK_REFS, TPROBE_PASS_UNCHANGED,
  TPROBE_BENCH_DEBUG) are read and named nowhere: not in the code, the tests, the benches or the
  docs (git history and docs/performance-history.md keep them).
(test_docs checks that the table lists every variable the code reads, and nothing else.)

Needs no build and no torch.
"""
import os
import re
import subprocess
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PERF = os.path.join(ROOT, "docs", "performance.md")
KINDS = {"user", "launcher", "test-only"}
REMOVED = ["TPROBE_BATCH", "TPROBE_STACK_REFS", "TPROBE_PASS_UNCHANGED", "TPROBE_BENCH_DEBUG"]
# Where the removed names may stay: the history of decisions, and this test.
HISTORY = {"docs/performance-history.md", "tests/python/test_switches.py"}


def table_rows():
    """(variables, kind cell) of each row of performance.md's switch table."""
    with open(PERF, encoding="utf-8") as f:
        text = f.read()
    rows, inside = [], False
    for line in text[text.index("## Runtime switches"):].splitlines()[1:]:
        if line.startswith("## "):
            break
        if line.startswith("| `TPROBE_"):
            inside = True
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows.append((re.findall(r"TPROBE_[A-Z0-9_]+", cells[0]), cells[-1], cells[1]))
        elif inside and not line.startswith("|"):
            break
    return rows


def kinds_of(cell):
    """The kinds a kind cell names: "user (`deferred`), test-only (`direct`)" -> {user, test-only}."""
    return {re.sub(r"\s*\(.*?\)", "", part).strip() for part in cell.split(",")}


class SwitchTableTest(unittest.TestCase):
    def test_every_row_has_a_known_kind(self):
        rows = table_rows()
        self.assertGreater(len(rows), 20)
        bad = [(names, kind) for names, kind, _ in rows if not kinds_of(kind) or not kinds_of(kind) <= KINDS]
        self.assertEqual(bad, [], f"kinds are {sorted(KINDS)}: a diagnostics switch is removed with its path, "
                                  "or becomes a user setting with its reason")

    def test_kinds_of_reads_each_kind(self):
        self.assertEqual(kinds_of("user (`deferred`), test-only (`direct`)"), {"user", "test-only"})
        self.assertEqual(kinds_of("diagnostics"), {"diagnostics"})
        self.assertFalse(kinds_of("diagnostics") <= KINDS)

    def test_removed_switches_are_in_no_row(self):
        named = {n for names, _, _ in table_rows() for n in names}
        self.assertEqual(sorted(named & set(REMOVED)), [])


class RemovedSwitchesTest(unittest.TestCase):
    def test_removed_switches_are_named_nowhere(self):
        files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                               capture_output=True, check=True).stdout.decode().split("\0")
        pattern = re.compile(r"\b(" + "|".join(REMOVED) + r")\b")
        found = []
        for rel in files:
            path = os.path.join(ROOT, rel)
            if not rel or rel in HISTORY or not os.path.isfile(path):
                continue
            try:
                with open(path, encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        if pattern.search(line):
                            found.append(f"{rel}:{n}")
            except UnicodeDecodeError:
                continue
        self.assertEqual(found, [], "removed switches still named")


if __name__ == "__main__":
    unittest.main()
