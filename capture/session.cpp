// The capture session behind tprobe_capture.h: filtering and the copy on the calling thread, a
// bounded queue, and a sender thread that owns the sockets.
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "config.h"
#include "endpoint.h"
#include "errors.h"
#include "tprobe_capture.h"

namespace {

using namespace tprobe;

thread_local std::string g_last_error;

std::string random_run_id() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
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

// Copies a strided tensor into contiguous C order, innermost dimension by memcpy when contiguous.
void copy_strided(std::byte *dst, const std::byte *src, const DLTensor &t, size_t elem, int dim) {
  const int64_t n = t.shape[dim];
  const int64_t stride = t.strides[dim];
  if (dim == t.ndim - 1) {
    if (stride == 1) {
      std::memcpy(dst, src, static_cast<size_t>(n) * elem);
    } else {
      for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * elem, src + i * stride * static_cast<int64_t>(elem), elem);
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

zmq::message_t owned_frame(size_t size) {
  // new[] without value-initialisation: zeroing first would double the cost of the copy.
  auto *buf = new std::byte[size ? size : 1];
  return zmq::message_t(buf, size, [](void *data, void *) { delete[] static_cast<std::byte *>(data); }, nullptr);
}

}  // namespace

struct tprobe_session {
  capture_config config;
  std::unique_ptr<capture_filter> filter;
  tprobe_open_options options{};
  std::string framework;
  std::string run_id = random_run_id();
  zmq::context_t ctx{1};
  std::vector<std::unique_ptr<record_sender>> senders;

  // queue: training thread → sender thread
  std::mutex mutex;
  std::condition_variable not_empty, has_space;
  std::deque<record> queue;
  size_t queued_bytes = 0;
  bool closing = false;
  bool sender_waiting = false;
  std::exception_ptr sender_error;
  std::thread sender;

  // capture state (training thread only)
  int64_t step = 0;
  bool started = false;
  bool service_ended = false;  // past the last configured step
  uint64_t seq = 0;
  std::unordered_map<std::string, bool> entries;  // this step's entries → captured
  tprobe_session_counts counts{};

  bool active() const {
    return started && !service_ended && filter->rank_enabled(options.rank) && filter->step_enabled(step);
  }

  record_header header(record_kind kind) {
    record_header h;
    h.kind = kind;
    h.run = run_id;
    h.rank = options.rank;
    h.step = step;
    h.seq = ++seq;
    return h;
  }

  void enqueue(record r) {
    const size_t size = r.has_payload() ? *r.header.stored : 0;
    std::unique_lock lock(mutex);
    if (sender_error) std::rethrow_exception(sender_error);
    if (!queue.empty() && queued_bytes + size > options.queue_bytes) {
      ++counts.waits;
      has_space.wait(lock, [&] { return queue.empty() || queued_bytes + size <= options.queue_bytes || sender_error; });
      if (sender_error) std::rethrow_exception(sender_error);
    }
    queued_bytes += size;
    queue.push_back(std::move(r));
    ++counts.records;
    if (sender_waiting) not_empty.notify_one();  // a futex wake only when the sender sleeps
  }

  void sender_loop() {
    try {
      for (;;) {
        record r;
        {
          std::unique_lock lock(mutex);
          sender_waiting = true;
          not_empty.wait(lock, [&] { return !queue.empty() || closing; });
          sender_waiting = false;
          if (queue.empty()) return;
          r = std::move(queue.front());
          queue.pop_front();
        }
        const size_t size = r.has_payload() ? *r.header.stored : 0;
        if (options.lz4 && r.has_payload() && r.header.codec == record_codec::raw) {
          if (auto packed = record_payload_lz4(r.payload_bytes())) {
            const uint64_t length = r.header.length;
            r.header.codec = record_codec::lz4;
            r.set_payload_frame(std::move(*packed));
            r.header.length = length;
          }
        }
        for (auto &s : senders) s->send(r);
        {
          std::lock_guard lock(mutex);
          queued_bytes -= size;
        }
        has_space.notify_one();
      }
    } catch (...) {
      std::lock_guard lock(mutex);
      sender_error = std::current_exception();
      has_space.notify_all();
    }
  }

  void open(const char *config_path, const tprobe_open_options *opts) {
    if (opts) options = *opts;
    else options = tprobe_open_options_default();
    if (options.queue_bytes == 0) options.queue_bytes = size_t{256} << 20;
    if (options.handshake_timeout_ms == 0) options.handshake_timeout_ms = 30000;
    framework = options.framework ? options.framework : "pytorch";
    options.framework = nullptr;  // not kept: the caller's string may not outlive the call

    std::string path = config_path ? config_path : "";
    if (path.empty()) {
      const char *env = std::getenv("TPROBE_CONFIG");
      if (!env || !*env) throw usage_error("no config: pass a config.json path or set TPROBE_CONFIG");
      path = env;
    }
    config = config_load(path);
    config_apply_overrides(config, config_overrides_from_env());
    filter = std::make_unique<capture_filter>(config);

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
        senders.push_back(std::make_unique<record_sender>(ctx, ep, fmt::format("capture rank {}", options.rank), 1000,
                                                          options.handshake_timeout_ms));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }

    record session(header(record_kind::session));
    session.header.meta = config.session_meta();
    session.header.meta["framework"] = framework;
    session.header.meta["rank"] = options.rank;
    for (auto &s : senders) s->send(session);
    sender = std::thread([this] { sender_loop(); });
  }

  void close() {
    if (started) stop();
    {
      std::lock_guard lock(mutex);
      closing = true;
    }
    not_empty.notify_one();
    if (sender.joinable()) sender.join();
    if (sender_error) std::rethrow_exception(sender_error);
    for (auto &s : senders) s->finish(seq, 0);
  }

  void start() {
    if (filter->past_last_step(step)) service_ended = true;
    started = true;
  }

  void stop() {
    started = false;
    enqueue(record(header(record_kind::flush)));
  }

  void next_step() {
    enqueue(record(header(record_kind::step_end)));
    ++step;
    entries.clear();
    filter->reset_step();
    if (filter->past_last_step(step)) service_ended = true;
  }

  bool entry_begin(const char *entry, const char *parent, const char *const *stack, size_t stack_len,
                   int is_recompute) {
    if (!entry || !*entry) throw usage_error("entry name is empty");
    if (!active()) return false;
    auto [it, inserted] = entries.try_emplace(entry, false);
    if (!inserted) return it->second;
    it->second = filter->entry_enabled(entry);
    if (!it->second) return false;
    record r(header(record_kind::entry));
    r.header.entry = entry;
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    if (stack_len) {
      auto lines = nlohmann::ordered_json::array();
      for (size_t i = 0; i < stack_len; ++i) lines.push_back(stack[i] ? stack[i] : "");
      meta["stack"] = std::move(lines);
    }
    meta["parent"] = parent ? nlohmann::ordered_json(parent) : nlohmann::ordered_json(nullptr);
    if (is_recompute >= 0) meta["is_recompute"] = is_recompute != 0;
    r.header.meta = std::move(meta);
    enqueue(std::move(r));
    return true;
  }

  bool slot_wanted(const char *entry, const char *slot) {
    if (!slot || !*slot) throw usage_error(fmt::format("entry \"{}\": slot name is empty", entry ? entry : ""));
    if (!entry_begin(entry, nullptr, nullptr, 0, -1)) return false;
    return filter->slot_enabled(entry, slot);
  }

  int capture_tensor(const char *entry, const char *slot, const DLTensor *t, int requires_grad) {
    if (!t) throw usage_error("tensor is NULL");
    if (!slot_wanted(entry, slot)) {
      ++counts.skipped;
      return TPROBE_SKIPPED;
    }
    if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost)
      throw usage_error(fmt::format("{} {}: tensor is on device type {}, not in host memory", entry, slot,
                                    static_cast<int>(t->device.device_type)));
    record r(header(record_kind::tensor));
    auto &h = r.header;
    h.entry = entry;
    h.slot = slot;
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

    if (!(h.flags & RECORD_FLAG_SAVE) && options.stats_mode == TPROBE_STATS_AUTO && contiguous) {
      // Nothing of the data must leave: one read pass here is cheaper than a copy plus a pass
      // in another process.
      h.stats = tensor_stats_compute(src, h.type, h.element_count(), h.shape.empty(),
                                     stats_options{.high_precision = config.precision == "high",
                                                   .crc32 = filter->want_crc32()});
    } else {
      zmq::message_t frame = owned_frame(bytes);
      auto *dst = static_cast<std::byte *>(frame.data());
      if (bytes) {
        if (contiguous) std::memcpy(dst, src, bytes);
        else copy_strided(dst, src, *t, elem, 0);
      }
      r.set_payload_frame(std::move(frame));
      counts.bytes += bytes;
    }
    enqueue(std::move(r));
    return TPROBE_OK;
  }

  int capture_value(const char *entry, const char *slot, const char *json_text) {
    if (!slot_wanted(entry, slot)) {
      ++counts.skipped;
      return TPROBE_SKIPPED;
    }
    record r(header(record_kind::value));
    r.header.entry = entry;
    r.header.slot = slot;
    try {
      r.header.meta = nlohmann::ordered_json::parse(json_text ? json_text : "null");
    } catch (const nlohmann::json::exception &e) {
      throw usage_error(fmt::format("{} {}: value is not valid JSON: {}", entry, slot, e.what()));
    }
    enqueue(std::move(r));
    return TPROBE_OK;
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
  return guarded([&] { return s->capture_tensor(entry, slot, tensor, requires_grad); });
}

int tprobe_capture_value(tprobe_session *s, const char *entry, const char *slot, const char *json) {
  if (!s) return null_session();
  return guarded([&] { return s->capture_value(entry, slot, json); });
}

int tprobe_session_counts_get(const tprobe_session *s, tprobe_session_counts *counts) {
  if (!s || !counts) return null_session();
  *counts = s->counts;
  return TPROBE_OK;
}

const char *tprobe_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
