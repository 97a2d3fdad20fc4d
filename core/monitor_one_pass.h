// monitor_one_pass.h: the sums, extremes and small-value count of a large float32 or float64
// array in one read: the monitor's statistics of a CPU step's grads, Adam moments and weights
// (capture/torch/monitor.cpp's one_pass, which turns them into msprobe's min, max, norm, mean and
// zeros).
//
// Contract: one_pass_sums(x, n, eps, want_zeros) reads x[0, n) once. Element i goes to float64
// lane i % 16 (sum and sum of squares) and to lane i % 16's min and max in x's type; the last n % 16
// elements go to lane 0. A NaN never wins a comparison, so min and max leave NaNs out (the caller
// counts them). zeros counts |x| < eps compared in x's type. The lanes are left to the caller, who
// combines them in order 0 to 15.
//
// Why lanes and two loops: on x86-64 the float32 loop runs with AVX2 where the CPU has it, read at
// the memory's speed; x86-64's baseline (SSE2), which the portable loop is compiled for, converts and
// adds two float64s an instruction, several times slower on a large grad. The AVX2 loop keeps the
// portable loop's lanes and does the same float64 operations (no fused multiply-add), so both give
// the same bits, and every machine of one architecture the same figures
// (tests/unit/test_monitor_one_pass.cpp). Thread-safe: pure functions of their arguments.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TPROBE_ONE_PASS_AVX2 1
#endif

namespace tprobe {

constexpr int one_pass_lanes = 16;

template <class T>
struct lane_sums {
  double sum[one_pass_lanes] = {}, sumsq[one_pass_lanes] = {};
  T lo[one_pass_lanes], hi[one_pass_lanes];
  int64_t zeros = 0;
  lane_sums() {
    std::fill(lo, lo + one_pass_lanes, std::numeric_limits<T>::infinity());
    std::fill(hi, hi + one_pass_lanes, -std::numeric_limits<T>::infinity());
  }
};

// Whole groups of 16 of the first n elements (n a multiple of 16), element i into lane i % 16.
template <class T, bool Zeros>
inline void sum_into_lanes(const T *x, int64_t n, T eps_t, lane_sums<T> &s) {
  for (int64_t i = 0; i < n; i += one_pass_lanes) {
    for (int l = 0; l < one_pass_lanes; ++l) {
      const T v = x[i + l];
      const double d = static_cast<double>(v);
      s.sum[l] += d;
      s.sumsq[l] += d * d;
      if constexpr (Zeros) s.zeros += std::fabs(v) < eps_t;
      s.lo[l] = v < s.lo[l] ? v : s.lo[l];  // a NaN never wins a comparison: the caller looks for one
      s.hi[l] = v > s.hi[l] ? v : s.hi[l];
    }
  }
}

#ifdef TPROBE_ONE_PASS_AVX2
// sum_into_lanes of float32s with AVX2: a float32 step's grads and Adam
// moments are read at the memory's speed (x86-64's baseline SSE2, which the portable loop is built
// for, converts and sums two float64s an instruction, several times slower on a large grad).
__attribute__((target("avx2"))) inline void sum_into_lanes_avx2(const float *x, int64_t n, float eps_t, bool want_zeros,
                                                         lane_sums<float> &s) {
  __m256d sum[4], sq[4];
  for (int k = 0; k < 4; ++k) sum[k] = _mm256_loadu_pd(s.sum + 4 * k), sq[k] = _mm256_loadu_pd(s.sumsq + 4 * k);
  __m256 lo[2] = {_mm256_loadu_ps(s.lo), _mm256_loadu_ps(s.lo + 8)};
  __m256 hi[2] = {_mm256_loadu_ps(s.hi), _mm256_loadu_ps(s.hi + 8)};
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 eps = _mm256_set1_ps(eps_t);
  int64_t zeros = 0;
  for (int64_t i = 0; i + one_pass_lanes <= n; i += one_pass_lanes) {
    for (int h = 0; h < 2; ++h) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * h);
      lo[h] = _mm256_min_ps(v, lo[h]);  // v < lo ? v : lo, lane by lane, as the portable loop
      hi[h] = _mm256_max_ps(v, hi[h]);
      const __m256d d[2] = {_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))};
      for (int q = 0; q < 2; ++q) {
        sum[2 * h + q] = _mm256_add_pd(sum[2 * h + q], d[q]);
        sq[2 * h + q] = _mm256_add_pd(sq[2 * h + q], _mm256_mul_pd(d[q], d[q]));
      }
      if (want_zeros)
        zeros += __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(v, magnitude), eps, _CMP_LT_OQ))));
    }
  }
  for (int k = 0; k < 4; ++k) _mm256_storeu_pd(s.sum + 4 * k, sum[k]), _mm256_storeu_pd(s.sumsq + 4 * k, sq[k]);
  _mm256_storeu_ps(s.lo, lo[0]), _mm256_storeu_ps(s.lo + 8, lo[1]);
  _mm256_storeu_ps(s.hi, hi[0]), _mm256_storeu_ps(s.hi + 8, hi[1]);
  s.zeros += zeros;
}

inline bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

// The sums, extremes and (want_zeros) the count below eps of n elements. portable_only: the
// portable loop even where AVX2 is (the test that both give the same bits).
template <class T>
lane_sums<T> one_pass_sums(const T *x, int64_t n, T eps_t, bool want_zeros, bool portable_only = false) {
  lane_sums<T> s;
  const int64_t whole = n - n % one_pass_lanes;
  bool done = false;
#ifdef TPROBE_ONE_PASS_AVX2
  if constexpr (std::is_same_v<T, float>) {
    if (!portable_only && cpu_has_avx2()) sum_into_lanes_avx2(x, whole, eps_t, want_zeros, s), done = true;
  }
#endif
  if (!done) {
    if (want_zeros) sum_into_lanes<T, true>(x, whole, eps_t, s);
    else sum_into_lanes<T, false>(x, whole, eps_t, s);
  }
  // The tail, into lane 0 (i - whole < 16): as above, with one lane.
  for (int64_t i = whole; i < n; ++i) {
    const T v = x[i];
    const double d = static_cast<double>(v);
    s.sum[0] += d;
    s.sumsq[0] += d * d;
    if (want_zeros) s.zeros += std::fabs(v) < eps_t;
    s.lo[0] = v < s.lo[0] ? v : s.lo[0];
    s.hi[0] = v > s.hi[0] ? v : s.hi[0];
  }
  return s;
}


}  // namespace tprobe
