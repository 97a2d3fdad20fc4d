// synth.h: the synthetic source stage (tprobe-synth), GStreamer's fakesrc for tprobe.
//
// Sends what a capture session sends, with data made up from a seed, so that pipelines and stages
// can be exercised without a training process:
//
//   session                      meta: task, level, framework, dump_path, rank, … (what the
//                                writer needs), producer "tprobe-synth", seed
//   per step s (--steps), its share of the --records tensor records:
//     entry  Torch.add.{n}.forward          (with --entry-records) meta {stack, parent: null}
//     tensor Torch.add.{n}.forward input.0  shape [size], dtype and data below, with its payload
//     tensor Torch.add.{n}.forward output.0
//     …
//     step_end
//   eos (records = every record sent)
//
// Tensor record t (0-based over the run) takes sizes[t % |sizes|] elements of dtypes[t % |dtypes|],
// filled from a generator seeded by (seed, t): the same options give the same bytes. --pattern puts
// NaN / +Inf / -Inf elements into every --every-th tensor record of a floating or complex dtype
// (record t is chosen when (t + 1) % every == 0); "mixed" puts one NaN, one +Inf and one -Inf.
// Records go out as fast as the consumer takes them, or at --rate records per second.
//
// Run as a manifest stage (no input), or as the command of `tprobe run` in place of a training
// script: without --output it sends to $TPROBE_ENDPOINT, as the capture does.
//
// Example launch line:
//   tprobe-synth --output ipc:///tmp/run/stats.in --records 1000 --steps 2 --dtypes float32,bfloat16
// Example manifest stage:
//   {"name": "synth", "stage": "synth", "options": {"records": 1000, "pattern": "nan", "every": 10}}
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "stage_io.h"
#include "stage_main.h"

namespace tprobe {

// Where NaN and Inf appear in the chosen tensor records.
enum class synth_pattern : uint8_t { normal, nan, inf, neginf, mixed };
std::string_view synth_pattern_name(synth_pattern p);
// Throws usage_error naming the allowed names.
synth_pattern synth_pattern_parse(std::string_view name);

struct synth_stage_options {
  uint64_t records = 100;                    // tensor records in the whole run
  uint64_t steps = 1;                        // steps the tensor records are spread over (≥ 1)
  std::vector<uint64_t> sizes{16};           // element counts, cycled over the tensor records
  std::vector<dtype> dtypes{dtype::float32}; // element types, cycled over the tensor records
  synth_pattern pattern = synth_pattern::normal;
  uint64_t every = 1;                        // pattern in every `every`-th tensor record (≥ 1)
  double rate = 0;                           // records per second; 0 = as fast as possible
  uint64_t seed = 1;
  bool save = false;                         // RECORD_FLAG_SAVE on every tensor (task tensor implies it)
  bool entry_records = true;                 // an entry record before each entry's tensors
  std::string task;                          // session meta: statistics | tensor; "" = statistics
  std::string dump_path;                     // session meta; "" = not announced
  int32_t rank = -1;                         // header rank and session meta; -1 = not distributed
  std::string label;                         // session meta label (a manifest run's name); "" = none
};

struct synth_stage_result {
  uint64_t records = 0;        // records sent (session, entry, tensor, step_end)
  uint64_t tensors = 0;
  uint64_t entries = 0;        // entry records
  uint64_t steps = 0;          // step_end records
  uint64_t special = 0;        // tensors that got NaN/Inf elements from --pattern
  uint64_t payload_bytes = 0;  // tensor data sent
  bool interrupted = false;    // a signal ended the run early (eos still sent)
};

const stage_description &synth_stage_description();

// Command-line text → values. Throw usage_error naming the bad element.
std::vector<dtype> synth_parse_dtypes(const std::vector<std::string> &names);
std::vector<uint64_t> synth_parse_sizes(const std::vector<std::string> &texts);

// For synth run as `tprobe run`'s command, in place of a capture: what the capture takes from the
// launcher's environment. $TPROBE_ENDPOINT (comma-separated) becomes the outputs when none is
// given; $TPROBE_TASK and $TPROBE_DUMP_PATH fill task and dump_path when those are empty;
// $TPROBE_RUN_LABEL the label. Then the defaults: task "statistics", dump_path "./dump"; the dump
// path is made absolute, since the writer may run in another directory. `env` is getenv.
void synth_apply_environment(synth_stage_options &options, std::vector<std::string> &outputs,
                             const std::function<const char *(const char *)> &env);

// Checks option values that the parser cannot (steps ≥ 1, every ≥ 1, rate ≥ 0, sizes and dtypes
// not empty, task). Throws usage_error.
void synth_check(const synth_stage_options &options);

// Tensor record `index` of the run, whole: header (entry and slot from its place in `step`,
// `index_in_step`), payload and flags, without seq. synth_run sends exactly these; tests rebuild
// them to check what arrived.
record synth_tensor(const synth_stage_options &options, uint64_t index, int64_t step, uint64_t index_in_step);
// Whether tensor record `index` gets NaN/Inf from the pattern (its dtype must be floating/complex).
bool synth_is_special(const synth_stage_options &options, uint64_t index);
// The tensor records of step `step` are [synth_step_begin(step), synth_step_begin(step + 1)).
uint64_t synth_step_begin(const synth_stage_options &options, uint64_t step);
// Records synth_run sends when not interrupted (session + entries + tensors + step_ends).
uint64_t synth_total_records(const synth_stage_options &options);

// Sends the run described above on io's outputs, then finishes them (eos). A signal stops it
// early; eos is still sent. Throws system_error on a transport failure.
synth_stage_result synth_run(stage_io &io, const synth_stage_options &options);

}  // namespace tprobe
