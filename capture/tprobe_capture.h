/* tprobe_capture.h: the capture API, for a training process that wants its tensors dumped.
 *
 * A session reads an msprobe-style config.json (task statistics or tensor, level, rank, step,
 * scope, list, data_mode, summary_mode, …), connects to a tprobe pipeline and publishes one record
 * per captured tensor. The training thread only filters, then either copies the tensor into a
 * bounded queue or, when its data need not leave the process, computes its statistics in place;
 * a sender thread does the rest. No I/O happens on the calling thread.
 *
 * Lifetime:
 *   tprobe_session_open → (tprobe_start → tprobe_entry_begin / tprobe_capture_* … → tprobe_stop →
 *   tprobe_step)* → tprobe_session_close
 *
 * Threading: a session may be used from one thread at a time (the training thread). Every call
 * returns a status; on TPROBE_ERROR, tprobe_last_error() holds a one-line message for this thread.
 * The caller may overwrite or free a tensor's memory as soon as the capture call returns.
 *
 * Flow control is lossless while the pipeline is alive: when the queue is full (queue_bytes), a
 * capture call waits for the sender thread, which waits for the pipeline. Nothing is dropped.
 *
 * The training process comes first. When the pipeline stops reading (its first stage or the
 * launcher is gone, or no record went through for pipeline_timeout_ms), the session *detaches*:
 * it says so once on stderr, drops what it still holds, and from then on every capture call
 * returns TPROBE_SKIPPED at once, counted in tprobe_session_counts.undelivered; tprobe_stop,
 * tprobe_step and tprobe_session_close return TPROBE_ERROR naming the reason (the dump is
 * incomplete). No call ever waits longer than pipeline_timeout_ms on a stopped pipeline.
 *
 * This header depends on DLPack only (for DLTensor); it exposes no transport library.
 * Link: -ltprobe_capture.
 */
#ifndef TPROBE_CAPTURE_H
#define TPROBE_CAPTURE_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. */
#define TPROBE_OK 0        /* done */
#define TPROBE_SKIPPED 1   /* not captured: outside the configured ranks, steps, scope, list or data_mode,
                              or the session is stopped; an expected outcome, not an error */
#define TPROBE_ERROR (-1)  /* failed: see tprobe_last_error() */

/* DLPack 0.6 has no bool code; DLPack >= 0.8 uses 6 (kDLBool). Bool tensors use it here too. */
#define TPROBE_DL_BOOL 6

/* How a tensor whose data need not leave the process is handled. */
typedef enum tprobe_stats_mode {
  TPROBE_STATS_AUTO = 0, /* statistics in place on the calling thread, only numbers are sent */
  TPROBE_STATS_COPY = 1  /* copy the data and let the statistics stage compute */
} tprobe_stats_mode;

typedef struct tprobe_open_options {
  /* Pipeline endpoint(s), comma-separated; NULL: the environment variable TPROBE_ENDPOINT, which
     `tprobe run` sets. A path without "://" writes a record file instead. */
  const char *endpoint;
  /* This process's rank, or -1 when not distributed (the dump folder is then "rank"). */
  int rank;
  /* "pytorch" (default when NULL), "mindspore" or "numpy": names dtypes and tensor types. */
  const char *framework;
  /* Bytes the queue may hold before capture calls wait; 0: 256 MiB. */
  size_t queue_bytes;
  /* Milliseconds to wait for the pipeline to answer at open; 0: 30000; -1: forever. */
  int handshake_timeout_ms;
  /* Compress payloads with LZ4 on the sender thread (worth it over tcp between hosts). */
  int lz4;
  tprobe_stats_mode stats_mode;
  /* Milliseconds a blocked send (or the end-of-stream's acknowledgement) may wait on a pipeline
     that reads nothing before the session detaches; 0: the config's tprobe.pipeline_timeout_s
     (60 s by default); -1: forever. */
  int pipeline_timeout_ms;
  /* A process on this host whose end means the pipeline is gone (the launcher); 0: the
     environment variable TPROBE_LAUNCHER_PID, which `tprobe run` sets, if any. */
  int64_t watch_pid;
  /* Nonzero: the Mean of a float16 or bfloat16 tensor is computed as torch before 2.2 computes it
     on the CPU (the sum rounded to the dtype, divided by the element count rounded to the dtype),
     so that it equals msprobe's there. The PyTorch capture sets it when its torch does so. */
  int half_mean_of_rounded_sum;
} tprobe_open_options;

/* Default options: endpoint NULL, rank -1, framework NULL, everything else 0. */
tprobe_open_options tprobe_open_options_default(void);

typedef struct tprobe_session tprobe_session;

/* Opens a session. config_path NULL: the environment variable TPROBE_CONFIG. The environment
   variables TPROBE_TASK, TPROBE_LEVEL and TPROBE_DUMP_PATH (set by a manifest's "capture" section)
   override the file. Every config field is validated; a bad one fails the call with a message
   naming the file and the field. A task tprobe does not build (run_ut, exception_dump), or one
   the pipeline's manifest cannot do (TPROBE_PIPELINE_TASKS, set by
   `tprobe run`), fails it too (core/capture_config.h, config_check_task_runs). options may be NULL (defaults). */
int tprobe_session_open(const char *config_path, const tprobe_open_options *options, tprobe_session **session);

/* Flushes the queue, sends end-of-stream and frees the session. NULL is a no-op. */
int tprobe_session_close(tprobe_session *session);

/* Capture on from here (if this rank and the current step are configured), off at stop.
   stop also asks the pipeline to bring its files up to date. */
int tprobe_start(tprobe_session *session);
int tprobe_stop(tprobe_session *session);
/* Ends the current step (its files become final) and moves to the next. */
int tprobe_step(tprobe_session *session);
int64_t tprobe_current_step(const tprobe_session *session);

/* Announces a dump entry, in call order ("Functional.linear.0.forward"), with its construct.json
   parent (NULL: none) and its call stack (stack_lines may be NULL when stack_len is 0).
   is_recompute: 0 or 1, or -1 when unknown. Returns TPROBE_OK if the entry is captured,
   TPROBE_SKIPPED if the rank, step, scope or list filters exclude it (at levels L0 and mix an
   entry the scope or list exclude still becomes a node of construct.json, as in msprobe's).
   Capture calls for an entry never announced announce it implicitly. */
int tprobe_entry_begin(tprobe_session *session, const char *entry, const char *parent,
                       const char *const *stack_lines, size_t stack_len, int is_recompute);

/* A module's forward begins (before anything inside it runs) and ends (after its own entry,
   "Module.a.B.forward.0", was announced). Needed where a scope range starts at a module (what
   runs inside it is in range) and, at level mix, for a list: while a module whose name contains
   a list element runs, every entry inside it is captured, and the backward of those later (as
   msprobe's module hooks do). Calls must nest. TPROBE_OK, or TPROBE_ERROR for an empty name. */
int tprobe_module_begin(tprobe_session *session, const char *forward_entry);
int tprobe_module_end(tprobe_session *session, const char *forward_entry);

/* What tprobe_entry_begin(entry) would answer now (TPROBE_OK: captured, TPROBE_SKIPPED: not),
   with nothing announced and no filter state changed: a caller asks before it spends work the
   entry needs only when captured (its call stack, say). TPROBE_ERROR for an empty name. */
int tprobe_entry_wanted(tprobe_session *session, const char *entry);

/* Captures one tensor of an entry. slot names its place: "input.0", "input.1.0", "kwargs.dim",
   "output.0", "parameters.weight"; for a "….parameters_grad.N" entry, the parameter name.
   Segments after the first are list indices (digits) or dict keys; a dict key that is all
   digits, empty, holds a dot or starts with an apostrophe is quoted, ' + key + ', with each '
   in it doubled: {"head.0": y, "0": z} returned by a module are "output.'head.0'" and
   "output.'0'" (dump.json gets the keys, tensor files msprobe's names, "….output.head.0").
   The same slots apply to every call below that takes one.
   The tensor must be in host memory (kDLCPU or kDLCUDAHost), any strides. */
int tprobe_capture_tensor(tprobe_session *session, const char *entry, const char *slot, const DLTensor *tensor,
                          int requires_grad);

/* tprobe_capture_tensor for a caller that can tell when a tensor's bytes are ones it captured
   before, unchanged: most of an operator's inputs are the outputs of the operator before it.
   `content` is non-zero, and two calls may pass the same value only if nothing wrote the memory
   between them (the PyTorch capture derives it from the storage and its version counter); a
   caller names new contents with increasing numbers. When the slot needs statistics only (or
   their CRC-32) and a tensor read in place under the same name, among the last 8192 names, had
   the same address, dtype and element count (a view of other shape reads the same bytes in the
   same order), its statistics are reused instead of read again (counted in stats_reused). A
   strided view (not C-contiguous) is matched against the strided views read under the same name
   (among the last 1024 names) by address, dtype, shape and strides: the same elements in the
   same order.
   content 0 promises nothing: tprobe_capture_tensor. */
int tprobe_capture_tensor_content(tprobe_session *session, const char *entry, const char *slot,
                                  const DLTensor *tensor, int requires_grad, uint64_t content);

/* tprobe_capture_tensor_content for a tensor the caller vouches is all zero bytes: an operator
   that zero-fills its result (PyTorch's zero_, zeros) has just returned it. When the slot needs
   statistics only (or their CRC-32), they are those of zeros, found from the element count
   without reading the memory (counted in stats_zeroed), and kept under `content` (if non-zero)
   like statistics that were read; a saved tensor is still copied. */
int tprobe_capture_tensor_zeroed(tprobe_session *session, const char *entry, const char *slot,
                                 const DLTensor *tensor, int requires_grad, uint64_t content);

/* Captures a non-tensor argument as its msprobe JSON leaf, e.g. {"type":"int","value":1};
   "null" for None. */
int tprobe_capture_value(tprobe_session *session, const char *entry, const char *slot, const char *json);

/* tprobe_capture_value for a caller that vouches for its text (tprobe's own PyTorch capture, whose
   leaves come from core's encoders): the training thread does not check it, and the sender thread
   parses it. Invalid JSON then breaks the session: its next call fails with the error, naming the
   entry and slot, and nothing more is sent. */
int tprobe_capture_value_unchecked(tprobe_session *session, const char *entry, const char *slot,
                                   const char *json);

/* Counters since open. */
typedef struct tprobe_session_counts {
  uint64_t records;        /* records handed to the sender thread */
  uint64_t bytes;          /* tensor bytes copied */
  uint64_t skipped;        /* capture calls filtered out */
  uint64_t waits;          /* capture calls that waited for queue space */
  uint64_t undelivered;    /* records the pipeline did not get: held when the session detached,
                              and captured after that */
  int detached;            /* 1 once the session detached from a pipeline that stopped reading */
  uint64_t shared_bytes;   /* of `bytes`, those copied into shared memory and passed by reference
                              (a consumer on this host; payloads of 64 KiB and more) */
  uint64_t shared_gave_up; /* large payloads sent over the socket because the shared ring stayed
                              full (a consumer holding on to them) */
  uint64_t stats_reused;   /* tensors whose statistics were those of the same content read just
                              before (tprobe_capture_tensor_content), not read again */
  uint64_t stats_parts_helped; /* parts (1 MiB) of large tensors read in place by the capture's
                              helper thread rather than the caller's (TPROBE_CAPTURE_THREADS: the
                              readers in all, 2 by default on 2 or more cores, 1 for none) */
  uint64_t stats_zeroed;   /* tensors whose statistics were those of zeros, not read
                              (tprobe_capture_tensor_zeroed) */
  uint64_t stats_bytes_read; /* tensor bytes read in place for statistics (the caller's thread and
                              the helper's): what neither stats_reused nor stats_zeroed spared, and
                              the least a capture of these tensors must read */
  int64_t first_step_not_dumped; /* once detached: the first step the pipeline did not get whole
                              (every later one is not dumped either); -1 while attached */
} tprobe_session_counts;
int tprobe_session_counts_get(const tprobe_session *session, tprobe_session_counts *counts);

/* Reads and validates a config as tprobe_session_open does (the environment overrides included),
   and checks that its dump_path can be created and written, without opening anything. Returns the
   effective configuration as tprobe_session_config does, or NULL with tprobe_last_error() set to a
   line naming the file and the field. Valid until the next call on the same thread. */
const char *tprobe_config_check(const char *config_path);

/* Whether `name` can be a dump entry name: it becomes part of file names (NAME.SLOT.npy), so only
   [a-zA-Z0-9_.-] and at most TPROBE_ENTRY_NAME_MAX characters. TPROBE_OK, or TPROBE_ERROR with
   tprobe_last_error() saying what is wrong. tprobe_entry_begin and the capture calls check it. */
#define TPROBE_ENTRY_NAME_MAX 200
int tprobe_entry_name_check(const char *name);

/* The message of this thread's last TPROBE_ERROR ("" if none). */
const char *tprobe_last_error(void);

/* ---- For framework captures whose tensors may live on a device (capture/torch) ---- */

/* What tprobe_capture_query reports about a slot. */
#define TPROBE_CAPTURE_SAVE 1u  /* the data is written (.npy): hand it over in host memory */
#define TPROBE_CAPTURE_CRC32 2u /* summary_mode md5: the CRC-32 of its raw bytes is wanted */

/* Decides a capture before the caller touches the tensor (which may sit on a device): returns
   TPROBE_OK with *flags set (0: only statistics are wanted, so tprobe_capture_summary may be used),
   or TPROBE_SKIPPED when the rank, step, scope, list or data_mode filters exclude it. Announces the
   entry as a capture call would; counts nothing. */
int tprobe_capture_query(tprobe_session *session, const char *entry, const char *slot, unsigned *flags);

/* One statistic as dump.json writes it. */
#define TPROBE_STAT_NULL 0
#define TPROBE_STAT_BOOL 1 /* integer is 0 or 1 */
#define TPROBE_STAT_INT 2  /* integer */
#define TPROBE_STAT_REAL 3 /* real */
typedef struct tprobe_stat {
  int kind;
  int64_t integer;
  double real;
} tprobe_stat;

/* A tensor described by its statistics, computed by the caller (e.g. on the device with the
   framework's reductions) with the semantics of core/tensor_stats.h. */
typedef struct tprobe_tensor_summary {
  DLDataType dtype;
  int ndim;
  const int64_t *shape;
  const char *device; /* "cuda:0"; NULL: "cpu" */
  int requires_grad;
  tprobe_stat max, min, mean, norm;
  uint64_t nan_count, inf_count;
} tprobe_tensor_summary;

/* Captures a tensor as its summary: only the numbers travel. Fails (TPROBE_ERROR) when the slot
   needs the data (tprobe_capture_query reported TPROBE_CAPTURE_SAVE or TPROBE_CAPTURE_CRC32);
   TPROBE_SKIPPED when filtered out (counted like tprobe_capture_tensor). */
int tprobe_capture_summary(tprobe_session *session, const char *entry, const char *slot,
                           const tprobe_tensor_summary *summary);

/* A tensor whose memory was never written: an output of an allocation-only operator (empty,
   empty_like, empty_strided, new_empty, …: core/dump_semantics.h entry_allocates_only). Only its
   dtype, shape, device and requires_grad are read from `shape` (statistics ignored); nothing is
   saved or hashed whatever the config asks, and dump.json marks the leaf "uninitialized": true
   with null statistics, so that garbage is never compared as data. TPROBE_SKIPPED when filtered
   out (counted like tprobe_capture_tensor). */
int tprobe_capture_uninitialized(tprobe_session *session, const char *entry, const char *slot,
                                 const tprobe_tensor_summary *shape);

/* A tensor whose data tprobe cannot read: an element type it has no dtype for (fp8, quantized,
   …) or a layout without plain memory (sparse, mkldnn). Only these facts travel (a tensor record
   without data or statistics, transport/record.h "foreign_dtype"); the writer gives it
   Max/Min/Mean/Norm null. TPROBE_SKIPPED when filtered out (counted like tprobe_capture_tensor). */
typedef struct tprobe_tensor_facts {
  const char *dtype; /* as the framework names it in dump.json: "torch.float8_e4m3fn" */
  int ndim;
  const int64_t *shape;
  const char *device; /* "cuda:0"; NULL: "cpu" */
  int requires_grad;
} tprobe_tensor_facts;
int tprobe_capture_facts(tprobe_session *session, const char *entry, const char *slot,
                         const tprobe_tensor_facts *facts);

/* The effective configuration as one JSON object (the session record's meta: task, level,
   dump_path, rank, step, summary_mode, data_mode, scope, list, tensor_list, …, and "control":
   the endpoint the session takes control commands on, when it listens). NULL with
   tprobe_last_error() set when session is NULL. The text stays valid until the next call of this
   function on the same thread. */
const char *tprobe_session_config(const tprobe_session *session);

/* ---- Task grad_probe (msprobe's gradient monitor; the semantics are core/grad_probe.h's) ----
 *
 * With "task": "grad_probe" the session captures gradients, not dump entries: at each optimizer
 * step the framework hands every parameter's gradient over, then calls tprobe_step (the config's
 * `step` counts optimizer steps). Gradient captures need no tprobe_start: the optimizer step is
 * their trigger. They are filtered by the config's rank and step and grad_probe.param_list.
 * Per parameter one record travels (transport/grad_record.h): the numbers of the gradient (max, min,
 * norm; the CRC-32 at level L0; bucket counts and zeros at L2) and, at L1 and L2, its directions
 * (grad > 0) packed eight to a byte. */

/* TPROBE_OK when a gradient of `param` is wanted now (task grad_probe, this rank, this step,
   param_list), TPROBE_SKIPPED otherwise. Lets a caller skip device work for filtered parameters. */
int tprobe_grad_query(tprobe_session *session, const char *param);

/* Captures a gradient in host memory (kDLCPU or kDLCUDAHost), any strides: its numbers and
   directions are computed here, in place on the calling thread; only they are queued. float64,
   float32, float16 and bfloat16 (DLPack code kDLBfloat). TPROBE_SKIPPED when filtered out. */
int tprobe_capture_grad(tprobe_session *session, const char *param, const DLTensor *grad);

/* A gradient whose numbers the caller computed (e.g. reductions on its device), with msprobe's
   semantics (core/grad_probe.h): max, min, norm as float32 values of the gradient's dtype. */
typedef struct tprobe_grad_numbers {
  DLDataType dtype;          /* the gradient's */
  int ndim;
  const int64_t *shape;
  const char *device;        /* "cuda:0"; NULL: "cpu" */
  double max, min, norm;     /* NaN for an empty gradient */
  /* Level L2: bounds+1 bucket counts ((b[i-1], b[i]], NaN in the last) and the count of zeros;
     NULL/0 at other levels. */
  const uint64_t *buckets;
  size_t bucket_count;
  uint64_t zeros;
  /* Levels L1 and L2: the packed directions in host memory, (numel + 7) / 8 bytes, bit i % 8 of
     byte i / 8 = element i > 0; NULL at L0. */
  const uint8_t *sign_bits;
  /* Level L0: the gradient converted to float32, C order, in host memory: the MD5 column is its
     CRC-32 (computed here); NULL at other levels. */
  const float *float32_data;
} tprobe_grad_numbers;
int tprobe_capture_grad_numbers(tprobe_session *session, const char *param, const tprobe_grad_numbers *numbers);

/* ---- Task free_benchmark (msprobe 8.3.3's 无标杆比对; the semantics are core/free_benchmark.h's) ----
 *
 * With "task": "free_benchmark" the session captures no dump entries: the framework re-runs the
 * selected API calls itself (perturbed, in higher precision or on the CPU, in the training process
 * where the tensors are), compares, and hands over only the calls whose outputs part, one row
 * each (transport/free_benchmark_record.h); tprobe-free-benchmark writes
 * {dump_path}/step{N}/rank{R}/free_benchmark.csv. The session fills in the row's rank, pert_mode
 * and step (the current one). Like dump entries, rows need the capture started, this rank and
 * this step. */

/* TPROBE_OK when the API call `api_name` ("Torch.matmul.0.forward"; for fuzz_stage backward its
   backward name, "Torch.matmul.0.backward") is to be fuzzed now: task free_benchmark, started,
   this rank and step, and free_benchmark.scope / list; TPROBE_SKIPPED otherwise. */
int tprobe_fuzz_query(tprobe_session *session, const char *api_name);

#define TPROBE_FUZZ_RATIO 0            /* max_rel = ratio - 1 */
#define TPROBE_FUZZ_SYMBOL_FLIPPING 1  /* max_rel "symbol_flipping" */
#define TPROBE_FUZZ_NO_RATIO 2         /* max_rel empty (pert_mode to_cpu) */

typedef struct tprobe_fuzz_row {
  const char *api_name;  /* "Torch.matmul.0.forward" */
  const char *stage;     /* "forward" | "backward" */
  int verdict;           /* TPROBE_FUZZ_* */
  double ratio;          /* TPROBE_FUZZ_RATIO: the largest ratio of the two outputs */
  const char *dtype;     /* the original output's, as torch prints it: "torch.float16" */
  int ndim;
  const int64_t *shape;
  int64_t output_index;  /* the element of a list or tuple output; -1 when the output is one tensor */
} tprobe_fuzz_row;

/* Queues one row. TPROBE_SKIPPED when the session does not want it now (as tprobe_fuzz_query). */
int tprobe_capture_fuzz_row(tprobe_session *session, const tprobe_fuzz_row *row);

/* ---- Task monitor (msprobe 8.3.3's TrainerMon, 训练状态监控; the semantics are core/monitor.h's) ----
 *
 * A monitor session is opened from a monitor config (msprobe's monitor json: targets, ops, alert,
 * ndigits, step_count_per_record, format, …), not from a config.json: a config.json asking for task
 * "monitor" is refused (use TrainerMon). The framework reduces each monitored tensor itself (on its
 * device), and at the end of each monitored optimizer step hands the step's rows over, one call per
 * csv prefix; tprobe-monitor writes the csv files, anomaly.json and TensorBoard files under the
 * session's dump_path. Monitor captures need no tprobe_start and no tprobe_step: the step is the
 * caller's (the monitor step, counted from start_iteration), and the monitor config's gating
 * (start_step, step_interval, collect_times, module_ranks) is the caller's to apply. */

/* Validates the monitor config at monitor_config_path (every key, as msprobe's validate_config;
   a bad one fails with one line naming the file and the field) and opens a session of task
   "monitor" whose dump_path is $MONITOR_OUTPUT_DIR (default ./monitor_output, made absolute), and
   whose session meta (tprobe_session_config) carries "monitor": the validated config with its
   defaults filled in and ops expanded (shape and dtype appended), its "warnings" (lines msprobe
   logs: invalid ops dropped, int fields reset to defaults), "output_dir", and the process group's
   "pp_stage" and "group_mates" that anomaly.json records (msprobe's GradAnomalyData).
   group_json: {"pp_stage": 0, "group_mates": [0, 1]} (the rank's index in the TrainerMon's
   process group and the group's ranks), or NULL: pp_stage the rank (0 when not distributed) and
   group_mates [rank]. options may be NULL. */
int tprobe_monitor_open(const char *monitor_config_path, const char *group_json, const tprobe_open_options *options,
                        tprobe_session **session);

/* The session config tprobe_monitor_open would give (group_json as there), with nothing opened
   or sent: the check before a pipeline starts, and DYNAMIC_MONITOR's reload of a changed file.
   NULL with tprobe_last_error() naming the file and the field. Valid until the next call on the
   same thread. */
const char *tprobe_monitor_config_check(const char *monitor_config_path, const char *group_json);

/* Sends one csv prefix's rows of monitor step `step`. prefix: "actv", "actv_grad", "grad_reduced",
   "grad_unreduced", "exp_avg", "exp_avg_sq", "param_origin", "param_updated" or "other".
   record_meta_json: {"step": S, "ops": [...with "shape","dtype"], "micro_step": true|false,
   "rows": [{"tag": "0:fc.input:0/rank0/actv", "values": [one per op but shape and dtype: a JSON
   integer where msprobe has an int (nans on the CPU), else a float; NaN as Python's json writes
   it, or null], "shape": [2, 3], "dtype": "torch.float16"}]} (shape and dtype null for a
   non-tensor; core/monitor.h, monitor_rows_from_json; its "step" must equal `step`).
   prefix "stack_info": the module call stacks of stack_info.csv (msprobe's write_stack_info, the
   first collected step), record_meta_json {"step": S, "stack_info": [["0:fc", "File ..."], ...]}
   (module name, stack text). The session adds its rank. TPROBE_SKIPPED when the session is
   detached or its task is not monitor; TPROBE_ERROR for a bad record. */
int tprobe_capture_monitor(tprobe_session *session, const char *prefix, int64_t step, const char *record_meta_json);

/* The fixed part of a prefix's rows, registered once so that each step sends only its numbers
   (tprobe_capture_monitor_values): no JSON written and parsed per step. rows_json is a
   record_meta_json as above whose values are templates: a JSON integer marks a column that holds an
   int in that row (written "3", not "3.0"), a float one that does not; the numbers and "step" are
   not used. Returns a handle >= 0, valid as long as the session; TPROBE_ERROR for a bad rows_json. */
int tprobe_monitor_rowset(tprobe_session *session, const char *rows_json);

/* tprobe_capture_monitor with the rows of `rowset` and this step's numbers: `values` holds `count`
   doubles, row after row, one per op but shape and dtype (NaN for none; an int column's NaN stays a
   float, as Python's int() leaves it). Same returns; TPROBE_ERROR for an unknown rowset or a count
   that does not fit it. */
int tprobe_capture_monitor_values(tprobe_session *session, const char *prefix, int64_t step, int rowset,
                                  const double *values, size_t count);

/* Monitoring turned off or on through the control path: a stage sent the monitor session's
   control endpoint (its session meta "control") the command {"command": "monitor", "on": false}
   or {"command": "monitor", "on": true} (docs/wire-format.md, "Control"). Applies the commands
   that wait and returns the last switch since the previous call: TPROBE_MONITOR_OFF,
   TPROBE_MONITOR_ON, or TPROBE_SKIPPED when none came. The caller owns the monitoring itself (its
   hooks): TrainerMon asks after each optimizer step. A "stop" still ends the session for good. */
#define TPROBE_MONITOR_OFF 2
#define TPROBE_MONITOR_ON 3
int tprobe_monitor_control(tprobe_session *session);

/* 1 when a control command has arrived that the session has not applied yet (it applies them at
   its next capture call, step or tprobe_monitor_control), else 0: for a sender that must know
   its command is in before the training goes on. */
int tprobe_control_pending(const tprobe_session *session);

#ifdef __cplusplus
}
#endif

#endif /* TPROBE_CAPTURE_H */
