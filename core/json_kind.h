// json_kind.h: what a JSON value is, in the words of every "expected X, got Y" message of the
// config, manifest and record parsers: "null", "a boolean", "a string", "an integer", "a float",
// "a list", "an object". One wording everywhere, so a user reads the same line from the launcher,
// the capture and a stage. Header-only and nlohmann only: the torch library compiles it too.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tprobe {

template <class Json>
[[nodiscard]] std::string json_kind(const Json &v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a float";
    case Json::value_t::array: return "a list";
    case Json::value_t::object: return "an object";
    default: return std::string("a ") + v.type_name();
  }
}

}  // namespace tprobe
