#include "stage_main.h"

#include <malloc.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "errors.h"

namespace tprobe {

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
    const std::string flag = (o.alias.empty() ? "" : o.alias + ",") + "--" + o.name;
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
      if (o.min || o.max) {
        option->description(o.doc + fmt::format(" (in [{}, {}])", o.min ? fmt::format("{}", *o.min) : "-inf",
                                                o.max ? fmt::format("{}", *o.max) : "inf"));
      }
    }
    values.options_[o.name] = option;
  }
}

void stage_check_declared_options(const stage_description &d, stage_option_values &values) {
  for (const auto &o : d.options) {
    if (o.type != "int" && o.type != "float") continue;
    const std::string &text = values.text_[o.name];
    double x = 0;
    size_t used = 0;
    try {
      if (o.type == "int") {
        const long long v = std::stoll(text, &used, 10);
        values.integers_[o.name] = v;
        x = static_cast<double>(v);
      } else {
        x = std::stod(text, &used);
        values.numbers_[o.name] = x;
      }
    } catch (const std::exception &) {
      used = 0;
    }
    if (used == 0 || used != text.size() || (o.type == "float" && !std::isfinite(x)))
      throw usage_error(fmt::format("--{} must be {}, got \"{}\"", o.name, o.type == "int" ? "an integer" : "a number",
                                    text));
    if ((o.min && x < *o.min) || (o.max && x > *o.max))
      throw usage_error(fmt::format("--{} must be in [{}, {}], got {}", o.name,
                                    o.min ? fmt::format("{}", *o.min) : "-inf",
                                    o.max ? fmt::format("{}", *o.max) : "inf", text));
  }
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

}  // namespace tprobe
