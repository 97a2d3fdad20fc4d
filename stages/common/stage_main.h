// stage_main.h: what every stage binary shares, so that a stage's main() stays ~40 lines.
//
// Command-line contract of every stage binary (the launcher relies on it, and so can a user's own
// binary swapped into a manifest):
//   --input SPEC        bind this input (endpoint or record file), see transport/endpoint.h
//   --producers N       producers to expect on the input; 0 = until the launcher's `final`
//   --output SPEC       connect to a consumer (repeatable; endpoint or record file)
//   --tap ENDPOINT      bind a lossy live tap (XPUB)
//   --tap-payload       publish payload frames on the tap too
//   --hwm N             records queued per connection before sends block
//   --ready-fd N        write "\n" to this fd once bound and connected (readiness protocol)
//   --describe          print the stage's option table as JSON and exit 0
//   --<option> VALUE    stage options, from the stage's option table
//
// --describe prints one JSON object:
//   {"stage": "stats", "summary": "…", "input": true, "output": true,
//    "options": [{"name": "threads", "type": "int", "default": "1", "doc": "…", "min": 1}, …]}
// with type one of "string", "int", "float", "bool", "list" (repeatable string), and optional
// "min"/"max" (numbers) for int and float. The launcher type- and range-checks a manifest's
// options against it before starting anything. The common options a manifest may set (hwm,
// tap-payload) are listed too, by a binary with an input or an output (an offline tool has neither).
//
// Exit codes and messages: see core/errors.h. stage_main_guard() prints
//   tprobe-stats: fatal: <what>
// and returns 100 for usage_error/framing_error, 111 for system_error and zmq errors; a stage whose
// stream a SIGINT or SIGTERM cut short before its end-of-stream exits 128 + the signal (130, 143)
// once its files are written (stage_io.h, stage_stream_cut_by).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "stage_io.h"
#include "errors.h"
#include "record.h"

namespace tprobe {

struct stage_option_spec {
  std::string name;           // long option name without dashes, kebab-case
  std::string type;           // string | int | float | bool | list
  std::string default_value;  // as text; "" for none
  std::string doc;            // one line
  std::optional<double> min = {}, max = {};  // int and float: the allowed range, checked by the launcher
  // A short spelling on the command line ("-o"), for the offline tools whose users know msprobe's
  // one-letter flags. The launcher always passes --<name>, so --describe leaves it out.
  std::string alias = {};
};

struct stage_description {
  std::string stage;    // verb: the binary is tprobe-<stage>
  std::string summary;  // one line
  bool has_input = true;
  bool has_output = true;
  std::vector<stage_option_spec> options;
};

std::string stage_describe_json(const stage_description &d);
// The common options (below) that a manifest may set like a stage's own: hwm, tap-payload.
const std::vector<stage_option_spec> &stage_common_option_specs();

// The common options above, parsed into `io` and `ready_fd`. `describe` is set by --describe.
struct stage_common_args {
  stage_io_options io;
  int ready_fd = -1;
  bool describe = false;
};
void stage_add_common_options(CLI::App &app, const stage_description &d, stage_common_args &args);
// Only --describe, for a binary without the stream options (an offline tool over files): the
// launcher and a reader ask every tprobe-<verb> the same way. stage_add_common_options adds it too.
void stage_add_describe_option(CLI::App &app, const stage_description &d);

// Option values declared once: the stage's option table (stage_description::options) drives the
// parser, --describe and --help. stage_add_declared_options() adds one CLI option per entry (bool:
// a flag that also takes =true/=false, and --no-<name> where the default is true; list: repeatable,
// given values replace the default, whose text is comma-separated), defaults from the table;
// stage_check_declared_options(), after the parse, checks each value's type and range and throws
// usage_error naming the option ("--flush-interval must be in [0, 3600], got -1").
class stage_option_values {
 public:
  const std::string &text(const std::string &name) const;  // string options (and any value as given)
  int64_t integer(const std::string &name) const;
  double number(const std::string &name) const;  // float (or int) options
  bool flag(const std::string &name) const;
  const std::vector<std::string> &list(const std::string &name) const;
  // A list option's values with each one split at commas: --sizes 4,8 --sizes 16 gives 4 8 16.
  std::vector<std::string> items(const std::string &name) const;
  bool given(const std::string &name) const;  // set on the command line, not defaulted

 private:
  friend void stage_add_declared_options(CLI::App &, const stage_description &, stage_option_values &);
  friend void stage_check_declared_options(const stage_description &, stage_option_values &);
  const stage_option_spec &spec(const std::string &name, const char *type) const;
  std::vector<stage_option_spec> specs_;
  std::map<std::string, std::string> text_;
  std::map<std::string, bool> flags_;
  std::map<std::string, std::vector<std::string>> lists_;
  std::map<std::string, int64_t> integers_;
  std::map<std::string, double> numbers_;
  std::map<std::string, CLI::Option *> options_;
};
void stage_add_declared_options(CLI::App &app, const stage_description &d, stage_option_values &values);
void stage_check_declared_options(const stage_description &d, stage_option_values &values);

// Data record kind names ("tensor", "step_end") → kinds, for options that pick record kinds
// (tprobe-null --delay-kinds, tprobe-fault --kinds). Throws usage_error naming `option`.
std::vector<record_kind> data_kinds_parse(const std::vector<std::string> &names, const std::string &option);

// app.parse(), with --help printed (then CLI::Success is thrown, which the guard maps to 0) and
// parse errors turned into usage_error.
void stage_parse(CLI::App &app, int argc, char **argv);

// Write the readiness line to `fd` (no-op for fd < 0) and close it.
void stage_signal_ready(int fd);

// Tunes glibc's allocator for a stage process: big received messages are reused from the heap
// instead of being mapped and unmapped each time. stage_main_guard calls it; a process that hosts
// stages otherwise (a benchmark) calls it itself. Not for a training process.
void stage_tune_allocator();

// Runs `body`, mapping exceptions to the exit codes of core/errors.h with one fatal line on stderr
// prefixed by `program`. CLI11 parse errors are usage errors (100); --help exits 0. A body that
// returns 0 after a signal cut its stream (stage_stream_cut_by) exits 128 + that signal.
int stage_main_guard(const std::string &program, const std::function<int()> &body);

}  // namespace tprobe
