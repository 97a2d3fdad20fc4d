// errors.h: the error model shared by every tprobe library and binary.
//
// Contract (style lesson 4): expected non-events are values (std::optional, a bool, a count);
// a broken contract throws one of the exceptions below; only a binary's main() turns an
// exception into an exit code and a one-line message:
//
//     tprobe-stats: fatal: unable to open ./dump: Permission denied
//
// Exit codes are API and are documented in docs/exit-codes.md:
//     0    ok
//     1    a negative answer (a mismatch or an overflow was found)
//     100  usage, config, manifest or input-data error: permanent, do not retry
//     111  system or I/O error (socket, file, process): may be transient
#pragma once

#include <stdexcept>
#include <string>

namespace tprobe {

enum exit_code : int {
  EXIT_OK = 0,
  EXIT_NEGATIVE = 1,
  EXIT_USAGE = 100,
  EXIT_SYSTEM = 111,
};

// A bad input: config field, manifest, command line, malformed record or dump file.
// what() is the complete user line, naming the input and what is wrong with it.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A failed system call or I/O operation. what() reads "unable to <verb> <object>: <reason>".
class system_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "unable to <verb> <object>: strerror(errnum)"
[[nodiscard]] system_error system_error_from_errno(const std::string &verb, const std::string &object,
                                                   int errnum);

}  // namespace tprobe
