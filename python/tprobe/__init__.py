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
"""

from .debugger import PrecisionDebugger

__all__ = ["PrecisionDebugger"]
