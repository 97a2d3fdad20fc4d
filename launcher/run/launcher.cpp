#include "run/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include <zmq.hpp>

#include "capture_config.h"
#include "endpoint.h"
#include "errors.h"
#include "quiet_thread.h"
#include "run/manifest.h"

extern char **environ;

namespace tprobe {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

// sun_path holds 108 bytes with the terminating NUL: longer ipc paths cannot be bound.
constexpr size_t IPC_PATH_MAX = 107;
constexpr int READY_FD = 3;
// How long stages and the command get to finish their files after SIGTERM before SIGKILL. The
// launcher's only timer: it runs on the failure path alone, so that a process stuck past SIGTERM
// (a handshake with a dead consumer, say) cannot keep an unattended run alive forever.
constexpr auto STOP_GRACE = std::chrono::seconds(30);

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string status_text(int status) {
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

bool status_ok(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
// 128 + SIGINT/SIGTERM: a stage that such a signal stopped before its end-of-stream, its files
// written (stage_main.h). The signal's number, or 0 for any other status.
int status_cut_signal(int status) {
  if (!WIFEXITED(status)) return 0;
  const int code = WEXITSTATUS(status);
  return code == 128 + SIGINT || code == 128 + SIGTERM ? code - 128 : 0;
}
// Exit 1 is a stage's negative answer (a mismatch or an overflow found), not a failure.
bool status_answer(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == EXIT_NEGATIVE; }

// Shell convention: 128+N for a process killed by signal N.
int status_exit_code(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

std::string seconds_text(clock_type::duration d) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f s", std::chrono::duration<double>(d).count());
  return buffer;
}

// A value printed as NAME=VALUE stays copy-pastable into a shell.
std::string shell_quoted(const std::string &value) {
  bool plain = !value.empty() && value.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                          "0123456789_./:,=+-@%") == std::string::npos;
  if (plain) return value;
  std::string out = "'";
  for (char c : value) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A launcher started with fd 0, 1 or 2 closed would hand those numbers to its own pipes, which the
// child-side dup2() calls below would then clobber.
void ensure_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int opened = ::open("/dev/null", O_RDWR);
      if (opened >= 0 && opened != fd) ::close(opened);
    }
  }
}

std::string resolve_config(const std::string &path) {
  if (path.empty()) return "";
  char *resolved = ::realpath(path.c_str(), nullptr);
  if (!resolved) throw usage_error("unable to find config " + path + ": " + std::strerror(errno));
  std::string out = resolved;
  std::free(resolved);
  std::error_code ignored;
  if (!fs::is_regular_file(out, ignored)) throw usage_error("config " + path + " is not a regular file");
  return out;
}

// The config as the command's capture will read it (the manifest's "capture" section overrides
// it through the environment, over what the command inherits), so that a bad field or dump_path,
// or a task the pipeline cannot do, fails before anything starts rather than in the training
// process.
void check_config(const std::string &path, const manifest &m) {
  capture_config cfg = config_load(path);
  config_overrides overrides = config_overrides_from_env();
  if (m.capture.task) overrides.task = m.capture.task;
  if (m.capture.level) overrides.level = m.capture.level;
  if (m.capture.dump_path) overrides.dump_path = m.capture.dump_path;
  config_apply_overrides(cfg, overrides);
  config_check_task_runs(cfg, {m.path, m.tasks});
  config_check_dump_path_usable(cfg);
}

// PYTHONPATH with this build's python/ (the tprobe package) appended: the user's own PYTHONPATH
// or an installed tprobe stays first. nullopt when the checkout has no package there (a copied
// binary): nothing is guessed.
std::optional<std::string> python_path_with_package() {
#ifdef TPROBE_PYTHON_DIR
  if (std::error_code e; fs::is_regular_file(TPROBE_PYTHON_DIR "/tprobe/__init__.py", e)) {
    const char *current = std::getenv("PYTHONPATH");
    return current && *current ? std::string(current) + ":" TPROBE_PYTHON_DIR : std::string(TPROBE_PYTHON_DIR);
  }
#endif
  return std::nullopt;
}

// The environment of the stages and of their --describe: this process's, with
// python_path_with_package(), so that a Python stage (`"exec": "mine.py"`) imports tprobe.stage
// as the command imports tprobe. nullopt: inherit this process's unchanged.
std::optional<std::vector<std::string>> stage_environment() {
  const auto python_path = python_path_with_package();
  if (!python_path) return std::nullopt;
  std::vector<std::string> env;
  for (char **e = environ; *e; ++e)
    if (std::string_view(*e).rfind("PYTHONPATH=", 0) != 0) env.emplace_back(*e);
  env.push_back("PYTHONPATH=" + *python_path);
  return env;
}

bool executable_file(const std::string &path) {
  std::error_code ignored;
  return ::access(path.c_str(), X_OK) == 0 && !fs::is_directory(path, ignored);
}

// execvp()'s lookup, done before anything starts so that a typo is a usage error, not a stage
// waiting for a producer that never comes.
std::string resolve_command(const std::string &name) {
  if (name.find('/') != std::string::npos) {
    if (!executable_file(name))
      throw usage_error("unable to execute command " + name + ": " + std::strerror(errno ? errno : EACCES));
    return name;
  }
  const char *path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  for (;;) {
    size_t end = dirs.find(':', begin);
    std::string dir = dirs.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (executable_file(candidate)) return candidate;
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  throw usage_error("command not found: " + name);
}

// The private run directory: created 0700 by mkdtemp, removed at the end unless kept.
class run_directory {
 public:
  run_directory(const manifest &m, bool keep) : keep_(keep) {
    const char *tmp = std::getenv("TMPDIR");
    std::string base = fs::absolute(tmp && *tmp ? tmp : "/tmp").lexically_normal().string();
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    std::string pattern = base + "/tprobe-run.XXXXXX";
    for (const auto &s : m.stages) {
      std::string longest = pattern + "/" + s.name + ".tap";
      if (longest.size() > IPC_PATH_MAX)
        throw usage_error("ipc endpoint " + longest + " is longer than " + std::to_string(IPC_PATH_MAX) +
                          " bytes (use a shorter stage name or set TMPDIR to a shorter directory)");
    }
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (!::mkdtemp(buffer.data())) throw system_error_from_errno("create a run directory in", base, errno);
    path_ = buffer.data();
  }
  ~run_directory() {
    if (keep_) return;
    std::error_code error;
    fs::remove_all(path_, error);
    if (error) std::fprintf(stderr, "tprobe: unable to remove %s: %s\n", path_.c_str(), error.message().c_str());
  }
  run_directory(const run_directory &) = delete;
  run_directory &operator=(const run_directory &) = delete;
  const std::string &path() const { return path_; }

 private:
  std::string path_;
  bool keep_;
};

// Blocks the signals the launcher handles and reads them from a signalfd, so that the main loop
// can poll() child exits (SIGCHLD), Ctrl-C and ready pipes together. Signals that the launcher
// inherited as ignored (nohup, background jobs) stay ignored.
class signal_watch {
 public:
  signal_watch() {
    // An inherited SIGCHLD = SIG_IGN would make the kernel reap children before waitpid() sees them.
    ::signal(SIGCHLD, SIG_DFL);
    sigemptyset(&watched_);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction current {};
      if (::sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
      sigaddset(&watched_, sig);
    }
    if (::sigprocmask(SIG_BLOCK, &watched_, &saved_mask_) != 0)
      throw system_error_from_errno("block", "signals", errno);
    fd_ = ::signalfd(-1, &watched_, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd_ < 0) {
      int e = errno;
      ::sigprocmask(SIG_SETMASK, &saved_mask_, nullptr);
      throw system_error_from_errno("create", "a signalfd", e);
    }
  }
  ~signal_watch() {
    // Consume what is pending, so that unblocking does not deliver a late Ctrl-C with its default
    // action (killing the launcher before it prints its summary).
    while (next()) {
    }
    ::close(fd_);
    ::sigprocmask(SIG_SETMASK, &saved_mask_, nullptr);
  }
  signal_watch(const signal_watch &) = delete;
  signal_watch &operator=(const signal_watch &) = delete;

  int fd() const { return fd_; }
  // The mask children must get back before exec.
  const sigset_t &saved_mask() const { return saved_mask_; }
  struct event {
    int signo;
    // Sent by a process with kill() (kill -INT PID), not by the kernel for a terminal's Ctrl-C,
    // which the terminal sends to the whole foreground process group, the command included.
    bool from_process;
  };
  // The next pending signal, or nullopt when none is pending.
  std::optional<event> next() {
    signalfd_siginfo info;
    ssize_t n = ::read(fd_, &info, sizeof info);
    if (n != static_cast<ssize_t>(sizeof info)) return std::nullopt;
    const int code = info.ssi_code;
    return event{static_cast<int>(info.ssi_signo), code == SI_USER || code == SI_QUEUE || code == SI_TKILL};
  }

 private:
  sigset_t watched_;
  sigset_t saved_mask_;
  int fd_ = -1;
};

// What a child does between fork() and exec(). Everything is prepared before fork(): the child
// only makes async-signal-safe calls, since the parent may have ZeroMQ threads.
struct exec_spec {
  std::string path;
  std::vector<std::string> argv;
  std::optional<std::vector<std::string>> env;  // nullopt = inherit
  bool own_process_group = false;
  bool die_with_launcher = false;
  int stdin_fd = -1;  // dup2'ed to 0 when >= 0
  int ready_fd = -1;  // becomes fd READY_FD when >= 0
  // Close every other fd above 2: a stage gets only what the protocol gives it, not whatever the
  // launcher inherited from its own parent (the user's command keeps those: it may expect them).
  bool close_inherited_fds = false;
};

pid_t spawn(const exec_spec &spec, const sigset_t &child_mask) {
  std::vector<char *> argv;
  for (const auto &a : spec.argv) argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char *> envp;
  if (spec.env) {
    for (const auto &e : *spec.env) envp.push_back(const_cast<char *>(e.c_str()));
    envp.push_back(nullptr);
  }
  std::string exec_failed = "tprobe: fatal: unable to execute " + spec.path + "\n";
  pid_t launcher = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0) throw system_error_from_errno("fork", "for " + spec.path, errno);
  if (pid == 0) {
    if (spec.own_process_group) ::setpgid(0, 0);
    if (spec.die_with_launcher) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != launcher) ::_exit(111);  // the launcher died before prctl()
    }
    ::sigprocmask(SIG_SETMASK, &child_mask, nullptr);
    if (spec.stdin_fd >= 0) ::dup2(spec.stdin_fd, 0);
    if (spec.ready_fd == READY_FD) {
      ::fcntl(READY_FD, F_SETFD, 0);  // dup2 onto itself would keep FD_CLOEXEC
    } else if (spec.ready_fd >= 0) {
      ::dup2(spec.ready_fd, READY_FD);
    }
    if (spec.close_inherited_fds) ::close_range(spec.ready_fd >= 0 ? READY_FD + 1 : 3, ~0U, 0);
    if (spec.env) {
      ::execve(spec.path.c_str(), argv.data(), envp.data());
    } else {
      ::execv(spec.path.c_str(), argv.data());
    }
    ssize_t ignored = ::write(2, exec_failed.data(), exec_failed.size());
    (void)ignored;
    ::_exit(127);
  }
  // Both sides set the group, so that it is in place whichever runs first.
  if (spec.own_process_group) ::setpgid(pid, pid);
  return pid;
}

// stderr, shared by the main thread's messages and the progress line.
class console {
 public:
  explicit console(bool terminal) : terminal_(terminal) {}
  void line(const std::string &text) {
    std::lock_guard lock(mutex_);
    std::string out = (progress_shown_ ? "\r\033[K" : "") + text + "\n";
    progress_shown_ = false;
    write_all(out);
  }
  void progress(const std::string &text) {
    std::lock_guard lock(mutex_);
    write_all("\r\033[K" + text);
    progress_shown_ = true;
  }
  bool terminal() const { return terminal_; }

 private:
  static void write_all(const std::string &s) {
    size_t done = 0;
    while (done < s.size()) {
      ssize_t n = ::write(2, s.data() + done, s.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }
  std::mutex mutex_;
  bool terminal_;
  bool progress_shown_ = false;
};

std::string volume_text(uint64_t records, uint64_t bytes) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%llu records, %.1f MB", static_cast<unsigned long long>(records),
                static_cast<double>(bytes) / 1e6);
  return buffer;
}

// Counts what one stage's tap publishes and redraws the progress line at most twice a second.
// The tap is lossy, so the counts are a lower bound; this is for a person watching, not a record.
class progress_meter {
 public:
  progress_meter(zmq::context_t &ctx, std::string tap, console &out)
      : thread_(quiet_thread([this, &ctx, tap = std::move(tap), &out] { loop(ctx, tap, out); })) {}
  ~progress_meter() {
    stop_ = true;
    thread_.join();
  }
  progress_meter(const progress_meter &) = delete;
  progress_meter &operator=(const progress_meter &) = delete;
  uint64_t records() const { return records_; }
  uint64_t bytes() const { return bytes_; }

 private:
  void loop(zmq::context_t &ctx, const std::string &tap, console &out) {
    constexpr auto redraw_every = std::chrono::milliseconds(500);
    try {
      tap_subscriber subscriber(ctx, tap);
      auto last_draw = clock_type::now();
      uint64_t last_records = 0;
      while (!stop_) {
        // The timeout only bounds how late the thread sees stop_; nothing waits on it.
        if (auto r = subscriber.receive(100)) {
          auto kind = r->header.kind;
          if (!record_kind_is_control(kind)) {
            ++records_;
            bytes_ += r->header.length;
          }
        }
        auto now = clock_type::now();
        if (now - last_draw < redraw_every) continue;
        double rate = static_cast<double>(records_ - last_records) /
                      std::chrono::duration<double>(now - last_draw).count();
        char buffer[48];
        std::snprintf(buffer, sizeof buffer, ", %.0f rec/s", rate);
        out.progress("tprobe: " + volume_text(records_, bytes_) + buffer);
        last_draw = now;
        last_records = records_;
      }
    } catch (const std::exception &e) {
      out.line(std::string("tprobe: progress display stopped: ") + e.what());
    }
  }

  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> records_{0};
  std::atomic<uint64_t> bytes_{0};
  std::thread thread_;
};

struct child_process {
  std::string name;     // stage name; "" for the command
  std::string program;  // for messages: tprobe-stats, the exec path, or the command
  pid_t pid = -1;
  bool is_stage = true;
  bool running = false;
  bool signalled = false;  // got SIGTERM or SIGKILL from the launcher
  int status = 0;  // waitpid() status once !running
};

class launcher {
 public:
  launcher(const launcher_options &o, manifest m, std::string bin_dir, std::string config,
           std::string command_path, const run_directory &run_dir, signal_watch &signals)
      : options_(o),
        m_(std::move(m)),
        bin_dir_(std::move(bin_dir)),
        config_(std::move(config)),
        command_path_(std::move(command_path)),
        run_dir_(run_dir),
        signals_(signals),
        console_(::isatty(2) == 1) {}

  ~launcher() {
    // Children still run here only when an exception is on its way out: stop and reap them, with
    // the usual grace before SIGKILL; if even that fails, kill without grace.
    progress_.reset();
    try {
      stop_all(SIGTERM);
      wait_for_all();
    } catch (...) {
      stop_all(SIGKILL);
    }
    for (auto &c : children_)
      if (c.running) {
        while (::waitpid(c.pid, &c.status, 0) < 0 && errno == EINTR) {
        }
        c.running = false;
      }
  }

  int run() {
    start_time_ = clock_type::now();
    if (!start_stages()) {
      wait_for_all();
      return finish();
    }
    start_progress();
    if (!options_.command.empty()) {
      start_command();
    } else {
      print_endpoints();
    }
    wait_for_all();
    return finish();
  }

 private:
  std::vector<std::string> capture_endpoints() const {
    std::vector<std::string> out;
    for (size_t i : m_.capture_readers()) out.push_back(manifest_input_endpoint(run_dir_.path(), m_.stages[i].name));
    return out;
  }

  std::vector<std::pair<std::string, std::string>> command_environment() const {
    std::string endpoints;
    for (const auto &e : capture_endpoints()) endpoints += (endpoints.empty() ? "" : ",") + e;
    std::vector<std::pair<std::string, std::string>> env{{"TPROBE_ENDPOINT", endpoints},
                                                         {"TPROBE_RUN_DIR", run_dir_.path()},
                                                         {"TPROBE_LAUNCHER_PID", std::to_string(::getpid())}};
    if (!config_.empty()) env.emplace_back("TPROBE_CONFIG", config_);
    // The checkout's python/tprobe, unless the user's own PYTHONPATH or an installed tprobe is meant
    // to win: it goes last.
    if (auto python_path = python_path_with_package()) env.emplace_back("PYTHONPATH", std::move(*python_path));
    // The capture checks its task against them (core/capture_config.h), for a config the launcher does
    // not see (PrecisionDebugger(config_path=…)).
    env.emplace_back("TPROBE_PIPELINE", m_.path);
    std::string tasks;
    for (const auto &t : m_.tasks) tasks += (tasks.empty() ? "" : ",") + t;
    env.emplace_back("TPROBE_PIPELINE_TASKS", tasks);
    if (m_.capture.task) env.emplace_back("TPROBE_TASK", *m_.capture.task);
    if (m_.capture.level) env.emplace_back("TPROBE_LEVEL", *m_.capture.level);
    if (m_.capture.dump_path) env.emplace_back("TPROBE_DUMP_PATH", *m_.capture.dump_path);
    return env;
  }

  // Consumers first, so that every output a stage connects to is already bound. Returns false
  // when startup was abandoned (a stage failed, or a signal asked to stop).
  bool start_stages() {
    int dev_null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (dev_null < 0) throw system_error_from_errno("open", "/dev/null", errno);
    struct closer {
      int fd;
      ~closer() { ::close(fd); }
    } close_dev_null{dev_null};

    const auto env = stage_environment();
    for (auto it = m_.topological_order.rbegin(); it != m_.topological_order.rend(); ++it) {
      const auto &s = m_.stages[*it];
      int ready[2];
      if (::pipe2(ready, O_CLOEXEC) != 0) throw system_error_from_errno("create", "a pipe", errno);
      exec_spec spec;
      spec.argv = manifest_stage_argv(m_, *it, run_dir_.path(), bin_dir_);
      spec.path = spec.argv.front();
      spec.env = env;
      spec.own_process_group = true;  // a terminal's Ctrl-C must not reach stages
      spec.die_with_launcher = true;
      spec.stdin_fd = dev_null;       // a background process group reading the tty would stop
      spec.ready_fd = ready[1];
      spec.close_inherited_fds = true;
      pid_t pid;
      try {
        pid = spawn(spec, signals_.saved_mask());
      } catch (...) {
        ::close(ready[0]);
        ::close(ready[1]);
        throw;
      }
      ::close(ready[1]);
      children_.push_back({s.name, s.program(), pid, true, true, 0});
      bool ok = wait_ready(children_.size() - 1, ready[0]);
      ::close(ready[0]);
      if (!ok) return false;
    }
    starting_ = false;
    std::string taps;
    for (const auto &st : m_.stages) taps += " " + st.name + "=" + manifest_tap_endpoint(run_dir_.path(), st.name);
    console_.line("tprobe: ready; run dir " + run_dir_.path() + "; taps:" + taps);
    return true;
  }

  // Waits until stage `index` writes its readiness line, watching signals meanwhile.
  bool wait_ready(size_t index, int ready_fd) {
    waiting_for_ = index;
    bool closed_without_line = false;
    const auto deadline = clock_type::now() + std::chrono::seconds(options_.startup_timeout_s);
    for (;;) {
      pollfd fds[2] = {{closed_without_line ? -1 : ready_fd, POLLIN, 0}, {signals_.fd(), POLLIN, 0}};
      int timeout = poll_timeout_ms();
      if (!failure_) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock_type::now()).count();
        const int startup_left = static_cast<int>(std::max<decltype(left)>(left, 0));
        timeout = timeout < 0 ? startup_left : std::min(timeout, startup_left);
      }
      if (::poll(fds, 2, timeout) < 0) {
        if (errno == EINTR) continue;
        throw system_error_from_errno("poll", "the ready pipe", errno);
      }
      enforce_stop_grace();
      if (!failure_ && !fds[0].revents && clock_type::now() >= deadline) {
        std::string consumers;
        for (size_t c : m_.consumers_of(m_index_of(children_[index].name)))
          consumers += (consumers.empty() ? "" : ", ") + in_quotes(m_.stages[c].name);
        fail(children_[index], "did not report ready within " + std::to_string(options_.startup_timeout_s) + " s" +
                                   (consumers.empty() ? "" : " (it first connects to " + consumers + ")"));
        waiting_for_.reset();
        return false;
      }
      if (fds[0].revents) {
        char c;
        ssize_t n = ::read(ready_fd, &c, 1);
        if (n == 1) break;
        if (n == 0) {
          // EOF without the line: the stage died, or closed fd 3 and runs on; either way it broke
          // the readiness contract. Stop it and report how it ended.
          closed_without_line = true;
          ::kill(-children_[index].pid, SIGTERM);
        }
      }
      if (fds[1].revents) handle_signals();
      const auto &c = children_[index];
      if (!c.running) {
        bool our_sigterm = closed_without_line && WIFSIGNALED(c.status) && WTERMSIG(c.status) == SIGTERM;
        fail(c, our_sigterm ? "closed its ready fd without signalling readiness"
                            : status_text(c.status) + " before it was ready");
      }
      if (failure_ || stop_signal_) {
        waiting_for_.reset();
        return false;
      }
    }
    waiting_for_.reset();
    return true;
  }

  size_t m_index_of(const std::string &stage_name) const {
    for (size_t i = 0; i < m_.stages.size(); ++i)
      if (m_.stages[i].name == stage_name) return i;
    throw std::logic_error("no stage " + stage_name);
  }

  void start_progress() {
    if (!console_.terminal()) return;
    for (size_t i : m_.capture_readers()) {
      if (!m_.stages[i].description.has_output) continue;
      progress_.emplace(context_, manifest_tap_endpoint(run_dir_.path(), m_.stages[i].name), console_);
      return;
    }
  }

  // The command, once per manifest run (concurrently), or once when the manifest has none.
  void start_command() {
    std::vector<manifest_run> runs = m_.runs;
    if (runs.empty()) runs.push_back({});
    for (const auto &run : runs) {
      exec_spec spec;
      spec.path = command_path_;
      spec.argv = options_.command;
      spec.argv.insert(spec.argv.end(), run.args.begin(), run.args.end());
      auto overrides = command_environment();
      if (!run.name.empty()) overrides.emplace_back("TPROBE_RUN_LABEL", run.name);
      overrides.insert(overrides.end(), run.env.begin(), run.env.end());
      std::vector<std::string> env;
      for (char **e = environ; *e; ++e) {
        std::string_view entry = *e;
        bool replaced = false;
        for (const auto &[name, value] : overrides) {
          (void)value;
          if (entry.size() > name.size() && entry.substr(0, name.size()) == name && entry[name.size()] == '=')
            replaced = true;
        }
        if (!replaced) env.emplace_back(entry);
      }
      for (const auto &[name, value] : overrides) env.push_back(name + "=" + value);
      spec.env = std::move(env);
      // Same process group as the launcher: the terminal's Ctrl-C reaches the command directly.
      pid_t pid = spawn(spec, signals_.saved_mask());
      children_.push_back({run.name, options_.command.front(), pid, false, true, 0});
      command_indices_.push_back(children_.size() - 1);
    }
  }

  bool command_running() const {
    for (size_t i : command_indices_)
      if (children_[i].running) return true;
    return false;
  }

  // The first run that failed decides the exit status; 0 when all succeeded.
  int command_exit_code() const {
    for (size_t i : command_indices_)
      if (int code = status_exit_code(children_[i].status); code != 0) return code;
    return EXIT_OK;
  }

  std::string command_result() const {
    if (command_indices_.size() == 1) return "command " + status_text(children_[command_indices_[0]].status);
    std::string text = "commands";
    for (size_t i : command_indices_)
      text += (i == command_indices_[0] ? " " : ", ") + children_[i].name + " " + status_text(children_[i].status);
    return text;
  }

  void print_endpoints() {
    std::string text;
    for (const auto &[name, value] : command_environment()) text += name + "=" + shell_quoted(value) + "\n";
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    console_.line("tprobe: stages ready; waiting for producers with the environment above (Ctrl-C ends the run)");
  }

  void wait_for_all() {
    auto any_running = [&] {
      for (const auto &c : children_)
        if (c.running) return true;
      return false;
    };
    while (any_running()) {
      pollfd fd{signals_.fd(), POLLIN, 0};
      if (::poll(&fd, 1, poll_timeout_ms()) < 0) {
        if (errno == EINTR) continue;
        throw system_error_from_errno("poll", "the signalfd", errno);
      }
      enforce_stop_grace();
      handle_signals();
    }
  }

  void handle_signals() {
    while (auto event = signals_.next()) {
      const int sig = event->signo;
      if (sig == SIGCHLD) {
        reap();
      } else if (sig == SIGINT) {
        interrupted(event->from_process);
      } else {
        // SIGTERM or SIGHUP to the launcher: stop everything, the stages still finish their files.
        stop_signal_ = sig;
        console_.line(std::string("tprobe: got ") + (sig == SIGTERM ? "SIGTERM" : "SIGHUP") +
                      ": stopping every stage");
        stop_all(SIGTERM);
      }
    }
  }

  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED)) > 0) {
      for (size_t i = 0; i < children_.size(); ++i) {
        auto &c = children_[i];
        if (c.pid != pid || !c.running) continue;
        if (WIFSTOPPED(status)) {
          stopped(i, WSTOPSIG(status));
          continue;
        }
        c.running = false;
        c.status = status;
        exited(i);
      }
    }
  }

  // A stopped stage reads nothing: every producer upstream, the training's capture included,
  // would wait for it. Fatal, as an exit is; the command's own stops (Ctrl-Z) are its business.
  void stopped(size_t index, int sig) {
    const auto &c = children_[index];
    if (!c.is_stage) return;
    fail(c, "was stopped by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")");
  }

  void exited(size_t index) {
    const auto &c = children_[index];
    if (!c.is_stage) {
      // The last run is done: no new producer will come, the stages can drain.
      if (!failure_ && !stopping_ && !command_running()) send_finals();
      return;
    }
    if (waiting_for_ == index) return;  // wait_ready() reports it with more context
    if (!starting_ && status_answer(c.status)) {
      negative_answer_ = true;
      console_.line("tprobe: stage " + in_quotes(c.name) + " (" + c.program + ") found what it looks for (exit 1)");
      return;
    }
    // A stage that reads the capture ends only after the launcher's `final`: an exit before it,
    // even with status 0 (a stage that ends on SIGTERM the way the stage protocol used to ask), is
    // a stream cut short.
    const bool before_final = c.status == 0 && !starting_ && !finals_sent_ && reads_capture(c.name);
    if (!failure_ && !stopping_ && (starting_ || !status_ok(c.status) || before_final)) {
      // During startup any exit is fatal: its producers would wait for it forever.
      if (starting_) {
        fail(c, status_text(c.status) + " during startup");
      } else if (const int sig = status_cut_signal(c.status)) {
        fail(c, "ended on signal " + std::to_string(sig) + " (" + strsignal(sig) + ") before its end-of-stream");
      } else if (before_final) {
        fail(c, "exited with status 0 before its end-of-stream (before the launcher's final)");
      } else {
        fail(c, status_text(c.status));
      }
    } else if (!status_ok(c.status) &&
               !(stopping_ && (WIFSIGNALED(c.status) || (c.signalled && status_cut_signal(c.status))))) {
      // (A stage the launcher stopped exits 128+N or dies of the signal: expected, not said.)
      console_.line("tprobe: stage " + in_quotes(c.name) + " (" + c.program + ") " + status_text(c.status));
    }
  }

  // A stage failed: the pipeline ends, the command goes on (its capture detaches).
  void fail(const child_process &c, const std::string &what) {
    if (failure_) return;
    failure_ = "stage " + in_quotes(c.name) + " (" + c.program + ") " + what;
    // A capture still waiting for the pipeline (its hello, a blocked send) reads this and gives up
    // at once, since the launcher itself stays alive while the command runs.
    if (FILE *marker = std::fopen((run_dir_.path() + "/failed").c_str(), "we")) {
      std::fputs((*failure_ + "\n").c_str(), marker);
      std::fclose(marker);
    }
    console_.line("tprobe: fatal: " + *failure_ +
                  (command_running() ? "; stopping the stages, the command goes on without them" : ""));
    stop_stages(SIGTERM);
  }

  bool reads_capture(const std::string &stage_name) const {
    for (size_t i : m_.capture_readers())
      if (m_.stages[i].name == stage_name) return true;
    return false;
  }

  // SIGINT: from the terminal (Ctrl-C, which the command got too) or from a process (kill -INT to
  // the launcher alone, which the launcher forwards to the command).
  void interrupted(bool from_process) {
    ++interrupts_;
    if (stopping_) {
      console_.line("tprobe: interrupted again: killing everything (SIGKILL)");
      stop_all(SIGKILL);
    } else if (interrupts_ >= 2 || starting_) {
      stop_signal_ = SIGINT;
      console_.line("tprobe: interrupted: stopping every stage (Ctrl-C again kills them)");
      stop_all(SIGTERM);
    } else if (command_running()) {
      // A terminal's Ctrl-C reached the command itself; a kill -INT reached the launcher alone.
      if (from_process)
        for (size_t i : command_indices_)
          if (children_[i].running) ::kill(children_[i].pid, SIGINT);
      console_.line(std::string("tprobe: interrupted: ") + (from_process ? "SIGINT forwarded to the command; " : "") +
                    "waiting for the command to exit (Ctrl-C again stops everything)");
    } else if (command_indices_.empty() && !finals_sent_) {
      console_.line("tprobe: interrupted: ending the run; stages are finishing (Ctrl-C again stops them)");
      send_finals();
    } else {
      console_.line("tprobe: interrupted: waiting for the stages to finish (Ctrl-C again stops them)");
    }
  }

  // SIGTERM (or SIGKILL) to every running stage's process group and to the command.
  void stop_all(int sig) {
    stop_stages(sig);
    for (auto &c : children_) {
      if (!c.running || c.is_stage) continue;
      c.signalled = true;
      ::kill(c.pid, sig);
    }
  }

  // SIGTERM (or SIGKILL) to every running stage's process group; SIGCONT after SIGTERM, so that a
  // stopped stage can act on it.
  void stop_stages(int sig) {
    stopping_ = true;
    if (sig == SIGTERM && !kill_deadline_) kill_deadline_ = clock_type::now() + STOP_GRACE;
    if (sig == SIGKILL) killed_ = true;
    for (auto &c : children_) {
      if (!c.running || !c.is_stage) continue;
      c.signalled = true;
      ::kill(-c.pid, sig);
      if (sig == SIGTERM) ::kill(-c.pid, SIGCONT);
    }
  }

  // -1 (no timeout) unless a SIGTERM is waiting for its SIGKILL.
  int poll_timeout_ms() const {
    if (!kill_deadline_ || killed_) return -1;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(*kill_deadline_ - clock_type::now()).count();
    return static_cast<int>(std::max<decltype(left)>(left, 0));
  }

  // SIGKILL for whatever still runs STOP_GRACE after its SIGTERM; a command that was never
  // signalled (a stage failed, the training goes on) is not touched.
  void enforce_stop_grace() {
    if (!kill_deadline_ || killed_ || clock_type::now() < *kill_deadline_) return;
    killed_ = true;
    for (const auto &c : children_) {
      if (!c.running || !c.signalled) continue;
      console_.line("tprobe: " + (c.is_stage ? "stage " + in_quotes(c.name) + " (" + c.program + ")" : "the command") +
                    " still running " + std::to_string(STOP_GRACE.count()) + " s after SIGTERM: killing it");
      ::kill(c.is_stage ? -c.pid : c.pid, SIGKILL);
    }
  }

  void send_finals() {
    finals_sent_ = true;
    for (size_t i : m_.capture_readers()) {
      const auto &name = m_.stages[i].name;
      auto c = std::find_if(children_.begin(), children_.end(),
                            [&](const child_process &p) { return p.is_stage && p.name == name; });
      if (c == children_.end() || !c->running) continue;
      std::string problem;
      try {
        if (!endpoint_send_final(context_, manifest_input_endpoint(run_dir_.path(), name)))
          problem = "did not acknowledge the end of its input (final)";
      } catch (const std::exception &e) {
        problem = std::string("could not be sent the end of its input (final): ") + e.what();
      }
      if (problem.empty()) continue;
      // A stage that died meanwhile is reported by its exit status; one still running without its
      // final would wait forever, so the run stops.
      int status = 0;
      if (::waitpid(c->pid, &status, WNOHANG) == c->pid) {
        c->running = false;
        c->status = status;
        exited(static_cast<size_t>(c - children_.begin()));
      } else {
        fail(*c, problem);
      }
      if (failure_) return;
    }
  }

  int finish() {
    uint64_t records = progress_ ? progress_->records() : 0;
    uint64_t bytes = progress_ ? progress_->bytes() : 0;
    bool counted = progress_.has_value();
    progress_.reset();

    std::string elapsed = seconds_text(clock_type::now() - start_time_);
    std::string volume = counted ? ", " + volume_text(records, bytes) : "";
    std::string command_result;
    if (!command_indices_.empty()) command_result = this->command_result();

    int code;
    std::string summary;
    if (failure_) {
      code = EXIT_SYSTEM;
      summary = "failed after " + elapsed + ": " + *failure_;
    } else if (stop_signal_ && command_indices_.empty()) {
      code = 128 + stop_signal_;
      summary = "stopped by signal " + std::to_string(stop_signal_) + " after " + elapsed;
    } else {
      code = command_exit_code();
      if (code == EXIT_OK && negative_answer_) code = EXIT_NEGATIVE;
      size_t stages = 0;
      for (const auto &c : children_) stages += c.is_stage;
      summary = (stop_signal_ ? "stopped by signal " + std::to_string(stop_signal_) + " after " : "done in ") +
                elapsed + ": " + (command_result.empty() ? "" : command_result + ", ") + std::to_string(stages) +
                " stages finished";
    }
    if (options_.keep_run_dir) summary += "; run dir kept: " + run_dir_.path();
    console_.line("tprobe: " + summary + volume);
    return code;
  }

  const launcher_options &options_;
  manifest m_;
  std::string bin_dir_;
  std::string config_;
  std::string command_path_;
  const run_directory &run_dir_;
  signal_watch &signals_;
  console console_;
  zmq::context_t context_;                  // ZeroMQ threads start with the first socket
  std::optional<progress_meter> progress_;  // before context_ in destruction: it owns a socket
  std::vector<child_process> children_;
  std::vector<size_t> command_indices_;  // one per run
  std::optional<size_t> waiting_for_;
  std::optional<std::string> failure_;
  clock_type::time_point start_time_;
  std::optional<clock_type::time_point> kill_deadline_;  // set by the first SIGTERM
  bool killed_ = false;                                   // SIGKILL sent
  bool starting_ = true;
  bool stopping_ = false;
  bool finals_sent_ = false;
  bool negative_answer_ = false;  // a stage exited 1
  int interrupts_ = 0;
  int stop_signal_ = 0;
};

}  // namespace

std::string launcher_self_dir() {
  std::error_code error;
  fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (error) throw system_error("unable to read /proc/self/exe: " + error.message());
  return self.parent_path().string();
}

int launcher_run(const launcher_options &options) {
  // Everything that can be wrong with the manifest or the command line fails here, before any
  // process starts.
  std::string bin_dir = options.bin_dir.empty() ? launcher_self_dir() : options.bin_dir;
  manifest m = manifest_load(manifest_locate(options.manifest_path, bin_dir));
  const auto env = stage_environment();
  manifest_check_options(m, manifest_binary_describer(bin_dir, env ? &*env : nullptr));
  std::string config = resolve_config(options.config_path);
  if (!config.empty()) {
    check_config(config, m);
  } else if (const char *inherited = std::getenv("TPROBE_CONFIG"); inherited && *inherited) {
    // The command inherits it, and its capture reads it unless given another file.
    try {
      check_config(resolve_config(inherited), m);
    } catch (const usage_error &e) {
      throw usage_error(std::string("TPROBE_CONFIG: ") + e.what());
    }
  }
  std::string command_path = options.command.empty() ? "" : resolve_command(options.command.front());

  ensure_standard_fds();
  run_directory run_dir(m, options.keep_run_dir);
  // Blocked before any thread exists, so that no thread takes these signals with their default
  // action. Destroyed after the launcher, which reaps every child first.
  signal_watch signals;
  launcher l(options, std::move(m), bin_dir, config, command_path, run_dir, signals);
  return l.run();
}

const stage_description &launcher_description() {
  static const stage_description d{
      "run",
      "start a manifest's stages around a command",
      false,
      false,
      {
          {.name = "manifest", .type = "string", .default_value = "", .doc = "pipeline manifest, e.g. pipelines/statistics.json, or a shipped one by name (statistics)",
           .required = true, .positional = true},
          {"config", "string", "", "capture config, passed to COMMAND as TPROBE_CONFIG"},
          {"keep-run-dir", "bool", "false", "keep the run directory (endpoints) at the end"},
          {"startup-timeout", "int", "60", "seconds each stage has to report ready", 1, 86400},
      }};
  return d;
}

void launcher_options_read(const stage_option_values &values, launcher_options &options) {
  options.manifest_path = values.text("manifest");
  options.config_path = values.text("config");
  options.keep_run_dir = values.flag("keep-run-dir");
  options.startup_timeout_s = static_cast<int>(values.integer("startup-timeout"));
}

}  // namespace tprobe
