// meta_record.h: a tensor record that carries only meta, the shape of the task records whose
// numbers the capture already computed (free_benchmark's rows, the monitor's rows and stacks): kind
// tensor, the task's entry, dtype uint8, shape [0], an empty payload (so it takes the same path
// through every stage as a tensor record), and meta {key: value}.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "errors.h"
#include "record.h"

namespace tprobe {

[[nodiscard]] inline record meta_record_make(record_header h, std::string_view entry, std::string slot,
                                             std::string_view key, nlohmann::ordered_json value) {
  h.kind = record_kind::tensor;
  h.entry = std::string(entry);
  h.slot = std::move(slot);
  h.type = dtype::uint8;
  h.shape = {0};
  h.meta = nlohmann::ordered_json::object();
  h.meta[std::string(key)] = std::move(value);
  record r(std::move(h));
  r.set_payload({});
  return r;
}

// The meta value a meta record carries under `key`; framing_error naming the record and `what`
// ("its row", "its rows") when it has none.
[[nodiscard]] inline const nlohmann::ordered_json &meta_record_value(const record &r, std::string_view key,
                                                                    std::string_view what) {
  const auto &meta = r.header.meta;
  if (!meta.is_object() || !meta.contains(key))
    throw framing_error(fmt::format("{}: {} record without {} (meta {})", r.describe(), r.header.entry, what, key));
  return meta[std::string(key)];
}

}  // namespace tprobe
