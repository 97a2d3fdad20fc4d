// monitor_record.cpp: see monitor_record.h.
#include "monitor_record.h"

#include <algorithm>

#include <fmt/format.h>

#include "errors.h"
#include "meta_record.h"

namespace tprobe {

namespace {
bool known_prefix(std::string_view prefix) {
  return std::ranges::find(monitor_csv_prefixes(), prefix) != monitor_csv_prefixes().end();
}
}  // namespace

record monitor_record_make(record_header h, const std::string &prefix, const monitor_rows &rows) {
  if (!known_prefix(prefix))
    throw usage_error(fmt::format("monitor rows: prefix \"{}\" is not one of {}", prefix,
                                  fmt::join(monitor_csv_prefixes(), ", ")));
  h.step = rows.step;
  return meta_record_make(std::move(h), monitor_record_entry, prefix, "monitor", monitor_rows_to_json(rows));
}

record monitor_stack_record_make(record_header h, int64_t step, const std::vector<monitor_stack> &stacks) {
  h.step = step;
  return meta_record_make(std::move(h), monitor_record_entry, std::string(monitor_stack_info_slot), "stack_info",
                          monitor_stack_info_to_json(stacks));
}

monitor_record_view monitor_record_read(const record &r) {
  if (!monitor_record_is(r)) throw framing_error(fmt::format("{}: not a monitor record", r.describe()));
  const auto &h = r.header;
  if (h.slot == monitor_stack_info_slot) {
    monitor_record_view view;
    view.prefix = h.slot;
    view.rows.step = h.step;
    const auto &stacks = meta_record_value(r, "stack_info", "its stacks");
    try {
      view.stack_info = monitor_stack_info_from_json(stacks, r.describe());
    } catch (const usage_error &e) {
      throw framing_error(e.what());
    }
    return view;
  }
  if (!known_prefix(h.slot))
    throw framing_error(fmt::format("{}: monitor record of unknown csv prefix \"{}\"", r.describe(), h.slot));
  const auto &rows = meta_record_value(r, "monitor", "its rows");
  monitor_record_view view;
  view.prefix = h.slot;
  try {
    view.rows = monitor_rows_from_json(rows, r.describe());
  } catch (const usage_error &e) {
    throw framing_error(e.what());
  }
  if (view.rows.step != h.step)
    throw framing_error(fmt::format("{}: monitor rows of step {}, the record's step {}", r.describe(), view.rows.step, h.step));
  return view;
}

}  // namespace tprobe
