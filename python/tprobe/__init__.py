"""tprobe for PyTorch: msprobe-compatible dumps of a training run's tensors.

Three lines in a training script, as with msprobe:

    from tprobe import PrecisionDebugger
    debugger = PrecisionDebugger(config_path="./config.json")
    for x, y in loader:
        debugger.start(model)
        ...forward, backward, optimizer step...
        debugger.stop()
        debugger.step()

Importing this package loads nothing native; PrecisionDebugger loads the C++ capture
(libtprobe_torch.so) and says where it looked if it is not built. See docs/pytorch.md.

TrainerMon is msprobe's training monitor: `TrainerMon(config).set_monitor(model, optimizer)`.
ConfigChecker is msprobe's dynamic config_check pack (config_check.py).
"""

__all__ = ["PrecisionDebugger", "TrainerMon", "ConfigChecker"]


def __getattr__(name):
    # PrecisionDebugger imports torch: loaded on first use, so that a stage written with
    # tprobe.stage (docs/stage-protocol.md) starts, and answers --describe, without torch.
    if name == "PrecisionDebugger":
        from .debugger import PrecisionDebugger
        return PrecisionDebugger
    if name == "TrainerMon":  # msprobe's training monitor (monitor.py)
        from .monitor import TrainerMon
        return TrainerMon
    if name == "ConfigChecker":  # msprobe's training-setup pack (config_check.py)
        from .config_check import ConfigChecker
        return ConfigChecker
    raise AttributeError(f"module 'tprobe' has no attribute {name!r}")
