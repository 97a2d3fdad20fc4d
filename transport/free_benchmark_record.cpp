// free_benchmark_record.cpp: see free_benchmark_record.h.
#include "free_benchmark_record.h"

#include <fmt/format.h>

#include "errors.h"

namespace tprobe {

record free_benchmark_record_make(record_header h, const free_benchmark_row &row) {
  h.kind = record_kind::tensor;
  h.entry = std::string(free_benchmark_record_entry);
  h.slot = row.api_name;
  h.type = dtype::uint8;
  h.shape = {0};
  h.meta = nlohmann::ordered_json::object();
  h.meta["free_benchmark"] = free_benchmark_row_to_json(row);
  record r(std::move(h));
  r.set_payload({});  // an empty payload, as grad_probe's L0 records carry: the same path through every stage
  return r;
}

free_benchmark_row free_benchmark_record_read(const record &r) {
  if (!free_benchmark_record_is(r)) throw framing_error(fmt::format("{}: not a free_benchmark record", r.describe()));
  const auto &h = r.header;
  if (!h.meta.is_object() || !h.meta.contains("free_benchmark"))
    throw framing_error(fmt::format("{}: free_benchmark record without its row (meta free_benchmark)", r.describe()));
  free_benchmark_row row;
  try {
    row = free_benchmark_row_from_json(h.meta["free_benchmark"], r.describe());
  } catch (const usage_error &e) {
    throw framing_error(e.what());
  }
  if (row.api_name != h.slot)
    throw framing_error(fmt::format("{}: free_benchmark row names API \"{}\", the record's slot \"{}\"", r.describe(),
                                    row.api_name, h.slot));
  return row;
}

}  // namespace tprobe
