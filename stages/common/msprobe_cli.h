// msprobe_cli.h: msprobe's command-line habits on tprobe's offline tools.
//
// A user who knows msprobe types `msprobe -f pytorch compare -i compare.json -o out -s -hl` with
// `tprobe` in msprobe's place. Every flag of that line must do what msprobe's does or be refused
// in one line; none may be read as something else (CLI11 reads "-hl" as "-h -l" and prints help,
// exit 0: a CI gate that passes without comparing).
//
// Each tool gives a table of msprobe's flags: renamed to the tprobe option that does the same
// ("-hl" → "--highlight"), taken and dropped with their value where tprobe has nothing to do
// ("-f pytorch": tprobe reads PyTorch dumps), or refused with the reason (a mapping tprobe has not
// built). msprobe_args_translate rewrites argv before the tool's parser sees it, so the parser,
// its --help and its option table stay tprobe's own. `tprobe` itself drops msprobe's leading
// "-f pytorch" and takes its verbs ("nan_analyze") before it runs the tool.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}

namespace tprobe {

struct msprobe_flag {
  std::string_view spelling;  // as msprobe's parser takes it: "-hl", "--highlight"
  std::string_view tprobe;    // the tprobe option it becomes ("--highlight"); "" = dropped
  bool takes_value = false;   // a value follows ("-dm FILE"); a dropped flag drops it too
  std::string_view refused;   // non-empty: refused, this saying why ("MindSpore's cell mapping")
  std::string_view only_value;  // a dropped flag's one accepted value ("pytorch"); "" = any
};

// One of the tool's own options (from its parser: msprobe_known_options in stage_main.h).
struct known_option {
  std::vector<std::string> spellings;  // "-o", "--output"
  bool takes_value = false;
};

// The options `app` was given (after every add_option/add_flag), for msprobe_args_translate.
[[nodiscard]] std::vector<known_option> known_options_of(const CLI::App &app);

// `args` (argv without the program) with each msprobe spelling of `table` rewritten. Refused
// flags, a dropped flag with another value than its only one, and any other option that is
// neither in `table` nor among `known` throw usage_error naming the option and the tool's own
// forms. Arguments after "--" and the values of options are left alone. `tool` names the command
// in messages ("tprobe compare").
[[nodiscard]] std::vector<std::string> msprobe_args_translate(std::vector<std::string> args,
                                                              std::span<const msprobe_flag> table,
                                                              const std::vector<known_option> &known,
                                                              std::string_view tool);

// msprobe's `-i compare.json` for compare (docs/msprobe-compat.md §4.1): {"npu_path", "bench_path",
// "stack_path" (optional), "is_print_compare_log" (optional, no effect here)}. Any other key, a
// missing path or a value of the wrong type is a usage_error naming the file and the key.
struct msprobe_compare_input {
  std::string npu_path, bench_path, stack_path;
};
[[nodiscard]] msprobe_compare_input msprobe_compare_input_load(const std::string &path);

// msprobe's `-i input.json` for graph: {"npu_path", "bench_path" (optional: build), "is_print_compare_log"
// (optional, no effect)}; "parallel_merge" is refused (not built), any other key too, naming it.
struct msprobe_graph_input {
  std::string npu_path, bench_path;
};
[[nodiscard]] msprobe_graph_input msprobe_graph_input_load(const std::string &path);

}  // namespace tprobe
