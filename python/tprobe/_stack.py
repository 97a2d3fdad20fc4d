"""Python call stacks for stack.json. The C++ capture walks the caller's frames, formats them as
msprobe does ("File {path}, line {n}, in {func}, \\n {code}", innermost first, core/
dump_semantics.h) and interns them: identical stacks (same code objects and lines) are formatted
once and named by their id. tprobe's own frames are left out (the exclude_dir given at open), as
msprobe leaves out its own.
"""


class Stacks:
    def __init__(self, enabled=True):
        self._enabled = enabled

    def here(self):
        """What ops.entry takes as its stack for the caller's own: -2, which the capture walks
        itself (one operator call instead of two), or -1 when stacks are off."""
        return -2 if self._enabled else -1
