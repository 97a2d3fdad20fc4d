// tprobe: the command users type. `tprobe VERB ARGS…` replaces itself (execv) with tprobe-VERB
// from its own directory, git-style, so every stage and the launcher are one word away:
//
//   tprobe run pipelines/statistics.json -- python train.py
//   tprobe stats --describe
//   tprobe help run            same as tprobe run --help
//   tprobe --help              lists the tprobe-* binaries beside it with their summaries
//   tprobe --version
//
// Exit: VERB's own status; 100 for an unknown command or option; 111 when exec fails.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "errors.h"

#ifndef TPROBE_VERSION
#define TPROBE_VERSION "unknown"
#endif

extern char **environ;

namespace {

namespace fs = std::filesystem;

[[noreturn]] void die(int code, const std::string &message) {
  std::fprintf(stderr, "tprobe: fatal: %s\n", message.c_str());
  std::exit(code);
}

bool valid_verb(const std::string &verb) {
  return !verb.empty() && verb.front() != '-' &&
         std::all_of(verb.begin(), verb.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

struct listed_command {
  std::string verb;
  std::string path;
  std::string summary = "(no description)";
  pid_t pid = -1;
  int out = -1;
  std::string text;
};

// Runs `tprobe-X --describe` for every binary at once and keeps the summaries. A binary that is
// not a stage may not know --describe and might even wait for input: after a deadline it is
// killed and listed without a summary, so that --help never hangs.
void describe_all(std::vector<listed_command> &commands) {
  for (auto &c : commands) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) continue;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    // Its own process group, so that a kill reaches whatever a hung binary started.
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
    std::string flag = "--describe";
    char *argv[] = {c.path.data(), flag.data(), nullptr};
    if (::posix_spawn(&c.pid, c.path.c_str(), &actions, &attributes, argv, environ) != 0) c.pid = -1;
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    if (c.pid > 0) {
      c.out = out[0];
    } else {
      ::close(out[0]);
    }
  }

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (;;) {
    std::vector<pollfd> fds;
    for (const auto &c : commands)
      if (c.out >= 0) fds.push_back({c.out, POLLIN, 0});
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (fds.empty() || left.count() <= 0) break;
    if (::poll(fds.data(), fds.size(), static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (auto &c : commands) {
      if (c.out < 0) continue;
      auto fd = std::find_if(fds.begin(), fds.end(), [&](const pollfd &p) { return p.fd == c.out; });
      if (fd == fds.end() || !fd->revents) continue;
      char buffer[4096];
      ssize_t n = ::read(c.out, buffer, sizeof buffer);
      if (n > 0) {
        c.text.append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(c.out);
        c.out = -1;
      }
    }
  }

  for (auto &c : commands) {
    if (c.pid <= 0) continue;
    bool finished = c.out < 0;
    if (!finished) {
      ::kill(-c.pid, SIGKILL);
      ::close(c.out);
    }
    int status = 0;
    while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!finished || !WIFEXITED(status) || WEXITSTATUS(status) != 0) continue;
    auto doc = nlohmann::json::parse(c.text, nullptr, false);
    if (doc.is_object() && doc.contains("summary") && doc["summary"].is_string())
      c.summary = doc["summary"].get<std::string>();
  }
}

int list_commands(const fs::path &self) {
  std::vector<listed_command> commands;
  std::error_code error;
  for (const auto &entry : fs::directory_iterator(self.parent_path(), error)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("tprobe-", 0) != 0 || !entry.is_regular_file(error)) continue;
    if (::access(entry.path().c_str(), X_OK) != 0) continue;
    listed_command c;
    c.verb = name.substr(7);
    c.path = entry.path().string();
    commands.push_back(std::move(c));
  }
  std::sort(commands.begin(), commands.end(), [](const auto &a, const auto &b) { return a.verb < b.verb; });
  describe_all(commands);

  std::printf("usage: tprobe COMMAND [ARGS...]   runs tprobe-COMMAND from %s\n"
              "       tprobe help COMMAND        COMMAND's options\n"
              "       tprobe --version\n\ncommands:\n",
              self.parent_path().c_str());
  size_t width = 0;
  for (const auto &c : commands) width = std::max(width, c.verb.size());
  for (const auto &c : commands) std::printf("  %-*s  %s\n", static_cast<int>(width), c.verb.c_str(), c.summary.c_str());
  if (commands.empty()) std::printf("  (no tprobe-* binaries found)\n");
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  std::error_code error;
  fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (error) die(tprobe::EXIT_SYSTEM, "unable to read /proc/self/exe: " + error.message());

  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || (args[0] == "help" && args.size() == 1))
    return list_commands(self);
  if (args[0] == "--version") {
    std::printf("tprobe %s\n", TPROBE_VERSION);
    return 0;
  }
  if (args[0] == "help") args = {args[1], "--help"};  // tprobe help VERB
  // msprobe's habits: `msprobe -f pytorch compare …` with tprobe in its place. The framework comes
  // first there (tprobe reads PyTorch dumps), and verbs are spelled with underscores.
  if (args[0] == "-f" || args[0] == "--framework") {
    if (args.size() < 2) die(tprobe::EXIT_USAGE, args[0] + " needs a framework: pytorch");
    if (args[1] != "pytorch")
      die(tprobe::EXIT_USAGE, args[0] + " " + args[1] + ": tprobe reads PyTorch dumps; only -f pytorch is taken");
    args.erase(args.begin(), args.begin() + 2);
    if (args.empty()) return list_commands(self);
  }
  std::replace(args[0].begin(), args[0].end(), '_', '-');  // nan_analyze → nan-analyze
  if (args[0] == "run-ut" || args[0] == "acc-check") args[0] = "precheck";  // msprobe 8.3.3's and HEAD's verbs
  if (args[0] == "graph-visualize") args[0] = "graph";                        // msprobe HEAD's spelling of graph
  const std::string &verb = args[0];
  if (verb.front() == '-') die(tprobe::EXIT_USAGE, "unknown option \"" + verb + "\" (see tprobe --help)");

  std::string binary = (self.parent_path() / ("tprobe-" + verb)).string();
  if (!valid_verb(verb) || ::access(binary.c_str(), X_OK) != 0)
    die(tprobe::EXIT_USAGE, "unknown command \"" + verb + "\" (no tprobe-" + verb + " beside " + self.string() + ")");

  std::vector<char *> child_argv{binary.data()};
  for (size_t i = 1; i < args.size(); ++i) child_argv.push_back(args[i].data());
  child_argv.push_back(nullptr);
  ::execv(binary.c_str(), child_argv.data());
  die(tprobe::EXIT_SYSTEM, "unable to execute " + binary + ": " + std::strerror(errno));
}
