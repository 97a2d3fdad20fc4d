// grad_probe.h: msprobe's task grad_probe (docs/msprobe-compat.md §3.8, §6.1): per-parameter gradient
// summaries and gradient directions, computed the way msprobe 8.3.3's GradStatCsv computes them,
// and written in its file formats. The capture (transport/grad_record.h) computes the numbers in
// the training process; tprobe-grad-probe writes them; gradsim (core/grad_sim.h) compares the
// directions of two runs.
//
// Files, under dump_path (R = the rank, 0 when not distributed; S = the optimizer step, from 0):
//   rank{R}/grad_summary_{S}.csv   UTF-8 with BOM, rows "\r\n"-terminated (Python's csv module),
//                                  quoted where Python quotes ("(-inf, -1]", "[2, 2]")
//   rank{R}/step{S}/{param}.npy    levels L1 and L2: bool array of the gradient's shape, grad > 0
//
// CSV header per level (msprobe's level_adp):
//   L0  param_name,MD5,max,min,norm,shape
//   L1  param_name,max,min,norm,shape
//   L2  param_name,(-inf, b0],(b0, b1],…,(bn, inf),=0,max,min,norm,shape
// where each bound is written as Python's str() of the config's value ("-1", "0.5", "1.0").
//
// Numbers (the gradient as the training holds it: main_grad if present, else grad):
//   buckets   fraction of elements x with b[i-1] < x <= b[i] (torch.bucketize, right=False), with
//             the bounds rounded to float32 first (msprobe builds them with torch.Tensor(bounds))
//             and bf16 upcast to float32; NaN falls into the last bucket, as torch.bucketize
//             puts it. 0 for every bucket when the gradient is empty.
//   =0        fraction of exact zeros (overlaps the bucket holding 0, so a row need not sum to 1)
//   max, min  torch.max/min in the gradient's dtype (any NaN gives NaN), written as repr(float)
//   norm      torch.norm in the gradient's dtype: accumulated in double here and rounded to the
//             dtype (float32, float16, bfloat16; float64 stays double). ATen's float32 CPU kernel
//             accumulates differently on large tensors, so the last digit may differ there.
//   MD5       "%08x" of zlib's CRC-32 of the gradient converted to float32, in C order (L0)
//   shape     Python's list repr: "[2, 2]", "[]" for 0-d
// An empty gradient has no max/min/norm (torch.max raises there; tprobe writes "nan").
//
// Directions travel packed: bit (i % 8) of byte i / 8 is element i's grad > 0 (NumPy's
// packbits(bitorder="little")), (numel + 7) / 8 bytes, the unused high bits of the last byte 0.
//
// Errors: usage_error for settings that do not parse (the config validated them already, so
// this means a malformed session record or a bad call).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "csv.h"
#include "dtype.h"

namespace tprobe {

struct grad_probe_settings {
  std::string level = "L1";                                  // L0 | L1 | L2
  std::vector<std::string> param_list;                       // exact names; empty = every parameter
  std::vector<double> bounds{-1, 0, 1};                      // rounded to float32, strictly ascending
  std::vector<std::string> bound_texts{"-1", "0", "1"};      // Python's str() of each bound as configured

  [[nodiscard]] bool md5() const { return level == "L0"; }
  [[nodiscard]] bool distribution() const { return level == "L2"; }
  [[nodiscard]] bool direction() const { return level == "L1" || level == "L2"; }
  // param_list: empty, or `name` is one of its elements.
  [[nodiscard]] bool wants(const std::string &name) const;
};

// From the config's section as capture_config::grad_probe holds it ({"grad_level", "param_list",
// "bounds"}; missing keys take msprobe's defaults). `where` names the source in messages.
[[nodiscard]] grad_probe_settings grad_probe_settings_from_json(const nlohmann::ordered_json &section,
                                                                const std::string &where);

// The numbers of one gradient.
struct grad_numbers {
  dtype type = dtype::float32;
  std::vector<int64_t> shape;
  uint64_t numel = 0;
  double max = 0, min = 0, norm = 0;  // NaN for an empty gradient
  std::optional<uint32_t> crc32;      // L0
  std::vector<uint64_t> buckets;      // L2: bounds.size() + 1 counts
  uint64_t zeros = 0;                 // L2

  bool operator==(const grad_numbers &) const = default;
};

// The numbers of a gradient in host memory, contiguous in C order, computed in place in one pass
// (two at L0 for the CRC). `sign_bits`, when not null, receives the packed directions
// ((numel + 7) / 8 bytes). Types: float64/32/16 and bfloat16 (the gradient types of PyTorch);
// anything else is a usage_error.
[[nodiscard]] grad_numbers grad_numbers_compute(const void *data, dtype type, std::span<const int64_t> shape,
                                                const grad_probe_settings &settings, uint8_t *sign_bits);

// Bytes of the packed directions of `numel` elements.
constexpr uint64_t grad_sign_bytes(uint64_t numel) { return (numel + 7) / 8; }

// The numbers as record meta ({"dtype", "shape", "numel", "max", "min", "norm", "crc32"?,
// "buckets"?, "zeros"?}) and back; `where` names the record in messages. from_meta throws
// usage_error for a missing or mistyped key, or bucket counts that do not fit `settings`.
[[nodiscard]] nlohmann::ordered_json grad_numbers_to_meta(const grad_numbers &n);
[[nodiscard]] grad_numbers grad_numbers_from_meta(const nlohmann::ordered_json &meta, const std::string &where);

// The CSV of one step: the header of grad_csv_header(), one row per parameter (in the order given).
[[nodiscard]] std::vector<std::string> grad_csv_header(const grad_probe_settings &settings);
[[nodiscard]] std::vector<std::string> grad_csv_row(const std::string &param, const grad_probe_settings &settings,
                                                    const grad_numbers &n);
// Python's list repr of a shape: "[2, 2]", "[7]", "[]".
[[nodiscard]] std::string grad_shape_text(std::span<const int64_t> shape);

// grad_summary lines: csv_line (csv.h), Python's csv.writer with "\r\n".
// The UTF-8 byte-order mark msprobe's write_csv (encoding "utf-8-sig") puts first.
inline constexpr std::string_view csv_utf8_bom = "\xEF\xBB\xBF";
// Splits one CSV line (no line terminator) as Python's csv.reader does for the dialect above.
[[nodiscard]] std::vector<std::string> csv_split(std::string_view line);

// Unpacks packed directions into one byte per element (0 or 1), the data of a bool .npy.
void grad_sign_unpack(const uint8_t *bits, uint64_t numel, uint8_t *out);

}  // namespace tprobe
