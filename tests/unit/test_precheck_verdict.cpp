// tprobe's verdict over msprobe's two stages (core/precheck/precheck_verdict.h): a stage-1 warning
// or error that a correctly rounded result of the device's dtype would get too is a pass; a kernel
// worse than rounding is an error.
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

TEST(PrecheckVerdict, AStage1ErrorWithinStage2OfRoundingIsAPass) {
  // bf16 outputs near 1, all rounded once but 2 of 52, which are 2 ulps (1.5%) off: 双百 (99% of
  // elements within 1%) fails, so stage 1 calls it an error; by stage 2's ratios to correct
  // rounding (rmse, max and mean relative error, floored at bf16's 2^-8) it is no worse.
  std::vector<double> bench, device;
  for (int i = 0; i < 52; ++i) {
    const double v = 1.0 + i / 61.0;
    bench.push_back(v);
    device.push_back(round_to_dtype(v, "torch.bfloat16") * (i < 2 ? 1.015 : 1.0));
  }
  for (const auto d : {dialect::msprobe_8_3_3, dialect::msprobe_head}) {
    const api_replay r = one_output("Torch.exp.0", bench, device, "torch.bfloat16");
    api_judgement j = judge_api(r, d);
    const status stage1 = j.result.forward;
    ASSERT_EQ(stage1, status::error) << j.details.at(0).message;  // 双百 fails: stage 1 alone calls it an error
    judge_against_rounding(j, r, d);
    EXPECT_EQ(j.result.forward, status::pass);
    EXPECT_THAT(j.details.at(0).message, HasSubstr("the stage-1 error is the dtype's own rounding"));
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
    EXPECT_THAT(j.details.at(0).message, HasSubstr("tprobe: error: worse than the bench rounded to torch.float32"));
  }
}

TEST(PrecheckVerdict, ABfloat16WarningOfRoundingIsAPass) {
  // Every bf16 output rounded once misses 双千 (bf16 keeps 8 bits: up to 0.2% off): stage 1 warns.
  std::vector<double> bench, device;
  for (int i = 0; i < 200; ++i) {
    const double v = 1.0 + i / 97.0;
    bench.push_back(v);
    device.push_back(round_to_dtype(v, "torch.bfloat16"));
  }
  for (const auto d : {dialect::msprobe_8_3_3, dialect::msprobe_head}) {
    const api_replay r = one_output("Torch.exp.0", bench, device, "torch.bfloat16");
    api_judgement j = judge_api(r, d);
    ASSERT_EQ(j.result.forward, status::warning);
    judge_against_rounding(j, r, d);
    EXPECT_EQ(j.result.forward, status::pass) << j.details.at(0).message;
    EXPECT_THAT(j.details.at(0).message, HasSubstr("the stage-1 warning is the dtype's own rounding"));
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
