// test_free_benchmark_torch.cpp: free_benchmark's tensor side (capture/torch/fuzz.h) against
// msprobe 8.3.3's own vectors (docs/msprobe-compat.md §8.8: V-3, V-4 and its unit tests'
// expectations), run on the CPU with LibTorch.
#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "free_benchmark.h"
#include "fuzz.h"

namespace tprobe::torch_capture {
namespace {

at::Tensor f32(std::vector<float> v) { return at::tensor(v, at::TensorOptions().dtype(at::kFloat)); }

// test_calculate_max_ratio.py: fp32 forward, so the floor is sqrt(1e-8) = 1e-4.
TEST(FuzzMaxRatio, MsprobeUnitVectors) {
  EXPECT_DOUBLE_EQ(fuzz_max_ratio(f32({1, 2, 3}), f32({1, 2, 3}), false).ratio, 1.0);
  EXPECT_NEAR(fuzz_max_ratio(f32({1, 2, 1e-4f}), f32({1.3f, 2.7f, 1e-3f}), false).ratio, 10.0, 0.005);
  EXPECT_NEAR(fuzz_max_ratio(f32({1, 1e-8f, 1e-6f}), f32({1, 1e-4f, -1e-8f}), false).ratio, 1.0, 1e-6);
  EXPECT_TRUE(fuzz_max_ratio(f32({1, -2, 3}), f32({1, 2, 3}), false).symbol_flipping);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NEAR(fuzz_max_ratio(f32({1, nan, 2}), f32({1.1f, nan, 2.4f}), false).ratio, 1.2, 1e-6);
  const auto empty = fuzz_max_ratio(f32({}), f32({}), false);
  EXPECT_FALSE(empty.symbol_flipping);
  EXPECT_DOUBLE_EQ(empty.ratio, 1.0);
}

// The CPU's one-pass loop gives ATen's numbers, dtype by dtype: msprobe's calculate_max_ratio
// written with ATen operators (as the device path runs it) on random outputs with NaN, inf, zeros
// and sign changes below the floor. (float16 too, where a device runs it: this torch's CPU has no
// float16 clamp to compare with.)
TEST(FuzzMaxRatio, CpuLoopMatchesAtenInEveryDtype) {
  at::manual_seed(7);
  for (const auto dtype : {at::kFloat, at::kDouble, at::kBFloat16}) {
    for (int trial = 0; trial < 20; ++trial) {
      at::Tensor o = at::randn({257}).to(dtype);
      at::Tensor p = (o.to(at::kDouble) * (1 + 0.01 * at::randn({257}, at::kDouble))).to(dtype);
      if (trial % 4 == 1) {
        o[3] = std::numeric_limits<double>::quiet_NaN();
        p[5] = std::numeric_limits<double>::infinity();
      }
      if (trial % 4 == 2) {
        o[7] = 0;
        p[7] = -1e-9;  // a sign change below the floor: no flip
      }
      if (trial % 4 == 3) p[11] = -p[11];  // a real flip
      const std::string name = fuzz_dtype_name(dtype);
      const double tol = free_benchmark_abs_tol(name, trial % 2 == 0);
      const at::Tensor r = at::nan_to_num(o.abs().clamp_min(tol) / p.abs().clamp_min(tol), 1.0);
      const double flip = at::scalar_tensor(-(tol * tol), dtype).item<double>();
      const bool flips = (o * p).min().item<double>() < flip;
      const double lo = r.min().item<double>(), hi = r.max().item<double>();
      const auto got = fuzz_max_ratio(o, p, trial % 2 == 0);
      ASSERT_EQ(got.symbol_flipping, flips) << name << " trial " << trial;
      if (!flips) {
        EXPECT_EQ(got.ratio, std::max({1.0, hi, lo == 0 ? std::numeric_limits<double>::infinity() : 1 / lo}))
            << name << " trial " << trial;
      }
    }
  }
}

// V-3 case 1: torch.add of fp16 inputs against the same in fp32 from inputs x1.0041: the row's
// max_rel is msprobe's 0.004049780885728493 to the last digit.
TEST(FuzzMaxRatio, V3ImprovePrecisionAdd) {
  const at::Tensor a = at::tensor({3.01, 3.02}).to(at::kHalf), b = at::tensor({0.02, 0.02}).to(at::kHalf);
  const at::Tensor origin = a + b;
  const at::Tensor perturbed = (a * 1.0041).to(at::kFloat) + (b * 1.0041).to(at::kFloat);
  const auto r = fuzz_max_ratio(origin, perturbed, false);
  ASSERT_FALSE(r.symbol_flipping);
  EXPECT_EQ(r.ratio - 1.0, 0.004049780885728493);
  // fp16's threshold 1.002: inconsistent, one row, its dtype and shape the original output's.
  const auto findings = fuzz_compare({{-1, origin}}, {{-1, perturbed}}, "improve_precision", false,
                                     free_benchmark_threshold("torch.float16", "improve_precision"));
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].dtype, at::kHalf);
  EXPECT_EQ(findings[0].shape, std::vector<int64_t>{2});
  EXPECT_EQ(findings[0].index, -1);
  free_benchmark_row row;
  row.pert_mode = "improve_precision";
  row.stage = "forward";
  row.step = 3;
  row.api_name = "Torch.add.0.forward";
  row.ratio = findings[0].ratio;
  row.dtype = fuzz_dtype_name(findings[0].dtype);
  row.shape = findings[0].shape;
  EXPECT_EQ(free_benchmark_csv_line(row),
            "0,improve_precision,forward,3,Torch.add.0.forward,0.004049780885728493,torch.float16,torch.Size([2]),\r\n");
}

// V-3 case 2 (symbol flipping) and case 3 (bit_noise, a tuple whose second element parts).
TEST(FuzzCompare, V3SymbolFlippingAndTupleIndex) {
  const at::Tensor origin = at::tensor({1.0, -2.0, 3.0}).to(at::kHalf);
  const auto flip = fuzz_compare({{-1, origin}}, {{-1, f32({1, 2, 3})}}, "improve_precision", false,
                                 free_benchmark_threshold("torch.float16", "improve_precision"));
  ASSERT_EQ(flip.size(), 1u);
  EXPECT_TRUE(flip[0].symbol_flipping);

  const at::Tensor same = f32({1, 2});
  const at::Tensor o = f32({1, 2, 3, 4}).reshape({2, 2}), p = f32({1, 2, 3, 4.001f}).reshape({2, 2});
  const auto rows = fuzz_compare({{0, same}, {1, o}}, {{0, same}, {1, p}}, "bit_noise", false,
                                 free_benchmark_threshold("torch.float32", "bit_noise"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].index, 1);
  EXPECT_EQ(rows[0].ratio - 1.0, 0.00024998475230142425);
  EXPECT_EQ(rows[0].shape, (std::vector<int64_t>{2, 2}));
}

// V-4: the three noise layers on fp32 [1e-3, 0.5, 4096.00048828125, 1e-9].
TEST(FuzzPerturb, V4LayerOutputs) {
  const at::Tensor x = at::tensor({1e-3, 0.5, 4096.00048828125, 1e-9}, at::TensorOptions().dtype(at::kFloat));
  auto values = [](const at::Tensor &t) {
    std::vector<double> v;
    for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t[i].item<double>());
    return v;
  };
  EXPECT_EQ(values(*fuzz_add_noise(x)),
            (std::vector<double>{0.0010000100592151284, 0.5, 4096.00048828125, 9.999999717180685e-10}));
  EXPECT_EQ(values(*fuzz_bit_noise(x)),
            (std::vector<double>{0.0009999999310821295, 0.5000000596046448, 4096.0, 9.99999860695766e-10}));
  EXPECT_EQ(values(*fuzz_change_value(x)),
            (std::vector<double>{9.999999717180685e-10, 0.5, 4096.00048828125, 0.0010000000474974513}));
}

// test_perturbed_layser.py's expectations.
TEST(FuzzPerturb, MsprobeLayerUnitTests) {
  const at::Tensor bits = at::tensor({4096.00048828125, 16777216.0, 1e-38}, at::TensorOptions().dtype(at::kFloat));
  const at::Tensor b = *fuzz_bit_noise(bits);
  EXPECT_EQ(b[0].item<double>(), 4096.0);
  EXPECT_EQ(b[1].item<double>(), 16777218.0);
  EXPECT_EQ(b[2].item<float>(), 1e-38f);  // subnormal: left alone

  const at::Tensor x = at::tensor({0.1, 0.01}).to(at::kBFloat16);
  const at::Tensor n = *fuzz_add_noise(x);
  EXPECT_EQ(n[0].item<float>(), (x[0] + 1e-4).item<float>());
  EXPECT_EQ(n[1].item<float>(), x[1].item<float>());

  const at::Tensor one = *fuzz_change_value(f32({1e-9f, 1e-7f, 1e-2f}));
  EXPECT_EQ(one[0].item<float>(), 1e-2f);
  EXPECT_EQ(one[2].item<float>(), 1e-9f);
  const at::Tensor two = *fuzz_change_value(f32({1e-9f, 1e-7f, 1e-2f, 1e-9f, 1e-2f, 1e-7f}).reshape({2, 3}));
  EXPECT_EQ(two[0][0].item<float>(), 1e-7f);
  EXPECT_EQ(two[-1][-1].item<float>(), 1e-9f);
  // Cancelled: an empty or 0-d tensor, a (1, 1) one, a tensor below the dtype's tolerance.
  EXPECT_FALSE(fuzz_change_value(at::zeros({2, 0})));
  EXPECT_FALSE(fuzz_change_value(f32({})));
  EXPECT_FALSE(fuzz_change_value(at::ones({1, 1})));
  EXPECT_FALSE(fuzz_add_noise(f32({1e-9f, -1e-9f})));
  EXPECT_FALSE(fuzz_bit_noise(at::tensor({1, 2})));
}

// improve_precision raises fp16 and bf16 tensors, in lists too, and leaves fp32, fp64 and integers.
TEST(FuzzPerturb, ImprovePrecisionRaisesHalvesOnly) {
  const at::Tensor a = at::randn({2, 3}).to(at::kBFloat16), b = at::randn({2, 3}).to(at::kHalf);
  const at::Tensor d = at::randn({2, 3}).to(at::kDouble), i = at::ones({2}, at::kInt);
  c10::List<at::Tensor> list({a, d});
  const auto p = fuzz_perturb({a, b, list, i}, 0, "improve_precision", {});
  ASSERT_TRUE(p.perturbed);
  EXPECT_EQ(p.args[0].toTensor().scalar_type(), at::kFloat);
  EXPECT_EQ(p.args[1].toTensor().scalar_type(), at::kFloat);
  EXPECT_EQ(p.args[2].toTensorList().get(0).scalar_type(), at::kFloat);
  EXPECT_EQ(p.args[2].toTensorList().get(1).scalar_type(), at::kDouble);
  EXPECT_EQ(p.args[3].toTensor().scalar_type(), at::kInt);
  // All inputs already fp32/fp64: nothing to raise, the call is not re-run.
  EXPECT_FALSE(fuzz_perturb({at::ones({2}), d}, 0, "improve_precision", {}).perturbed);
  // A noise mode perturbs the first tensor of the valid argument only; written arguments are copies.
  const at::Tensor x = f32({1e-3f, 2e-3f});
  const auto noisy = fuzz_perturb({x, x}, 0, "add_noise", {1});
  ASSERT_TRUE(noisy.perturbed);
  EXPECT_FALSE(at::equal(noisy.args[0].toTensor(), x));
  EXPECT_TRUE(at::equal(noisy.args[1].toTensor(), x));
  EXPECT_NE(noisy.args[1].toTensor().data_ptr(), x.data_ptr());
}

TEST(FuzzValidInput, FirstFloatingPositionalOrList) {
  EXPECT_EQ(fuzz_valid_input({at::ones({2}, at::kLong), f32({1})}, {false, false}), 1);
  EXPECT_EQ(fuzz_valid_input({c10::IValue(3), c10::List<at::Tensor>({f32({1})})}, {false, false}), 1);
  EXPECT_EQ(fuzz_valid_input({at::ones({2}, at::kLong), f32({1})}, {false, true}), -1);
  EXPECT_EQ(fuzz_valid_input({at::empty({2}, at::TensorOptions().device(at::kMeta))}, {false}), -1);
}

// to_cpu's SingleCompare: fp32 thresholds 2^-14; the bias may be negative; a golden with inf passes.
TEST(FuzzSingleCompare, BenchmarkThresholds) {
  EXPECT_TRUE(fuzz_single_compare(f32({1, 2, 0.5f}), f32({1, 2, 0.5f})));
  EXPECT_FALSE(fuzz_single_compare(f32({1, 2, 0.5f}), f32({1, 2.001f, 0.5f})));
  EXPECT_FALSE(fuzz_single_compare(f32({0.1f}), f32({0.1f + 1e-3f})));
  EXPECT_TRUE(fuzz_single_compare(f32({1, 2}), f32({1, std::numeric_limits<float>::infinity()})));
}

// The one-pass SingleCompare against msprobe's formula in ATen float64, on outputs that pass and
// outputs that part by a little more than each dtype's thresholds.
TEST(FuzzSingleCompare, MatchesMsprobesFormula) {
  at::manual_seed(3);
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kDouble}) {
    for (const double scale : {0.0, 1e-5, 1e-3, 1e-2}) {
      const at::Tensor golden = at::randn({300}, at::kDouble) * 2;
      const at::Tensor actual = (golden * (1 + scale * at::randn({300}, at::kDouble))).to(dtype);
      const at::Tensor a = actual.to(at::kDouble), g = golden.to(at::kFloat).to(at::kDouble);
      const double rtol = dtype == at::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -14);
      const at::Tensor d = a - g;
      const double abs_err = at::where(a.abs() < 1, d.abs(), at::zeros_like(d)).max().item<double>();
      const double rel_err = at::where(a.abs() >= 1, d.abs() / g.abs(), at::zeros_like(d)).max().item<double>();
      const double eb = (d / at::where(g.abs() >= 1, g.abs(), at::ones_like(g))).mean().item<double>();
      const bool expected = abs_err <= rtol && rel_err <= rtol && eb <= 1e-4;
      EXPECT_EQ(fuzz_single_compare(actual, golden.to(at::kFloat)), expected)
          << fuzz_dtype_name(dtype) << " scale " << scale;
    }
  }
}

// The re-run goes through the dispatcher, and fix writes the re-run's values into the original
// output through `.data`: autograd's version counter does not move.
TEST(FuzzRerun, DispatcherAndFix) {
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mul", "Tensor");
  const at::Tensor a = at::tensor({1.5, 2.0}).to(at::kHalf);
  const at::Tensor out = a * a;
  const auto p = fuzz_perturb({a, a}, 0, "improve_precision", {});
  const auto results = fuzz_rerun(op, p.args);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].toTensor().scalar_type(), at::kFloat);
  const at::Tensor broken = out.clone().requires_grad_(false);
  broken.fill_(7);
  const auto version = broken._version();
  ASSERT_TRUE(fuzz_fix_outputs({{-1, broken}}, fuzz_output_tensors(results)));
  EXPECT_EQ(broken._version(), version);
  EXPECT_EQ(broken[0].item<float>(), 2.25f);
  EXPECT_EQ(broken.scalar_type(), at::kHalf);
}

}  // namespace
}  // namespace tprobe::torch_capture
