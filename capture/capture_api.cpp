// The C API of tprobe_capture.h: each call checks its arguments, runs the session's member
// (session.h) and turns an exception into TPROBE_ERROR with tprobe_last_error(). Apart from the
// session: the only code that knows the C structs and error convention, and the only place a
// C++ exception is caught for a C caller. Config checks that need no session live here too.
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "safe_path.h"
#include "session.h"

using namespace tprobe;
using namespace tprobe::session_detail;

namespace {

thread_local std::string g_last_error;

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

int tprobe_monitor_rowset(tprobe_session *s, const char *rows_json) {
  if (!s) return null_session();
  return guarded([&] { return s->monitor_rowset(rows_json); });
}

int tprobe_capture_monitor_values(tprobe_session *s, const char *prefix, int64_t step, int rowset, const double *values,
                                  size_t count) {
  if (!s) return null_session();
  return guarded([&] { return s->capture_monitor_values(prefix, step, rowset, values, count); });
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

// The checks a session's open makes of a config `load` returns (the task runs, dump_path usable),
// without opening anything: the session meta's text, or NULL with tprobe_last_error() set.
template <class Load>
const char *checked_config_text(Load &&load) {
  g_last_error.clear();
  try {
    capture_config config = load();
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
    tprobe_session::pending_ptr p = s->tensor_pending(
        entry, slot, [&](record_header &h) { h.type = dtype_from_dlpack(summary->dtype); }, summary->shape,
        summary->ndim, "summary shape", summary->device, summary->requires_grad);
    tensor_stats st;
    st.max = stat_from_c(summary->max, "max");
    st.min = stat_from_c(summary->min, "min");
    st.mean = stat_from_c(summary->mean, "mean");
    st.norm = stat_from_c(summary->norm, "norm");
    st.nan_count = summary->nan_count;
    st.inf_count = summary->inf_count;
    p->r.header.stats = st;
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
    tprobe_session::pending_ptr p = s->tensor_pending(
        entry, slot, [&](record_header &h) { h.type = dtype_from_dlpack(shape->dtype); }, shape->shape, shape->ndim,
        "shape", shape->device, shape->requires_grad);
    p->r.header.flags |= RECORD_FLAG_UNINITIALIZED;
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
    tprobe_session::pending_ptr p = s->tensor_pending(
        entry, slot, [&](record_header &h) { h.foreign_dtype = facts->dtype; }, facts->shape, facts->ndim,
        "facts shape", facts->device, facts->requires_grad);
    return s->enqueue(std::move(p)) ? TPROBE_OK : TPROBE_SKIPPED;
  });
}

const char *tprobe_config_check(const char *config_path) {
  return checked_config_text([&] {
    std::string path = config_path ? config_path : "";
    if (path.empty()) {
      const char *env = std::getenv("TPROBE_CONFIG");
      if (!env || !*env) throw usage_error("no config: pass a config.json path or set TPROBE_CONFIG");
      path = env;
    }
    capture_config config = config_load(path);
    config_apply_overrides(config, config_overrides_from_env());
    return config;
  });
}

int tprobe_entry_name_check(const char *name) {
  return guarded([&] {
    const std::string problem = dump_name_problem(name ? name : "", TPROBE_ENTRY_NAME_MAX);
    if (!problem.empty()) throw usage_error(fmt::format("entry name \"{}\" {}", name ? name : "", problem));
    return TPROBE_OK;
  });
}

const char *tprobe_monitor_config_check(const char *monitor_config_path, const char *group_json) {
  return checked_config_text([&] {
    if (!monitor_config_path || !*monitor_config_path)
      throw usage_error("tprobe_monitor_config_check: no monitor config: pass the path of a monitor json");
    return config_for_monitor(monitor_config_path, group_json ? group_json : "");
  });
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
