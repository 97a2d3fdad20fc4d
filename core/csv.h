// csv.h: one CSV line as Python's csv module writes it (delimiter ',', quotechar '"',
// QUOTE_MINIMAL): a field holding ',', '"', '\r' or '\n' is quoted and its quotes doubled. msprobe
// writes its csv files with csv.writer ("\r\n" lines: grad_probe, free_benchmark) or pandas'
// to_csv ("\n" lines: the monitor), which quote alike.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tprobe {

// Appends one field, quoted where Python quotes it.
void csv_field_append(std::string &out, std::string_view field);
// The fields joined by ',' and ended by `terminator`.
[[nodiscard]] std::string csv_line(const std::vector<std::string> &cells, std::string_view terminator = "\r\n");

}  // namespace tprobe
