// free_benchmark_record.cpp: see free_benchmark_record.h.
#include "free_benchmark_record.h"

#include <fmt/format.h>

#include "errors.h"
#include "meta_record.h"

namespace tprobe {

record free_benchmark_record_make(record_header h, const free_benchmark_row &row) {
  return meta_record_make(std::move(h), free_benchmark_record_entry, row.api_name, "free_benchmark",
                          free_benchmark_row_to_json(row));
}

free_benchmark_row free_benchmark_record_read(const record &r) {
  if (!free_benchmark_record_is(r)) throw framing_error(fmt::format("{}: not a free_benchmark record", r.describe()));
  const auto &value = meta_record_value(r, "free_benchmark", "its row");
  free_benchmark_row row;
  try {
    row = free_benchmark_row_from_json(value, r.describe());
  } catch (const usage_error &e) {
    throw framing_error(e.what());
  }
  if (row.api_name != r.header.slot)
    throw framing_error(fmt::format("{}: free_benchmark row names API \"{}\", the record's slot \"{}\"", r.describe(),
                                    row.api_name, r.header.slot));
  return row;
}

}  // namespace tprobe
