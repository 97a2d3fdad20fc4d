"""msprobe's dynamic config_check pack (训练前配置检查), from the training script:

    from tprobe.config_check import ConfigChecker
    ConfigChecker.apply_patches()                  # first thing: tracks the random functions' calls
    ...build the model...
    ConfigChecker(model=model, shell_path=["train.sh", "conf.yaml"], output_zip_path="./pack.zip")

Then `tprobe config-check compare A.zip B.zip -o DIR` names what differs between two runs
(docs/stages/config-check.md). The pack holds msprobe's entries:

  env, pip, hyperparameters/hyperparameters_static.json   rank 0 only, made by `tprobe-config-check
                                                           pack` (the same code as the static pack)
  hyperparameters/hyperparameters_dynamic.json             Megatron's args, when apply_patches found
                                                           megatron.training and get_args ran first
  weights/step{s}/rank{r}/weight.json                      every forward of `model`, every rank:
  dataset/step{s}/rank{r}/dataset.json                     the parameters' and the inputs' max, min,
                                                           mean, norm (msprobe's get_tensor_features)
  random/rank{r}.json                                      counts and stacks of the random calls made
                                                           before the first forward

`s` counts the model's forwards (micro-steps), as msprobe's ConfigChecker.step. The entries are
DEFLATE members appended under an exclusive flock, as msprobe's create_file_in_zip, so the ranks of
one machine share one zip. Unlike msprobe, an entry this rank would write twice (a zip left by an
earlier run) is refused when the checker is made, since a pack with an entry listed twice does not
compare. A failure while recording never stops training: it is said once, on stderr.
"""

import fcntl
import inspect
import json
import os
import random
import subprocess
import sys
import tempfile
import zipfile
from collections import defaultdict
from functools import wraps

import torch

from . import _native

__all__ = ["ConfigChecker"]

# {op name: [{"count": n, "stack": [frame, …]}]}: msprobe's random_op_stats.
random_op_stats = defaultdict(list)
# Megatron's args (an argparse.Namespace), the first get_args() result after apply_patches.
_megatron_args = None
_patched = False


def _say(message):
    print(f"tprobe config_check: {message}", file=sys.stderr, flush=True)


def _rank():
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _scalar(tensor, reduce):
    # msprobe's FmkAdp.process_tensor: integers, booleans and float64 reduced as float32, the other
    # floating types in their own dtype.
    if not tensor.is_floating_point() or tensor.dtype == torch.float64:
        tensor = tensor.float()
    if tensor.numel() == 0 and reduce in ("max", "min"):
        return None  # msprobe raises here; an empty tensor has no extremes
    return float(getattr(tensor, reduce)())


def tensor_features(tensor):
    """msprobe's get_tensor_features: {max, min, mean, norm} as Python floats."""
    with torch.no_grad():
        return {k: _scalar(tensor.detach(), k) for k in ("max", "min", "mean", "norm")}


def weight_features(model):
    """{parameter name: features}, each parameter read as float32 (msprobe's collect_weights_data)."""
    out = {}
    with torch.no_grad():
        for name, param in model.named_parameters():
            out[name] = tensor_features(param if param.dtype == torch.float32 else param.float())
    return out


def input_features(obj):
    """msprobe's process_obj: tensors → features, sequences → {index: …}, dicts kept, the rest ""."""
    if isinstance(obj, torch.Tensor):
        return tensor_features(obj)
    if isinstance(obj, (tuple, list)):
        return {i: input_features(x) for i, x in enumerate(obj)}
    if isinstance(obj, dict):
        return {k: input_features(v) for k, v in obj.items()}
    return ""


def _call_stack(frame):
    # msprobe's get_call_stack: the caller's frames, outermost first, each
    # "File {absolute path}, line {n}, in {function}, {code line}".
    stack = []
    current = frame.f_back
    while current:
        info = inspect.getframeinfo(current)
        code = info.code_context[0].strip() if info.code_context else ""
        stack.append(f"File {os.path.abspath(info.filename)}, line {info.lineno}, in {info.function}, {code}")
        current = current.f_back
    return stack[::-1]


def _track_random_call(func, name):
    @wraps(func)
    def wrapper(*args, **kwargs):
        frame = inspect.currentframe()
        try:
            stack = _call_stack(frame)
        finally:
            del frame
        for entry in random_op_stats[name]:
            if entry["stack"] == stack:
                entry["count"] += 1
                break
        else:
            random_op_stats[name].append({"count": 1, "stack": stack})
        return func(*args, **kwargs)
    wrapper.__tprobe_config_check__ = True
    return wrapper


def _patch(owner, names, prefix):
    for name in names:
        func = getattr(owner, name, None)
        if func is None or getattr(func, "__tprobe_config_check__", False):
            continue
        setattr(owner, name, _track_random_call(func, f"{prefix}.{name}"))


def _append_entries(zip_path, entries):
    """Appends (name, text) members to `zip_path` under an exclusive flock (msprobe's create_file_in_zip)."""
    with open(zip_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with zipfile.ZipFile(zip_path, "a") as z:
                for name, content in entries:
                    info = zipfile.ZipInfo(name)
                    info.compress_type = zipfile.ZIP_DEFLATED
                    z.writestr(info, content)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _zip_names(zip_path):
    if not os.path.exists(zip_path) or os.path.getsize(zip_path) == 0:
        return []
    with open(zip_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            return zipfile.ZipFile(zip_path).namelist()
        except zipfile.BadZipFile:
            raise ValueError(f"tprobe config_check: {zip_path} exists and is not a zip") from None
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class ConfigChecker:
    """msprobe's ConfigChecker: ConfigChecker(model=None, shell_path=None,
    output_zip_path="./config_check_pack.zip", fmk="pytorch") packs at once what the process can
    tell (env, pip, hyperparameters: rank 0) and, through a forward pre-hook on `model` (or the first
    of a list of models), the weights and inputs of every forward and the random calls made before
    the first one (every rank)."""

    step = 0  # the model's forwards so far (msprobe: a class attribute, shared by the checkers)

    def __init__(self, model=None, shell_path=None, output_zip_path="./config_check_pack.zip", fmk="pytorch"):
        if fmk != "pytorch":
            raise ValueError(f"tprobe config_check: fmk={fmk!r}: only 'pytorch' is built")
        if isinstance(model, list):
            model = model[0] if model else None
        if model is not None and not isinstance(model, torch.nn.Module):
            raise ValueError("tprobe config_check: model is not a torch.nn.Module or a list of them")
        if not isinstance(output_zip_path, str) or not output_zip_path.endswith(".zip"):
            raise ValueError(f"tprobe config_check: output_zip_path {output_zip_path!r} must be a string ending in .zip")
        if isinstance(shell_path, str):
            shell_path = [shell_path]
        if shell_path is not None and not all(isinstance(p, str) for p in shell_path):
            raise ValueError("tprobe config_check: shell_path must be a list of paths")
        self.output_zip_path = output_zip_path
        self.model = model
        self.rank = _rank()
        folder = os.path.dirname(os.path.abspath(output_zip_path))
        os.makedirs(folder, exist_ok=True)
        self._refuse_own_entries()
        self._said = set()
        self._random_written = False
        _say(f"pack result zip path {os.path.realpath(output_zip_path)}")
        if self.rank == 0:
            self._pack_static(shell_path or [])
        if model is not None:
            self._hook_model(model)

    def _refuse_own_entries(self):
        own = lambda n: (f"/rank{self.rank}/" in n and n.startswith(("weights/", "dataset/"))) \
            or n == f"random/rank{self.rank}.json" \
            or (self.rank == 0 and (n in ("env", "pip") or n.startswith("hyperparameters/")))
        taken = [n for n in _zip_names(self.output_zip_path) if own(n)]
        if taken:
            raise ValueError(f"tprobe config_check: {self.output_zip_path} already holds {taken[0]} "
                             f"(a pack of an earlier run?): remove it or give another output_zip_path")

    def _pack_static(self, shell_path):
        # env, pip and the static hyperparameters: tprobe-config-check pack, the one implementation
        # of msprobe's parsers, run with this process's environment and Python.
        tool = os.path.join(_native.bin_dir(), "tprobe-config-check")
        with tempfile.TemporaryDirectory(prefix="tprobe-config-check-") as tmp:
            static = os.path.join(tmp, "static.zip")
            r = subprocess.run([tool, "pack", *shell_path, "-o", static, "--python", sys.executable],
                               capture_output=True, text=True)
            if r.returncode != 0:
                why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
                raise ValueError(f"tprobe config_check: static pack failed: {why}")
            for line in r.stderr.strip().splitlines():
                _say(line)  # the pack's warnings (a shell_path that is not a file)
            with zipfile.ZipFile(static) as z:
                entries = [(n, z.read(n).decode("utf-8")) for n in z.namelist()]
        if _megatron_args is not None:
            entries.append(("hyperparameters/hyperparameters_dynamic.json",
                            json.dumps(vars(_megatron_args), default=lambda x: None, indent=4)))
        _append_entries(self.output_zip_path, entries)

    def _hook_model(self, model):
        def record(module, args, kwargs):
            step = ConfigChecker.step
            ConfigChecker.step += 1
            entries = []
            for what, make in (("weights", lambda: self._weights_entry(module, step)),
                               ("dataset", lambda: self._dataset_entry(args, kwargs, step)),
                               ("random", self._random_entry)):
                try:
                    entry = make()
                    if entry is not None:
                        entries.append(entry)
                except Exception as e:  # never stop training: say it once per kind
                    if what not in self._said:
                        self._said.add(what)
                        _say(f"step {step}: {what} not recorded: {type(e).__name__}: {e}")
            if entries:
                try:
                    _append_entries(self.output_zip_path, entries)
                except OSError as e:
                    if "write" not in self._said:
                        self._said.add("write")
                        _say(f"unable to write {self.output_zip_path}: {e}")

        if "with_kwargs" in inspect.signature(model.register_forward_pre_hook).parameters:
            model.register_forward_pre_hook(record, with_kwargs=True)
        else:
            # torch 1.x: forward pre-hooks see no keyword arguments; wrap this module's forward.
            forward = model.forward

            @wraps(forward)
            def forward_recorded(*args, **kwargs):
                record(model, args, kwargs)
                return forward(*args, **kwargs)
            model.forward = forward_recorded

    def _weights_entry(self, module, step):
        return (f"weights/step{step}/rank{self.rank}/weight.json", json.dumps(weight_features(module), indent=4))

    def _dataset_entry(self, args, kwargs, step):
        features = {"args": input_features(args), "kwargs": input_features(kwargs)}
        return (f"dataset/step{step}/rank{self.rank}/dataset.json", json.dumps(features, indent=4))

    def _random_entry(self):
        if self._random_written:
            return None
        self._random_written = True
        return (f"random/rank{self.rank}.json", json.dumps(dict(random_op_stats), indent=4))

    @staticmethod
    def apply_patches(fmk="pytorch"):
        """Tracks the calls of the random functions (Python's random, numpy's, torch's) with their
        stacks, and keeps Megatron's args for hyperparameters_dynamic.json. Call it first."""
        global _patched
        if fmk != "pytorch":
            raise ValueError(f"tprobe config_check: fmk={fmk!r}: only 'pytorch' is built")
        if _patched:
            return
        _patched = True
        _patch(random, ("random", "randint", "uniform", "choice"), "random")
        try:
            import numpy as np
            _patch(np.random, ("rand", "randint", "choice", "normal"), "np.random")
        except ImportError:
            pass
        _patch(torch, ("rand", "randint", "randn", "rand_like", "randint_like", "randn_like", "manual_seed"), "torch")
        _patch(torch.Tensor, ("exponential_", "geometric_", "log_normal_", "cauchy_"), "torch.Tensor")
        try:
            from megatron import training
        except ImportError:
            return
        get_args = training.get_args

        @wraps(get_args)
        def get_args_kept(*args, **kwargs):
            global _megatron_args
            result = get_args(*args, **kwargs)
            if _megatron_args is None:
                _megatron_args = result
            return result
        training.get_args = get_args_kept
