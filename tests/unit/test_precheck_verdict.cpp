// tprobe's verdict over msprobe's two stages (core/precheck/precheck_verdict.h): a stage-1 error
// that a correctly rounded result of the device's dtype would get too is a warning; a kernel worse
// than rounding stays an error.
#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "precheck_verdict.h"

namespace tprobe::precheck {
namespace {

using ::testing::HasSubstr;

api_replay one_output(const std::string &name, std::vector<double> bench, std::vector<double> device,
                      const std::string &device_dtype) {
  api_replay r;
  r.full_name = name;
  const std::vector<int64_t> shape{static_cast<int64_t>(bench.size())};
  r.forward_bench.push_back(tensor_values{"torch.float32", shape, std::move(bench)});
  r.forward_device.push_back(tensor_values{device_dtype, shape, std::move(device)});
  return r;
}

TEST(PrecheckVerdict, RoundsToTheDtype) {
  EXPECT_EQ(round_to_dtype(1.0 + 1e-3, "torch.bfloat16"), 1.0);
  EXPECT_EQ(round_to_dtype(1.0 + 1e-3, "torch.float16"), 1.0009765625);
  EXPECT_EQ(round_to_dtype(0.1, "torch.float32"), static_cast<double>(0.1f));
  EXPECT_EQ(round_to_dtype(0.1, "torch.float64"), 0.1);
}

TEST(PrecheckVerdict, RoundingAloneIsAWarningNotAnError) {
  // bf16 outputs of a correct kernel: every value rounded once. Values near 0.01 lose more than
  // 1% of themselves (stage 1's 双百 fails: error) but no more than rounding does.
  std::vector<double> bench, device;
  for (int i = 0; i < 50; ++i) {
    const double v = (i % 2 ? 1 : -1) * (0.0101 + 0.37 * i);
    bench.push_back(v);
    device.push_back(round_to_dtype(v, "torch.bfloat16"));
  }
  bench.push_back(0.00301);  // a value bf16 rounds by 0.4%, and one by >1%: 2 of 52 fail 双百
  device.push_back(round_to_dtype(0.00301, "torch.bfloat16"));
  bench.push_back(0.001953125 * 1.0059);
  device.push_back(round_to_dtype(0.001953125 * 1.0059, "torch.bfloat16") * (1 + 1.0 / 64));
  for (const auto d : {dialect::msprobe_8_3_3, dialect::msprobe_head}) {
    const api_replay r = one_output("Torch.exp.0", bench, device, "torch.bfloat16");
    api_judgement j = judge_api(r, d);
    const status stage1 = j.result.forward;
    judge_against_rounding(j, r, d);
    if (stage1 == status::error) {
      EXPECT_EQ(j.result.forward, status::warning);
      EXPECT_THAT(j.details.at(0).message, HasSubstr("the dtype's own rounding"));
    } else {
      EXPECT_EQ(j.result.forward, stage1);
    }
  }
}

TEST(PrecheckVerdict, AKernelWorseThanRoundingStaysAnError) {
  std::vector<double> bench, device;
  for (int i = 0; i < 100; ++i) {
    const double v = std::sin(0.1 * i) + 0.5;
    bench.push_back(v);
    device.push_back(round_to_dtype(v * 1.03, "torch.float32"));  // 3% off
  }
  for (const auto d : {dialect::msprobe_8_3_3, dialect::msprobe_head}) {
    const api_replay r = one_output("Torch.exp.0", bench, device, "torch.float32");
    api_judgement j = judge_api(r, d);
    ASSERT_EQ(j.result.forward, status::error);
    judge_against_rounding(j, r, d);
    EXPECT_EQ(j.result.forward, status::error);
    EXPECT_THAT(j.details.at(0).message, HasSubstr("worse than the bench rounded to torch.float32"));
  }
}

TEST(PrecheckVerdict, PassesAndSkipsAreLeftAlone) {
  const api_replay r = one_output("Torch.exp.0", {1, 2, 3}, {1, 2, 3}, "torch.float32");
  api_judgement j = judge_api(r, dialect::msprobe_head);
  const auto before = j.details.at(0).message;
  judge_against_rounding(j, r, dialect::msprobe_head);
  EXPECT_EQ(j.result.forward, status::pass);
  EXPECT_EQ(j.details.at(0).message, before);
  api_replay skipped;
  skipped.full_name = "Torch.randn.0";
  skipped.skip_reason = "random";
  api_judgement s = judge_api(skipped, dialect::msprobe_head);
  judge_against_rounding(s, skipped, dialect::msprobe_head);
  EXPECT_EQ(s.result.forward, status::skip);
}

}  // namespace
}  // namespace tprobe::precheck
