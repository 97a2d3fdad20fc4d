#include "tensor_stats.h"

#include <zlib.h>
#ifdef TPROBE_HAVE_ISAL
#include <isa-l/crc.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define TPROBE_HAVE_STREAMING_STORES 1
#endif

namespace tprobe {

namespace {

constexpr double quiet_nan = std::numeric_limits<double>::quiet_NaN();

// Elements are read through memcpy: payloads arrive at arbitrary offsets inside records, and an
// unaligned `const float *` would let the vectoriser peel for alignment and then use aligned loads.
template <class T>
inline T load(const unsigned char *p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}


// How an element type is read into the float32 domain msprobe computes in (it calls .float() on
// float64 and integer tensors, so large float64 values become ±Inf in the statistics). `value` is
// monotone for integers, so max/min of the values equal the exact integer max/min rounded to float32.
struct src_f32 {
  using raw = float;
  static float value(float x) { return x; }
  static bool is_nan(float x) { return x != x; }
  static bool is_inf(float x) { return std::fabs(x) == INFINITY; }
};
struct src_f64 {
  using raw = double;
  static float value(double x) { return static_cast<float>(x); }
  static bool is_nan(double x) { return x != x; }
  static bool is_inf(double x) { return std::fabs(x) == INFINITY; }
};
struct src_f16 {
  using raw = uint16_t;
  static float value(uint16_t x) { return float16_to_float(x); }
  static bool is_nan(uint16_t x) { return (x & 0x7fffu) > 0x7c00u; }
  static bool is_inf(uint16_t x) { return (x & 0x7fffu) == 0x7c00u; }
};
struct src_bf16 {
  using raw = uint16_t;
  static float value(uint16_t x) { return bfloat16_to_float(x); }
  static bool is_nan(uint16_t x) { return (x & 0x7fffu) > 0x7f80u; }
  static bool is_inf(uint16_t x) { return (x & 0x7fffu) == 0x7f80u; }
};
template <class T>
struct src_int {
  using raw = T;
  // Through int32 for narrow types: g++ vectorises int8 → int32 → float, not int8 → float.
  using wide = std::conditional_t<(sizeof(T) < sizeof(int32_t)), int32_t, T>;
  static float value(T x) { return static_cast<float>(static_cast<wide>(x)); }
  static bool is_nan(T) { return false; }
  static bool is_inf(T) { return false; }
};
struct cfloat {
  float re, im;
};
// Two float loads: one 8-byte load split in halves is an access pattern g++ does not vectorise.
template <>
inline cfloat load<cfloat>(const unsigned char *p, size_t i) {
  return {load<float>(p, 2 * i), load<float>(p, 2 * i + 1)};
}
// |x| as numpy's abs: glibc's hypotf is the square root of the double sum of squares, rounded to
// float; an infinite part gives +Inf even when the other part is NaN. (This loop vectorises only
// under -fno-math-errno: otherwise sqrt keeps a branch that calls libm to set errno.)
struct src_c64 {
  using raw = cfloat;
  static float value(cfloat x) {
    const double sq = static_cast<double>(x.re) * x.re + static_cast<double>(x.im) * x.im;
    const uint32_t abs = std::bit_cast<uint32_t>(static_cast<float>(std::sqrt(sq)));
    const uint32_t inf = 0u - static_cast<uint32_t>(is_inf(x));  // a mask: `?:` would branch
    return std::bit_cast<float>((abs & ~inf) | (0x7f800000u & inf));
  }
  static bool is_nan(cfloat x) { return (x.re != x.re) | (x.im != x.im); }
  static bool is_inf(cfloat x) { return (std::fabs(x.re) == INFINITY) | (std::fabs(x.im) == INFINITY); }
};

// Blocks are small enough to stay in L1, so that the rare rescan below costs no memory traffic.
constexpr size_t block_elems = stats_block_elems;
// Explicit lanes rather than `omp simd reduction(max:)`: g++ keeps a float max/min reduction's
// lanes in memory (a store-forwarding chain per iteration), while these stay in registers. Sixteen
// lanes give each double accumulator four independent add chains with 32-byte vectors (AVX2) and
// two with 64-byte ones (AVX-512), and one order for all (tensor_stats.h): with eight, an AVX2
// pass over data in cache waited on its add latency, and AVX-512 gained nothing on AVX2.
constexpr size_t lanes = stats_sum_lanes;

struct real_acc {
  float max = -INFINITY, min = INFINITY;
  double sum = 0.0, sumsq = 0.0;
  uint64_t nan = 0, inf = 0, value_nan = 0;  // value_nan: elements whose float value is NaN
};

inline void lane_update(float &mx, float &mn, double &sum, double &sumsq, float v) {
  // NaN compares false, so it never becomes max/min; the NaN count decides afterwards.
  mx = v > mx ? v : mx;
  mn = v < mn ? v : mn;
  const double d = v;
  sum += d;
  sumsq += d * d;
}

// Max, min, sum and sum of squares of n floats, in `lanes` independent accumulators.
template <class Src>
[[gnu::always_inline]] inline void lanes_reduce(const unsigned char *q, size_t n, real_acc &acc,
                                                double &block_sum) {
  using raw = typename Src::raw;
  float mx[lanes], mn[lanes];
  double sum[lanes], sumsq[lanes];
  for (size_t j = 0; j < lanes; ++j) mx[j] = -INFINITY, mn[j] = INFINITY, sum[j] = sumsq[j] = 0.0;
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
#pragma omp simd
    for (size_t j = 0; j < lanes; ++j)
      lane_update(mx[j], mn[j], sum[j], sumsq[j], Src::value(load<raw>(q, i + j)));
  }
  for (size_t j = 0; i < n; ++i, ++j) lane_update(mx[j], mn[j], sum[j], sumsq[j], Src::value(load<raw>(q, i)));
  block_sum = 0.0;
  for (size_t j = 0; j < lanes; ++j) {
    acc.max = std::max(acc.max, mx[j]), acc.min = std::min(acc.min, mn[j]);
    block_sum += sum[j], acc.sumsq += sumsq[j];
  }
}

// Continues `acc` over `count` more elements. Called on a tensor in pieces that start at multiples
// of block_elems, it sums in exactly the order of one call over the whole tensor.
template <class Src>
[[gnu::always_inline]] inline void accumulate(const unsigned char *p, size_t count, real_acc &acc) {
  using raw = typename Src::raw;
  for (size_t start = 0; start < count; start += block_elems) {
    const size_t n = std::min(block_elems, count - start);
    const unsigned char *q = p + start * sizeof(raw);
    double block_sum;
    if constexpr (sizeof(raw) >= sizeof(float) && !std::is_same_v<raw, int64_t>) {
      lanes_reduce<Src>(q, n, acc, block_sum);
    } else {
      // Widening conversions (and int64, which has no vector conversion before AVX-512) do not
      // vectorise inside the lane loop; a plain conversion loop into L1 does.
      alignas(64) float converted[block_elems];
#pragma omp simd
      for (size_t k = 0; k < n; ++k) converted[k] = Src::value(load<raw>(q, k));
      lanes_reduce<src_f32>(reinterpret_cast<const unsigned char *>(converted), n, acc, block_sum);
    }
    acc.sum += block_sum;
    // 4096 finite floats cannot overflow a double sum, so a non-finite block sum means the block
    // holds a NaN or an Inf: only then count them, from L1, which keeps the hot loop short.
    if (!std::isfinite(block_sum)) {
      uint32_t nan = 0, inf = 0, value_nan = 0;
#pragma omp simd reduction(+ : nan, inf, value_nan)
      for (size_t k = 0; k < n; ++k) {
        const raw x = load<raw>(q, k);
        const float v = Src::value(x);
        nan += Src::is_nan(x);
        inf += Src::is_inf(x);
        value_nan += v != v;
      }
      acc.nan += nan, acc.inf += inf, acc.value_nan += value_nan;
    }
  }
}

// The hot loops are also built for x86-64-v3 (AVX2, 32-byte vectors) and x86-64-v4 (AVX-512) and
// picked at load time.
// -DTPROBE_SIMD_CLONES= builds the baseline alone (to test or time it on an AVX2 machine).
#ifndef TPROBE_SIMD_CLONES
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define TPROBE_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TPROBE_SIMD_CLONES
#endif
#endif

TPROBE_SIMD_CLONES void accumulate_f64(const unsigned char *p, size_t n, real_acc &a) { accumulate<src_f64>(p, n, a); }
TPROBE_SIMD_CLONES void accumulate_f32(const unsigned char *p, size_t n, real_acc &a) { accumulate<src_f32>(p, n, a); }
TPROBE_SIMD_CLONES void accumulate_f16(const unsigned char *p, size_t n, real_acc &a) { accumulate<src_f16>(p, n, a); }
TPROBE_SIMD_CLONES void accumulate_bf16(const unsigned char *p, size_t n, real_acc &a) { accumulate<src_bf16>(p, n, a); }
TPROBE_SIMD_CLONES void accumulate_i8(const unsigned char *p, size_t n, real_acc &a) { accumulate<src_int<int8_t>>(p, n, a); }
TPROBE_SIMD_CLONES void accumulate_i16(const unsigned char *p, size_t n, real_acc &a) { accumulate<src_int<int16_t>>(p, n, a); }
TPROBE_SIMD_CLONES void accumulate_i32(const unsigned char *p, size_t n, real_acc &a) { accumulate<src_int<int32_t>>(p, n, a); }
TPROBE_SIMD_CLONES void accumulate_i64(const unsigned char *p, size_t n, real_acc &a) { accumulate<src_int<int64_t>>(p, n, a); }
TPROBE_SIMD_CLONES void accumulate_u8(const unsigned char *p, size_t n, real_acc &a) { accumulate<src_int<uint8_t>>(p, n, a); }
TPROBE_SIMD_CLONES void accumulate_c64(const unsigned char *p, size_t n, real_acc &a) { accumulate<src_c64>(p, n, a); }

// complex128 is rare enough that correctness (hypot does not overflow at 1e154) beats speed.
struct complex128_acc {
  double max = -INFINITY, min = INFINITY, sum = 0.0;
  uint64_t nan = 0, inf = 0, abs_nan = 0;
};

complex128_acc accumulate_c128(const unsigned char *p, size_t count) {
  complex128_acc acc;
  for (size_t i = 0; i < count; ++i) {
    const double re = load<double>(p, 2 * i), im = load<double>(p, 2 * i + 1);
    acc.nan += std::isnan(re) || std::isnan(im);
    acc.inf += std::isinf(re) || std::isinf(im);
    const double a = std::hypot(re, im);
    acc.abs_nan += std::isnan(a);
    acc.max = std::max(acc.max, a), acc.min = std::min(acc.min, a);
    acc.sum += a;
  }
  return acc;
}

void set_all_nan(tensor_stats &s) {
  s.max = s.min = s.mean = s.norm = stat_value::of_real(quiet_nan);
}

// Floating and integer tensors (and complex64's |x|, as float32); results rounded to the dtype
// msprobe computes in (tensor_stat_round, the rule the capture's device path shares).
void stats_real(const real_acc &a, size_t count, dtype t, const stats_options &options, tensor_stats &s) {
  const auto round = [&](double v) { return stat_value::of_real(tensor_stat_round(t, options.high_precision, v)); };
  s.nan_count = a.nan, s.inf_count = a.inf;
  if (a.value_nan) return set_all_nan(s);
  s.max = round(a.max);
  s.min = round(a.min);
  const bool half = t == dtype::float16 || t == dtype::bfloat16;
  s.mean = half && options.half_mean_of_rounded_sum && !options.high_precision
               ? stat_value::of_real(half_mean_of_rounded_sum(t, a.sum, static_cast<double>(count)))
               : round(a.sum / static_cast<double>(count));
  s.norm = round(std::sqrt(a.sumsq));
}

// Max/Min/Mean of |x| in the component type (numpy's path ignores "precision"); Norm stays null.
using accumulate_fn = void (*)(const unsigned char *, size_t, real_acc &);

// The body of a streaming copy; the caller fences (one fence per pass, not per piece).
void copy_streaming_unfenced(unsigned char *d, const unsigned char *s, size_t n) {
#ifdef TPROBE_HAVE_STREAMING_STORES
  const size_t head = std::min(n, (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15);
  std::memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 64; d += 64, s += 64, n -= 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i *>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i *>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i *>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i *>(d + 48), e);
  }
#endif
  std::memcpy(d, s, n);
}

void streaming_fence() {
#ifdef TPROBE_HAVE_STREAMING_STORES
  // Streaming stores are weakly ordered: without this, the record that hands the memory on could
  // become visible before the data does.
  _mm_sfence();
#endif
}

// Where a pass copies what it reads (stats_options::copy_to), and how.
struct copy_target {
  unsigned char *dst = nullptr;
  bool streaming = false;
  void copy(size_t offset, const unsigned char *src, size_t bytes) const {
    if (streaming) copy_streaming_unfenced(dst + offset, src, bytes);
    else std::memcpy(dst + offset, src, bytes);
  }
};

// One pass over the tensor; with a CRC wanted, each piece is hashed first and its statistics
// taken right after, while it is still in L2, instead of in a second pass over memory. In that
// order because the CRC is bound by its arithmetic and hides the loads from memory (11.5 GB/s
// from memory, 12.3 from L2 here) while the statistics are bound by the loads (11.8 GB/s from
// memory, 21 from L2): 7.5 GB/s for both, against 6.0 the other way round.
// A copy (copy_to) is taken the same way, each piece copied from L2 right after its statistics:
// with streaming stores that costs about what the copy alone costs, the loads being shared.
real_acc accumulate_all(accumulate_fn fn, const unsigned char *p, size_t count, size_t elem_size,
                        std::optional<uint32_t> *crc, const copy_target &to = {}, size_t to_offset = 0) {
  real_acc acc;
  if (!crc && !to.dst) {
    fn(p, count, acc);
    return acc;
  }
  constexpr size_t piece_elems = 16 * block_elems;  // 64-256 KiB
  uint32_t c = 0;
  for (size_t start = 0; start < count; start += piece_elems) {
    const size_t n = std::min(piece_elems, count - start);
    const unsigned char *q = p + start * elem_size;
    if (crc) c = crc32_update(c, q, n * elem_size);
    fn(q, n, acc);
    if (to.dst) to.copy(to_offset + start * elem_size, q, n * elem_size);
  }
  if (to.streaming) streaming_fence();
  if (crc) *crc = c;
  return acc;
}

// A large tensor in parts of stats_part_bytes (whole blocks), each accumulated on its own, perhaps
// on another thread, then combined in part order: a result that does not depend on the threads.
struct parts_job {
  accumulate_fn fn;
  const unsigned char *p;
  size_t count, elem_size, part_elems;
  bool crc;
  copy_target to;
  real_acc *accs;
  uint32_t *crcs;
};

void run_part(void *context, size_t i) {
  const auto &job = *static_cast<const parts_job *>(context);
  const size_t start = i * job.part_elems, n = std::min(job.part_elems, job.count - start);
  std::optional<uint32_t> crc;
  job.accs[i] = accumulate_all(job.fn, job.p + start * job.elem_size, n, job.elem_size, job.crc ? &crc : nullptr,
                               job.to, start * job.elem_size);
  if (crc) job.crcs[i] = *crc;
}

// At most max_parts parts: a tensor of over 64 MiB gets larger parts, so that nothing allocates.
constexpr size_t max_parts = 64;

real_acc accumulate_parts(accumulate_fn fn, const unsigned char *p, size_t count, size_t elem_size,
                          std::optional<uint32_t> *crc, parallel_runner *runner, const copy_target &to) {
  size_t part_elems = std::max(block_elems, stats_part_bytes / elem_size / block_elems * block_elems);
  if (count <= part_elems) return accumulate_all(fn, p, count, elem_size, crc, to);
  if (count > part_elems * max_parts) {
    const size_t blocks = (count + block_elems - 1) / block_elems;
    part_elems = (blocks + max_parts - 1) / max_parts * block_elems;
  }
  const size_t parts = (count + part_elems - 1) / part_elems;
  real_acc accs[max_parts];
  uint32_t crcs[max_parts];
  parts_job job{fn, p, count, elem_size, part_elems, crc != nullptr, to, accs, crcs};
  if (runner) {
    runner->run(parts, run_part, &job);
  } else {
    for (size_t i = 0; i < parts; ++i) run_part(&job, i);
  }
  real_acc total;
  uint32_t c = 0;
  for (size_t i = 0; i < parts; ++i) {
    const real_acc &a = accs[i];
    total.max = std::max(total.max, a.max), total.min = std::min(total.min, a.min);
    total.sum += a.sum, total.sumsq += a.sumsq;
    total.nan += a.nan, total.inf += a.inf, total.value_nan += a.value_nan;
    if (crc) c = i == 0 ? crcs[0] : crc32_combine_bytes(c, crcs[i], std::min(part_elems, count - i * part_elems) * elem_size);
  }
  if (crc) *crc = c;
  return total;
}

void stats_complex64(const unsigned char *p, size_t count, tensor_stats &s) {
  real_acc a;
  accumulate_c64(p, count, a);
  stats_real(a, count, dtype::float32, stats_options{}, s);
  s.norm = stat_value::none();
}

void stats_complex128(const unsigned char *p, size_t count, tensor_stats &s) {
  const complex128_acc a = accumulate_c128(p, count);
  s.nan_count = a.nan, s.inf_count = a.inf;
  if (a.abs_nan) {
    s.max = s.min = s.mean = stat_value::of_real(quiet_nan);
  } else {
    s.max = stat_value::of_real(a.max);
    s.min = stat_value::of_real(a.min);
    s.mean = stat_value::of_real(a.sum / static_cast<double>(count));
  }
}

void stats_bool(const unsigned char *p, size_t count, tensor_stats &s) {
  uint32_t any = 0, all = 1;
#pragma omp simd reduction(| : any) reduction(& : all)
  for (size_t i = 0; i < count; ++i) {
    const uint32_t b = p[i] != 0;
    any |= b;
    all &= b;
  }
  s.max = stat_value::of_bool(any != 0);
  s.min = stat_value::of_bool(all != 0);
}

// A 0-d tensor reports its own value (`.clone()` then `.item()`): no rounding, ints stay ints.
stat_value scalar_value(const unsigned char *p, dtype t) {
  switch (t) {
    case dtype::float64: return stat_value::of_real(load<double>(p, 0));
    case dtype::float32: return stat_value::of_real(load<float>(p, 0));
    case dtype::float16: return stat_value::of_real(float16_to_float(load<uint16_t>(p, 0)));
    case dtype::bfloat16: return stat_value::of_real(bfloat16_to_float(load<uint16_t>(p, 0)));
    case dtype::int8: return stat_value::of_int(load<int8_t>(p, 0));
    case dtype::int16: return stat_value::of_int(load<int16_t>(p, 0));
    case dtype::int32: return stat_value::of_int(load<int32_t>(p, 0));
    case dtype::int64: return stat_value::of_int(load<int64_t>(p, 0));
    case dtype::uint8: return stat_value::of_int(load<uint8_t>(p, 0));
    default: return stat_value::none();  // bool and complex have their own rules
  }
}

}  // namespace

double stat_value::as_double() const {
  switch (k) {
    case kind::null: return quiet_nan;
    case kind::boolean: return boolean ? 1.0 : 0.0;
    case kind::integer: return static_cast<double>(integer);
    case kind::real: return real;
  }
  return quiet_nan;
}

tensor_stats tensor_stats_compute(const void *data, dtype t, size_t count, bool zero_dim,
                                  const stats_options &options) {
  tensor_stats s;
  const auto *p = static_cast<const unsigned char *>(data);
  if (count == 0) {
    if (options.crc32) s.crc32 = crc32_bytes(data, 0);
    return s;
  }
  const size_t es = dtype_size(t);
  const size_t bytes = count * es;
  copy_target to;
  if (options.copy_to) {
    to.dst = static_cast<unsigned char *>(options.copy_to);
    to.streaming = bytes >= streaming_copy_min_bytes;
    // Bool and complex tensors are rare and their passes have no pieces: copied on their own.
    if (t == dtype::boolean || dtype_is_complex(t)) {
      copy_bytes_streaming(to.dst, p, bytes);
      to = {};
    }
  }
  // Real dtypes hash in the statistics pass (accumulate_all); the others in a pass of their own.
  std::optional<uint32_t> *fused_crc = options.crc32 ? &s.crc32 : nullptr;
  if (options.crc32 && (t == dtype::boolean || dtype_is_complex(t))) {
    s.crc32 = crc32_bytes(data, bytes);
    fused_crc = nullptr;
  }
  auto acc = [&](accumulate_fn fn) { return accumulate_parts(fn, p, count, es, fused_crc, options.runner, to); };

  // float64 and integers are converted to float32 by msprobe; "high" precision converts all.
  const auto real = [&](accumulate_fn fn) { stats_real(acc(fn), count, t, options, s); };
  switch (t) {
    case dtype::float64: real(accumulate_f64); break;
    case dtype::float32: real(accumulate_f32); break;
    case dtype::float16: real(accumulate_f16); break;
    case dtype::bfloat16: real(accumulate_bf16); break;
    case dtype::int8: real(accumulate_i8); break;
    case dtype::int16: real(accumulate_i16); break;
    case dtype::int32: real(accumulate_i32); break;
    case dtype::int64: real(accumulate_i64); break;
    case dtype::uint8: real(accumulate_u8); break;
    case dtype::boolean: stats_bool(p, count, s); break;
    case dtype::complex64: stats_complex64(p, count, s); break;
    case dtype::complex128: stats_complex128(p, count, s); break;
  }

  if (zero_dim && t != dtype::boolean && !dtype_is_complex(t)) {
    const stat_value v = scalar_value(p, t);
    s.max = s.min = s.mean = s.norm = v;
  }
  return s;
}

tensor_stats tensor_stats_of_zeros(dtype t, size_t count, bool zero_dim, const stats_options &options) {
  if (options.copy_to) throw std::invalid_argument("tensor_stats_of_zeros: nothing to copy from");
  // Every statistic of zeros is the same for one element as for many (max, min 0; mean 0 / n;
  // norm sqrt(0); no NaN or Inf), and a 0-d tensor has one: so one zero element, read.
  static constexpr unsigned char zero_element[16]{};  // the widest dtype, complex128
  stats_options one = options;
  one.crc32 = false;
  one.runner = nullptr;
  tensor_stats s = tensor_stats_compute(zero_element, t, std::min<size_t>(count, 1), zero_dim, one);
  if (options.crc32) s.crc32 = crc32_zero_bytes(count * dtype_size(t));
  return s;
}

void copy_bytes_streaming(void *dst, const void *src, size_t bytes) {
  if (bytes < streaming_copy_min_bytes) {
    std::memcpy(dst, src, bytes);
    return;
  }
  copy_streaming_unfenced(static_cast<unsigned char *>(dst), static_cast<const unsigned char *>(src), bytes);
  streaming_fence();
}

uint32_t crc32_bytes_zlib(const void *data, size_t size) {
  // zlib's crc32() takes a 32-bit length; feed it in chunks so tensors over 4 GiB hash right.
  constexpr size_t chunk = size_t{1} << 30;
  const auto *p = static_cast<const Bytef *>(data);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (size > 0) {
    const size_t n = std::min(size, chunk);
    crc = crc32(crc, p, static_cast<uInt>(n));
    p += n, size -= n;
  }
  return static_cast<uint32_t>(crc);
}

uint32_t crc32_update(uint32_t crc, const void *data, size_t size) {
#ifdef TPROBE_HAVE_ISAL
  // ISA-L's folding CRC (PCLMULQDQ/AVX-512 where the CPU has them, chosen at run time): the gzip
  // CRC-32, so the same values as zlib's, at memory speed rather than zlib's ~2 GB/s.
  return crc32_gzip_refl(crc, static_cast<const unsigned char *>(data), size);
#else
  constexpr size_t chunk = size_t{1} << 30;
  const auto *p = static_cast<const Bytef *>(data);
  uLong c = crc;
  while (size > 0) {
    const size_t n = std::min(size, chunk);
    c = crc32(c, p, static_cast<uInt>(n));
    p += n, size -= n;
  }
  return static_cast<uint32_t>(c);
#endif
}

uint32_t crc32_bytes(const void *data, size_t size) { return crc32_update(0, data, size); }

uint32_t crc32_combine_bytes(uint32_t crc_a, uint32_t crc_b, size_t size_b) {
  return static_cast<uint32_t>(crc32_combine(crc_a, crc_b, static_cast<z_off_t>(size_b)));
}

uint32_t crc32_zero_bytes(size_t size) {
  static constexpr size_t block = 4096;
  static constexpr unsigned char zeros[block]{};
  // Zeros concatenated are zeros: the remainder's CRC, then runs of 2^k blocks appended.
  uint32_t crc = crc32_bytes(zeros, size % block);
  uint32_t run = crc32_bytes(zeros, block);
  size_t run_bytes = block;
  for (size_t blocks = size / block; blocks; blocks >>= 1) {
    if (blocks & 1) crc = crc32_combine_bytes(crc, run, run_bytes);
    if (blocks > 1) {
      run = crc32_combine_bytes(run, run, run_bytes);
      run_bytes *= 2;
    }
  }
  return crc;
}

}  // namespace tprobe
