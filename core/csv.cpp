// csv.cpp: see csv.h.
#include "csv.h"

namespace tprobe {

void csv_field_append(std::string &out, std::string_view field) {
  if (field.find_first_of(",\"\r\n") == std::string_view::npos) {
    out += field;
    return;
  }
  out += '"';
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
}

std::string csv_line(const std::vector<std::string> &cells, std::string_view terminator) {
  std::string out;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i) out += ',';
    csv_field_append(out, cells[i]);
  }
  out += terminator;
  return out;
}

}  // namespace tprobe
