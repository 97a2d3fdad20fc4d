// device_stats.h: device tensors captured without a host sync per tensor.
//
// Contract (docs/performance.md, "CUDA path"). For a CUDA tensor the training thread only
// enqueues work on the tensor's current stream and returns:
//   - statistics of a real tensor that is not 0-d and fits in an arena: one copy_ of it, converted
//     to float32, into the open batch's arena (device memory, `arena_elements`), where it takes
//     segments of up to `chunk_elements`. Launches, not bytes, are the cost of most tensors (each
//     ATen call is microseconds of the training thread); the copy is one, and it keeps the values
//     as they were before the stream's next operator can change the tensor in place;
//   - statistics of any other tensor (larger than an arena, 0-d, complex, or all of them under
//     the test-only TPROBE_DEVICE_STATS=direct): ATen reductions write its 6 float64 statistics
//     into the next row of the open batch's slot buffer (device memory, `device_path_settings::slots` rows);
//   - data (task tensor, summary_mode md5): one non_blocking copy into pinned host staging.
// With TPROBE_DEVICE_STATS=deferred (and while the operator callbacks run, which is what makes it
// safe) the arena copy of a contiguous tensor without a negative bit waits: its storage is held
// (the memory cannot go back to the allocator) with its version, and the batch's waiting copies
// are enqueued together (state::flush_deferred: one cat per dtype into the arena, float32
// directly, other dtypes through one converting copy_) before any operator, on any thread and at
// any depth, writes one of their storages (the schema's written arguments; a collective's
// buffers; batch and instance norm's running statistics, unmarked in torch 1.13), when the
// operator callbacks stop, when `deferred_max` wait, and when the batch closes. A flush from another
// stream makes that stream wait for the copies. A tensor whose version counter moved by the flush
// was written unseen: it is left out and reported without statistics (device_unread, said once).
// Writes that neither an operator makes nor the version counter shows (a kernel called without
// the dispatcher, a compiled region's Triton kernels) are not seen: hence off by default.
// A tensor whose statistics were enqueued before in this capture span, unchanged (the same storage
// content: the capture's content names, from the storage's version counter and the operators'
// writes, as the host path's reuse), at the same address, dtype, negative/conjugate bits and
// geometry (or both contiguous with as many elements), costs nothing on the device: its record
// takes the earlier one's statistics when the host reads them. Most of an operator's inputs are
// the outputs of the operator before it. TPROBE_REUSE_STATS=off turns this off as on the host path.
// A batch closes when its slot buffer or arena is full, its staging holds `staging_bytes`, the
// stream or device changes, or at stop/step/close. Closing enqueues the arena's segmented
// reductions (max, min, sum, sum of squares, NaN and Inf counts of every segment, one thread block
// a segment: about 15 launches for the whole batch), one non_blocking copy of their results and
// of the used rows into pinned host buffers, and an event after them; the arena then goes back to
// torch's caching allocator, which hands it out again on the same stream, behind those reductions.
// The host combines a tensor's segments (sums in float64); Mean and Norm come from the sums,
// rounded as msprobe reports them
// (tensor_stat_round). The host reads a batch (one read: its
// records handed to the session in capture order, statistics from the pinned rows, data from the
// staging) at stop/step/close, waiting on the event then, or when more than `batches_in_flight`
// closed batches are waiting (the slot buffers are full: the one wait outside a step's end). No
// .item(), no blocking .cpu(), no stream or device synchronize on this path.
//
// With TPROBE_DEVICE_STATS=kernel (opt-in until it is measured on a GPU: docs/performance.md) the
// arena holds each tensor's bytes as they lie, in its own dtype, and no ATen call is made per
// tensor: a real, dense (non-overlapping, any strides), non-negative tensor of a dtype the kernel
// reads (float32/16, bfloat16, float64, the integers, bool) is one raw copy of its bytes
// (cuMemcpyAsync on torch's current stream), at an offset aligned to 8 bytes; any other arena
// tensor is copy_'d into float32 there as before. The arena is `arena_elements` of up to 8 bytes
// (64 MiB by default, and no temporaries at the close, where the ATen reductions take 1.25 arenas
// more). The close launches one kernel over all the batch's segments (segment_kernel.h, compiled
// by NVRTC at first use: segment_engine.h) instead of about 15 ATen reductions. Where there is
// no engine (no driver or NVRTC, a failed compile, a device other than CUDA) the path says why
// once and reduces with ATen as without the setting.
// On a machine without a device the same path runs for CPU tensors when the process starts with
// TPROBE_DEVICE_PATH_ON_CPU=1 (test-only, how CI runs this path without a GPU: the batches, rows,
// staging, order and read counts are the device's; copies and reductions are synchronous, there
// is no event). TPROBE_DEVICE_SLOTS, TPROBE_DEVICE_ARENA_KIB and TPROBE_DEVICE_STAGING_MIB override
// the sizes (read once per process): user settings for a GPU or host with less memory to spare.
// TPROBE_DEVICE_PATH_OFF=1 takes CUDA tensors off this path: each is read with a blocking .cpu(),
// one stream synchronisation per tensor, and captured as a host tensor. That is the reference the
// GPU tests compare this path against (tests/python/test_device_path.py), and a way to rule this
// path out when a device dump looks wrong.
//
// Thread-safety: everything here runs under the capture state's mutex (capture_state.h).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include "segment_engine.h"
#include "segment_kernel.h"
#include "tprobe_capture.h"

namespace tprobe::torch_capture {

inline tprobe_stat stat_null() { return tprobe_stat{TPROBE_STAT_NULL, 0, 0.0}; }
inline tprobe_stat stat_real(double v) { return tprobe_stat{TPROBE_STAT_REAL, 0, v}; }

// Statistics of a tensor on its device, msprobe's semantics (core/tensor_stats.h):
// [max, min, mean, norm, nan count, inf count] as float64, written into `row` (6 float64 on the
// tensor's device) by kernels enqueued on the current stream; nothing is read back.
void device_statistics(const at::Tensor &t, bool high_precision, bool zero_dim, at::Tensor row);

struct device_path_settings {
  int64_t slots = 4096;                  // rows of a batch's slot buffer: 192 KiB device + 192 KiB pinned
  // The arena of float32 a batch's tensors are copied into: 32 MiB, plus temporaries of 1.25 times
  // that while its reductions are enqueued. A segment is reduced by one thread block: a tensor of more than
  // `chunk_elements` takes several, so that a large tensor's reduction spreads over the device and
  // each block's float32 sums stay short.
  int64_t arena_elements = int64_t{8} << 20;
  int64_t chunk_elements = int64_t{1} << 14;  // at most a quarter of the arena
  bool direct_stats = false;             // TPROBE_DEVICE_STATS=direct (test-only): no arena, every tensor a row
  bool deferred_copies = false;          // TPROBE_DEVICE_STATS=deferred: arena copies enqueued together (device_stats.h)
  bool kernel_stats = false;             // TPROBE_DEVICE_STATS=kernel: raw copies, one kernel a batch (device_stats.h)
  size_t deferred_max = 1024;            // deferred copies of a batch before they are enqueued anyway
  size_t staging_bytes = size_t{128} << 20;  // pinned data a batch may hold before it closes
  size_t batches_in_flight = 2;          // closed batches not yet read before the host waits
  bool on_cpu = false;                   // TPROBE_DEVICE_PATH_ON_CPU=1 (test-only): CPU tensors take this path
  bool off = false;                      // TPROBE_DEVICE_PATH_OFF=1: CUDA tensors do not
};
// The process's settings, from the environment on first use.
const device_path_settings &device_path_settings_get();

// A statistics record's [max, min, mean, norm, NaN, Inf], filled when its batch is read and shared
// with the later records that reuse them. `unread`: its tensor changed before its deferred copy
// was enqueued (a write the capture did not see), so it has no statistics to report.
struct device_statistics_cell {
  std::array<double, 6> values{};
  bool unread = false;
};

// One captured device tensor waiting for its batch's read.
struct device_record {
  std::string entry, slot;
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::string device;
  bool requires_grad = false;
  int kind = TPROBE_STAT_REAL;  // of max/min (and mean/norm for 0-d integers)
  bool complex = false;
  int64_t row = -1;   // its statistics' row in the batch, or -1 (its segment's, or its data travels)
  int64_t segment = -1;  // its statistics' first segment in the batch's arena, or -1
  int64_t segments = 0;  // and how many
  int64_t numel = 0;
  at::ScalarType scalar_type = at::kFloat;  // how a segment's Mean and Norm are rounded
  // Statistics records: filled by the record that enqueued them, shared with the later records
  // that reuse them (which enqueue nothing).
  std::shared_ptr<device_statistics_cell> statistics;
  bool reused = false;
  at::Tensor staged;  // the data, contiguous, in pinned host memory (row == -1)
};

// A statistics tensor whose copy into the arena waits for the next flush (state::flush_deferred):
// its memory, held, and what is needed to read it then and to see that it did not change.
struct deferred_copy {
  c10::Storage storage;  // keeps the memory from going back to the caching allocator meanwhile
  void *data = nullptr;  // its first element (contiguous, no negative or conjugate bit)
  int64_t numel = 0;
  at::ScalarType type = at::kFloat;
  c10::VariableVersion version;  // its version counter, and its value at capture
  int64_t version_at_capture = 0;
  size_t record = 0;  // in the batch's records
};

// Records of one device and stream, read by the host at once.
struct device_batch {
  at::Device device{at::kCPU};
  std::optional<c10::Stream> stream;  // the stream its work was enqueued on (none on CPU)
  at::Tensor slots;                   // [settings.slots, 6] float64 on the device
  at::Tensor host;                    // the same in pinned host memory, filled when closed
  int64_t used = 0;                   // rows written
  at::Tensor arena;                   // [settings.arena_elements] float32 on the device, or none
  int64_t arena_used = 0;             // elements copied in
  std::vector<int64_t> segments;      // the elements of each segment (≤ chunk_elements), in the arena's order
  // TPROBE_DEVICE_STATS=kernel: the engine that fills and reduces the arena (bytes, any dtype), or
  // none (a float32 arena and ATen's reductions); the bytes used, and where each segment lies.
  segment_engine *engine = nullptr;
  int64_t arena_bytes = 0;
  std::vector<tprobe_segment> places;
  // Copies into the arena not yet enqueued, in capture order; the arena is reserved for them.
  std::vector<deferred_copy> deferred;
  int64_t deferred_elements = 0;
  at::Tensor segment_host;            // [6, segments] float64 in pinned host memory, filled when closed
  size_t staged_bytes = 0;
  std::vector<device_record> records;  // in capture order
  std::unique_ptr<c10::Event> ready;   // recorded after the copy into `host` (none on CPU)
  bool closed = false;
};

// The batches of a capture, oldest first; the last may be open.
struct device_queue {
  std::deque<device_batch> batches;
  uint64_t tensors = 0;  // device tensors captured through the queue
  uint64_t segments = 0;  // of them, statistics reduced in an arena (the others' in slot rows, or data)
  uint64_t reused = 0;    // of them, statistics those of an earlier record (nothing enqueued)
  uint64_t raw_copies = 0;  // of the segments', bytes copied as they lie (TPROBE_DEVICE_STATS=kernel)
  uint64_t kernels = 0;     // statistics kernels launched (TPROBE_DEVICE_STATS=kernel), one a batch
  // The statistics enqueued in this capture span, by content name, for reuse; forgotten with the
  // capture's content names (start, stop, step) and when it grows past a step's worth.
  struct known_statistics {
    const void *data = nullptr;
    at::ScalarType type = at::kFloat;
    bool neg = false, conj = false, zero_dim = false, contiguous = false;
    int64_t numel = 0;
    std::vector<int64_t> sizes, strides;  // compared unless both are contiguous
    std::shared_ptr<device_statistics_cell> statistics;
  };
  std::unordered_map<uint64_t, std::vector<known_statistics>> known;
  uint64_t reads = 0;    // host reads of a batch (one per batch)
  uint64_t waits = 0;    // reads that found the batch's event not yet complete and waited on it
  uint64_t full = 0;     // batches closed because their slots or staging were full
  uint64_t bytes = 0;    // copied device to host: 48 per statistics row read, the data's size
  // The storages of the open batch's deferred copies (how many each), and whether there are any:
  // read by the operator callbacks of every thread without the state's mutex, as a hint.
  std::unordered_map<const c10::StorageImpl *, int> deferred_storages;
  std::atomic<bool> has_deferred{false};
  uint64_t deferred = 0;  // statistics copies deferred (counted in segments too)
  uint64_t flushes = 0;   // enqueueings of deferred copies (a cat per dtype each)
  uint64_t unread = 0;    // deferred tensors found changed at their flush: reported without statistics
  uint64_t flush_ns = 0;  // the time in flush_deferred (any thread)
  uint64_t capture_ns = 0;  // the training thread's time in capture_device (enqueueing a tensor)
  uint64_t copy_ns = 0;     // of it, in the arena copies of TPROBE_DEVICE_STATS=kernel (raw or copy_)
  uint64_t collect_ns = 0;  // and in collect_device (closing batches, reading them, handing records over)
};

}  // namespace tprobe::torch_capture
