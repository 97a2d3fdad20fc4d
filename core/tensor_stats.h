// tensor_stats.h: per-tensor statistics with msprobe's semantics (docs/msprobe-compat.md §2.6).
//
// One pass over memory; the inner loops are written so that g++ -O2/-O3 vectorises them.
// Thread-safe: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "dtype.h"
#include "half_float.h"

namespace tprobe {

// A statistic as msprobe writes it in dump.json: null, a bool (bool tensors' Max/Min), an integer
// (0-d integer tensors: `.item()` keeps the int) or a real.
struct stat_value {
  enum class kind : uint8_t { null, boolean, integer, real };
  kind k = kind::null;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0.0;

  static stat_value none() { return {}; }
  static stat_value of_bool(bool v) { return {kind::boolean, v, 0, 0.0}; }
  static stat_value of_int(int64_t v) { return {kind::integer, false, v, 0.0}; }
  static stat_value of_real(double v) { return {kind::real, false, 0, v}; }
  bool is_null() const { return k == kind::null; }
  // The value as a double (bool → 0/1); NaN for null.
  double as_double() const;
  bool operator==(const stat_value &) const = default;
};

struct tensor_stats {
  stat_value max, min, mean, norm;
  uint64_t nan_count = 0;  // elements that are NaN (complex: either part)
  uint64_t inf_count = 0;  // elements that are ±Inf
  std::optional<uint32_t> crc32;  // zlib CRC-32 of the raw bytes, when asked for (summary_mode md5)
  bool operator==(const tensor_stats &) const = default;
};

// Runs part(0) … part(parts - 1), each exactly once, possibly several at a time on other threads,
// and returns once all have returned. part() never throws.
class parallel_runner {
 public:
  virtual ~parallel_runner() = default;
  virtual void run(size_t parts, void (*part)(void *context, size_t index), void *context) = 0;
};

// A real-typed tensor of more than stats_part_bytes is read in parts of that size (the last one
// shorter; larger parts past 64 of them), each part's sums and CRC taken on their own and
// combined in part order. The result is therefore the same whichever threads read the parts, with
// or without a runner: the capture (which reads parts on two threads) and the stages (which read
// them in order) agree bit for bit.
inline constexpr size_t stats_part_bytes = size_t{1} << 20;

// The order of the sums, fixed so that every build and instruction set (the SSE2 baseline, and
// the AVX2 and AVX-512 clones picked at load time) gives the same bits, on whichever host a
// capture or a stage runs: within a part, blocks of stats_block_elems elements; element k of a
// block goes into lane k % stats_sum_lanes (a float64 sum and a float64 sum of squares each); a
// block's lane sums are added in lane order into the block's sum, which is added to the part's
// sum, and its lane sums of squares one by one into the part's.
inline constexpr size_t stats_block_elems = 4096;
inline constexpr size_t stats_sum_lanes = 16;

struct stats_options {
  bool high_precision = false;  // config "precision": "high": results rounded to float32, not the dtype
  // The Mean of a float16/bfloat16 tensor as torch before 2.2 computes it on the CPU, which is
  // what msprobe's torch.mean gives there: the sum rounded to the dtype, divided by the element
  // count rounded to the dtype, the quotient rounded (half_mean_of_rounded_sum below). Off: the
  // sum divided by the count, rounded once, as torch 2.2 and later, and every GPU, compute it.
  // A session's setting (session record meta half_mean, transport/record.h); no effect with
  // high_precision, where msprobe computes in float32.
  bool half_mean_of_rounded_sum = false;
  bool crc32 = false;           // also compute the CRC-32 of the raw bytes
  parallel_runner *runner = nullptr;  // reads a large tensor's parts; none: in order, on this thread
  // Also copies the tensor's count * dtype_size bytes here, in the same pass: each piece is copied
  // right after its statistics are taken, from L2, so a payload that must leave the process costs
  // one read of the tensor rather than a copy here and a read in a stage. The destination must
  // not overlap the tensor. Large copies use streaming stores (copy_bytes_streaming); the copy is
  // complete and ordered before tensor_stats_compute returns.
  void *copy_to = nullptr;
};

// Statistics of a contiguous, little-endian tensor of `count` elements of type t.
// `zero_dim` is true for a 0-d tensor (shape []), which msprobe reports as its value in all four.
//
// Semantics, as msprobe's PytorchDataProcessor.get_stat_info:
// - empty tensor: all four null;
// - bool: Max = any, Min = all, Mean/Norm null (0-d too);
// - 0-d: Max = Min = Mean = Norm = the value in its own type (an int stays an int);
// - float32/16/bfloat16: computed in the tensor's own dtype, i.e. accumulated in double here and
//   the result rounded to that dtype; float64 and integer types are converted to float32 first,
//   so their results are float32 values; precision "high" rounds every float result to float32;
// - any NaN makes all four NaN; Inf propagates as IEEE arithmetic does (+Inf and -Inf → NaN mean);
// - complex: Max/Min/Mean of |x| (rounded to the component type), Norm null.
// Nothing here allocates.
tensor_stats tensor_stats_compute(const void *data, dtype t, size_t count, bool zero_dim,
                                  const stats_options &options);

// What tensor_stats_compute gives for `count` elements of type t whose bytes are all zero, found
// without memory to read: for a caller that knows its tensor was just zero-filled (PyTorch's
// zero_, zeros), a read of the whole spared. The same values bit for bit, the CRC-32 included
// (options.copy_to must be null: there is nothing to copy from).
tensor_stats tensor_stats_of_zeros(dtype t, size_t count, bool zero_dim, const stats_options &options);

// A real tensor's float statistic v (Max, Min, Mean or Norm, however it was accumulated) rounded
// to the dtype msprobe reports it in, by the rules above: float16/bfloat16 to their own dtype
// unless `high_precision`, every other real dtype to float32. For statistics computed elsewhere
// (the capture's device path reduces on the GPU) that must equal tensor_stats_compute's.
// Inline: the PyTorch capture uses it without linking core.
inline double tensor_stat_round(dtype t, bool high_precision, double v) {
  // Through float, as torch's kernels do: they accumulate in float and cast at the end.
  if (!high_precision && t == dtype::float16) return float16_to_float(float_to_float16(static_cast<float>(v)));
  if (!high_precision && t == dtype::bfloat16) return bfloat16_to_float(float_to_bfloat16(static_cast<float>(v)));
  return static_cast<float>(v);
}

// Mean = sum / count of a float16/bfloat16 tensor, rounded to its dtype, under
// stats_options::half_mean_of_rounded_sum (checked against torch 1.13's torch.mean on 400 random
// tensors of 3 to 300,000 elements: equal in every one; as in torch, a float16 sum past 65504
// makes it Inf, a count past 65504 makes it 0, both NaN).
inline double half_mean_of_rounded_sum(dtype t, double sum, double count) {
  const auto round = [t](double v) { return tensor_stat_round(t, false, v); };
  return round(static_cast<float>(round(sum)) / static_cast<float>(round(count)));
}

// memcpy for a destination that another thread or process reads later (a shared-memory payload):
// from streaming_copy_min_bytes up, x86-64 uses non-temporal stores, which skip reading the
// destination's cache lines first (a third of a copy's memory traffic) and leave the cache to the
// training; glibc would choose them only past a fraction of the L3, which virtual machines report
// as hundreds of MiB. Below that, and elsewhere, memcpy. The stores are fenced before it returns.
inline constexpr size_t streaming_copy_min_bytes = size_t{1} << 20;
void copy_bytes_streaming(void *dst, const void *src, size_t bytes);

// zlib CRC-32 (polynomial 0xEDB88320) of a byte range; msprobe formats it as "%08x".
uint32_t crc32_bytes(const void *data, size_t size);
// Continues a CRC-32 over more bytes: crc32_update(crc32_bytes(a), b) == crc32_bytes(a ++ b).
uint32_t crc32_update(uint32_t crc, const void *data, size_t size);
// The CRC-32 of a ++ b from crc32_bytes(a), crc32_bytes(b) and b's length (zlib's crc32_combine).
uint32_t crc32_combine_bytes(uint32_t crc_a, uint32_t crc_b, size_t size_b);
// The CRC-32 of `size` zero bytes, in O(log size) combines rather than a pass.
uint32_t crc32_zero_bytes(size_t size);
// zlib's crc32, the reference the above must equal (tests, bench/bench_crc.cpp).
uint32_t crc32_bytes_zlib(const void *data, size_t size);

}  // namespace tprobe
