"""Python call stacks for stack.json, interned: identical stacks (same code objects and lines) are
formatted and sent to the capture once, then named by their id. Lines are msprobe's,
innermost frame first: "File {path}, line {n}, in {func}, \\n {code}". tprobe's own frames are
left out, as msprobe leaves out its own.
"""

import json
import linecache
import sys

from . import _native


class Stacks:
    def __init__(self, ops, enabled=True):
        self._ops = ops
        self._enabled = enabled
        self._ids = {}
        self._exclude = _native.PACKAGE_DIR + "/"

    def current(self):
        """The interned id of the caller's stack, or -1 when stacks are off."""
        if not self._enabled:
            return -1
        frames = []
        f = sys._getframe(1)
        while f is not None:
            code = f.f_code
            if not code.co_filename.startswith(self._exclude):
                frames.append((code, f.f_lineno))
            f = f.f_back
        key = tuple(frames)
        stack_id = self._ids.get(key)
        if stack_id is None:
            lines = [f"File {code.co_filename}, line {line}, in {code.co_name}, \n "
                     f"{linecache.getline(code.co_filename, line).strip()}" for code, line in frames]
            stack_id = int(self._ops.stack_intern(json.dumps(lines)))
            self._ids[key] = stack_id
        return stack_id
