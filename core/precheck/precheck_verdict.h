// precheck_verdict.h: tprobe's verdict on a pre-checked API, from msprobe's two stages on one host.
//
// msprobe's stage-1 Status (precheck_standard.h) compares the device result with the bench by fixed
// ratios of elements (双百/双千/双万, cosine > 0.99). Its authors call that verdict "reference only":
// the rounding of a low-precision dtype alone fails it (a bfloat16 matmul whose outputs near zero
// lose more than 1% to rounding is an "error"), and the final verdict is stage 2
// (api_precision_compare.h), the ratio of the device's error to a trusted device's.
//
// With no second device, tprobe takes as the trusted result the bench correctly rounded to the
// device's dtype: what a perfect kernel of that dtype would return. A row stage 1 grades warning or
// error is judged again by stage 2 with that rounded result in the trusted device's place: pass
// when the device is within msprobe's stage-2 thresholds of correct rounding (its error is the
// dtype's own), error when it is worse; the message says which. Rows stage 1 passes are not
// touched; rows stage 2 cannot judge (float64, integers, SKIP) keep stage 1's verdict. So an API
// named in error has a kernel measurably worse than its dtype's rounding, and a bfloat16 run of
// correct kernels passes.
#pragma once

#include "precheck_standard.h"

namespace tprobe::precheck {

// `value` rounded to `dtype` ("torch.float16", "torch.bfloat16", "torch.float32"; round to nearest
// even, through float32 for the 16-bit dtypes); other dtypes unchanged.
[[nodiscard]] double round_to_dtype(double value, std::string_view dtype);

// Applies the rule above to `judgement` (the rows judge_api made of `replay`) and recomputes its
// result row's statuses.
void judge_against_rounding(api_judgement &judgement, const api_replay &replay, dialect d);

}  // namespace tprobe::precheck
