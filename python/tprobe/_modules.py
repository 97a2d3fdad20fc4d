"""Module hooks for levels L0 and mix (docs/msprobe-compat.md §2.2, §2.5, §2.9).

Entries, counted from 0 per step:
  Module.{path}.{Class}.forward.{n}          input_args, input_kwargs, output, parameters
  Module.{path}.{Class}.backward.{n}         input (grads of the outputs), output (grads of the inputs)
  Module.{path}.{Class}.parameters_grad.{k}  {param: [param.grad]}
where path is the name from named_modules() (prefixed "{i}." for the i-th model of a list); the
root module itself is not dumped. A module's forward entry is written when the module returns, so
the operators inside it come first, as in msprobe's dumps.

Parameter gradients follow msprobe 8.3's hook manager (checked against its dumps): a module's
entry is written each time its parameters' gradient accumulators run while capturing, after they
ran (param.grad, the sum a gradient-accumulation loop builds, not the pass's own contribution);
only for modules whose forward ran while capturing (msprobe registers these hooks there: a
submodule whose weights its parent uses directly, as MultiheadAttention's out_proj, has none); and
k is the number of times the module's first parameter to fire has fired, counted for the
debugger's life, not per step (msprobe's counter is never reset).

The backward is not observed with register_full_backward_hook, which wraps inputs and outputs in
an extra autograd function (failing with in-place operations on them, and changing the order in
which gradients accumulate, msprobe's FAQ). The C++ capture links the module's backward from the
autograd graph instead (module_enter/module_exit): the graph is left as it was.

A module whose forward raises gets no forward hook call (torch before 2.1 has no always_call), yet
the operators that ran inside it named it their parent, and the modules running now must not: a
caught exception (torch 2.1+'s non-reentrant checkpoint stops every recomputation this way, once
the tensors it needs are saved again) would otherwise leave the module "running" for the rest of
the step, the parent of everything after it. So each running module keeps the frame of the
Module._call_impl that runs it; the next module hook of the thread closes the modules whose frame
is no longer on the stack (an enclosing module's forward hook closes those above it at once), as
do the end of a recomputation's saved-tensor hooks context (_recompute.py) and stop(). Operators
run between the raise and that point still name the module their parent. A module so closed is
dumped as an operator that raised is: its forward entry with its inputs and parameters and no
output, a node of construct.json, no stack (its call is gone), its backward linked to nothing.
Only the calling thread's modules are closed so: another thread's frames are not on its stack.
"""

import sys
import threading

import torch

from ._values import grad_tensors, output_items, send, walk


def flush_tensors(ops, entry, tensors, slots):
    """Captures the tensors gathered so far at their slots, in one call, and empties the lists."""
    if tensors:
        ops.tensors(entry, tensors, "\n".join(slots))
        tensors.clear()
        slots.clear()


_CALL_IMPL = torch.nn.Module._call_impl.__code__  # the frame that runs a module's hooks and forward
_RAISED = object()  # the output of a module whose forward raised


def _call_impl_frame():
    """The frame of the Module._call_impl that called the running hook (directly, or through the
    lambda that adapts hooks for torch before 2.0), or None."""
    frame = sys._getframe(2)
    for _ in range(3):
        if frame is None or frame.f_code is _CALL_IMPL:
            return frame
        frame = frame.f_back
    return None


class _Frame:
    """A module running now: its forward entry, the parent entry, module_enter's token, the
    module, the frame of the Module._call_impl running it and its thread, and its arguments (for
    its entry, should its forward raise)."""
    __slots__ = ("forward", "parent", "token", "module", "impl", "thread", "args", "kwargs")

    def __init__(self, forward, parent, token, module, impl, args, kwargs):
        self.forward, self.parent, self.token, self.module = forward, parent, token, module
        self.impl, self.thread, self.args, self.kwargs = impl, threading.get_ident(), args, kwargs


class ModuleHooks:
    def __init__(self, ops, stacks):
        self._ops = ops
        self._stacks = stacks
        self.active = False
        self._forward_counts = {}
        self._grad_calls = {}     # module name → [k, the parameter whose firing advances k]: never reset
        self._forward_seen = set()  # modules whose forward ran while capturing: their gradients are dumped
        self._accumulators = []   # the parameters' AccumulateGrad nodes, held so that they (and
                                  # their hooks) live as long as the parameters
        self._running = []   # _Frame of each module running now, outermost first
        self._frames = {}    # id(module) → [its _Frame in _running]: modules can recurse
        self._hooked = set()
        self._handles = []

    def reset_step(self):
        self._forward_counts.clear()
        self._running.clear()
        self._frames.clear()

    def install(self, model):
        """Hooks every submodule of `model` (a Module, or a list or tuple of them) once."""
        models = list(model) if isinstance(model, (list, tuple)) else [model]
        indexed = isinstance(model, (list, tuple))
        for index, root in enumerate(models):
            if id(root) in self._hooked:
                continue
            self._hooked.add(id(root))
            for path, module in root.named_modules():
                if module is root:
                    continue
                prefix = f"{index}.{path}" if indexed else path
                self._hook(module, f"Module.{prefix}.{module.__class__.__name__}")

    def _hook(self, module, name):
        pre, post = self._forward_hooks(name)
        try:  # torch >= 2.0 shows keyword arguments to hooks
            self._handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
            self._handles.append(module.register_forward_hook(post, with_kwargs=True))
        except TypeError:
            self._handles.append(module.register_forward_pre_hook(lambda m, args: pre(m, args, None)))
            self._handles.append(module.register_forward_hook(lambda m, args, out: post(m, args, None, out)))
        for param_name, param in module.named_parameters(recurse=False):
            if param.requires_grad:
                # A post hook of the parameter's AccumulateGrad node sees param.grad once the pass's
                # gradient is added in, as msprobe's does (a hook on the tensor would see the
                # pass's gradient alone). The node is reached through a view, as torch offers no
                # other way before 2.1; install() runs before the capture starts, so no operator
                # of this is dumped. start() may be called under no_grad or inference_mode.
                with torch.inference_mode(False), torch.enable_grad():
                    view = param.expand_as(param)
                if view.grad_fn is None:
                    continue  # not a tensor autograd tracks (msprobe skips it too)
                accumulator = view.grad_fn.next_functions[0][0]
                self._accumulators.append(accumulator)
                self._handles.append(accumulator.register_hook(self._grad_hook(name, param_name, param)))

    def _forward_hooks(self, name):
        ops = self._ops

        def pre(module, args, kwargs):
            if not self.active:
                return None
            n = self._forward_counts.get(name, 0)
            self._forward_counts[name] = n + 1
            self._forward_seen.add(name)
            forward = f"{name}.forward.{n}"
            impl = _call_impl_frame()
            if self._running:
                self._close_raised(impl)
            parent = self._running[-1].forward if self._running else None
            tensors, slots = [], []
            for i, a in enumerate(args):  # all of them: those without grad are null in the backward
                grad_tensors(a, f"input.{i}", tensors, slots, every=True)
            token = ops.module_enter(forward, tensors, "\n".join(slots))
            frame = _Frame(forward, parent, int(token), module, impl, args, kwargs)
            self._running.append(frame)
            self._frames.setdefault(id(module), []).append(frame)
            return None

        def post(module, args, kwargs, output):
            if self._running:
                self._close_raised(_call_impl_frame())  # those above this one raised inside it
            frames = self._frames.get(id(module))
            if not frames:
                return None  # the capture started while this module was running
            frame = frames.pop()
            if self._running and self._running[-1] is frame:
                self._running.pop()
            self._dump_forward(frame, self._stacks.here(), args, kwargs, output)
            tensors, slots = [], []
            for i, o in output_items(output):
                grad_tensors(o, f"output.{i}", tensors, slots)
            # The C++ capture names the backward entry and its parent (core/dump_semantics.h).
            ops.module_exit(frame.token, frame.forward, frame.parent, tensors, "\n".join(slots))
            return None

        return pre, post

    def _dump_forward(self, frame, stack, args, kwargs, output):
        """The forward entry: inputs, keyword arguments, outputs (none when `output` is _RAISED)
        and parameters, in that order."""
        ops, forward = self._ops, frame.forward
        if not ops.entry(forward, frame.parent, stack, 0):
            return
        # Tensors go in one call per run of them: a value between two flushes the first run, so
        # that the leaves keep their order.
        tensors, slots = [], []

        def tensor(slot, t):
            tensors.append(t)
            slots.append(slot)

        def value(slot, v):
            flush_tensors(ops, forward, tensors, slots)
            send(ops, forward, slot, v)

        for i, a in enumerate(args):
            walk(a, f"input.{i}", tensor, value)
        for k, v in (kwargs or {}).items():
            walk(v, f"kwargs.{k}", tensor, value)
        if output is not _RAISED:
            for i, o in output_items(output):
                walk(o, f"output.{i}", tensor, value)
        for param_name, param in frame.module.named_parameters(recurse=False):
            tensor(f"parameters.{param_name}", param)
        flush_tensors(ops, forward, tensors, slots)

    def close_raised_here(self):
        """Closes the running modules whose forward raised (whose frame the caller's stack does
        not hold): at stop(), and as a recomputation's context ends; only while capturing."""
        if self._running and self.active:
            self._close_raised(sys._getframe(1))

    def _close_raised(self, here):
        """Closes the running modules whose Module._call_impl frame is not `here` or one of its
        callers: their forward raised. The innermost first. Without frames to compare (a hook
        called from elsewhere than _call_impl, as compiled code may) nothing is closed."""
        if here is None:
            return
        thread = threading.get_ident()
        while self._running:
            impl = self._running[-1].impl
            if impl is None or self._running[-1].thread != thread:
                return
            caller = here
            while caller is not None and caller is not impl:
                caller = caller.f_back
            if caller is not None:
                return  # still running, and so is every module below it
            self._close(self._running[-1])

    def _close(self, frame):
        """Ends the innermost running module, whose forward raised."""
        self._running.pop()
        frames = self._frames.get(id(frame.module))
        if frames and frames[-1] is frame:
            frames.pop()
        self._dump_forward(frame, -1, frame.args, frame.kwargs, _RAISED)
        self._ops.module_exit(frame.token, frame.forward, frame.parent, [], "")

    def _grad_hook(self, name, param_name, param):
        ops = self._ops

        def hook(grad_inputs, grad_outputs):
            if not self.active or name not in self._forward_seen or param.grad is None:
                return None
            calls = self._grad_calls.get(name)
            if calls is None:
                calls = self._grad_calls[name] = [0, param_name]
            elif calls[1] == param_name:
                calls[0] += 1
            entry = f"{name}.parameters_grad.{calls[0]}"
            if ops.entry(entry, None, -1, -1):
                ops.tensor(entry, param_name, param.grad)
            return None

        return hook
