// grad_record.h: the record that carries one gradient of task grad_probe, from the capture
// (tprobe_capture_grad*, tprobe_capture.h) to tprobe-grad-probe and tprobe-gradsim-live.
//
// A tensor record (transport/record.h) with
//   entry   "grad_probe"
//   slot    the parameter's name (model.named_parameters())
//   step    the optimizer step; rank the producer's
//   dtype   uint8, shape [(numel + 7) / 8], payload = the packed directions (core/grad_probe.h;
//           shape [0] and an empty payload at level L0, which has none)
//   device  the gradient's
//   meta    {"grad_probe": grad_numbers_to_meta(...)}: dtype, shape and numel of the gradient,
//           max, min, norm, crc32 (L0), buckets and zeros (L2)
// So any stage can pass it on, tap it or record it to a file like any tensor record; only the
// grad_probe stages read its meaning.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grad_probe.h"
#include "record.h"

namespace tprobe {

inline constexpr std::string_view grad_record_entry = "grad_probe";

// Fills `h` (kind, entry, slot, dtype, shape, meta) and attaches `bits` as the payload.
[[nodiscard]] record grad_record_make(record_header h, const std::string &param, const grad_numbers &n,
                                      std::vector<std::byte> bits);

[[nodiscard]] inline bool grad_record_is(const record &r) {
  return r.header.kind == record_kind::tensor && r.header.entry == grad_record_entry;
}

struct grad_record_view {
  std::string param;
  grad_numbers numbers;
  std::span<const std::byte> bits;  // empty at L0; else grad_sign_bytes(numbers.numel) bytes
};

// Reads a record made by grad_record_make. Throws framing_error when it is not one or its meta
// or payload do not fit (the message describes the record).
[[nodiscard]] grad_record_view grad_record_read(const record &r);

}  // namespace tprobe
