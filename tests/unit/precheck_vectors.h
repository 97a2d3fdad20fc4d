// precheck_vectors.h: docs/msprobe-compat.md's test vectors V-1 and V-2 (§7.10, §7.11) for the pre-check
// tests, with the expected CSV text, and the helpers that compare our rows with it.
//
// The [HEAD] texts are the document's. The [8.3.3] texts were produced by msprobe 8.3.3's own
// code (Ascend-mstt 99c2e0f9, Comparator.compare_output and api_precision_compare on the CPU,
// float8 dtypes stubbed) on the same inputs; the document's "Notes on V-1/V-2" quote parts of them.
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "half_float.h"
#include "precheck_files.h"
#include "precheck_metrics.h"
#include "precheck_standard.h"

namespace tprobe::precheck::vectors {

// Values as a tensor of `dtype` holds them (rounded as torch.tensor(..., dtype=…) rounds).
inline std::vector<double> rounded(const std::string &dtype, std::vector<double> v) {
  for (double &x : v) {
    if (dtype == "torch.float16") x = np_round(np_float::f16, x);
    if (dtype == "torch.float32") x = np_round(np_float::f32, x);
    if (dtype == "torch.bfloat16") x = bfloat16_to_float(float_to_bfloat16(static_cast<float>(x)));
  }
  return v;
}

inline tensor_values tv(const std::string &dtype, std::vector<int64_t> shape, std::vector<double> values) {
  return tensor_values{dtype, std::move(shape), rounded(dtype, std::move(values))};
}

// V-1's four APIs; `gpu` gives V-2's "GPU" run (same bench, other device values).
inline std::vector<api_replay> v1_replays(bool gpu = false) {
  const std::vector<double> lin_bench = {0.5, -1.25, 3.0, 1e-4, 2.0, 0.0005, -0.75, 10.0};
  const std::vector<double> grad_bench = {0.25, -0.5, 1.0, 2.0};
  api_replay linear;
  linear.full_name = "Functional.linear.0";
  linear.forward_bench = {tv("torch.float32", {2, 4}, lin_bench)};
  linear.forward_device = {gpu ? tv("torch.float16", {2, 4}, rounded("torch.float32", lin_bench))
                               : tv("torch.float16", {2, 4}, {0.5, -1.25, 3.001953125, 1e-4, 2.0, 0.0005, -0.75, 10.0078125})};
  linear.has_backward = true;
  linear.backward_bench = {tv("torch.float32", {2, 2}, grad_bench)};
  linear.backward_device = {gpu ? tv("torch.float16", {2, 2}, grad_bench)
                                : tv("torch.float16", {2, 2}, {0.25, -0.5, 1.0, 2.001953125})};
  api_replay matmul;
  matmul.full_name = "Torch.matmul.0";
  matmul.forward_bench = {tv("torch.float64", {2, 2}, {1, 2, 3, 4})};
  matmul.forward_device = {gpu ? tv("torch.float32", {2, 2}, {1, 2, 3, 4.0000005})
                               : tv("torch.float32", {2, 2}, {1.0000001, 2, 3, 4.0000005})};
  api_replay add;
  add.full_name = "Tensor.__add__.0";
  add.forward_bench = {tv("torch.float32", {4}, {1, 2, 3, 0.001})};
  add.forward_device = {gpu ? tv("torch.bfloat16", {4}, {1, 2, 3, 0.001}) : tv("torch.bfloat16", {4}, {1, 2.015625, 3, 0.001})};
  api_replay argmax;
  argmax.full_name = "Torch.argmax.0";
  argmax.forward_bench = {tv("torch.int64", {3}, {1, 2, 3})};
  argmax.forward_device = {tv("torch.int64", {3}, {1, 2, 3})};
  return {linear, matmul, add, argmax};
}

// §7.10 V-1 [HEAD], details rows verbatim (BOM and CRLF aside).
inline const char *v1_head_details =
    "API Name,Bench Dtype,DEVICE Dtype,Shape,余弦相似度,最大绝对误差,双百指标,双千指标,双万指标,二进制一致错误率,误差均衡性,均方根误差,小值域错误占比,相对误差最大值,相对误差平均值,inf/nan错误率,相对误差错误率,绝对误差错误率,ULP误差最大值,ULP误差平均值,ULP误差大于阈值占比,Status,Message\r\n"
    "Functional.linear.0.forward.output.0,torch.float32,torch.float16,\"(2, 4)\",0.99999998392154,0.0078125,1.00000000000000,1.00000000000000, , ,0.25000000000000,0.00328769515116,1.00000000000000,0.00078125,0.00023871528, , , , , , ,pass,\"\nRelative error is less than 0.001, consider as pass, skip other check and set to SPACE.\n\"\r\n"
    "Functional.linear.0.backward.output.0,torch.float32,torch.float16,\"(2, 2)\",0.99999991142870,0.001953125,1.00000000000000,1.00000000000000, , ,0.25000000000000,0.00097659912071,0,0.0009765625,0.00024414062, , , , , , ,pass,\"\nRelative error is less than 0.001, consider as pass, skip other check and set to SPACE.\n\"\r\n"
    "Torch.matmul.0.forward.output.0,torch.float64,torch.float32,\"(2, 2)\",1.00000000000000,0.00000047683716, , , , ,0.50000000000000,0.00000024576546,0,0.00000011920929,0.00000005960464, , , , , , ,pass,\"\nMax abs error is less than 0.001, consider as pass, skip other check and set to SPACE.\n\"\r\n"
    "Tensor.__add__.0.forward.output.0,torch.float32,torch.bfloat16,\"(4,)\",0.99999379969176,0.015625,1.00000000000000,0.75000000000000, , ,0.00000000000000,0.00781279296570,0,0.007797271,0.0019773107, , , , , , ,warning,\"\nRelative error is greater than 0.001, consider as warning, skip other check and set to SPACE.\n\"\r\n"
    "Torch.argmax.0.forward.output.0,torch.int64,torch.int64,\"(3,)\", , , , , ,0.00000000000000, , , , , , , , , , , ,pass,\"Current int64 data, only perform binary comparison.\"\r\n";

inline const char *v1_head_result =
    "API name,Forward Test Success,Backward Test Success,Message\r\n"
    "Functional.linear.0,pass,pass\r\n"
    "Torch.matmul.0,pass, \r\n"
    "Tensor.__add__.0,warning, \r\n"
    "Torch.argmax.0,pass, \r\n";

// V-1 [8.3.3] (msprobe 8.3.3's output on V-1's inputs).
inline const char *v1_833_details =
    "API Name,Bench Dtype,DEVICE Dtype,Shape,余弦相似度,最大绝对误差,双百指标,双千指标,双万指标,二进制一致错误率,误差均衡性,均方根误差,小值域错误占比,相对误差最大值,相对误差平均值,inf/nan错误率,相对误差错误率,绝对误差错误率,ULP误差最大值,ULP误差平均值,ULP误差大于阈值占比,Status,Message\r\n"
    "Functional.linear.0.forward.output.0,torch.float32,torch.float16,\"(2, 4)\",0.99999998392154,0.0078125,1.00000000000000,1.00000000000000, , , , , , , , , , ,1.0,0.33779907,0.00000000000000,pass,\"\nRelative error is less than 0.001, consider as pass, skip other check and set to SPACE.\n\"\r\n"
    "Functional.linear.0.backward.output.0,torch.float32,torch.float16,\"(2, 2)\",0.99999991142870,0.001953125,1.00000000000000,1.00000000000000, , , , , , , , , , ,1.0,0.25,0.00000000000000,pass,\"\nRelative error is less than 0.001, consider as pass, skip other check and set to SPACE.\n\"\r\n"
    "Torch.matmul.0.forward.output.0,torch.float64,torch.float32,\"(2, 2)\",1.00000000000000,0.00000047683716, , , , , , , , , , , , ,1.00000000000000,0.50000000000000,0.00000000000000,pass,\"\nMax abs error is less than 0.001, consider as pass, skip other check and set to SPACE.\n\"\r\n"
    "Tensor.__add__.0.forward.output.0,torch.float32,torch.bfloat16,\"(4,)\",0.99999379969176,0.015625,1.00000000000000,0.75000000000000, , , , , , , ,0,0.25000000000000,0, , , ,Warning,\"\nRelative error is greater than 0.001, consider as warning, skip other check and set to SPACE.\n\"\r\n"
    "Torch.argmax.0.forward.output.0,torch.int64,torch.int64,\"(3,)\", , , , , ,0.00000000000000, , , , , , , , , , , ,pass,\"Compare algorithm is not supported for int64 data. Only judged by Error Rate.\n\"\r\n";

inline const char *v1_833_result =
    "API name,Forward Test Success,Backward Test Success,Message\r\n"
    "Functional.linear.0,pass,pass\r\n"
    "Torch.matmul.0,pass, \r\n"
    "Tensor.__add__.0,Warning, \r\n"
    "Torch.argmax.0,pass, \r\n";

// V-2's "GPU" run judged by msprobe 8.3.3.
inline const char *v1_gpu_833_details =
    "API Name,Bench Dtype,DEVICE Dtype,Shape,余弦相似度,最大绝对误差,双百指标,双千指标,双万指标,二进制一致错误率,误差均衡性,均方根误差,小值域错误占比,相对误差最大值,相对误差平均值,inf/nan错误率,相对误差错误率,绝对误差错误率,ULP误差最大值,ULP误差平均值,ULP误差大于阈值占比,Status,Message\r\n"
    "Functional.linear.0.forward.output.0,torch.float32,torch.float16,\"(2, 4)\",1.00000000000000,2.021552e-07, , , , , , , , , , , , ,0.4239502,0.08779907,0.00000000000000,pass,\"\nMax abs error is less than 0.001, consider as pass, skip other check and set to SPACE.\n\"\r\n"
    "Functional.linear.0.backward.output.0,torch.float32,torch.float16,\"(2, 2)\",1.00000000000000,0.0, , , , , , , , , , , , ,0.0,0.0,0.00000000000000,pass,\"\nMax abs error is less than 0.001, consider as pass, skip other check and set to SPACE.\n\"\r\n"
    "Torch.matmul.0.forward.output.0,torch.float64,torch.float32,\"(2, 2)\",1.00000000000000,0.00000047683716, , , , , , , , , , , , ,1.00000000000000,0.25000000000000,0.00000000000000,pass,\"\nMax abs error is less than 0.001, consider as pass, skip other check and set to SPACE.\n\"\r\n"
    "Tensor.__add__.0.forward.output.0,torch.float32,torch.bfloat16,\"(4,)\",0.99999999999999,5.493639e-07, , , , , , , , , ,0,0.00000000000000,0, , , ,pass,\"\nMax abs error is less than 0.001, consider as pass, skip other check and set to SPACE.\n\"\r\n"
    "Torch.argmax.0.forward.output.0,torch.int64,torch.int64,\"(3,)\", , , , , ,0.00000000000000, , , , , , , , , , , ,pass,\"Compare algorithm is not supported for int64 data. Only judged by Error Rate.\n\"\r\n";

// §7.11 V-2 [HEAD] (the linear backward row, which the document leaves out, is checked apart).
inline const char *v2_head_details =
    "API Name,小值域错误比值,小值域判定结果,均方根误差比值,均方根误差判定结果,相对误差最大值比值,相对误差最大值判定结果,相对误差平均值比值,相对误差平均值判定结果,误差均衡性比值,误差均衡性判定结果,inf/nan错误率,inf/nan判定结果,相对误差错误率,相对误差判定结果,绝对误差错误率,绝对误差判定结果,二进制一致错误率,二进制一致错误率判定结果,ULP误差平均值,ULP误差大于阈值占比,ULP误差大于阈值占比比值,ULP误差判定结果,双千指标,双千指标判定结果,比对结果,比对算法,Message\r\n"
    "Functional.linear.0.forward.output.0,1.00000000000000,pass,6.73319966957568,error,1.60000000000000,pass,0.48888889344000,pass,512.00000000000000,error, , , , , , , , , , , , , , ,error,标杆比对法,\"ERROR: 均方根误差比值超过阈值\n\"\r\n"
    "Torch.matmul.0.forward.output.0,0.00000000000000,pass,0.00402662129664,pass,0.00195312500736,pass,0.00097656242176,pass,2.00000000000000,pass, , , , , , , , , , , , , , ,pass,标杆比对法,\r\n"
    "Tensor.__add__.0.forward.output.0,0.00000000000000,pass,2.00007499921920,error,1.99610137600000,pass,0.50619153920000,pass,0.00000000000000,pass, , , , , , , , , , , , , , ,error,标杆比对法,\"ERROR: 均方根误差比值超过阈值\n\"\r\n"
    "Torch.argmax.0.forward.output.0, , , , , , , , , , , , , , , , ,0.00000000000000,pass, , , , , , ,pass,二进制一致法,\r\n";

inline const char *v2_head_result =
    "API Name,Forward Test Success,Backward Test Success,Message\r\n"
    "Functional.linear.0,error,error,\r\n"
    "Torch.matmul.0,pass, ,\r\n"
    "Tensor.__add__.0,error, ,\r\n"
    "Torch.argmax.0,pass, ,\r\n";

// V-2 [8.3.3] (msprobe 8.3.3's api_precision_compare of its own V-1 and GPU details files).
inline const char *v2_833_details =
    "API Name,小值域错误比值,小值域判定结果,均方根误差比值,均方根误差判定结果,相对误差最大值比值,相对误差最大值判定结果,相对误差平均值比值,相对误差平均值判定结果,误差均衡性比值,误差均衡性判定结果,inf/nan错误率,inf/nan判定结果,相对误差错误率,相对误差判定结果,绝对误差错误率,绝对误差判定结果,二进制一致错误率,二进制一致错误率判定结果,ULP误差平均值,ULP误差大于阈值占比,ULP误差大于阈值占比比值,ULP误差判定结果,双千指标,双千指标判定结果,比对结果,比对算法,Message\r\n"
    "Functional.linear.0.forward.output.0, , , , , , , , , , , , , , , , , , ,0.33779907000000,0.00000000000000,0.00000000000000,pass, , ,pass,ULP误差比对法,\r\n"
    "Functional.linear.0.backward.output.0, , , , , , , , , , , , , , , , , , ,0.25000000000000,0.00000000000000,0.00000000000000,pass, , ,pass,ULP误差比对法,\r\n"
    "Torch.matmul.0.forward.output.0, , , , , , , , , , , , , , , , , , ,0.50000000000000,0.00000000000000,0.00000000000000,pass, , ,pass,ULP误差比对法,\r\n"
    "Tensor.__add__.0.forward.output.0, , , , , , , , , , ,0.00000000000000,pass,0.25000000000000,error,0.00000000000000,pass, , , , , , , , ,error,绝对阈值法,ERROR: 相对误差错误率超过阈值\r\n"
    "Torch.argmax.0.forward.output.0, , , , , , , , , , , , , , , , ,0.00000000000000,pass, , , , , , ,pass,二进制一致法,\r\n";

inline const char *v2_833_result =
    "API Name,Forward Test Success,Backward Test Success,Message\r\n"
    "Functional.linear.0,pass,pass,\r\n"
    "Torch.matmul.0,pass, ,\r\n"
    "Tensor.__add__.0,error, ,\r\n"
    "Torch.argmax.0,pass, ,\r\n";

// True when `expected` (msprobe's cell text) and `actual` (ours) agree: a number within 1e-6
// relative (1e-12 absolute near 0; NaN only with NaN), anything else byte for byte.
inline bool cell_matches(const std::string &expected, const std::string &actual) {
  if (expected == actual) return true;
  std::optional<double> e, a;
  try {
    e = parse_float_cell(expected);
    a = parse_float_cell(actual);
  } catch (const std::exception &) {
    return false;
  }
  if (!e || !a) return false;
  if (std::isnan(*e) || std::isnan(*a)) return std::isnan(*e) && std::isnan(*a);
  return std::fabs(*e - *a) <= std::max(1e-12, 1e-6 * std::fabs(*e));
}

// Every row and cell of `actual` against the CSV text `expected` (header included).
inline void expect_table(const std::string &expected, const std::vector<std::string> &actual_header,
                         const std::vector<std::vector<std::string>> &actual_rows) {
  const csv_table want = parse_csv_table(expected, "expected");
  EXPECT_EQ(want.header, actual_header);
  ASSERT_EQ(want.rows.size(), actual_rows.size());
  for (size_t r = 0; r < want.rows.size(); ++r) {
    ASSERT_EQ(want.rows[r].size(), actual_rows[r].size()) << "row " << r << " of " << want.rows[r][0];
    for (size_t c = 0; c < want.rows[r].size(); ++c)
      EXPECT_TRUE(cell_matches(want.rows[r][c], actual_rows[r][c]))
          << want.rows[r][0] << " column " << want.header[c] << ": expected \"" << want.rows[r][c] << "\", got \""
          << actual_rows[r][c] << "\"";
  }
}

}  // namespace tprobe::precheck::vectors
