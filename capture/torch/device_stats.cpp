// device_stats.cpp: device tensors captured in batches read once per step or when full
// (device_stats.h has the contract, docs/performance.md "CUDA path" the cost model).
#include "device_stats.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include <ATen/record_function.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "capture_state.h"
#include "tensor_stats.h"

namespace tprobe::torch_capture {

namespace {

constexpr int64_t stats_per_row = 6;

long long env_number(const char *name) {
  const char *v = std::getenv(name);
  return v && *v ? std::atoll(v) : 0;
}

// A device with streams and events (CUDA, or any backend registered with c10); CPU has neither:
// its kernels have finished when the call returns.
std::optional<c10::Stream> current_stream(const at::Device &d) {
  if (d.is_cpu() || !c10::impl::hasDeviceGuardImpl(d.type())) return std::nullopt;
  return c10::impl::getDeviceGuardImpl(d.type())->getStream(d);
}

// Host memory a device copies into asynchronously must be pinned (pageable memory would make
// cudaMemcpyAsync synchronous); pinning needs the device's runtime, so CPU batches use plain memory.
at::TensorOptions host_options(const at::Device &d, at::ScalarType type) {
  return at::TensorOptions().dtype(type).pinned_memory(d.is_cuda());
}

// `count` values of `type` from host memory, on `b`'s device: staged in pinned memory, so the
// copy is asynchronous (torch's caching host allocator keeps the block until it has run).
at::Tensor on_device(const device_batch &b, const void *values, int64_t count, at::ScalarType type) {
  at::Tensor staged = at::empty({count}, host_options(b.device, type));
  std::memcpy(staged.data_ptr(), values, static_cast<size_t>(count) * staged.element_size());
  return b.device.is_cpu() ? staged : staged.to(b.device, /*non_blocking=*/true);
}

// The statistics of every segment of the arena, [6, segments] float64 on the device: max, min,
// sum, sum of squares, NaN count, Inf count, each reduced in float32 by one thread block per
// segment (a segment has at most `chunk_elements`: its sums stay within float32's rounding of a
// short sum, and the host adds a tensor's segments in float64).
at::Tensor segment_statistics(const device_batch &b) {
  const auto count = static_cast<int64_t>(b.segments.size());
  const at::Tensor lengths = on_device(b, b.segments.data(), count, at::kLong);
  const at::Tensor used = b.arena.narrow(0, 0, b.arena_used);
  // unsafe: the lengths are ours and sum to the data's size; the check would read them back (a sync).
  const auto reduce = [&](const at::Tensor &x, const char *how) {
    return at::segment_reduce(x, how, lengths, {}, {}, /*axis=*/0, /*unsafe=*/true);
  };
  // One statement each: an arena-sized temporary (the squares, the flags) goes back to the caching
  // allocator before the next is made, so the close needs about 1.25 arenas more, not 3.5.
  const at::Tensor max = reduce(used, "max");
  const at::Tensor min = reduce(used, "min");
  const at::Tensor sum = reduce(used, "sum");
  const at::Tensor sum_of_squares = reduce(used.square(), "sum");
  const at::Tensor nan_count = reduce(used.isnan().to(at::kFloat), "sum");
  const at::Tensor inf_count = reduce(used.isinf().to(at::kFloat), "sum");
  at::Tensor out = at::empty({6, count}, at::TensorOptions().dtype(at::kDouble).device(b.device));
  // stack_out casts the six float32 results into the float64 rows, as one copy.
  at::stack_out(out, {max, min, sum, sum_of_squares, nan_count, inf_count});
  return out;
}

// Adds the time from construction to destruction to a counter (nested uses count the inner time twice:
// collect_device runs inside capture_device when a batch fills, so the two counters overlap there).
class elapsed_into {
 public:
  explicit elapsed_into(uint64_t &counter) : counter_(counter), start_(std::chrono::steady_clock::now()) {}
  ~elapsed_into() {
    counter_ += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
  }
  elapsed_into(const elapsed_into &) = delete;
  elapsed_into &operator=(const elapsed_into &) = delete;

 private:
  uint64_t &counter_;
  std::chrono::steady_clock::time_point start_;
};

// The arena's next `numel` elements become `r`'s segments (of up to chunk_elements each), in the
// order of the copies into the arena.
void take_segments(device_batch &b, device_record &r, int64_t numel) {
  const int64_t chunk = device_path_settings_get().chunk_elements;
  r.segment = static_cast<int64_t>(b.segments.size());
  for (int64_t left = numel; left > 0; left -= chunk) b.segments.push_back(std::min(left, chunk));
  r.segments = static_cast<int64_t>(b.segments.size()) - r.segment;
  b.arena_used += numel;
}

// The kernel's dtype of a tensor whose bytes it can read as they lie, or -1 (segment_kernel.h).
int kernel_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return tprobe_segment_float32;
    case at::kHalf: return tprobe_segment_float16;
    case at::kBFloat16: return tprobe_segment_bfloat16;
    case at::kDouble: return tprobe_segment_float64;
    case at::kByte: return tprobe_segment_uint8;
    case at::kChar: return tprobe_segment_int8;
    case at::kShort: return tprobe_segment_int16;
    case at::kInt: return tprobe_segment_int32;
    case at::kLong: return tprobe_segment_int64;
    case at::kBool: return tprobe_segment_bool;
    default: return -1;
  }
}

// TPROBE_DEVICE_STATS=kernel: `t` into the batch's byte arena at the next offset aligned to 8, as
// its bytes if the kernel reads them as they lie (a dense tensor, whatever the order of its
// elements in memory: only the sums' last bits depend on it), else converted to float32 by copy_;
// its segments' places.
// Returns whether the copy was raw.
bool arena_copy_for_kernel(device_batch &b, device_record &r, const at::Tensor &t, uint64_t &copy_ns) {
  const device_path_settings &set = device_path_settings_get();
  if (!b.arena.defined())
    b.arena = at::empty({set.arena_elements * 8}, at::TensorOptions().dtype(at::kByte).device(b.device));
  const int64_t offset = (b.arena_bytes + 7) / 8 * 8;
  unsigned char *into = b.arena.data_ptr<uint8_t>() + offset;
  int dtype = kernel_dtype(t.scalar_type());
  const bool raw = dtype >= 0 && t.layout() == at::kStrided && t.has_storage() && !t.is_neg() &&
                   t.is_non_overlapping_and_dense();
  const elapsed_into timer(copy_ns);
  if (raw) {
    b.engine->copy(into, t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size(), b.stream);
  } else {
    // A view of the arena made without an operator, as the float32 arena's (capture_device).
    at::for_blob(into, t.sizes())
        .options(at::TensorOptions().dtype(at::kFloat).device(b.device))
        .target_device(b.device)
        .make_tensor()
        .copy_(t);
    dtype = tprobe_segment_float32;
  }
  const int64_t size = raw ? t.element_size() : static_cast<int64_t>(sizeof(float));
  const int64_t first = static_cast<int64_t>(b.segments.size());
  take_segments(b, r, t.numel());
  int64_t place = offset;
  for (int64_t k = first; k < static_cast<int64_t>(b.segments.size()); ++k) {
    b.places.push_back({static_cast<unsigned long long>(place), static_cast<unsigned int>(b.segments[k]),
                        static_cast<unsigned int>(dtype)});
    place += b.segments[k] * size;
  }
  b.arena_bytes = place;
  return raw;
}

// The statistics of every segment of a kernel batch's arena, [6, segments] float64 on the device:
// the places to the device, then one launch (segment_kernel.h).
at::Tensor kernel_statistics(device_batch &b) {
  const auto count = static_cast<int64_t>(b.places.size());
  const at::Tensor places =
      on_device(b, b.places.data(), static_cast<int64_t>(sizeof(tprobe_segment)) * count, at::kByte);
  at::Tensor out = at::empty({6, count}, at::TensorOptions().dtype(at::kDouble).device(b.device));
  b.engine->reduce(b.arena.data_ptr(), places.data_ptr(), static_cast<unsigned int>(count), out.data_ptr<double>(),
                   b.stream);
  return out;
}

// Enqueues the batch's deferred copies into its arena: one cat per dtype of all its tensors of
// that dtype (CUDA's cat copies up to 128 inputs a launch), straight into the arena for float32,
// else into a temporary converted by one copy_. A tensor's arena place and segments are given
// here, in the order of the copies. A tensor whose version counter moved since its capture was
// written by something the capture did not see: it is left out, its statistics unread.
void flush_deferred(device_queue &q, device_batch &b) {
  if (b.deferred.empty()) return;
  const elapsed_into timer(q.flush_ns);
  ++q.flushes;
  // Our own operators: never observed (the callbacks would take the state's mutex, held here).
  at::DisableRecordFunctionGuard no_record;
  at::NoGradGuard no_grad;
  const device_path_settings &set = device_path_settings_get();
  std::vector<deferred_copy> deferred = std::move(b.deferred);
  b.deferred.clear();
  b.deferred_elements = 0;
  q.deferred_storages.clear();
  q.has_deferred = false;
  // The batch's stream, whatever the caller's; a caller on another stream (an operator about to
  // write one of these tensors there) waits for the copies before its own work.
  const std::optional<c10::Stream> current = current_stream(b.device);
  std::optional<c10::StreamGuard> on_stream;
  if (b.stream && current != b.stream) on_stream.emplace(*b.stream);
  if (!b.arena.defined()) b.arena = at::empty({set.arena_elements}, at::TensorOptions().dtype(at::kFloat).device(b.device));
  std::vector<at::ScalarType> types;
  for (const deferred_copy &d : deferred)
    if (std::find(types.begin(), types.end(), d.type) == types.end()) types.push_back(d.type);
  std::vector<at::Tensor> parts;
  for (const at::ScalarType type : types) {
    parts.clear();
    const int64_t start = b.arena_used;
    const at::TensorOptions options = at::TensorOptions().dtype(type).device(b.device);
    for (const deferred_copy &d : deferred) {
      if (d.type != type) continue;
      device_record &r = b.records[d.record];
      if (static_cast<int64_t>(d.version.current_version()) != d.version_at_capture) {
        r.statistics->unread = true;
        ++q.unread;
        continue;
      }
      // A view of the held memory, made without an operator; the device named, so that torch
      // does not ask the driver where the pointer lives.
      parts.push_back(at::for_blob(d.data, {d.numel}).options(options).target_device(b.device).make_tensor());
      take_segments(b, r, d.numel);
    }
    if (parts.empty()) continue;
    at::Tensor into = b.arena.narrow(0, start, b.arena_used - start);
    if (type == at::kFloat) at::cat_out(into, parts, 0);
    else into.copy_(at::cat(parts, 0));  // bool becomes 0/1, as the eager copy_ makes it
  }
  if (on_stream && current) {
    c10::Event copied(b.device.type());
    copied.record(*b.stream);
    copied.block(*current);
  }
}

// Enqueues, behind every reduction and staging copy of the batch (same stream), the arena's
// reductions, the copies of their results and of the used rows into pinned memory, and the event
// the host will look at.
void close_batch(device_queue &q, device_batch &b) {
  if (b.closed) return;
  flush_deferred(q, b);
  b.closed = true;
  at::DisableRecordFunctionGuard no_record;
  // The batch's work went to its stream; step() may run under another current stream.
  std::optional<c10::StreamGuard> on_stream;
  if (b.stream) on_stream.emplace(*b.stream);
  if (!b.segments.empty()) {
    const at::Tensor stats = b.engine ? kernel_statistics(b) : segment_statistics(b);
    if (b.engine) ++q.kernels;
    b.segment_host = at::empty(stats.sizes(), host_options(b.device, at::kDouble));
    b.segment_host.copy_(stats, /*non_blocking=*/true);
  }
  // Freed into the caching allocator, which gives the block out again only on this stream, after
  // the reductions just enqueued.
  b.arena = at::Tensor();
  if (b.used > 0) b.host.narrow(0, 0, b.used).copy_(b.slots.narrow(0, 0, b.used), /*non_blocking=*/true);
  if (b.stream) {
    b.ready = std::make_unique<c10::Event>(b.device.type());
    b.ready->record(*b.stream);
  }
}

bool batch_done(const device_batch &b) { return !b.ready || b.ready->query(); }

// c10::Event has no blocking wait in torch 1.13 (2.x adds synchronize()); this is only reached at
// a step's end or with every slot buffer full, where the host has to have the numbers anyway.
void batch_wait(const device_batch &b) {
  while (!batch_done(b)) std::this_thread::sleep_for(std::chrono::microseconds(20));
}

tprobe_stat stat_of(double x, int kind) {
  if (kind == TPROBE_STAT_BOOL) return tprobe_stat{TPROBE_STAT_BOOL, x != 0.0, 0.0};
  if (kind == TPROBE_STAT_INT) return tprobe_stat{TPROBE_STAT_INT, static_cast<int64_t>(x), 0.0};
  return stat_real(x);
}

// Statistics remembered for reuse before the list starts over (a step of resnet18 enqueues ~800).
constexpr size_t known_contents_max = 16384;

// A record's facts, as the capture reports them whichever way its statistics or data travel.
device_record device_record_of(const std::string &entry, const std::string &slot, const at::Tensor &t,
                               DLDataType dtype, bool requires_grad) {
  device_record r;
  r.entry = entry;
  r.slot = slot;
  r.dtype = dtype;
  r.shape = t.sizes().vec();
  r.device = t.device().str();
  r.requires_grad = requires_grad;
  r.numel = t.numel();
  r.scalar_type = t.scalar_type();
  r.complex = t.is_complex();
  if (t.scalar_type() == at::kBool) r.kind = TPROBE_STAT_BOOL;
  else if (t.dim() == 0 && at::isIntegralType(t.scalar_type(), /*includeBool=*/false)) r.kind = TPROBE_STAT_INT;
  return r;
}

// TPROBE_DEVICE_STATS=kernel: the engine for a device's batches, or none; why there is none is
// said once per reason, and the batch then takes the float32 arena and ATen's reductions.
segment_engine *kernel_engine(const at::Device &device) {
  std::string why;
  segment_engine *engine = segment_engine_for(device, why);
  static std::vector<std::string> said;  // under the state's mutex, as every caller
  if (!engine && std::find(said.begin(), said.end(), why) == said.end()) {
    said.push_back(why);
    std::fprintf(stderr, "tprobe: TPROBE_DEVICE_STATS=kernel: %s: %s statistics are reduced by ATen instead\n",
                 why.c_str(), device.str().c_str());
  }
  return engine;
}

}  // namespace

const device_path_settings &device_path_settings_get() {
  static const device_path_settings settings = [] {
    device_path_settings s;
    if (const long long n = env_number("TPROBE_DEVICE_SLOTS"); n > 0) s.slots = n;
    if (const long long n = env_number("TPROBE_DEVICE_STAGING_MIB"); n > 0) s.staging_bytes = size_t(n) << 20;
    if (const long long n = env_number("TPROBE_DEVICE_ARENA_KIB"); n > 0) s.arena_elements = (int64_t(n) << 10) / 4;
    s.chunk_elements = std::max<int64_t>(1, std::min(s.chunk_elements, s.arena_elements / 4));
    const char *stats = std::getenv("TPROBE_DEVICE_STATS");
    s.direct_stats = stats && std::string(stats) == "direct";
    s.deferred_copies = stats && std::string(stats) == "deferred";
    s.kernel_stats = stats && std::string(stats) == "kernel";
    s.on_cpu = env_number("TPROBE_DEVICE_PATH_ON_CPU") == 1;
    s.off = env_number("TPROBE_DEVICE_PATH_OFF") == 1;
    return s;
  }();
  return settings;
}

// Each launch costs the training thread a few microseconds whatever the tensor's size, so the
// reductions are few: aminmax for both extremes, and one stack_out that casts every result into
// the row (cat promotes into the float64 out) instead of a cast kernel per statistic.
void device_statistics(const at::Tensor &t, bool high_precision, bool zero_dim, at::Tensor row) {
  at::Tensor x = t.detach();
  if (x.is_complex()) x = x.abs();
  if (x.scalar_type() == at::kBool) {
    const at::Tensor zero = at::zeros({}, x.options());
    at::stack_out(row, {x.any(), x.all(), zero, zero, zero, zero});
    return;
  }
  if (zero_dim) {
    const at::Tensor v = x.reshape({});
    at::stack_out(row, {v, v, v, v, v.isnan(), v.isinf()});
    return;
  }
  if (!at::isFloatingType(x.scalar_type()) || x.scalar_type() == at::kDouble || high_precision) x = x.to(at::kFloat);
  const auto [min, max] = at::aminmax(x);
  at::stack_out(row, {max, min, x.mean(), x.norm(), x.isnan().sum(), x.isinf().sum()});
}

bool state::capture_device(const std::string &entry, const std::string &slot, const at::Tensor &t, DLDataType dtype,
                           bool requires_grad, unsigned flags) {
  if (t.numel() == 0 && flags == 0) return capture_summary_null(entry, slot, t, dtype, requires_grad);
  const elapsed_into timer(device.capture_ns);
  const device_path_settings &set = device_path_settings_get();
  const at::Device dev = t.device();
  const std::optional<c10::Stream> stream = current_stream(dev);
  const bool zero_dim = t.dim() == 0;
  // Into the arena, or the direct reductions (device_stats.h).
  const bool segment = flags == 0 && !set.direct_stats && !zero_dim && !t.is_complex() &&
                       t.numel() <= set.arena_elements;
  // Its copy waits for the next flush (device_stats.h), where the operator callbacks see every
  // write that could come before it; the memory is read as it lies, so no negative bit and no
  // gaps, and a version counter to check at the flush.
  const bool defer = segment && set.deferred_copies && ops_on.load(std::memory_order_relaxed) && t.is_contiguous() &&
                     !t.is_neg() && t.has_storage() && !t.is_inference();
  auto &batches = device.batches;
  const uint64_t content = flags == 0 ? content_of(t) : 0;
  device_queue::known_statistics *known = content ? known_statistics_of(content, t) : nullptr;
  if (known) {
    // Nothing to enqueue: the record goes after the batches' records, to be read in order.
    device_record r = device_record_of(entry, slot, t, dtype, requires_grad);
    r.statistics = known->statistics;
    r.reused = true;
    ++device.tensors;
    ++device.reused;
    ++device_summaries;
    if (batches.empty()) {
      summary_emit(r);  // every earlier record has been read, the statistics with them
    } else {
      batches.back().records.push_back(std::move(r));
    }
    return true;
  }
  if (segment && !batches.empty() && !batches.back().closed && batches.back().device == dev &&
      batches.back().stream == stream &&
      batches.back().arena_used + batches.back().deferred_elements + t.numel() > set.arena_elements) {
    close_batch(device, batches.back());
    ++device.full;
    collect_device(false);
  }
  if (batches.empty() || batches.back().closed || batches.back().device != dev || batches.back().stream != stream) {
    // One event covers one stream's work: a change of stream or device starts a batch.
    if (!batches.empty()) close_batch(device, batches.back());
    device_batch b;
    b.device = dev;
    b.stream = stream;
    b.slots = at::empty({set.slots, stats_per_row}, at::TensorOptions().dtype(at::kDouble).device(dev));
    b.host = at::empty({set.slots, stats_per_row}, host_options(dev, at::kDouble));
    if (set.kernel_stats) b.engine = kernel_engine(dev);
    batches.push_back(std::move(b));
  }
  device_batch &b = batches.back();
  device_record r = device_record_of(entry, slot, t, dtype, requires_grad);
  if (flags == 0) {
    r.statistics = std::make_shared<device_statistics_cell>();
    if (content) {
      if (device.known.size() >= known_contents_max) device.known.clear();
      device_queue::known_statistics k;
      k.data = t.data_ptr();
      k.type = t.scalar_type();
      k.neg = t.is_neg();
      k.conj = t.is_conj();
      k.zero_dim = zero_dim;
      k.contiguous = t.is_contiguous();
      k.numel = t.numel();
      if (!k.contiguous) k.sizes = t.sizes().vec(), k.strides = t.strides().vec();
      k.statistics = r.statistics;
      device.known[content].push_back(std::move(k));
    }
  }
  if (defer) {
    b.deferred.push_back({t.storage(), t.data_ptr(), r.numel, t.scalar_type(), t.unsafeGetTensorImpl()->version_counter(),
                          t._version(), b.records.size()});
    b.deferred_elements += r.numel;
    ++device.deferred_storages[t.storage().unsafeGetStorageImpl()];
    device.has_deferred = true;
    ++device_summaries;
    ++device.segments;
    ++device.deferred;
  } else if (segment && b.engine) {
    device.raw_copies += arena_copy_for_kernel(b, r, t, device.copy_ns);
    ++device_summaries;
    ++device.segments;
  } else if (segment) {
    if (!b.arena.defined()) b.arena = at::empty({set.arena_elements}, at::TensorOptions().dtype(at::kFloat).device(dev));
    // copy_ converts to float32 and resolves a negative view; bool becomes 0/1 (max = any, min = all).
    // Its destination is a view of the arena made without an operator (narrow and view would be
    // two more dispatcher calls, microseconds each on the training thread).
    at::for_blob(b.arena.data_ptr<float>() + b.arena_used, t.sizes())
        .options(at::TensorOptions().dtype(at::kFloat).device(dev))
        .target_device(dev)
        .make_tensor()
        .copy_(t);
    take_segments(b, r, r.numel);
    ++device_summaries;
    ++device.segments;
  } else if (flags == 0) {
    r.row = b.used++;
    device_statistics(t, high_precision, zero_dim, b.slots.select(0, r.row));
    ++device_summaries;
  } else {
    // Conjugate and negative views are resolved on the device first (a kernel only when the bit
    // is set). copy_ would resolve them on the host after the copy, which for a non_blocking copy
    // from a GPU runs before the data has arrived: the data then arrives unresolved (seen on an
    // H100 with torch 2.11: a conj view's .npy and md5 had the imaginary parts' signs flipped).
    const at::Tensor logical = t.resolve_conj().resolve_neg();
    r.staged = at::empty(t.sizes(), host_options(dev, t.scalar_type()));
    r.staged.copy_(logical, /*non_blocking=*/true);
    b.staged_bytes += r.staged.nbytes();
  }
  b.records.push_back(std::move(r));
  ++device.tensors;
  if (b.deferred.size() >= set.deferred_max) flush_deferred(device, b);
  if (b.used == set.slots || b.staged_bytes >= set.staging_bytes) {
    close_batch(device, b);
    ++device.full;
    collect_device(false);
  }
  return true;
}

void state::collect_device(bool wait) {
  const elapsed_into timer(device.collect_ns);
  const device_path_settings &set = device_path_settings_get();
  auto &batches = device.batches;
  if (wait && !batches.empty()) close_batch(device, batches.back());
  size_t closed = 0;
  for (const auto &b : batches) closed += b.closed;
  while (!batches.empty() && batches.front().closed) {
    // Without `wait`, the host blocks only when more closed batches wait than may be in flight
    // (their buffers are what the capture would allocate next).
    if (!batch_done(batches.front())) {
      if (!wait && closed <= set.batches_in_flight) return;
      ++device.waits;
      batch_wait(batches.front());
    }
    device_batch b = std::move(batches.front());
    batches.pop_front();
    --closed;
    ++device.reads;
    const auto segment_count = static_cast<int64_t>(b.segments.size());
    device.bytes += static_cast<uint64_t>((b.used + segment_count) * stats_per_row) * sizeof(double) + b.staged_bytes;
    const double *rows = b.used > 0 ? b.host.data_ptr<double>() : nullptr;
    const double *segments = segment_count > 0 ? b.segment_host.data_ptr<double>() : nullptr;
    for (device_record &r : b.records) {
      if (!r.statistics) {
        capture_host(r.entry, r.slot, r.staged, r.dtype, r.requires_grad);
        continue;
      }
      // A deferred copy that never ran (its flush failed part-way) has neither segment nor row.
      if (!r.reused && r.segment < 0 && r.row < 0) r.statistics->unread = true;
      if (r.reused || r.statistics->unread) {
        summary_emit(r);
        continue;
      }
      double from_segment[stats_per_row];
      if (r.segment >= 0) {
        // Its segments' [max, min, sum, sum of squares, NaN, Inf], by columns, combined into the
        // row's [max, min, mean, norm, NaN, Inf].
        double combined[stats_per_row] = {-INFINITY, INFINITY, 0, 0, 0, 0};
        for (int64_t k = r.segment; k < r.segment + r.segments; ++k) {
          const auto value = [&](int statistic) { return segments[statistic * segment_count + k]; };
          combined[0] = std::max(combined[0], value(0));
          combined[1] = std::min(combined[1], value(1));
          for (int statistic = 2; statistic < stats_per_row; ++statistic) combined[statistic] += value(statistic);
        }
        const tprobe::dtype rounding = r.scalar_type == at::kHalf       ? tprobe::dtype::float16
                                       : r.scalar_type == at::kBFloat16 ? tprobe::dtype::bfloat16
                                                                        : tprobe::dtype::float32;
        const auto round = [&](double v) { return tensor_stat_round(rounding, high_precision, v); };
        // Any NaN makes all four NaN (msprobe), whatever the reductions made of it.
        const double nan = combined[4] > 0 ? std::numeric_limits<double>::quiet_NaN() : 0.0;
        from_segment[0] = nan + round(combined[0]);
        from_segment[1] = nan + round(combined[1]);
        from_segment[2] = nan + round(combined[2] / static_cast<double>(r.numel));
        from_segment[3] = nan + round(std::sqrt(combined[3]));
        from_segment[4] = combined[4];
        from_segment[5] = combined[5];
      }
      const double *v = r.segment >= 0 ? from_segment : rows + stats_per_row * r.row;
      std::copy(v, v + stats_per_row, r.statistics->values.begin());
      summary_emit(r);
    }
  }
}

void state::flush_device_deferred() {
  if (!device.batches.empty()) flush_deferred(device, device.batches.back());
}

void state::flush_before_write(const at::RecordFunction &fn) {
  const op_info &info = info_of(fn);
  if (info.written.empty()) return;
  std::lock_guard lock(mutex);
  try {
    forget_written(info, fn.inputs());  // forget_content flushes a written storage's deferred copies
  } catch (const std::exception &e) {
    fail(e.what());
  }
}

device_queue::known_statistics *state::known_statistics_of(uint64_t content, const at::Tensor &t) {
  const auto it = device.known.find(content);
  if (it == device.known.end()) return nullptr;
  for (device_queue::known_statistics &k : it->second) {
    // The same bytes read in the same order give the same statistics: same address, dtype and
    // bits, and the same geometry (or both contiguous, as many elements). A 0-d tensor's are
    // reported otherwise (its value, an int kept as an int), so 0-d only matches 0-d.
    if (k.data != t.data_ptr() || k.type != t.scalar_type() || k.neg != t.is_neg() || k.conj != t.is_conj() ||
        k.zero_dim != (t.dim() == 0) || k.numel != t.numel())
      continue;
    if (k.contiguous && t.is_contiguous()) return &k;
    if (!k.contiguous && t.sizes() == c10::IntArrayRef(k.sizes) && t.strides() == c10::IntArrayRef(k.strides))
      return &k;
  }
  return nullptr;
}

void state::summary_emit(const device_record &r) {
  const double *v = r.statistics->values.data();
  tprobe_tensor_summary s{};
  s.dtype = r.dtype;
  s.ndim = static_cast<int>(r.shape.size());
  s.shape = r.shape.data();
  s.device = r.device.c_str();
  s.requires_grad = r.requires_grad;
  const bool boolean = r.kind == TPROBE_STAT_BOOL;
  s.max = stat_of(v[0], r.kind);
  s.min = stat_of(v[1], r.kind);
  s.mean = boolean ? stat_null() : stat_of(v[2], r.kind);
  s.norm = boolean || r.complex ? stat_null() : stat_of(v[3], r.kind);
  s.nan_count = static_cast<uint64_t>(v[4]);
  s.inf_count = static_cast<uint64_t>(v[5]);
  if (r.statistics->unread) {
    s.max = s.min = s.mean = s.norm = stat_null();
    s.nan_count = s.inf_count = 0;
    if (!warned_unread) {
      warned_unread = true;
      std::fprintf(stderr,
                   "tprobe: %s %s changed before its statistics were copied (a write outside PyTorch's operators?): "
                   "reported without statistics; without TPROBE_DEVICE_STATS=deferred it is copied at capture\n",
                   r.entry.c_str(), r.slot.c_str());
    }
  }
  checked(tprobe_capture_summary(session, r.entry.c_str(), r.slot.c_str(), &s), "summary");
}

}  // namespace tprobe::torch_capture
