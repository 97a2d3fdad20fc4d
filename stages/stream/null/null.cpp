#include "null.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "errors.h"

namespace tprobe {

const stage_description &null_stage_description() {
  static const stage_description d{
      "null",
      "consume a stream and count it (records per kind, bytes): a test sink, optionally slow",
      true,
      false,
      {
          {"delay-us", "int", "0", "pause this many microseconds after a chosen record (a slow consumer)", 0, {}},
          {"delay-every", "int", "1", "pause after every N-th record of the --delay-kinds kinds", 1, {}},
          {"delay-kinds", "list", "", "record kinds that count for the pause (session, entry, tensor, value, "
                                      "flush, step_end); default: all", {}, {}},
          {"expect", "int", "-1", "exit 1 unless exactly this many data records arrive; -1 = no expectation", -1, {}},
      }};
  return d;
}

std::string null_result_text(const null_stage_result &r) {
  std::vector<std::string> parts;
  for (size_t k = 0; k < NULL_KIND_SLOTS; ++k)
    if (r.by_kind[k]) parts.push_back(fmt::format("{} {}", r.by_kind[k], record_kind_name(static_cast<record_kind>(k))));
  return fmt::format("{} records ({}), {:.1f} MB", r.records, fmt::join(parts, ", "), r.payload_bytes / 1e6);
}

null_stage_result null_run(stage_io &io, const null_stage_options &o) {
  if (o.delay_every == 0) throw usage_error("--delay-every must be at least 1");
  null_stage_result result;
  uint64_t chosen = 0;  // records of the delay kinds so far
  while (record *r = io.next()) {
    const auto &h = r->header;
    ++result.records;
    ++result.by_kind[static_cast<size_t>(h.kind)];
    result.payload_bytes += h.stored.value_or(0);
    if (o.delay_us == 0) continue;
    if (!o.delay_kinds.empty() && std::find(o.delay_kinds.begin(), o.delay_kinds.end(), h.kind) == o.delay_kinds.end())
      continue;
    if (++chosen % o.delay_every != 0) continue;
    // A deliberately slow consumer: while it sleeps its input fills up and producers block.
    std::this_thread::sleep_for(std::chrono::microseconds(o.delay_us));
    ++result.delays;
  }
  result.expectation_met = !o.expect || *o.expect == result.records;
  return result;
}

}  // namespace tprobe
