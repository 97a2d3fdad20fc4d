// core/monitor_one_pass.h: the monitor's one-read statistics of a large float array. Its AVX2 loop
// and its portable loop give the same bits (lane by lane: sums, squares, extremes, count), and the
// lanes hold what their definition says.
#include "monitor_one_pass.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace {

template <class T>
void expect_same_bits(const tprobe::lane_sums<T> &a, const tprobe::lane_sums<T> &b, const char *what) {
  EXPECT_EQ(0, std::memcmp(a.sum, b.sum, sizeof a.sum)) << what;
  EXPECT_EQ(0, std::memcmp(a.sumsq, b.sumsq, sizeof a.sumsq)) << what;
  EXPECT_EQ(0, std::memcmp(a.lo, b.lo, sizeof a.lo)) << what;
  EXPECT_EQ(0, std::memcmp(a.hi, b.hi, sizeof a.hi)) << what;
  EXPECT_EQ(a.zeros, b.zeros) << what;
}

// Arrays a step meets: normal grads, tiny moments (below eps), signed zeros, NaN and Inf, lengths
// with and without a tail.
std::vector<std::vector<float>> arrays() {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> out;
  for (int64_t n : {16, 17, 4096, 32768, 70001, 262147}) {
    for (float scale : {1.0f, 1e-9f, 3e4f}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float &v : x) v = normal(gen) * scale;
      out.push_back(x);
    }
  }
  std::vector<float> special(1000, 0.0f);
  special[3] = -0.0f, special[5] = std::numeric_limits<float>::quiet_NaN();
  special[20] = std::numeric_limits<float>::infinity(), special[41] = -std::numeric_limits<float>::infinity();
  special[999] = std::numeric_limits<float>::denorm_min();
  out.push_back(special);
  std::vector<float> zeros_first(64, 0.0f);
  zeros_first[0] = -0.0f, zeros_first[16] = 0.0f;  // lane 0's min: the first of two equal zeros stays
  out.push_back(zeros_first);
  return out;
}

TEST(MonitorOnePass, VectorAndPortableLoopsGiveTheSameBits) {
#ifdef TPROBE_ONE_PASS_AVX2
  if (!tprobe::cpu_has_avx2()) GTEST_SKIP() << "this CPU has no AVX2: the portable loop is the only one";
#else
  GTEST_SKIP() << "no vector loop on this architecture";
#endif
  for (const auto &x : arrays()) {
    for (bool want_zeros : {false, true}) {
      const auto fast = tprobe::one_pass_sums(x.data(), static_cast<int64_t>(x.size()), 1e-8f, want_zeros);
      const auto portable =
          tprobe::one_pass_sums(x.data(), static_cast<int64_t>(x.size()), 1e-8f, want_zeros, /*portable_only=*/true);
      expect_same_bits(fast, portable, ("n=" + std::to_string(x.size())).c_str());
    }
  }
}

TEST(MonitorOnePass, LanesHoldTheirElements) {
  // 35 elements: two whole groups of 16, then a tail of 3 into lane 0.
  std::vector<float> x(35);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) - 10.0f;
  x[33] = 1e-9f;  // one value below eps, in the tail
  const auto s = tprobe::one_pass_sums(x.data(), 35, 1e-8f, true);
  for (int l = 1; l < tprobe::one_pass_lanes; ++l) {
    const double a = l - 10.0, b = l + 16 - 10.0;
    EXPECT_EQ(s.sum[l], a + b) << l;
    EXPECT_EQ(s.sumsq[l], a * a + b * b) << l;
    EXPECT_EQ(s.lo[l], static_cast<float>(a)) << l;
    EXPECT_EQ(s.hi[l], static_cast<float>(b)) << l;
  }
  double lane0 = -10.0;  // elements 0 and 16, then the tail 32, 33, 34, summed in that order
  for (double v : {6.0, 22.0, double{1e-9f}, 24.0}) lane0 += v;
  EXPECT_EQ(s.sum[0], lane0);
  EXPECT_EQ(s.lo[0], -10.0f);
  EXPECT_EQ(s.hi[0], 24.0f);
  EXPECT_EQ(s.zeros, 2);  // element 10 (0.0) and the tail's 1e-9
}

TEST(MonitorOnePass, NanNeverWinsAndFloat64Works) {
  std::vector<double> x(48, 1.0);
  x[2] = std::numeric_limits<double>::quiet_NaN();
  x[5] = -3.0;
  const auto s = tprobe::one_pass_sums(x.data(), 48, 1e-8, false);
  EXPECT_EQ(s.lo[2], 1.0);  // the NaN left out of lane 2's extremes, not its sums
  EXPECT_TRUE(std::isnan(s.sum[2]));
  EXPECT_EQ(s.lo[5], -3.0);
  EXPECT_EQ(s.zeros, 0);  // not asked for
}

}  // namespace
