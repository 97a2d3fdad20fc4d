#include "stage_main.h"

#include <malloc.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "errors.h"

namespace tprobe {

namespace {

// A range bound as the messages and --help print it: 0.001, 86400, inf.
std::string bound_text(const std::optional<double> &bound, const char *none) {
  return bound ? fmt::format("{}", *bound) : std::string(none);
}

}  // namespace

std::string stage_describe_json(const stage_description &d) {
  nlohmann::ordered_json j;
  j["stage"] = d.stage;
  j["summary"] = d.summary;
  j["input"] = d.has_input;
  j["output"] = d.has_output;
  j["options"] = nlohmann::ordered_json::array();
  auto add = [&](const stage_option_spec &o) {
    nlohmann::ordered_json option{{"name", o.name}, {"type", o.type}, {"default", o.default_value}, {"doc", o.doc}};
    if (o.min) option["min"] = *o.min;
    if (o.max) option["max"] = *o.max;
    if (!o.choices.empty()) option["choices"] = o.choices;
    if (o.required) option["required"] = true;
    if (o.positional) option["positional"] = true;
    j["options"].push_back(std::move(option));
  };
  for (const auto &o : d.options) add(o);
  // Only a binary with a stream has the queue and the tap the common options set: an offline tool
  // (or tprobe-tap, a client) would otherwise describe options its parser refuses.
  if (d.has_input || d.has_output)
    for (const auto &o : stage_common_option_specs()) add(o);
  return j.dump(1);
}

const std::vector<stage_option_spec> &stage_common_option_specs() {
  static const std::vector<stage_option_spec> specs{
      {"hwm", "int", "1000", "records queued per connection before sends block", 1, 1e9},
      {"tap-payload", "bool", "false", "publish payload frames on the tap too", {}, {}},
  };
  return specs;
}

void stage_add_common_options(CLI::App &app, const stage_description &d, stage_common_args &args) {
  args.io.producer_name = "tprobe-" + d.stage;
  if (d.has_input) {
    app.add_option("--input", args.io.input, "Endpoint to bind (ipc://, tcp://, inproc://) or record file to read")
        ->required();
    app.add_option("--producers", args.io.producers, "Producers to expect; 0 = until the launcher's final")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
  }
  if (d.has_output) app.add_option("--output", args.io.outputs, "Consumer endpoint or record file (repeatable)");
  app.add_option("--tap", args.io.tap, "Endpoint to bind a lossy live tap on");
  app.add_flag("--tap-payload", args.io.tap_payload, "Publish payload frames on the tap too");
  app.add_option("--hwm", args.io.high_water_mark, "Records queued per connection before sends block")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--ready-fd", args.ready_fd, "Write a line to this fd once ready");
  stage_add_describe_option(app, d);
}

void stage_add_describe_option(CLI::App &app, const stage_description &d) {
  // --describe must work without the required options, so it short-circuits the parse.
  app.add_flag_callback(
      "--describe",
      [d] {
        fmt::print("{}\n", stage_describe_json(d));
        throw CLI::Success();
      },
      "Print this stage's option table as JSON");
}

const stage_option_spec &stage_option_values::spec(const std::string &name, const char *type) const {
  for (const auto &o : specs_)
    if (o.name == name) {
      if (type && o.type != type && !(std::string_view(type) == "float" && o.type == "int"))
        throw std::logic_error("option " + name + " is declared " + o.type + ", read as " + type);
      return o;
    }
  throw std::logic_error("option " + name + " is not in the stage's option table");
}
const std::string &stage_option_values::text(const std::string &name) const {
  (void)spec(name, nullptr);
  return text_.at(name);
}
int64_t stage_option_values::integer(const std::string &name) const {
  (void)spec(name, "int");
  return integers_.at(name);
}
double stage_option_values::number(const std::string &name) const {
  if (spec(name, "float").type == "int") return static_cast<double>(integers_.at(name));
  return numbers_.at(name);
}
bool stage_option_values::flag(const std::string &name) const {
  (void)spec(name, "bool");
  return flags_.at(name);
}
const std::vector<std::string> &stage_option_values::list(const std::string &name) const {
  (void)spec(name, "list");
  return lists_.at(name);
}
std::vector<std::string> stage_option_values::items(const std::string &name) const {
  std::vector<std::string> out;
  for (const auto &v : list(name))
    for (size_t begin = 0; begin <= v.size();) {
      const size_t end = std::min(v.find(',', begin), v.size());
      out.push_back(v.substr(begin, end - begin));
      begin = end + 1;
    }
  return out;
}
bool stage_option_values::given(const std::string &name) const {
  auto it = options_.find(name);
  return it != options_.end() && it->second->count() > 0;
}

void stage_add_declared_options(CLI::App &app, const stage_description &d, stage_option_values &values) {
  values.specs_ = d.options;
  for (const auto &o : d.options) {
    const std::string flag = o.positional ? o.name : (o.alias.empty() ? "" : o.alias + ",") + "--" + o.name;
    CLI::Option *option = nullptr;
    if (o.type == "bool") {
      bool &target = values.flags_[o.name];
      target = o.default_value == "true";
      // Also --name=true / --name=false, as the launcher passes; a flag that is on unless told
      // otherwise is turned off by --no-name, as a reader would type it.
      option = app.add_flag(target ? flag + ",!--no-" + o.name : flag, target, o.doc);
    } else if (o.type == "list") {
      auto &target = values.lists_[o.name];  // the default: its comma-separated elements
      target.clear();
      for (size_t begin = 0; !o.default_value.empty() && begin <= o.default_value.size();) {
        const size_t end = std::min(o.default_value.find(',', begin), o.default_value.size());
        target.push_back(o.default_value.substr(begin, end - begin));
        begin = end + 1;
      }
      option = app.add_option(flag, target, o.doc)->default_str(o.default_value);
    } else {
      std::string &target = values.text_[o.name];
      target = o.default_value;
      option = app.add_option(flag, target, o.doc)->capture_default_str();
      if (o.type == "int" || o.type == "float") option->type_name(o.type == "int" ? "INT" : "FLOAT");
    }
    std::string doc = o.doc;
    if (o.min || o.max) doc += fmt::format(" (in [{}, {}])", bound_text(o.min, "-inf"), bound_text(o.max, "inf"));
    if (!o.choices.empty()) doc += fmt::format(" (one of {})", fmt::join(o.choices, ", "));
    if (o.required) doc += " (required)";
    option->description(doc);
    values.options_[o.name] = option;
  }
}

void stage_check_declared_options(const stage_description &d, stage_option_values &values) {
  for (const auto &o : d.options) {
    std::optional<std::string> value;  // as given, or the default; nullopt: neither
    if (o.type == "bool") {
      value = values.flags_[o.name] ? "true" : "false";
    } else if (o.type == "list") {
      if (values.given(o.name) || !o.default_value.empty()) value = fmt::format("{}", fmt::join(values.lists_[o.name], ","));
    } else if (values.given(o.name) || !o.default_value.empty() || !o.required) {
      value = values.text_[o.name];
    }
    if (o.required && !values.given(o.name)) value.reset();
    std::string subject = o.positional ? o.name : "--" + o.name;  // MANIFEST, --threads
    if (o.positional)
      for (char &ch : subject) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    stage_option_check(o, value, subject);
    if (o.type == "int" && value) values.integers_[o.name] = std::stoll(*value);
    if (o.type == "float" && value) values.numbers_[o.name] = std::stod(*value);
  }
}

std::string stage_option_kind(const stage_option_spec &spec) {
  if (spec.type == "int") return "an integer";
  if (spec.type == "float") return "a number";
  if (spec.type == "bool") return "true or false";
  if (spec.type == "list") return "an array of strings or a string";
  return "a string";
}

void stage_option_check(const stage_option_spec &spec, const std::optional<std::string> &value,
                        const std::string &subject) {
  if (!value) {
    if (spec.required) throw usage_error(subject + " is required");
    return;
  }
  const std::string &text = *value;
  if (spec.type == "int" || spec.type == "float") {
    double x = 0;
    size_t used = 0;
    try {
      x = spec.type == "int" ? static_cast<double>(std::stoll(text, &used, 10)) : std::stod(text, &used);
    } catch (const std::out_of_range &) {
      if (spec.type == "int")  // an integer still, but not one the binary can hold
        throw usage_error(fmt::format("{} must be in [{}, {}], got {}", subject, INT64_MIN, INT64_MAX, text));
      used = 0;
    } catch (const std::exception &) {
      used = 0;
    }
    if (used == 0 || used != text.size() || !std::isfinite(x))
      throw usage_error(fmt::format("{} must be {}, got \"{}\"", subject, stage_option_kind(spec), text));
    if ((spec.min && x < *spec.min) || (spec.max && x > *spec.max))
      throw usage_error(fmt::format("{} must be in [{}, {}], got {}", subject, bound_text(spec.min, "-inf"),
                                    bound_text(spec.max, "inf"), text));
  } else if (spec.type == "bool") {
    if (text != "true" && text != "false")
      throw usage_error(fmt::format("{} must be true or false, got \"{}\"", subject, text));
  }
  if (spec.choices.empty()) return;
  std::vector<std::string> items{text};
  if (spec.type == "list") {
    items.clear();
    for (size_t begin = 0; begin <= text.size();) {
      const size_t end = std::min(text.find(',', begin), text.size());
      items.push_back(text.substr(begin, end - begin));
      begin = end + 1;
    }
  }
  for (const auto &item : items)
    if (std::find(spec.choices.begin(), spec.choices.end(), item) == spec.choices.end())
      throw usage_error(fmt::format("{} must be one of {}, got \"{}\"", subject, fmt::join(spec.choices, ", "), item));
}

std::vector<record_kind> data_kinds_parse(const std::vector<std::string> &names, const std::string &option) {
  std::vector<record_kind> kinds;
  for (const auto &n : names) {
    auto k = record_kind_from_name(n);
    if (!k || record_kind_is_control(*k))
      throw usage_error(fmt::format("{} \"{}\": not a data record kind (session, entry, tensor, value, flush, step_end)",
                                    option, n));
    kinds.push_back(*k);
  }
  return kinds;
}

void stage_parse(CLI::App &app, int argc, char **argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &) {  // derives from CLI::Success: catch it first
    fmt::print("{}", app.help());
    throw CLI::Success();
  } catch (const CLI::Success &) {
    throw;
  } catch (const CLI::ParseError &e) {
    throw usage_error(e.what());
  }
}

void stage_signal_ready(int fd) {
  if (fd < 0) return;
  const char nl = '\n';
  ssize_t n;
  do {
    n = ::write(fd, &nl, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) throw system_error_from_errno("write", fmt::format("ready fd {}", fd), errno);
  ::close(fd);
}

void stage_tune_allocator() {
  // ZeroMQ allocates each received message; big tensors come one after another at the same
  // sizes. glibc would hand every one above its mmap threshold fresh pages (a page fault per 4 KiB,
  // dear in a VM) and return them at free. Keeping such blocks in the heap lets them be reused.
  mallopt(M_MMAP_THRESHOLD, 512 << 20);
  mallopt(M_TRIM_THRESHOLD, 1024 << 20);
}

int stage_main_guard(const std::string &program, const std::function<int()> &body) {
  stage_tune_allocator();
  try {
    const int code = body();
    // A stream cut by a signal is not a finished one (stage_io.h); a negative answer found before
    // the cut stays an answer.
    if (code == EXIT_OK && stage_stream_cut_by()) return 128 + stage_stream_cut_by();
    return code;
  } catch (const CLI::Success &) {
    return EXIT_OK;
  } catch (const CLI::ParseError &e) {
    fmt::print(stderr, "{}: fatal: {}\n", program, e.what());
    return EXIT_USAGE;
  } catch (const usage_error &e) {
    fmt::print(stderr, "{}: fatal: {}\n", program, e.what());
    return EXIT_USAGE;
  } catch (const framing_error &e) {
    fmt::print(stderr, "{}: fatal: {}\n", program, e.what());
    return EXIT_USAGE;
  } catch (const system_error &e) {
    fmt::print(stderr, "{}: fatal: {}\n", program, e.what());
    return EXIT_SYSTEM;
  } catch (const zmq::error_t &e) {
    fmt::print(stderr, "{}: fatal: unable to use a socket: {}\n", program, e.what());
    return EXIT_SYSTEM;
  } catch (const std::exception &e) {
    fmt::print(stderr, "{}: fatal: internal error: {}\n", program, e.what());
    return EXIT_SYSTEM;
  }
}

stage_main_context::~stage_main_context() = default;

zmq::context_t &stage_main_context::zmq() {
  if (!zmq_) {
    stage_install_signal_handlers();  // before the context's threads start
    zmq_ = std::make_unique<zmq::context_t>();
  }
  return *zmq_;
}

stage_io &stage_main_context::start() {
  if (io_) throw std::logic_error("stage_main_context::start() called twice");
  if (!description_.has_input && !description_.has_output)
    throw std::logic_error("tprobe-" + description_.stage + " has no stream to start");
  zmq::context_t &ctx = zmq();
  io_ = std::make_unique<stage_io>(ctx, common_.io);
  stage_signal_ready(common_.ready_fd);
  return *io_;
}

stage_io &stage_main_context::io() {
  if (!io_) throw std::logic_error("stage_main_context::io() before start()");
  return *io_;
}

int stage_main(int argc, char **argv, const stage_description &d, const std::function<int(stage_main_context &)> &run,
               const stage_main_extras &extras) {
  const std::string program = extras.program.empty() ? "tprobe-" + d.stage : extras.program;
  return stage_main_guard(program, [&] {
    CLI::App app{d.summary, program};
    stage_common_args common;
    stage_option_values values;  // from the option table: parser, --describe, --help and checks agree
    if (d.has_input || d.has_output) {
      stage_add_common_options(app, d, common);
      common.io.producer_name = program;
    } else {
      stage_add_describe_option(app, d);
    }
    stage_add_declared_options(app, d, values);
    if (extras.add_arguments) extras.add_arguments(app);
    if (extras.translate) {
      std::vector<std::string> args = extras.translate(std::vector<std::string>(argv + 1, argv + argc), app);
      std::vector<char *> translated{argv[0]};
      for (auto &a : args) translated.push_back(a.data());
      stage_parse(app, static_cast<int>(translated.size()), translated.data());
    } else {
      stage_parse(app, argc, argv);
    }
    stage_check_declared_options(d, values);
    stage_main_context context(d, values, common);
    return run(context);
  });
}

}  // namespace tprobe
