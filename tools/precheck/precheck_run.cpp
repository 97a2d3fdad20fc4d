#include "precheck_run.h"

#include <malloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "api_call.h"
#include "dtype.h"
#include "errors.h"
#include "precheck_verdict.h"
#include "pyjson.h"
#include "safe_path.h"
#include "stage_main.h"
#include "torch_save.h"

namespace tprobe::precheck {

namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

// msprobe's unsupported_api_list, always on the black list (§7.2).
constexpr std::string_view unsupported_apis[] = {"to", "empty", "empty_like", "empty_strided", "new_empty",
                                                 "new_empty_strided", "empty_with_format"};

std::vector<std::string> string_list(const json &section, const char *key, const std::string &where) {
  std::vector<std::string> out;
  if (!section.contains(key)) return out;
  const json &v = section[key];
  if (!v.is_array()) throw usage_error(fmt::format("{}: field \"{}\" must be a list of API names", where, key));
  for (const auto &item : v) {
    if (!item.is_string() || item.get<std::string>().empty())
      throw usage_error(fmt::format("{}: field \"{}\" must be a list of API names, got {}", where, key, item.dump()));
    out.push_back(item.get<std::string>());
  }
  return out;
}

// The arguments of a call without their Max/Min (msprobe's -f key).
json without_extremes(json v) {
  if (v.is_array()) {
    for (auto &e : v) e = without_extremes(e);
  } else if (v.is_object()) {
    v.erase("Max");
    v.erase("Min");
    for (auto &[k, e] : v.items()) e = without_extremes(e);
  }
  return v;
}

// msprobe's UtDataProcessor.save_tensors_in_element: {full}.{part}.{index}.pt, None and scalars
// taking an index too.
void save_part(const std::string &dir, const std::string &full_name, const char *part,
               const std::vector<at::Tensor> &tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) continue;
    const at::Tensor t = tensors[i].detach().cpu().contiguous();
    const auto type = tprobe_dtype(t.scalar_type());
    if (!type) continue;
    const auto shape = t.sizes().vec();
    torch_save_write(fmt::format("{}/{}.{}.{}.pt", dir, full_name, part, i), *type, shape,
                     std::span<const std::byte>(static_cast<const std::byte *>(t.data_ptr()), t.nbytes()));
  }
}

// Whether a white/black list name is an API tprobe knows: an ATen operator, or a Python name that
// api_call.h maps to one (msprobe's own lists also name NPU fused operators: npu_*).
bool api_name_known(const std::string &name) {
  static std::once_flag once;
  static std::set<std::string> operators;
  std::call_once(once, [] {
    for (const auto &op : c10::Dispatcher::singleton().getAllOpNames())
      if (op.name.starts_with("aten::")) operators.insert(op.name);
  });
  if (name.starts_with("npu_")) return true;
  for (const char *prefix : {"Functional.", "Tensor.", "Torch."}) {
    const normalized_call call = normalize_call(prefix + name + ".0", json::object());
    if (!call.skip && operators.count(call.op)) return true;
  }
  return false;
}

bool is_dump_json(const fs::path &p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

}  // namespace

precheck_lists precheck_lists_load(const std::string &config_path) {
  const json doc = pyjson_load_file(config_path);
  if (!doc.is_object()) throw usage_error(config_path + ": not a JSON object");
  const char *key = doc.contains("acc_check") ? "acc_check" : "run_ut";
  precheck_lists lists;
  if (!doc.contains(key)) return lists;
  const json &section = doc[key];
  const std::string where = fmt::format("{}: section \"{}\"", config_path, key);
  if (!section.is_object()) throw usage_error(where + " must be an object");
  for (const auto &[k, v] : section.items())
    if (k != "white_list" && k != "black_list" && k != "error_data_path")
      throw usage_error(fmt::format("{}: unknown field \"{}\" (white_list, black_list, error_data_path)", where, k));
  lists.white_list = string_list(section, "white_list", where);
  lists.black_list = string_list(section, "black_list", where);
  // msprobe refuses a name it does not wrap ("Invalid api in white_list"): a typo would otherwise
  // skip every API and pass.
  for (const char *key : {"white_list", "black_list"}) {
    std::vector<std::string> unknown;
    for (const auto &name : key[0] == 'w' ? lists.white_list : lists.black_list)
      if (!api_name_known(name)) unknown.push_back(name);
    if (!unknown.empty())
      throw usage_error(fmt::format("{}: field \"{}\": no such API: {} (bare names of ATen operators or of "
                                    "torch.nn.functional/torch.Tensor APIs: linear, conv2d, __add__)",
                                    where, key, fmt::join(unknown, ", ")));
  }
  if (section.contains("error_data_path")) {
    if (!section["error_data_path"].is_string())
      throw usage_error(where + ": field \"error_data_path\" must be a path");
    lists.error_data_path = section["error_data_path"].get<std::string>();
    std::error_code ec;
    if (!fs::is_directory(lists.error_data_path, ec))
      throw usage_error(fmt::format("{}: field \"error_data_path\": {} is not a folder", where, lists.error_data_path));
  }
  return lists;
}

void precheck_tune_allocator() {
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_TOP_PAD, 256 << 20);
}

const std::vector<stage_option_spec> &precheck_run_option_specs() {
  static const std::vector<stage_option_spec> specs{
      {"config", "string", "", "msprobe config.json whose run_ut (or acc_check) section gives white_list, "
                               "black_list, error_data_path"},
      {"save-error-data", "bool", "false", "save the tensors of APIs that are not pass (ut_error_data{ts}/)"},
      {"filter-duplicates", "bool", "false", "drop a call whose API and arguments (but Max/Min) an earlier call had"},
      {"msprobe-version", "string", "8.3.3", "the msprobe whose standards and spellings to follow", {}, {}, {},
       {"8.3.3", "head"}},
      {"seed", "int", "1234", "seed of the random inputs of a statistics dump", 0, 4294967295.0},
  };
  return specs;
}

precheck_options precheck_run_options_of(const stage_option_values &values) {
  precheck_options o;
  o.save_error_data = values.flag("save-error-data");
  o.filter_duplicates = values.flag("filter-duplicates");
  o.standard = dialect_parse(values.text("msprobe-version"));
  o.replay.seed = static_cast<uint64_t>(values.integer("seed"));
  if (!values.text("config").empty()) o.lists = precheck_lists_load(values.text("config"));
  return o;
}

status api_status(const result_row &row) {
  const status f = row.forward;
  const status b = row.backward.value_or(status::skip);
  if (f == status::error || b == status::error) return status::error;
  if (f == status::warning || b == status::warning) return status::warning;
  if (f == status::pass || b == status::pass) return status::pass;
  return status::skip;
}

precheck_run::precheck_run(precheck_options options, const fs::path &out_dir)
    : options_(std::move(options)),
      files_(options_.resume_csv.empty() ? precheck_files(out_dir, timestamp_now(), options_.standard)
                                         : precheck_files::resume(options_.resume_csv, options_.standard)) {
  for (const auto api : unsupported_apis) options_.lists.black_list.emplace_back(api);
}

bool precheck_run::wanted(const std::string &full_name, const json &forward) {
  if (files_.done().count(full_name)) return false;
  if (!options_.filter_duplicates) return true;
  const auto dot = full_name.rfind('.');
  const std::string key = full_name.substr(0, dot) + "\n" +
                          without_extremes(forward.value("input_args", json::array())).dump() + "\n" +
                          forward.value("input_kwargs", json::object()).dump();
  return seen_.insert(key).second;
}

std::string precheck_run::error_data_dir() const {
  return (fs::path(options_.lists.error_data_path) / ("ut_error_data" + files_.ts())).string();
}

api_judgement precheck_run::check(const std::string &full_name, const json &forward, const json *backward,
                                  tensor_source &source) {
  const auto parts = api_name_split(full_name);
  if (parts) {
    const auto &black = options_.lists.black_list;
    const auto &white = options_.lists.white_list;
    const bool black_listed = std::find(black.begin(), black.end(), parts->api) != black.end();
    const bool not_white = !white.empty() && std::find(white.begin(), white.end(), parts->api) == white.end();
    if (black_listed || not_white) {
      api_replay skipped;
      skipped.full_name = full_name;
      skipped.skip_reason = "API " + parts->api + " in black list or not in white list. SKIP.";
      return judge_api(skipped, options_.standard);
    }
  }
  replay_tensors kept;
  const api_replay replay =
      replay_api(full_name, forward, backward, source, options_.replay, options_.save_error_data ? &kept : nullptr);
  api_judgement judgement = judge_api(replay, options_.standard);
  judge_against_rounding(judgement, replay, options_.standard);
  const status s = api_status(judgement.result);
  if (options_.save_error_data && (s == status::error || s == status::warning)) {
    const std::string dir = error_data_dir();
    safe_mkdirs(dir);
    save_part(dir, full_name, "forward.input", kept.forward_input);
    save_part(dir, full_name, "forward.output.bench", kept.forward_output_bench);
    save_part(dir, full_name, "forward.output.device", kept.forward_output_device);
    save_part(dir, full_name, "backward.input", kept.backward_input);
    save_part(dir, full_name, "backward.output.bench", kept.backward_output_bench);
    save_part(dir, full_name, "backward.output.device", kept.backward_output_device);
  }
  return judgement;
}

void precheck_run::write(const api_judgement &judgement) {
  files_.write(judgement);
  const result_row &row = judgement.result;
  const status s = api_status(row);
  switch (s) {
    case status::pass: ++counts_.pass; break;
    case status::warning: ++counts_.warning; break;
    case status::error: ++counts_.error; break;
    case status::skip: ++counts_.skip; break;
  }
  if ((s == status::error || s == status::warning) && !counts_.first_not_pass) {
    std::string why;
    for (const auto &d : judgement.details) {
      if (d.verdict != s) continue;
      std::string message = d.message;
      std::replace(message.begin(), message.end(), '\n', ' ');
      while (!message.empty() && message.front() == ' ') message.erase(0, 1);
      while (!message.empty() && message.back() == ' ') message.pop_back();
      why = fmt::format("{} {}: {}", d.api_name, s == status::error ? "error" : "warning", message);
      break;
    }
    counts_.first_not_pass = why.empty() ? row.api_name : fmt::format("{} ({})", row.api_name, why);
  }
}

std::vector<std::string> precheck_dump_files(const std::string &dump) {
  std::error_code ec;
  const fs::path p(dump);
  if (!fs::exists(p, ec)) throw system_error(fmt::format("unable to open {}: No such file or directory", dump));
  if (!fs::is_directory(p, ec)) return {dump};
  if (is_dump_json(p / "dump.json")) return {(p / "dump.json").string()};
  std::vector<std::string> files;
  for (const auto &e : fs::directory_iterator(p, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.starts_with("rank") && is_dump_json(e.path() / "dump.json"))
      files.push_back((e.path() / "dump.json").string());
  }
  if (ec) throw system_error(fmt::format("unable to read {}: {}", dump, ec.message()));
  if (files.empty())
    throw usage_error(dump + ": no dump.json here nor in rank folders (give a dump.json, a rank folder or a step folder)");
  std::sort(files.begin(), files.end());
  return files;
}

precheck_offline_report precheck_offline(const precheck_offline_options &o,
                                         const std::function<void(const std::string &, const api_judgement &)> &on_failure) {
  precheck_offline_report report;
  const auto dumps = precheck_dump_files(o.dump);
  if (!o.run.resume_csv.empty() && dumps.size() > 1)
    throw usage_error(o.dump + ": -csv_path resumes one dump.json; this step folder holds " + std::to_string(dumps.size()));
  const unsigned jobs = std::max(1u, o.jobs);
  if (jobs > 1) at::set_num_threads(1);  // parallel over APIs, not inside each operator
  for (const auto &dump_json : dumps) {
    const json doc = pyjson_load_file(dump_json);
    if (!doc.is_object() || !doc.contains("data") || !doc["data"].is_object())
      throw usage_error(dump_json + ": not a dump.json (no \"data\" object)");
    const std::string framework = doc.value("framework", "pytorch");
    if (framework != "pytorch" && framework != "pt")
      throw usage_error(fmt::format("{}: framework \"{}\": tprobe precheck replays PyTorch dumps", dump_json, framework));
    const json &data = doc["data"];
    std::vector<std::pair<std::string, const json *>> forwards;
    std::map<std::string, const json *> backwards;
    for (const auto &[key, value] : data.items()) {
      if (key.find("Module") != std::string::npos) continue;
      if (key.ends_with(".forward")) forwards.emplace_back(key.substr(0, key.size() - 8), &value);
      else if (key.ends_with(".backward")) backwards[key.substr(0, key.size() - 9)] = &value;
      else
        throw usage_error(fmt::format("{}: entry \"{}\" is neither NAME.forward nor NAME.backward", dump_json, key));
    }
    // A dump's tensors: dirname(dump.json)/dump_tensor_data when the dump says it has some.
    const bool has_data = doc.contains("dump_data_dir") && !doc["dump_data_dir"].is_null() &&
                          !(doc["dump_data_dir"].is_string() && doc["dump_data_dir"].get<std::string>().empty());
    const std::string tensor_dir = has_data ? (fs::path(dump_json).parent_path() / "dump_tensor_data").string() : "";
    fs::path out_dir = o.output_dir;
    if (dumps.size() > 1) out_dir /= fs::path(dump_json).parent_path().filename();
    safe_mkdirs(out_dir.string());
    precheck_run run(o.run, out_dir);

    std::vector<std::pair<std::string, const json *>> todo;
    for (const auto &f : forwards)
      if (run.wanted(f.first, *f.second)) todo.push_back(f);

    // Workers replay in parallel; rows are written in file order as they complete.
    std::vector<std::optional<api_judgement>> done(todo.size());
    std::vector<std::exception_ptr> thrown(todo.size());  // an I/O error of one API stops the run
    std::mutex mutex;
    std::condition_variable ready;
    std::atomic<size_t> next{0};
    auto worker = [&] {
      dump_folder_source source(tensor_dir);
      for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
        const auto it = backwards.find(todo[i].first);
        std::optional<api_judgement> j;
        std::exception_ptr error;
        try {
          j = run.check(todo[i].first, *todo[i].second, it == backwards.end() ? nullptr : it->second, source);
        } catch (...) {
          error = std::current_exception();
        }
        std::lock_guard lock(mutex);
        done[i] = error ? std::optional<api_judgement>(api_judgement{}) : std::move(j);
        thrown[i] = error;
        ready.notify_one();
      }
    };
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < jobs; ++t) threads.emplace_back(worker);
    std::exception_ptr failure;
    try {
      for (size_t i = 0; i < todo.size(); ++i) {
        std::unique_lock lock(mutex);
        ready.wait(lock, [&] { return done[i].has_value(); });
        if (thrown[i]) std::rethrow_exception(thrown[i]);
        api_judgement j = std::move(*done[i]);
        done[i].reset();
        lock.unlock();
        run.write(j);
        const status s = api_status(j.result);
        if (on_failure && (s == status::error || s == status::warning)) on_failure(dump_json, j);
      }
    } catch (...) {
      failure = std::current_exception();
      next = todo.size();
    }
    for (auto &t : threads) t.join();
    if (failure) std::rethrow_exception(failure);
    const auto &c = run.counts();
    report.counts.pass += c.pass;
    report.counts.warning += c.warning;
    report.counts.error += c.error;
    report.counts.skip += c.skip;
    if (!report.counts.first_not_pass && c.first_not_pass)
      report.counts.first_not_pass = dumps.size() > 1 ? fs::path(dump_json).parent_path().filename().string() + " " +
                                                            *c.first_not_pass
                                                      : *c.first_not_pass;
    report.files.push_back({dump_json, run.files().result_path().string(), run.files().details_path().string()});
  }
  return report;
}

}  // namespace tprobe::precheck
