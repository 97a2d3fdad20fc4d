"""Finding and loading the C++ side: libtprobe_torch.so, the tprobe binaries and the manifests.

Search order (the first that exists wins; each is documented in docs/pytorch.md):
  library    $TPROBE_TORCH_LIBRARY (if set, it must exist), then this package's directory and its
             lib/ (pip install .), then build/lib of the repository this package sits in
             (python/tprobe → ../../build/lib)
  binaries   $TPROBE_BIN_DIR, then this package's bin/ (pip install .), then ../bin next to the
             library found, then build/bin
  manifests  $TPROBE_PIPELINES, then this package's pipelines/ (pip install .), then pipelines/ of
             the repository
"""

import os

import torch

LIBRARY_NAME = "libtprobe_torch.so"
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(os.path.dirname(PACKAGE_DIR))

_ops = None
_library_path = None


def library_candidates():
    candidates = []
    env = os.environ.get("TPROBE_TORCH_LIBRARY")
    if env:
        candidates.append(os.path.abspath(env))
    candidates.append(os.path.join(PACKAGE_DIR, LIBRARY_NAME))
    candidates.append(os.path.join(PACKAGE_DIR, "lib", LIBRARY_NAME))  # pip install .
    candidates.append(os.path.join(REPO_DIR, "build", "lib", LIBRARY_NAME))
    return candidates


def nvrtc_library(search_path=None, torch_lib=None):
    """The libnvrtc a pip torch ships, which the loader does not find by its name alone: in
    site-packages' nvidia/cuda_nvrtc/lib (CUDA 12 wheels), else bundled in torch/lib under a
    hashed name (older wheels). None when there is none. TPROBE_DEVICE_STATS=kernel compiles its
    statistics kernel with it (capture/torch/segment_engine.h)."""
    import glob
    import sys
    torch_lib = torch_lib or os.path.join(os.path.dirname(torch.__file__), "lib")
    candidates = []
    for entry in sys.path if search_path is None else search_path:
        candidates += sorted(glob.glob(os.path.join(entry, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*")))
    candidates += sorted(glob.glob(os.path.join(torch_lib, "libnvrtc-*.so*")))
    return next((c for c in candidates if "builtins" not in os.path.basename(c)), None)


def load():
    """torch.ops.tprobe, loading the library on first use. Raises RuntimeError naming the places
    searched when it is not built."""
    global _ops, _library_path
    if _ops is not None:
        return _ops
    env = os.environ.get("TPROBE_TORCH_LIBRARY")
    if env and not os.path.isfile(env):
        raise RuntimeError(f"tprobe: TPROBE_TORCH_LIBRARY={env} does not exist")
    candidates = library_candidates()
    if getattr(torch.version, "cuda", None) and not os.environ.get("TPROBE_NVRTC_LIBRARY"):
        nvrtc = nvrtc_library()
        if nvrtc:
            os.environ["TPROBE_NVRTC_LIBRARY"] = nvrtc  # read by the capture at its first CUDA batch
    for path in candidates:
        if os.path.isfile(path):
            try:
                torch.ops.load_library(path)
            except OSError as e:
                # torch 2.x says only "Could not load this library"; the loader's reason (a
                # dependency not found, another architecture) is what it raised from.
                reason = f"{e} ({e.__cause__})" if e.__cause__ is not None else str(e)
                raise RuntimeError(f"tprobe: cannot load {path}: {reason}") from None
            _library_path = path
            _ops = torch.ops.tprobe
            return _ops
    raise RuntimeError(
        "tprobe: the C++ capture " + LIBRARY_NAME + " is not built (looked for "
        + ", ".join(candidates) + "); build it with `cmake -S . -B build && cmake --build build` "
        "(needs LibTorch: apt-get install libtorch-dev) or set TPROBE_TORCH_LIBRARY")


def bin_dir():
    """Directory of the tprobe binaries (for the direct mode)."""
    env = os.environ.get("TPROBE_BIN_DIR")
    if env:
        return os.path.abspath(env)
    packaged = os.path.join(PACKAGE_DIR, "bin")
    if os.path.isfile(os.path.join(packaged, "tprobe")):
        return packaged
    if _library_path:
        beside = os.path.join(os.path.dirname(os.path.dirname(_library_path)), "bin")
        if os.path.isfile(os.path.join(beside, "tprobe")):
            return beside
    return os.path.join(REPO_DIR, "build", "bin")


def pipelines_dir():
    env = os.environ.get("TPROBE_PIPELINES")
    if env:
        return os.path.abspath(env)
    packaged = os.path.join(PACKAGE_DIR, "pipelines")
    if os.path.isdir(packaged):
        return packaged
    return os.path.join(REPO_DIR, "pipelines")
