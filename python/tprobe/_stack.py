"""Python call stacks for stack.json. The C++ capture walks the caller's frames, formats them as
msprobe does ("File {path}, line {n}, in {func}, \\n {code}", innermost first, core/
dump_semantics.h) and interns them: identical stacks (same code objects and lines) are formatted
once and named by their id. tprobe's own frames are left out (the exclude_dir given at open), as
msprobe leaves out its own.
"""


class Stacks:
    def __init__(self, ops, enabled=True):
        self._ops = ops
        self._enabled = enabled

    def current(self):
        """The interned id of the caller's stack, or -1 when stacks are off."""
        if not self._enabled:
            return -1
        return self._ops.stack_current()
