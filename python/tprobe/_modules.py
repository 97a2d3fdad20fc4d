"""Module hooks for levels L0 and mix (msprobe-compat.md §1.2, §1.5, §1.9).

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
"""

import torch

from ._values import grad_tensors, output_items, send, walk


def flush_tensors(ops, entry, tensors, slots):
    """Captures the tensors gathered so far at their slots, in one call, and empties the lists."""
    if tensors:
        ops.tensors(entry, tensors, "\n".join(slots))
        tensors.clear()
        slots.clear()


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
        self._running = []   # forward entries of the modules running now
        self._frames = {}    # id(module) → [(forward entry, parent, token, n)]: modules can recurse
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
            parent = self._running[-1] if self._running else None
            self._running.append(forward)
            tensors, slots = [], []
            for i, a in enumerate(args):  # all of them: those without grad are null in the backward
                grad_tensors(a, f"input.{i}", tensors, slots, every=True)
            token = ops.module_enter(forward, tensors, "\n".join(slots))
            self._frames.setdefault(id(module), []).append((forward, parent, int(token), n))
            return None

        def post(module, args, kwargs, output):
            frames = self._frames.get(id(module))
            if not frames:
                return None  # the capture started while this module was running
            forward, parent, token, n = frames.pop()
            if self._running and self._running[-1] == forward:
                self._running.pop()
            if ops.entry(forward, parent, self._stacks.here(), 0):
                # Tensors go in one call per run of them: a value between two flushes the first
                # run, so that the leaves keep their order.
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
                for i, o in output_items(output):
                    walk(o, f"output.{i}", tensor, value)
                for param_name, param in module.named_parameters(recurse=False):
                    tensor(f"parameters.{param_name}", param)
                flush_tensors(ops, forward, tensors, slots)
            tensors, slots = [], []
            for i, o in output_items(output):
                grad_tensors(o, f"output.{i}", tensors, slots)
            # The C++ capture names the backward entry and its parent (core/dump_semantics.h).
            ops.module_exit(token, forward, parent, tensors, "\n".join(slots))
            return None

        return pre, post

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
