"""Recomputation inside PyTorch's own backward kernels (docs/msprobe-compat.md §2.2, `is_recompute`).

A non-reentrant checkpoint (`torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`) runs
its forward again from a saved-tensor unpack hook, inside the autograd node that unpacks, under a
`torch.autograd.graph.saved_tensors_hooks` context: torch 1.13's `unpack` enters one, torch 2.x's
`recompute_fn` runs under `_recomputation_hook`, a subclass. The capture does not observe the
operators inside a node, so every such context tells it when it begins and ends; one entered
while a node runs (the capture checks) is a recomputation: its operators and modules are dumped
with `is_recompute: true`, as msprobe on torch 2.x dumps them. Entered anywhere else (a forward
pass, `save_on_cpu`) it costs one call and changes nothing.

torch 2.1+ ends a recomputation early by raising once the tensors it needs are saved again
(`early_stop`), so the modules it was running end without their forward hooks: `on_scope_end`
(the module hooks' close_raised_here, set by the debugger) closes them as the recomputation's
context ends, while their entries are still recomputations.
"""

import threading

import torch.autograd.graph

_installed = False
_open = threading.local()  # per thread, a stack: whether each open context began a recomputation
on_scope_end = None  # called as a recomputation's context ends, before the capture is told


def install(ops):
    """Wraps saved_tensors_hooks' __enter__ and __exit__ once per process. The contexts' own
    objects are left alone (a subclass may have __slots__): what each began is kept per thread, in
    the order `with` enters and leaves them."""
    global _installed
    if _installed:
        return
    _installed = True
    cls = torch.autograd.graph.saved_tensors_hooks
    enter, leave = cls.__enter__, cls.__exit__

    def __enter__(self):
        result = enter(self)
        began = bool(ops.recompute_scope_enter())
        if not hasattr(_open, "stack"):
            _open.stack = []
        _open.stack.append(began)
        return result

    def __exit__(self, *args):
        try:
            return leave(self, *args)
        finally:
            stack = getattr(_open, "stack", None)
            if stack and stack.pop():
                try:
                    if on_scope_end is not None:
                        on_scope_end()
                finally:
                    ops.recompute_scope_exit()

    cls.__enter__ = __enter__
    cls.__exit__ = __exit__
