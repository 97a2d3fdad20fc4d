// stage_main.h: what every stage binary shares, so that a stage's main() stays ~20 lines: one
// stage_main() parses the command line from the stage's option table, checks it, opens the stream
// and maps errors to exit codes; the main only turns option values into its library's options,
// calls the run and prints its summary line.
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
// "min"/"max" (numbers) for int and float, "choices" (an array of strings: the only values a
// string option takes, an enum) and "required": true (the option has no default and must be
// given); `tprobe run --describe` marks its MANIFEST "positional": true. The launcher checks a manifest's options against it with the same function the binary
// uses (stage_option_check) before starting anything. The common options a manifest may set (hwm,
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
#include <memory>
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
  // A string option's only values (an enum): anything else is refused naming them. Empty: any.
  std::vector<std::string> choices = {};
  // No default: the option must be given, on the command line or in a manifest's "options".
  bool required = false;
  // Given as a bare argument (its name upper-cased in messages), not as --name: only for the
  // arguments of `tprobe run` (MANIFEST), which --describe lists like a stage's options.
  bool positional = false;
};

struct stage_description {
  std::string stage;    // verb: the binary is tprobe-<stage>
  std::string summary;  // one line
  bool has_input = true;
  bool has_output = true;
  std::vector<stage_option_spec> options;
};

std::string stage_describe_json(const stage_description &d);

// The one check of an option's value against its spec, used by the binaries (after their parse,
// stage_check_declared_options) and by the launcher (a manifest's options, and the defaults a
// user stage's --describe declares). `value` is the value as command-line text; nullopt when it
// was not given (only a required option minds). `subject` names the option in the message: "--x"
// for a binary, "pipelines/x.json: stage \"writer\": option \"x\"" for a manifest. Throws
// usage_error, one wording for both:
//   <subject> must be an integer, got "abc"       (also: a number; true or false)
//   <subject> must be in [0, 3600], got -1        (int and float with min/max)
//   <subject> must be one of auto, name, got "x"  (choices)
//   <subject> is required                         (required, not given)
// A list option's choices apply to each of its comma-separated elements.
void stage_option_check(const stage_option_spec &spec, const std::optional<std::string> &value,
                        const std::string &subject);
// What a value of `spec` must be, as stage_option_check words it: "an integer", "a number",
// "true or false", "a string", "an array of strings or a string"; for the launcher's message about
// a manifest value of the wrong JSON kind ("<subject> must be an integer, got true").
std::string stage_option_kind(const stage_option_spec &spec);
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
// given values replace the default, whose text is comma-separated), defaults from the table, and
// --help says each range, choice list and "required"; stage_check_declared_options(), after the
// parse, checks each value with stage_option_check and throws usage_error naming the option
// ("--flush-interval must be in [0, 3600], got -1").
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

// What stage_main() hands a stage's run: the checked option values, and the stream, opened when
// the run asks for it (after it has turned the values into its library's options and checked
// them, so that a bad option binds no socket and creates no file).
class stage_main_context {
 public:
  stage_main_context(const stage_description &d, const stage_option_values &values, stage_common_args &common)
      : description_(d), values_(values), common_(common) {}
  stage_main_context(const stage_main_context &) = delete;
  stage_main_context &operator=(const stage_main_context &) = delete;
  ~stage_main_context();

  const stage_option_values &values() const { return values_; }
  // The common options as parsed (--input, --output, --hwm, …); set io_options().decode and the
  // like before start().
  stage_io_options &io_options() { return common_.io; }
  // The ZeroMQ context of the process, made on first use after installing the SIGINT/SIGTERM
  // handlers (stage_install_signal_handlers): for a control_sender or a client socket.
  zmq::context_t &zmq();
  // Binds the input, connects the outputs and writes the readiness line (--ready-fd); once.
  // Throws std::logic_error for a binary without an input or an output (an offline tool).
  stage_io &start();
  stage_io &io();  // after start()
  bool interrupted() const { return io_ && io_->interrupted(); }

 private:
  const stage_description &description_;
  const stage_option_values &values_;
  stage_common_args &common_;
  std::unique_ptr<zmq::context_t> zmq_;
  std::unique_ptr<stage_io> io_;
};

// What a binary takes besides its option table, for stage_main().
struct stage_main_extras {
  // Adds arguments the table cannot declare (positional paths, msprobe's -i), or adjusts the
  // common ones (tprobe-report makes --input optional). Runs after the table's options are added.
  std::function<void(CLI::App &)> add_arguments = {};
  // Rewrites the arguments (argv[1..]) before the parse: msprobe's spellings (msprobe_cli.h).
  std::function<std::vector<std::string>(std::vector<std::string>, const CLI::App &)> translate = {};
  // The name in fatal lines, --help and the stream's hello; "" is tprobe-<stage>. A stage of the
  // C++ kit (tprobe_stage.h) is a user's binary, named as its table names it, without the prefix.
  std::string program = {};
};

// The whole main of a stage or tool: builds the parser from `d` (the common stream options where
// d has an input or an output, else only --describe; then the table; then extras.add_arguments),
// parses argv (--help and --describe print and exit 0), checks every value (stage_option_check),
// and calls `run` inside stage_main_guard("tprobe-<stage>", or extras.program): its return value is the exit code,
// and its exceptions map to one fatal line and 100/111.
int stage_main(int argc, char **argv, const stage_description &d, const std::function<int(stage_main_context &)> &run,
               const stage_main_extras &extras = {});

}  // namespace tprobe
