// compare_kernel.h: the one-pass loop under compare_real_data() (compare_metrics.h). Internal.
//
// Reads both tensors once, in chunks that stay in L1, and accumulates everything msprobe's six
// metrics need: the float64 sums (N·B, ‖N‖², ‖B‖², ‖N−B‖²), max|N−B|, the relative error
// |(N'−B')/B'| in NumPy's promoted dtype with its count under 0.001 / 0.005, and whether inf/nan
// sit at different positions on the two sides (where they sit at the same positions both values
// count as 0, as msprobe's handle_inf_nan sets them).
//
// Thread-safe: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dtype.h"

namespace tprobe {

// The arithmetic NumPy uses for one side of the relative error: float16, float32 (bf16 is loaded as
// float32), float64, or "other" (integers, bool, complex) which is cast to float64.
enum class kernel_precision : uint8_t { f16 = 0, f32 = 1, f64 = 2, other = 3 };

// The precision class of a side for the relative error (NumPy's dtype promotion, §4.6): float16,
// float32 (and bf16, loaded as float32), float64; everything else is cast to float64.
kernel_precision kernel_precision_of(dtype t);

struct kernel_sums {
  double dot = 0, npu_sumsq = 0, bench_sumsq = 0, diff_sumsq = 0;
  double max_abs = 0;  // max |N − B| (float64)
  bool max_abs_nan = false;
  double max_rel = 0;  // max relative error, in the promoted dtype
  bool rel_nan = false;
  uint64_t below_thousandth = 0, below_five_thousandths = 0;
  bool nonfinite_mismatch = false;  // inf/nan masks differ: msprobe reports 'N/A'
};

// `count` elements of each side (same count, C order, little-endian storage of the given dtypes).
kernel_sums compare_kernel_run(dtype npu_type, const std::byte *npu, dtype bench_type, const std::byte *bench,
                               size_t count);

// The relative error of one element pair with NumPy's rules (no inf/nan handling): for 0-d tensors.
double relative_error_scalar(kernel_precision npu, kernel_precision bench, double n, double b);

// float → nearest float16 → float (round half to even), what NumPy stores after a float16 operation.
float round_half(float x);

}  // namespace tprobe
