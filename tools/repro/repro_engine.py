import contextlib
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


class Tensor:
    """A tensor of the dump: its file in this folder, or None where the dump holds statistics only
    (the tensor is then drawn from Max/Min, see random_tensor)."""

    def __init__(self, file, dtype, shape, max=None, min=None, mean=None, norm=None, requires_grad=False,
                 grad=None):
        self.file, self.dtype, self.shape = file, getattr(torch, dtype.split(".")[-1]), list(shape)
        self.max, self.min, self.mean, self.norm = max, min, mean, norm
        self.requires_grad = requires_grad
        self.grad = grad  # the dumped gradient of this input (a Tensor), where the dump holds one
        self.value = None

    def load(self):
        """The tensor on the CPU in its dumped dtype (read or drawn once, then kept)."""
        if self.value is None:
            self.value = read_tensor(self) if self.file else random_tensor(self)
        return self.value


# <<the call>>


RAISED = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64}
REDUCTION = {"none": 0, "mean": 1, "sum": 2}  # at::Reduction: F.*_loss(reduction="sum") reaches ATen as 2


def read_tensor(spec):
    path = os.path.join(HERE, spec.file)
    if path.endswith(".npy"):
        t = torch.from_numpy(np.array(np.load(path, allow_pickle=False), order="C"))  # 0-d stays 0-d
    else:
        t = torch.load(path, map_location="cpu")
    t = t.to(spec.dtype)  # .npy has no bfloat16: the dump stores bf16 as float32, exactly
    if list(t.shape) != spec.shape:
        sys.exit(f"{spec.file}: shape {list(t.shape)}, but dump.json says {spec.shape}")
    return t


def random_tensor(spec):
    """msprobe's gen_random_tensor (acc_check/data_generate.py): uniform in [Min, Max], with both
    extremes present; NaN and +-inf statistics give tensors that hold them."""
    nan, inf = float("nan"), float("inf")
    low = low_origin = nan if spec.min is None else float(spec.min)
    high = high_origin = nan if spec.max is None else float(spec.max)
    if 0 in spec.shape:
        low = high = low_origin = high_origin = 0.0
    dtype, shape = spec.dtype, spec.shape
    if dtype.is_floating_point:
        if math.isnan(high):
            return torch.full(shape, nan, dtype=dtype)
        if high_origin and high in (inf, -inf):
            t = torch.full(shape, high, dtype=dtype)
            if t.dim() > 0:
                t[-1] = low
            return t
        finfo = torch.finfo(dtype)

        def finite(v):
            return finfo.max if v == inf else finfo.min if v == -inf else v

        low_s, high_s = finite(low), finite(high)
        t = torch.rand(shape, dtype=dtype) * (high_s - low_s) + low_s
    elif dtype == torch.bool:
        t = torch.randint(int(low), int(high) + 1, shape) > 0
    else:
        t = torch.randint(int(low), int(high) + 1, shape, dtype=dtype)
    flat = t.reshape(-1)
    if flat.numel() == 0:
        return t
    if math.isnan(high_origin):
        if flat.numel() <= 2:
            flat[0] = nan
            flat[-1] = high
        else:
            flat[0] = low
            flat[1] = nan
            flat[-1] = high
    else:
        flat[0] = low  # the extremes are always present
        flat[-1] = high
        if high_origin in (inf, -inf):
            flat[-1] = high_origin
        if low_origin in (inf, -inf):
            flat[0] = low_origin
    return t


def walk(value):
    """The Tensor specs in an argument, in order."""
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from walk(v)


def fit_reduction(op, args, kwargs):
    """A loss's reduction as the string Python takes, where the schema wants at::Reduction's int."""
    for name in op.overloads():
        for i, a in enumerate(getattr(op, name)._schema.arguments):
            if a.name == "reduction" and str(a.type) == "int":
                if i < len(args) and isinstance(args[i], str) and not a.kwarg_only:
                    args[i] = REDUCTION[args[i]]
                if isinstance(kwargs.get("reduction"), str):
                    kwargs["reduction"] = REDUCTION[kwargs["reduction"]]


def bench_dtype():
    """msprobe's generate_cpu_params: one low float dtype goes one step up; several meet in float32."""
    if API.split(".")[-2] == "type_as":
        return None  # never raised: its result would be cast back
    low = {spec.dtype for v in list(ARGS) + list(KWARGS.values()) for spec in walk(v) if spec.dtype in RAISED}
    if not low:
        return None
    return RAISED[low.pop()] if len(low) == 1 else torch.float32


def prepare(value, device, float_dtype, leaves):
    """An argument for one run: tensors copied to `device`, float ones cast to `float_dtype`."""
    if isinstance(value, Tensor):
        t = value.load()
        if float_dtype is not None and t.dtype in RAISED:
            t = t.to(float_dtype)
        t = t.clone().detach().to(device)
        if value.requires_grad and t.is_floating_point():
            t.requires_grad_()
            leaves.append((value, t))
            t = t * 1  # not a leaf: an in-place operator may write it
        return t
    if isinstance(value, list):
        return [prepare(v, device, float_dtype, leaves) for v in value]
    if isinstance(value, torch.dtype) and float_dtype is not None and value in RAISED:
        return float_dtype
    return value


def flatten(out):
    if isinstance(out, (list, tuple)):
        return [x for o in out for x in flatten(o)]
    return [out]


def run(device, float_dtype=None, autocast_dtype=None):
    """Calls the operator on `device`; returns (outputs, {id(input spec): its gradient}, backward note)."""
    leaves = []
    args = [prepare(a, device, float_dtype, leaves) for a in ARGS]
    kwargs = {k: prepare(v, device, float_dtype, leaves) for k, v in KWARGS.items()}
    amp = torch.autocast(device_type=device, dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()
    with torch.enable_grad(), amp:
        outputs = flatten(OP(*args, **kwargs))
    grads, note = {}, backward_note(outputs)
    if note is None:
        first = outputs[GRAD_INDEX or 0]
        if isinstance(first, torch.Tensor) and first.requires_grad:
            grad = GRAD_OUTPUT.load()
            if float_dtype is not None and grad.dtype in RAISED:
                grad = grad.to(float_dtype)
            first.backward(grad.to(device=device, dtype=first.dtype))
            grads = {id(spec): leaf.grad for spec, leaf in leaves}
        else:
            note = "the output does not require grad"
    return [o.detach() if isinstance(o, torch.Tensor) else o for o in outputs], grads, note


def backward_note(outputs):
    """Why no backward runs (msprobe's run_backward conditions), or None."""
    if GRAD_OUTPUT is None:
        return "the dump holds no backward of this call"
    if NO_BACKWARD:
        return "This API does not support backward."
    if len(outputs) > 1 and GRAD_INDEX is None:
        return "Multiple backward is not supported."
    if not any(spec.requires_grad for a in ARGS for spec in walk(a)):
        return "no input requires grad"
    return None


# ---- msprobe's compare (acc_check compare/compare.py, compare/algorithm.py) -------------------

FLOAT = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def small_value(dtype):
    """StandardConfig: the small-value bound and the benchmark standard's atol of a device dtype."""
    if dtype in (torch.float16, torch.bfloat16):
        return 2.0 ** -10, 1e-16
    return 2.0 ** -20, 2.0 ** -30


def cosine(b, d):
    """cosine_sim: None stands for msprobe's blank cell."""
    b, d = b.reshape(-1), d.reshape(-1)
    if d.size == 1:
        return None, True, "All the data in device dump data is scalar."
    b_max, d_max = np.max(np.abs(b)), np.max(np.abs(d))
    eps = np.finfo(float).eps
    if d_max <= eps and b_max <= eps:
        return None, True, "All the data in device and bench outputs are zero."
    if d_max <= eps:
        return None, False, "All the data is zero in device dump data."
    if b_max <= eps:
        return None, False, "All the data is zero in bench dump data."
    d, b = d.astype(float) / d_max, b.astype(float) / b_max
    cos = np.clip(np.dot(d, b) / (np.linalg.norm(d) * np.linalg.norm(b)), -1, 1)
    return float(cos), bool(cos > 0.99), "Dump data has NaN when comparing with Cosine Similarity." if np.isnan(cos) else ""


def compare_float(b, d, dtype):
    """The numbers of one float output and msprobe's legacy verdict (_compare_float_tensor)."""
    m = {}
    eps = 2.0 ** -8 if dtype == torch.bfloat16 else np.finfo(b.dtype).eps
    abs_err = np.abs(d - b)
    abs_bench_eps = np.abs(b) + eps
    # The benchmark standard's metrics (precision_standard/benchmark_compare.py).
    bound, atol = small_value(dtype)
    both_finite = np.isfinite(d) & np.isfinite(b.astype(d.dtype))
    inf_nan = ~both_finite
    small = (np.abs(b) <= bound) & both_finite
    m["small_value_err_ratio"] = np.sum(small & (abs_err > atol)) / np.sum(small) if np.any(small) else 0.0
    rel = np.where(small | inf_nan, -1, abs_err / abs_bench_eps)
    m["max_rel_err"] = max(float(np.max(rel)), 0.0)
    masked = np.where(inf_nan | small, 0, abs_err)
    n = d.size
    m["rmse"] = math.sqrt(np.mean(masked ** 2) * (n / (n - np.sum(inf_nan | small) + 1e-4) + 1e-4))
    diff = d - b.astype(d.dtype)
    m["error_balance"] = abs(int(np.sum(diff > 0)) - int(np.sum(diff < 0))) / n
    m["max_abs_err"] = float(np.max(abs_err))
    # The legacy verdict (the Status column).
    m["cosine"], ok, message = cosine(b, d)
    if not ok:
        return m, "error", message or "Cosine similarity is less than 0.99."
    if m["max_abs_err"] < 0.001:
        return m, "pass", "Max abs error is less than 0.001."
    rel_origin = np.abs(abs_err / abs_bench_eps)

    def ratio(t):
        r = np.sum(rel_origin < t) / rel_origin.size if rel_origin.size else 1.0
        return r > 1 - t

    if dtype in (torch.float16, torch.bfloat16):
        if not ratio(0.01):
            return m, "error", "Relative error is greater than 0.01 (双百) for too many elements."
        if not ratio(0.001):
            return m, "warning", "Relative error is greater than 0.001 (双千) for too many elements."
        return m, "pass", "双千 met."
    if not ratio(0.001):
        return m, "error", "Relative error is greater than 0.001 (双千) for too many elements."
    if not ratio(0.0001):
        return m, "warning", "Relative error is greater than 0.0001 (双万) for too many elements."
    return m, "pass", "双万 met."


def compare(bench, other):
    """(metrics, status, message) of one output against the bench (_compare_core)."""
    if bench is None:
        return {}, "skip", "Bench output is None, skip this test."
    if not isinstance(bench, torch.Tensor) or not isinstance(other, torch.Tensor):
        if type(bench) != type(other):
            return {}, "error", "bench and device output type is different."
        return {}, ("pass" if bench == other else "error"), "builtin value"
    dtype = other.dtype
    b, d = bench.detach().cpu(), other.detach().cpu()
    if dtype == torch.bfloat16:
        b, d = b.float(), d.float()
    if b.shape != d.shape:
        return {}, "error", f"shape {list(d.shape)} but the bench's is {list(b.shape)}"
    if b.numel() == 0:
        return {}, "skip", "There is not bench calculation result."
    if DROPOUT:  # random masks: only the fraction of zeros is compared
        n = b.numel()
        zeros = abs(int((b == 0).sum()) - int((d == 0).sum())) / n
        return {}, ("pass" if n < 100 or zeros < 0.1 else "error"), f"dropout: zero fractions differ by {zeros:.4f}"
    if (dtype in FLOAT) != (bench.dtype in FLOAT) or (dtype == torch.bool) != (bench.dtype == torch.bool):
        return {}, "error", f"Bench out dtype is {bench.dtype} but device output dtype is {dtype}, cannot compare."
    if dtype not in FLOAT:
        rate = float((b != d).sum()) / b.numel()
        return {"error_rate": rate}, ("pass" if rate == 0 else "error"), "only binary comparison."
    return compare_float(b.numpy(), d.numpy(), dtype)


def fmt(v):
    if isinstance(v, str):
        return v
    if v is None:
        return "-"
    if isinstance(v, float) and not v.is_integer() or abs(v) >= 1e6:
        return f"{v:.6g}"
    return f"{v:g}"


def report(label, bench, other, statuses):
    metrics, status, message = compare(bench, other)
    statuses.append(status)
    if metrics.get("cosine") is not None:
        metrics["cosine"] = f"{metrics['cosine']:.6f}"
    names = ["cosine", "max_abs_err", "max_rel_err", "rmse", "small_value_err_ratio", "error_balance", "error_rate"]
    cells = " ".join(f"{k}={fmt(metrics[k])}" for k in names if k in metrics)
    note = f"  ({message.strip()})" if status != "pass" else ""
    print(f"  {label:<22} {cells} status={status}{note}")


def statistics_line(label, spec, bench):
    """A statistics dump holds no device output: its statistics beside the bench's."""
    t = bench.detach().double()
    print(f"  {label:<22} statistics only: Max={fmt(spec.max)} Min={fmt(spec.min)} Mean={fmt(spec.mean)} "
          f"Norm={fmt(spec.norm)}; bench Max={fmt(t.max().item())} Min={fmt(t.min().item())} "
          f"Mean={fmt(t.mean().item())} Norm={fmt(t.norm().item())}")


def device_name():
    if torch.cuda.is_available():
        return "cuda"
    try:
        import torch_npu  # noqa: F401  (registers the npu device)
        if torch.npu.is_available():
            return "npu"
    except ImportError:
        pass
    return None


def main():
    torch.manual_seed(1234)  # msprobe's seed_all: random-mode inputs depend on it
    fit_reduction(OP, ARGS, KWARGS)
    for v in list(ARGS) + list(KWARGS.values()) + [GRAD_OUTPUT]:
        for spec in walk(v):
            spec.load()  # drawn in msprobe's order: args, kwargs, then the output's gradient
    raised = bench_dtype()
    random = [spec for v in list(ARGS) + list(KWARGS.values()) for spec in walk(v) if not spec.file]
    print(f"{API}: {OP_NAME}, bench: CPU{' in ' + str(raised) if raised else ''}"
          f"{'; random mode: ' + str(len(random)) + (' inputs' if len(random) > 1 else ' input') if random else ''}"
          f"{' drawn from their Max/Min (seed 1234)' if random else ''}")

    sides = []  # (label, outputs, grads)
    try:
        bench, bench_grads, note = run("cpu", raised)
    except Exception as err:  # noqa: BLE001  (nothing to compare with: say why and stop)
        print(f"bench: not run: {str(err).splitlines()[0]}")
        return 2
    sides.append(("CPU, dumped dtypes", "cpu", None))
    device = device_name()
    if device:
        out_dtype = OUTPUTS[0].dtype if OUTPUTS and isinstance(OUTPUTS[0], Tensor) else None
        low = {spec.dtype for v in ARGS for spec in walk(v) if spec.dtype in RAISED}
        amp = out_dtype if out_dtype in RAISED and len(low) == 1 and out_dtype not in low else None
        sides.append((device + (f", autocast {amp}" if amp else ""), device, amp))
    results = []
    for label, dev, amp in sides:
        try:
            results.append((label,) + run(dev, None, amp)[:2])
        except Exception as err:  # noqa: BLE001  (a kernel missing for a dtype is a finding)
            results.append((label, str(err).splitlines()[0], None))
    if not device:
        results.append(("CUDA/NPU", "not run: no CUDA or NPU device", None))

    statuses = []
    for i, b in enumerate(bench):
        dumped = OUTPUTS[i] if i < len(OUTPUTS) else None
        kind = f"{dumped.dtype} {dumped.shape}" if isinstance(dumped, Tensor) else type(b).__name__
        print(f"forward output {i} ({kind}), against the bench:")
        for label, outputs, _ in results:
            if isinstance(outputs, str):
                print(f"  {label:<22} {outputs if outputs.startswith('not run') else 'not run: ' + outputs}")
            else:
                report(label, b, outputs[i] if i < len(outputs) else None, statuses)
        if isinstance(dumped, Tensor) and dumped.file:
            report("dumped device output", b, dumped.load(), statuses)
        elif isinstance(dumped, Tensor):
            statistics_line("dumped device output", dumped, b)
        elif dumped is not None or not isinstance(b, torch.Tensor):
            report("dumped device output", b, dumped, statuses)
    if note:
        print(f"backward: not run ({note})")
    inputs = [spec for a in ARGS for spec in walk(a) if spec.requires_grad]
    for k, spec in enumerate(inputs if not note else []):
        print(f"backward: gradient of input {k} ({spec.file or spec.dtype}), against the bench:")
        for label, outputs, grads in results:
            if isinstance(outputs, str):
                print(f"  {label:<22} {outputs if outputs.startswith('not run') else 'not run: ' + outputs}")
            else:
                report(label, bench_grads.get(id(spec)), (grads or {}).get(id(spec)), statuses)
        if spec.grad is not None and spec.grad.file:
            report("dumped device grad", bench_grads.get(id(spec)), spec.grad.load(), statuses)
    worst = "error" if "error" in statuses else "warning" if "warning" in statuses else "pass"
    print(f"result: {worst} ({len(statuses)} comparisons: {statuses.count('pass')} pass, "
          f"{statuses.count('warning')} warning, {statuses.count('error')} error, {statuses.count('skip')} skip)")
    return 1 if worst == "error" else 0


if __name__ == "__main__":
    sys.exit(main())
