// The capture session behind tprobe_capture.h, declared for the files that define it (private:
// nothing outside capture/ includes this). The C API's opaque tprobe_session is this struct:
// filtering and the copy on the calling thread, a bounded queue, and a sender thread that owns the
// sockets. Its member functions live by concern:
//   session_capture.cpp  open/close, steps, and the capture entry points (tensors, values, grad_probe,
//                        free_benchmark and monitor rows), with the payload frames they fill
//   session_queue.cpp    the queue to the sender thread, batching, wake-ups, the sender loop, detach
//   session_stats.cpp    the statistics memo's misses (its lookups are inline here)
//   session_stacks.cpp   stack interning (stack ids, the stack book)
//   session_control.cpp  the control listener and the commands it brings (stop, monitor, narrow)
//   capture_api.cpp      the C API (tprobe_capture.h), which calls them
// Members called per tensor or per operator on the training thread are defined here, inline, as
// they were when the session was one file: each would otherwise cost a call per tensor.
// Thread rules: the capture state is the training thread's (one thread at a time,
// tprobe_capture.h); what the sender thread shares with it is under `mutex` unless atomic.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "capture_config.h"
#include "monitor.h"
#include "dump_semantics.h"
#include "endpoint.h"
#include "errors.h"
#include "free_benchmark_record.h"
#include "grad_record.h"
#include "part_runner.h"
#include "payload_pool.h"
#include "shm.h"
#include "tprobe_capture.h"

// Helpers of the session's files (session_capture.cpp, capture_api.cpp), in no public namespace.
namespace tprobe::session_detail {

// 15 hex digits (60 random bits): a std::string holds up to 15 characters in place, and every
// record carries the id through every hop, where a 16th character cost a malloc and a free per
// record at each encode and decode.
std::string random_run_id();

// Copies a strided tensor into contiguous C order, innermost dimension by memcpy when contiguous.
void copy_strided(std::byte *dst, const std::byte *src, const DLTensor &t, size_t elem, int dim);

// The small ones called per tensor have internal linkage, as when the session was one file: GCC
// inlines them into capture_tensor then, where as inline functions of external linkage it called
// them out of line.
namespace {

// A slot from the C API, whose dict keys may be quoted (core/dump_semantics.h, slot_key_append):
// the record carries msprobe's displayed slot and, where a key was quoted, the nesting path, so
// that no stage has to know the quoting.
inline void header_slot_set(record_header &h, std::string_view entry, const char *slot) {
  if (!slot_has_quoted_key(slot)) {
    h.slot = slot;
    h.path.reset();
    return;
  }
  h.path = slot_locate(entry_parse(entry), slot).path;
  h.slot = slot_display(slot);
}

inline dtype dtype_from_dlpack(DLDataType t) {
  if (t.lanes != 1) throw usage_error(fmt::format("DLTensor with {} lanes: only scalar lanes are supported", t.lanes));
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 64) return dtype::float64;
      if (t.bits == 32) return dtype::float32;
      if (t.bits == 16) return dtype::float16;
      break;
    case kDLBfloat:
      if (t.bits == 16) return dtype::bfloat16;
      break;
    case kDLInt:
      if (t.bits == 8) return dtype::int8;
      if (t.bits == 16) return dtype::int16;
      if (t.bits == 32) return dtype::int32;
      if (t.bits == 64) return dtype::int64;
      break;
    case kDLUInt:
      if (t.bits == 8) return dtype::uint8;
      break;
    case TPROBE_DL_BOOL:
      if (t.bits == 8) return dtype::boolean;
      break;
    case kDLComplex:
      if (t.bits == 64) return dtype::complex64;
      if (t.bits == 128) return dtype::complex128;
      break;
    default: break;
  }
  throw usage_error(fmt::format("DLTensor dtype code {} with {} bits is not supported", t.code, t.bits));
}

inline bool is_contiguous(const DLTensor &t) {
  if (!t.strides) return true;
  int64_t expected = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

}  // namespace
}  // namespace tprobe::session_detail

struct tprobe_session {
  tprobe::capture_config config;
  std::unique_ptr<tprobe::capture_filter> filter;
  tprobe_open_options options{};
  std::string framework;
  std::string run_id = tprobe::session_detail::random_run_id();
  zmq::context_t ctx{1};
  std::vector<std::unique_ptr<tprobe::record_sender>> senders;
  // Commands from the stages (endpoint.h "Control"); applied on the training thread.
  std::unique_ptr<tprobe::control_listener> control;
  struct narrowing {
    std::vector<int64_t> steps;  // sorted; only while has_steps
    bool has_steps = false;
    std::vector<std::string> list;  // entry name substrings; empty = every entry
    std::string level;              // "" or "mix" = every entry; "L0": modules; "L1": operators
  } narrow;
  int64_t narrowed_in_step = -1;  // the step the last narrow command came in
  bool stopped_by_pipeline = false;
  // The last "monitor" command (tprobe_monitor_control): TPROBE_MONITOR_ON/OFF, or TPROBE_SKIPPED.
  int monitor_switch = TPROBE_SKIPPED;
  tprobe::payload_pool *pool = nullptr;  // one reference; frames in flight hold theirs
  // Large payloads for consumers on this host (transport/shm.h); null when no sender shares
  // memory. Frames in flight keep its segment mapped after the session is gone.
  std::unique_ptr<tprobe::shm_ring> ring;

  tprobe_session() = default;
  tprobe_session(const tprobe_session &) = delete;
  tprobe_session &operator=(const tprobe_session &) = delete;
  ~tprobe_session() {
    if (pool) pool->release_ref();
  }

  // A record on its way to the sender. A value record's leaf stays JSON text until the sender
  // thread parses it into header.meta: the training thread only checks it (a parse without a
  // DOM), so the tree's allocations, and their frees, happen off the training thread.
  // A monitor row set's numbers (capture_monitor_values) likewise: the training thread copies the
  // step's numbers; the sender fills a copy of the row set's template with them and encodes the
  // record (its rows' JSON: a few hundred allocations for a model's parameters).
  struct pending {
    tprobe::record r;
    std::string value_json;  // "" for every record but values
    const tprobe::monitor_rows *monitor_template = nullptr;  // set for a row set's numbers only
    std::string monitor_prefix;
    std::vector<double> monitor_values;
  };
  // A record travels by pointer: moving a record (a dozen strings and vectors, its statistics)
  // took ~500 instructions, twice a record, and a spent one's destruction as much again.
  using pending_ptr = std::unique_ptr<pending>;

  // queue: training thread → sender thread. These three vectors, and the sender's batch, swap
  // their storage round (queue → batch → spent → recycled → spent …) and keep its capacity, so
  // that in a steady state no record costs an allocation to queue.
  mutable std::mutex mutex;
  std::condition_variable not_empty, has_space;
  std::vector<pending_ptr> queue;
  // Records the sender is done with, handed back to be freed by the thread that allocated them:
  // freed on the sender thread, every string and vector of a record would go into the sender's
  // free lists (glibc's per-thread caches), away from the training thread's next allocations.
  std::vector<pending_ptr> spent;
  // The caller's (one thread at a time, tprobe_capture.h): spent records taken by enqueue, kept
  // for reuse or freed once its lock is released; always empty between calls.
  std::vector<pending_ptr> recycled;
  // The caller's: spent records that make_pending fills again. Their strings and vectors keep
  // their storage, so a capture allocates nothing for an entry name, a shape or a value's text,
  // and frees nothing when the sender is done with it. At most reusable_max; the rest are freed.
  std::vector<pending_ptr> reusable;
  static constexpr size_t reusable_max = 4096;
  size_t queued_bytes = 0;
  bool closing = false;
  bool sender_waiting = false;     // the sender is in a wait
  bool sender_deep_sleep = false;  // … and will not look again until woken
  bool producer_waiting = false;   // a capture call waits for queue space
  std::exception_ptr sender_error;  // an error that is not the pipeline's going away
  std::thread sender;
  // Set by the sender thread when the pipeline stopped reading; read by capture calls without the
  // lock, so that a detached session costs one load per call.
  std::atomic<bool> detached{false};
  std::string detach_reason;  // under mutex
  // The last step whose step_end the pipeline took (sender thread), and, once detached, the first
  // step not dumped whole (under mutex): what the detach warning and the counts tell the user.
  int64_t step_delivered = -1;
  int64_t first_step_not_dumped = -1;
  uint64_t barriers_requested = 0;  // step barriers enqueued (training thread)
  uint64_t barriers_done = 0;       // … answered by every consumer (under mutex)

  // capture state (training thread only)
  int64_t step = 0;
  bool started = false;
  bool service_ended = false;  // past the last configured step
  // The last seq stamped (record.h): at enqueue, under the mutex, so that the records a link
  // sends are numbered 1, 2, 3, … in that order whichever thread captured them, and a record
  // made but never enqueued leaves no gap. Its consumers check it (the hello says numbered).
  uint64_t seq = 0;
  // Looked up by the caller's const char * without a std::string made for it: every capture call
  // asks (slot_wanted), and most entry names are past the short-string buffer (a malloc each).
  struct name_hash {
    using is_transparent = void;
    size_t operator()(std::string_view name) const { return std::hash<std::string_view>{}(name); }
  };
  // Entries → the last step each began in, and whether it was captured then. Kept from step to
  // step (a step's entries are mostly the last one's names again), so an entry costs a lookup,
  // not a node and a name allocated and freed every step; cleared when it holds far more names
  // than a step uses.
  struct entry_seen {
    int64_t step;
    bool captured;
  };
  std::unordered_map<std::string, entry_seen, name_hash, std::equal_to<>> entries;
  size_t entries_this_step = 0;
  tprobe_session_counts counts{};
  std::optional<tprobe::grad_probe_settings> grad;  // task grad_probe
  std::optional<tprobe::free_benchmark_settings> fuzz;  // task free_benchmark

  // Strided tensors up to this size get their statistics in place, through this buffer (kept, so
  // its pages fault once); larger ones travel to the statistics stage rather than hold that much
  // memory in the training process.
  static constexpr size_t STRIDED_SCRATCH_MAX = size_t{64} << 20;
  std::vector<std::byte> strided_scratch;
  // Reads large tensors' parts on a second core while the training thread, blocked in the capture
  // anyway, reads the others (part_runner.h).
  tprobe::part_runner runner{tprobe::part_runner_threads_from_env(), tprobe::part_runner_linger_from_env()};

  // The statistics of the contiguous tensors read in place lately, for callers that name a
  // tensor's content (tprobe_capture_tensor_content): one operator's output is usually the next
  // one's input, and a parameter read in the forward pass is read again by the optimizer; reading
  // each once is most of what statistics cost. A hit needs the same content, address, dtype,
  // element count and options (a view with another shape over the same contiguous bytes reads
  // them in the same order: the same statistics, bit for bit, unless one is 0-d), so the caller's
  // promise about the bytes is the only thing trusted. Callers name contents with increasing
  // numbers, so a table indexed by the name's low bits holds the last stats_seen_max names
  // without collisions; it is allocated at the first named capture.
  struct stats_seen {
    uint64_t content = 0;
    const std::byte *data = nullptr;
    tprobe::dtype type{};
    size_t count = 0;
    bool zero_dim = false, high_precision = false, crc32 = false;
    tprobe::tensor_stats stats;
  };
  static constexpr size_t stats_seen_max = 8192;  // a power of two
  std::vector<stats_seen> stats_seen_table;

  const tprobe::tensor_stats *stats_seen_find(uint64_t content, const std::byte *data,
                                              const tprobe::record_header &h, const tprobe::stats_options &o) const {
    if (stats_seen_table.empty()) return nullptr;
    const stats_seen &e = stats_seen_table[content & (stats_seen_max - 1)];
    if (e.content == content && e.data == data && e.type == h.type && e.count == h.element_count() &&
        e.zero_dim == h.shape.empty() && e.high_precision == o.high_precision && e.crc32 == o.crc32)
      return &e.stats;
    return nullptr;
  }

  // After a miss: remembers h's statistics for this content (session_stats.cpp).
  void stats_seen_add(uint64_t content, const std::byte *data, const tprobe::record_header &h,
                      const tprobe::stats_options &o);

  // The same for strided views (a transpose's output is the next operator's input; a weight's
  // transpose is read in the forward and in the backward pass): a hit needs the same
  // content, address, dtype, shape and strides, i.e. the same bytes gathered in the same order.
  // A content's views of other layouts take the same slot in turn; views of more dimensions than
  // strided_seen_dims are read every time.
  static constexpr int strided_seen_dims = 6;
  struct strided_seen {
    uint64_t content = 0;
    const std::byte *data = nullptr;
    tprobe::dtype type{};
    int ndim = 0;
    int64_t shape[strided_seen_dims]{}, strides[strided_seen_dims]{};
    bool high_precision = false, crc32 = false;
    tprobe::tensor_stats stats;
  };
  static constexpr size_t strided_seen_max = 1024;  // a power of two
  std::vector<strided_seen> strided_seen_table;

  static bool same_layout(const strided_seen &e, const DLTensor &t) {
    return e.ndim == t.ndim && std::equal(t.shape, t.shape + t.ndim, e.shape) &&
           std::equal(t.strides, t.strides + t.ndim, e.strides);
  }

  const tprobe::tensor_stats *strided_seen_find(uint64_t content, const std::byte *data, const DLTensor &t,
                                                tprobe::dtype type, const tprobe::stats_options &o) const {
    if (strided_seen_table.empty() || t.ndim > strided_seen_dims) return nullptr;
    const strided_seen &e = strided_seen_table[content & (strided_seen_max - 1)];
    if (e.content == content && e.data == data && e.type == type && same_layout(e, t) &&
        e.high_precision == o.high_precision && e.crc32 == o.crc32)
      return &e.stats;
    return nullptr;
  }

  // After a miss: remembers h's statistics for this view (session_stats.cpp).
  void strided_seen_add(uint64_t content, const std::byte *data, const DLTensor &t, const tprobe::record_header &h,
                        const tprobe::stats_options &o);

  bool active() const {
    return started && !service_ended && !detached.load(std::memory_order_relaxed) &&
           filter->rank_enabled(options.rank) && filter->step_enabled(step) && narrowed_step_enabled(step);
  }

  bool narrowed_step_enabled(int64_t s) const {
    return !narrow.has_steps || std::binary_search(narrow.steps.begin(), narrow.steps.end(), s);
  }

  bool narrowed_entry_enabled(std::string_view entry) const {
    const bool is_module = entry.rfind("Module.", 0) == 0;
    if (narrow.level == "L0" && !is_module) return false;
    if (narrow.level == "L1" && is_module) return false;
    if (narrow.list.empty()) return true;
    for (const auto &l : narrow.list)
      if (entry.find(l) != std::string_view::npos) return true;
    return false;
  }

  // At operator and step boundaries: one relaxed load while no command waits.
  void poll_control() {
    if (control && control->pending()) apply_control();
  }

  // Applies the commands that came (stop, monitor, narrow), on the training thread; a bad one is
  // reported on stderr and ignored, never thrown.
  void apply_control();

  tprobe::record_header header(tprobe::record_kind kind) {
    tprobe::record_header h;
    h.kind = kind;
    stamp(h);
    return h;
  }
  void stamp(tprobe::record_header &h) {
    h.run = run_id;
    h.rank = options.rank;
    h.step = step;
  }

  // A record to fill and enqueue, its header as header(kind) makes it: a spent one reused when
  // there is one (reusable), else a new one.
  pending_ptr make_pending(tprobe::record_kind kind) {
    if (reusable.empty()) return std::make_unique<pending>(pending{tprobe::record(header(kind)), {}, nullptr, {}, {}});
    pending_ptr p = std::move(reusable.back());
    reusable.pop_back();
    p->r.reuse_as(kind);
    p->value_json.clear();
    p->monitor_template = nullptr;
    stamp(p->r.header);
    return p;
  }

  // The header every tensor capture fills alike: capture_tensor, and the C API's summaries,
  // uninitialized tensors and facts (capture_api.cpp). A record of kind tensor (make_pending), its
  // entry and slot (header_slot_set), its dtype (set_type(header), called at this point so that a
  // call with several problems reports the same one first), its shape, given as `ndim` dimensions
  // at `shape` (when shape_what is not null, a missing shape is an error naming it so; a DLTensor's
  // always has one), whose dimensions must not be negative, the device when one is named, and
  // requires_grad. Flags, statistics and payload are the caller's. Inline: capture_tensor calls it
  // per tensor.
  template <typename SetType>
  pending_ptr tensor_pending(const char *entry, const char *slot, SetType &&set_type, const int64_t *shape, int ndim,
                             const char *shape_what, const char *device, int requires_grad) {
    pending_ptr p = make_pending(tprobe::record_kind::tensor);
    auto &h = p->r.header;
    h.entry = entry;
    tprobe::session_detail::header_slot_set(h, entry, slot);
    set_type(h);
    if (shape_what && (ndim < 0 || (ndim > 0 && !shape)))
      throw tprobe::usage_error(fmt::format("{} {}: {} is missing", entry, slot, shape_what));
    h.shape.assign(shape, shape + ndim);
    for (int64_t d : h.shape)
      if (d < 0) throw tprobe::usage_error(fmt::format("{} {}: negative dimension in shape", entry, slot));
    if (device && *device) h.device = device;
    h.requires_grad = requires_grad != 0;
    return p;
  }

  // Waking a sleeping thread is a system call, several microseconds in a VM: more than a small
  // capture costs. So a capture call does not wake the sender for every record. While records
  // flow, the sender naps (sender_nap) and drains what piled up; it is woken at once only for
  // control records (stop, step, close), when a batch is worth it (wake_records, wake_bytes), or
  // when it has gone to sleep for good after a quiet spell (deep_sleep: nothing for
  // deep_sleep_after naps), so an idle session costs no wake-ups at all.
  static constexpr auto sender_nap = std::chrono::milliseconds(1);
  static constexpr int deep_sleep_after = 50;
  // The same reasoning one process further: each batch the sender hands on wakes ZeroMQ's I/O
  // thread, the consumer's, and the consumer, and a sender that sent its open batch before every
  // nap sent one per millisecond, most of them a few records (35 a 22 ms transformer step, where
  // its 485 KiB of records fill about 15). So an open batch is kept across naps while the training
  // thread is busy between captures, and sent once a nap brings nothing (flush_after_naps), when
  // a record joins it past RECORD_BATCH_MAX_AGE_MS, when it is full, or at once after a control
  // record (stop, step): what a consumer waits for is never held back.
  static constexpr int flush_after_naps = 1;
  static constexpr size_t wake_records = 256;
  static constexpr size_t wake_bytes = size_t{4} << 20;

  // Hands a record to the sender thread; false when the session has detached (the record is
  // counted as undelivered, never waited for).
  bool enqueue(tprobe::record &&r, bool urgent = false);
  bool enqueue(pending_ptr &&p, bool urgent = false);

  // The sender thread, when the pipeline stopped reading: drop everything, say so once, and let
  // every later call return at once. Training goes on.
  void detach(const std::string &reason, uint64_t lost_in_batch);

  // Control calls (stop, step, close) on a detached session: the dump is incomplete.
  [[noreturn]] void throw_detached();

  // The sender thread's body: takes the queue, sends on every link, hands spent records back;
  // returns once closing and everything is sent, or detached. An error that is not the pipeline's
  // going away is kept in sender_error for the training thread's next call.
  void sender_loop();

  // Records the senders took but did not hand on (batches): undelivered when they detach. With
  // several senders, the largest: every sender was given every record.
  uint64_t unsent_records() const;

  // `tprobe run` writes RUN_DIR/failed when a stage fails (launcher.h).
  static std::string failure_marker();

  // A session of a config.json (config_path), or of task monitor from a monitor config
  // (monitor_config_path non-null: tprobe_monitor_open).
  void open(const char *config_path, const tprobe_open_options *opts, const char *monitor_config_path = nullptr,
            const char *monitor_group_json = nullptr);

  // One copy of a large tensor in all: into shared memory that the stages read (shm.h). LZ4 is
  // for links that leave the host, whose payloads travel as bytes anyway. Without a ring (no
  // consumer on this host, or memfd unavailable) payloads take the socket, as always.
  // The ring is made at the first large payload: a statistics run, whose data never leaves,
  // never pays for it.
  void open_ring();
  bool ring_wanted = false;

  tprobe::shm_ring *the_ring();

  // A payload frame of `bytes`: in the ring when it is worth it and the ring takes it, else from
  // the pool. The ring waits for its consumers while they release payloads; one that holds on
  // (a stage keeping records, a dead stage) sends this payload by socket instead, whose waits
  // are watched (endpoint.h), so the training thread never waits on a consumer unwatched.
  zmq::message_t payload_frame(size_t bytes);

  // TPROBE_CONTROL_ENDPOINT chooses where to listen (a stage on another host needs tcp, and
  // CurveZMQ keys, docs/network.md); a wrong one is the user's error. Without it, a default
  // that cannot be bound costs the pipeline its control over the capture, never the training.
  void open_control();

  // Stops the capture if started, joins the sender thread (whatever stop() says: a session must
  // never be freed with it running) and ends the stream on every link; throws what went wrong.
  void close();

  // tprobe_start / tprobe_stop; stop sends a flush, urgent.
  void start();
  void stop();

  // Whether r is a step_end that waits for every consumer's answer (record.h).
  static bool is_step_barrier(const tprobe::record &r);

  // msprobe writes a step's files before step() returns unless async_dump: so the step_end of a
  // dumped step is a barrier (record.h), answered once the writer has written the step's files.
  // Not for steps outside the config's step list, which leave no files to wait for.
  void next_step();

  // Announces an entry (tprobe_entry_begin), or, implicit, asks for it at its first capture;
  // true when it is captured this step. A skipped entry keeps its place in construct.json.
  bool entry_begin(const char *entry, const char *parent, const char *const *stack, size_t stack_len,
                   int is_recompute, bool implicit = false);

  // tprobe_module_begin / tprobe_module_end: only the filter's scope and list state move.
  void module_edge(const char *forward_entry, bool begins) {
    if (!forward_entry || !*forward_entry) throw tprobe::usage_error("module entry name is empty");
    if (!filter->selects_entries()) return;
    if (begins) filter->module_begin(forward_entry);
    else filter->module_end(forward_entry);
  }

  // Whether entry_begin(entry) would capture it now; no state changes (tprobe_entry_wanted).
  bool entry_wanted(const char *entry) {
    if (!entry || !*entry) throw tprobe::usage_error("entry name is empty");
    poll_control();
    if (!active()) return false;
    // Asked for every operator of a full capture: no lookup where every entry is captured. (A
    // narrowing since the step began may have left answers in `entries` that differ from now.)
    const bool narrows_entries = !narrow.list.empty() || narrow.level == "L0" || narrow.level == "L1";
    if (!filter->selects_entries() && !narrows_entries && narrowed_in_step != step) return true;
    if (auto it = entries.find(std::string_view(entry)); it != entries.end() && it->second.step == step)
      return it->second.captured;
    return filter->entry_wanted(entry) && narrowed_entry_enabled(entry);
  }

  // Stacks by content: the id of `stack`, its lines put in the stack book the first time.
  struct known_stack {
    std::vector<std::string> lines;
    uint64_t id;
  };
  std::unordered_multimap<size_t, known_stack> stacks_known;
  // The stack last seen at each line array's address. A caller that keeps its stacks (the torch
  // capture interns them) passes the same array for the same stack, every operator: comparing
  // its lines with that stack's is a third of the cost of hashing them. Only a hint: the lines
  // are compared, so an array reused for another stack is looked up by its hash.
  std::unordered_map<const char *const *, const known_stack *> stacks_by_array;
  static constexpr size_t stacks_by_array_max = 1 << 16;

  // The id of `stack`'s lines, which go into the stack book the first time (session_stacks.cpp).
  uint64_t stack_id_of(const char *const *stack, size_t stack_len);

  // Whether a capture of entry's slot is wanted now (the entry announced implicitly if it was not).
  bool slot_wanted(const char *entry, const char *slot) {
    if (!slot || !*slot)
      throw tprobe::usage_error(fmt::format("entry \"{}\": slot name is empty", entry ? entry : ""));
    if (!entry_begin(entry, nullptr, nullptr, 0, -1, true)) return false;
    return filter->slot_enabled(entry, slot);
  }

  // How this session's statistics are taken in place: the config's precision, the CRC when
  // summary_mode asks for it, large tensors' parts shared with the helper thread.
  tprobe::stats_options stats_options_here() {
    return {.high_precision = config.precision == "high",
            .half_mean_of_rounded_sum = options.half_mean_of_rounded_sum != 0,
            .crc32 = filter->want_crc32(),
            .runner = &runner};
  }

  // A tensor in host memory (tprobe_capture_tensor and its _content/_zeroed variants): its
  // statistics in place when nothing of its data must leave (reused by `content`, a nonzero name
  // the caller gives these very bytes; computed as zeros when `zeroed`), else its data copied into a
  // payload. TPROBE_OK, or TPROBE_SKIPPED when filtered out or detached.
  int capture_tensor(const char *entry, const char *slot, const DLTensor *t, int requires_grad, uint64_t content,
                     bool zeroed = false);

  // Task grad_probe: optimizer steps trigger the captures, so start/stop do not gate them.
  bool grad_wanted(const char *param);

  // Task free_benchmark: the framework re-runs the calls; rows need what dump entries need (the
  // capture started, this rank, this step) and the section's scope and list.
  bool fuzz_wanted(const char *api_name) {
    if (!api_name || !*api_name) throw tprobe::usage_error("API name is empty");
    if (!fuzz) return false;
    poll_control();
    return active() && fuzz->wants(api_name);
  }

  // One free_benchmark row (tprobe_capture_fuzz_row), checked again against the scope and list.
  int capture_fuzz_row(const tprobe_fuzz_row &c);

  // Task monitor: the caller gates by step and rank (the monitor config's start_step,
  // step_interval, collect_times, module_ranks); the session only carries the rows.
  int capture_monitor(const char *prefix, int64_t monitor_step, const char *rows_json);
  // Row sets (tprobe_monitor_rowset): a handle per registered template; a step's numbers fill a copy.
  int monitor_rowset(const char *rows_json);
  int capture_monitor_values(const char *prefix, int64_t monitor_step, int rowset, const double *values, size_t count);
  std::vector<std::unique_ptr<tprobe::monitor_rows>> monitor_rowsets;

  // One parameter's gradient numbers (and direction bits), already asked for by grad_wanted.
  int capture_grad(const char *param, const tprobe::grad_numbers &n, std::vector<std::byte> bits,
                   const char *device);

  // A non-tensor leaf as JSON text (null when json_text is null), checked unless the caller vouched
  // for it (tprobe_capture_value_unchecked); parsed on the sender thread.
  int capture_value(const char *entry, const char *slot, const char *json_text, bool checked = true);
};
