// The capture session's stack interning (session.h "known_stack"): a stack's lines become an id,
// and the stack book (transport/record.h section 5) learns them once, so that entries carry the
// id and the links send the lines once per id. Apart: it is the only state keyed by stack content.
#include <functional>
#include <string_view>

#include "session.h"

using namespace tprobe;

uint64_t tprobe_session::stack_id_of(const char *const *stack, size_t stack_len) {
  auto same = [&](const std::vector<std::string> &lines) {
    if (lines.size() != stack_len) return false;
    for (size_t i = 0; i < stack_len; ++i)
      if (lines[i] != (stack[i] ? stack[i] : "")) return false;
    return true;
  };
  if (const auto hint = stacks_by_array.find(stack); hint != stacks_by_array.end() && same(hint->second->lines))
    return hint->second->id;
  if (stacks_by_array.size() >= stacks_by_array_max) stacks_by_array.clear();
  size_t hash = stack_len;
  for (size_t i = 0; i < stack_len; ++i)
    hash = hash * 1000003u ^ std::hash<std::string_view>{}(stack[i] ? stack[i] : "");
  for (auto [it, end] = stacks_known.equal_range(hash); it != end; ++it)
    if (same(it->second.lines)) {
      stacks_by_array[stack] = &it->second;
      return it->second.id;
    }
  known_stack k{{}, stacks_known.size() + 1};
  auto lines = nlohmann::ordered_json::array();
  for (size_t i = 0; i < stack_len; ++i) {
    k.lines.emplace_back(stack[i] ? stack[i] : "");
    lines.push_back(k.lines.back());
  }
  stack_book_define(run_id, k.id, std::move(lines));
  const uint64_t id = k.id;
  stacks_by_array[stack] = &stacks_known.emplace(hash, std::move(k))->second;  // nodes never move
  return id;
}
