"""The direct mode: PrecisionDebugger starts its own pipeline when the script runs outside
`tprobe run` (no TPROBE_ENDPOINT), and ends it at exit, so the dump is complete when the
script returns.

It runs `tprobe run MANIFEST` without a command: the launcher starts the manifest's stages, prints
the endpoints as NAME=VALUE lines and waits; SIGINT then ends the run the clean way (the stages
drain and write their files, the launcher waits for them). The launcher gets a session of its own,
so that a Ctrl-C in the terminal reaches the training script first and the capture can still
close its stream before the pipeline ends; it gets SIGTERM if the training process dies first.

The launcher's chatter (readiness, per-stage summaries) would interleave with the script's own
output, so its stderr is kept: lines naming a problem ("fatal", "error", "warning") and a stage's
findings as it makes them (free_benchmark's inconsistent API calls) are shown at once, and
everything if the run ends badly. TPROBE_VERBOSE=1 shows every line as it comes.
"""

import ctypes
import os
import shlex
import signal
import subprocess
import sys
import threading

from . import _native

PR_SET_PDEATHSIG = 1


def _die_with_parent():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        # SIGINT is how close() ends the run the clean way. A training process started with SIGINT
        # ignored (a background job of a non-interactive shell) would hand that on, and the
        # launcher, which keeps inherited ignored signals ignored, would never end.
        libc.signal(int(signal.SIGINT), 0)  # SIG_DFL
    except (OSError, AttributeError):
        pass


def manifest_for(task):
    """The shipped manifest (in pipelines/) that does `task`: each lists the tasks it can do
    ("tasks", docs/stages/run.md), and tprobe run refuses a config asking for another. A task
    tprobe does not build never gets here: the debugger refuses it at construction."""
    return {"tensor": "tensor.json", "overflow_check": "overflow_check.json",
            "grad_probe": "grad_probe.json", "free_benchmark": "free_benchmark.json",
            "monitor": "monitor.json"}.get(task, "statistics.json")



# Findings a stage prints the moment it makes them: the user watches for these while training runs.
FINDING_PREFIXES = ("tprobe-free-benchmark: step ", "tprobe-monitor: Rule ")


def _shown_at_once(line):
    return any(w in line for w in ("fatal", "error", "warning")) or line.startswith(FINDING_PREFIXES)

class DirectPipeline:
    """A `tprobe run` started by this process. `endpoint` is where the capture connects."""

    def __init__(self, task):
        bin_dir = _native.bin_dir()
        launcher = os.path.join(bin_dir, "tprobe")
        if not os.access(launcher, os.X_OK):
            raise RuntimeError(
                f"tprobe: direct mode needs the tprobe binaries, but {launcher} does not exist; build them "
                "(cmake --build build), set TPROBE_BIN_DIR, or run the script under `tprobe run`")
        manifest = os.path.join(_native.pipelines_dir(), manifest_for(task))
        if not os.path.isfile(manifest):
            raise RuntimeError(f"tprobe: direct mode needs the pipeline manifest {manifest}; set TPROBE_PIPELINES")
        self.command = [launcher, "run", manifest]
        self.process = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True, preexec_fn=_die_with_parent)
        self.messages = []
        self._verbose = os.environ.get("TPROBE_VERBOSE", "") not in ("", "0")
        self._stderr = threading.Thread(target=self._relay, daemon=True)
        self._stderr.start()
        self.environment = {}
        for line in self.process.stdout:
            name, sep, value = line.strip().partition("=")
            if sep:
                words = shlex.split(value)
                self.environment[name] = words[0] if words else ""
            if "TPROBE_ENDPOINT" in self.environment:
                break
        if "TPROBE_ENDPOINT" not in self.environment:
            status = self.process.wait()
            self._stderr.join()
            self._show_all()
            raise RuntimeError(
                f"tprobe: the pipeline did not start: `{' '.join(self.command)}` exited with status {status} "
                "(its messages are above)")
        self.endpoint = self.environment["TPROBE_ENDPOINT"]
        # Nothing more is expected on stdout; keep it drained so the launcher never blocks on it.
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for _ in self.process.stdout:
            pass

    def _relay(self):
        for line in self.process.stderr:
            self.messages.append(line)
            if self._verbose or _shown_at_once(line):
                sys.stderr.write(line)

    def _show_all(self):
        if not self._verbose:
            for line in self.messages:
                if not _shown_at_once(line):
                    sys.stderr.write(line)

    def close(self, timeout=300):
        """Ends the run after the capture sent its end-of-stream; returns the launcher's status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                print(f"tprobe: the pipeline did not finish within {timeout} s; stopping it", file=sys.stderr)
                self.process.send_signal(signal.SIGINT)  # a second SIGINT stops every stage
                try:
                    self.process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    print("tprobe: the pipeline still runs 60 s later; killing it", file=sys.stderr)
                    self.process.kill()
                    self.process.wait()
        # The last lines (a stage's fatal line, the launcher's verdict) may still be in the pipe when
        # the launcher has exited: on a loaded host the relay thread can be seconds behind, and the
        # interpreter's exit would drop them with the daemon thread. Every writer of the pipe has
        # exited (the launcher waits for its stages), so its end comes as soon as it is read.
        self._stderr.join(timeout=120)
        if self.process.returncode != 0:
            self._show_all()
        return self.process.returncode
