// monitor_record.cpp: see monitor_record.h.
#include "monitor_record.h"

#include <algorithm>

#include <fmt/format.h>

#include "errors.h"

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
  h.kind = record_kind::tensor;
  h.entry = std::string(monitor_record_entry);
  h.slot = prefix;
  h.step = rows.step;
  h.type = dtype::uint8;
  h.shape = {0};
  h.meta = nlohmann::ordered_json::object();
  h.meta["monitor"] = monitor_rows_to_json(rows);
  record r(std::move(h));
  r.set_payload({});  // no payload, as free_benchmark's rows: the same path through every stage
  return r;
}

record monitor_stack_record_make(record_header h, int64_t step, const std::vector<monitor_stack> &stacks) {
  h.kind = record_kind::tensor;
  h.entry = std::string(monitor_record_entry);
  h.slot = std::string(monitor_stack_info_slot);
  h.step = step;
  h.type = dtype::uint8;
  h.shape = {0};
  h.meta = nlohmann::ordered_json::object();
  h.meta["stack_info"] = monitor_stack_info_to_json(stacks);
  record r(std::move(h));
  r.set_payload({});
  return r;
}

monitor_record_view monitor_record_read(const record &r) {
  if (!monitor_record_is(r)) throw framing_error(fmt::format("{}: not a monitor record", r.describe()));
  const auto &h = r.header;
  if (h.slot == monitor_stack_info_slot) {
    monitor_record_view view;
    view.prefix = h.slot;
    view.rows.step = h.step;
    if (!h.meta.is_object() || !h.meta.contains("stack_info"))
      throw framing_error(fmt::format("{}: stack_info record without its stacks (meta stack_info)", r.describe()));
    try {
      view.stack_info = monitor_stack_info_from_json(h.meta["stack_info"], r.describe());
    } catch (const usage_error &e) {
      throw framing_error(e.what());
    }
    return view;
  }
  if (!known_prefix(h.slot))
    throw framing_error(fmt::format("{}: monitor record of unknown csv prefix \"{}\"", r.describe(), h.slot));
  if (!h.meta.is_object() || !h.meta.contains("monitor"))
    throw framing_error(fmt::format("{}: monitor record without its rows (meta monitor)", r.describe()));
  monitor_record_view view;
  view.prefix = h.slot;
  try {
    view.rows = monitor_rows_from_json(h.meta["monitor"], r.describe());
  } catch (const usage_error &e) {
    throw framing_error(e.what());
  }
  if (view.rows.step != h.step)
    throw framing_error(fmt::format("{}: monitor rows of step {}, the record's step {}", r.describe(), view.rows.step, h.step));
  return view;
}

}  // namespace tprobe
