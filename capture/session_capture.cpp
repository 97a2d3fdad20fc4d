// The capture session's entry points (session.h): open and close, start, stop and steps, and the
// captures of tensors, values, gradients (grad_probe), free_benchmark rows and monitor rows, with
// the payload frames (shared-memory ring or pool) that a tensor's data leaves in. Apart from the
// queue they feed (session_queue.cpp), the memo they consult (session_stats.cpp) and the commands
// that narrow them (session_control.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string_view>

#include <fmt/format.h>

#include "monitor_record.h"
#include "pyjson.h"
#include "quiet_thread.h"
#include "safe_path.h"
#include "session.h"

namespace {

// The innermost dimension of a strided copy, element by element with a fixed-size load that the
// compiler inlines, rather than a memcpy call of a run-time size per element.
template <size_t Size>
void copy_run(std::byte *dst, const std::byte *src, int64_t n, int64_t stride_bytes) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * static_cast<int64_t>(Size), src + i * stride_bytes, Size);
}

}  // namespace

namespace tprobe::session_detail {

std::string random_run_id() {
  std::random_device rd;
  return fmt::format("{:07x}{:08x}", rd() & 0xfffffffu, rd());
}

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

}  // namespace tprobe::session_detail

using namespace tprobe;
using namespace tprobe::session_detail;

std::string tprobe_session::failure_marker() {
  const char *dir = std::getenv("TPROBE_RUN_DIR");
  return dir && *dir ? std::string(dir) + "/failed" : std::string();
}

// (monitor_config_path non-null: tprobe_monitor_open).
void tprobe_session::open(const char *config_path, const tprobe_open_options *opts,
                          const char *monitor_config_path, const char *monitor_group_json) {
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

void tprobe_session::open_ring() {
  if (options.lz4 || !shm_enabled()) return;
  for (auto &s : senders) ring_wanted |= s->shares_memory();
}

shm_ring *tprobe_session::the_ring() {
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

zmq::message_t tprobe_session::payload_frame(size_t bytes) {
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

void tprobe_session::close() {
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

void tprobe_session::start() {
  if (filter->past_last_step(step)) service_ended = true;
  started = true;
}

void tprobe_session::stop() {
  started = false;
  if (!enqueue(record(header(record_kind::flush)), true)) throw_detached();
}

void tprobe_session::next_step() {
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

bool tprobe_session::entry_begin(const char *entry, const char *parent, const char *const *stack,
                                 size_t stack_len, int is_recompute, bool implicit) {
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

int tprobe_session::capture_tensor(const char *entry, const char *slot, const DLTensor *t, int requires_grad,
                                   uint64_t content, bool zeroed) {
  if (!t) throw usage_error("tensor is NULL");
  if (!slot_wanted(entry, slot)) {
    ++counts.skipped;
    return TPROBE_SKIPPED;
  }
  if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost)
    throw usage_error(fmt::format("{} {}: tensor is on device type {}, not in host memory", entry, slot,
                                  static_cast<int>(t->device.device_type)));
  pending_ptr p = tensor_pending(
      entry, slot, [&](record_header &h) { h.type = dtype_from_dlpack(t->dtype); }, t->shape, t->ndim,
      /*shape_what=*/nullptr, /*device=*/nullptr, requires_grad);
  record &r = p->r;
  auto &h = r.header;
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

bool tprobe_session::grad_wanted(const char *param) {
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

int tprobe_session::capture_fuzz_row(const tprobe_fuzz_row &c) {
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

int tprobe_session::capture_monitor(const char *prefix, int64_t monitor_step, const char *rows_json) {
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

int tprobe_session::monitor_rowset(const char *rows_json) {
  if (!rows_json || !*rows_json) throw usage_error("monitor row set: rows_json is empty");
  const std::string what = fmt::format("monitor row set {}", monitor_rowsets.size());
  monitor_rowsets.push_back(std::make_unique<monitor_rows>(monitor_rows_from_json(pyjson_parse(rows_json, what), what)));
  return static_cast<int>(monitor_rowsets.size() - 1);
}

int tprobe_session::capture_monitor_values(const char *prefix, int64_t monitor_step, int rowset, const double *values,
                                           size_t count) {
  if (config.task != "monitor") {
    ++counts.skipped;
    return TPROBE_SKIPPED;
  }
  if (!prefix || !*prefix) throw usage_error("monitor rows: prefix is empty");
  if (rowset < 0 || static_cast<size_t>(rowset) >= monitor_rowsets.size())
    throw usage_error(fmt::format("monitor rows of {}: no row set {}", prefix, rowset));
  const monitor_rows &templ = *monitor_rowsets[static_cast<size_t>(rowset)];
  if (std::ranges::find(monitor_csv_prefixes(), std::string_view(prefix)) == monitor_csv_prefixes().end())
    throw usage_error(fmt::format("monitor rows: prefix \"{}\" is not one of {}", prefix, fmt::join(monitor_csv_prefixes(), ", ")));
  size_t needed = 0;
  for (const auto &r : templ.rows) needed += r.values.size();
  if (count != needed || (count && !values))
    throw usage_error(fmt::format("monitor rows of {} at step {}: {} numbers for a row set of {}", prefix, monitor_step,
                                  count, needed));
  poll_control();
  if (detached.load(std::memory_order_relaxed)) {
    ++counts.undelivered;
    return TPROBE_SKIPPED;
  }
  if (service_ended) {
    ++counts.skipped;
    return TPROBE_SKIPPED;
  }
  // The rows are filled and encoded on the sender thread (pending::monitor_template): here only
  // the numbers are copied. Not urgent: waking the sender for each of a step's prefixes cost the
  // training thread ~50 µs a call (the wake-up, and the sender taking the CPU); the sender's next
  // nap (sender_nap, 1 ms) sends them, so an alarm still prints within milliseconds.
  pending_ptr p = make_pending(record_kind::tensor);
  p->r.header.step = monitor_step;
  p->monitor_template = &templ;
  p->monitor_prefix.assign(prefix);
  p->monitor_values.assign(values, values + count);
  return enqueue(std::move(p), false) ? TPROBE_OK : TPROBE_SKIPPED;
}

int tprobe_session::capture_grad(const char *param, const grad_numbers &n, std::vector<std::byte> bits, const char *device) {
  record r = grad_record_make(header(record_kind::tensor), param, n, std::move(bits));
  if (device && *device) r.header.device = device;
  return enqueue(std::move(r)) ? TPROBE_OK : TPROBE_SKIPPED;
}

int tprobe_session::capture_value(const char *entry, const char *slot, const char *json_text, bool checked) {
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
