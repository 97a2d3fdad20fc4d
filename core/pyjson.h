// pyjson.h: JSON text byte-compatible with Python's `json` module (docs/msprobe-compat.md §2.4, §1.3).
//
// msprobe writes dump.json, stack.json and construct.json with `json.dump(obj, f, indent=1)`,
// i.e. ensure_ascii=True, allow_nan=True, separators "," and ": ", floats as repr(float).
// pyjson_dump() produces exactly those bytes for an nlohmann::ordered_json document, and
// pyjson_parse() reads them back, including the NaN / Infinity / -Infinity tokens that Python
// writes for non-finite floats.
//
// Strings are UTF-8 std::strings. Two extensions keep Python's lone surrogates ("\ud800"):
// the parser stores them as 3-byte WTF-8 sequences and the writer escapes those sequences back
// to "\udXXX". Any other invalid UTF-8 byte in a string given to the writer is written as
// "\ufffd" (the writer never throws for string content).
//
// Thread-safe: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tprobe {

// Python's json.dumps(v, indent=indent) for indent >= 0 (indent=1 is what msprobe writes);
// indent < 0 gives Python's json.dumps(v) with no indent (one line, separators ", " and ": ").
// Floats are written as repr(float), NaN as NaN, ±inf as Infinity / -Infinity, integers
// (int64 or uint64) as integers, non-ASCII as \uXXXX (surrogate pairs above U+FFFF).
// Throws usage_error for values JSON has no text for (binary, discarded).
[[nodiscard]] std::string pyjson_dump(const nlohmann::ordered_json &v, int indent = 1);
// Same, appended to `out` (no clearing; reuse the buffer to avoid reallocations), as written
// where the value sits `level` levels deep in a document: its lines after the first indented for
// that depth: the text pyjson_dump(v) writes, with every line after the first moved right by
// `level` spaces (what a renderer of a document's leaves as text, such as the writer's
// dump_document, copies whole into the document).
void pyjson_dump_append(std::string &out, const nlohmann::ordered_json &v, int indent = 1, int level = 0);

// Python's json.dumps(s) for one string, appended to `out`: for renderers of text without a tree
// (tensor_leaf_text_append, the writer's dump_document).
void pyjson_string_append(std::string &out, std::string_view s);

// The pieces of json.dumps's layout, for a renderer that walks something other than a JSON tree
// (record_meta_pyjson_append renders a record's meta from its msgpack bytes) and must write what
// pyjson_dump_append writes for the tree it stands for. A container of n > 0 items is its opening
// bracket, pyjson_item_begin before each item (an object's item is its key, ": " and its value),
// then pyjson_container_end; an empty one is "[]" or "{}". `level` is the container's own depth.
void pyjson_item_begin(std::string &out, int indent, int level, bool first);
void pyjson_container_end(std::string &out, char closing_bracket, int indent, int level);
// Numbers as pyjson_dump writes them: integers in decimal; reals as repr(float), or NaN,
// Infinity, -Infinity.
void pyjson_int_append(std::string &out, int64_t v);
void pyjson_uint_append(std::string &out, uint64_t v);
void pyjson_real_append(std::string &out, double d);
// The same real written at `out`, which has room for py_float_repr_max bytes; returns its end
// (bytes past it may have been written too).
char *pyjson_real_write(char *out, double d);

// Python's repr(float): shortest round-trip digits, fixed notation when the decimal exponent is
// in [-4, 16), exponent notation otherwise ("1e-05", "0.0001", "1e+16", "1000000000000000.0",
// "2.0", "-0.0", "5e-324"); "nan", "inf", "-inf" for non-finite values, as repr() does.
// (pyjson_dump writes the JSON tokens NaN / Infinity / -Infinity instead.)
[[nodiscard]] std::string py_float_repr(double d);
void py_float_repr_append(std::string &out, double d);
// The same text written at `out`, which has room for py_float_repr_max bytes (bytes past the
// returned end may have been written too); returns its end
// (for a renderer that writes a whole leaf through a pointer: tensor_leaf_text_append).
constexpr size_t py_float_repr_max = 32;
char *py_float_repr_write(char *out, double d);

// Parse JSON text as Python's json.loads() does: standard JSON plus the tokens NaN, Infinity and
// -Infinity wherever a number may appear; object key order is kept; a repeated key keeps its
// first position and its last value (like a Python dict). Non-negative integers become
// number_unsigned, negative ones number_integer, integers outside 64 bits and all numbers with
// a fraction or exponent become number_float (out-of-range floats become ±inf or ±0, as
// float() does). A leading UTF-8 byte-order mark is skipped. Linear time; nesting is limited
// to 2000 levels (Python itself stops near 1000).
// Errors: usage_error "SOURCE: invalid JSON at line L column C: REASON" (1-based, columns count
// characters).
[[nodiscard]] nlohmann::ordered_json pyjson_parse(std::string_view text, const std::string &source);

// Read and parse a whole file; `source` in error messages is the path.
// Throws system_error "unable to open|read PATH: ..." and usage_error as pyjson_parse.
[[nodiscard]] nlohmann::ordered_json pyjson_load_file(const std::string &path);

}  // namespace tprobe
