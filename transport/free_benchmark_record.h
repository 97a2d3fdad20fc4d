// free_benchmark_record.h: the record that carries one row of task free_benchmark (an API call
// whose perturbed output parted from the original, core/free_benchmark.h), from the capture
// (tprobe_capture_fuzz_row, tprobe_capture.h) to tprobe-free-benchmark.
//
// A tensor record (transport/record.h) with
//   entry   "free_benchmark"
//   slot    the API's name ("Torch.matmul.0.forward")
//   step    the producer's step; rank the producer's
//   dtype   uint8, shape [0], no payload
//   meta    {"free_benchmark": free_benchmark_row_to_json(row)}
// So any stage can pass it on, tap it or record it to a file like any tensor record; only
// tprobe-free-benchmark (and the report) read its meaning.
#pragma once

#include <string_view>

#include "free_benchmark.h"
#include "record.h"

namespace tprobe {

inline constexpr std::string_view free_benchmark_record_entry = "free_benchmark";

// Fills `h` (kind, entry, slot, dtype, shape, meta) from the row.
[[nodiscard]] record free_benchmark_record_make(record_header h, const free_benchmark_row &row);

[[nodiscard]] inline bool free_benchmark_record_is(const record &r) {
  return r.header.kind == record_kind::tensor && r.header.entry == free_benchmark_record_entry;
}

// Reads a record made by free_benchmark_record_make. Throws framing_error when it is not one or
// its meta does not hold a row (the message describes the record).
[[nodiscard]] free_benchmark_row free_benchmark_record_read(const record &r);

}  // namespace tprobe
