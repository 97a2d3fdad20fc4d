// core/grad_probe and core/grad_sim: msprobe's grad_probe rows (docs/msprobe-compat.md §6.1, the rows of
// msprobe's own test_grad_csv.py), the csv dialect, settings, the gradient record, and the
// similarity table, its csv and the suspect-step rule (§6.2).
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "errors.h"
#include "grad_probe.h"
#include "grad_record.h"
#include "grad_sim.h"
#include "tensor_stats.h"

namespace tprobe {
namespace {

using json = nlohmann::ordered_json;

grad_probe_settings level(const char *l, json bounds = {-1, 0, 1}) {
  return grad_probe_settings_from_json({{"grad_level", l}, {"param_list", json::array()}, {"bounds", bounds}}, "test");
}

std::vector<std::string> row_of(const std::vector<float> &g, const std::vector<int64_t> &shape, const char *l,
                                std::vector<uint8_t> *bits = nullptr) {
  const auto s = level(l);
  std::vector<uint8_t> b(grad_sign_bytes(g.size()));
  const auto n = grad_numbers_compute(g.data(), dtype::float32, shape, s, b.data());
  if (bits) *bits = b;
  return grad_csv_row("model.conv2d", s, n);
}

// msprobe's test_grad_csv.py: grad [[-2, 2], [0.2, 0.3]], bounds [-1, 0, 1].
TEST(GradProbe, MsprobeRowsL0L1L2) {
  const std::vector<float> g{-2, 2, 0.2f, 0.3f};
  EXPECT_EQ(row_of(g, {2, 2}, "L0"),
            (std::vector<std::string>{"model.conv2d", "e2863940", "2.0", "-2.0", "2.851315498352051", "[2, 2]"}));
  EXPECT_EQ(row_of(g, {2, 2}, "L1"),
            (std::vector<std::string>{"model.conv2d", "2.0", "-2.0", "2.851315498352051", "[2, 2]"}));
  EXPECT_EQ(row_of(g, {2, 2}, "L2"), (std::vector<std::string>{"model.conv2d", "0.25", "0.0", "0.5", "0.25", "0.0",
                                                               "2.0", "-2.0", "2.851315498352051", "[2, 2]"}));
  std::vector<uint8_t> bits;
  (void)row_of(g, {2, 2}, "L1", &bits);
  EXPECT_EQ(bits, std::vector<uint8_t>{0b1110});  // -2 no, 2 yes, 0.2 yes, 0.3 yes
}

TEST(GradProbe, HeadersPerLevel) {
  EXPECT_EQ(csv_line(grad_csv_header(level("L0"))), "param_name,MD5,max,min,norm,shape\r\n");
  EXPECT_EQ(csv_line(grad_csv_header(level("L1"))), "param_name,max,min,norm,shape\r\n");
  EXPECT_EQ(csv_line(grad_csv_header(level("L2"))),
            "param_name,\"(-inf, -1]\",\"(-1, 0]\",\"(0, 1]\",\"(1, inf)\",=0,max,min,norm,shape\r\n");
  // Bounds as Python's str(): ints stay ints, floats are repr(float).
  EXPECT_EQ(grad_csv_header(level("L2", {-0.5, 1.0, 3}))[1], "(-inf, -0.5]");
  EXPECT_EQ(grad_csv_header(level("L2", {-0.5, 1.0, 3}))[2], "(-0.5, 1.0]");
  EXPECT_EQ(grad_csv_header(level("L2", {-0.5, 1.0, 3}))[4], "(3, inf)");
}

TEST(GradProbe, BucketsZerosNanAndBoundsAsFloat32) {
  // x == bound goes left ((a, b]); NaN goes last (torch.bucketize); zeros overlap (-1, 0].
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> g{-1, 0, 0, 1, 1.5f, nan, -3, 0.1f};
  const auto s = level("L2", {-1, 0, 0.1, 1});
  const auto n = grad_numbers_compute(g.data(), dtype::float32, std::vector<int64_t>{8}, s, nullptr);
  // 0.1f == the float32 bound 0.1 → (0, 0.1]
  EXPECT_EQ(n.buckets, (std::vector<uint64_t>{2, 2, 1, 1, 2}));
  EXPECT_EQ(n.zeros, 2u);
  EXPECT_TRUE(std::isnan(n.max));
  EXPECT_TRUE(std::isnan(n.min));
}

TEST(GradProbe, Bfloat16AndFloat64) {
  std::vector<uint16_t> bf;
  for (float v : {-2.0f, 2.0f, 0.2f, 0.3f}) bf.push_back(float_to_bfloat16(v));
  const auto s = level("L0");
  const auto n = grad_numbers_compute(bf.data(), dtype::bfloat16, std::vector<int64_t>{4}, s, nullptr);
  // CRC of the upcast float32 values; norm rounded to bfloat16, as torch.norm(bf16).float() is.
  std::vector<float> up;
  for (uint16_t b : bf) up.push_back(bfloat16_to_float(b));
  EXPECT_EQ(*n.crc32, crc32_bytes_zlib(up.data(), up.size() * 4));
  EXPECT_EQ(n.norm, static_cast<double>(bfloat16_to_float(float_to_bfloat16(std::sqrt(8.0f + up[2] * up[2] + up[3] * up[3])))));
  const std::vector<double> d{-2, 2, 0.2, 0.3};
  const auto nd = grad_numbers_compute(d.data(), dtype::float64, std::vector<int64_t>{2, 2}, s, nullptr);
  const std::vector<float> f{-2, 2, 0.2f, 0.3f};
  EXPECT_EQ(*nd.crc32, 0xe2863940u);  // converted to float32 first
  EXPECT_EQ(nd.max, 2.0);
  EXPECT_THROW((void)grad_numbers_compute(d.data(), dtype::int64, std::vector<int64_t>{4}, s, nullptr), usage_error);
}

TEST(GradProbe, EmptyGradientAndZeroDim) {
  const auto s = level("L2");
  const auto n = grad_numbers_compute(nullptr, dtype::float32, std::vector<int64_t>{0, 3}, s, nullptr);
  const auto row = grad_csv_row("p", s, n);
  EXPECT_EQ(row[1], "0");  // Python's int 0 where numel is 0
  EXPECT_EQ(row.back(), "[0, 3]");
  const float one = 1.5f;
  const auto z = grad_numbers_compute(&one, dtype::float32, std::vector<int64_t>{}, s, nullptr);
  EXPECT_EQ(grad_csv_row("p", s, z).back(), "[]");
}

TEST(GradProbe, CsvDialect) {
  EXPECT_EQ(csv_line({"a", "b,c", "d\"e"}), "a,\"b,c\",\"d\"\"e\"\r\n");
  EXPECT_EQ(csv_split("a,\"b,c\",\"d\"\"e\""), (std::vector<std::string>{"a", "b,c", "d\"e"}));
}

TEST(GradProbe, SettingsParamList) {
  const auto s = grad_probe_settings_from_json({{"param_list", {"fc.weight"}}}, "test");
  EXPECT_EQ(s.level, "L1");
  EXPECT_TRUE(s.wants("fc.weight"));
  EXPECT_FALSE(s.wants("fc.weight2"));  // exact names, not substrings
  EXPECT_TRUE(level("L1").wants("anything"));
  EXPECT_THROW((void)grad_probe_settings_from_json({{"grad_level", "L3"}}, "test"), usage_error);
}

TEST(GradProbe, RecordRoundTrip) {
  const std::vector<float> g{-2, 2, 0.2f, 0.3f, 1, -1, 0, 5, 6};
  const auto s = level("L2");
  std::vector<std::byte> bits(grad_sign_bytes(g.size()));
  const auto n = grad_numbers_compute(g.data(), dtype::float32, std::vector<int64_t>{3, 3}, s,
                                      reinterpret_cast<uint8_t *>(bits.data()));
  record r = grad_record_make(record_header_of(record_kind::tensor), "fc.weight", n, bits);
  auto frames = record_encode(r);
  const record back = record_decode(frames);
  ASSERT_TRUE(grad_record_is(back));
  const auto v = grad_record_read(back);
  EXPECT_EQ(v.param, "fc.weight");
  EXPECT_EQ(v.numbers, n);
  ASSERT_EQ(v.bits.size(), 2u);
  std::vector<uint8_t> unpacked(9);
  grad_sign_unpack(reinterpret_cast<const uint8_t *>(v.bits.data()), 9, unpacked.data());
  EXPECT_EQ(unpacked, (std::vector<uint8_t>{0, 1, 1, 1, 1, 0, 0, 1, 1}));
  record bad(back.header);
  bad.header.meta = json::object();
  EXPECT_THROW((void)grad_record_read(bad), framing_error);
}

TEST(GradSim, AgreementPackedAndBool) {
  std::vector<uint8_t> a(200), b(200);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = (i * 7) % 3 == 0;
    b[i] = i % 5 == 0 ? !a[i] : a[i];
  }
  std::vector<uint8_t> pa(grad_sign_bytes(200)), pb(grad_sign_bytes(200));
  for (size_t i = 0; i < 200; ++i) {
    pa[i / 8] |= a[i] << (i % 8);
    pb[i / 8] |= b[i] << (i % 8);
  }
  EXPECT_EQ(grad_bool_agreement(a.data(), b.data(), 200), 160u);
  EXPECT_EQ(grad_sign_agreement(pa.data(), pb.data(), 200), 160u);
  EXPECT_EQ(grad_sign_agreement(pa.data(), pb.data(), 13), 13u - 3u);  // i = 0, 5, 10
}

TEST(GradSim, TableCsvAsMsprobe) {
  grad_sim_table t;
  t.add(0, "b", 4, 4);
  t.add(0, "a", 1, 2);
  t.add(1, "a", 2, 2);
  t.add(1, "b", 3, 4);
  t.add(2, "a", 0, 0);
  t.add(2, "b", 1, 4);
  t.set_order({"a", "b"});
  EXPECT_EQ(t.csv(), std::string(csv_utf8_bom) +
                         "step,0,1,2\r\n"
                         "a,0.5,1.0,0\r\n"
                         "b,1.0,0.75,0.25\r\n"
                         "summary,0.8333333333333334,0.8333333333333334,0.25\r\n");
  grad_sim_table missing = t;
  missing.add(3, "a", 1, 1);
  EXPECT_THROW((void)missing.csv(), usage_error);
}

TEST(GradSim, SuspectRule) {
  grad_sim_table t;
  for (int64_t s = 0; s < 4; ++s) {
    t.add(s, "steady", 100, 100);
    t.add(s, "drops", s < 2 ? 100 : (s == 2 ? 98 : 60), 100);  // -0.02 at 2 (not > 0.03), -0.38 at 3
  }
  EXPECT_FALSE(grad_suspect_at(t, 0));
  EXPECT_FALSE(grad_suspect_at(t, 2));
  const auto first = grad_first_suspect(t);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->step, 3);
  ASSERT_EQ(first->params.size(), 1u);
  EXPECT_EQ(first->params[0].param, "drops");
  EXPECT_NE(grad_suspect_line(*first, 0).find("first suspect step 3 (rank 0)"), std::string::npos);
  // Below 0.97 at the first compared step.
  grad_sim_table low;
  low.add(5, "p", 96, 100);
  ASSERT_TRUE(grad_first_suspect(low));
  EXPECT_EQ(grad_first_suspect(low)->step, 5);
  grad_sim_table fine;
  fine.add(5, "p", 97, 100);
  EXPECT_FALSE(grad_first_suspect(fine));
}

}  // namespace
}  // namespace tprobe
