// grad_record.cpp: see grad_record.h.
#include "grad_record.h"

#include <fmt/format.h>

#include "errors.h"

namespace tprobe {

record grad_record_make(record_header h, const std::string &param, const grad_numbers &n,
                        std::vector<std::byte> bits) {
  h.kind = record_kind::tensor;
  h.entry = std::string(grad_record_entry);
  h.slot = param;
  h.type = dtype::uint8;
  h.shape = {static_cast<int64_t>(bits.size())};
  h.meta = nlohmann::ordered_json::object();
  h.meta["grad_probe"] = grad_numbers_to_meta(n);
  record r(std::move(h));
  r.set_payload(std::move(bits));
  return r;
}

grad_record_view grad_record_read(const record &r) {
  if (!grad_record_is(r)) throw framing_error(fmt::format("{}: not a grad_probe record", r.describe()));
  const auto &h = r.header;
  if (h.slot.empty()) throw framing_error(fmt::format("{}: grad_probe record names no parameter", r.describe()));
  if (!h.meta.is_object() || !h.meta.contains("grad_probe"))
    throw framing_error(fmt::format("{}: grad_probe record without its numbers (meta grad_probe)", r.describe()));
  grad_record_view v;
  v.param = h.slot;
  try {
    v.numbers = grad_numbers_from_meta(h.meta["grad_probe"], r.describe());
  } catch (const usage_error &e) {
    throw framing_error(e.what());
  }
  if (r.has_payload()) v.bits = r.payload_bytes();
  if (!v.bits.empty() && v.bits.size() != grad_sign_bytes(v.numbers.numel))
    throw framing_error(fmt::format("{}: {} bytes of directions for {} elements (expected {})", r.describe(),
                                    v.bits.size(), v.numbers.numel, grad_sign_bytes(v.numbers.numel)));
  return v;
}

}  // namespace tprobe
