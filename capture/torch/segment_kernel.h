// segment_kernel.h: the statistics of a batch's arena segments, one source for the GPU and the host.
//
// Contract (device_stats.h, TPROBE_DEVICE_STATS=kernel). The device path copies each tensor's
// bytes as they lie into its batch's arena, at an offset aligned to 8 bytes, and describes them
// by segments: up to chunk_elements elements of one dtype (tprobe_segment). When the batch
// closes, one kernel launch reduces every segment: a thread block a segment, each of its
// TPROBE_SEGMENT_THREADS threads a stride of the segment's elements, then a tree over the block's
// threads in shared memory. Segment k's result is [max, min, sum, sum of squares, NaN count,
// Inf count] as float64, written to out[statistic * count + k] (statistic-major: the layout the
// host combines a tensor's segments from, device_stats.cpp collect_device).
//
// Arithmetic: each element is first converted to float32, as the ATen path's copy_ into a
// float32 arena does (bool to 0 or 1; integers and float64 rounded to nearest, a float64 past
// float32's range to ±Inf). Max and min skip NaN (any NaN makes the host report all four as
// NaN, msprobe's rule); an Inf counts and enters the extremes and the sums; sums are float64.
//
// This file is compiled three ways, so that what the GPU runs is what the tests check:
//   - by NVRTC at run time (__CUDACC_RTC__): the kernel tprobe_segment_statistics, embedded as a
//     string by CMake (segment_engine.cpp);
//   - by the host compiler into the capture: tprobe_segment_statistics_on_host, the same functions
//     and the same tree with the threads run one after another (the device path's CPU runs);
//   - by tests/unit/test_segment_kernel.cpp with TPROBE_SEGMENT_KERNEL_EMULATED, which runs the
//     kernel's own body with a host thread per CUDA thread and a barrier for __syncthreads.
// NVRTC has no standard headers: only the language's own types are used in the shared part.
#ifndef TPROBE_SEGMENT_KERNEL_H
#define TPROBE_SEGMENT_KERNEL_H

#if defined(__CUDACC_RTC__)
#define TPROBE_SEGMENT_FN __device__ __forceinline__
#else
#include <cstring>
#define TPROBE_SEGMENT_FN inline
#endif

#define TPROBE_SEGMENT_THREADS 256

// The element types a segment may hold; any other is copied by ATen into float32 first.
enum tprobe_segment_dtype {
  tprobe_segment_float32 = 0,
  tprobe_segment_float16 = 1,
  tprobe_segment_bfloat16 = 2,
  tprobe_segment_float64 = 3,
  tprobe_segment_uint8 = 4,
  tprobe_segment_int8 = 5,
  tprobe_segment_int16 = 6,
  tprobe_segment_int32 = 7,
  tprobe_segment_int64 = 8,
  tprobe_segment_bool = 9,
};

// One segment: `count` elements of `dtype`, from byte `offset` of the arena (a multiple of 8).
struct tprobe_segment {
  unsigned long long offset;
  unsigned int count;
  unsigned int dtype;
};

// What a thread, then a block, has reduced so far.
struct tprobe_segment_partial {
  float max, min;
  double sum, squares;
  unsigned long long nan, inf;
};

TPROBE_SEGMENT_FN float tprobe_segment_float_of_bits(unsigned int bits) {
#if defined(__CUDACC_RTC__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

TPROBE_SEGMENT_FN unsigned int tprobe_segment_bits_of_float(float f) {
#if defined(__CUDACC_RTC__)
  return __float_as_uint(f);
#else
  unsigned int bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
#endif
}

// Bit exact, subnormals included (core/half_float.h is the host's twin, which NVRTC cannot include).
TPROBE_SEGMENT_FN float tprobe_segment_half_to_float(unsigned short h) {
  const unsigned int sign = (h & 0x8000u) << 16;
  const unsigned int exponent = (h >> 10) & 0x1fu;
  const unsigned int mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return tprobe_segment_float_of_bits(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // mantissa * 2^-24, exact
    return sign ? -magnitude : magnitude;
  }
  return tprobe_segment_float_of_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Element i of a segment whose first byte is `base`, as float32. Every element is at an offset
// that is a multiple of its size, so the typed loads are aligned.
template <typename T>
TPROBE_SEGMENT_FN T tprobe_segment_load(const unsigned char *base, unsigned int i) {
#if defined(__CUDACC_RTC__)
  return reinterpret_cast<const T *>(base)[i];
#else
  T v;
  std::memcpy(&v, base + static_cast<unsigned long long>(i) * sizeof(T), sizeof(T));
  return v;
#endif
}

TPROBE_SEGMENT_FN float tprobe_segment_element(const unsigned char *base, unsigned int dtype, unsigned int i) {
  switch (dtype) {
    case tprobe_segment_float16: return tprobe_segment_half_to_float(tprobe_segment_load<unsigned short>(base, i));
    case tprobe_segment_bfloat16:
      return tprobe_segment_float_of_bits(static_cast<unsigned int>(tprobe_segment_load<unsigned short>(base, i)) << 16);
    case tprobe_segment_float64: return static_cast<float>(tprobe_segment_load<double>(base, i));
    case tprobe_segment_uint8: return static_cast<float>(tprobe_segment_load<unsigned char>(base, i));
    case tprobe_segment_int8: return static_cast<float>(tprobe_segment_load<signed char>(base, i));
    case tprobe_segment_int16: return static_cast<float>(tprobe_segment_load<short>(base, i));
    case tprobe_segment_int32: return static_cast<float>(tprobe_segment_load<int>(base, i));
    case tprobe_segment_int64: return static_cast<float>(tprobe_segment_load<long long>(base, i));
    case tprobe_segment_bool: return tprobe_segment_load<unsigned char>(base, i) != 0 ? 1.0f : 0.0f;
    default: return tprobe_segment_load<float>(base, i);
  }
}

TPROBE_SEGMENT_FN tprobe_segment_partial tprobe_segment_partial_empty() {
  tprobe_segment_partial p;
  p.max = -tprobe_segment_float_of_bits(0x7f800000u);
  p.min = tprobe_segment_float_of_bits(0x7f800000u);
  p.sum = 0.0;
  p.squares = 0.0;
  p.nan = 0;
  p.inf = 0;
  return p;
}

// NaN and Inf are told by their bits, which no compiler flag (fast math) can reason away.
TPROBE_SEGMENT_FN void tprobe_segment_accumulate(tprobe_segment_partial &p, float v) {
  const unsigned int magnitude = tprobe_segment_bits_of_float(v) & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {
    ++p.nan;
    return;
  }
  if (magnitude == 0x7f800000u) ++p.inf;
  if (v > p.max) p.max = v;
  if (v < p.min) p.min = v;
  const double d = static_cast<double>(v);
  p.sum += d;
  p.squares += d * d;
}

TPROBE_SEGMENT_FN void tprobe_segment_merge(tprobe_segment_partial &into, const tprobe_segment_partial &other) {
  if (other.max > into.max) into.max = other.max;
  if (other.min < into.min) into.min = other.min;
  into.sum += other.sum;
  into.squares += other.squares;
  into.nan += other.nan;
  into.inf += other.inf;
}

TPROBE_SEGMENT_FN void tprobe_segment_store(double *out, unsigned int count, unsigned int k,
                                            const tprobe_segment_partial &p) {
  out[k] = static_cast<double>(p.max);
  out[count + k] = static_cast<double>(p.min);
  out[2ull * count + k] = p.sum;
  out[3ull * count + k] = p.squares;
  out[4ull * count + k] = static_cast<double>(p.nan);
  out[5ull * count + k] = static_cast<double>(p.inf);
}

// Thread `thread`'s share of segment s: elements thread, thread + THREADS, ...
TPROBE_SEGMENT_FN tprobe_segment_partial tprobe_segment_thread_share(const unsigned char *arena,
                                                                     const tprobe_segment &s, unsigned int thread) {
  tprobe_segment_partial p = tprobe_segment_partial_empty();
  const unsigned char *base = arena + s.offset;
  for (unsigned int i = thread; i < s.count; i += TPROBE_SEGMENT_THREADS)
    tprobe_segment_accumulate(p, tprobe_segment_element(base, s.dtype, i));
  return p;
}

#if defined(__CUDACC_RTC__) || defined(TPROBE_SEGMENT_KERNEL_EMULATED)
// Launched with one block of TPROBE_SEGMENT_THREADS threads per segment (grid = count).
extern "C" __global__ void __launch_bounds__(TPROBE_SEGMENT_THREADS)
    tprobe_segment_statistics(const unsigned char *arena, const tprobe_segment *segments, unsigned int count,
                              double *out) {
  __shared__ tprobe_segment_partial block[TPROBE_SEGMENT_THREADS];
  const unsigned int k = blockIdx.x;
  const unsigned int thread = threadIdx.x;
  if (k >= count) return;  // the whole block alike: no thread is left waiting at a barrier
  const tprobe_segment s = segments[k];
  block[thread] = tprobe_segment_thread_share(arena, s, thread);
  __syncthreads();
  for (unsigned int stride = TPROBE_SEGMENT_THREADS / 2; stride > 0; stride /= 2) {
    if (thread < stride) tprobe_segment_merge(block[thread], block[thread + stride]);
    __syncthreads();
  }
  if (thread == 0) tprobe_segment_store(out, count, k, block[0]);
}
#endif

#if !defined(__CUDACC_RTC__)
// The kernel's arithmetic on the host, for arena, segments and out in host memory: the same
// threads' shares merged by the same tree, so the results are the kernel's bit for bit.
inline void tprobe_segment_statistics_on_host(const unsigned char *arena, const tprobe_segment *segments,
                                              unsigned int count, double *out) {
  tprobe_segment_partial block[TPROBE_SEGMENT_THREADS];
  for (unsigned int k = 0; k < count; ++k) {
    for (unsigned int thread = 0; thread < TPROBE_SEGMENT_THREADS; ++thread)
      block[thread] = tprobe_segment_thread_share(arena, segments[k], thread);
    for (unsigned int stride = TPROBE_SEGMENT_THREADS / 2; stride > 0; stride /= 2)
      for (unsigned int thread = 0; thread < stride; ++thread) tprobe_segment_merge(block[thread], block[thread + stride]);
    tprobe_segment_store(out, count, k, block[0]);
  }
}
#endif

#endif  // TPROBE_SEGMENT_KERNEL_H
