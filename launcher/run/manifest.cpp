#include "run/manifest.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "capture_config.h"
#include "errors.h"
#include "json_kind.h"

extern char **environ;

namespace tprobe {

namespace {

using json = nlohmann::ordered_json;

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string join(const std::vector<std::string> &items, std::string_view separator) {
  std::string out;
  for (const auto &item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

// nlohmann's what() starts with "[json.exception.parse_error.101] ": noise for a user.
std::string json_error_text(const std::exception &e) {
  std::string_view text = e.what();
  if (text.rfind("[json.exception.", 0) == 0) {
    if (auto end = text.find("] "); end != std::string_view::npos) text.remove_prefix(end + 2);
  }
  return std::string(text);
}

// Rejects any key of `object` not in `known`, naming `where` ("pipelines/x.json: capture").
void check_known_keys(const json &object, const std::vector<std::string> &known, const std::string &where) {
  for (const auto &[key, value] : object.items()) {
    (void)value;
    if (std::find(known.begin(), known.end(), key) == known.end())
      throw usage_error(where + ": unknown key " + in_quotes(key) + " (known: " + join(known, ", ") + ")");
  }
}

bool valid_name(std::string_view name) {
  auto plain = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (name.empty() || !plain(name.front())) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return plain(c) || c == '_' || c == '-'; });
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

// Unlike stage names, verbs become file names (tprobe-<verb>): no slashes, no dots.
bool valid_verb(std::string_view verb) {
  return valid_name(verb) && verb.find('_') == std::string_view::npos;
}

bool valid_env_name(std::string_view name) {
  auto head = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (name.empty() || !head(name.front())) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return head(c) || (c >= '0' && c <= '9'); });
}

manifest_run parse_run(const json &doc, size_t index, const manifest &m) {
  std::string where = m.path + ": runs[" + std::to_string(index) + "]";
  if (!doc.is_object()) throw usage_error(where + ": must be an object, got " + json_kind(doc));
  manifest_run r;
  auto name = doc.find("name");
  if (name == doc.end()) throw usage_error(where + ": missing \"name\"");
  if (!name->is_string() || !valid_name(name->get<std::string>()))
    throw usage_error(where + ": \"name\" must be a string matching [a-z0-9][a-z0-9_-]*, got " + name->dump());
  r.name = name->get<std::string>();
  where = m.path + ": run " + in_quotes(r.name);
  for (const auto &other : m.runs)
    if (other.name == r.name) throw usage_error(where + ": a run of that name exists already");
  check_known_keys(doc, {"name", "args", "env"}, where);
  if (auto args = doc.find("args"); args != doc.end()) {
    if (!args->is_array()) throw usage_error(where + ": \"args\" must be an array of strings, got " + json_kind(*args));
    for (const auto &a : *args) {
      if (!a.is_string()) throw usage_error(where + ": \"args\" must hold strings, got " + json_kind(a));
      r.args.push_back(a.get<std::string>());
    }
  }
  if (auto env = doc.find("env"); env != doc.end()) {
    if (!env->is_object()) throw usage_error(where + ": \"env\" must be an object, got " + json_kind(*env));
    for (const auto &[key, value] : env->items()) {
      if (!valid_env_name(key))
        throw usage_error(where + ": env name " + in_quotes(key) + " must match [A-Za-z_][A-Za-z0-9_]*");
      if (!value.is_string())
        throw usage_error(where + ": env " + in_quotes(key) + " must be a string, got " + json_kind(value));
      r.env.emplace_back(key, value.get<std::string>());
    }
  }
  return r;
}

manifest_stage parse_stage(const json &doc, size_t index, const manifest &m) {
  std::string where = m.path + ": stages[" + std::to_string(index) + "]";
  if (!doc.is_object()) throw usage_error(where + ": must be an object, got " + json_kind(doc));

  manifest_stage s;
  auto name = doc.find("name");
  if (name == doc.end()) throw usage_error(where + ": missing \"name\"");
  if (!name->is_string()) throw usage_error(where + ": \"name\" must be a string, got " + json_kind(*name));
  s.name = name->get<std::string>();
  if (!valid_name(s.name))
    throw usage_error(where + ": name " + in_quotes(s.name) + " must match [a-z0-9][a-z0-9_-]*");
  where = m.path + ": stage " + in_quotes(s.name);
  if (s.name == MANIFEST_CAPTURE)
    throw usage_error(where + ": the name \"capture\" is reserved for the command's capture");

  check_known_keys(doc, {"name", "stage", "exec", "inputs", "options"}, where);

  auto verb = doc.find("stage");
  auto exec = doc.find("exec");
  if ((verb == doc.end()) == (exec == doc.end()))
    throw usage_error(where + ": needs exactly one of \"stage\" (a tprobe stage) or \"exec\" (a binary)");
  if (verb != doc.end()) {
    if (!verb->is_string()) throw usage_error(where + ": \"stage\" must be a string, got " + json_kind(*verb));
    s.verb = verb->get<std::string>();
    if (!valid_verb(s.verb))
      throw usage_error(where + ": stage " + in_quotes(s.verb) + " is not a stage verb ([a-z0-9][a-z0-9-]*)");
    if (s.verb == "run") throw usage_error(where + ": \"run\" is the launcher, not a stage");
  } else {
    if (!exec->is_string() || exec->get<std::string>().empty())
      throw usage_error(where + ": \"exec\" must be a non-empty path");
    std::filesystem::path p = exec->get<std::string>();
    // Relative to the manifest, so that the same manifest works from any working directory.
    if (p.is_relative()) p = std::filesystem::path(m.path).parent_path() / p;
    s.exec = p.lexically_normal().string();
  }

  if (auto inputs = doc.find("inputs"); inputs != doc.end()) {
    if (!inputs->is_array())
      throw usage_error(where + ": \"inputs\" must be an array of stage names, got " + json_kind(*inputs));
    for (const auto &input : *inputs) {
      if (!input.is_string())
        throw usage_error(where + ": \"inputs\" must hold stage names (strings), got " + json_kind(input));
      s.inputs.push_back(input.get<std::string>());
    }
  }
  if (auto options = doc.find("options"); options != doc.end()) {
    if (!options->is_object())
      throw usage_error(where + ": \"options\" must be an object, got " + json_kind(*options));
    s.options = *options;
  }
  return s;
}

// Graph checks after every stage parsed: names, inputs, cycles; fills topological_order.
void check_graph(manifest &m) {
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < m.stages.size(); ++i) {
    auto [it, inserted] = index_of.emplace(m.stages[i].name, i);
    if (!inserted)
      throw usage_error(m.path + ": stage " + in_quotes(m.stages[i].name) + ": name used twice (stages[" +
                        std::to_string(it->second) + "] and stages[" + std::to_string(i) + "])");
  }

  for (const auto &s : m.stages) {
    std::string where = m.path + ": stage " + in_quotes(s.name);
    std::set<std::string> seen;
    for (const auto &input : s.inputs) {
      if (!seen.insert(input).second) throw usage_error(where + ": input " + in_quotes(input) + " listed twice");
      if (input == s.name) throw usage_error(where + ": reads itself (input " + in_quotes(input) + ")");
      if (input == MANIFEST_CAPTURE || index_of.count(input)) continue;
      std::vector<std::string> known{std::string(MANIFEST_CAPTURE)};
      for (const auto &other : m.stages)
        if (other.name != s.name) known.push_back(other.name);
      throw usage_error(where + ": input " + in_quotes(input) + " does not match any stage (known: " +
                        join(known, ", ") + ")");
    }
  }

  // Depth-first search from each stage along its inputs; reaching a stage that is still on the
  // path closes a cycle. Post-order gives producers before consumers.
  enum class mark { unvisited, on_path, done };
  std::vector<mark> marks(m.stages.size(), mark::unvisited);
  std::vector<size_t> path;
  std::function<void(size_t)> visit = [&](size_t i) {
    marks[i] = mark::on_path;
    path.push_back(i);
    for (const auto &input : m.stages[i].inputs) {
      if (input == MANIFEST_CAPTURE) continue;
      size_t j = index_of.at(input);
      if (marks[j] == mark::on_path) {
        // The cycle is path[j…] in reading order; print it in data-flow order (producer → reader).
        auto start = std::find(path.begin(), path.end(), j);
        std::vector<std::string> names;
        for (auto it = path.end(); it != start;) names.push_back(m.stages[*--it].name);
        names.push_back(m.stages[i].name);
        throw usage_error(m.path + ": stage " + in_quotes(m.stages[j].name) +
                          ": inputs form a cycle (data flows " + join(names, " -> ") + ")");
      }
      if (marks[j] == mark::unvisited) visit(j);
    }
    path.pop_back();
    marks[i] = mark::done;
    m.topological_order.push_back(i);
  };
  for (size_t i = 0; i < m.stages.size(); ++i)
    if (marks[i] == mark::unvisited) visit(i);

  if (m.capture_readers().empty())
    throw usage_error(m.path + ": no stage reads \"capture\", so the command's records would go nowhere "
                      "(add \"capture\" to a stage's \"inputs\")");
}

// Appends `--name value`, or `--name=value` for a value a parser could take for an option. (An
// empty value stays separate: CLI11 rejects `--name=` as a missing value.)
void push_option(std::vector<std::string> &args, const std::string &name, const std::string &value) {
  if (!value.empty() && value.front() == '-') {
    args.push_back("--" + name + "=" + value);
  } else {
    args.push_back("--" + name);
    args.push_back(value);
  }
}

}  // namespace

bool manifest_stage::reads_capture() const {
  return std::find(inputs.begin(), inputs.end(), MANIFEST_CAPTURE) != inputs.end();
}

std::string manifest_stage::program() const { return verb.empty() ? exec : "tprobe-" + verb; }

std::vector<size_t> manifest::consumers_of(size_t i) const {
  std::vector<size_t> out;
  for (size_t j = 0; j < stages.size(); ++j) {
    const auto &inputs = stages[j].inputs;
    if (std::find(inputs.begin(), inputs.end(), stages[i].name) != inputs.end()) out.push_back(j);
  }
  return out;
}

std::vector<size_t> manifest::capture_readers() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < stages.size(); ++i)
    if (stages[i].reads_capture()) out.push_back(i);
  return out;
}

manifest manifest_parse(const json &doc, const std::string &path) {
  manifest m;
  m.path = path;
  if (!doc.is_object()) throw usage_error(path + ": a manifest is a JSON object, got " + json_kind(doc));
  check_known_keys(doc, {"description", "capture", "tasks", "runs", "stages"}, path);

  if (auto d = doc.find("description"); d != doc.end()) {
    if (!d->is_string()) throw usage_error(path + ": \"description\" must be a string, got " + json_kind(*d));
    m.description = d->get<std::string>();
  }

  if (auto c = doc.find("capture"); c != doc.end()) {
    std::string where = path + ": capture";
    if (!c->is_object()) throw usage_error(where + ": must be an object, got " + json_kind(*c));
    check_known_keys(*c, {"task", "level", "dump_path"}, where);
    auto text = [&](const char *key, std::optional<std::string> &out) {
      auto v = c->find(key);
      if (v == c->end()) return;
      if (!v->is_string() || v->get<std::string>().empty())
        throw usage_error(where + ": " + in_quotes(key) + " must be a non-empty string, got " + v->dump());
      out = v->get<std::string>();
    };
    text("task", m.capture.task);
    text("level", m.capture.level);
    text("dump_path", m.capture.dump_path);
  }

  // The capture tasks this pipeline can do: a config asking for another is refused before the
  // command starts (launcher) and by the capture itself (TPROBE_PIPELINE_TASKS).
  auto check_task = [&](const std::string &task, const std::string &where) {
    const auto &names = config_task_names();
    if (std::find(names.begin(), names.end(), task) == names.end())
      throw usage_error(where + ": unknown task " + in_quotes(task) + " (msprobe's tasks: " + join(names, ", ") + ")");
    const auto &built = config_built_tasks();
    if (std::find(built.begin(), built.end(), task) == built.end())
      throw usage_error(where + ": task " + in_quotes(task) + " is not built in tprobe yet (built: " +
                        join(built, ", ") + ")");
  };
  if (auto t = doc.find("tasks"); t != doc.end()) {
    const std::string where = path + ": tasks";
    if (!t->is_array() || t->empty())
      throw usage_error(where + ": must be a non-empty array of task names, got " + json_kind(*t));
    for (const auto &v : *t) {
      if (!v.is_string()) throw usage_error(where + ": a task name must be a string, got " + v.dump());
      const std::string task = v.get<std::string>();
      check_task(task, where);
      if (std::find(m.tasks.begin(), m.tasks.end(), task) != m.tasks.end())
        throw usage_error(where + ": task " + in_quotes(task) + " is listed twice");
      m.tasks.push_back(task);
    }
  }
  if (m.capture.task) {
    check_task(*m.capture.task, path + ": capture");
    if (m.tasks.empty()) {
      m.tasks.push_back(*m.capture.task);  // the override makes every capture run this one
    } else if (std::find(m.tasks.begin(), m.tasks.end(), *m.capture.task) == m.tasks.end()) {
      throw usage_error(path + ": capture: task " + in_quotes(*m.capture.task) + " is not among its \"tasks\" (" +
                        join(m.tasks, ", ") + ")");
    }
  }

  if (auto runs = doc.find("runs"); runs != doc.end()) {
    if (!runs->is_array() || runs->empty())
      throw usage_error(path + ": \"runs\" must be a non-empty array of runs, got " + json_kind(*runs));
    for (size_t i = 0; i < runs->size(); ++i) m.runs.push_back(parse_run((*runs)[i], i, m));
  }

  auto stages = doc.find("stages");
  if (stages == doc.end()) throw usage_error(path + ": missing \"stages\"");
  if (!stages->is_array() || stages->empty())
    throw usage_error(path + ": \"stages\" must be a non-empty array of stages");
  for (size_t i = 0; i < stages->size(); ++i) m.stages.push_back(parse_stage((*stages)[i], i, m));

  check_graph(m);
  return m;
}

std::string manifest_locate(const std::string &name, const std::string &bin_dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (name.empty() || name.find('/') != std::string::npos || fs::is_regular_file(name, error)) return name;
  std::vector<fs::path> folders;
  if (const char *env = std::getenv("TPROBE_PIPELINES"); env && *env) folders.emplace_back(env);
  folders.push_back(fs::path(bin_dir) / ".." / "pipelines");
  const bool has_suffix = name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
  for (const auto &folder : folders)
    for (const std::string &file : {name, has_suffix ? std::string() : name + ".json"})
      if (!file.empty() && fs::is_regular_file(folder / file, error)) return (folder / file).lexically_normal().string();
  return name;
}

manifest manifest_load(const std::string &path) {
  std::ifstream in(path);
  if (!in) throw usage_error("unable to open " + path + ": " + std::strerror(errno));
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::exception &e) {  // parse_error, and out_of_range for a number like 1e309
    throw usage_error(path + ": not valid JSON: " + json_error_text(e));
  }
  return manifest_parse(doc, path);
}

std::vector<std::string> stage_option_args(const stage_description &d, const json &options,
                                           const std::string &context) {
  std::vector<std::string> args;
  for (const auto &[key, value] : options.items()) {
    // [&key = key]: clang before 16 cannot capture a structured binding (the fuzz build is clang's).
    auto spec = std::find_if(d.options.begin(), d.options.end(), [&key = key](const auto &o) { return o.name == key; });
    if (spec == d.options.end()) {
      std::vector<std::string> names;
      for (const auto &o : d.options) names.push_back(o.name);
      std::string program = "tprobe-" + d.stage;
      throw usage_error(context + ": unknown option " + in_quotes(key) + " (" +
                        (names.empty() ? program + " has no options" : program + " options: " + join(names, ", ")) +
                        ")");
    }
    const std::string subject = context + ": option " + in_quotes(key);
    // The JSON value as the binary's command line takes it; its checks are the binary's own
    // (stage_option_check). A value of the wrong JSON kind has no such text.
    const bool kind_ok = spec->type == "int" || spec->type == "float" ? value.is_number()
                         : spec->type == "bool"                       ? value.is_boolean()
                         : spec->type == "list"                       ? value.is_string() || value.is_array()
                                                                      : value.is_string();
    if (!kind_ok || (spec->type == "list" && value.is_array() &&
                     !std::all_of(value.begin(), value.end(), [](const json &v) { return v.is_string(); })))
      throw usage_error(subject + " must be " + stage_option_kind(*spec) + ", got " + value.dump());
    if (spec->type == "list") {
      std::vector<std::string> items;
      if (value.is_string()) items.push_back(value.get<std::string>());
      for (const auto &v : value.is_array() ? value : json::array()) items.push_back(v.get<std::string>());
      for (const auto &item : items) {
        stage_option_check(*spec, item, subject);
        push_option(args, key, item);
      }
      continue;
    }
    // dump() prints a number as the shortest text that reads back as the same double.
    const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    stage_option_check(*spec, text, subject);
    if (spec->type == "bool")
      args.push_back("--" + key + "=" + text);
    else
      push_option(args, key, text);
  }
  for (const auto &spec : d.options)  // a required option the manifest left out
    if (!options.contains(spec.name)) stage_option_check(spec, std::nullopt, context + ": option " + in_quotes(spec.name));
  return args;
}

void manifest_check_options(manifest &m, const stage_describer &describe) {
  for (auto &s : m.stages) s.description = describe(s);

  for (size_t i = 0; i < m.stages.size(); ++i) {
    auto &s = m.stages[i];
    std::string where = m.path + ": stage " + in_quotes(s.name);
    if (s.description.has_input && s.inputs.empty())
      throw usage_error(where + ": \"inputs\" is empty, but " + s.program() + " reads an input");
    if (!s.description.has_input && !s.inputs.empty())
      throw usage_error(where + ": " + s.program() + " takes no input, but \"inputs\" lists " + join(s.inputs, ", "));
    if (!s.description.has_output) {
      if (auto consumers = m.consumers_of(i); !consumers.empty())
        throw usage_error(where + ": " + s.program() + " has no output, but stage " +
                          in_quotes(m.stages[consumers.front()].name) + " reads it");
    }
    s.option_args = stage_option_args(s.description, s.options, where);
  }
}

stage_description stage_description_parse(const std::string &text, const std::string &program) {
  std::string where = program + " --describe";
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception &e) {  // parse_error, and out_of_range for a number like 1e309
    throw usage_error(where + " did not print JSON: " + json_error_text(e));
  }
  if (!doc.is_object()) throw usage_error(where + " printed " + json_kind(doc) + ", not an object");

  // Unknown keys are ignored here: newer stages may describe more (record kinds, ranges).
  auto text_of = [&](const json &object, const char *key, bool required, const std::string &in) -> std::string {
    auto v = object.find(key);
    if (v == object.end()) {
      if (required) throw usage_error(where + ": " + in + "missing " + in_quotes(key));
      return "";
    }
    if (!v->is_string()) throw usage_error(where + ": " + in + in_quotes(key) + " must be a string");
    return v->get<std::string>();
  };
  auto flag_of = [&](const char *key) {
    auto v = doc.find(key);
    if (v == doc.end()) return true;
    if (!v->is_boolean()) throw usage_error(where + ": " + in_quotes(key) + " must be true or false");
    return v->get<bool>();
  };

  stage_description d;
  d.stage = text_of(doc, "stage", true, "");
  d.summary = text_of(doc, "summary", false, "");
  d.has_input = flag_of("input");
  d.has_output = flag_of("output");
  if (auto options = doc.find("options"); options != doc.end()) {
    if (!options->is_array()) throw usage_error(where + ": \"options\" must be an array");
    for (size_t i = 0; i < options->size(); ++i) {
      const auto &o = (*options)[i];
      std::string in = "options[" + std::to_string(i) + "]: ";
      if (!o.is_object()) throw usage_error(where + ": " + in + "must be an object");
      stage_option_spec spec;
      spec.name = text_of(o, "name", true, in);
      spec.type = text_of(o, "type", true, in);
      spec.default_value = text_of(o, "default", false, in);
      spec.doc = text_of(o, "doc", false, in);
      static const std::set<std::string> types{"string", "int", "float", "bool", "list"};
      if (!types.count(spec.type))
        throw usage_error(where + ": option " + in_quotes(spec.name) + " has unknown type " + in_quotes(spec.type));
      for (const char *bound : {"min", "max"}) {
        auto v = o.find(bound);
        if (v == o.end()) continue;
        if (!v->is_number()) throw usage_error(where + ": " + in + in_quotes(bound) + " must be a number");
        (std::string(bound) == "min" ? spec.min : spec.max) = v->get<double>();
      }
      if (auto v = o.find("choices"); v != o.end()) {
        if (!v->is_array() || !std::all_of(v->begin(), v->end(), [](const json &c) { return c.is_string(); }))
          throw usage_error(where + ": " + in + "\"choices\" must be an array of strings");
        for (const auto &c : *v) spec.choices.push_back(c.get<std::string>());
      }
      if (auto v = o.find("required"); v != o.end()) {
        if (!v->is_boolean()) throw usage_error(where + ": " + in + "\"required\" must be true or false");
        spec.required = v->get<bool>();
      }
      // The default is checked as a manifest value would be: a stage whose table contradicts
      // itself (a default outside its own range or choices, "abc" for an int) is refused before
      // it starts.
      if (!spec.default_value.empty())
        stage_option_check(spec, spec.default_value, where + ": option " + in_quotes(spec.name) + " default");
      d.options.push_back(std::move(spec));
    }
  }
  return d;
}

std::string manifest_stage_binary(const manifest_stage &s, const std::string &bin_dir) {
  if (!s.exec.empty()) return s.exec;
  return (std::filesystem::path(bin_dir) / ("tprobe-" + s.verb)).string();
}

stage_description stage_describe_binary(const std::string &binary, const std::string &context,
                                        const std::vector<std::string> *env) {
  // access() first: its errno says "No such file" or "Permission denied" plainly.
  if (::access(binary.c_str(), X_OK) != 0)
    throw usage_error(context + ": unable to execute " + binary + ": " + std::strerror(errno));
  std::error_code ignored;
  if (std::filesystem::is_directory(binary, ignored))
    throw usage_error(context + ": unable to execute " + binary + ": " + std::strerror(EISDIR));

  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw system_error_from_errno("create", "a pipe", errno);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  std::string describe_flag = "--describe";
  char *argv[] = {const_cast<char *>(binary.c_str()), describe_flag.data(), nullptr};
  std::vector<char *> envp;
  if (env) {
    for (const auto &e : *env) envp.push_back(const_cast<char *>(e.c_str()));
    envp.push_back(nullptr);
  }
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv, env ? envp.data() : environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    throw usage_error(context + ": unable to execute " + binary + ": " + std::strerror(rc));
  }

  std::string text;
  char buffer[4096];
  for (;;) {
    ssize_t n = ::read(out[0], buffer, sizeof buffer);
    if (n > 0) {
      text.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw usage_error(context + ": " + binary + " --describe " + describe_status(status));
  try {
    return stage_description_parse(text, binary);
  } catch (const usage_error &e) {
    throw usage_error(context + ": " + e.what());
  }
}

stage_describer manifest_binary_describer(const std::string &bin_dir, const std::vector<std::string> *env) {
  return [bin_dir, env](const manifest_stage &s) {
    return stage_describe_binary(manifest_stage_binary(s, bin_dir), "stage " + in_quotes(s.name), env);
  };
}

std::string manifest_input_endpoint(const std::string &run_dir, const std::string &stage_name) {
  return "ipc://" + run_dir + "/" + stage_name + ".in";
}

std::string manifest_tap_endpoint(const std::string &run_dir, const std::string &stage_name) {
  return "ipc://" + run_dir + "/" + stage_name + ".tap";
}

std::vector<std::string> manifest_stage_argv(const manifest &m, size_t i, const std::string &run_dir,
                                             const std::string &bin_dir) {
  const auto &s = m.stages.at(i);
  std::vector<std::string> argv{manifest_stage_binary(s, bin_dir)};
  if (s.description.has_input) {
    argv.insert(argv.end(), {"--input", manifest_input_endpoint(run_dir, s.name)});
    size_t producers = s.reads_capture() ? 0 : s.inputs.size();
    argv.insert(argv.end(), {"--producers", std::to_string(producers)});
  }
  if (s.description.has_output) {
    for (size_t consumer : m.consumers_of(i))
      argv.insert(argv.end(), {"--output", manifest_input_endpoint(run_dir, m.stages[consumer].name)});
  }
  // Every stage has a tap: a sink's shows what it consumes (stage_io).
  argv.insert(argv.end(), {"--tap", manifest_tap_endpoint(run_dir, s.name)});
  argv.insert(argv.end(), {"--ready-fd", "3"});
  argv.insert(argv.end(), s.option_args.begin(), s.option_args.end());
  return argv;
}

}  // namespace tprobe
