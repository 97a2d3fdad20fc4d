// tprobe-writer: see writer.h.
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "writer.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main(argc, argv, writer_stage_description(), [](stage_main_context &c) {
    writer_stage_options options;
    options.dump_path = c.values().text("dump-path");
    options.flush_interval = c.values().number("flush-interval");
    c.io_options().decode = writer_decode_options;
    stage_io &io = c.start();
    const auto result = writer_run(io, options);

    const auto &counts = io.counts();
    fmt::print(stderr,
               "tprobe-writer: {} records, {} entries in {} dump folders, {} tensor files ({:.1f} MB), "
               "{} producers, {} truncated, tap dropped {}{}\n",
               result.records, result.entries, result.dumps, result.tensor_files, result.tensor_bytes / 1e6,
               counts.producers, counts.truncated_producers, counts.tap_dropped, io.interrupted() ? ", interrupted" : "");
    if (const auto &left = result.earlier_run_folders; !left.empty()) {
      // Not removed: they may be wanted (a run that dumps other steps into the same path on
      // purpose); but never mixed in silently (docs/stages/writer.md).
      constexpr size_t named = 8;
      std::vector<std::string> shown(left.begin(), left.begin() + static_cast<std::ptrdiff_t>(std::min(left.size(), named)));
      fmt::print(stderr,
                 "tprobe-writer: warning: {} folder{} of this run's ranks in the dump path {} an earlier run's, not "
                 "this run's: {}{} (move them away before comparing or analysing this dump)\n",
                 left.size(), left.size() == 1 ? "" : "s", left.size() == 1 ? "is" : "are", fmt::join(shown, ", "),
                 left.size() > named ? fmt::format(", … ({} in all)", left.size()) : "");
    }
    if (result.records_refused) {
      fmt::print(stderr, "tprobe-writer: fatal: {} records could not be dumped (each in dump_error_info.log beside its "
                         "dump.json; the rest is dumped); the first: {}\n",
                 result.records_refused, result.first_refusal);
      return static_cast<int>(EXIT_USAGE);
    }
    return static_cast<int>(EXIT_OK);
  });
}
