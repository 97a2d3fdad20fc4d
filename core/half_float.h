// half_float.h: float16 and bfloat16 to and from float32, bit exact, header-only so that every
// library that rounds as msprobe does (core, and the PyTorch capture, which links no core archive)
// shares one definition. Thread-safe: pure functions.
#pragma once

#include <bit>
#include <cstdint>

namespace tprobe {

// Branch-free fp16 → fp32. The conditions are all-ones masks rather than `?:`, which g++ turns
// into control flow that blocks vectorisation. Subnormals are rebuilt by subtracting two normal
// floats, so the result stays right when the FPU flushes denormals.
inline float float16_to_float(uint16_t h) {
  const uint32_t em = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exp = em & 0x0f800000u;
  const uint32_t inf_nan = 0u - static_cast<uint32_t>(exp == 0x0f800000u);
  const uint32_t subnormal = 0u - static_cast<uint32_t>(exp == 0);
  // Rebias 15 → 127 (Inf/NaN: 31 → 255); zero/subnormal: 2^-14 · (1 + m), then minus 2^-14.
  const uint32_t bits = em + (112u << 23) + (inf_nan & (112u << 23)) + (subnormal & (1u << 23));
  const float f = std::bit_cast<float>(bits) - std::bit_cast<float>(subnormal & 0x38800000u);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

inline float bfloat16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Round to nearest even, NaN stays NaN (quiet).
inline uint16_t float_to_bfloat16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet
  // Round to nearest even; a carry out of the mantissa correctly bumps the exponent (to Inf).
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Round to nearest even, overflow → ±Inf.
inline uint16_t float_to_float16(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));  // NaN
  // 65520 is halfway between 65504 (odd mantissa) and 65536: ties to even go to Inf.
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (x >= 0x38800000u) {  // normal half: rebias the exponent, round to nearest even at bit 13
    const uint32_t r = x - (112u << 23);
    return static_cast<uint16_t>(sign | ((r + 0x0fffu + ((r >> 13) & 1u)) >> 13));
  }
  // Subnormal half (or zero): adding 0.5 makes the FPU round |value| to a multiple of 2^-24
  // (nearest even); the low mantissa bits of the sum are then the half's mantissa.
  const float sum = std::bit_cast<float>(x) + 0.5f;
  return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(sum) - 0x3f000000u));
}

}  // namespace tprobe
