"""pip install . — tprobe for the Python (and torch) that runs pip.

    pip install .                         # pip 23/24 with `wheel`: builds without isolation
    pip install --no-build-isolation .    # a pip that builds in isolation (it would hide torch)

setuptools drives CMake: the native libraries and binaries are built against the torch that this
Python imports (its CMake package: torch.utils.cmake_prefix_path, or the system's LibTorch for
Debian's python3-torch), then the wheel holds
    tprobe/                   the Python package (python/tprobe)
    tprobe/lib/               libtprobe_torch.so (the PyTorch capture) and libtprobe_capture.so
    tprobe/bin/               tprobe and every tprobe-* binary (stages, tools, the launcher)
    tprobe/pipelines/         the shipped manifests
and a `tprobe` command, so a training environment needs no PYTHONPATH or TPROBE_* variable.
Nothing is downloaded: the C++ libraries come from the system (scripts/setup.sh installs them).

The CMake tree is build-pip/ in the repository (kept, so a second install builds only what
changed); TPROBE_CMAKE_BUILD_DIR names another one, and an already configured tree there is built
as it is configured (CI reuses its build/ so). The built capture is loaded into this torch before
anything is installed: a library that does not load fails the install, in one line.
"""

import os
import re
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
LIBRARY = "libtprobe_torch.so"


def fail(message):
    sys.exit(f"tprobe setup.py: {message}")


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        match = re.search(r"project\(tprobe VERSION ([0-9.]+)", f.read())
    return match.group(1)


def torch_cmake_args():
    try:
        import torch.utils
    except ImportError:
        fail(f"{sys.executable} cannot import torch: install torch first; a pip that builds in "
             "isolation hides it: pip install --no-build-isolation .")
    torch_dir = os.path.join(torch.utils.cmake_prefix_path, "Torch")
    # Debian's python3-torch ships no CMake package: its LibTorch (libtorch-dev) is found instead,
    # and the load check below proves the two match.
    return [f"-DTorch_DIR={torch_dir}"] if os.path.isdir(torch_dir) else []


def build_native():
    """Configures (when needed) and builds the CMake tree; returns its path."""
    tree = os.path.abspath(os.environ.get("TPROBE_CMAKE_BUILD_DIR") or os.path.join(ROOT, "build-pip"))
    torch_args = torch_cmake_args()
    if shutil.which("cmake") is None:
        fail("cmake is not on PATH (scripts/setup.sh installs it and the C++ libraries)")
    if not os.path.isfile(os.path.join(tree, "CMakeCache.txt")):
        configure = ["cmake", "-S", ROOT, "-B", tree, "-DCMAKE_BUILD_TYPE=Release",
                     "-DTPROBE_BUILD_TESTS=OFF", "-DTPROBE_BUILD_BENCH=OFF", *torch_args]
        if subprocess.call(configure) != 0:
            fail(f"unable to configure {tree} (the CMake output above says why)")
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    if subprocess.call(["cmake", "--build", tree, "-j", jobs]) != 0:
        fail(f"unable to build {tree} (the compiler output above says why)")
    library = os.path.join(tree, "lib", LIBRARY)
    if not os.path.isfile(library):
        fail(f"{tree} has no lib/{LIBRARY}: CMake did not find LibTorch for this torch")
    check = subprocess.run([sys.executable, "-c", "import sys, torch; torch.ops.load_library(sys.argv[1])", library],
                           capture_output=True, text=True)
    if check.returncode != 0:
        why = (check.stderr.strip().splitlines() or ["?"])[-1]
        fail(f"{library} does not load into {sys.executable}'s torch: {why}")
    return tree


class build_py_native(build_py):
    """build_py, then the native side copied into the package."""

    def run(self):
        super().run()
        tree = build_native()
        package = os.path.join(self.build_lib, "tprobe")
        # The build tree's layout, whose $ORIGIN run paths (CMAKE_BUILD_RPATH_USE_ORIGIN) hold in it.
        lib_dir = os.path.join(package, "lib")
        os.makedirs(lib_dir, exist_ok=True)
        # Every name a loader may ask for (libtprobe_capture.so.0 is its soname), each a file: a
        # wheel holds no links.
        for name in sorted(os.listdir(os.path.join(tree, "lib"))):
            if re.search(r"\.so(\.[0-9]+)*$", name):
                shutil.copy2(os.path.join(tree, "lib", name), lib_dir)
        bin_dir = os.path.join(package, "bin")
        os.makedirs(bin_dir, exist_ok=True)
        # The product's binaries only: a tree configured with tests holds test and bench programs too.
        for name in sorted(os.listdir(os.path.join(tree, "bin"))):
            if name == "tprobe" or name.startswith("tprobe-"):
                shutil.copy2(os.path.join(tree, "bin", name), bin_dir)
        manifests = os.path.join(package, "pipelines")
        os.makedirs(manifests, exist_ok=True)
        for name in sorted(os.listdir(os.path.join(ROOT, "pipelines"))):
            if name.endswith(".json"):
                shutil.copy2(os.path.join(ROOT, "pipelines", name), manifests)


class NativeDistribution(Distribution):
    # Platform-specific: the wheel is tagged for this machine and installed into platlib.
    def has_ext_modules(self):
        return True


os.makedirs(os.path.join(ROOT, "build-pip"), exist_ok=True)
setup(
    name="tprobe",
    version=project_version(),
    description="Finds where deep-learning training goes numerically wrong (msprobe-compatible)",
    python_requires=">=3.8",
    package_dir={"": "python"},
    packages=["tprobe"],
    package_data={"tprobe": ["config.json"]},
    entry_points={"console_scripts": ["tprobe = tprobe._cli:main"]},
    cmdclass={"build_py": build_py_native},
    distclass=NativeDistribution,
    zip_safe=False,
    options={"build": {"build_base": os.path.join(ROOT, "build-pip", "setuptools")},
             "egg_info": {"egg_base": os.path.join(ROOT, "build-pip")}},
)
