// record_stacks.cpp: call stacks by reference (record.h section 5): the process's book of the
// lines behind stack ids, an entry record's lines and id, and stack_link, one link's side of the
// rule. Apart because it is state of the process, not a codec: the header codec never reads it.
#include "record.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include <fmt/format.h>

namespace tprobe {

// ---- call stacks by reference (record.h section 5) ----

namespace {

struct stack_book {
  std::mutex mutex;
  // Never erased: record_stack_lines hands out pointers into it. Distinct stacks are few.
  std::map<std::pair<std::string, uint64_t>, std::unique_ptr<const nlohmann::ordered_json>> lines;
};

stack_book &the_stack_book() {
  static auto *book = new stack_book;  // never destroyed: stages read it until they exit
  return *book;
}

const nlohmann::ordered_json *stack_book_find(const std::string &run, uint64_t id) {
  stack_book &b = the_stack_book();
  std::lock_guard lock(b.mutex);
  auto it = b.lines.find({run, id});
  return it == b.lines.end() ? nullptr : it->second.get();
}

}  // namespace

void stack_book_define(const std::string &run, uint64_t id, nlohmann::ordered_json lines) {
  stack_book &b = the_stack_book();
  std::lock_guard lock(b.mutex);
  auto &slot = b.lines[{run, id}];
  if (!slot) slot = std::make_unique<const nlohmann::ordered_json>(std::move(lines));
}

std::optional<uint64_t> record_stack_id(const record_header &h) {
  if (h.kind != record_kind::entry || !h.meta.is_object()) return std::nullopt;
  auto it = h.meta.find("stack_id");
  if (it == h.meta.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<uint64_t>();
}

const nlohmann::ordered_json *record_stack_lines(const record_header &h) {
  if (!h.meta.is_object()) return nullptr;
  if (auto it = h.meta.find("stack"); it != h.meta.end() && it->is_array()) return &*it;
  const auto id = record_stack_id(h);
  return id ? stack_book_find(h.run, *id) : nullptr;
}

std::optional<record_header> stack_link::adapt(const record_header &h, bool consumer_takes_refs) {
  const auto id = record_stack_id(h);
  if (!id) return std::nullopt;
  const auto stack = h.meta.find("stack");
  const bool has_lines = stack != h.meta.end() && stack->is_array();
  bool defined = false;
  if (consumer_takes_refs) {
    auto key = std::make_pair(h.run, *id);
    auto at = std::lower_bound(defined_.begin(), defined_.end(), key);
    defined = at != defined_.end() && *at == key;
    if (!defined) defined_.insert(at, std::move(key));
  }
  if (defined) {
    if (!has_lines) return std::nullopt;
    record_header out = h;
    out.meta.erase("stack");
    return out;
  }
  if (has_lines) return std::nullopt;
  const nlohmann::ordered_json *lines = stack_book_find(h.run, *id);
  if (!lines)
    throw framing_error(fmt::format("entry record {}: stack_id {} of run \"{}\" was never defined on this stream",
                                    h.entry, *id, h.run));
  record_header out = h;
  out.meta["stack"] = *lines;
  return out;
}

bool stack_link::defined(std::string_view run, uint64_t id) const {
  const auto at = std::lower_bound(defined_.begin(), defined_.end(), std::make_pair(run, id),
                                   [](const std::pair<std::string, uint64_t> &a, const std::pair<std::string_view, uint64_t> &b) {
                                     return std::string_view(a.first) < b.first || (a.first == b.first && a.second < b.second);
                                   });
  return at != defined_.end() && at->first == run && at->second == id;
}
}  // namespace tprobe
