// The capture session behind tprobe_capture.h: filtering and the copy on the calling thread, a
// bounded queue, and a sender thread that owns the sockets.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>
#include <random>
#include <thread>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "capture_config.h"
#include "dump_semantics.h"
#include "safe_path.h"
#include "endpoint.h"
#include "errors.h"
#include "free_benchmark_record.h"
#include "monitor_record.h"
#include "grad_record.h"
#include "part_runner.h"
#include "pyjson.h"
#include "quiet_thread.h"
#include "shm.h"
#include "tprobe_capture.h"

namespace {

using namespace tprobe;

thread_local std::string g_last_error;

// A slot from the C API, whose dict keys may be quoted (core/dump_semantics.h, slot_key_append):
// the record carries msprobe's displayed slot and, where a key was quoted, the nesting path, so
// that no stage has to know the quoting.
void header_slot_set(record_header &h, std::string_view entry, const char *slot) {
  if (!slot_has_quoted_key(slot)) {
    h.slot = slot;
    h.path.reset();
    return;
  }
  h.path = slot_locate(entry_parse(entry), slot).path;
  h.slot = slot_display(slot);
}

// 15 hex digits (60 random bits): a std::string holds up to 15 characters in place, and every
// record carries the id through every hop, where a 16th character cost a malloc and a free per
// record at each encode and decode.
std::string random_run_id() {
  std::random_device rd;
  return fmt::format("{:07x}{:08x}", rd() & 0xfffffffu, rd());
}

dtype dtype_from_dlpack(DLDataType t) {
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

// The innermost dimension of a strided copy, element by element with a fixed-size load that the
// compiler inlines, rather than a memcpy call of a run-time size per element.
template <size_t Size>
void copy_run(std::byte *dst, const std::byte *src, int64_t n, int64_t stride_bytes) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * static_cast<int64_t>(Size), src + i * stride_bytes, Size);
}

// Copies a strided tensor into contiguous C order, innermost dimension by memcpy when contiguous.
void copy_strided(std::byte *dst, const std::byte *src, const DLTensor &t, size_t elem, int dim) {
  const int64_t n = t.shape[dim];
  const int64_t stride = t.strides[dim];
  if (dim == t.ndim - 1) {
    const int64_t stride_bytes = stride * static_cast<int64_t>(elem);
    if (stride == 1) {
      std::memcpy(dst, src, static_cast<size_t>(n) * elem);
    } else {
      switch (elem) {
        case 1: copy_run<1>(dst, src, n, stride_bytes); break;
        case 2: copy_run<2>(dst, src, n, stride_bytes); break;
        case 4: copy_run<4>(dst, src, n, stride_bytes); break;
        case 8: copy_run<8>(dst, src, n, stride_bytes); break;
        case 16: copy_run<16>(dst, src, n, stride_bytes); break;
        default:
          for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * static_cast<int64_t>(elem), src + i * stride_bytes, elem);
      }
    }
    return;
  }
  size_t inner = elem;
  for (int d = dim + 1; d < t.ndim; ++d) inner *= static_cast<size_t>(t.shape[d]);
  for (int64_t i = 0; i < n; ++i)
    copy_strided(dst + static_cast<size_t>(i) * inner, src + i * stride * static_cast<int64_t>(elem), t, elem, dim + 1);
}

bool is_contiguous(const DLTensor &t) {
  if (!t.strides) return true;
  int64_t expected = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

// Payload buffers, recycled. A fresh allocation per tensor costs page faults for big tensors and
// a cross-thread free (the frame dies on ZeroMQ's I/O thread) for small ones; both cost more than
// the copy itself. Buffers come in power-of-two classes; the pool keeps at most `limit` bytes
// idle and frees the rest. It outlives the session while frames are in flight: each frame holds
// a reference.
class payload_pool {
 public:
  explicit payload_pool(size_t limit) : limit_(limit) {}

  static payload_pool *create(size_t limit) { return new payload_pool(limit); }
  void release_ref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  zmq::message_t frame(size_t size) {
    const int cls = class_of(size);
    std::byte *block = nullptr;
    if (cls >= 0) {
      std::lock_guard lock(mutex_);
      auto &list = free_[cls];
      if (!list.empty()) {
        block = list.back();
        list.pop_back();
        idle_ -= class_bytes(cls);
      }
    }
    if (!block) block = static_cast<std::byte *>(::operator new(header_bytes + (cls >= 0 ? class_bytes(cls) : size)));
    auto *h = reinterpret_cast<block_header *>(block);
    h->pool = this;
    h->cls = cls;
    refs_.fetch_add(1, std::memory_order_relaxed);
    return zmq::message_t(block + header_bytes, size, &payload_pool::free_frame, block);
  }

 private:
  struct block_header {
    payload_pool *pool;
    int cls;
  };
  static constexpr size_t header_bytes = 64;  // keeps the payload cache-line aligned
  static constexpr int min_shift = 8, max_shift = 28;  // 256 B … 256 MiB

  static int class_of(size_t size) {
    int shift = min_shift;
    while (shift <= max_shift && (size_t{1} << shift) < size) ++shift;
    return shift > max_shift ? -1 : shift - min_shift;
  }
  static size_t class_bytes(int cls) { return size_t{1} << (cls + min_shift); }

  static void free_frame(void *, void *hint) {
    auto *block = static_cast<std::byte *>(hint);
    auto *h = reinterpret_cast<block_header *>(block);
    payload_pool *pool = h->pool;
    pool->give_back(block, h->cls);
    pool->release_ref();
  }

  void give_back(std::byte *block, int cls) {
    if (cls >= 0) {
      std::lock_guard lock(mutex_);
      if (idle_ + class_bytes(cls) <= limit_) {
        free_[cls].push_back(block);
        idle_ += class_bytes(cls);
        return;
      }
    }
    ::operator delete(block);
  }

  ~payload_pool() {
    for (auto &list : free_)
      for (std::byte *b : list) ::operator delete(b);
  }

  std::atomic<int> refs_{1};
  std::mutex mutex_;
  std::vector<std::byte *> free_[max_shift - min_shift + 1];
  size_t idle_ = 0;
  const size_t limit_;
};

}  // namespace

struct tprobe_session {
  capture_config config;
  std::unique_ptr<capture_filter> filter;
  tprobe_open_options options{};
  std::string framework;
  std::string run_id = random_run_id();
  zmq::context_t ctx{1};
  std::vector<std::unique_ptr<record_sender>> senders;
  // Commands from the stages (endpoint.h "Control"); applied on the training thread.
  std::unique_ptr<control_listener> control;
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
  payload_pool *pool = nullptr;  // one reference; frames in flight hold theirs
  // Large payloads for consumers on this host (transport/shm.h); null when no sender shares
  // memory. Frames in flight keep its segment mapped after the session is gone.
  std::unique_ptr<shm_ring> ring;

  tprobe_session() = default;
  tprobe_session(const tprobe_session &) = delete;
  tprobe_session &operator=(const tprobe_session &) = delete;
  ~tprobe_session() {
    if (pool) pool->release_ref();
  }

  // A record on its way to the sender. A value record's leaf stays JSON text until the sender
  // thread parses it into header.meta: the training thread only checks it (a parse without a
  // DOM), so the tree's allocations, and their frees, happen off the training thread.
  struct pending {
    record r;
    std::string value_json;  // "" for every record but values
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
  std::optional<grad_probe_settings> grad;  // task grad_probe
  std::optional<free_benchmark_settings> fuzz;  // task free_benchmark

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
    dtype type{};
    size_t count = 0;
    bool zero_dim = false, high_precision = false, crc32 = false;
    tensor_stats stats;
  };
  static constexpr size_t stats_seen_max = 8192;  // a power of two
  std::vector<stats_seen> stats_seen_table;

  const tensor_stats *stats_seen_find(uint64_t content, const std::byte *data, const record_header &h,
                                      const stats_options &o) const {
    if (stats_seen_table.empty()) return nullptr;
    const stats_seen &e = stats_seen_table[content & (stats_seen_max - 1)];
    if (e.content == content && e.data == data && e.type == h.type && e.count == h.element_count() &&
        e.zero_dim == h.shape.empty() && e.high_precision == o.high_precision && e.crc32 == o.crc32)
      return &e.stats;
    return nullptr;
  }

  void stats_seen_add(uint64_t content, const std::byte *data, const record_header &h, const stats_options &o) {
    if (stats_seen_table.empty()) stats_seen_table.resize(stats_seen_max);
    stats_seen &e = stats_seen_table[content & (stats_seen_max - 1)];
    e.content = content;
    e.data = data;
    e.type = h.type;
    e.count = h.element_count();
    e.zero_dim = h.shape.empty();
    e.high_precision = o.high_precision;
    e.crc32 = o.crc32;
    e.stats = *h.stats;
  }

  // The same for strided views (a transpose's output is the next operator's input; a weight's
  // transpose is read in the forward and in the backward pass): a hit needs the same
  // content, address, dtype, shape and strides, i.e. the same bytes gathered in the same order.
  // A content's views of other layouts take the same slot in turn; views of more dimensions than
  // strided_seen_dims are read every time.
  static constexpr int strided_seen_dims = 6;
  struct strided_seen {
    uint64_t content = 0;
    const std::byte *data = nullptr;
    dtype type{};
    int ndim = 0;
    int64_t shape[strided_seen_dims]{}, strides[strided_seen_dims]{};
    bool high_precision = false, crc32 = false;
    tensor_stats stats;
  };
  static constexpr size_t strided_seen_max = 1024;  // a power of two
  std::vector<strided_seen> strided_seen_table;

  static bool same_layout(const strided_seen &e, const DLTensor &t) {
    return e.ndim == t.ndim && std::equal(t.shape, t.shape + t.ndim, e.shape) &&
           std::equal(t.strides, t.strides + t.ndim, e.strides);
  }

  const tensor_stats *strided_seen_find(uint64_t content, const std::byte *data, const DLTensor &t, dtype type,
                                        const stats_options &o) const {
    if (strided_seen_table.empty() || t.ndim > strided_seen_dims) return nullptr;
    const strided_seen &e = strided_seen_table[content & (strided_seen_max - 1)];
    if (e.content == content && e.data == data && e.type == type && same_layout(e, t) &&
        e.high_precision == o.high_precision && e.crc32 == o.crc32)
      return &e.stats;
    return nullptr;
  }

  void strided_seen_add(uint64_t content, const std::byte *data, const DLTensor &t, const record_header &h,
                        const stats_options &o) {
    if (t.ndim > strided_seen_dims) return;
    if (strided_seen_table.empty()) strided_seen_table.resize(strided_seen_max);
    strided_seen &e = strided_seen_table[content & (strided_seen_max - 1)];
    e.content = content;
    e.data = data;
    e.type = h.type;
    e.ndim = t.ndim;
    std::copy(t.shape, t.shape + t.ndim, e.shape);
    std::copy(t.strides, t.strides + t.ndim, e.strides);
    e.high_precision = o.high_precision;
    e.crc32 = o.crc32;
    e.stats = *h.stats;
  }

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

  void apply_control() {
    for (const record &r : control->take()) {
      const auto &m = r.header.meta;
      const std::string command = m.is_object() ? m.value("command", std::string{}) : std::string{};
      const std::string from = m.is_object() ? m.value("from", std::string("a stage")) : std::string("a stage");
      const std::string reason = m.is_object() ? m.value("reason", std::string{}) : std::string{};
      try {
        if (command == "stop") {
          if (!service_ended)
            std::fprintf(stderr, "tprobe: %s stopped the capture%s%s\n", from.c_str(), reason.empty() ? "" : ": ",
                         reason.c_str());
          service_ended = stopped_by_pipeline = true;
        } else if (command == "monitor") {
          if (config.task != "monitor") throw usage_error("command \"monitor\" is for a monitor session (TrainerMon)");
          const auto on = m.find("on");
          if (on == m.end() || !on->is_boolean()) throw usage_error("monitor: expected \"on\": true or false");
          monitor_switch = on->get<bool>() ? TPROBE_MONITOR_ON : TPROBE_MONITOR_OFF;
          std::fprintf(stderr, "tprobe: %s turned the monitor %s%s%s\n", from.c_str(), on->get<bool>() ? "on" : "off",
                       reason.empty() ? "" : ": ", reason.c_str());
        } else if (command == "narrow") {
          narrowing n = narrow;
          if (auto it = m.find("step"); it != m.end()) {
            n.steps = config_parse_rank_or_step(*it, "step", "control command from " + from);
            std::sort(n.steps.begin(), n.steps.end());
            n.has_steps = !it->is_null();
          }
          if (auto it = m.find("list"); it != m.end()) {
            n.list.clear();
            if (!it->is_array()) throw usage_error("list: expected a list of strings");
            for (const auto &e : *it) {
              if (!e.is_string()) throw usage_error("list: expected a list of strings");
              n.list.push_back(e.get<std::string>());
            }
          }
          if (auto it = m.find("level"); it != m.end()) {
            if (!it->is_string() || (*it != "L0" && *it != "L1" && *it != "mix"))
              throw usage_error("level: expected \"L0\", \"L1\" or \"mix\"");
            n.level = it->get<std::string>();
          }
          narrow = std::move(n);
          narrowed_in_step = step;
          std::fprintf(stderr, "tprobe: %s narrowed the capture (%s)%s%s\n", from.c_str(), m.dump().c_str(),
                       reason.empty() ? "" : ": ", reason.c_str());
        } else {
          throw usage_error(fmt::format("unknown command \"{}\"", command));
        }
      } catch (const std::exception &e) {
        // A bad command must never end the training: it is reported and ignored.
        std::fprintf(stderr, "tprobe: warning: ignored a control command from %s: %s\n", from.c_str(), e.what());
      }
    }
  }

  record_header header(record_kind kind) {
    record_header h;
    h.kind = kind;
    stamp(h);
    return h;
  }
  void stamp(record_header &h) {
    h.run = run_id;
    h.rank = options.rank;
    h.step = step;
  }

  // A record to fill and enqueue, its header as header(kind) makes it: a spent one reused when
  // there is one (reusable), else a new one.
  pending_ptr make_pending(record_kind kind) {
    if (reusable.empty()) return std::make_unique<pending>(pending{record(header(kind)), {}});
    pending_ptr p = std::move(reusable.back());
    reusable.pop_back();
    p->r.reuse_as(kind);
    p->value_json.clear();
    stamp(p->r.header);
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
  bool enqueue(record &&r, bool urgent = false) {
    return enqueue(std::make_unique<pending>(pending{std::move(r), {}}), urgent);
  }
  bool enqueue(pending_ptr &&p, bool urgent = false) {
    const size_t size = p->r.has_payload() ? *p->r.header.stored : 0;
    // Spent records are kept for reuse, or freed, after the lock is released (declared before
    // it, destroyed after).
    struct keep_recycled {
      std::vector<pending_ptr> &spent_records, &reusable_records;
      ~keep_recycled() {
        if (spent_records.empty()) return;
        if (reusable_records.empty()) {
          reusable_records.swap(spent_records);
        } else {
          // Pointers: cheap to move, so none is freed while there is room for it.
          const size_t room = reusable_max > reusable_records.size() ? reusable_max - reusable_records.size() : 0;
          const size_t kept = std::min(room, spent_records.size());
          std::move(spent_records.begin(), spent_records.begin() + static_cast<std::ptrdiff_t>(kept),
                    std::back_inserter(reusable_records));
        }
        if (reusable_records.size() > reusable_max) reusable_records.resize(reusable_max);
        spent_records.clear();  // what is left goes, the storage stays
      }
    } after_unlock{recycled, reusable};
    std::unique_lock lock(mutex);
    if (!spent.empty()) spent.swap(recycled);
    if (sender_error) std::rethrow_exception(sender_error);
    if (detached.load(std::memory_order_relaxed)) {
      ++counts.undelivered;
      return false;
    }
    if (!queue.empty() && queued_bytes + size > options.queue_bytes) {
      ++counts.waits;
      producer_waiting = true;
      not_empty.notify_one();  // a full queue is worth a wake-up
      // Bounded: the sender detaches when the pipeline stops reading (pipeline_timeout_ms).
      has_space.wait(lock, [&] {
        return queue.empty() || queued_bytes + size <= options.queue_bytes || sender_error || detached.load();
      });
      producer_waiting = false;
      if (sender_error) std::rethrow_exception(sender_error);
      if (detached.load()) {
        ++counts.undelivered;
        return false;
      }
    }
    queued_bytes += size;
    p->r.header.seq = ++seq;
    queue.push_back(std::move(p));
    ++counts.records;
    if (sender_waiting &&
        (urgent || sender_deep_sleep || queue.size() >= wake_records || queued_bytes >= wake_bytes))
      not_empty.notify_one();
    return true;
  }

  // The sender thread, when the pipeline stopped reading: drop everything, say so once, and let
  // every later call return at once. Training goes on.
  void detach(const std::string &reason, uint64_t lost_in_batch) {
    int64_t first_lost;
    {
      std::lock_guard lock(mutex);
      counts.undelivered += queue.size() + lost_in_batch;
      first_lost = first_step_not_dumped = step_delivered + 1;
      queue.clear();
      queued_bytes = 0;
      detach_reason = reason;
      detached.store(true);
      has_space.notify_all();
    }
    for (auto &s : senders) s->abandon();
    std::fprintf(stderr,
                 "tprobe: warning: the pipeline stopped reading (%s): no step from step %lld on is dumped; the "
                 "capture is detached and training goes on\n",
                 reason.c_str(), static_cast<long long>(first_lost));
  }

  // Control calls (stop, step, close) on a detached session: the dump is incomplete.
  [[noreturn]] void throw_detached() {
    std::lock_guard lock(mutex);
    throw system_error(fmt::format("the capture is detached from its pipeline ({}): no step from step {} on is dumped",
                                   detach_reason, first_step_not_dumped));
  }

  void sender_loop() {
    try {
      std::vector<pending_ptr> batch;
      int idle_naps = 0;
      bool holding = false;  // a link keeps an open batch (flush_after_naps)
      // Sends every link's open batch; false once the session has detached.
      auto flush_links = [&] {
        try {
          for (auto &s : senders) s->flush();
          return true;
        } catch (const consumer_lost_error &e) {
          detach(e.what(), unsent_records());
          return false;
        }
      };
      for (;;) {
        bool flush_due = false;
        {
          std::unique_lock lock(mutex);
          while (queue.empty() && !closing) {
            if (holding && idle_naps >= flush_after_naps) {
              flush_due = true;  // sent below, without the lock: a send may block
              break;
            }
            sender_waiting = true;
            if (idle_naps >= deep_sleep_after) {
              sender_deep_sleep = true;
              not_empty.wait(lock);
            } else if (not_empty.wait_for(lock, sender_nap) == std::cv_status::timeout && queue.empty()) {
              ++idle_naps;
            }
            sender_waiting = sender_deep_sleep = false;
          }
          if (!flush_due && queue.empty()) {
            if (!holding) return;  // closing, and everything sent
            flush_due = true;      // closing: the open batch goes first
          } else if (!flush_due) {
            idle_naps = 0;
            batch.swap(queue);  // one lock for everything that piled up
            // An empty queue lets a waiting producer in (a payload larger than the whole budget
            // waits for exactly that), and records without payload release no bytes to wake it.
            if (producer_waiting) has_space.notify_one();
          }
        }
        if (flush_due) {
          if (!flush_links()) return;
          holding = false;
          continue;
        }
        bool control = false;  // a stop or step went by: flush now
        int64_t step_ended = -1;  // the batch's last step_end: delivered once the flush below went
        for (size_t i = 0; i < batch.size(); ++i) {
          record &r = batch[i]->r;
          const size_t size = r.has_payload() ? *r.header.stored : 0;
          control = control || r.header.kind == record_kind::flush || r.header.kind == record_kind::step_end;
          if (r.header.kind == record_kind::step_end) step_ended = r.header.step;
          if (options.lz4 && r.has_payload() && r.header.codec == record_codec::raw) {
            if (auto packed = record_payload_lz4(r.payload_bytes())) {
              const uint64_t length = r.header.length;
              r.header.codec = record_codec::lz4;
              r.set_payload_frame(std::move(*packed));
              r.header.length = length;
            }
          }
          try {
            if (is_step_barrier(r)) {
              for (auto &s : senders) (void)s->sync(record(r.header));
              std::lock_guard lock(mutex);
              barriers_done = r.header.meta["barrier"].get<uint64_t>();
              has_space.notify_all();
            } else if (!batch[i]->value_json.empty()) {
              // Checked by capture_value unless the caller vouched for it; packed from its text
              // as the record is encoded, with no tree in between.
              r.header.meta = record_meta_text(batch[i]->value_json);
              try {
                for (auto &s : senders) s->send(r);
              } catch (const std::invalid_argument &e) {  // tprobe_capture_value_unchecked's
                throw usage_error(fmt::format("{} {}: value is not valid JSON: {}", r.header.entry, r.header.slot,
                                              e.what()));
              }
              r.header.meta = nullptr;
            } else {
              for (auto &s : senders) s->send(r);
            }
          } catch (const consumer_lost_error &e) {
            detach(e.what(), batch.size() - i + unsent_records());
            return;
          }
          r.drop_payload();  // our reference to the payload goes now, not at the end of the batch
          // Only bytes count against the queue's budget: a record without a payload (most of
          // them: statistics in place) frees nothing a waiting producer could use, and taking the
          // lock for it made the training thread's next enqueue wait on this thread.
          if (size == 0) continue;
          std::lock_guard lock(mutex);
          queued_bytes -= size;
          if (producer_waiting) has_space.notify_one();
        }
        {
          // Back to the training thread, which frees them at its next capture.
          std::lock_guard lock(mutex);
          if (spent.empty()) spent.swap(batch);
        }
        batch.clear();
        // Small records wait in a link's batch (record.h "Batches") while more follow: a nap
        // that brings none sends them (flush_after_naps), as do a control record and closing.
        if (control && !flush_links()) return;
        if (step_ended >= 0) {
          std::lock_guard lock(mutex);
          step_delivered = step_ended;
        }
        holding = unsent_records() > 0;
      }
    } catch (...) {
      std::lock_guard lock(mutex);
      sender_error = std::current_exception();
      has_space.notify_all();
    }
  }

  // Records the senders took but did not hand on (batches): undelivered when they detach. With
  // several senders, the largest: every sender was given every record.
  uint64_t unsent_records() const {
    size_t n = 0;
    for (const auto &s : senders) n = std::max(n, s->unsent_records());
    return n;
  }

  // `tprobe run` writes RUN_DIR/failed when a stage fails (launcher.h).
  static std::string failure_marker() {
    const char *dir = std::getenv("TPROBE_RUN_DIR");
    return dir && *dir ? std::string(dir) + "/failed" : std::string();
  }

  // A session of a config.json (config_path), or of task monitor from a monitor config
  // (monitor_config_path non-null: tprobe_monitor_open).
  void open(const char *config_path, const tprobe_open_options *opts, const char *monitor_config_path = nullptr,
            const char *monitor_group_json = nullptr) {
    if (opts) options = *opts;
    else options = tprobe_open_options_default();
    if (options.queue_bytes == 0) options.queue_bytes = size_t{256} << 20;
    if (options.handshake_timeout_ms == 0) options.handshake_timeout_ms = 30000;
    if (options.watch_pid == 0) {
      if (const char *env = std::getenv("TPROBE_LAUNCHER_PID"); env && *env) options.watch_pid = std::atoll(env);
    }
    pool = payload_pool::create(options.queue_bytes);
    framework = options.framework ? options.framework : "pytorch";
    options.framework = nullptr;  // not kept: the caller's string may not outlive the call

    if (monitor_config_path) {
      // TPROBE_TASK and the other config.json overrides do not apply: the task is monitor.
      config = config_for_monitor(monitor_config_path, monitor_group_json ? monitor_group_json : "", options.rank);
    } else {
      std::string path = config_path ? config_path : "";
      if (path.empty()) {
        const char *env = std::getenv("TPROBE_CONFIG");
        if (!env || !*env) throw usage_error("no config: pass a config.json path or set TPROBE_CONFIG");
        path = env;
      }
      config = config_load(path);
      config_apply_overrides(config, config_overrides_from_env());
    }
    config_check_task_runs(config, config_pipeline_from_env());  // never a task captured as another
    config_check_dump_path_usable(config);
    filter = std::make_unique<capture_filter>(config);
    if (config.task == "grad_probe") grad = grad_probe_settings_from_json(config.grad_probe, config.source_name);
    if (config.task == "free_benchmark")
      fuzz = free_benchmark_settings_from_json(config.free_benchmark, config.source_name);
    if (options.pipeline_timeout_ms == 0)
      options.pipeline_timeout_ms =
          config.pipeline_timeout_s < 0 ? -1 : static_cast<int>(config.pipeline_timeout_s * 1000);

    std::string endpoints = options.endpoint ? options.endpoint : "";
    options.endpoint = nullptr;
    if (endpoints.empty()) {
      const char *env = std::getenv("TPROBE_ENDPOINT");
      if (!env || !*env)
        throw usage_error("no pipeline endpoint: run under `tprobe run`, set TPROBE_ENDPOINT, or pass one");
      endpoints = env;
    }
    size_t start = 0;
    for (;;) {
      const size_t comma = endpoints.find(',', start);
      const std::string ep = endpoints.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!ep.empty())
        senders.push_back(std::make_unique<record_sender>(
            ctx, ep, fmt::format("capture rank {}", options.rank), 1000,
            link_deadlines{.connect_timeout_ms = options.handshake_timeout_ms,
                           .stall_timeout_ms = options.pipeline_timeout_ms,
                           .watch_pid = options.watch_pid,
                           .failure_marker = failure_marker()},
            /*numbered=*/true));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }

    open_control();
    open_ring();
    record session(header(record_kind::session));
    session.header.seq = ++seq;  // sent here, before the sender thread starts, not enqueued
    session.header.meta = config.session_meta();
    if (control) session.header.meta["control"] = control->endpoint();
    session.header.meta["framework"] = framework;
    session.header.meta["rank"] = options.rank;
    // For the stages that compute statistics of what this session sends (tensor_stats.h).
    if (options.half_mean_of_rounded_sum) session.header.meta["half_mean"] = "rounded_sum";
    // Set by `tprobe run` for a manifest's runs: tells a stage that reads several runs which is which.
    if (const char *label = std::getenv("TPROBE_RUN_LABEL"); label && *label) session.header.meta["label"] = label;
    for (auto &s : senders) {
      s->send(session);
      s->flush();  // the stages learn of the session now, not with the first data
    }
    sender = quiet_thread([this] { sender_loop(); });  // Ctrl-C is the training's, not ours
  }

  // One copy of a large tensor in all: into shared memory that the stages read (shm.h). LZ4 is
  // for links that leave the host, whose payloads travel as bytes anyway. Without a ring (no
  // consumer on this host, or memfd unavailable) payloads take the socket, as always.
  // The ring is made at the first large payload: a statistics run, whose data never leaves,
  // never pays for it.
  void open_ring() {
    if (options.lz4 || !shm_enabled()) return;
    for (auto &s : senders) ring_wanted |= s->shares_memory();
  }
  bool ring_wanted = false;

  shm_ring *the_ring() {
    if (!ring && ring_wanted) {
      ring_wanted = false;  // one try
      try {
        ring = std::make_unique<shm_ring>(options.queue_bytes);
      } catch (const std::exception &e) {
        std::fprintf(stderr, "tprobe: warning: payloads go over the socket: %s\n", e.what());
      }
    }
    return ring.get();
  }

  // A payload frame of `bytes`: in the ring when it is worth it and the ring takes it, else from
  // the pool. The ring waits for its consumers while they release payloads; one that holds on
  // (a stage keeping records, a dead stage) sends this payload by socket instead, whose waits
  // are watched (endpoint.h), so the training thread never waits on a consumer unwatched.
  zmq::message_t payload_frame(size_t bytes) {
    if (bytes >= SHM_MIN_PAYLOAD && the_ring()) {
      auto frame = ring->allocate(bytes, [this] { return !detached.load(std::memory_order_relaxed); });
      if (frame) {
        counts.shared_bytes += bytes;
        return std::move(*frame);
      }
      ++counts.shared_gave_up;
    }
    return pool->frame(bytes);
  }

  // TPROBE_CONTROL_ENDPOINT chooses where to listen (a stage on another host needs tcp, and
  // CurveZMQ keys, docs/network.md); a wrong one is the user's error. Without it, a default
  // that cannot be bound costs the pipeline its control over the capture, never the training.
  void open_control() {
    const char *env = std::getenv("TPROBE_CONTROL_ENDPOINT");
    if (env && *env) {
      try {
        control = std::make_unique<control_listener>(ctx, env);
      } catch (const std::exception &e) {
        throw usage_error(fmt::format("TPROBE_CONTROL_ENDPOINT: {}", e.what()));
      }
      return;
    }
    try {
      control = std::make_unique<control_listener>(ctx, "");
    } catch (const std::exception &e) {
      std::fprintf(stderr, "tprobe: warning: no control endpoint (%s): stages cannot stop or narrow this capture\n",
                   e.what());
    }
  }

  void close() {
    // The sender thread is joined whatever stop() says: a session must never be freed with it.
    std::exception_ptr stop_error;
    if (started) {
      try {
        stop();
      } catch (...) {
        stop_error = std::current_exception();
      }
    }
    {
      std::lock_guard lock(mutex);
      closing = true;
    }
    not_empty.notify_one();
    if (sender.joinable()) sender.join();
    if (sender_error) std::rethrow_exception(sender_error);
    if (detached) throw_detached();
    if (stop_error) std::rethrow_exception(stop_error);
    try {
      for (auto &s : senders) s->finish(seq, 0);
    } catch (const consumer_lost_error &e) {
      detach(e.what(), 0);
      throw_detached();
    }
    // Every stage has handled the stream now (the eos acks), so a command one of them sent on
    // the way (tprobe-overflow's stop after the last steps' calls) has had its time to arrive:
    // say it, rather than close with it unread.
    poll_control();
  }

  void start() {
    if (filter->past_last_step(step)) service_ended = true;
    started = true;
  }

  void stop() {
    started = false;
    if (!enqueue(record(header(record_kind::flush)), true)) throw_detached();
  }

  static bool is_step_barrier(const record &r) {
    return r.header.kind == record_kind::step_end && record_is_barrier(r.header);
  }

  // msprobe writes a step's files before step() returns unless async_dump: so the step_end of a
  // dumped step is a barrier (record.h), answered once the writer has written the step's files.
  // Not for steps outside the config's step list, which leave no files to wait for.
  void next_step() {
    poll_control();
    const bool barrier = !config.async_dump && !service_ended && filter->rank_enabled(options.rank) &&
                         filter->step_enabled(step) && narrowed_step_enabled(step);
    record end(header(record_kind::step_end));
    if (barrier) end.header.meta = {{"barrier", ++barriers_requested}};
    bool delivered = enqueue(std::move(end), true);
    if (delivered && barrier) {
      std::unique_lock lock(mutex);
      // Bounded like a blocked send: the sender detaches when the pipeline dies or stalls.
      has_space.wait(lock, [&] { return barriers_done >= barriers_requested || sender_error || detached.load(); });
      if (sender_error) std::rethrow_exception(sender_error);
      delivered = !detached.load();
    }
    ++step;
    if (entries.size() > 4 * entries_this_step + 4096) entries.clear();
    entries_this_step = 0;
    filter->reset_step();
    if (filter->past_last_step(step)) service_ended = true;
    if (!delivered) throw_detached();
  }

  bool entry_begin(const char *entry, const char *parent, const char *const *stack, size_t stack_len,
                   int is_recompute, bool implicit = false) {
    if (!entry || !*entry) throw usage_error("entry name is empty");
    poll_control();
    if (!active()) return false;
    auto it = entries.find(std::string_view(entry));
    if (it != entries.end() && it->second.step == step) return it->second.captured;
    if (it == entries.end()) {
      // Checked once per name, here rather than in the writer, which would have to die on it
      // and lose the rest of the dump.
      if (std::string problem = dump_name_problem(entry, TPROBE_ENTRY_NAME_MAX); !problem.empty())
        throw usage_error(fmt::format("entry name \"{}\" {}", entry, problem));
      it = entries.emplace(entry, entry_seen{}).first;
    }
    ++entries_this_step;
    const bool selected = filter->entry_enabled(entry);
    it->second = {step, selected && narrowed_entry_enabled(entry)};
    if (!it->second.captured) {
      // What the scope or list leave out keeps its place in construct.json, as in msprobe's
      // (record.h, entry: skipped); nothing else of it is sent.
      if (!selected && !implicit && filter->structured()) {
        pending_ptr p = make_pending(record_kind::entry);
        p->r.header.entry = entry;
        p->r.header.meta = {{"parent", parent ? nlohmann::ordered_json(parent) : nlohmann::ordered_json(nullptr)},
                            {"skipped", true}};
        enqueue(std::move(p));
      }
      return false;
    }
    // An implicit announcement (first capture of an unannounced entry) has nothing to say: the
    // writer creates an entry from its first tensor, so no record is spent on it.
    if (implicit) return true;
    pending_ptr p = make_pending(record_kind::entry);
    record &r = p->r;
    r.header.entry = entry;
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    meta.get_ref<nlohmann::ordered_json::object_t &>().reserve(3);  // one allocation, not three
    // By reference (record.h section 5): the links send the lines once per id where they can.
    if (stack_len) meta["stack_id"] = stack_id_of(stack, stack_len);
    meta["parent"] = parent ? nlohmann::ordered_json(parent) : nlohmann::ordered_json(nullptr);
    if (is_recompute >= 0) meta["is_recompute"] = is_recompute != 0;
    r.header.meta = std::move(meta);
    return enqueue(std::move(p));
  }

  // tprobe_module_begin / tprobe_module_end: only the filter's scope and list state move.
  void module_edge(const char *forward_entry, bool begins) {
    if (!forward_entry || !*forward_entry) throw usage_error("module entry name is empty");
    if (!filter->selects_entries()) return;
    if (begins) filter->module_begin(forward_entry);
    else filter->module_end(forward_entry);
  }

  // Whether entry_begin(entry) would capture it now; no state changes (tprobe_entry_wanted).
  bool entry_wanted(const char *entry) {
    if (!entry || !*entry) throw usage_error("entry name is empty");
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

  uint64_t stack_id_of(const char *const *stack, size_t stack_len) {
    auto same = [&](const std::vector<std::string> &lines) {
      if (lines.size() != stack_len) return false;
      for (size_t i = 0; i < stack_len; ++i)
        if (lines[i] != (stack[i] ? stack[i] : "")) return false;
      return true;
    };
    if (const auto hint = stacks_by_array.find(stack); hint != stacks_by_array.end() && same(hint->second->lines))
      return hint->second->id;
    if (stacks_by_array.size() >= stacks_by_array_max) stacks_by_array.clear();
    size_t hash = stack_len;
    for (size_t i = 0; i < stack_len; ++i)
      hash = hash * 1000003u ^ std::hash<std::string_view>{}(stack[i] ? stack[i] : "");
    for (auto [it, end] = stacks_known.equal_range(hash); it != end; ++it)
      if (same(it->second.lines)) {
        stacks_by_array[stack] = &it->second;
        return it->second.id;
      }
    known_stack k{{}, stacks_known.size() + 1};
    auto lines = nlohmann::ordered_json::array();
    for (size_t i = 0; i < stack_len; ++i) {
      k.lines.emplace_back(stack[i] ? stack[i] : "");
      lines.push_back(k.lines.back());
    }
    stack_book_define(run_id, k.id, std::move(lines));
    const uint64_t id = k.id;
    stacks_by_array[stack] = &stacks_known.emplace(hash, std::move(k))->second;  // nodes never move
    return id;
  }

  bool slot_wanted(const char *entry, const char *slot) {
    if (!slot || !*slot) throw usage_error(fmt::format("entry \"{}\": slot name is empty", entry ? entry : ""));
    if (!entry_begin(entry, nullptr, nullptr, 0, -1, true)) return false;
    return filter->slot_enabled(entry, slot);
  }

  // How this session's statistics are taken in place: the config's precision, the CRC when
  // summary_mode asks for it, large tensors' parts shared with the helper thread.
  stats_options stats_options_here() {
    return {.high_precision = config.precision == "high",
            .half_mean_of_rounded_sum = options.half_mean_of_rounded_sum != 0,
            .crc32 = filter->want_crc32(),
            .runner = &runner};
  }

  int capture_tensor(const char *entry, const char *slot, const DLTensor *t, int requires_grad, uint64_t content,
                     bool zeroed = false) {
    if (!t) throw usage_error("tensor is NULL");
    if (!slot_wanted(entry, slot)) {
      ++counts.skipped;
      return TPROBE_SKIPPED;
    }
    if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost)
      throw usage_error(fmt::format("{} {}: tensor is on device type {}, not in host memory", entry, slot,
                                    static_cast<int>(t->device.device_type)));
    pending_ptr p = make_pending(record_kind::tensor);
    record &r = p->r;
    auto &h = r.header;
    h.entry = entry;
    header_slot_set(h, entry, slot);
    h.type = dtype_from_dlpack(t->dtype);
    h.shape.assign(t->shape, t->shape + t->ndim);
    for (int64_t d : h.shape)
      if (d < 0) throw usage_error(fmt::format("{} {}: negative dimension in shape", entry, slot));
    h.requires_grad = requires_grad != 0;
    if (filter->save_tensor(entry)) h.flags |= RECORD_FLAG_SAVE;
    if (filter->want_crc32()) h.flags |= RECORD_FLAG_CRC32;

    const size_t elem = dtype_size(h.type);
    const size_t bytes = h.element_count() * elem;
    const auto *src = static_cast<const std::byte *>(t->data) + t->byte_offset;
    const bool contiguous = is_contiguous(*t);
    if (bytes && !t->data) throw usage_error(fmt::format("{} {}: tensor data is NULL", entry, slot));

    if (!(h.flags & RECORD_FLAG_SAVE) && options.stats_mode == TPROBE_STATS_AUTO &&
        (contiguous || bytes <= STRIDED_SCRATCH_MAX)) {
      // Nothing of the data must leave: one read pass here is cheaper than a copy plus a pass
      // in another process, and no pass at all when these very bytes were read just before.
      const stats_options o = stats_options_here();
      const tensor_stats *seen = !content     ? nullptr
                                 : contiguous ? stats_seen_find(content, src, h, o)
                                              : strided_seen_find(content, src, *t, h.type, o);
      if (seen) {
        h.stats = *seen;
        ++counts.stats_reused;
      } else {
        if (zeroed) {
          h.stats = tensor_stats_of_zeros(h.type, h.element_count(), h.shape.empty(), o);
          ++counts.stats_zeroed;
        } else if (contiguous) {
          h.stats = tensor_stats_compute(src, h.type, h.element_count(), h.shape.empty(), o);
          counts.stats_bytes_read += bytes;
        } else {
          // A view (a transpose, a slice): gathered in C order, as the copy a stage would read, so
          // the sums run in the same order; into memory kept for the next one, not shipped away.
          if (strided_scratch.size() < bytes) strided_scratch.resize(bytes);
          copy_strided(strided_scratch.data(), src, *t, elem, 0);
          h.stats = tensor_stats_compute(strided_scratch.data(), h.type, h.element_count(), h.shape.empty(), o);
          counts.stats_bytes_read += bytes;
        }
        if (content && contiguous) stats_seen_add(content, src, h, o);
        else if (content) strided_seen_add(content, src, *t, h, o);
      }
    } else {
      zmq::message_t frame = payload_frame(bytes);
      auto *dst = static_cast<std::byte *>(frame.data());
      if (bytes && contiguous && (h.flags & RECORD_FLAG_SAVE)) {
        // A saved tensor's statistics go into dump.json too: taken in the copy's own pass (from
        // L2, piece by piece), a large tensor's cost about what its copy costs alone (measured:
        // docs/performance.md), where the statistics stage would read the whole payload again
        // from memory; a small one's are a pass over bytes still in cache.
        stats_options o = stats_options_here();
        o.copy_to = dst;
        h.stats = tensor_stats_compute(src, h.type, h.element_count(), h.shape.empty(), o);
      } else if (bytes) {
        if (contiguous) copy_bytes_streaming(dst, src, bytes);
        else copy_strided(dst, src, *t, elem, 0);
      }
      r.set_payload_frame(std::move(frame));
      counts.bytes += bytes;
    }
    return enqueue(std::move(p)) ? TPROBE_OK : TPROBE_SKIPPED;
  }

  // Task grad_probe: optimizer steps trigger the captures, so start/stop do not gate them.
  bool grad_wanted(const char *param) {
    if (!grad) throw usage_error(fmt::format("gradient captures need task \"grad_probe\", not \"{}\"", config.task));
    if (!param || !*param) throw usage_error("parameter name is empty");
    poll_control();
    if (service_ended || detached.load(std::memory_order_relaxed) || !filter->rank_enabled(options.rank) ||
        !filter->step_enabled(step) || !narrowed_step_enabled(step) || !grad->wants(param))
      return false;
    // The name becomes a file name (step{S}/{param}.npy).
    if (std::string problem = dump_name_problem(param); !problem.empty())
      throw usage_error(fmt::format("parameter name \"{}\" {}", param, problem));
    return true;
  }

  // Task free_benchmark: the framework re-runs the calls; rows need what dump entries need (the
  // capture started, this rank, this step) and the section's scope and list.
  bool fuzz_wanted(const char *api_name) {
    if (!api_name || !*api_name) throw usage_error("API name is empty");
    if (!fuzz) return false;
    poll_control();
    return active() && fuzz->wants(api_name);
  }

  int capture_fuzz_row(const tprobe_fuzz_row &c) {
    // A backward row carries the forward API's name (msprobe's); the call was chosen by its
    // backward name, so that is the one checked again here.
    std::string chosen = c.api_name ? c.api_name : "";
    constexpr std::string_view forward_suffix = ".forward";
    if (c.stage && std::string_view(c.stage) == "backward" && chosen.size() > forward_suffix.size() &&
        chosen.compare(chosen.size() - forward_suffix.size(), forward_suffix.size(), forward_suffix) == 0)
      chosen = chosen.substr(0, chosen.size() - forward_suffix.size()) + ".backward";
    if (!fuzz_wanted(chosen.c_str())) {
      ++counts.skipped;
      return TPROBE_SKIPPED;
    }
    const std::string_view stage = c.stage ? c.stage : "";
    if (stage != "forward" && stage != "backward")
      throw usage_error(fmt::format("free_benchmark row of {}: stage \"{}\" is not forward or backward", c.api_name, stage));
    free_benchmark_row row;
    switch (c.verdict) {
      case TPROBE_FUZZ_RATIO: row.verdict = free_benchmark_row::kind::ratio; break;
      case TPROBE_FUZZ_SYMBOL_FLIPPING: row.verdict = free_benchmark_row::kind::symbol_flipping; break;
      case TPROBE_FUZZ_NO_RATIO: row.verdict = free_benchmark_row::kind::none; break;
      default: throw usage_error(fmt::format("free_benchmark row of {}: verdict {} is not a TPROBE_FUZZ_* value", c.api_name, c.verdict));
    }
    if (c.ndim < 0 || (c.ndim > 0 && !c.shape))
      throw usage_error(fmt::format("free_benchmark row of {}: shape is missing", c.api_name));
    for (int i = 0; i < c.ndim; ++i) {
      if (c.shape[i] < 0) throw usage_error(fmt::format("free_benchmark row of {}: negative dimension in shape", c.api_name));
      row.shape.push_back(c.shape[i]);
    }
    if (c.output_index < -1)
      throw usage_error(fmt::format("free_benchmark row of {}: output_index {} is not -1 or an index", c.api_name, c.output_index));
    if (c.output_index >= 0) row.output_index = c.output_index;
    row.rank = options.rank < 0 ? 0 : options.rank;  // msprobe's get_dist_rank(): 0 when not distributed
    row.pert_mode = fuzz->pert_mode;
    row.stage = std::string(stage);
    row.step = step;
    row.api_name = c.api_name;
    if (row.verdict == free_benchmark_row::kind::ratio) row.ratio = c.ratio;
    row.dtype = c.dtype ? c.dtype : "";
    return enqueue(free_benchmark_record_make(header(record_kind::tensor), row)) ? TPROBE_OK : TPROBE_SKIPPED;
  }

  // Task monitor: the caller gates by step and rank (the monitor config's start_step,
  // step_interval, collect_times, module_ranks); the session only carries the rows.
  int capture_monitor(const char *prefix, int64_t monitor_step, const char *rows_json) {
    if (config.task != "monitor") {
      ++counts.skipped;
      return TPROBE_SKIPPED;
    }
    if (!prefix || !*prefix) throw usage_error("monitor rows: prefix is empty");
    if (!rows_json || !*rows_json) throw usage_error(fmt::format("monitor rows of {}: record_meta_json is empty", prefix));
    poll_control();
    if (detached.load(std::memory_order_relaxed)) {
      ++counts.undelivered;
      return TPROBE_SKIPPED;
    }
    if (service_ended) {  // a stage's "stop": the monitor is over, TrainerMon removes its hooks
      ++counts.skipped;
      return TPROBE_SKIPPED;
    }
    if (std::string_view(prefix) == monitor_stack_info_slot) {
      const std::string what = fmt::format("monitor stack_info at step {}", monitor_step);
      const auto doc = pyjson_parse(rows_json, what);
      if (!doc.is_object() || !doc.contains("step") || doc["step"] != monitor_step)
        throw usage_error(fmt::format("{}: expected {{\"step\": {}, \"stack_info\": [...]}}", what, monitor_step));
      const auto stacks = monitor_stack_info_from_json(doc.value("stack_info", nlohmann::ordered_json()), what);
      return enqueue(monitor_stack_record_make(header(record_kind::tensor), monitor_step, stacks), true) ? TPROBE_OK
                                                                                                     : TPROBE_SKIPPED;
    }
    // Python's json.dumps writes NaN as NaN: pyjson reads it.
    const std::string what = fmt::format("monitor rows of {} at step {}", prefix, monitor_step);
    const monitor_rows rows = monitor_rows_from_json(pyjson_parse(rows_json, what), what);
    if (rows.step != monitor_step)
      throw usage_error(fmt::format("{}: the rows say step {}", what, rows.step));
    // Urgent: alarms are for now, and a step's rows are few records.
    return enqueue(monitor_record_make(header(record_kind::tensor), prefix, rows), true) ? TPROBE_OK : TPROBE_SKIPPED;
  }

  int capture_grad(const char *param, const grad_numbers &n, std::vector<std::byte> bits, const char *device) {
    record r = grad_record_make(header(record_kind::tensor), param, n, std::move(bits));
    if (device && *device) r.header.device = device;
    return enqueue(std::move(r)) ? TPROBE_OK : TPROBE_SKIPPED;
  }

  int capture_value(const char *entry, const char *slot, const char *json_text, bool checked = true) {
    if (!slot_wanted(entry, slot)) {
      ++counts.skipped;
      return TPROBE_SKIPPED;
    }
    const char *text = json_text ? json_text : "null";
    // Never empty from here on: the sender tells a value's text by its being non-empty.
    if (!*text) throw usage_error(fmt::format("{} {}: value is empty, not JSON", entry, slot));
    // JSON as Python's json reads it: the NaN / Infinity / -Infinity tokens that non-finite reals
    // are written as (core/dump_semantics.h) are accepted; pyjson's parse, slower, only for texts
    // with them (or for its message, when the text is not JSON).
    if (checked && !nlohmann::ordered_json::accept(text)) {
      try {
        [[maybe_unused]] const auto parsed = pyjson_parse(text, "value");
      } catch (const usage_error &e) {
        throw usage_error(fmt::format("{} {}: value is not valid JSON: {}", entry, slot, e.what()));
      }
    }
    pending_ptr p = make_pending(record_kind::value);
    p->r.header.entry = entry;
    header_slot_set(p->r.header, entry, slot);
    p->value_json.assign(text);
    return enqueue(std::move(p)) ? TPROBE_OK : TPROBE_SKIPPED;
  }
};

namespace {
template <typename F>
int guarded(F &&f) {
  try {
    g_last_error.clear();
    return f();
  } catch (const std::exception &e) {
    g_last_error = e.what();
    return TPROBE_ERROR;
  }
}

int null_session() {
  g_last_error = "session is NULL";
  return TPROBE_ERROR;
}
}  // namespace

extern "C" {

tprobe_open_options tprobe_open_options_default(void) {
  tprobe_open_options o{};
  o.rank = -1;
  return o;
}

int tprobe_session_open(const char *config_path, const tprobe_open_options *options, tprobe_session **out) {
  if (!out) return null_session();
  *out = nullptr;
  return guarded([&] {
    auto s = std::make_unique<tprobe_session>();
    s->open(config_path, options);
    *out = s.release();
    return TPROBE_OK;
  });
}

int tprobe_monitor_open(const char *monitor_config_path, const char *group_json, const tprobe_open_options *options,
                        tprobe_session **out) {
  if (!out) return null_session();
  *out = nullptr;
  return guarded([&] {
    if (!monitor_config_path || !*monitor_config_path)
      throw usage_error("tprobe_monitor_open: no monitor config: pass the path of a monitor json");
    auto s = std::make_unique<tprobe_session>();
    s->open(nullptr, options, monitor_config_path, group_json);
    *out = s.release();
    return TPROBE_OK;
  });
}

int tprobe_monitor_control(tprobe_session *s) {
  if (!s) return null_session();
  return guarded([&] {
    s->poll_control();
    return std::exchange(s->monitor_switch, TPROBE_SKIPPED);
  });
}

int tprobe_control_pending(const tprobe_session *s) { return s && s->control && s->control->pending() ? 1 : 0; }

int tprobe_capture_monitor(tprobe_session *s, const char *prefix, int64_t step, const char *record_meta_json) {
  if (!s) return null_session();
  return guarded([&] { return s->capture_monitor(prefix, step, record_meta_json); });
}

int tprobe_session_close(tprobe_session *s) {
  if (!s) return TPROBE_OK;
  const int rc = guarded([&] {
    s->close();
    return TPROBE_OK;
  });
  delete s;
  return rc;
}

int tprobe_start(tprobe_session *s) {
  if (!s) return null_session();
  return guarded([&] { return s->start(), TPROBE_OK; });
}

int tprobe_stop(tprobe_session *s) {
  if (!s) return null_session();
  return guarded([&] { return s->stop(), TPROBE_OK; });
}

int tprobe_step(tprobe_session *s) {
  if (!s) return null_session();
  return guarded([&] { return s->next_step(), TPROBE_OK; });
}

int64_t tprobe_current_step(const tprobe_session *s) { return s ? s->step : -1; }

int tprobe_entry_wanted(tprobe_session *s, const char *entry) {
  if (!s) return null_session();
  return guarded([&] { return s->entry_wanted(entry) ? TPROBE_OK : TPROBE_SKIPPED; });
}

int tprobe_module_begin(tprobe_session *s, const char *forward_entry) {
  if (!s) return null_session();
  return guarded([&] { return s->module_edge(forward_entry, true), TPROBE_OK; });
}

int tprobe_module_end(tprobe_session *s, const char *forward_entry) {
  if (!s) return null_session();
  return guarded([&] { return s->module_edge(forward_entry, false), TPROBE_OK; });
}

int tprobe_entry_begin(tprobe_session *s, const char *entry, const char *parent, const char *const *stack_lines,
                       size_t stack_len, int is_recompute) {
  if (!s) return null_session();
  return guarded([&] {
    return s->entry_begin(entry, parent, stack_lines, stack_len, is_recompute) ? TPROBE_OK : TPROBE_SKIPPED;
  });
}

int tprobe_capture_tensor(tprobe_session *s, const char *entry, const char *slot, const DLTensor *tensor,
                          int requires_grad) {
  if (!s) return null_session();
  return guarded([&] { return s->capture_tensor(entry, slot, tensor, requires_grad, 0); });
}

int tprobe_capture_tensor_content(tprobe_session *s, const char *entry, const char *slot, const DLTensor *tensor,
                                  int requires_grad, uint64_t content) {
  if (!s) return null_session();
  return guarded([&] { return s->capture_tensor(entry, slot, tensor, requires_grad, content); });
}

int tprobe_capture_tensor_zeroed(tprobe_session *s, const char *entry, const char *slot, const DLTensor *tensor,
                                 int requires_grad, uint64_t content) {
  if (!s) return null_session();
  return guarded([&] { return s->capture_tensor(entry, slot, tensor, requires_grad, content, true); });
}

int tprobe_capture_value(tprobe_session *s, const char *entry, const char *slot, const char *json) {
  if (!s) return null_session();
  return guarded([&] { return s->capture_value(entry, slot, json); });
}

int tprobe_capture_value_unchecked(tprobe_session *s, const char *entry, const char *slot, const char *json) {
  if (!s) return null_session();
  return guarded([&] { return s->capture_value(entry, slot, json, false); });
}

int tprobe_session_counts_get(const tprobe_session *s, tprobe_session_counts *counts) {
  if (!s || !counts) return null_session();
  std::lock_guard lock(s->mutex);  // undelivered is also counted by the sender thread
  *counts = s->counts;
  counts->detached = s->detached.load() ? 1 : 0;
  counts->first_step_not_dumped = s->detached.load() ? s->first_step_not_dumped : -1;
  counts->stats_parts_helped = s->runner.parts_by_helpers();
  return TPROBE_OK;
}

const char *tprobe_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"

// ---- Framework captures whose tensors may live on a device (tprobe_capture.h, last section) ----
namespace {

stat_value stat_from_c(const tprobe_stat &s, const char *what) {
  switch (s.kind) {
    case TPROBE_STAT_NULL: return stat_value::none();
    case TPROBE_STAT_BOOL: return stat_value::of_bool(s.integer != 0);
    case TPROBE_STAT_INT: return stat_value::of_int(s.integer);
    case TPROBE_STAT_REAL: return stat_value::of_real(s.real);
    default: break;
  }
  throw usage_error(fmt::format("summary statistic {}: kind {} is not a TPROBE_STAT_* value", what, s.kind));
}

thread_local std::string g_config_text;

}  // namespace

extern "C" {

int tprobe_capture_query(tprobe_session *s, const char *entry, const char *slot, unsigned *flags) {
  if (!s) return null_session();
  return guarded([&] {
    if (!flags) throw usage_error("tprobe_capture_query: flags is NULL");
    *flags = 0;
    if (!s->slot_wanted(entry, slot)) return TPROBE_SKIPPED;
    if (s->filter->save_tensor(entry)) *flags |= TPROBE_CAPTURE_SAVE;
    if (s->filter->want_crc32()) *flags |= TPROBE_CAPTURE_CRC32;
    return TPROBE_OK;
  });
}

int tprobe_capture_summary(tprobe_session *s, const char *entry, const char *slot,
                           const tprobe_tensor_summary *summary) {
  if (!s) return null_session();
  return guarded([&] {
    if (!summary) throw usage_error("tprobe_capture_summary: summary is NULL");
    if (!s->slot_wanted(entry, slot)) {
      ++s->counts.skipped;
      return TPROBE_SKIPPED;
    }
    // A summary cannot stand in for data the pipeline must write or hash.
    if (s->filter->save_tensor(entry) || s->filter->want_crc32())
      throw usage_error(fmt::format("{} {}: this slot needs the tensor's data (saved or CRC-32), not a summary",
                                    entry, slot));
    tprobe_session::pending_ptr p = s->make_pending(record_kind::tensor);
    record &r = p->r;
    auto &h = r.header;
    h.entry = entry;
    header_slot_set(h, entry, slot);
    h.type = dtype_from_dlpack(summary->dtype);
    if (summary->ndim < 0 || (summary->ndim > 0 && !summary->shape))
      throw usage_error(fmt::format("{} {}: summary shape is missing", entry, slot));
    h.shape.assign(summary->shape, summary->shape + summary->ndim);
    for (int64_t d : h.shape)
      if (d < 0) throw usage_error(fmt::format("{} {}: negative dimension in shape", entry, slot));
    if (summary->device && *summary->device) h.device = summary->device;
    h.requires_grad = summary->requires_grad != 0;
    tensor_stats st;
    st.max = stat_from_c(summary->max, "max");
    st.min = stat_from_c(summary->min, "min");
    st.mean = stat_from_c(summary->mean, "mean");
    st.norm = stat_from_c(summary->norm, "norm");
    st.nan_count = summary->nan_count;
    st.inf_count = summary->inf_count;
    h.stats = st;
    return s->enqueue(std::move(p)) ? TPROBE_OK : TPROBE_SKIPPED;
  });
}

int tprobe_capture_uninitialized(tprobe_session *s, const char *entry, const char *slot,
                                 const tprobe_tensor_summary *shape) {
  if (!s) return null_session();
  return guarded([&] {
    if (!shape) throw usage_error("tprobe_capture_uninitialized: shape is NULL");
    if (!s->slot_wanted(entry, slot)) {
      ++s->counts.skipped;
      return TPROBE_SKIPPED;
    }
    // Never saved or hashed, whatever the config asks for: there is no data, only garbage.
    tprobe_session::pending_ptr p = s->make_pending(record_kind::tensor);
    record &r = p->r;
    auto &h = r.header;
    h.entry = entry;
    header_slot_set(h, entry, slot);
    h.type = dtype_from_dlpack(shape->dtype);
    if (shape->ndim < 0 || (shape->ndim > 0 && !shape->shape))
      throw usage_error(fmt::format("{} {}: shape is missing", entry, slot));
    h.shape.assign(shape->shape, shape->shape + shape->ndim);
    for (int64_t d : h.shape)
      if (d < 0) throw usage_error(fmt::format("{} {}: negative dimension in shape", entry, slot));
    if (shape->device && *shape->device) h.device = shape->device;
    h.requires_grad = shape->requires_grad != 0;
    h.flags |= RECORD_FLAG_UNINITIALIZED;
    return s->enqueue(std::move(p)) ? TPROBE_OK : TPROBE_SKIPPED;
  });
}

int tprobe_capture_facts(tprobe_session *s, const char *entry, const char *slot, const tprobe_tensor_facts *facts) {
  if (!s) return null_session();
  return guarded([&] {
    if (!facts) throw usage_error("tprobe_capture_facts: facts is NULL");
    if (!s->slot_wanted(entry, slot)) {
      ++s->counts.skipped;
      return TPROBE_SKIPPED;
    }
    if (!facts->dtype || !*facts->dtype) throw usage_error(fmt::format("{} {}: facts name no dtype", entry, slot));
    tprobe_session::pending_ptr p = s->make_pending(record_kind::tensor);
    record &r = p->r;
    auto &h = r.header;
    h.entry = entry;
    header_slot_set(h, entry, slot);
    h.foreign_dtype = facts->dtype;
    if (facts->ndim < 0 || (facts->ndim > 0 && !facts->shape))
      throw usage_error(fmt::format("{} {}: facts shape is missing", entry, slot));
    h.shape.assign(facts->shape, facts->shape + facts->ndim);
    for (int64_t d : h.shape)
      if (d < 0) throw usage_error(fmt::format("{} {}: negative dimension in shape", entry, slot));
    if (facts->device && *facts->device) h.device = facts->device;
    h.requires_grad = facts->requires_grad != 0;
    return s->enqueue(std::move(p)) ? TPROBE_OK : TPROBE_SKIPPED;
  });
}

const char *tprobe_config_check(const char *config_path) {
  g_last_error.clear();
  try {
    std::string path = config_path ? config_path : "";
    if (path.empty()) {
      const char *env = std::getenv("TPROBE_CONFIG");
      if (!env || !*env) throw usage_error("no config: pass a config.json path or set TPROBE_CONFIG");
      path = env;
    }
    capture_config config = config_load(path);
    config_apply_overrides(config, config_overrides_from_env());
    config_check_task_runs(config, config_pipeline_from_env());
    config_check_dump_path_usable(config);
    auto meta = config.session_meta();
    meta["pipeline_timeout_s"] = config.pipeline_timeout_s;
    meta["on_pipeline_failure"] = config.on_pipeline_failure;
    g_config_text = meta.dump();
    return g_config_text.c_str();
  } catch (const std::exception &e) {
    g_last_error = e.what();
    return nullptr;
  }
}

int tprobe_entry_name_check(const char *name) {
  return guarded([&] {
    const std::string problem = dump_name_problem(name ? name : "", TPROBE_ENTRY_NAME_MAX);
    if (!problem.empty()) throw usage_error(fmt::format("entry name \"{}\" {}", name ? name : "", problem));
    return TPROBE_OK;
  });
}

const char *tprobe_monitor_config_check(const char *monitor_config_path, const char *group_json) {
  g_last_error.clear();
  try {
    if (!monitor_config_path || !*monitor_config_path)
      throw usage_error("tprobe_monitor_config_check: no monitor config: pass the path of a monitor json");
    capture_config config = config_for_monitor(monitor_config_path, group_json ? group_json : "");
    config_check_task_runs(config, config_pipeline_from_env());
    config_check_dump_path_usable(config);
    auto meta = config.session_meta();
    meta["pipeline_timeout_s"] = config.pipeline_timeout_s;
    meta["on_pipeline_failure"] = config.on_pipeline_failure;
    g_config_text = meta.dump();
    return g_config_text.c_str();
  } catch (const std::exception &e) {
    g_last_error = e.what();
    return nullptr;
  }
}

const char *tprobe_session_config(const tprobe_session *s) {
  if (!s) {
    null_session();
    return nullptr;
  }
  auto meta = s->config.session_meta();
  meta["framework"] = s->framework;
  meta["rank_of_session"] = s->options.rank;
  meta["pipeline_timeout_s"] = s->config.pipeline_timeout_s;
  meta["on_pipeline_failure"] = s->config.on_pipeline_failure;
  if (s->control) meta["control"] = s->control->endpoint();
  g_config_text = meta.dump();
  return g_config_text.c_str();
}

}  // extern "C"

// ---- Task grad_probe (tprobe_capture.h, core/grad_probe.h) ----
extern "C" {

int tprobe_grad_query(tprobe_session *s, const char *param) {
  if (!s) return null_session();
  return guarded([&] { return s->grad_wanted(param) ? TPROBE_OK : TPROBE_SKIPPED; });
}

int tprobe_capture_grad(tprobe_session *s, const char *param, const DLTensor *t) {
  if (!s) return null_session();
  return guarded([&] {
    if (!t) throw usage_error("tprobe_capture_grad: gradient is NULL");
    if (!s->grad_wanted(param)) {
      ++s->counts.skipped;
      return TPROBE_SKIPPED;
    }
    if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost)
      throw usage_error(fmt::format("gradient of {}: on device type {}, not in host memory", param,
                                    static_cast<int>(t->device.device_type)));
    const dtype type = dtype_from_dlpack(t->dtype);
    const std::span<const int64_t> shape(t->shape, static_cast<size_t>(t->ndim));
    uint64_t numel = 1;
    for (int64_t d : shape) numel *= d < 0 ? 0 : static_cast<uint64_t>(d);
    const auto *src = static_cast<const std::byte *>(t->data) + t->byte_offset;
    std::vector<std::byte> contiguous;  // only for a strided gradient; the usual one is read in place
    if (numel && !is_contiguous(*t)) {
      contiguous.resize(numel * dtype_size(type));
      copy_strided(contiguous.data(), src, *t, dtype_size(type), 0);
      src = contiguous.data();
    }
    std::vector<std::byte> bits(s->grad->direction() ? grad_sign_bytes(numel) : 0);
    const grad_numbers n = grad_numbers_compute(src, type, shape, *s->grad,
                                                bits.empty() ? nullptr : reinterpret_cast<uint8_t *>(bits.data()));
    return s->capture_grad(param, n, std::move(bits), nullptr);
  });
}

int tprobe_capture_grad_numbers(tprobe_session *s, const char *param, const tprobe_grad_numbers *c) {
  if (!s) return null_session();
  return guarded([&] {
    if (!c) throw usage_error("tprobe_capture_grad_numbers: numbers is NULL");
    if (!s->grad_wanted(param)) {
      ++s->counts.skipped;
      return TPROBE_SKIPPED;
    }
    grad_numbers n;
    n.type = dtype_from_dlpack(c->dtype);
    if (c->ndim < 0 || (c->ndim > 0 && !c->shape)) throw usage_error(fmt::format("gradient of {}: shape is missing", param));
    n.shape.assign(c->shape, c->shape + c->ndim);
    n.numel = 1;
    for (int64_t d : n.shape) {
      if (d < 0) throw usage_error(fmt::format("gradient of {}: negative dimension in shape", param));
      n.numel *= static_cast<uint64_t>(d);
    }
    n.max = c->max;
    n.min = c->min;
    n.norm = c->norm;
    const grad_probe_settings &g = *s->grad;
    if (g.distribution()) {
      if (!c->buckets || c->bucket_count != g.bounds.size() + 1)
        throw usage_error(fmt::format("gradient of {}: level L2 needs {} bucket counts", param, g.bounds.size() + 1));
      n.buckets.assign(c->buckets, c->buckets + c->bucket_count);
      n.zeros = c->zeros;
    }
    if (g.md5()) {
      if (n.numel && !c->float32_data) throw usage_error(fmt::format("gradient of {}: level L0 needs float32_data", param));
      n.crc32 = crc32_bytes(c->float32_data, n.numel * sizeof(float));
    }
    std::vector<std::byte> bits;
    if (g.direction()) {
      if (n.numel && !c->sign_bits) throw usage_error(fmt::format("gradient of {}: level {} needs sign_bits", param, g.level));
      const auto *b = reinterpret_cast<const std::byte *>(c->sign_bits);
      bits.assign(b, b + grad_sign_bytes(n.numel));
    }
    return s->capture_grad(param, n, std::move(bits), c->device);
  });
}

}  // extern "C"

// ---- Task free_benchmark (tprobe_capture.h, core/free_benchmark.h) ----
extern "C" {

int tprobe_fuzz_query(tprobe_session *s, const char *api_name) {
  if (!s) return null_session();
  return guarded([&] { return s->fuzz_wanted(api_name) ? TPROBE_OK : TPROBE_SKIPPED; });
}

int tprobe_capture_fuzz_row(tprobe_session *s, const tprobe_fuzz_row *row) {
  if (!s) return null_session();
  return guarded([&] {
    if (!row) throw usage_error("tprobe_capture_fuzz_row: row is NULL");
    return s->capture_fuzz_row(*row);
  });
}

}  // extern "C"
