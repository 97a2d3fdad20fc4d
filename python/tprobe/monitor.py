"""TrainerMon: msprobe's training monitor (docs/msprobe-compat.md §9) over tprobe's capture.

    from tprobe import TrainerMon
    mon = TrainerMon("monitor_config.json", params_have_main_grad=False)
    mon.set_monitor(model, optimizer, grad_acc_steps=1)
    ...train as usual...

What it collects, and when, is msprobe's (module_hook.py): module forward hooks (activations,
`actv`) and full backward hooks (`actv_grad`), the AccumulateGrad hooks of the parameters
(`grad_unreduced`, tag `acc_grad`, the grad accumulated over grad_acc_steps micro-batches), the
gradients read before the optimizer step (`grad_reduced`, tag `post_grad`), Adam's exp_avg and
exp_avg_sq as they are before the step, the weights before and after it (`param_origin`,
`param_updated`) and mg_direction (`other`). The optimizer's `step` is wrapped on the instance.

Where the numbers come from: every tensor is reduced where it lives, when its hook fires, by
torch.ops.tprobe.monitor_reduce (capture/torch/monitor.cpp: msprobe's ops, a small float64
block on the tensor's device, no host sync). A CPU grad is reduced off the training thread
(monitor_reduce_start: the worker thread of capture/torch/monitor.cpp): acc_grad while the backward
pass goes on, waited for in the pass's final callback; post_grad while optimizer.step runs,
waited for before step returns; Adam's moments right after a step, taken at the next one if
unchanged. At the end of a monitored optimizer step the step's blocks are read to the host once
per device, and each csv prefix's rows go to the monitor session as one record: spans of those
blocks against a row set registered once (torch.ops.tprobe.monitor_send_rows). The `tprobe-monitor` stage
writes the csv files, anomaly.json and TensorBoard files and prints the alarms; outside
`tprobe run` (no TPROBE_ENDPOINT) this object starts pipelines/monitor.json itself, as
PrecisionDebugger does, and ends it at exit.

Differences from msprobe, on purpose (docs/pytorch.md, "Monitor"):
  - statistics are reduced only on steps that are written (msprobe reduces in every hook and
    keeps the last): a tag whose hook did not fire in a written step keeps the value of the last
    written step it fired in, not of an unwritten step in between;
  - params_have_main_grad=True on a parameter without main_grad reads .grad (msprobe fails);
  - cc_distribution, ur_distribution (heatmaps) and the L2 features are not collected (a warning
    says so); the Megatron, DeepSpeed and FSDP gradient paths are not wired.
"""

import atexit
import functools
import inspect
import itertools
import json
import math
import operator
import os
import re
import sys
import types

import torch

from . import _native
from ._pipeline import DirectPipeline

OP_LIST = ["norm", "min", "max", "zeros", "nans", "id", "mean", "shape", "dtype"]
NAME_SEP = ":"
SQUASH_PATTERNS = [re.compile(p) for p in (r"^.*\.(layers?\..*)", r"^.*\.(embeddings?\..*)", r"^.*\.(final.*)",
                                           r"^.*\.(output.*)", r"^.*\.(norm.*)")]
# torch's float8 dtypes (torch >= 2.1), reduced as float32 (msprobe's): a set, not a name test per tensor.
_FLOAT8_DTYPES = frozenset(getattr(torch, n) for n in dir(torch) if n.startswith("float8"))
# The types monitor_reduce takes as they are (_readable): anything else is looked at one by one.
_PLAIN_TYPES = frozenset((torch.Tensor, torch.nn.Parameter, type(None)))
_INTEGRAL_DTYPES = {"torch.uint8", "torch.int8", "torch.int16", "torch.int32", "torch.int64"}
_FORWARD_HOOK_KWARGS = "with_kwargs" in inspect.signature(torch.nn.Module.register_forward_hook).parameters


def _warn(message):
    print(f"tprobe: monitor: warning: {message}", file=sys.stderr)


def _info(message):
    print(f"tprobe: monitor: {message}", file=sys.stderr)


def validate_ops(ops):
    """msprobe's validate_ops: unknown ops dropped with a warning, ["norm"] when none is left,
    shape and dtype appended when missing."""
    if not isinstance(ops, list):
        raise TypeError("ops should be a list")
    valid = []
    for op in ops:
        if op not in OP_LIST:
            _warn(f"op {op} is not supported. Optional ops: {OP_LIST}")
            continue
        valid.append(op)
    if not valid:
        valid.append(OP_LIST[0])
    for extra in ("shape", "dtype"):
        if extra not in valid:
            valid.append(extra)
    return valid


def squash_param_name(name, enable=True):
    """msprobe's squash_param_name: the first pattern that matches gives its group."""
    if not enable:
        return name
    for pattern in SQUASH_PATTERNS:
        m = pattern.match(name)
        if m:
            return m.group(1)
    return name


def get_summary_writer_tag_name(name, tag, rank):
    return f"{name}/{tag}" if rank is None else f"{name}/rank{rank}/{tag}"


def _rank():
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else None


def _is_recomputation():
    """msprobe's is_recomputation, on frame objects (no source lines read): a forward run again by
    torch.utils.checkpoint (recompute_fn) or by a `backward` called from torch/autograd/function.py."""
    frames = []
    f = sys._getframe(2)
    while f is not None:
        frames.append(f)
        f = f.f_back
    for f in frames:
        if f.f_code.co_name == "recompute_fn" and f.f_code.co_filename.endswith("torch/utils/checkpoint.py"):
            return True
    for i, f in enumerate(frames):
        name = f.f_code.co_name
        if name == "backward" or (name == "checkpoint_function_backward" and "megatron" in f.f_code.co_filename):
            for j in (i + 1, i + 2):
                if j < len(frames) and frames[j].f_code.co_filename.endswith("torch/autograd/function.py"):
                    return True
    return False


def _param_struct(value):
    """msprobe's get_param_struct (module_struct.json)."""
    res = {}
    if isinstance(value, (tuple, list)):
        res["config"] = f"{type(value).__name__}[{len(value)}]"
        for i, x in enumerate(value):
            res[i] = f"size={tuple(x.shape)}, dtype={x.dtype}" if torch.is_tensor(x) else f"{type(x)}"
    elif torch.is_tensor(value):
        res["config"] = "tensor"
        res["tensor"] = f"size={tuple(value.shape)}, dtype={value.dtype}"
    else:
        res["config"] = f"{type(value)}"
    return res


def _stack_text():
    """msprobe's analyze_api_call_stack from a forward hook: the frames above the hook."""
    lines = []
    for frame in inspect.stack()[2:]:
        if frame.code_context:
            lines.append(f"File {frame.filename}, line {frame.lineno}, in {frame.function}, \n "
                         f"{frame.code_context[0].strip()} \n")
    return "".join(lines)


# Grads started together on the worker (the AccumulateGrad hooks of TrainerMon._param_hook_of):
# large enough that a pass of small grads costs few calls, small enough that the last batch,
# waited for at the end of the pass, is short. (Smaller batches, handed to the worker as the pass
# goes on, cost the transformer bench's step more than they moved off it: each hand-over wakes the
# worker.)
_GRAD_BATCH_ELEMENTS = 1 << 20


class _Cell(tuple):
    """One tensor's statistics: row `row` of `block` (monitor_reduce's result, on the device).
    `facts` is the row's fixed part as the row set of _send holds it: (shape tuple or None, dtype
    text or None, the columns given as ints); shared by every cell of the same shape, dtype and
    device kind (TrainerMon._facts), so that comparing a step's rows with the registered row set
    costs an identity check per row. A tuple (block, row, facts): a reduction's cells are made by
    one map over its rows, no Python call per tensor."""
    __slots__ = ()
    block = property(operator.itemgetter(0))
    row = property(operator.itemgetter(1))
    facts = property(operator.itemgetter(2))

    @property
    def shape(self):
        return None if self[2][0] is None else list(self[2][0])

    @property
    def dtype(self):
        return self[2][1]


_BLOCK = operator.itemgetter(0)
_FACTS = operator.itemgetter(2)
_NO_FACTS = (None, None, ())  # a None (msprobe's non-tensor input or output): NaN in every column


class _ModuleContext:
    def __init__(self, name):
        self.name = name
        self.micro_step = 0
        self.actv = {}
        self.struct = {}
        self.stack = ""


class _Handles:
    def __init__(self):
        self.xy, self.stack, self.wgrads = [], [], []

    def remove(self, which):
        handles = getattr(self, which)
        for h in handles:
            h.remove()
        handles.clear()


class TrainerMon:
    """msprobe's TrainerMon (module_hook.py) with its public API; see the module's docstring."""

    def __init__(self, config_file_path, process_group=None, params_have_main_grad=True, opt_ty=None):
        self._ops = _native.load()
        self.config_file_path = config_file_path
        self.process_group = process_group
        self.params_have_main_grad = params_have_main_grad
        if opt_ty is not None:
            _warn("opt_ty is deprecated and ignored (as in msprobe)")
        self.config_timestamp = 0  # the first dynamic check reads the file, whatever its mtime
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            self.rank = dist.get_rank()
            group = process_group if process_group is not None else dist.group.WORLD
            self.pp_stage = dist.get_group_rank(group, self.rank) if hasattr(dist, "get_group_rank") else self.rank
            self.group_mates = dist.get_process_group_ranks(group) if hasattr(dist, "get_process_group_ranks") \
                else list(range(dist.get_world_size(group)))
        else:
            self.rank = 0
            self.pp_stage = 0
            self.group_mates = [0]
        self._pipeline = None
        self._closed = False
        self._send_failed = False
        self._rowsets = {}
        self._warned = set()
        self._post_grad_on_step_thread = False  # set once an optimizer changed a grad during its step
        # The session opens now, as msprobe's writer creates its directory here: a bad config
        # raises here, one line naming the file and the field.
        self.session_config = self._open()
        self.config = self.session_config["monitor"]
        self.output_dir = (self.session_config.get("output_dir") or self.config.get("output_dir")
                           or self.session_config.get("dump_path", ""))
        _say_warnings(self.session_config)
        self.squash_name = self.config.get("squash_name", True)  # never changed later: names stay

        self.model = None
        self.vpp = False
        self.dp_group = None
        self.tp_group = None
        self.micro_batch_number = 1
        self.optimizer = None
        self.optimizer_trans = None
        self._step = 0
        self._reset_collection()
        self.handles = _Handles()
        self.grad_accs = []
        self.weight_hooked = False
        self.optimizer_hooked = False
        self.struct_printed = False
        self._backward_hook_patched = False

        self.dynamic_enable = os.getenv("DYNAMIC_MONITOR", "False").lower() == "true"
        self.monitoring = False
        if self.dynamic_enable:
            _warn(f"DYNAMIC_MONITOR is set, please make sure you have 'dynamic_on' and 'collect_times' in "
                  f"{self.config_file_path}")
            self._set_config(self.config)
        else:
            self._set_config(self.config)
            if self.collect_times > 0:
                self.monitoring = True
        atexit.register(self.close, explicit=False)

    # ---- msprobe's API ----

    @property
    def ops(self):
        return self._ops_list

    @ops.setter
    def ops(self, value):
        self._ops_list = validate_ops(value)
        self._reduced_ops = [o for o in self._ops_list if o not in ("shape", "dtype")]
        self._reduced_text = ",".join(self._reduced_ops)
        # _row_values: the columns a CPU tensor's .item() gives as ints, for float and integer tensors.
        self._int_columns = [i for i, o in enumerate(self._reduced_ops) if o == "nans"]
        self._int_columns_integral = [i for i, o in enumerate(self._reduced_ops) if o in ("nans", "min", "max", "id")]
        self._facts = {}  # (torch.Size, torch.dtype, on the CPU) -> _Cell.facts, for these columns

    def set_monitor(self, model, optimizer, grad_acc_steps=1, tp_group=None, dp_group=None, start_iteration=0):
        """Hooks `model` (a module, or a list of them: virtual pipeline chunks) and wraps
        optimizer.step on the instance. Call it once the model and optimizer exist, before training."""
        grad_acc_steps = _int_arg(grad_acc_steps, "grad_acc_steps", 1, 1)
        start_iteration = _int_arg(start_iteration, "start_iteration", 0, 0)
        self.micro_batch_number = grad_acc_steps
        self.dp_group = dp_group
        self.tp_group = tp_group
        self.optimizer = optimizer
        self._step = start_iteration
        self._hook_step_final(optimizer)
        if not isinstance(model, list):
            model = [model]
        self.model = model
        self.vpp = len(model) > 1
        if not self.dynamic_enable:
            self._register_hooks()

    def monitor_gnorm_with_ad(self, model, optimizer=None, grad_acc_steps=1, tp_group=None, dp_group=None,
                              start_iteration=0):
        """msprobe before 1.2.2: set_monitor, the optimizer possibly given by set_wrapped_optimizer."""
        if optimizer is None:
            optimizer = self.optimizer_trans
            if optimizer is None:
                _warn("monitor_gnorm_with_ad: please set_wrapped_optimizer before it or input optimizer!=None")
                return
        self.set_monitor(model, optimizer, grad_acc_steps, tp_group, dp_group, start_iteration)

    def set_wrapped_optimizer(self, optimizer):
        self.optimizer_trans = optimizer

    def generate_wgrad_metrics(self, post_grad_dict=None):
        """(post, pre): the statistics of the reduced and unreduced weight grads, {tag: {op: value}}
        (read to the host: this call syncs). With post_grad_dict ({tag: tensor}) those are reduced
        into `post` first, as msprobe's."""
        if not self.wg_distribution:
            return {}, {}
        if post_grad_dict:
            self._grad_post.update(self._reduce_map(post_grad_dict))
        return self._as_metrics(self._grad_post), self._as_metrics(self._grad_pre)

    def generate_xy_metrics(self):
        """(actv, actv_grad): {tag: {op: value}} of the activations and their gradients collected
        since the last write (read to the host: this call syncs)."""
        actv = {}
        for ctx in self._fwd_ctx.values():
            actv.update(ctx.actv)
        return self._as_metrics(actv), self._as_metrics(self._actv_grad)

    def reload_xy(self, xy_distribution=False):
        _warn("reload_xy() is deprecated and will be removed in a future version. Use DYNAMIC_MONITOR instead.")
        self.xy_distribution = xy_distribution
        self.handles.remove("xy")
        self._hook_modules()
        for ctx in self._fwd_ctx.values():
            ctx.actv.clear()

    # ---- beyond msprobe ----

    def close(self, explicit=True):
        """Ends the monitor session and, in direct mode, the pipeline: the files are complete on
        return. Runs by itself at exit."""
        if self._closed:
            return
        self._closed = True
        self._drop_mv_prefetch()
        problems = []
        try:
            counts = json.loads(self._ops.monitor_close())
            if counts.get("detached"):
                problems.append("the monitor's pipeline stopped reading: its files are incomplete")
        except RuntimeError as e:
            problems.append(str(e))
        if self._pipeline is not None:
            status = self._pipeline.close()
            if status != 0:
                problems.append(f"the pipeline (tprobe run) ended with status {status}")
        for p in problems:
            print(f"tprobe: monitor: {p}", file=sys.stderr)
        if problems and explicit:
            raise RuntimeError("tprobe: monitor: " + "; ".join(problems))

    # ---- the session ----

    def _open(self):
        endpoint, watch_pid = "", 0
        if not os.environ.get("TPROBE_ENDPOINT"):
            # Checked before a pipeline starts for it: a bad config fails at once.
            json.loads(self._ops.monitor_config_check(self.config_file_path))
            self._pipeline = DirectPipeline("monitor")
            endpoint = self._pipeline.endpoint
            watch_pid = self._pipeline.process.pid
        try:
            rank = _rank()
            group = {"pp_stage": self.pp_stage, "group_mates": self.group_mates}  # anomaly.json's
            text = self._ops.monitor_open(self.config_file_path, -1 if rank is None else rank,
                                          json.dumps({"endpoint": endpoint, "watch_pid": watch_pid, "group": group}))
            self._rowsets = {}  # (prefix, micro_step) -> (fixed rows, handle): a session's handles are its own
        except BaseException:
            if self._pipeline is not None:
                self._pipeline.close()
                self._pipeline = None
            raise
        return json.loads(text)

    # ---- configuration ----

    def _set_config(self, config):
        self.config = config
        self.start_step = config.get("start_step", 0)
        self.collect_times = config.get("collect_times", 100000000)
        self.step_interval = config.get("step_interval", 1)
        self.has_collect_times = 0
        self.print_struct = config.get("print_struct", False)
        self.module_rank_list = config.get("module_ranks", [])
        # msprobe: not module_ranks, or distributed and this rank listed (so a process that is not
        # distributed writes nothing when module_ranks is set).
        dist = torch.distributed
        self._writes_here = not self.module_rank_list or (dist.is_available() and dist.is_initialized()
                                                          and dist.get_rank() in self.module_rank_list)
        self.eps = config.get("eps", 1e-8)
        self.ops = list(config.get("ops", []))
        self.all_xy = config.get("all_xy", False)
        self.xy_distribution = config.get("xy_distribution", False)
        self.forward_only = config.get("forward_only", False)
        self.backward_only = config.get("backward_only", False)
        self.mv_distribution = config.get("mv_distribution", False)
        self.wg_distribution = config.get("wg_distribution", False)
        self.param_distribution = config.get("param_distribution", False)
        self.mg_direction = config.get("mg_direction", False)
        self.stack_info = config.get("stack_info", False)
        self.monitor_mbs_grad = config.get("monitor_mbs_grad", False)
        for key in ("ur_distribution", "recording_l2_features"):
            if config.get(key):
                self._warn_once(key, f"{key} is not collected by tprobe's monitor")
        if config.get("cc_distribution", {}).get("enable"):
            self._warn_once("cc", "cc_distribution is not collected by tprobe's monitor")
        if self.forward_only and self.backward_only:
            _warn("not enable backward_only and forward_only simultaneously")
        # Module targets: keys without ":" stand for every vpp chunk (hook_modules).
        self._targets = list(config.get("targets", {"": {}}).keys())

    def _reset_collection(self):
        self._fwd_ctx = {}  # module -> _ModuleContext, in the order they first ran
        self._bwd_ctx = {}
        self._actv_grad = {}  # tag -> _Cell; kept across steps, entries overwritten (msprobe's)
        self._grad_pre = {}
        self._grad_post = {}
        self._exp_avg = {}
        self._exp_avg_sq = {}
        self._param_metric = {}
        self._other = {}
        self._module_struct = {}
        self._param2name = {}
        self._name2param = {}
        self._origin2squash = {}
        self._duplicate = {}
        self._name2tag = {}
        self._post_grad_plan = []  # _register_param_name's
        self._stage_tags = {"exp_avg": (), "exp_avg_sq": (), "mg_direction": ()}
        self._micro = {}  # param -> micro step of its AccumulateGrad hook
        self._acc_tags = {}  # param -> its acc_grad tag (without monitor_mbs_grad)
        # AccumulateGrad hooks of a backward pass hand their grads here; one reduction at the end
        # of the pass (_flush_grads) instead of one per parameter.
        # A pass's grads are started in batches of about _GRAD_BATCH_ELEMENTS elements (one call
        # each, not one per parameter); _flush_grads starts the last and waits for them all.
        self._grad_batch = []  # (tag, grad, grad._version at the hook), not started yet
        self._grad_batch_elements = 0
        self._pending_grads = []  # (that batch, _reduce_start's handle)
        self._flush_queued = False
        self._post_pending = None  # (tags, [(grad, version)], handle): post_grad read during the step
        self._call_id = 0
        self._call_ids = {}
        self._exp_avg_all = {}
        self._drop_mv_prefetch()

    # ---- what is collected now ----

    def _step_selected(self, step):
        return step >= self.start_step and (step - self.start_step) % self.step_interval == 0

    def _rank_writes(self):
        return self._writes_here

    def _collecting(self):
        return self.monitoring and self._step_selected(self._step) and self._rank_writes()

    def _register_call_id(self, tag):
        self._call_ids[tag] = self._call_id
        self._call_id += 1

    def _register_call_ids(self, tags):
        self._call_ids.update(zip(tags, itertools.count(self._call_id)))
        self._call_id += len(tags)

    # ---- reductions ----

    @staticmethod
    def _readable(tensors):
        """`tensors` as monitor_reduce takes them: a tensor, or None for anything else (NaN); a
        DTensor's local shard. The usual list (plain tensors and None) is taken as it is, checked
        by one pass over the types, not a Python test per tensor."""
        if _PLAIN_TYPES.issuperset(map(type, tensors)):
            return tensors if isinstance(tensors, list) else list(tensors)
        return [(t.to_local() if t.__class__.__name__ == "DTensor" else t) if torch.is_tensor(t) else None
                for t in tensors]

    def _cells(self, block, xs):
        """The cells of monitor_reduce's `block` of the tensors `xs` (_readable's list)."""
        memo = self._facts
        facts = []
        for t in xs:
            if t is None:
                facts.append(_NO_FACTS)
                continue
            key = (t.shape, t.dtype, t.is_cpu)
            f = memo.get(key)
            if f is None:
                if len(memo) >= 4096:  # activations of ever new shapes (variable sequence lengths)
                    memo.clear()
                f = memo[key] = self._facts_of(*key)
            facts.append(f)
        return list(map(_Cell, zip(itertools.repeat(block), itertools.count(), facts)))

    def _facts_of(self, shape, dtype, on_cpu):
        # The columns _row_values gives as ints: a CPU tensor's .item() (none for a device tensor's).
        # A float8 tensor is reduced as float32 (monitor_reduce): its row reads float32, msprobe's.
        text = str(torch.float32 if dtype in _FLOAT8_DTYPES else dtype)
        ints = () if not on_cpu else tuple(self._int_columns_integral if text in _INTEGRAL_DTYPES else self._int_columns)
        return (tuple(shape), text, ints)

    def _reduce(self, tensors):
        """Cells of the statistics of `tensors` (tensors or anything else: NaN), one reduction,
        nothing read to the host."""
        xs = self._readable(tensors)
        with torch.no_grad():
            block = self._ops.monitor_reduce(xs, self._reduced_text, float(self.eps))
        return self._cells(block, xs)

    def _reduce_start(self, tensors, early=False):
        """The statistics of `tensors` begun, not waited for (monitor_reduce_start: CPU tensors'
        on the worker thread while training goes on; `early`: whatever their size, as the handle
        is finished long after): a handle for _reduce_finish. The tensors must not change until
        then."""
        xs = self._readable(tensors)
        return xs, self._ops.monitor_reduce_start(xs, self._reduced_text, float(self.eps), early)

    def _reduce_finish(self, handles):
        """The cells of each handle of _reduce_start, all waited for in one call."""
        if not handles:
            return []
        blocks = self._ops.monitor_reduce_finish([ticket for _, ticket in handles])
        return [self._cells(block, xs) for (xs, _), block in zip(handles, blocks)]

    def _reduce_map(self, tag2tensor):
        tags = list(tag2tensor)
        return dict(zip(tags, self._reduce([tag2tensor[t] for t in tags])))

    def _read(self, cells):
        """The host values of `cells` as lists, by id(block): _host_blocks' one transfer per device."""
        return {key: block.tolist() for key, block in self._host_blocks(cells).items()}

    def _row_values(self, cell, values):
        """The row's numbers as msprobe's writer holds them after .item(): a CPU tensor's statistics
        are read one by one, so its nans (and min, max and id of an integer tensor: an Embedding's
        input) are ints; a device tensor's are stacked into one float tensor first: all floats."""
        row = values[id(cell.block)][cell.row]
        columns = self._int_columns_of(cell)
        if not columns:
            return row
        row = list(row)
        for i in columns:
            if not math.isnan(row[i]):
                row[i] = int(row[i])
        return row

    def _as_metrics(self, tag2cell):
        cells = list(tag2cell.values())
        if not cells:
            return {}
        values = self._read(cells)
        out = {}
        for tag, cell in tag2cell.items():
            m = dict(zip(self._reduced_ops, self._row_values(cell, values)))
            if "shape" in self._ops_list:
                m["shape"] = cell.shape
            if "dtype" in self._ops_list:
                m["dtype"] = cell.dtype
            out[tag] = m
        return out

    # ---- hooks ----

    def _register_hooks(self):
        self._register_param_name()
        self.optimizer_hooked = True
        if self.wg_distribution:
            self._hook_weights()
        self._hook_modules()
        self.monitoring = True

    def _remove_all_hooks(self):
        self.handles.remove("xy")
        self.handles.remove("stack")
        self.handles.remove("wgrads")
        self.weight_hooked = False
        self.optimizer_hooked = False
        self.grad_accs.clear()
        self._reset_collection()
        self.monitoring = False

    def _remove_all_hooks_final(self):
        if self.dynamic_enable:
            # Ends with dynamic_on set to false in the file, for the user to turn it on again.
            try:
                with open(self.config_file_path, encoding="utf-8") as f:
                    config = json.load(f)
                config["dynamic_on"] = False
                with open(self.config_file_path, "w", encoding="utf-8") as f:
                    json.dump(config, f, indent=2)
                self.config_timestamp = os.path.getmtime(self.config_file_path)
                _info("Finish monitor, set config'dynamic_on=False, will restart by set it to True and update config")
            except (OSError, ValueError) as e:
                _warn(f"Finish monitor, set config'dynamic_on=False fail because {e}, please check!!!")
        _info("Finish monitor")
        self._remove_all_hooks()

    def _is_target_param(self, param_name, prefix):
        name = prefix + param_name
        squashed = prefix + squash_param_name(param_name, self.squash_name)
        return any(param_name.startswith(t) or squashed.startswith(t) or name.startswith(t) for t in self._targets)

    def _register_param_name(self):
        for vpp_stage, chunk in enumerate(self.model):
            prefix = f"{vpp_stage}{NAME_SEP}"
            for param_name, param in chunk.named_parameters():
                if not param.requires_grad or not self._is_target_param(param_name, prefix):
                    continue
                name = prefix + squash_param_name(param_name, self.squash_name)
                if name in self._param2name.values():
                    name = prefix + param_name
                self._param2name[param] = name
                self._name2param[name] = param
                self._origin2squash[param_name] = name
                dist = torch.distributed
                if self.tp_group is not None and not (getattr(param, "tensor_model_parallel", False)
                                                      or dist.get_rank(group=self.tp_group) == 0):
                    self._duplicate[name] = True
                if self.dp_group is not None and dist.get_rank(group=self.dp_group) != 0:
                    self._duplicate[name] = True
                self._name2tag[name] = {k: get_summary_writer_tag_name(name, k, self.rank)
                                        for k in ("pre_grad", "post_grad", "param_origin", "param_updated",
                                                  "exp_avg", "exp_avg_sq", "mg_direction")}
        # What _pre_step reads every step, in _param2name's order: (param, post_grad tag) of the
        # params whose grads this rank writes, and each stage's tags of every param.
        self._post_grad_plan = [(p, self._name2tag[n]["post_grad"]) for p, n in self._param2name.items()
                                if not self._duplicate.get(n)]
        self._stage_tags = {k: tuple(self._name2tag[n][k] for n in self._param2name.values())
                            for k in ("exp_avg", "exp_avg_sq", "mg_direction")}

    def _module_target(self, module_name, vpp_stage):
        squashed = vpp_stage + squash_param_name(module_name, self.squash_name)
        if self.all_xy or self.print_struct:
            return squashed
        for pattern in (squashed, vpp_stage + module_name):
            if pattern in self._module_targets:
                return pattern
        return ""

    def _hook_modules(self):
        if self.module_rank_list and self.rank not in self.module_rank_list:
            return
        self._module_targets = set()
        for key in self._targets:
            if NAME_SEP in key:
                self._module_targets.add(key)
            else:
                self._module_targets.update(f"{v}{NAME_SEP}{key}" for v in range(len(self.model)))
        hooked = 0
        for vpp_stage, chunk in enumerate(self.model):
            hooked += self._hook_chunk(chunk, f"{vpp_stage}{NAME_SEP}")
        if self.rank == 0 or self.rank == min(self.module_rank_list or [self.rank]):
            _info(f"{hooked} modules are monitored")

    def _add_forward_hook(self, module, hook):
        if _FORWARD_HOOK_KWARGS:
            return module.register_forward_hook(hook, with_kwargs=True)
        return module.register_forward_hook(lambda m, args, output: hook(m, args, {}, output))

    def _hook_chunk(self, chunk, vpp_stage):
        hooked = 0
        for module_name, sub in chunk.named_modules():
            if self.stack_info:
                name = vpp_stage + squash_param_name(module_name, self.squash_name)
                self.handles.stack.append(self._add_forward_hook(sub, functools.partial(self._stack_hook, name=name)))
            name = self._module_target(module_name, vpp_stage)
            if not name or sub.__class__.__name__ == "FullyShardedDataParallel":
                continue
            if self.xy_distribution or self.print_struct:
                if not self.backward_only:
                    self.handles.xy.append(self._add_forward_hook(sub, functools.partial(self._fwd_hook, name=name)))
                if not self.forward_only and not self._has_backward_hook(name, sub):
                    self._patch_backward_hook()
                    self.handles.xy.append(sub.register_full_backward_hook(self._bwd_hook))
                    self._bwd_ctx[sub] = _ModuleContext(name)
                hooked += 1
        return hooked

    @staticmethod
    def _has_backward_hook(name, module):
        if getattr(module, "_backward_hooks", None) and getattr(module, "_is_full_backward_hook", None) is False:
            _warn(f"The {name} has registered deprecated register_backward_hook, which may cause abnormal data dump. "
                  "The backward input/output for this module will be skipped.")
            return True
        return False

    def _patch_backward_hook(self):
        """As msprobe: the tensors a full backward hook wraps are cloned, so that the model may
        modify a hooked module's output in place."""
        if self._backward_hook_patched:
            return
        self._backward_hook_patched = True
        from torch.utils.hooks import BackwardHook
        if getattr(BackwardHook, "_tprobe_cloned", False):
            return

        def clone(args):
            if isinstance(args, tuple):
                return tuple(clone(a) for a in args)
            if isinstance(args, torch.Tensor) and not str(args.dtype).startswith("torch.float8"):
                return args.clone()
            return args

        def wrap(setup):
            @functools.wraps(setup)
            def wrapped(*args, **kwargs):
                return clone(setup(*args, **kwargs))  # with autograd: the clones stay in the graph
            return wrapped

        BackwardHook.setup_input_hook = wrap(BackwardHook.setup_input_hook)
        BackwardHook.setup_output_hook = wrap(BackwardHook.setup_output_hook)
        BackwardHook._tprobe_cloned = True

    def _tag_map(self, module_name, suffix, tag, value):
        """msprobe's build_tbtag_tensor_map: {tag: tensor or non-tensor}."""
        if isinstance(value, torch.Tensor):
            value = [value]
        out = {}
        if isinstance(value, (tuple, list)):
            if len(value) == 1:
                key = get_summary_writer_tag_name(module_name + suffix, tag, self.rank)
                self._register_call_id(key)
                out[key] = value[0]
            else:
                for i, v in enumerate(value):
                    key = get_summary_writer_tag_name(f"{module_name}_{i}{suffix}", tag, self.rank)
                    self._register_call_id(key)
                    out[key] = v
        return out

    def _stack_hook(self, module, args, kwargs, output, name):
        ctx = self._fwd_ctx.get(module)
        if ctx is None:
            ctx = self._fwd_ctx[module] = _ModuleContext(name)
        ctx.stack = _stack_text()

    def _fwd_hook(self, module, args, kwargs, output, name):
        if not module.training or _is_recomputation():
            return
        inputs = [t for t in args if torch.is_tensor(t)]
        if kwargs:
            inputs.extend(t for t in kwargs.values() if torch.is_tensor(t))
        ctx = self._fwd_ctx.get(module)
        if ctx is None:
            ctx = self._fwd_ctx[module] = _ModuleContext(name)
        if not ctx.struct:
            ctx.struct = {"input": _param_struct(inputs), "output": _param_struct(output)}
        if self.print_struct:
            self._module_struct.setdefault(ctx.name, {}).update(ctx.struct)
            return
        if self._collecting():
            suffix = f"{NAME_SEP}{ctx.micro_step}"
            tags = self._tag_map(f"{ctx.name}.input", suffix, "actv", inputs)
            tags.update(self._tag_map(f"{ctx.name}.output", suffix, "actv", output))
            ctx.actv.update(self._reduce_map(tags))
        ctx.micro_step += 1
        if ctx.micro_step == self.micro_batch_number:
            ctx.micro_step = 0

    def _bwd_hook(self, module, input_grad, output_grad):
        ctx = self._bwd_ctx.get(module)
        if ctx is None:  # hooks of an earlier registration
            return
        if not ctx.struct:
            ctx.struct = {"input_grad": _param_struct(input_grad), "output_grad": _param_struct(output_grad)}
        if self.print_struct:
            self._module_struct.setdefault(ctx.name, {}).update(ctx.struct)
            return
        if self._collecting():
            suffix = f"{NAME_SEP}{ctx.micro_step}"
            tags = self._tag_map(f"{ctx.name}.input", suffix, "actv_grad", input_grad)
            tags.update(self._tag_map(f"{ctx.name}.output", suffix, "actv_grad", output_grad))
            self._actv_grad.update(self._reduce_map(tags))
        ctx.micro_step += 1
        if ctx.micro_step == self.micro_batch_number:
            ctx.micro_step = 0

    def _grad_of(self, param):
        if self.params_have_main_grad:
            grad = getattr(param, "main_grad", None)
            if grad is not None or hasattr(param, "main_grad"):
                return grad
            self._warn_once("main_grad", "params_have_main_grad=True but the parameters have no main_grad: "
                                         "reading .grad (pass params_have_main_grad=False for plain PyTorch)")
        return param.grad

    def _hook_weights(self):
        for param, name in self._param2name.items():
            self._micro[param] = 0
            self._acc_tags[param] = get_summary_writer_tag_name(name, "acc_grad", self.rank)
            acc = param.expand_as(param).grad_fn.next_functions[0][0]
            self.handles.wgrads.append(acc.register_hook(self._param_hook_of(param, name)))
            self.grad_accs.append(acc)
        self.weight_hooked = True

    def _param_hook_of(self, param, name):
        """The AccumulateGrad hook of `param`: counts its micro-steps, and at the last one (every
        one with monitor_mbs_grad) of a collected step hands its grad to _grad_batch. It runs once
        per parameter per backward pass, so it is one closure with what it reads at hand (its
        share of the monitor's step time was a dozen method calls)."""
        monitor = self
        micro_of = self._micro
        acc_tag = self._acc_tags[param]

        def hook(*args):
            micro = micro_of.get(param, 0)
            mbs = monitor.monitor_mbs_grad
            key = get_summary_writer_tag_name(f"{name}{NAME_SEP}{micro}", "acc_grad", monitor.rank) if mbs else acc_tag
            monitor._call_ids[key] = monitor._call_id
            monitor._call_id += 1
            micro += 1
            last = micro == monitor.micro_batch_number
            micro_of[param] = 0 if last else micro
            if (last or mbs) and monitor.monitoring and monitor._writes_here and monitor._step_selected(monitor._step):
                grad = monitor._grad_of(param) if monitor.params_have_main_grad else param.grad
                if grad is not None:
                    batch = monitor._grad_batch
                    batch.append((key, grad, grad._version))
                    monitor._grad_batch_elements += grad.numel()
                    if monitor._grad_batch_elements >= _GRAD_BATCH_ELEMENTS:
                        monitor._start_grad_batch()
                    if not monitor._flush_queued:
                        monitor._queue_flush()
        return hook

    # The grad as the hook sees it is reduced while the backward pass goes on (a CPU grad on the
    # worker thread, a device grad on its device) and waited for at the end of the pass (the
    # autograd engine's final callback runs before backward() returns: before the user's code, a
    # clip_grad_norm_ say, can change a grad; an in-place change within the pass is caught by the
    # version check in _flush_grads). The hook appends (tag, grad, grad._version) to _grad_batch.

    def _queue_flush(self):
        try:
            torch.autograd.Variable._execution_engine.queue_callback(self._flush_grads)
            self._flush_queued = True
        except RuntimeError:  # not inside a backward pass (a hook called by hand): now
            self._flush_grads()

    def _start_grad_batch(self):
        batch, self._grad_batch, self._grad_batch_elements = self._grad_batch, [], 0
        if batch:
            self._pending_grads.append((batch, self._reduce_start([grad for _, grad, _ in batch])))

    def _flush_grads(self):
        self._flush_queued = False
        self._start_grad_batch()
        pending, self._pending_grads = self._pending_grads, []
        if not pending:
            return
        for (batch, _), cells in zip(pending, self._reduce_finish([handle for _, handle in pending])):
            moved = [key for key, grad, version in batch if grad._version != version]
            if moved:
                self._warn_once("grad_version", f"{moved[0]}: the grad changed in place between its AccumulateGrad "
                                                "hook and the end of the backward pass; its acc_grad row may "
                                                "hold the values of either")
            self._grad_pre.update(zip([key for key, _, _ in batch], cells))

    def _finish_post_grad(self):
        """Waits for the post_grad statistics _pre_step began (before optimizer.step returns: before
        zero_grad or the next backward can change a grad). An optimizer that changed a grad in place
        during its step (its version moved) may have been read half before and half after: the rows
        of this step say so, once, and later steps read post_grad on the training thread, before the
        step, as msprobe does."""
        pending, self._post_pending = self._post_pending, None
        if pending is None:
            return
        tags, versions, handle = pending
        (cells,) = self._reduce_finish([handle])
        self._grad_post.update(zip(tags, cells))
        if any(g._version != v for g, v in versions):
            self._post_grad_on_step_thread = True
            self._warn_once("post_grad_version", f"the optimizer changed a grad in place during step {self._step}: "
                                                 "that step's post_grad rows may hold values it wrote; post_grad is "
                                                 "read before the step from now on")

    # ---- the optimizer step ----

    def _optimizer_state(self, optimizer):
        state = {}
        for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
            if hasattr(opt, "param_to_cpu_states_map"):
                state.update(opt.param_to_cpu_states_map)
            elif hasattr(opt, "state"):
                state.update(opt.state)
            elif hasattr(opt, "optimizer") and hasattr(opt.optimizer, "state"):
                state.update(opt.optimizer.state)
        return state

    def _param_map(self, tag, tensors):
        """{tag: tensor} of stage `tag` (exp_avg, exp_avg_sq, mg_direction) from {param name:
        tensor or None}; every param's tag takes a call id, present or not (msprobe's)."""
        tags = self._stage_tags[tag]
        self._register_call_ids(tags)
        return {key: t for key, t in zip(tags, map(tensors.get, self._param2name.values())) if t is not None}

    def _pre_step(self, optimizer):
        if self.print_struct and any(v for v in self._module_struct.values()) and not self.struct_printed:
            self._save_module_struct()
            raise Exception("exit after first monitor step when print model struct")
        if not self._step_selected(self._step) or not self.optimizer_hooked:
            return
        self._flush_grads()  # a backward pass whose final callback did not run (it raised)
        writes = self._rank_writes() and self.monitoring
        grads = {}
        if self.wg_distribution:
            # Reduced again, not taken from acc_grad's cells: an in-place change since the hook
            # (dist.all_reduce, .data) need not move the grad's version counter.
            plan = self._post_grad_plan
            if self.params_have_main_grad:
                read = [self._grad_of(param) for param, _ in plan]
            else:
                read = [param.grad for param, _ in plan]
            grads = {tag: grad for (_, tag), grad in zip(plan, read) if grad is not None}
            if len(grads) != len(plan):
                for (param, _), grad in zip(plan, read):
                    if grad is None:
                        name = self._param2name[param]
                        self._warn_once(("grad", name), f"grad is None: {name}, maybe something wrong happened.")
            self._register_call_ids(tuple(grads))
        exp_avg, exp_avg_sq = {}, {}
        if self.mv_distribution or self.mg_direction:
            state = self._optimizer_state(optimizer)
            for param, name in self._param2name.items():
                s = state.get(param)
                if s is not None:
                    exp_avg[name] = s.get("exp_avg")
                    if self.mv_distribution:
                        exp_avg_sq[name] = s.get("exp_avg_sq")
        m, v = {}, {}
        if self.mv_distribution:
            m = self._param_map("exp_avg", exp_avg)
            v = self._param_map("exp_avg_sq", exp_avg_sq)
        prefetched = self._take_mv_prefetch(m, v) if writes and self.mv_distribution else None
        if writes:
            # Both threads read: the worker exp_avg_sq, then post_grad (which goes on during the
            # step: the optimizer reads grads, it does not write them); this thread meanwhile
            # exp_avg, then waits for exp_avg_sq, which the step writes. Unless both moments were
            # read already, after the last step (_prefetch_mv).
            v_started = self._reduce_start(list(v.values())) if v and prefetched is None else None
            if grads:
                if self._post_grad_on_step_thread:
                    self._grad_post.update(self._reduce_map(grads))
                else:
                    tags = list(grads)
                    self._post_pending = (tags, [(g, g._version) for g in grads.values()],
                                          self._reduce_start([grads[t] for t in tags], early=True))
            if prefetched is not None:
                self._exp_avg, self._exp_avg_sq = prefetched
            elif self.mv_distribution:
                self._exp_avg = self._reduce_map(m)
                self._exp_avg_sq = dict(zip(v, self._reduce_finish([v_started])[0])) if v else {}
        if self.param_distribution and writes:
            self._param_metric.update(self._reduce_map(self._param_tags("param_origin")))
        if self.mg_direction:
            directions = {}
            for param, name in self._param2name.items():
                grad = param.main_grad if self.params_have_main_grad and hasattr(param, "main_grad") else param.grad
                if grad is None:
                    self._warn_once(("grad", name), f"grad is None: {name}, maybe something wrong happened.")
                    continue
                if self._step == 0:
                    directions[name] = torch.tensor(1.)
                elif exp_avg.get(name) is not None:
                    directions[name] = _sign_matches(grad, exp_avg[name])
            m = self._param_map("mg_direction", directions)
            if writes:
                self._other = self._reduce_map(m)

    # Adam's moments do not change between one optimizer step and the next (forward, backward
    # and zero_grad leave them), and msprobe reads them before the step: they are read right
    # after a step instead, on the worker thread while the next forward and backward run, and
    # taken at the next step if nothing changed them (the same tensors, their versions unmoved).

    def _mv_by_tag(self, optimizer):
        """({exp_avg tag: tensor}, {exp_avg_sq tag: tensor}) as _pre_step's _param_map makes
        them, no call id registered."""
        state = self._optimizer_state(optimizer)
        m, v = {}, {}
        for param, tag_m, tag_v in zip(self._param2name, self._stage_tags["exp_avg"], self._stage_tags["exp_avg_sq"]):
            s = state.get(param)
            if s is None:
                continue
            if s.get("exp_avg") is not None:
                m[tag_m] = s["exp_avg"]
            if s.get("exp_avg_sq") is not None:
                v[tag_v] = s["exp_avg_sq"]
        return m, v

    def _prefetch_mv(self, optimizer):
        self._drop_mv_prefetch()  # one not taken (a step that did not collect)
        if not (self.mv_distribution and self.monitoring and self.optimizer_hooked and self._writes_here
                and self._step_selected(self._step)) or self._send_failed or self._closed:
            return
        m, v = self._mv_by_tag(optimizer)
        tensors = [t for t in (*m.values(), *v.values()) if torch.is_tensor(t)]
        if len(tensors) != len(m) + len(v) or not tensors:
            return
        self._mv_prefetch = (tuple(m), tuple(v), [(t, t._version) for t in tensors],
                             self._reduce_start(tensors, early=True))

    def _take_mv_prefetch(self, m, v):
        """The prefetched cells ({exp_avg tag: cell}, {exp_avg_sq tag: cell}) when they are of the
        tensors `m` and `v` hold now, unchanged since; else None (read again)."""
        pre, self._mv_prefetch = self._mv_prefetch, None
        if pre is None:
            return None
        tags_m, tags_v, read, handle = pre
        (cells,) = self._reduce_finish([handle])
        now = [*m.values(), *v.values()]
        if tags_m != tuple(m) or tags_v != tuple(v) or len(now) != len(read) \
                or any(t is not n or t._version != version for (t, version), n in zip(read, now)):
            return None
        return dict(zip(tags_m, cells[:len(tags_m)])), dict(zip(tags_v, cells[len(tags_m):]))

    def _drop_mv_prefetch(self):
        pre, self._mv_prefetch = getattr(self, "_mv_prefetch", None), None
        if pre is not None:
            try:
                self._reduce_finish([pre[3]])  # its ticket must not stay in the worker's table
            except RuntimeError:
                pass

    def _param_tags(self, stage):
        return {self._name2tag[name][stage]: p for name, p in self._name2param.items() if p.numel() != 0}

    def _post_step(self, optimizer):
        if self.param_distribution and self.optimizer_hooked and self._collecting():
            self._param_metric.update(self._reduce_map(self._param_tags("param_updated")))

    def _step_final(self, optimizer):
        if self.monitoring and self._rank_writes() and self._step_selected(self._step):
            self.has_collect_times += 1
            self._write(self._step)
            self._call_id = 0
            self._call_ids.clear()
            if self.has_collect_times >= self.collect_times:
                self._remove_all_hooks_final()
        self._step += 1
        self._dynamic_monitor()
        self._control_monitor()
        self._prefetch_mv(optimizer)

    def _hook_step_final(self, optimizer):
        if getattr(optimizer, "_tprobe_monitor", None) is self:
            return
        original = optimizer.step
        monitor = self

        # A bound method of the instance, as optimizer.step was: LR schedulers of torch < 2.0 wrap
        # optimizer.step through its __func__ and __self__.
        def step(opt, *args, **kwargs):
            monitor._pre_step(opt)
            try:
                out = original(*args, **kwargs)
            finally:
                monitor._finish_post_grad()
            monitor._post_step(opt)
            monitor._step_final(opt)
            return out

        optimizer.step = types.MethodType(functools.wraps(original)(step), optimizer)
        optimizer._tprobe_monitor = self

    # ---- dynamic on/off (DYNAMIC_MONITOR) ----

    def _dynamic_monitor(self):
        if not self.dynamic_enable:
            return
        try:
            timestamp = os.path.getmtime(self.config_file_path)
            if timestamp == self.config_timestamp:
                return
            self.config_timestamp = timestamp
            with open(self.config_file_path, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError) as e:
            _warn(f"get config.json wrong because {e}, not updated, please check!!!")
            return
        if not config.get("dynamic_on", False):
            return
        try:
            checked = json.loads(self._ops.monitor_config_check(self.config_file_path))
            config = checked["monitor"]
            _say_warnings(checked)
        except RuntimeError as e:
            _warn(f"set config wrong because {e}, not updated, please check!!!")
            return
        self._remove_all_hooks()
        self._set_config(config)
        self.start_step = self._step  # from the next step on, whatever start_step says
        _warn(f"config is updated at step{self._step - 1}, will start new hook at step{self._step}.")
        self._register_hooks()

    # ---- on/off through the control path (a stage's {"command": "monitor", "on": ...}) ----

    def _control_monitor(self):
        if self._send_failed or self._closed:
            return
        try:
            switch = self._ops.monitor_control()
        except RuntimeError as e:
            _warn(f"{e}; the control path is not read any more")
            self._send_failed = True
            return
        if switch == "off" and self.monitoring:
            self._remove_all_hooks()
        elif switch == "on" and not self.monitoring:
            # As a DYNAMIC_MONITOR restart: from the next step on, collect_times counted afresh.
            self.has_collect_times = 0
            self.start_step = self._step
            self._register_hooks()

    # ---- writing ----

    def _write(self, step):
        sends = []  # (prefix, micro_step column, {tag: cell})
        if self.xy_distribution:
            # msprobe appends each module's rows in turn to the same file: one record, same rows.
            actv = {}
            for ctx in self._fwd_ctx.values():
                actv.update(ctx.actv)
            if actv:
                sends.append(("actv", True, actv))
            if self._actv_grad:
                sends.append(("actv_grad", True, dict(self._actv_grad)))
        if self.wg_distribution:
            sends.append(("grad_unreduced", self.monitor_mbs_grad, dict(self._grad_pre)))
            sends.append(("grad_reduced", False, dict(self._grad_post)))
        if self.mv_distribution:
            sends.append(("exp_avg", False, self._exp_avg))
            sends.append(("exp_avg_sq", False, self._exp_avg_sq))
        if self.param_distribution:
            sends.append(("param_origin", False, {k: c for k, c in self._param_metric.items() if "param_origin" in k}))
            sends.append(("param_updated", False, {k: c for k, c in self._param_metric.items() if "param_updated" in k}))
        if self._other:
            sends.append(("other", False, self._other))
        cells = [c for _, _, tags in sends for c in tags.values()]
        host = self._host_blocks(cells) if cells else {}  # the step's one host read (per device)
        for prefix, micro_step, tags in sends:
            if tags:
                self._send(prefix, step, micro_step, tags, host)
        for ctx in self._fwd_ctx.values():
            ctx.actv.clear()
        self._other = {}
        if self.stack_info:
            self._write_stack_info(step)
            self.stack_info = False
            self.handles.remove("stack")

    def _send(self, prefix, step, micro_step, tags, host):
        """One prefix's rows of the step. Their fixed part (tags, shapes, dtypes, call ids, which
        columns hold ints) is registered with the session once, as a row set; each step then hands
        over only its blocks and which of their rows (monitor_send_rows): no JSON written and parsed,
        no Python float made, per step. `host`: _host_blocks' {id(block): host block}."""
        if self._send_failed or self._closed:
            return
        cells = list(tags.values())
        fixed = (tuple(tags), tuple(map(_FACTS, cells)), tuple(map(self._call_ids.get, tags, itertools.repeat(-1))))
        known = self._rowsets.get((prefix, micro_step))
        if known is None or known[0] != fixed:
            width = len(self._reduced_ops)
            rows = [{"tag": tag, "values": [0 if i in ints else 0.0 for i in range(width)],
                     "shape": None if shape is None else list(shape), "dtype": dtype, "call_id": call_id}
                    for tag, (shape, dtype, ints), call_id in zip(*fixed)]
            meta = {"step": step, "ops": self._ops_list, "micro_step": micro_step, "rows": rows}
            handle = self._call_session(step, lambda: self._ops.monitor_rowset(json.dumps(meta)))
            if handle is None:
                return
            known = self._rowsets[(prefix, micro_step)] = (fixed, handle)
        # Spans (block, first row, rows): a reduction's cells in their order are one span.
        blocks, spans, index = [], [], {}
        last, following = None, -1
        for block, row, _ in cells:
            if block is last and row == following:
                spans[-1] += 1
            else:
                i = index.get(id(block))
                if i is None:
                    i = index[id(block)] = len(blocks)
                    blocks.append(host[id(block)])
                spans += (i, row, 1)
                last = block
            following = row + 1
        self._call_session(step, lambda: self._ops.monitor_send_rows(prefix, step, known[1], blocks, spans), sends=True)

    @staticmethod
    def _host_blocks(cells):
        """{id(block): the block on the host} of the blocks of `cells`: one transfer per device."""
        blocks = {id(b): b for b in map(_BLOCK, cells)}
        host, by_device = {}, {}
        for key, block in blocks.items():
            if block.device.type == "cpu":
                host[key] = block.contiguous()
            else:
                by_device.setdefault(block.device, []).append((key, block))
        for group in by_device.values():
            read = torch.cat([b.reshape(-1) for _, b in group]).cpu()
            offset = 0
            for key, block in group:
                host[key] = read[offset:offset + block.numel()].view(block.shape)
                offset += block.numel()
        return host

    @staticmethod
    def _int_columns_of(cell):
        """The columns _row_values gives as ints for this cell (none for a device tensor's)."""
        return cell.facts[2]

    def _send_meta(self, prefix, step, meta):
        if self._send_failed or self._closed:
            return
        self._call_session(step, lambda: self._ops.monitor_send(prefix, step, json.dumps(meta)), sends=True)

    def _call_session(self, step, call, sends=False):
        """call()'s result, or None when the session failed (said once: the training goes on). A
        send the session did not take (sends: False back) turns the monitor off the same way."""
        try:
            result = call()
        except RuntimeError as e:
            self._send_failed = True
            _warn(f"{e}; the monitor is off, training goes on")
            return None
        if sends and not result:
            # The session no longer takes records: its pipeline went away (the session said so) or
            # a stage stopped it through the control channel. Either way the hooks cost for nothing.
            self._send_failed = True
            if not json.loads(self._ops.monitor_counters()).get("detached"):
                _info(f"the pipeline stopped the monitor at step {step}: hooks removed, training goes on")
            self._remove_all_hooks()
            self.dynamic_enable = False
        return result

    def _write_stack_info(self, step):
        """stack_info.csv (msprobe's write_stack_info: header module_name,stack_info, one row per
        module that ran) goes to the stage, which writes it in the rank folder it made."""
        stacks = [[ctx.name, ctx.stack] for ctx in self._fwd_ctx.values()]
        self._send_meta("stack_info", step, {"step": step, "stack_info": stacks})

    def _save_module_struct(self):
        directory = os.path.join(self.output_dir or os.getenv("MONITOR_OUTPUT_DIR", "./monitor_output"),
                                 "module_struct", f"rank{self.rank}")
        os.makedirs(directory, exist_ok=True)
        path = os.path.realpath(os.path.join(directory, "module_struct.json"))
        with open(path, "w") as f:
            json.dump(self._module_struct, f, indent=2)
        _info(f"save module struct to {path}")
        self.struct_printed = True

    def _warn_once(self, key, message):
        if key not in self._warned:
            self._warned.add(key)
            _warn(message)


def _say_warnings(session_config):
    """The lines msprobe logs while validating (invalid ops dropped, int fields reset), which the
    capture's validation returns with the config."""
    monitor = session_config.get("monitor", {})
    for line in session_config.get("warnings", []) + (monitor.get("warnings", []) if isinstance(monitor, dict) else []):
        _warn(line)


def _sign_matches(x, y):
    """msprobe's get_sign_matches: the share of elements of grad and exp_avg with the same sign."""
    with torch.no_grad():
        if y.numel() == 0:
            return torch.tensor(1.)
        try:
            return ((x.sign() * y.sign()).sum() / y.numel() + 1) / 2
        except RuntimeError:
            return torch.tensor(0.)


def _int_arg(value, name, minimum, default):
    """msprobe's validate_int_arg: a bad value falls back to the default with a warning."""
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        _warn(f"Validate {name} failed, {name} must be an int >= {minimum}, replaced with default value {default}.")
        return default
    return value
