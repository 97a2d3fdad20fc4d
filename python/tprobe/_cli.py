"""The `tprobe` command of a pip install: replaces itself with the package's bin/tprobe, which runs
its stages and tools from its own directory (launcher/tprobe)."""

import os
import sys

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def main():
    binary = os.path.join(PACKAGE_DIR, "bin", "tprobe")
    if not os.access(binary, os.X_OK):
        print(f"tprobe: fatal: {binary} is missing: this tprobe package was not installed by pip install .",
              file=sys.stderr)
        sys.exit(111)
    os.execv(binary, [binary, *sys.argv[1:]])
