// tensor_stats: msprobe statistics checked against an independent float64 reference computed here
// with plain loops, plus the fp16/bf16 helpers and zlib CRC-32.
#include "tensor_stats.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace tprobe {
namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

template <class T>
tensor_stats stats_of(const std::vector<T> &v, dtype t, bool zero_dim = false, stats_options o = {}) {
  return tensor_stats_compute(v.data(), t, v.size(), zero_dim, o);
}

// The same elements at an odd address, as payloads sit inside a received record.
template <class T>
tensor_stats stats_of_unaligned(const std::vector<T> &v, dtype t, stats_options o = {}) {
  std::vector<unsigned char> bytes(v.size() * sizeof(T) + 1);
  std::memcpy(bytes.data() + 1, v.data(), v.size() * sizeof(T));
  return tensor_stats_compute(bytes.data() + 1, t, v.size(), false, o);
}

struct reference {
  double max = -inf, min = inf, sum = 0.0, sumsq = 0.0;
  size_t count = 0;
  double mean() const { return sum / static_cast<double>(count); }
  double norm() const { return std::sqrt(sumsq); }
};

reference reference_of(const std::vector<double> &values) {
  reference r;
  for (double v : values) {
    r.max = std::max(r.max, v);
    r.min = std::min(r.min, v);
    r.sum += v;
    r.sumsq += v * v;
  }
  r.count = values.size();
  return r;
}

double as_f32(double v) { return static_cast<float>(v); }
double as_f16(double v) { return float16_to_float(float_to_float16(static_cast<float>(v))); }
double as_bf16(double v) { return bfloat16_to_float(float_to_bfloat16(static_cast<float>(v))); }

// Independent fp16 decoding: sign · 2^(e-15) · (1 + m/1024), or 2^-14 · m/1024 when e == 0.
double half_reference(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : inf) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

void expect_real(const stat_value &s, double expected, const char *what) {
  ASSERT_EQ(s.k, stat_value::kind::real) << what;
  if (std::isnan(expected))
    EXPECT_TRUE(std::isnan(s.real)) << what << " = " << s.real;
  else
    EXPECT_EQ(s.real, expected) << what;
}

void expect_rel(const stat_value &s, double expected, double tolerance, const char *what) {
  ASSERT_EQ(s.k, stat_value::kind::real) << what;
  EXPECT_LE(std::fabs(s.real - expected), tolerance * std::fabs(expected)) << what << ": " << s.real
                                                                           << " vs " << expected;
}

bool is_float32(double v) { return static_cast<double>(static_cast<float>(v)) == v; }

void expect_all_nan(const tensor_stats &s) {
  expect_real(s.max, NAN, "max");
  expect_real(s.min, NAN, "min");
  expect_real(s.mean, NAN, "mean");
  expect_real(s.norm, NAN, "norm");
}

void expect_all_null(const tensor_stats &s) {
  EXPECT_TRUE(s.max.is_null());
  EXPECT_TRUE(s.min.is_null());
  EXPECT_TRUE(s.mean.is_null());
  EXPECT_TRUE(s.norm.is_null());
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(3.0f, 50.0f);
  std::vector<float> v(n);
  for (auto &x : v) x = dist(gen);
  return v;
}

// ---------------------------------------------------------------------------------- float32

TEST(TensorStats, Float32RandomMatchesReference) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{1000}, size_t{4097}, size_t{1} << 20, (size_t{1} << 20) + 5}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto data = random_floats(n, static_cast<uint32_t>(n));
    const reference r = reference_of(std::vector<double>(data.begin(), data.end()));
    const tensor_stats s = stats_of(data, dtype::float32);
    expect_real(s.max, r.max, "max");  // an element, exactly
    expect_real(s.min, r.min, "min");
    expect_rel(s.mean, r.mean(), 1e-6, "mean");
    expect_rel(s.norm, r.norm(), 1e-6, "norm");
    EXPECT_TRUE(is_float32(s.mean.real) && is_float32(s.norm.real));
    EXPECT_EQ(s.nan_count, 0u);
    EXPECT_EQ(s.inf_count, 0u);
    EXPECT_FALSE(s.crc32.has_value());
    // Where the payload sits in memory changes nothing, bit for bit.
    EXPECT_EQ(stats_of_unaligned(data, dtype::float32), s);
  }
}

// The sums of tensor_stats.h's documented order, written out one element at a time: a part's
// blocks, each element into lane k % stats_sum_lanes, lanes added in order.
void ordered_part_sums(const float *v, size_t n, double &sum, double &sumsq) {
  for (size_t start = 0; start < n; start += stats_block_elems) {
    const size_t block = std::min(stats_block_elems, n - start);
    double lane_sum[stats_sum_lanes] = {}, lane_sumsq[stats_sum_lanes] = {};
    for (size_t k = 0; k < block; ++k) {
      const double d = v[start + k];
      lane_sum[k % stats_sum_lanes] += d;
      lane_sumsq[k % stats_sum_lanes] += d * d;
    }
    double block_sum = 0.0;
    for (size_t j = 0; j < stats_sum_lanes; ++j) block_sum += lane_sum[j], sumsq += lane_sumsq[j];
    sum += block_sum;
  }
}

TEST(TensorStats, Float32SumsInTheDocumentedOrderOnEveryInstructionSet) {
  // Whichever clone this CPU runs (AVX-512, AVX2 or the baseline) must give these bits. Up to two
  // parts of stats_part_bytes, summed part by part; magnitudes from 1e-3 to 1e7.
  const size_t part = stats_part_bytes / sizeof(float);
  for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{4095}, size_t{4096}, size_t{4097},
                   size_t{70001}, part, part + 4097}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::mt19937 gen(static_cast<uint32_t>(n));
    std::uniform_real_distribution<float> mantissa(-1.f, 1.f);
    std::uniform_int_distribution<int> exponent(-3, 7);
    std::vector<float> v(n);
    for (auto &x : v) x = mantissa(gen) * std::pow(10.f, static_cast<float>(exponent(gen)));
    // And a pair ±2^60 in each block: the elements sharing their lanes vanish into them, so
    // another lane count or block size would lose other elements and change the mean outright.
    for (size_t start = 0; start + 5 < n; start += stats_block_elems) v[start + 3] = 0x1p60f, v[start + 4] = -0x1p60f;
    double sum = 0.0, sumsq = 0.0;
    for (size_t start = 0; start < n; start += part) {
      double part_sum = 0.0, part_sumsq = 0.0;
      ordered_part_sums(v.data() + start, std::min(part, n - start), part_sum, part_sumsq);
      sum += part_sum, sumsq += part_sumsq;
    }
    const tensor_stats s = stats_of(v, dtype::float32);
    EXPECT_EQ(s.mean.real, static_cast<double>(static_cast<float>(sum / static_cast<double>(n))));
    EXPECT_EQ(s.norm.real, static_cast<double>(static_cast<float>(std::sqrt(sumsq))));
  }
}

TEST(TensorStats, Float32SingleElementIsNotZeroDim) {
  const tensor_stats s = stats_of(std::vector<float>{-2.5f}, dtype::float32);
  expect_real(s.max, -2.5, "max");
  expect_real(s.min, -2.5, "min");
  expect_real(s.mean, -2.5, "mean");
  expect_real(s.norm, 2.5, "norm");
}

TEST(TensorStats, Float32ExactValues) {
  const tensor_stats s = stats_of(std::vector<float>{1, -2, 3, 4, 0.5f}, dtype::float32);
  expect_real(s.max, 4, "max");
  expect_real(s.min, -2, "min");
  expect_real(s.mean, 1.3f, "mean");  // 6.5 / 5, rounded to float32
  expect_real(s.norm, static_cast<float>(std::sqrt(30.25)), "norm");
}

TEST(TensorStats, NanMakesAllFourNan) {
  auto data = random_floats(10000, 7);
  data[3] = NAN;
  data[9999] = -NAN;  // in the last, partial block
  data[5000] = INFINITY;
  const tensor_stats s = stats_of(data, dtype::float32);
  expect_all_nan(s);
  EXPECT_EQ(s.nan_count, 2u);
  EXPECT_EQ(s.inf_count, 1u);
  EXPECT_EQ(stats_of_unaligned(data, dtype::float32).nan_count, 2u);
}

TEST(TensorStats, InfinitiesPropagateAsIeee) {
  auto data = random_floats(5003, 11);
  data[4321] = INFINITY;
  tensor_stats s = stats_of(data, dtype::float32);
  expect_real(s.max, inf, "max");
  expect_real(s.mean, inf, "mean");
  expect_real(s.norm, inf, "norm");
  EXPECT_TRUE(std::isfinite(s.min.real));
  EXPECT_EQ(s.inf_count, 1u);
  EXPECT_EQ(s.nan_count, 0u);

  data[4321] = 1.0f;
  data[5002] = -INFINITY;  // the tail, past the last full group of lanes
  s = stats_of(data, dtype::float32);
  expect_real(s.min, -inf, "min");
  expect_real(s.mean, -inf, "mean");
  expect_real(s.norm, inf, "norm");
  EXPECT_TRUE(std::isfinite(s.max.real));
  EXPECT_EQ(s.inf_count, 1u);

  data[0] = INFINITY;  // both signs: mean is NaN, the rest is not
  s = stats_of(data, dtype::float32);
  expect_real(s.max, inf, "max");
  expect_real(s.min, -inf, "min");
  expect_real(s.mean, NAN, "mean");
  expect_real(s.norm, inf, "norm");
  EXPECT_EQ(s.inf_count, 2u);
  EXPECT_EQ(s.nan_count, 0u);
}

// ---------------------------------------------------------------------------- float16/bfloat16

TEST(TensorStats, Float16ExactIntegers) {
  std::mt19937 gen(3);
  std::uniform_int_distribution<int> dist(-1000, 1000);  // exact in fp16, sums exact in double
  std::vector<uint16_t> data(3001);
  std::vector<double> values;
  for (auto &h : data) {
    const int v = dist(gen);
    h = float_to_float16(static_cast<float>(v));
    values.push_back(v);
  }
  const reference r = reference_of(values);
  const tensor_stats s = stats_of(data, dtype::float16);
  expect_real(s.max, r.max, "max");
  expect_real(s.min, r.min, "min");
  expect_real(s.mean, as_f16(r.mean()), "mean");
  expect_real(s.norm, as_f16(r.norm()), "norm");
  EXPECT_NE(as_f16(r.mean()), as_f32(r.mean()));  // the rounding really is to fp16

  stats_options high;
  high.high_precision = true;
  const tensor_stats h = stats_of(data, dtype::float16, false, high);
  expect_real(h.mean, as_f32(r.mean()), "mean (high)");
  expect_real(h.norm, as_f32(r.norm()), "norm (high)");
  EXPECT_EQ(stats_of_unaligned(data, dtype::float16), s);
}

TEST(TensorStats, Float16NormOverflowsToInfLikeTorch) {
  const std::vector<uint16_t> data(1000, float_to_float16(60000.0f));
  const tensor_stats s = stats_of(data, dtype::float16);
  expect_real(s.max, 60000, "max");
  expect_real(s.min, 60000, "min");
  expect_real(s.mean, 60000, "mean");
  expect_real(s.norm, inf, "norm");  // 1.9e6 does not fit in fp16
  EXPECT_EQ(s.inf_count, 0u);        // the elements themselves are finite

  stats_options high;
  high.high_precision = true;
  const tensor_stats h = stats_of(data, dtype::float16, false, high);
  expect_real(h.norm, as_f32(60000.0 * std::sqrt(1000.0)), "norm (high)");
}

TEST(TensorStats, HalfMeanOfRoundedSumIsTorch113sCpuMean) {
  // Values torch 1.13's torch.mean gave (the probe the PyTorch capture asks its torch): five copies
  // of a value whose sum does not fit the dtype's mantissa.
  stats_options old_torch;
  old_torch.half_mean_of_rounded_sum = true;
  const std::vector<uint16_t> bf16(5, float_to_bfloat16(1.9921875f));
  expect_real(stats_of(bf16, dtype::bfloat16).mean, 1.9921875, "mean (sum divided, then rounded)");
  const tensor_stats b = stats_of(bf16, dtype::bfloat16, false, old_torch);
  expect_real(b.mean, 1.984375, "mean (rounded sum)");
  expect_real(b.max, 1.9921875, "max");  // the other statistics are unchanged
  expect_real(b.norm, as_bf16(1.9921875 * std::sqrt(5.0)), "norm");
  const std::vector<uint16_t> f16(5, float_to_float16(1.9990234375f));
  expect_real(stats_of(f16, dtype::float16, false, old_torch).mean, 1.998046875, "fp16 mean (rounded sum)");
  // A float16 sum past 65504 is Inf there, a count past it makes the mean 0, both NaN (Inf / Inf).
  expect_real(stats_of(std::vector<uint16_t>(1000, float_to_float16(600.0f)), dtype::float16, false, old_torch).mean,
              inf, "fp16 mean of a sum past 65504");
  expect_real(stats_of(std::vector<uint16_t>(70000, float_to_float16(1.0f)), dtype::float16, false, old_torch).mean,
              std::numeric_limits<double>::quiet_NaN(), "fp16 mean over 70000 elements");
  expect_real(stats_of(std::vector<uint16_t>(70000, float_to_float16(0.5f)), dtype::float16, false, old_torch).mean,
              0.0, "fp16 mean of a finite sum over 70000 elements");
  // Not float32, and not with precision "high", where msprobe computes in float32.
  stats_options high = old_torch;
  high.high_precision = true;
  expect_real(stats_of(bf16, dtype::bfloat16, false, high).mean, 1.9921875, "mean (high)");
  const std::vector<float> f32(5, 1.9921875f);
  expect_real(stats_of(f32, dtype::float32, false, old_torch).mean, 1.9921875, "float32 mean");
}

TEST(TensorStats, Float16EveryFinitePatternConvertsExactly) {
  // All positive finite halves, subnormals included: their double sum is exact, so any
  // conversion error in the vector loop shows up in the mean.
  std::vector<uint16_t> data;
  double sum = 0.0, sumsq = 0.0;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    data.push_back(static_cast<uint16_t>(h));
    sum += half_reference(static_cast<uint16_t>(h));
    sumsq += half_reference(static_cast<uint16_t>(h)) * half_reference(static_cast<uint16_t>(h));
  }
  stats_options high;
  high.high_precision = true;
  tensor_stats s = stats_of(data, dtype::float16, false, high);
  expect_real(s.max, 65504, "max");
  expect_real(s.min, 0, "min");
  expect_real(s.mean, as_f32(sum / static_cast<double>(data.size())), "mean");
  expect_rel(s.norm, std::sqrt(sumsq), 1e-6, "norm");

  for (auto &h : data) h |= 0x8000;  // and all negative ones
  s = stats_of(data, dtype::float16, false, high);
  expect_real(s.max, -0.0, "max");
  expect_real(s.min, -65504, "min");
  expect_real(s.mean, as_f32(-sum / static_cast<double>(data.size())), "mean");

  data.push_back(0x7c00);  // +Inf
  data.push_back(0x7e00);  // NaN
  s = stats_of(data, dtype::float16);
  expect_all_nan(s);
  EXPECT_EQ(s.nan_count, 1u);
  EXPECT_EQ(s.inf_count, 1u);
}

TEST(TensorStats, BFloat16ExactValues) {
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> dist(-256, 256);  // exact in bf16 (8 significant bits)
  std::vector<uint16_t> data(777);
  std::vector<double> values;
  for (auto &h : data) {
    const int v = dist(gen);
    h = float_to_bfloat16(static_cast<float>(v));
    values.push_back(v);
  }
  const reference r = reference_of(values);
  const tensor_stats s = stats_of(data, dtype::bfloat16);
  expect_real(s.max, r.max, "max");
  expect_real(s.min, r.min, "min");
  expect_real(s.mean, as_bf16(r.mean()), "mean");
  expect_real(s.norm, as_bf16(r.norm()), "norm");

  // 5/3: bf16 keeps 1.6640625, float32 1.6666666.
  const std::vector<uint16_t> small{0x3f80, 0x4000, 0x4000};  // 1, 2, 2
  expect_real(stats_of(small, dtype::bfloat16).mean, 1.6640625, "mean");
  stats_options high;
  high.high_precision = true;
  expect_real(stats_of(small, dtype::bfloat16, false, high).mean, as_f32(5.0 / 3.0), "mean (high)");

  std::vector<uint16_t> with_inf = data;
  with_inf[100] = 0xff80;  // -Inf
  const tensor_stats i = stats_of(with_inf, dtype::bfloat16);
  expect_real(i.min, -inf, "min");
  expect_real(i.mean, -inf, "mean");
  EXPECT_EQ(i.inf_count, 1u);
}

// The capture's device path accumulates on the GPU and rounds with tensor_stat_round: for every
// real dtype and both precisions that must give tensor_stats_compute's Mean and Norm from the same
// double sums (the values are exact in every dtype, so only the final rounding differs).
TEST(TensorStats, StatRoundMatchesTheComputedResults) {
  // 1, 2, 2: Mean 5/3 and Norm 3 (exact), and 1, 2, 3, 5: Norm sqrt(39); every dtype rounds 5/3.
  for (const bool high : {false, true}) {
    stats_options o;
    o.high_precision = high;
    const auto check = [&](dtype t, const void *data, size_t count, double sum, double sumsq) {
      const tensor_stats s = tensor_stats_compute(data, t, count, false, o);
      const std::string what = std::string(dtype_name(t)) + (high ? " high" : " low");
      expect_real(s.mean, tensor_stat_round(t, high, sum / double(count)), (what + " mean").c_str());
      expect_real(s.norm, tensor_stat_round(t, high, std::sqrt(sumsq)), (what + " norm").c_str());
    };
    const std::vector<double> f64{1, 2, 2, 5};
    const std::vector<float> f32{1, 2, 2, 5};
    const std::vector<uint16_t> f16{float_to_float16(1), float_to_float16(2), float_to_float16(2), float_to_float16(5)};
    const std::vector<uint16_t> bf16{float_to_bfloat16(1), float_to_bfloat16(2), float_to_bfloat16(2), float_to_bfloat16(5)};
    const std::vector<int8_t> i8{1, 2, 2, 5};
    const std::vector<int16_t> i16{1, 2, 2, 5};
    const std::vector<int32_t> i32{1, 2, 2, 5};
    const std::vector<int64_t> i64{1, 2, 2, 5};
    const std::vector<uint8_t> u8{1, 2, 2, 5};
    for (const size_t n : {size_t{3}, size_t{4}}) {
      const double sum = n == 3 ? 5 : 10, sumsq = n == 3 ? 9 : 34;
      check(dtype::float64, f64.data(), n, sum, sumsq);
      check(dtype::float32, f32.data(), n, sum, sumsq);
      check(dtype::float16, f16.data(), n, sum, sumsq);
      check(dtype::bfloat16, bf16.data(), n, sum, sumsq);
      check(dtype::int8, i8.data(), n, sum, sumsq);
      check(dtype::int16, i16.data(), n, sum, sumsq);
      check(dtype::int32, i32.data(), n, sum, sumsq);
      check(dtype::int64, i64.data(), n, sum, sumsq);
      check(dtype::uint8, u8.data(), n, sum, sumsq);
    }
  }
  // The rounding is real: bf16 keeps 1.6640625 of 5/3 unless the precision is high.
  EXPECT_EQ(tensor_stat_round(dtype::bfloat16, false, 5.0 / 3.0), 1.6640625);
  EXPECT_EQ(tensor_stat_round(dtype::bfloat16, true, 5.0 / 3.0), double(float(5.0 / 3.0)));
  EXPECT_EQ(tensor_stat_round(dtype::float64, false, 5.0 / 3.0), double(float(5.0 / 3.0)));
}

TEST(HalfConversion, Float16ToFloatEveryPattern) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const double expected = half_reference(static_cast<uint16_t>(h));
    const float got = float16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      EXPECT_EQ(got, expected) << std::hex << h;
      EXPECT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
      EXPECT_EQ(float_to_float16(got), h) << std::hex << h;  // round trip
    }
  }
}

TEST(HalfConversion, FloatToFloat16Rounding) {
  EXPECT_EQ(float_to_float16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_float16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_float16(1.0f + 0x1p-11f), 0x3c00);      // tie → even
  EXPECT_EQ(float_to_float16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie → even (up)
  EXPECT_EQ(float_to_float16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  EXPECT_EQ(float_to_float16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_float16(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_float16(65520.0f), 0x7c00);  // halfway to 65536 → Inf
  EXPECT_EQ(float_to_float16(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_float16(INFINITY), 0x7c00);
  EXPECT_EQ(float_to_float16(0x1p-24f), 0x0001);      // smallest subnormal
  EXPECT_EQ(float_to_float16(0x1p-25f), 0x0000);      // tie → even (zero)
  EXPECT_EQ(float_to_float16(3 * 0x1p-25f), 0x0002);  // tie → even (up)
  EXPECT_EQ(float_to_float16(0x1p-14f - 0x1p-26f), 0x0400);  // rounds up into the normals
  EXPECT_EQ(float_to_float16(1e-30f), 0x0000);
  EXPECT_EQ(float_to_float16(-0.0f), 0x8000);
  const uint16_t nan = float_to_float16(NAN);
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
}

TEST(HalfConversion, BFloat16) {
  EXPECT_EQ(bfloat16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bfloat16_to_float(0xc2f7), -123.5f);
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(1.0f + 0x1p-8f), 0x3f80);      // tie → even
  EXPECT_EQ(float_to_bfloat16(1.0f + 3 * 0x1p-8f), 0x3f82);  // tie → even (up)
  EXPECT_EQ(float_to_bfloat16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to Inf
  EXPECT_EQ(float_to_bfloat16(-INFINITY), 0xff80);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(NAN))));
  // A NaN whose payload sits only in the low 16 bits must not become Inf.
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(std::bit_cast<float>(0x7f800001u)))));
}

// --------------------------------------------------------------------------- float64, integers

TEST(TensorStats, Float64ResultsAreFloat32) {
  std::mt19937_64 gen(9);
  std::normal_distribution<double> dist(0.1, 3.0);
  std::vector<double> data(10007);
  for (auto &x : data) x = dist(gen);
  std::vector<double> as_float;  // msprobe converts to float32 before computing
  for (double x : data) as_float.push_back(as_f32(x));
  const reference r = reference_of(as_float);
  const tensor_stats s = stats_of(data, dtype::float64);
  expect_real(s.max, r.max, "max");
  expect_real(s.min, r.min, "min");
  expect_rel(s.mean, r.mean(), 1e-6, "mean");
  expect_rel(s.norm, r.norm(), 1e-6, "norm");
  EXPECT_TRUE(is_float32(s.max.real) && is_float32(s.min.real));
  EXPECT_TRUE(is_float32(s.mean.real) && is_float32(s.norm.real));
  EXPECT_EQ(stats_of_unaligned(data, dtype::float64), s);
}

TEST(TensorStats, Float64BeyondFloat32RangeBecomesInf) {
  const tensor_stats s = stats_of(std::vector<double>{1e300, 1.0}, dtype::float64);
  expect_real(s.max, inf, "max");  // as msprobe's .float() does
  expect_real(s.min, 1, "min");
  EXPECT_EQ(s.inf_count, 0u);  // the tensor itself holds no Inf
}

TEST(TensorStats, Integers) {
  tensor_stats s = stats_of(std::vector<int8_t>{-128, 127, 0, 5}, dtype::int8);
  expect_real(s.max, 127, "max");
  expect_real(s.min, -128, "min");
  expect_real(s.mean, 1, "mean");
  expect_real(s.norm, as_f32(std::sqrt(128.0 * 128 + 127 * 127 + 25)), "norm");

  s = stats_of(std::vector<uint8_t>{0, 255, 200, 1}, dtype::uint8);
  expect_real(s.max, 255, "max");
  expect_real(s.min, 0, "min");
  expect_real(s.mean, 114, "mean");
  expect_real(s.norm, as_f32(std::sqrt(255.0 * 255 + 200 * 200 + 1)), "norm");

  s = stats_of(std::vector<int16_t>{-32768, 32767, 3}, dtype::int16);
  expect_real(s.max, 32767, "max");
  expect_real(s.min, -32768, "min");
  expect_real(s.mean, as_f32(2.0 / 3.0), "mean");

  s = stats_of(std::vector<int32_t>{2147483647, -5}, dtype::int32);
  expect_real(s.max, 2147483648.0, "max");  // float32 of 2^31 - 1
  expect_real(s.min, -5, "min");

  // Beyond 2^24 float32 cannot hold every integer: results are the float32 values.
  s = stats_of(std::vector<int64_t>{16777217, 3, 3}, dtype::int64);
  expect_real(s.max, 16777216, "max");
  expect_real(s.min, 3, "min");
  EXPECT_EQ(s.max.k, stat_value::kind::real);
  s = stats_of(std::vector<int64_t>{std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()},
               dtype::int64);
  expect_real(s.max, 0x1p63, "max");
  expect_real(s.min, -0x1p63, "min");
  expect_real(s.mean, 0, "mean");
  expect_real(s.norm, as_f32(0x1p63 * std::sqrt(2.0)), "norm");
  EXPECT_EQ(s.nan_count + s.inf_count, 0u);
}

template <class T>
void check_random_integers(dtype t, int64_t lo, int64_t hi) {
  for (size_t n : {size_t{1}, size_t{13}, size_t{9000}}) {
    SCOPED_TRACE(std::string(dtype_name(t)) + " n = " + std::to_string(n));
    std::mt19937_64 gen(n);
    std::uniform_int_distribution<int64_t> dist(lo, hi);
    std::vector<T> data(n);
    std::vector<double> values;
    for (auto &x : data) {
      x = static_cast<T>(dist(gen));
      values.push_back(as_f32(static_cast<double>(x)));
    }
    const reference r = reference_of(values);
    const tensor_stats s = stats_of(data, t);
    expect_real(s.max, r.max, "max");
    expect_real(s.min, r.min, "min");
    expect_rel(s.mean, r.mean(), 1e-6, "mean");
    expect_rel(s.norm, r.norm(), 1e-6, "norm");
    EXPECT_EQ(stats_of_unaligned(data, t), s);
  }
}

TEST(TensorStats, RandomIntegersMatchReference) {
  check_random_integers<int8_t>(dtype::int8, -128, 127);
  check_random_integers<uint8_t>(dtype::uint8, 0, 255);
  check_random_integers<int16_t>(dtype::int16, -32768, 32767);
  check_random_integers<int32_t>(dtype::int32, -2000000000, 2000000000);
  check_random_integers<int64_t>(dtype::int64, -(int64_t{1} << 40), int64_t{1} << 40);
}

// ------------------------------------------------------------------------------- bool, 0-d

TEST(TensorStats, BoolIsAnyAllWithNullMeanNorm) {
  tensor_stats s = stats_of(std::vector<uint8_t>{0, 1, 1}, dtype::boolean);
  EXPECT_EQ(s.max, stat_value::of_bool(true));
  EXPECT_EQ(s.min, stat_value::of_bool(false));
  EXPECT_TRUE(s.mean.is_null());
  EXPECT_TRUE(s.norm.is_null());

  s = stats_of(std::vector<uint8_t>(1000, 1), dtype::boolean);
  EXPECT_EQ(s.max, stat_value::of_bool(true));
  EXPECT_EQ(s.min, stat_value::of_bool(true));
  s = stats_of(std::vector<uint8_t>(1000, 0), dtype::boolean);
  EXPECT_EQ(s.max, stat_value::of_bool(false));
  EXPECT_EQ(s.min, stat_value::of_bool(false));

  s = stats_of(std::vector<uint8_t>{1}, dtype::boolean, true);  // 0-d bool keeps the bool rule
  EXPECT_EQ(s.max, stat_value::of_bool(true));
  EXPECT_EQ(s.min, stat_value::of_bool(true));
  EXPECT_TRUE(s.mean.is_null());
  EXPECT_TRUE(s.norm.is_null());
  EXPECT_EQ(s.nan_count + s.inf_count, 0u);
}

TEST(TensorStats, ZeroDimIsTheValueInItsOwnType) {
  tensor_stats s = stats_of(std::vector<int64_t>{423}, dtype::int64, true);
  for (const stat_value *v : {&s.max, &s.min, &s.mean, &s.norm}) EXPECT_EQ(*v, stat_value::of_int(423));

  s = stats_of(std::vector<uint8_t>{200}, dtype::uint8, true);
  EXPECT_EQ(s.norm, stat_value::of_int(200));
  s = stats_of(std::vector<int8_t>{-7}, dtype::int8, true);
  EXPECT_EQ(s.norm, stat_value::of_int(-7));  // the value, not its norm

  s = stats_of(std::vector<float>{-2.5f}, dtype::float32, true);
  for (const stat_value *v : {&s.max, &s.min, &s.mean, &s.norm}) EXPECT_EQ(*v, stat_value::of_real(-2.5));

  s = stats_of(std::vector<double>{0.1}, dtype::float64, true);  // not rounded to float32
  EXPECT_EQ(s.mean, stat_value::of_real(0.1));

  s = stats_of(std::vector<uint16_t>{float_to_bfloat16(-3.0f)}, dtype::bfloat16, true);
  EXPECT_EQ(s.norm, stat_value::of_real(-3.0));

  s = stats_of(std::vector<float>{NAN}, dtype::float32, true);
  expect_all_nan(s);
  EXPECT_EQ(s.nan_count, 1u);
}

TEST(TensorStats, EmptyIsAllNull) {
  for (dtype t : {dtype::float32, dtype::float16, dtype::int64, dtype::boolean, dtype::complex64}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    stats_options o;
    o.crc32 = true;
    const tensor_stats s = tensor_stats_compute(nullptr, t, 0, false, o);
    expect_all_null(s);
    EXPECT_EQ(s.nan_count, 0u);
    EXPECT_EQ(s.inf_count, 0u);
    EXPECT_EQ(s.crc32, std::optional<uint32_t>(0u));  // msprobe writes "00000000"
  }
}

// ---------------------------------------------------------------------------------- complex

TEST(TensorStats, Complex64IsStatsOfAbs) {
  const std::vector<float> data{3, 4, 0, 1, -6, -8};  // |x| = 5, 1, 10
  tensor_stats s = tensor_stats_compute(data.data(), dtype::complex64, 3, false, {});
  expect_real(s.max, 10, "max");
  expect_real(s.min, 1, "min");
  expect_real(s.mean, as_f32(16.0 / 3.0), "mean");
  EXPECT_TRUE(s.norm.is_null());

  // More than one group of lanes, against hypot in double rounded to float (numpy's abs).
  std::mt19937 gen(1);
  std::normal_distribution<float> dist(0.0f, 10.0f);
  std::vector<float> many(2 * 1001);
  for (auto &x : many) x = dist(gen);
  std::vector<double> abs;
  for (size_t i = 0; i < 1001; ++i) abs.push_back(as_f32(std::hypot(double{many[2 * i]}, double{many[2 * i + 1]})));
  const reference r = reference_of(abs);
  s = tensor_stats_compute(many.data(), dtype::complex64, 1001, false, {});
  expect_real(s.max, r.max, "max");
  expect_real(s.min, r.min, "min");
  expect_rel(s.mean, r.mean(), 1e-6, "mean");
  EXPECT_TRUE(s.norm.is_null());

  const std::vector<float> with_nan{1, 0, NAN, 0};
  s = tensor_stats_compute(with_nan.data(), dtype::complex64, 2, false, {});
  expect_real(s.max, NAN, "max");
  expect_real(s.min, NAN, "min");
  expect_real(s.mean, NAN, "mean");
  EXPECT_TRUE(s.norm.is_null());
  EXPECT_EQ(s.nan_count, 1u);

  // numpy: abs(inf + nan·j) is inf, so the statistics are not NaN.
  const std::vector<float> inf_nan{1, 0, INFINITY, NAN};
  s = tensor_stats_compute(inf_nan.data(), dtype::complex64, 2, false, {});
  expect_real(s.max, inf, "max");
  expect_real(s.min, 1, "min");
  EXPECT_EQ(s.nan_count, 1u);
  EXPECT_EQ(s.inf_count, 1u);

  // 0-d complex keeps the complex rule.
  s = tensor_stats_compute(data.data(), dtype::complex64, 1, true, {});
  expect_real(s.max, 5, "max");
  expect_real(s.mean, 5, "mean");
  EXPECT_TRUE(s.norm.is_null());
}

TEST(TensorStats, Complex128KeepsDoublePrecision) {
  const std::vector<double> data{0.1, 0, 0, -0.2, 1e200, 1e200};
  const tensor_stats s = tensor_stats_compute(data.data(), dtype::complex128, 3, false, {});
  expect_real(s.max, std::hypot(1e200, 1e200), "max");  // no overflow in |x|
  expect_real(s.min, 0.1, "min");                       // not rounded to float32
  expect_real(s.mean, (0.1 + 0.2 + std::hypot(1e200, 1e200)) / 3, "mean");
  EXPECT_TRUE(s.norm.is_null());
  EXPECT_EQ(s.nan_count + s.inf_count, 0u);

  const std::vector<double> odd{-INFINITY, NAN, 1, 0, 2, NAN};  // |x| = inf, 1, NaN
  const tensor_stats o = tensor_stats_compute(odd.data(), dtype::complex128, 3, false, {});
  expect_real(o.max, NAN, "max");
  expect_real(o.mean, NAN, "mean");
  EXPECT_TRUE(o.norm.is_null());
  EXPECT_EQ(o.nan_count, 2u);
  EXPECT_EQ(o.inf_count, 1u);
}

// ------------------------------------------------------------------------------------ crc32

uint32_t zlib_crc(const void *p, size_t n) {
  return static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), static_cast<const Bytef *>(p), static_cast<uInt>(n)));
}

TEST(Crc32, KnownValues) {
  const std::string_view check = "123456789";
  EXPECT_EQ(crc32_bytes(check.data(), check.size()), 0xcbf43926u);
  EXPECT_EQ(crc32_bytes(nullptr, 0), 0u);
  EXPECT_EQ(crc32_bytes("0", 1), 0xf4dbdf21u);  // msprobe's md5 of the int 0
  // msprobe's grad_probe test: the fp32 tensor [[-2, 2], [0.2, 0.3]].
  const std::vector<float> grad{-2.0f, 2.0f, 0.2f, 0.3f};
  EXPECT_EQ(crc32_bytes(grad.data(), grad.size() * sizeof(float)), 0xe2863940u);
}

TEST(Crc32, equals_zlib_at_every_length_and_alignment) {
  // The vectorised CRC (ISA-L, when built with it) folds 16/64-byte blocks: lengths and start
  // offsets around those sizes, and a large buffer, must all give zlib's value.
  std::vector<unsigned char> buf(1 << 20);
  uint32_t x = 12345;
  for (auto &b : buf) b = static_cast<unsigned char>((x = x * 1103515245u + 12345u) >> 24);
  for (size_t offset : {0, 1, 3, 7, 15}) {
    for (size_t n = 0; n < 300; ++n)
      ASSERT_EQ(crc32_bytes(buf.data() + offset, n), crc32_bytes_zlib(buf.data() + offset, n)) << offset << " " << n;
  }
  EXPECT_EQ(crc32_bytes(buf.data() + 5, buf.size() - 5), crc32_bytes_zlib(buf.data() + 5, buf.size() - 5));
  EXPECT_EQ(crc32_update(crc32_bytes(buf.data(), 1000), buf.data() + 1000, 5000), crc32_bytes_zlib(buf.data(), 6000));
}

TEST(Crc32, taken_in_the_statistics_pass_equals_a_pass_of_its_own) {
  // The statistics of a large tensor are summed in pieces when a CRC is wanted: the same values
  // to the bit, and the CRC of the whole.
  for (size_t count : {size_t{1}, size_t{4095}, size_t{65536}, size_t{65537}, size_t{1000003}}) {
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = std::sin(static_cast<float>(i)) * 1000.0f;
    if (count > 70000) v[70000] = INFINITY;
    const auto plain = tensor_stats_compute(v.data(), dtype::float32, count, false, {});
    const auto fused = tensor_stats_compute(v.data(), dtype::float32, count, false, {.crc32 = true});
    EXPECT_EQ(fused.max, plain.max);
    EXPECT_EQ(fused.min, plain.min);
    EXPECT_EQ(fused.mean, plain.mean);
    EXPECT_EQ(fused.norm, plain.norm);
    EXPECT_EQ(fused.inf_count, plain.inf_count);
    EXPECT_EQ(fused.crc32, std::optional<uint32_t>(crc32_bytes_zlib(v.data(), count * 4))) << count;
  }
}

TEST(Crc32, of_zero_bytes_equals_zlib_over_them) {
  // crc32_zero_bytes combines runs of 4 KiB blocks: sizes around a block and its powers.
  const std::vector<unsigned char> zeros((size_t{3} << 20) + 4099);
  for (size_t n : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{8192}, size_t{12288 + 5},
                   size_t{1} << 20, (size_t{1} << 20) + 1, (size_t{3} << 20) + 4099})
    EXPECT_EQ(crc32_zero_bytes(n), crc32_bytes_zlib(zeros.data(), n)) << n;
}

TEST(TensorStats, OfZerosEqualsReadingZeros) {
  // tensor_stats_of_zeros reads nothing: every dtype, empty to several parts, 0-d, both
  // precisions, with and without the CRC, equal to tensor_stats_compute over real zeros.
  const std::vector<unsigned char> zeros((size_t{3} << 20) * 16);
  for (int d = 0; d <= static_cast<int>(dtype::complex128); ++d) {
    const auto t = static_cast<dtype>(d);
    for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{4097}, size_t{3} << 20}) {
      for (bool zero_dim : {false, true}) {
        if (zero_dim && count != 1) continue;
        for (bool high : {false, true})
          for (bool crc : {false, true}) {
            const stats_options o{.high_precision = high, .crc32 = crc};
            EXPECT_EQ(tensor_stats_of_zeros(t, count, zero_dim, o), tensor_stats_compute(zeros.data(), t, count, zero_dim, o))
                << d << " " << count << " " << zero_dim << " " << high << " " << crc;
          }
      }
    }
  }
  float copy[4];
  EXPECT_THROW(tensor_stats_of_zeros(dtype::float32, 4, false, {.copy_to = copy}), std::invalid_argument);
}

TEST(TensorStats, CopiedInTheSamePassEqualsACopyAndAPass) {
  // stats_options::copy_to: what a saved tensor's capture does. Every kind of tensor, small and
  // large (streaming stores from 1 MiB), from and to unaligned addresses; the bytes after the
  // destination are not touched.
  std::mt19937 gen(7);
  auto check = [&](dtype t, size_t count, bool zero_dim, size_t src_offset, size_t dst_offset) {
    const size_t bytes = count * dtype_size(t);
    std::vector<unsigned char> src(bytes + src_offset);
    for (auto &b : src) b = static_cast<unsigned char>(gen());
    if (t == dtype::boolean)
      for (auto &b : src) b &= 1;
    const unsigned char *data = src.data() + src_offset;
    std::vector<unsigned char> dst(bytes + dst_offset + 64, 0x5a);
    for (bool crc : {false, true}) {
      const tensor_stats plain = tensor_stats_compute(data, t, count, zero_dim, {.crc32 = crc});
      std::fill(dst.begin(), dst.end(), 0x5a);
      const tensor_stats copied =
          tensor_stats_compute(data, t, count, zero_dim, {.crc32 = crc, .copy_to = dst.data() + dst_offset});
      // NaN != NaN: compare what dump.json would hold, the values' bits.
      auto same = [](const stat_value &a, const stat_value &b) {
        return a.k == b.k && a.boolean == b.boolean && a.integer == b.integer &&
               std::bit_cast<uint64_t>(a.real) == std::bit_cast<uint64_t>(b.real);
      };
      const std::string what = std::string(dtype_name(t)) + " x" + std::to_string(count) + (crc ? " crc" : "");
      EXPECT_TRUE(same(copied.max, plain.max) && same(copied.min, plain.min) && same(copied.mean, plain.mean) &&
                  same(copied.norm, plain.norm))
          << what;
      EXPECT_EQ(copied.nan_count, plain.nan_count) << what;
      EXPECT_EQ(copied.inf_count, plain.inf_count) << what;
      EXPECT_EQ(copied.crc32, plain.crc32) << what;
      EXPECT_TRUE(std::equal(data, data + bytes, dst.begin() + dst_offset)) << what << ": copy differs";
      EXPECT_TRUE(std::all_of(dst.begin(), dst.begin() + dst_offset, [](unsigned char b) { return b == 0x5a; }) &&
                  std::all_of(dst.begin() + dst_offset + bytes, dst.end(), [](unsigned char b) { return b == 0x5a; }))
          << what << ": wrote outside the destination";
    }
  };
  for (dtype t : {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16, dtype::int8, dtype::int64,
                  dtype::uint8, dtype::boolean, dtype::complex64, dtype::complex128}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{17}, size_t{4097}, size_t{65537}}) check(t, count, false, 1, 3);
    check(t, 1, true, 0, 0);
    check(t, (size_t{1} << 20) / dtype_size(t) + 5, false, 5, 7);  // streaming stores, parts
  }
}

TEST(TensorStats, StreamingCopyCopiesEveryLengthAndAlignment) {
  std::vector<unsigned char> src((size_t{1} << 20) + 300);
  uint32_t x = 99;
  for (auto &b : src) b = static_cast<unsigned char>((x = x * 1103515245u + 12345u) >> 24);
  std::vector<unsigned char> dst(src.size() + 64);
  for (size_t base : {size_t{0}, streaming_copy_min_bytes - 70}) {
    for (size_t dst_offset : {0, 1, 8, 15}) {
      for (size_t n = base; n < base + 140; ++n) {
        std::fill(dst.begin(), dst.end(), 0);
        copy_bytes_streaming(dst.data() + dst_offset, src.data() + 3, n);
        ASSERT_TRUE(std::equal(src.begin() + 3, src.begin() + 3 + n, dst.begin() + dst_offset)) << n << " " << dst_offset;
        ASSERT_TRUE(std::all_of(dst.begin() + dst_offset + n, dst.end(), [](unsigned char b) { return b == 0; }))
            << n << " " << dst_offset;
      }
    }
  }
}

TEST(Crc32, OfTensorRawBytes) {
  const auto data = random_floats(1234, 99);
  stats_options o;
  o.crc32 = true;
  const tensor_stats s = stats_of(data, dtype::float32, false, o);
  ASSERT_TRUE(s.crc32.has_value());
  EXPECT_EQ(*s.crc32, zlib_crc(data.data(), data.size() * sizeof(float)));

  // bf16 is hashed as its own 16-bit bytes.
  const std::vector<uint16_t> bf{0x3f80, 0x4000, 0xc2f7};
  EXPECT_EQ(stats_of(bf, dtype::bfloat16, false, o).crc32, std::optional<uint32_t>(zlib_crc(bf.data(), 6)));
  // A NaN tensor still has its hash.
  const std::vector<float> nan{NAN, 1.0f};
  EXPECT_EQ(stats_of(nan, dtype::float32, false, o).crc32, std::optional<uint32_t>(zlib_crc(nan.data(), 8)));
}

// --------------------------------------------------------------------------------- as_double

TEST(StatValue, AsDouble) {
  EXPECT_TRUE(std::isnan(stat_value::none().as_double()));
  EXPECT_EQ(stat_value::of_bool(true).as_double(), 1.0);
  EXPECT_EQ(stat_value::of_bool(false).as_double(), 0.0);
  EXPECT_EQ(stat_value::of_int(423).as_double(), 423.0);
  EXPECT_EQ(stat_value::of_real(-2.5).as_double(), -2.5);
}

}  // namespace
}  // namespace tprobe
