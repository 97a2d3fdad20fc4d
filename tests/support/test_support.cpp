#include "test_support.h"

#include <gtest/gtest.h>

#include "stage_io.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>
#include <unistd.h>

namespace tprobe::test {

namespace {
int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

[[noreturn]] void exec_child(const std::vector<std::string> &argv, const std::vector<std::string> &env) {
  for (const auto &kv : env) {
    const auto eq = kv.find('=');
    ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  }
  std::vector<char *> args;
  for (const auto &a : argv) args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
  _exit(127);
}
}  // namespace

temp_dir::temp_dir() {
  const char *base = std::getenv("TPROBE_TEST_TMP");
  std::string root = base && *base ? base : "/tmp";
  std::filesystem::create_directories(root);
  std::string tmpl = root + "/t-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

temp_dir::~temp_dir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string bin(const std::string &name) {
  const char *dir = std::getenv("TPROBE_BIN_DIR");
  if (!dir || !*dir) throw std::runtime_error("TPROBE_BIN_DIR is not set: run the tests through ctest");
  return std::string(dir) + "/" + name;
}

std::string source_dir() {
  const char *dir = std::getenv("TPROBE_SOURCE_DIR");
  if (!dir || !*dir) throw std::runtime_error("TPROBE_SOURCE_DIR is not set: run the tests through ctest");
  return dir;
}

std::string read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string &path, const std::string &content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

process_result run_process(const std::vector<std::string> &argv, const std::vector<std::string> &env) {
  temp_dir logs;
  const std::string out_path = logs / "out", err_path = logs / "err";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(out, 1);
    ::dup2(err, 2);
    const int null_in = ::open("/dev/null", O_RDONLY);
    ::dup2(null_in, 0);
    exec_child(argv, env);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  process_result r;
  r.status = decode_status(status);
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

child_process::child_process(const std::vector<std::string> &argv, const std::string &log_dir,
                             const std::vector<std::string> &env, bool ready_fd) {
  std::string name = std::filesystem::path(argv.at(0)).filename().string();
  err_path_ = log_dir + "/" + name + "." + std::to_string(::getpid()) + "." + std::to_string(rand()) + ".err";
  int pipefd[2] = {-1, -1};
  if (ready_fd && ::pipe(pipefd) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> args = argv;
  if (ready_fd) {
    args.push_back("--ready-fd");
    args.push_back(std::to_string(pipefd[1]));
  }
  pid_ = ::fork();
  if (pid_ == 0) {
    if (ready_fd) ::close(pipefd[0]);
    const int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(err, 2);
    const int out = ::open((err_path_ + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(out, 1);
    exec_child(args, env);
  }
  if (ready_fd) {
    ::close(pipefd[1]);
    ready_read_ = pipefd[0];
  }
}

child_process::~child_process() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    wait();
  }
  if (ready_read_ >= 0) ::close(ready_read_);
}

void child_process::wait_ready() {
  char c = 0;
  ssize_t n;
  do {
    n = ::read(ready_read_, &c, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) throw std::runtime_error("child exited before it was ready: " + err());
}

int child_process::wait() {
  if (reaped_) return status_;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  status_ = decode_status(status);
  return status_;
}

std::optional<int> child_process::wait_for(double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!reaped_) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      status_ = decode_status(status);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    // A test watching a process with a deadline: there is no fd to poll for a child's exit.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return status_;
}

void child_process::kill(int signal) {
  if (!reaped_) ::kill(pid_, signal);
}

std::string child_process::err() const {
  try {
    return read_file(err_path_);
  } catch (...) {
    return {};
  }
}

record numbered_record(uint64_t i, size_t bytes) {
  record r(record_kind::tensor);
  r.header.entry = "Functional.relu." + std::to_string(i) + ".forward";
  r.header.slot = "output.0";
  r.header.seq = i + 1;
  r.header.type = dtype::uint8;
  r.header.shape = {static_cast<int64_t>(bytes)};
  std::vector<std::byte> data(bytes, static_cast<std::byte>(i & 0xff));
  r.set_payload(std::move(data));
  return r;
}

record stack_entry_record(const std::string &run, uint64_t seq, uint64_t stack_id, const nlohmann::ordered_json *lines) {
  record e(record_kind::entry);
  e.header.run = run;
  e.header.seq = seq;
  e.header.entry = "Torch.add." + std::to_string(seq) + ".forward";
  e.header.meta = {{"stack_id", stack_id}, {"parent", nullptr}};
  if (lines) e.header.meta["stack"] = *lines;
  return e;
}

DLTensor float_tensor(float *data, int64_t *shape) {
  DLTensor t{};
  t.data = data;
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape;
  return t;
}

std::string ipc_endpoint(const temp_dir &dir, const std::string &name) { return "ipc://" + dir.path() + "/" + name; }

pid_t stalling_consumer(const std::string &endpoint, int take, const std::string &name) {
  int ready[2];
  if (::pipe(ready) != 0) throw std::runtime_error("pipe");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    zmq::context_t ctx;
    stage_io_options in;
    in.input = endpoint;
    in.producers = 0;
    in.high_water_mark = 4;
    in.producer_name = name;
    stage_io io(ctx, in);
    const char c = 'r';
    if (::write(ready[1], &c, 1) != 1) ::_exit(2);
    for (int i = 0; i < take; ++i)
      if (!io.receive()) ::_exit(3);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c;
  if (::read(ready[0], &c, 1) != 1) throw std::runtime_error("the stalling consumer did not start");
  ::close(ready[0]);
  return pid;
}

std::vector<std::string> files_in(const std::string &dir) {
  std::vector<std::string> names;
  for (const auto &e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string find_file(const std::string &dir, const std::string &prefix, const std::string &ext) {
  for (const auto &name : files_in(dir))
    if (name.starts_with(prefix) && name.ends_with(ext)) return dir + "/" + name;
  return {};
}

uint64_t number_after(const std::string &text, const std::string &prefix) {
  const auto at = text.find(prefix);
  if (at == std::string::npos) {
    ADD_FAILURE() << "no \"" << prefix << "\" in:\n" << text;
    return 0;
  }
  return std::stoull(text.substr(at + prefix.size()));
}

std::vector<std::string> thread_ids() {
  std::vector<std::string> out;
  for (const auto &task : std::filesystem::directory_iterator("/proc/self/task")) out.push_back(task.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> threads_taking_signal(int signal) {
  std::vector<std::string> out;
  for (const auto &tid : thread_ids()) {
    std::ifstream status("/proc/self/task/" + tid + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("SigBlk:", 0) == 0 && ((std::stoull(line.substr(7), nullptr, 16) >> (signal - 1)) & 1) == 0)
        out.push_back(tid);
  }
  return out;
}

}  // namespace tprobe::test
