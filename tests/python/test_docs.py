"""The docs stay references (issue 64): each test fails when one stops being true.

- docs/performance.md is a page of at most 400 lines, not a diary;
- nothing cites a document outside the repository: the msprobe contract is docs/msprobe-compat.md,
  cited as `docs/msprobe-compat.md §N`, and every such §N names a section of it;
- every TPROBE_* environment variable the code reads is in performance.md's switch table (names
  that are not environment variables are listed below, each with what it is), and every row of that
  table names a variable the code or a benchmark reads;
- every relative link in README.md and docs/**/*.md reaches a file, and a link with an anchor a
  heading of that file; every `docs/performance.md "Section"` quoted in the tree is in that page;
- docs/architecture.md names only files that exist and functions the sources define.

Needs no build and no torch; run with `python3 -m unittest test_docs` in tests/python.
"""

import os
import re
import subprocess
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PERF = "docs/performance.md"
COMPAT = "docs/msprobe-compat.md"
CODE_DIRS = ["capture", "transport", "stages", "core", "tools", "launcher", "python"]

# TPROBE_* names in CODE_DIRS that are not environment variables.
NOT_ENVIRONMENT = {
    # C API constants and flags of capture/tprobe_capture.h
    "TPROBE_OK", "TPROBE_ERROR", "TPROBE_SKIPPED", "TPROBE_CAPTURE_SAVE", "TPROBE_CAPTURE_CRC32",
    "TPROBE_STATS_AUTO", "TPROBE_STATS_COPY", "TPROBE_MONITOR_ON", "TPROBE_MONITOR_OFF",
    "TPROBE_ENTRY_NAME_MAX", "TPROBE_DL_BOOL", "TPROBE_STAT_BOOL", "TPROBE_STAT_INT",
    "TPROBE_STAT_NULL", "TPROBE_STAT_REAL", "TPROBE_STAT_", "TPROBE_FUZZ_", "TPROBE_FUZZ_RATIO",
    "TPROBE_FUZZ_NO_RATIO", "TPROBE_FUZZ_SYMBOL_FLIPPING",
    # include guard, compile definitions and CMake variables
    "TPROBE_CAPTURE_H", "TPROBE_HAVE_ISAL", "TPROBE_HAVE_STREAMING_STORES", "TPROBE_SIMD_CLONES", "TPROBE_ONE_PASS_AVX2",
    "TPROBE_MSGPACK", "TPROBE_BINARY_TARGETS", "TPROBE_PYTHON_DIR", "TPROBE_REPRO_ENGINE",
    "TPROBE_VERSION",
    # the device path's statistics kernel (capture/torch/segment_kernel.h) and its CMake string
    "TPROBE_SEGMENT_KERNEL_H", "TPROBE_SEGMENT_FN", "TPROBE_SEGMENT_THREADS", "TPROBE_SEGMENT_KERNEL_EMULATED",
    "TPROBE_SEGMENT_KERNEL_SOURCE",
    # the prefix of the three TPROBE_CURVE_* keys, as text
    "TPROBE_CURVE_",
}


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def repo_files():
    """Tracked and untracked-but-not-ignored files: what the next commit can hold."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                         capture_output=True, check=True).stdout.decode()
    return sorted(p for p in set(out.split("\0")) if p and os.path.isfile(os.path.join(ROOT, p)))


def text_files():
    for rel in repo_files():
        if rel.endswith((".png", ".npy", ".pt", ".xlsx", ".gz", ".zip", ".so")):
            continue
        try:
            yield rel, read(rel)
        except UnicodeDecodeError:
            continue


def github_anchor(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(text):
    out, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        m = re.match(r"(#{1,6}) (.+)", line)
        if m and not fence:
            out.append(m.group(2).strip())
    return out


def compat_sections():
    sections = set()
    for h in headings(read(COMPAT)):
        m = re.match(r"(\d+(?:\.\d+)*)\.? ", h)
        if m:
            sections.add(m.group(1))
    return sections


def switch_table_rows():
    """The variables named in the first column of performance.md's switch table."""
    text = read(PERF)
    start = text.index("## Runtime switches")
    end = text.find("\n## ", start + 1)
    names = set()
    for line in text[start:end if end > 0 else len(text)].splitlines():
        if line.startswith("| `TPROBE_"):
            first = line.split("|")[1]
            names.update(re.findall(r"TPROBE_[A-Z0-9_]+", first))
    return names


def code_tokens(dirs):
    tokens = set()
    for rel, text in text_files():
        if rel.split("/")[0] in dirs:
            tokens.update(re.findall(r"TPROBE_[A-Z0-9_]*", text))
    return tokens


class PerformanceIsAReference(unittest.TestCase):
    def test_performance_md_is_at_most_400_lines(self):
        lines = read(PERF).count("\n")
        self.assertLessEqual(lines, 400, f"{PERF} has {lines} lines: keep today's figures, history lives in git")

    def test_no_cpp_file_of_capture_or_transport_is_over_1000_lines(self):
        """Issue 64: each file holds one concern; none in capture/ or transport/ grows past 1,000 lines."""
        for top in ("capture", "transport"):
            for d, _, names in os.walk(os.path.join(ROOT, top)):
                for n in names:
                    if n.endswith((".cpp", ".h")):
                        with open(os.path.join(d, n), encoding="utf-8") as f:
                            lines = sum(1 for _ in f)
                        self.assertLessEqual(lines, 1000, os.path.relpath(os.path.join(d, n), ROOT))

    def test_every_environment_variable_the_code_reads_is_in_the_switch_table(self):
        table = switch_table_rows()
        missing = sorted(code_tokens(CODE_DIRS) - table - NOT_ENVIRONMENT)
        self.assertEqual(missing, [], f"TPROBE_* names read by the code but not in {PERF}'s switch table "
                                      "(add a row, or to NOT_ENVIRONMENT in this test if it is no variable)")

    def test_every_row_of_the_switch_table_is_read_somewhere(self):
        read_anywhere = code_tokens(CODE_DIRS + ["bench", "scripts"])
        stale = sorted(switch_table_rows() - read_anywhere)
        self.assertEqual(stale, [], f"rows of {PERF}'s switch table that nothing reads any more")


class CitationsStayInTheRepository(unittest.TestCase):
    def test_no_file_cites_a_document_outside_the_repository(self):
        outside = "../" + "shared/"
        old_next = "msprobe-" + "next.md"
        found = [f"{rel}:{n}" for rel, text in text_files() for n, line in enumerate(text.splitlines(), 1)
                 if outside in line or old_next in line]
        self.assertEqual(found, [], "cite docs/msprobe-compat.md instead")

    def test_every_msprobe_compat_citation_names_a_section_that_exists(self):
        sections = compat_sections()
        self.assertIn("4.6", sections)  # the parse itself
        name = "msprobe-" + "compat.md"  # split, so that this line is no citation
        bad = []
        for rel, text in text_files():
            if rel == COMPAT:
                continue
            for n, line in enumerate(text.splitlines(), 1):
                at = line.find(name)
                while at >= 0:
                    if line[max(0, at - 5):at] != "docs/":
                        bad.append(f"{rel}:{n}: cite it as docs/{name}")
                    nxt = line.find(".md", at + len(name))
                    tail = line[at + len(name):nxt if nxt >= 0 else len(line)]
                    for ref in re.findall(r"§(\d+(?:\.\d+)*)", tail):
                        if ref not in sections:
                            bad.append(f"{rel}:{n}: §{ref} is no section of {COMPAT}")
                    at = line.find(name, at + 1)
        self.assertEqual(bad, [])


class LinksResolve(unittest.TestCase):
    def markdown_files(self):
        return ["README.md"] + [rel for rel in repo_files() if rel.startswith("docs/") and rel.endswith(".md")]

    def test_relative_links_reach_a_file_and_an_anchor(self):
        bad = []
        for rel in self.markdown_files():
            text = read(rel)
            for target in re.findall(r"\]\(([^)\s]+)\)", text):
                if re.match(r"[a-z]+:", target):
                    continue
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(rel), path)) if path else rel
                if not os.path.exists(os.path.join(ROOT, dest)):
                    bad.append(f"{rel}: ({target}): no file {dest}")
                    continue
                if anchor and dest.endswith(".md"):
                    anchors = {github_anchor(h) for h in headings(read(dest))}
                    if anchor not in anchors:
                        bad.append(f"{rel}: ({target}): no heading #{anchor} in {dest}")
        self.assertEqual(bad, [])

    def test_sections_of_performance_md_quoted_in_the_tree_are_there(self):
        page = " ".join(read(PERF).lower().split())
        bad = []
        for rel, text in text_files():
            if rel == PERF or "performance.md" not in text:
                continue
            # Comments wrap: join the lines without their comment markers.
            flat = " ".join(re.sub(r"^\s*(//+|#+|\*)\s?", "", line) for line in text.splitlines())
            for quoted in re.findall(r"performance\.md`?,?\s+\"([^\"]{3,120})\"", flat):
                if " ".join(quoted.lower().split()) not in page:
                    bad.append(f"{rel}: \"{quoted}\"")
        self.assertEqual(bad, [], f"quoted sections that {PERF} no longer has")


class ArchitectureNamesWhatExists(unittest.TestCase):
    def test_files_and_functions_named_exist(self):
        text = read("docs/architecture.md")
        sources = [t for rel, t in text_files() if rel.endswith((".h", ".hpp", ".cpp", ".py", ".cmake"))]
        bad = []
        for quoted in re.findall(r"`([^`]+)`", text):
            if re.fullmatch(r"[\w.-]+(/[\w.-]+)+/?", quoted) and "{" not in quoted:
                if not os.path.exists(os.path.join(ROOT, quoted)):
                    bad.append(f"no file {quoted}")
            m = re.fullmatch(r"(?:[\w]+::)?(\w+)\(\)", quoted)
            if m and not any(re.search(rf"\b{m.group(1)}\b", s) for s in sources):
                bad.append(f"no function {quoted} in the sources")
        self.assertEqual(bad, [])


if __name__ == "__main__":
    unittest.main()
