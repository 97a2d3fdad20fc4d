// Built with -O3 -fopenmp-simd (see CMakeLists.txt): the float32 and float64 loops vectorise.
#include "compare_kernel.h"

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "tensor_stats.h"

namespace tprobe {

float round_half(float x) { return float16_to_float(float_to_float16(x)); }

namespace {

constexpr size_t chunk = 2048;

// The arithmetic of one precision: its value type, the rounding after each operation, NumPy's
// `+= np.finfo(float).eps` as it lands in that dtype, and the ratio thresholds cast to it.
template <int P>
struct prec;
template <>
struct prec<16> {
  using V = float;
  static V round(float x) { return round_half(x); }
  static constexpr float eps = 0.0f;  // 2^-52 underflows to 0 in float16
};
template <>
struct prec<32> {
  using V = float;
  static V round(float x) { return x; }
  static constexpr float eps = static_cast<float>(DBL_EPSILON);  // exactly 2^-52
};
template <>
struct prec<64> {
  using V = double;
  static V round(double x) { return x; }
  static constexpr double eps = DBL_EPSILON;
};

template <int P>
typename prec<P>::V threshold(double t) {
  if constexpr (P == 16) return round_half(static_cast<float>(t));
  else return static_cast<typename prec<P>::V>(t);
}

// |(n' − b') / b'| where b == 0 gets eps added on both sides, each in its own dtype, and the
// subtraction and division run in the promoted dtype PT (msprobe's get_relative_err).
template <int PN, int PB, int PT>
inline typename prec<PT>::V relative_one(typename prec<PN>::V n, typename prec<PB>::V b) {
  using VT = typename prec<PT>::V;
  const bool bz = b == 0;
  // n + 0 is n (up to the sign of a zero, which |…| below removes): no branch, so the loop vectorises.
  const typename prec<PN>::V n2 = prec<PN>::round(n + (bz ? prec<PN>::eps : typename prec<PN>::V(0)));
  const typename prec<PB>::V b2 = bz ? prec<PB>::eps : b;
  const VT x = prec<PT>::round(static_cast<VT>(n2) - static_cast<VT>(b2));
  return std::fabs(prec<PT>::round(x / static_cast<VT>(b2)));
}

// Two passes over a chunk that sits in L1, each with one element width, so that `omp simd`
// vectorises both (a single loop mixing float and double reductions does not vectorise with SSE2).
// Pass 1, in the precision of the relative error: the inf/nan masks, the values with matching
// inf/nan set to 0 (written to nz/bz), the relative error's max, NaN flag and counts.
// True if the chunk holds an inf or a nan on either side (rare: then the masks must be compared).
template <typename VN, typename VB>
bool any_nonfinite(const VN *__restrict np, const VB *__restrict bp, size_t count) {
  int32_t bad = 0;
#pragma omp simd reduction(| : bad)
  for (size_t i = 0; i < count; ++i)
    bad |= static_cast<int32_t>(!(std::fabs(np[i]) <= std::numeric_limits<VN>::max()) |
                                !(std::fabs(bp[i]) <= std::numeric_limits<VB>::max()));
  return bad != 0;
}

template <int PN, int PB, int PT, bool Finite>
void relative_pass(const typename prec<PN>::V *__restrict np, const typename prec<PB>::V *__restrict bp, size_t count,
                   typename prec<PN>::V *__restrict nz, typename prec<PB>::V *__restrict bz, kernel_sums &s) {
  using VN = typename prec<PN>::V;
  using VB = typename prec<PB>::V;
  using VT = typename prec<PT>::V;
  // Counters and flags of the element width, so the loop has one vector length.
  using count_t = std::conditional_t<sizeof(VT) == 4, int32_t, int64_t>;
  const VT t1 = threshold<PT>(0.001), t5 = threshold<PT>(0.005);
  VT max_rel = 0;
  count_t mismatch = 0, rel_nan = 0, lt1 = 0, lt5 = 0;
#pragma omp simd reduction(+ : lt1, lt5) reduction(max : max_rel) reduction(| : mismatch, rel_nan)
  for (size_t i = 0; i < count; ++i) {
    VN n = np[i];
    VB b = bp[i];
    if constexpr (!Finite) {
      const bool n_inf = std::fabs(n) == std::numeric_limits<VN>::infinity(), n_nan = n != n;
      const bool b_inf = std::fabs(b) == std::numeric_limits<VB>::infinity(), b_nan = b != b;
      mismatch |= static_cast<count_t>((n_inf != b_inf) | (n_nan != b_nan));
      const bool zero = n_inf | n_nan | b_inf | b_nan;
      n = zero ? VN(0) : n;
      b = zero ? VB(0) : b;
      nz[i] = n;
      bz[i] = b;
    }
    const VT q = relative_one<PN, PB, PT>(n, b);
    rel_nan |= static_cast<count_t>(q != q);
    max_rel = q > max_rel ? q : max_rel;
    lt1 += q < t1 ? 1 : 0;
    lt5 += q < t5 ? 1 : 0;
  }
  s.max_rel = std::max(s.max_rel, static_cast<double>(max_rel));
  s.rel_nan |= rel_nan != 0;
  s.nonfinite_mismatch |= mismatch != 0;
  s.below_thousandth += static_cast<uint64_t>(lt1), s.below_five_thousandths += static_cast<uint64_t>(lt5);
}

// Pass 2, in float64: N·B, ‖N‖², ‖B‖², ‖N−B‖², max|N−B|. (float inputs are widened into double
// buffers first: a loop reading float and reducing double does not vectorise with SSE2.)
void float64_pass(const double *__restrict nz, const double *__restrict bz, size_t count, kernel_sums &s) {
  double dot = 0, nn = 0, bb = 0, dd = 0, max_abs = 0;
  int64_t abs_nan = 0;
#pragma omp simd reduction(+ : dot, nn, bb, dd) reduction(max : max_abs) reduction(| : abs_nan)
  for (size_t i = 0; i < count; ++i) {
    const double nd = nz[i], bd = bz[i], d = nd - bd, ad = std::fabs(d);
    dot += nd * bd;
    nn += nd * nd;
    bb += bd * bd;
    dd += d * d;
    abs_nan |= static_cast<int64_t>(ad != ad);
    max_abs = ad > max_abs ? ad : max_abs;
  }
  s.dot += dot, s.npu_sumsq += nn, s.bench_sumsq += bb, s.diff_sumsq += dd;
  s.max_abs = std::max(s.max_abs, max_abs);
  s.max_abs_nan |= abs_nan != 0;
}

// Lookup table for float16 → float: one load per element beats bit twiddling without F16C.
const std::array<float, 65536> &half_table() {
  static const auto table = [] {
    std::array<float, 65536> t{};
    for (uint32_t i = 0; i < 65536; ++i) t[i] = float16_to_float(static_cast<uint16_t>(i));
    return t;
  }();
  return table;
}


template <typename T>
T load(const std::byte *p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

// Elements [first, first + n) of one side as the kernel reads them: a pointer into the data when
// it is already float32/float64 and aligned, else converted into `buffer`.
template <typename V>
const V *side_values(dtype t, const std::byte *data, size_t first, size_t n, V *buffer) {
  const std::byte *p = data + first * dtype_size(t);
  if constexpr (std::is_same_v<V, float>) {
    if (t == dtype::float32) {
      if (reinterpret_cast<uintptr_t>(p) % alignof(float) == 0) return reinterpret_cast<const float *>(p);
      std::memcpy(buffer, p, n * sizeof(float));
      return buffer;
    }
    if (t == dtype::float16) {
      const auto &table = half_table();
      for (size_t i = 0; i < n; ++i) buffer[i] = table[load<uint16_t>(p, i)];
      return buffer;
    }
    if (t == dtype::bfloat16) {
      for (size_t i = 0; i < n; ++i) {
        const uint32_t bits = static_cast<uint32_t>(load<uint16_t>(p, i)) << 16;
        std::memcpy(&buffer[i], &bits, sizeof(float));
      }
      return buffer;
    }
  } else {
    switch (t) {
      case dtype::float64:
        if (reinterpret_cast<uintptr_t>(p) % alignof(double) == 0) return reinterpret_cast<const double *>(p);
        std::memcpy(buffer, p, n * sizeof(double));
        return buffer;
      case dtype::float32:
        for (size_t i = 0; i < n; ++i) buffer[i] = load<float>(p, i);
        return buffer;
      case dtype::float16: {
        const auto &table = half_table();
        for (size_t i = 0; i < n; ++i) buffer[i] = table[load<uint16_t>(p, i)];
        return buffer;
      }
      case dtype::bfloat16:
        for (size_t i = 0; i < n; ++i) buffer[i] = bfloat16_to_float(load<uint16_t>(p, i));
        return buffer;
      case dtype::int8: for (size_t i = 0; i < n; ++i) buffer[i] = load<int8_t>(p, i); return buffer;
      case dtype::int16: for (size_t i = 0; i < n; ++i) buffer[i] = load<int16_t>(p, i); return buffer;
      case dtype::int32: for (size_t i = 0; i < n; ++i) buffer[i] = load<int32_t>(p, i); return buffer;
      case dtype::int64:
        for (size_t i = 0; i < n; ++i) buffer[i] = static_cast<double>(load<int64_t>(p, i));
        return buffer;
      case dtype::uint8: for (size_t i = 0; i < n; ++i) buffer[i] = load<uint8_t>(p, i); return buffer;
      case dtype::boolean:
        for (size_t i = 0; i < n; ++i) buffer[i] = load<uint8_t>(p, i) != 0 ? 1.0 : 0.0;
        return buffer;
      case dtype::complex64:  // real part: NumPy's astype(float)
        for (size_t i = 0; i < n; ++i) buffer[i] = load<float>(p, 2 * i);
        return buffer;
      case dtype::complex128:
        for (size_t i = 0; i < n; ++i) buffer[i] = load<double>(p, 2 * i);
        return buffer;
    }
  }
  for (size_t i = 0; i < n; ++i) buffer[i] = std::numeric_limits<V>::quiet_NaN();
  return buffer;
}

template <int PN, int PB, int PT>
kernel_sums run(dtype nt, const std::byte *n, dtype bt, const std::byte *b, size_t count) {
  using VN = typename prec<PN>::V;
  using VB = typename prec<PB>::V;
  alignas(64) VN nbuf[chunk], nzero[chunk];
  alignas(64) VB bbuf[chunk], bzero[chunk];
  alignas(64) double nwide[chunk], bwide[chunk];
  const auto widen = [&](const auto *v, double *wide, size_t len) -> const double * {
    if constexpr (std::is_same_v<std::remove_cv_t<std::remove_reference_t<decltype(*v)>>, double>) {
      return v;
    } else {
      for (size_t i = 0; i < len; ++i) wide[i] = v[i];
      return wide;
    }
  };
  kernel_sums s;
  for (size_t first = 0; first < count; first += chunk) {
    const size_t len = std::min(chunk, count - first);
    const VN *nv = side_values<VN>(nt, n, first, len, nbuf);
    const VB *bv = side_values<VB>(bt, b, first, len, bbuf);
    // Most chunks are finite: skip the inf/nan masks and the zeroed copies there.
    if (any_nonfinite(nv, bv, len)) {
      relative_pass<PN, PB, PT, false>(nv, bv, len, nzero, bzero, s);
      float64_pass(widen(nzero, nwide, len), widen(bzero, bwide, len), len, s);
    } else {
      relative_pass<PN, PB, PT, true>(nv, bv, len, nzero, bzero, s);
      float64_pass(widen(nv, nwide, len), widen(bv, bwide, len), len, s);
    }
  }
  return s;
}

int bits_of(kernel_precision p) { return p == kernel_precision::f16 ? 16 : p == kernel_precision::f32 ? 32 : 64; }

}  // namespace

kernel_precision kernel_precision_of(dtype t) {
  switch (t) {
    case dtype::float16: return kernel_precision::f16;
    case dtype::float32:
    case dtype::bfloat16: return kernel_precision::f32;
    case dtype::float64: return kernel_precision::f64;
    default: return kernel_precision::other;
  }
}

kernel_sums compare_kernel_run(dtype npu_type, const std::byte *npu, dtype bench_type, const std::byte *bench,
                               size_t count) {
  kernel_precision pn = kernel_precision_of(npu_type), pb = kernel_precision_of(bench_type);
  if (pn == kernel_precision::other || pb == kernel_precision::other) {
    // msprobe casts both sides to float64 when the bench side is not a float type.
    return run<64, 64, 64>(npu_type, npu, bench_type, bench, count);
  }
  const int n_bits = bits_of(pn), b_bits = bits_of(pb);
  switch (n_bits * 100 + b_bits) {
    case 1616: return run<16, 16, 16>(npu_type, npu, bench_type, bench, count);
    case 1632: return run<16, 32, 32>(npu_type, npu, bench_type, bench, count);
    case 1664: return run<16, 64, 64>(npu_type, npu, bench_type, bench, count);
    case 3216: return run<32, 16, 32>(npu_type, npu, bench_type, bench, count);
    case 3232: return run<32, 32, 32>(npu_type, npu, bench_type, bench, count);
    case 3264: return run<32, 64, 64>(npu_type, npu, bench_type, bench, count);
    case 6416: return run<64, 16, 64>(npu_type, npu, bench_type, bench, count);
    case 6432: return run<64, 32, 64>(npu_type, npu, bench_type, bench, count);
    default: return run<64, 64, 64>(npu_type, npu, bench_type, bench, count);
  }
}

double relative_error_scalar(kernel_precision pn, kernel_precision pb, double n, double b) {
  if (pn == kernel_precision::other || pb == kernel_precision::other) return relative_one<64, 64, 64>(n, b);
  const auto f = [](double v) { return static_cast<float>(v); };
  switch (bits_of(pn) * 100 + bits_of(pb)) {
    case 1616: return relative_one<16, 16, 16>(f(n), f(b));
    case 1632: return relative_one<16, 32, 32>(f(n), f(b));
    case 1664: return relative_one<16, 64, 64>(f(n), b);
    case 3216: return relative_one<32, 16, 32>(f(n), f(b));
    case 3232: return relative_one<32, 32, 32>(f(n), f(b));
    case 3264: return relative_one<32, 64, 64>(f(n), b);
    case 6416: return relative_one<64, 16, 64>(n, f(b));
    case 6432: return relative_one<64, 32, 64>(n, f(b));
    default: return relative_one<64, 64, 64>(n, b);
  }
}

}  // namespace tprobe
