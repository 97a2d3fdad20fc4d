// segment_kernel.h: the statistics kernel the GPU runs (TPROBE_DEVICE_STATS=kernel), run here as
// it is written, with a host thread per CUDA thread and a std::barrier for __syncthreads, against
// the capture's host twin (bit for bit) and an independent reference (plain loops in long double,
// core/half_float.h's conversions).
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "half_float.h"

// What the CUDA compiler provides, for the kernel's own text.
namespace emulated {
struct dim3 {
  unsigned int x = 0;
};
thread_local dim3 threadIdx, blockIdx;
std::barrier<> *block_barrier = nullptr;
}  // namespace emulated
using emulated::blockIdx;
using emulated::threadIdx;
#define TPROBE_SEGMENT_KERNEL_EMULATED
#define __global__
#define __launch_bounds__(threads)
#define __shared__ static  // one block runs at a time
#define __syncthreads() emulated::block_barrier->arrive_and_wait()
#include "segment_kernel.h"

namespace {

// Launches the kernel on a grid of `blocks` (≥ count) blocks of TPROBE_SEGMENT_THREADS threads.
std::vector<double> run_kernel(const std::vector<unsigned char> &arena, const std::vector<tprobe_segment> &segments,
                               unsigned int blocks) {
  const auto count = static_cast<unsigned int>(segments.size());
  std::vector<double> out(6 * segments.size(), -1.0);
  for (unsigned int k = 0; k < blocks; ++k) {
    std::barrier<> barrier(TPROBE_SEGMENT_THREADS);
    emulated::block_barrier = &barrier;
    std::vector<std::thread> threads;
    for (unsigned int t = 0; t < TPROBE_SEGMENT_THREADS; ++t)
      threads.emplace_back([&, t, k] {
        threadIdx.x = t;
        blockIdx.x = k;
        tprobe_segment_statistics(arena.data(), segments.data(), count, out.data());
      });
    for (std::thread &t : threads) t.join();
  }
  return out;
}

std::vector<double> run_on_host(const std::vector<unsigned char> &arena, const std::vector<tprobe_segment> &segments) {
  std::vector<double> out(6 * segments.size(), -1.0);
  tprobe_segment_statistics_on_host(arena.data(), segments.data(), static_cast<unsigned int>(segments.size()),
                                    out.data());
  return out;
}

// An arena filled as the device path fills it: each tensor's bytes at an offset aligned to 8,
// cut into segments of at most `chunk` elements.
struct arena_builder {
  std::vector<unsigned char> bytes;
  std::vector<tprobe_segment> segments;
  std::vector<std::vector<float>> expected;  // each segment's elements as float32, by the reference

  template <class T>
  void add(const std::vector<T> &values, tprobe_segment_dtype dtype, unsigned int chunk, float (*as_float)(T)) {
    const size_t offset = (bytes.size() + 7) / 8 * 8;
    bytes.resize(offset + values.size() * sizeof(T));
    std::memcpy(bytes.data() + offset, values.data(), values.size() * sizeof(T));
    for (size_t first = 0; first < values.size(); first += chunk) {
      const size_t n = std::min<size_t>(chunk, values.size() - first);
      segments.push_back({offset + first * sizeof(T), static_cast<unsigned int>(n), static_cast<unsigned int>(dtype)});
      std::vector<float> as;
      for (size_t i = first; i < first + n; ++i) as.push_back(as_float(values[i]));
      expected.push_back(std::move(as));
    }
  }
};

// The reference: [max, min, sum, squares, NaN, Inf] of float32 values, NaN skipped by the extremes.
std::vector<long double> reference(const std::vector<float> &v) {
  long double max = -INFINITY, min = INFINITY, sum = 0, squares = 0, nan = 0, inf = 0;
  for (const float x : v) {
    if (std::isnan(x)) {
      ++nan;
      continue;
    }
    if (std::isinf(x)) ++inf;
    max = std::max<long double>(max, x);
    min = std::min<long double>(min, x);
    sum += x;
    squares += static_cast<long double>(x) * x;
  }
  return {max, min, sum, squares, nan, inf};
}

void expect_reference(const arena_builder &a, const std::vector<double> &out) {
  const size_t count = a.segments.size();
  for (size_t k = 0; k < count; ++k) {
    const std::vector<long double> want = reference(a.expected[k]);
    for (int statistic = 0; statistic < 6; ++statistic) {
      const double got = out[statistic * count + k];
      const auto w = static_cast<double>(want[statistic]);
      if (statistic == 2 || statistic == 3) {
        if (std::isfinite(w)) EXPECT_NEAR(got, w, 1e-12 * std::max(1.0, std::fabs(w))) << "segment " << k;
        else EXPECT_TRUE(got == w || (std::isnan(got) && std::isnan(w))) << "segment " << k << ": " << got << " " << w;
      } else {
        EXPECT_EQ(got, w) << "segment " << k << " statistic " << statistic;  // extremes and counts: exact
      }
    }
  }
}

float identity(float x) { return x; }
float from_double(double x) { return static_cast<float>(x); }
float from_half(uint16_t h) { return tprobe::float16_to_float(h); }
float from_bfloat16(uint16_t h) { return tprobe::bfloat16_to_float(h); }
template <class T>
float from_integer(T x) {
  return static_cast<float>(x);
}
float from_bool(uint8_t b) { return b ? 1.0f : 0.0f; }

arena_builder every_dtype(unsigned int chunk) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  arena_builder a;
  std::vector<float> f32(1000);
  for (float &x : f32) x = normal(rng);
  f32[3] = NAN, f32[500] = INFINITY, f32[501] = -INFINITY, f32[999] = 1e-42f;  // a subnormal too
  a.add(f32, tprobe_segment_float32, chunk, identity);
  std::vector<uint16_t> f16(777), bf16(300);
  for (uint16_t &h : f16) h = tprobe::float_to_float16(normal(rng));
  f16[0] = 0x0001, f16[1] = 0x83ff, f16[2] = 0x7c00, f16[3] = 0xfc00, f16[4] = 0x7e01;  // subnormals, ±Inf, NaN
  a.add(f16, tprobe_segment_float16, chunk, from_half);
  for (uint16_t &h : bf16) h = tprobe::float_to_bfloat16(normal(rng) * 1e30f);
  a.add(bf16, tprobe_segment_bfloat16, chunk, from_bfloat16);
  std::vector<double> f64(513);
  for (double &x : f64) x = normal(rng);
  f64[10] = 1e300, f64[11] = -1e300, f64[12] = 1e-300;  // past float32's range: ±Inf, and 0
  a.add(f64, tprobe_segment_float64, chunk, from_double);
  std::vector<uint8_t> u8(257), b8(100);
  std::vector<int8_t> i8(255);
  std::vector<int16_t> i16(256);
  std::vector<int32_t> i32(31);
  std::vector<int64_t> i64(65);
  for (auto &x : u8) x = static_cast<uint8_t>(rng());
  for (auto &x : i8) x = static_cast<int8_t>(rng());
  for (auto &x : i16) x = static_cast<int16_t>(rng());
  for (auto &x : i32) x = static_cast<int32_t>(rng());
  for (auto &x : i64) x = static_cast<int64_t>(rng());
  for (auto &x : b8) x = rng() % 3 == 0;
  b8[0] = 2;  // any non-zero byte is true
  a.add(u8, tprobe_segment_uint8, chunk, from_integer<uint8_t>);
  a.add(i8, tprobe_segment_int8, chunk, from_integer<int8_t>);
  a.add(i16, tprobe_segment_int16, chunk, from_integer<int16_t>);
  a.add(i32, tprobe_segment_int32, chunk, from_integer<int32_t>);
  a.add(i64, tprobe_segment_int64, chunk, from_integer<int64_t>);
  a.add(b8, tprobe_segment_bool, chunk, from_bool);
  std::vector<float> nans(5, NAN), one(1, -2.5f);
  a.add(nans, tprobe_segment_float32, chunk, identity);  // all NaN: the extremes stay ∓Inf
  a.add(one, tprobe_segment_float32, chunk, identity);
  return a;
}

TEST(SegmentKernel, EveryDtypeMatchesTheReference) {
  for (const unsigned int chunk : {16384u, 256u, 100u}) {
    SCOPED_TRACE(chunk);
    const arena_builder a = every_dtype(chunk);
    expect_reference(a, run_on_host(a.bytes, a.segments));
  }
}

TEST(SegmentKernel, TheKernelIsTheHostTwinBitForBit) {
  // Segments shorter than a block, of exactly one, of one more, and long ones; a grid with more
  // blocks than segments (the surplus blocks return).
  const arena_builder a = every_dtype(300);
  const std::vector<double> kernel = run_kernel(a.bytes, a.segments, static_cast<unsigned int>(a.segments.size()) + 2);
  const std::vector<double> host = run_on_host(a.bytes, a.segments);
  ASSERT_EQ(kernel.size(), host.size());
  EXPECT_EQ(std::memcmp(kernel.data(), host.data(), kernel.size() * sizeof(double)), 0);
  expect_reference(a, kernel);
}

TEST(SegmentKernel, EveryHalfConvertsAsCoreDoes) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float got = tprobe_segment_half_to_float(static_cast<uint16_t>(h));
    const float want = tprobe::float16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << h;
    else EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << h;
  }
}

TEST(SegmentKernel, LargeSegmentSumsStayFloat64) {
  // 16384 values of 1 + 2^-20: a float32 running sum would lose the small parts.
  arena_builder a;
  std::vector<float> v(16384, 1.0f + 0x1p-20f);
  a.add(v, tprobe_segment_float32, 16384, identity);
  const std::vector<double> out = run_on_host(a.bytes, a.segments);
  EXPECT_EQ(out[2], 16384.0 * (1.0 + 0x1p-20));
}

}  // namespace
