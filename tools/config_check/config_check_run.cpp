// config_check_run.cpp: see config_check_run.h.
#include "config_check_run.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <xlsxwriter.h>

#include "errors.h"
#include "msprobe_cli.h"
#include "pyjson.h"

extern char **environ;

namespace tprobe {
namespace {

using ojson = nlohmann::ordered_json;

std::string read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw system_error_from_errno("open", path, errno ? errno : EIO);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `argv` with stdout captured; stderr passes through. A failed start or a non-zero exit is a
// system_error naming the program.
std::string run_capture(const std::vector<std::string> &argv) {
  int fds[2];
  if (pipe(fds) != 0) throw system_error_from_errno("pipe", argv[0], errno);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::vector<char *> args;
  for (const auto &a : argv) args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    throw system_error_from_errno("run", argv[0], rc);
  }
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw system_error(fmt::format("{} failed (status {}) listing packages / loading yaml", argv[0], status));
  return out;
}

// The Python side of the pack: msprobe's collect_pip_data, and yaml.safe_load of each yaml file
// (types JSON has no text for, such as dates, become {} so that the flattening leaves them out, as
// msprobe's YamlParser skips them).
constexpr const char *pack_python = R"py(
import sys, json
try:
    import importlib.metadata as metadata
except ImportError:
    import importlib_metadata as metadata
pip = "".join(f"{d.metadata.get('Name')}={d.version}\n" for d in metadata.distributions() if d.metadata)
docs = []
for p in sys.argv[1:]:
    try:
        import yaml
        with open(p) as f:
            docs.append({"doc": yaml.safe_load(f)})
    except Exception as e:
        docs.append({"error": str(e)})
sys.stdout.write(json.dumps({"pip": pip, "yaml": docs}, default=lambda o: {}))
)py";

std::string cell_text(const ojson &v) {
  if (v.is_null()) return "None";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_float()) return py_float_repr(v.get<double>());
  return pyjson_dump(v, -1);
}

}  // namespace

const stage_description &config_check_stage_description() {
  static const stage_description d{
      "config-check",
      "msprobe's config_check: pack a training environment (env, pip, hyperparameters) or compare two packs",
      false,
      false,
      {
          {"output", "string", "", "pack: the zip (default ./config_check_pack.zip); compare: the folder (default ./config_check_result)", {}, {}, "-o"},
          {"python", "string", "python3", "pack: the Python whose packages are listed and which loads the yaml files (PyYAML)"},
      }};
  return d;
}

std::vector<std::string> config_check_translate(std::vector<std::string> args, const CLI::App &app) {
  // msprobe's framework flag (msprobe_cli.h): only pytorch, dropped.
  static constexpr msprobe_flag flags[] = {{"--framework", "", true, "", "pytorch"}};
  for (auto &a : args) {
    if (a == "-f") a = "--framework";
  }
  for (auto &a : args) {
    if (a == "-d" || a == "--dump") a = "pack";
    else if (a == "-c" || a == "--compare") a = "compare";
    else continue;
    break;  // only the first: the verb
  }
  // The verb may follow -o OUT (msprobe's order is free): move it first.
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i] == "pack" || args[i] == "compare") {
      const std::string verb = args[i];
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
      args.insert(args.begin(), verb);
      break;
    }
  return msprobe_args_translate(std::move(args), flags, known_options_of(app), "tprobe config-check");
}

void config_check_write_xlsx(const std::vector<config_sheet> &sheets, const std::string &path) {
  lxw_workbook *wb = workbook_new(path.c_str());
  if (!wb) throw system_error_from_errno("create", path, errno ? errno : EIO);
  // pandas' header cells: bold, thin border, centred.
  lxw_format *header = workbook_add_format(wb);
  format_set_bold(header);
  format_set_border(header, LXW_BORDER_THIN);
  format_set_align(header, LXW_ALIGN_CENTER);
  format_set_align(header, LXW_ALIGN_VERTICAL_TOP);
  const auto write_sheet = [&](const std::string &name, const std::vector<std::string> &cols,
                               const std::vector<std::vector<ojson>> &rows) {
    lxw_worksheet *ws = workbook_add_worksheet(wb, name.c_str());
    for (size_t c = 0; c < cols.size(); ++c) worksheet_write_string(ws, 0, static_cast<lxw_col_t>(c), cols[c].c_str(), header);
    for (size_t r = 0; r < rows.size(); ++r)
      for (size_t c = 0; c < rows[r].size(); ++c) {
        const ojson &v = rows[r][c];
        const auto R = static_cast<lxw_row_t>(r + 1);
        const auto C = static_cast<lxw_col_t>(c);
        if (v.is_null()) continue;  // pandas: None/NaN → an empty cell
        if (v.is_boolean()) worksheet_write_boolean(ws, R, C, v.get<bool>(), nullptr);
        else if (v.is_number()) worksheet_write_number(ws, R, C, v.get<double>(), nullptr);
        else worksheet_write_string(ws, R, C, cell_text(v).c_str(), nullptr);
      }
  };
  std::vector<std::vector<ojson>> summary;
  for (const auto &s : sheets) summary.push_back({s.name, s.pass_check});
  write_sheet("summary", {"filename", "pass_check"}, summary);
  for (const auto &s : sheets) write_sheet(s.name, s.header, s.rows);
  const lxw_error e = workbook_close(wb);
  if (e != LXW_NO_ERROR) throw system_error(fmt::format("unable to write {}: {}", path, lxw_strerror(e)));
}

std::vector<config_sheet> config_check_compare_run(const std::string &bench_zip, const std::string &cmp_zip,
                                                   const std::string &dir) {
  for (const auto *z : {&bench_zip, &cmp_zip})
    if (z->size() < 3 || z->compare(z->size() - 3, 3, "zip") != 0)
      throw usage_error(*z + ": not a zip pack (checkpoints are compared by `tprobe ckpt-compare A B`)");
  const config_pack bench = config_pack_read(bench_zip), cmp = config_pack_read(cmp_zip);
  auto sheets = config_check_compare(bench, cmp, bench_zip, cmp_zip);
  config_pack_extract(bench, dir + "/bench");
  config_pack_extract(cmp, dir + "/cmp");
  config_check_write_xlsx(sheets, dir + "/result.xlsx");
  return sheets;
}

std::vector<std::string> config_check_summary(const std::vector<config_sheet> &sheets) {
  std::vector<std::string> lines;
  for (const auto &s : sheets) {
    lines.push_back(fmt::format("{}: {}", s.name, s.pass_check));
    // weights, dataset and random list every pair: name only those whose verdict is not True.
    const size_t verdict = s.name == "weights" || s.name == "dataset" ? 3 : s.name == "random" ? 6 : SIZE_MAX;
    for (const auto &r : s.rows) {
      if (verdict < r.size() && r[verdict].is_boolean() && r[verdict].get<bool>()) continue;
      std::string line = "  ";
      for (size_t c = 0; c < r.size() && c < s.header.size(); ++c) {
        if (r[c].is_null() || (r[c].is_string() && r[c].get<std::string>().empty())) continue;
        std::string text = cell_text(r[c]);
        for (size_t p; (p = text.find('\n')) != std::string::npos;) text.replace(p, 1, " <- ");  // stacks: one line
        line += fmt::format("{}{}={}", line.size() > 2 ? ", " : "", s.header[c], text);
      }
      lines.push_back(line);
    }
  }
  return lines;
}

std::vector<std::string> config_check_pack_run(const std::vector<std::string> &files, const std::string &zip,
                                               const std::string &python) {
  if (zip.size() < 4 || zip.compare(zip.size() - 4, 4, ".zip") != 0)
    throw usage_error(fmt::format("output zip path must end with '.zip', got \"{}\"", zip));
  std::vector<std::string> yaml_files, regular;
  for (const auto &f : files) {
    const std::string ext = std::filesystem::path(f).extension().string();
    if (!std::filesystem::is_regular_file(f)) {
      fmt::print(stderr, "tprobe-config-check: warning: Script path {} is not a file.\n", f);
      continue;
    }
    if (ext != ".sh" && ext != ".yaml") throw usage_error(fmt::format("{}: Invalid parser type: {} (.sh or .yaml)", f, ext));
    regular.push_back(f);
    if (ext == ".yaml") yaml_files.push_back(f);
  }
  std::vector<std::string> argv = {python, "-c", pack_python};
  argv.insert(argv.end(), yaml_files.begin(), yaml_files.end());
  const ojson py = pyjson_parse(run_capture(argv), python + "'s output");

  std::vector<std::pair<std::string, std::string>> entries;
  ojson env = ojson::object();
  for (char **e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;  // Python's os.environ skips these too
    const std::string key = kv.substr(0, eq);
    if (!env.contains(key)) env[key] = kv.substr(eq + 1);
  }
  entries.emplace_back("env", pyjson_dump(env, 4));
  entries.emplace_back("pip", py.at("pip").get<std::string>());

  ojson hyper = ojson::object(), yaml_acc = ojson::object();
  size_t yaml_i = 0;
  for (const auto &f : regular) {
    ojson parsed = ojson::object();
    if (std::filesystem::path(f).extension() == ".sh") {
      parsed = config_hyperparameters_from_shell(read_file(f));
    } else {
      const ojson &r = py.at("yaml").at(yaml_i++);
      if (r.contains("error")) {
        fmt::print(stderr, "tprobe-config-check: warning: yaml parsing error, skip file path: {}, error: {}\n", f,
                   r.at("error").get<std::string>());
        continue;
      }
      config_hyperparameters_from_yaml(r.at("doc"), yaml_acc);  // msprobe's YamlParser keeps one dict
      parsed = yaml_acc;
    }
    config_update_dict(hyper, parsed);
  }
  if (!hyper.empty()) entries.emplace_back("hyperparameters/hyperparameters_static.json", pyjson_dump(hyper, 4));
  else if (!files.empty())
    fmt::print(stderr, "tprobe-config-check: warning: Failed to extract hyperparameters from script(s)\n");
  const auto parent = std::filesystem::path(zip).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) throw system_error(fmt::format("cannot create {}: {}", parent.string(), ec.message()));
  }
  config_pack_write(zip, entries);
  std::vector<std::string> names;
  for (const auto &[n, _] : entries) names.push_back(n);
  return names;
}

}  // namespace tprobe
