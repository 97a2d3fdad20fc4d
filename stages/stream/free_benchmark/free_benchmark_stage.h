// free_benchmark_stage.h: tprobe-free-benchmark, the stage that writes msprobe's free_benchmark.csv
// from the rows the capture sends (transport/free_benchmark_record.h: one record per API call whose
// perturbed output parted from the original; the perturbation and the comparison ran in the
// training process, core/free_benchmark.h):
//   {dump_path}/step{N}/rank{R}/free_benchmark.csv
// N is the row's step; the folder is rank{R} for the record's rank R, "rank" when the producer is
// not distributed (its rank -1: msprobe's folder without a number, while the row's rank column
// says 0). dump_path is the session's (its record's meta "dump_path") unless --dump-path is given;
// with --dump-path no session record is needed.
//
// As msprobe's DataWriter.write_data_to_csv (json_writer.py, 8.3.3): a row is appended the moment
// it arrives (one write() per row, O_APPEND), in arrival order; a file that does not exist is
// created with mode 0640 and the header first; an existing file (an earlier run in the same place)
// is appended to, without a second header, and keeps its mode. One difference: an existing but
// empty file gets the header too (msprobe would leave a header-less file that no csv reader can
// name). CRLF line ends, no BOM, csv.writer's quoting (core/free_benchmark.h). Like msprobe's
// FileOpen, a symbolic link, something that is not a regular file, and a file others may write are
// refused.
//
// Every record is passed on (io.send), so the stage can be tapped, chained or recorded. Each row
// is also printed on `log` as it arrives, one line:
//   tprobe-free-benchmark: step 2 rank 0 Torch.matmul.40.forward: max_rel 0.022563696 (torch.float16, torch.Size([4096, 4, 192]))
// with ", output 1" after the shape for an element of a list output, "max_rel symbol_flipping",
// and "inconsistent with the CPU (to_cpu: no max_rel)" for pert_mode to_cpu's rows. The rank is
// the row's.
//
// Example manifest (pipelines/free_benchmark.json):
//   {"capture": {"task": "free_benchmark"},
//    "stages": [{"name": "fuzz", "stage": "free-benchmark", "inputs": ["capture"]}]}
// Example launch line:
//   tprobe-free-benchmark --input ipc:///tmp/run/fuzz.in --producers 1
//
// Errors: framing_error for a malformed free_benchmark record, usage_error for a row before its
// session (without --dump-path), a dump_path msprobe would refuse (core/safe_path.h), a symbolic
// link or a foreign file where the csv goes; system_error for files.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "free_benchmark.h"
#include "stage_io.h"
#include "stage_main.h"

namespace tprobe {

struct free_benchmark_stage_options {
  std::string dump_path;     // "" = each session's dump_path
  std::FILE *log = nullptr;  // one line per row as it arrives (nullptr: none)
};

struct free_benchmark_stage_result {
  uint64_t records = 0;  // records received
  uint64_t rows = 0;     // free_benchmark rows written
  uint64_t files = 0;    // distinct csv files written to
  uint64_t created = 0;  // of them, created by this run (the others were appended to)
  std::vector<std::string> csv_paths;  // every csv written to, in the order of its first row
};

const stage_description &free_benchmark_stage_description();
free_benchmark_stage_result free_benchmark_stage_run(stage_io &io, const free_benchmark_stage_options &o);

// The stderr line of one row, without the trailing newline (above).
[[nodiscard]] std::string free_benchmark_stage_line(const free_benchmark_row &row);

// Appends `lines` (csv text, each CRLF-terminated) to `path` as one write, after the header when
// the file is new or empty (msprobe's write_data_to_csv, above). Returns true when it created the
// file. Throws usage_error for a link, a non-regular or others-writable file; system_error for I/O.
bool free_benchmark_csv_append(const std::string &path, const std::string &lines);

}  // namespace tprobe
