"""PrecisionDebugger: msprobe's entry point, over tprobe's capture and pipeline.

    debugger = PrecisionDebugger(config_path="./config.json")
    for x, y in loader:
        debugger.start(model)      # the model is needed for levels L0 and mix
        ...
        debugger.stop()
        debugger.step()

Levels: L1 observes every ATen operator in C++ (libtprobe_torch.so), L0 every submodule of the
model through module hooks, mix both (with construct.json parents). Where the records go:
  - under `tprobe run MANIFEST -- python train.py`, to that run's pipeline (TPROBE_ENDPOINT);
  - otherwise (direct mode) to a pipeline this object starts itself from the config's task
    (pipelines/statistics.json or pipelines/tensor.json), ended at exit once everything is written.
The session opens at the first start(), when torch.distributed (if used) knows this process's
rank: each rank writes its own step{S}/rank{R}/.

Task grad_probe (msprobe's gradient monitor) needs only `debugger.monitor(model)`: before every
optimizer step each parameter's gradient goes to the C++ capture (torch.ops.tprobe.grad_probe),
which computes its numbers and directions; start/stop/step do nothing for this task, whose steps
are the optimizer's.
"""

import atexit
import functools
import json
import threading
import os
import sys
import tempfile

import torch

from . import _native, _recompute
from ._modules import ModuleHooks
from ._pipeline import DirectPipeline
from ._stack import Stacks
from ._values import grad_tensors, send, walk

DEFAULT_CONFIG = os.path.join(_native.PACKAGE_DIR, "config.json")


def _rank():
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return -1


class PrecisionDebugger:
    """One per process, as msprobe's: constructing it again returns the first one."""

    _instance = None

    def __new__(cls, *args, **kwargs):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
            cls._instance._initialized = False
        return cls._instance

    def __init__(self, config_path=None, task=None, dump_path=None, level=None, model=None, step=None):
        if self._initialized:
            if model is not None:
                self._model = model
            return
        self._ops = _native.load()
        self._source = config_path or os.environ.get("TPROBE_CONFIG") or DEFAULT_CONFIG
        self._overrides = {k: v for k, v in (("task", task), ("dump_path", dump_path), ("level", level),
                                             ("step", step)) if v is not None}
        if "step" in self._overrides and not isinstance(step, (list, tuple)):
            raise ValueError(f"tprobe: step must be a list such as [0, 2, \"4-6\"], not {step!r}")
        self._model = model
        # Checked now, as msprobe does, so that a bad config or dump_path fails here, before the
        # first step, with one line naming the file and the field.
        self._checked = self._check_config()
        self._failure_reported = False
        self._unreachable = False  # the session could not open: the capture stays off
        self._open_failure = None  # why, until stop()/step()/close() reports it
        self._config = None
        self._pipeline = None
        self._modules = None
        self._stacks = None
        self._session = False
        self._started = False
        self._step_begun = False  # start() ran since the last step(): the current step has content
        self._closed = False
        self._early_steps = 0
        self._saves = {}
        self._grad_params = None  # monitor(model): [(name, parameter)]
        atexit.register(self.close, explicit=False)
        self._initialized = True

    # ---- the msprobe API ----

    def start(self, model=None):
        """Capture on from here, for this rank and step if the config selects them."""
        self._check_usable()
        if self._grad_probe():
            return
        if model is not None:
            self._model = model
        if not self._try_open():
            return
        if self._modules is not None:
            if self._model is None:
                raise ValueError(f"tprobe: level {self._config['level']} needs the model: "
                                 "PrecisionDebugger(model=...) or debugger.start(model)")
            if not isinstance(self._model, (torch.nn.Module, list, tuple)):
                raise TypeError(f"tprobe: model must be a torch.nn.Module or a list of them, "
                                f"not {type(self._model).__name__}")
            self._modules.install(self._model)
        try:
            capturing = bool(self._ops.start())
        except RuntimeError as e:  # the capture is off (a failure, a detached pipeline): said once
            self._capture_failed(e)
            return
        self._started = True
        self._step_begun = True
        if self._modules is not None:
            self._modules.active = capturing

    def stop(self):
        """Capture off; the dump files are brought up to date."""
        self._report_open_failure()
        if not self._session or self._closed or self._grad_probe():
            return
        if self._modules is not None:
            self._modules.close_raised_here()  # their entries, while the capture is on
            self._modules.active = False
        self._started = False
        try:
            self._ops.stop()
        except RuntimeError as e:
            self._capture_failed(e)

    def step(self):
        """Ends the step: its files are final, call counts restart at 0."""
        if self._closed or self._grad_probe():
            return
        self._report_open_failure()
        if not self._session:
            self._early_steps += 1
            return
        if self._modules is not None:
            self._modules.reset_step()
        self._saves.clear()
        self._step_begun = False
        try:
            self._ops.step()
        except RuntimeError as e:
            self._capture_failed(e)

    def save(self, variable, name, save_backward=True):
        """Dumps `variable` (a tensor, or lists/dicts of them and of values) as entry
        "{name}.{n}.debug", n counted per name and step, and, with save_backward, the gradients of
        its tensors that require grad as "{name}_grad.{n}.debug". Captured between start() and
        stop(); at level debug, save() starts the capture itself."""
        self._check_usable()
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"tprobe: save: name must be a non-empty string without dots, not {name!r}")
        try:  # the longest entry this name makes; the writer would otherwise die on it
            self._ops.entry_name_check(f"{name}_grad.{self._saves.get(name, 0)}.debug")
        except RuntimeError as e:
            raise ValueError(f"tprobe: save: name {name!r} cannot be used: {e}".replace(": tprobe: ", ": ")) from None
        if not self._try_open():
            return
        if not self._started and self._config["level"] == "debug":
            self._ops.start()
            self._started = True
        n = self._saves.get(name, 0)
        self._saves[name] = n + 1
        entry = f"{name}.{n}.debug"
        ops = self._ops
        if ops.entry(entry, None, self._stacks.here(), -1):
            walk(variable, "debug", lambda s, t: ops.tensor(entry, s, t), lambda s, v: send(ops, entry, s, v))
        if save_backward:
            tensors, slots = [], []
            grad_tensors(variable, "debug", tensors, slots)
            grad_entry = f"{name}_grad.{n}.debug"
            if ops.entry(grad_entry, None, -1, -1):
                # msprobe writes the entry at once, next to the forward one, as the nest with every
                # leaf null (empty containers stay), and each gradient hook fills its tensor's place.
                def placeholder(slot, v):
                    send(ops, grad_entry, slot, v if isinstance(v, (list, dict)) and not v else None)

                walk(variable, "debug", placeholder, placeholder)
            for t, slot in zip(tensors, slots):
                t.register_hook(self._save_grad_hook(grad_entry, slot))

    def monitor(self, model):
        """msprobe's task grad_probe: from now on, before every optimizer step (of any optimizer),
        the gradient of each parameter of `model` (param.main_grad if present, else param.grad;
        None is skipped) goes to the capture, filtered by the config's rank, step (counting
        optimizer steps from 0) and grad_probe.param_list; the pipeline writes
        dump_path/rank{R}/grad_summary_{S}.csv and, at grad_level L1/L2, rank{R}/step{S}/{param}.npy.
        Works on torch 1.13 (optimizer classes' step wrapped) and 2.x (the global optimizer step
        pre-hook). Does nothing, as msprobe, when the task is not grad_probe."""
        self._check_usable()
        if not self._grad_probe():
            print(f"tprobe: monitor() is for task grad_probe; the task is {self._checked['task']}, nothing is "
                  "monitored", file=sys.stderr)
            return
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"tprobe: monitor: model must be a torch.nn.Module, not {type(model).__name__}")
        first = self._grad_params is None
        self._grad_params = list(model.named_parameters())
        if first:
            _on_optimizer_step(self._grad_probe_step)

    # ---- beyond msprobe ----

    def close(self, explicit=True):
        """Ends the capture and, in direct mode, the pipeline: the dump is complete on return.
        Runs by itself at exit; the debugger cannot start again afterwards. Raises RuntimeError when
        the dump is incomplete (the pipeline failed) and the config's tprobe.on_pipeline_failure is
        "raise" (the default, "warn", says so on stderr) and the failure was not reported already."""
        if not self._initialized or self._closed:
            return
        self._closed = True
        if self._modules is not None:
            self._modules.active = False
        problems = []
        if self._open_failure is not None and not self._failure_reported:
            problems.append(str(self._open_failure))
        if self._session:
            try:
                counts = json.loads(self._ops.close())
                lost_from = counts.get("first_step_not_dumped", -1)
                if counts.get("detached") and lost_from >= 0:
                    # The detach warning named the cause when it happened; this counts what it cost.
                    last = max(counts.get("step", lost_from) - (0 if self._step_begun else 1), lost_from)
                    n = last - lost_from + 1
                    steps = f"step {lost_from}" if n == 1 else f"steps {lost_from}-{last}"
                    problems.append(f"warning: the dump is incomplete: {n} step{'s' if n != 1 else ''} not dumped "
                                    f"({steps}), the capture having detached from its pipeline")
                if counts.get("unsupported"):
                    print(f"tprobe: {counts['unsupported']} tensors were dumped without statistics "
                          "(a dtype or layout tprobe cannot read)", file=sys.stderr)
                if counts.get("error") and not self._failure_reported:
                    problems.append(f"{counts['errors']} capture errors, the first: {counts['error']}")
            except RuntimeError as e:
                if not self._failure_reported:
                    problems.append(str(e))
        if self._pipeline is not None:
            status = self._pipeline.close()
            if status != 0:
                problems.append(f"the pipeline (tprobe run) ended with status {status}")
        for p in problems:
            print(f"tprobe: {p}", file=sys.stderr)
        if problems and explicit and not self._failure_reported and self._raises():
            self._failure_reported = True
            raise RuntimeError("tprobe: the dump is incomplete: " + "; ".join(problems))

    def counters(self):
        """The capture's counters (records, bytes, skipped, operators, unsupported, errors…)."""
        return json.loads(self._ops.counters())

    # ---- internals ----

    def _grad_probe(self):
        return self._checked.get("task") == "grad_probe"

    def _grad_probe_step(self):
        """Before an optimizer step: every gradient to the capture, then the step ends."""
        if self._closed or self._grad_params is None:
            return
        if not self._try_open():
            self._report_open_failure()  # grad_probe has no stop() or step(): said here
            return
        names, grads = [], []
        for name, param in self._grad_params:
            grad = param.main_grad if hasattr(param, "main_grad") else param.grad
            if grad is not None:
                names.append(name)
                grads.append(grad)
        try:
            self._ops.grad_probe("\n".join(names), grads)
            self._ops.step()
        except RuntimeError as e:
            self._capture_failed(e)

    def _check_usable(self):
        if self._closed:
            raise RuntimeError("tprobe: the debugger is closed (close() ran, or the process is exiting)")

    def _try_open(self):
        """Opens the session if needed; False when it cannot be had. The config was checked at
        construction, so what fails here is the pipeline (it did not start, or died before this
        process connected): the capture stays off and training goes on (reported once)."""
        if self._unreachable:
            return False
        try:
            self._open()
        except RuntimeError as e:
            # Said at the next stop(), step() or close(), where the user expects a synchronous
            # dump's verdict; raised from start() or save() it would end a training loop that
            # guards only those (the pipeline can die between construction and the first start()).
            self._unreachable = True
            self._open_failure = e
            return False
        return True

    def _report_open_failure(self):
        if self._open_failure is not None:
            error, self._open_failure = self._open_failure, None
            self._capture_failed(error)

    def _raises(self):
        return self._checked.get("on_pipeline_failure", "warn") == "raise"

    def _capture_failed(self, error):
        """stop() or step() found the capture off (the pipeline stopped reading, or the capture
        failed): the training goes on without it. Warned once by default (tprobe.on_pipeline_failure
        "warn": an unmodified training script must not end because its dump did); raised once
        with "raise"."""
        if self._failure_reported:
            return
        self._failure_reported = True
        if self._raises():
            raise RuntimeError(f"{error} (the capture is off; training can go on: later calls do not raise again)") \
                from None
        try:
            detached = json.loads(self._ops.counters()).get("detached")
        except RuntimeError:
            detached = False
        if not detached:  # a detached capture said it once itself, naming the cause and the step
            print(f"tprobe: warning: {error}; the capture is off, training goes on", file=sys.stderr)

    def _check_config(self):
        """Validates the config as the capture will read it: a bad field, a task tprobe does not
        build (free_benchmark, run_ut, …) or one the `tprobe run` manifest cannot do
        (TPROBE_PIPELINE_TASKS) raises here, one line naming the file and the task."""
        path, temporary = self._config_file()
        try:
            return json.loads(self._ops.config_check(path))
        except RuntimeError as e:
            if not temporary:
                raise
            # The copy with the constructor's overrides is not the file the user knows.
            raise RuntimeError(str(e).replace(temporary, f"{self._source} (with the arguments of PrecisionDebugger)")) \
                from None
        finally:
            if temporary:
                os.unlink(temporary)

    def _save_grad_hook(self, entry, slot):
        def hook(grad):
            if self._started and self._ops.entry(entry, None, -1, -1):
                self._ops.tensor(entry, slot, grad)
            return None
        return hook

    def _config_file(self):
        """The config file to open: the user's, or a copy with the constructor's overrides."""
        if not self._overrides:
            return self._source, None
        try:
            with open(self._source, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            raise RuntimeError(f"tprobe: cannot read the config {self._source}: {e}") from None
        if not isinstance(doc, dict):
            raise RuntimeError(f"tprobe: the config {self._source} is not a JSON object")
        doc.update(self._overrides)
        fd, path = tempfile.mkstemp(prefix="tprobe-config-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        return path, path

    def _open(self):
        if self._session:
            return
        path, temporary = self._config_file()
        try:
            endpoint = ""
            watch_pid = 0
            if not os.environ.get("TPROBE_ENDPOINT"):
                self._pipeline = DirectPipeline(self._checked["task"])
                endpoint = self._pipeline.endpoint
                watch_pid = self._pipeline.process.pid  # its end means the pipeline is gone
            depth = os.environ.get("TPROBE_OP_DEPTH", "1")
            if not depth.isdigit() or int(depth) < 1:
                raise ValueError(f"tprobe: TPROBE_OP_DEPTH must be a positive integer, not {depth!r}")
            mode = os.environ.get("TPROBE_STATS_MODE", "auto")
            if mode not in ("auto", "copy"):
                raise ValueError(f"tprobe: TPROBE_STATS_MODE must be auto or copy, not {mode!r}")
            device_stats = os.environ.get("TPROBE_DEVICE_STATS", "")
            if device_stats not in ("", "kernel", "deferred", "direct"):
                raise ValueError("tprobe: TPROBE_DEVICE_STATS must be kernel, deferred or direct (or unset), "
                                 f"not {device_stats!r}")
            options = {"endpoint": endpoint, "op_depth": int(depth), "stats_copy": mode == "copy",
                       "stacks": True, "exclude_dir": _native.PACKAGE_DIR + "/", "watch_pid": watch_pid}
            self._config = json.loads(self._ops.open(path, _rank(), json.dumps(options)))
        except BaseException:
            if self._pipeline is not None:
                self._pipeline.close()
                self._pipeline = None
            raise
        finally:
            if temporary:
                os.unlink(temporary)
        self._session = True
        _recompute.install(self._ops)
        self._stacks = Stacks()
        if self._config["level"] in ("L0", "mix"):
            self._modules = ModuleHooks(self._ops, self._stacks)
            _recompute.on_scope_end = self._modules.close_raised_here
        for _ in range(self._early_steps):
            self._ops.step()
        self._early_steps = 0


_step_hooks = []
_in_step = threading.local()


def _on_optimizer_step(hook):
    """Calls hook() before every optimizer step. torch >= 2 has a global pre-hook for that; torch
    1.13 has none, so the step of every Optimizer class (those defined later too) is wrapped; a
    step that calls its parent's step counts once."""
    _step_hooks.append(hook)
    if len(_step_hooks) > 1:
        return
    import torch.optim.optimizer as optim
    if hasattr(optim, "register_optimizer_step_pre_hook"):
        optim.register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: _run_step_hooks())
        return
    base = torch.optim.Optimizer
    pending = [base]
    while pending:
        cls = pending.pop()
        _wrap_step(cls)
        pending.extend(cls.__subclasses__())
    previous = base.__dict__.get("__init_subclass__")

    def init_subclass(cls, **kwargs):
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        _wrap_step(cls)

    base.__init_subclass__ = classmethod(init_subclass)


def _run_step_hooks():
    for hook in _step_hooks:
        hook()


def _wrap_step(cls):
    step = cls.__dict__.get("step")
    if step is None or getattr(step, "_tprobe_wrapped", False):
        return

    @functools.wraps(step)
    def wrapper(*args, **kwargs):
        if getattr(_in_step, "depth", 0) == 0:
            _run_step_hooks()
        _in_step.depth = getattr(_in_step, "depth", 0) + 1
        try:
            return step(*args, **kwargs)
        finally:
            _in_step.depth -= 1

    wrapper._tprobe_wrapped = True
    cls.step = wrapper
