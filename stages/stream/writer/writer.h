// writer.h: the dump writer stage (tprobe-writer).
//
// Turns records into msprobe's dump layout (docs/msprobe-compat.md §2):
//
//   {dump_path}/step{S}/rank{R}/dump.json        statistics and structure of every entry
//                              /stack.json       call stacks, identical stacks deduplicated
//                              /construct.json   entry → parent module (L0 and mix; {} at L1)
//                              /dump_tensor_data/{entry}.{slot}.npy   saved tensors
//                                              (.pt, torch.save's format, when the session's
//                                              tensor_format is "pt": core/torch_save.h)
//
// R is the producer's rank; the folder is plain "rank" when the producer is not distributed.
// dump_path comes from --dump-path or else from the producer's session record (its config).
//
// Durability: tensor files are written when their record arrives; the three JSON files are
// rewritten atomically (temporary file + rename) at most every --flush-interval seconds while
// records arrive, on a flush or step_end record, and at the end. A pipeline killed at any point
// therefore leaves JSON files that parse and describe everything received up to the last rewrite.
// A step folder's three JSON files that an earlier run left there are removed when this writer's
// first record for that folder arrives (a rerun into the same dump path), not replaced at the
// step's end: unlinking them is work the step's barrier would otherwise wait for. For the same
// reason the temporaries of a folder's next rewrite (".dump.json.tmp.PID.N" and the like) are
// created when the folder is made and after each timed rewrite, not when the step ends; a writer
// killed mid-step may leave them there, empty, beside files that still parse.
// Rank folders have one writer at a time: the folders of each rank it writes in a dump path are
// locked (a record lock on one byte per rank of DUMP/.tprobe-writer.lock) from its first record
// for that rank until writer_run returns; another writer holding them is a system_error naming
// it. Folders of those ranks that this writer did not write (an earlier, longer run's) are left
// in place and listed in writer_stage_result::earlier_run_folders.
// Directories are created 0750 and files 0640; paths outside msprobe's character set are refused
// and no symbolic link inside the dump tree is followed.
//
// Example launch line:
//   tprobe-writer --input ipc:///tmp/run/writer.in --dump-path ./dump
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stage_io.h"
#include "stage_main.h"

namespace tprobe {

struct writer_stage_options {
  std::string dump_path;         // "" = from the session record
  double flush_interval = 2.0;   // seconds between JSON rewrites while records arrive
};

struct writer_stage_result {
  uint64_t records = 0;
  uint64_t entries = 0;        // dump entries created
  uint64_t tensor_files = 0;   // .npy or .pt files written
  uint64_t tensor_bytes = 0;   // bytes of tensor data written
  uint64_t json_rewrites = 0;  // atomic rewrites of dump.json files
  uint64_t dumps = 0;          // (step, rank) folders written
  uint64_t stats_computed = 0;  // tensors that arrived with data and without statistics (no tprobe-stats upstream)
  // Records that could not be placed (a list index past 2^20, a slot clashing with what its entry
  // holds, a tensor file name outside msprobe's set, …): each a line of its folder's
  // dump_error_info.log, the rest of the stream dumped all the same. main exits 100 when any.
  uint64_t records_refused = 0;
  std::string first_refusal;
  // Step folders of the dump path(s) that this run did not write, left there by an earlier run
  // ("DUMP/step7", or "DUMP/step0/rank1" beside a rank this run wrote): main names them, since a
  // compare of the dump would take them for this run's.
  std::vector<std::string> earlier_run_folders;
};

const stage_description &writer_stage_description();

// Runs until end-of-stream (or a signal), writing every file; throws usage_error for a bad path or
// a record that names a file outside the dump tree, system_error for an I/O failure (files written
// so far are complete and parse).
writer_stage_result writer_run(stage_io &io, const writer_stage_options &options);

// How the writer's stage_io should decode (stage_io_options::decode): a value record's meta as
// its msgpack bytes, which the writer renders straight into dump.json. writer_run takes records
// decoded either way.
inline constexpr record_decode_options writer_decode_options{.value_meta_as_msgpack = true};

}  // namespace tprobe
