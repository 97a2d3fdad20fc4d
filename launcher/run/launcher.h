// launcher.h: `tprobe run`, which starts a manifest's stages, runs the training command against
// them and ends them all cleanly.
//
//   tprobe run MANIFEST [--config CONFIG.json] [--keep-run-dir] [-- COMMAND ARGS…]
//   tprobe run pipelines/statistics.json -- python train.py --epochs 1
//
// Order of events:
//  1. The manifest is parsed and every stage is described (--describe) and type-checked
//     (manifest.h): a bad manifest fails with exit 100 before any process starts.
//  2. A private run directory (mkdtemp under $TMPDIR or /tmp, mode 0700) holds the endpoints:
//     ipc://DIR/<stage>.in (inputs) and ipc://DIR/<stage>.tap (taps).
//  3. Stages start consumers first (reverse topological order), each in its own process group, so a
//     terminal's Ctrl-C reaches the command and the launcher but never a stage; each is waited for
//     on its ready fd (3) together with SIGCHLD, never by sleeping (style lesson 6). Stages get
//     SIGTERM if the launcher dies (PR_SET_PDEATHSIG), so none waits forever for a `final`.
//  4. Once every stage is ready, one line on stderr names the run directory and the taps:
//       tprobe: ready; run dir /tmp/tprobe-run.Ab12Cd; taps: stats=ipc://…/stats.tap writer=…
//     The command runs in the launcher's process group with this environment:
//       TPROBE_ENDPOINT   comma-joined input endpoints of the stages that read "capture"
//       TPROBE_RUN_DIR    the run directory
//       TPROBE_LAUNCHER_PID  this launcher: a capture blocked on the pipeline gives up when it is gone
//       TPROBE_CONFIG     absolute path of --config (only when given)
//       TPROBE_TASK, TPROBE_LEVEL, TPROBE_DUMP_PATH   from the manifest's "capture" (when given)
//       TPROBE_PIPELINE, TPROBE_PIPELINE_TASKS   the manifest and its "tasks" (comma-joined, "" =
//                         any): the capture refuses a config whose task is not among them
//     Without a command the launcher prints these as NAME=VALUE lines on stdout and waits: a
//     producer started elsewhere can connect; Ctrl-C ends the run.
//  5. When the command exits, each capture-reading stage gets a `final` (no new producer will
//     come); the stages drain, write their files and exit; the launcher waits for all of them.
//
// Failures and signals:
//  - A stage that exits non-zero, is killed or is stopped (SIGSTOP), at any time, is fatal:
//      tprobe: fatal: stage "stats" (tprobe-stats) exited with status 100
//    and so is one that a signal from elsewhere ended before its end-of-stream (it exits 128+N
//    once its files are written, stage_main.h), or that reads "capture" and exits 0 before its
//    `final`: a stream cut short is never counted among the finished stages:
//      tprobe: fatal: stage "writer" (tprobe-writer) ended on signal 15 (Terminated) before its end-of-stream
//    the other stages' process groups get SIGTERM (stages finish their files on SIGTERM; a stopped
//    stage gets SIGCONT too), and RUN_DIR/failed holds that line, so that a capture still waiting
//    on the pipeline gives up at once (endpoint.h). The command is left alone: the training comes first, and its
//    capture detaches from the pipeline that went away (tprobe_capture.h) and lets it go on. The
//    launcher waits for the command and exits 111.
//  - Start-up has a deadline: a stage that has not reported ready within startup_timeout_s is
//    fatal ("did not report ready within 60 s"); a stage's connection to its consumers has the
//    hello deadline of endpoint.h, so a consumer that is ready but never answers fails its
//    producer's start-up with a message naming the consumer's endpoint.
//  - --config (else an inherited TPROBE_CONFIG) is read and validated as the capture will (with
//    the manifest's "capture" overrides), its task checked against the manifest's "tasks" and the
//    tasks tprobe builds (core/capture_config.h), and its dump_path checked, before anything starts: a
//    bad one is exit 100.
//  - First Ctrl-C: not fatal to the launcher. The command gets the terminal's SIGINT itself and
//    usually exits, which ends the run as in 5; a SIGINT sent to the launcher alone by a process
//    (kill -INT PID; signalfd tells it from the terminal's) is forwarded to the command. Without a
//    command the first SIGINT ends the run as in 5 at once.
//    Second Ctrl-C (or SIGTERM/SIGHUP to the launcher): SIGTERM to every stage and the command.
//    Third Ctrl-C: SIGKILL to everything still running (the escape hatch for a hung stage).
//  - Whatever is still running 30 s after its SIGTERM gets SIGKILL, so that a stuck process cannot
//    keep an unattended run alive. This is the launcher's only timer, and only on this path.
//
// Exit status: 111 when a stage failed; else the command's status (128+N when killed by signal N);
// without a command 0, or 128+N when stopped by signal N (second Ctrl-C: 130); 100 for a bad
// manifest or command line.
//
// Output: when stderr is a terminal, a progress line redrawn at most twice a second from the tap of
// the first capture-reading stage that has one:
//   tprobe: 12345 records, 456.7 MB, 8123 rec/s
// and always one summary line on stderr at the end. The run directory is removed at the end unless
// --keep-run-dir.
//
#pragma once

#include <string>
#include <vector>

#include "common/stage_main.h"

namespace tprobe {

struct launcher_options {
  std::string manifest_path;         // MANIFEST
  std::string config_path;           // --config; "" = none
  bool keep_run_dir = false;         // --keep-run-dir
  std::vector<std::string> command;  // after "--"; empty = wait for a producer started elsewhere
  std::string bin_dir;               // where tprobe-<verb> live; "" = the directory of this binary
  int startup_timeout_s = 60;        // --startup-timeout: each stage must report ready within it
};

// The launcher's command line as a table, the same shape as a stage's (stage_main.h): main builds
// its parser from it, `tprobe run --describe` prints it, and the checks are stage_option_check's.
// MANIFEST is its one positional, required entry; the command after "--" is not an option.
const stage_description &launcher_description();
// The checked values of that table → launcher_options (command and bin_dir untouched).
void launcher_options_read(const stage_option_values &values, launcher_options &options);

// Runs the whole pipeline as described above and returns the exit status. Throws usage_error for
// a bad manifest, config path or command (before anything starts), system_error when a system call
// fails; every process it started has been stopped and reaped before it throws.
int launcher_run(const launcher_options &options);

// The directory of the running binary (/proc/self/exe), where the tprobe-* binaries live.
std::string launcher_self_dir();

}  // namespace tprobe
